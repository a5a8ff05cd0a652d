# One target per thing a person does. Everything runs from the project's own .venv.
PY ?= .venv/bin/python
VENV_STAMP := .venv/.installed

.PHONY: demo test lint typecheck unit integration bench bench-nri soak image clean

# The machine's packages (runc, busybox-static, podman) and .venv: the same install step CI runs.
$(VENV_STAMP): pyproject.toml .ci/run
	bash .ci/run --install-only
	touch $@

## demo: start a real busybox container with runc, our hook injected, and show what it did
demo: $(VENV_STAMP)
	$(PY) packaging/demo/demo.py

## test: lint, type check, then the whole suite (integration tests need root, runc, podman)
test: lint typecheck $(VENV_STAMP)
	$(PY) -m pytest -q

lint: $(VENV_STAMP)
	$(PY) -m ruff check hook tests
	$(PY) -m ruff format --check hook tests

typecheck: $(VENV_STAMP)
	$(PY) -m mypy

unit: $(VENV_STAMP)
	$(PY) -m pytest -q -m "not integration"

integration: $(VENV_STAMP)
	$(PY) -m pytest -q -m integration

## bench: every performance figure against its target (the installed hook, shim and producer commands), with
## the interpreter a node runs them with: /usr/bin/python3 (when there); BENCH_PYTHON=tree: the tree's own
## (install --python tree, the DaemonSet's default: a copy of /usr/bin/python3 started through its own loader)
BENCH_PYTHON ?= $(wildcard /usr/bin/python3)
bench: $(VENV_STAMP)
	export GPU_ENV_HOOK_BENCH_PYTHON=$(BENCH_PYTHON); \
	$(PY) tests/bench/bench_hook.py; a=$$?; $(PY) tests/bench/bench_shim.py; b=$$?; \
	$(PY) tests/bench/bench_cdi.py; c=$$?; exit $$((a | b | c))

## bench-nri: the NRI path through CRI on a real containerd 2.x against NVIDIA's runtime v1.20.0 (as the
## runtime handler, CDI and legacy, and its NRI plugin) and plain runc; needs root and the builds named by
## GPU_ENV_HOOK_CONTAINERD2 and GPU_ENV_HOOK_NVIDIA_RUNTIME (skipped, saying so, without them); names the
## versions it ran. BENCH_NRI_ARGS passes options (e.g. --sequential 40 --burst 20 for a quick look)
bench-nri: $(VENV_STAMP)
	$(PY) tests/bench/bench_nri.py $(BENCH_NRI_ARGS)

## soak: the reliability trial's shapes (20 and 100 concurrent creates through the installed shim, a writer
## racing readers, SIGKILL during the rewrite) with their figures; needs root
soak: $(VENV_STAMP)
	$(PY) tests/soak/soak.py

## image: build the DaemonSet's image with podman from Debian's packages and PyPI (IMAGE=name:tag to tag it
## for your registry); needs root, mmdebstrap and podman, and a Python with pip and setuptools: the project's
## .venv when there, else a small one made for the build (not the test toolchain)
IMAGE_PY := $(if $(wildcard $(PY)),$(PY),build/image/venv/bin/python)
build/image/venv/bin/python:
	python3 -m venv build/image/venv
	build/image/venv/bin/python -m pip install --quiet --disable-pip-version-check 'setuptools>=68'

image: $(IMAGE_PY)
	PY=$(IMAGE_PY) bash packaging/kubernetes/build-image.sh

clean:
	rm -rf .venv .mypy_cache .ruff_cache .pytest_cache build *.egg-info

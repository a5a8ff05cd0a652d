"""Import guard: a stage run in a fresh interpreter imports no cold-path library (typer, jsonschema, ...)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HOOK, MakeBundle, MakeConfig

# Run the entry point as the hook would, but record sys.modules instead of exec'ing the cli (or at exit).
SNIPPET = """\
import os, sys
out = sys.argv[1]
def dump():
    with open(out, "w") as fh:
        fh.write("\\n".join(sorted(sys.modules)))
def fake_execve(path, argv, env):
    dump()
    with open(out + ".exec", "w") as fh:
        fh.write(path)
    os._exit(0)
os.execve = fake_execve
from hook.__main__ import main
code = main(sys.argv[2:])
dump()
sys.exit(code)
"""
COLD = frozenset({"typer", "click", "rich", "jsonschema", "re2"})
NOT_BEFORE_CONFIG = COLD | {"tomllib", "dotenv", "typing", "dataclasses", "json"}
# A plain config.toml is read by hook.tomlsubset and JSON by hook.jsontext: neither tomllib, typing nor json.
NOT_WITHOUT_ENV_FILE = COLD | {"dotenv", "tomllib", "typing", "dataclasses", "json"}


def stage_modules(bundle: Path, argv: list[str], tmp_path: Path) -> tuple[set[str], bool]:
    """Run ``main(argv)`` in a fresh ``python -I`` in the bundle; return top-level modules and whether it exec'd."""
    out = tmp_path / "modules.txt"
    state = json.dumps({"pid": 1, "bundle": str(bundle)}).encode()
    proc = subprocess.run(
        [*HOOK[:2], "-c", SNIPPET, str(out), *argv],
        input=state,
        capture_output=True,
        cwd=bundle,
        env={"PATH": "/usr/bin:/bin", "XDG_CONFIG_HOME": str(tmp_path / "no-xdg")},
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    modules = {name.split(".")[0] for name in out.read_text().split("\n")}
    return modules, Path(f"{out}.exec").exists()


def test_snippet_interpreter_is_isolated() -> None:
    """The guard runs the same isolated interpreter the hook runs under."""
    assert HOOK[:2] == [sys.executable, "-I"]


@pytest.mark.parametrize(
    ("env", "with_config"),
    [
        pytest.param(["PATH=/bin"], False, id="no-config-file"),
        pytest.param(["PATH=/bin", "NVIDIA_DRIVER_CAPABILITIES=all"], True, id="with-config-file"),
        pytest.param(None, True, id="no-process-env"),
    ],
)
def test_non_gpu_container_stays_lean(
    env: list[str] | None, with_config: bool, tmp_path: Path, make_bundle: MakeBundle, make_config: MakeConfig
) -> None:
    """A container that asks for no GPU imports neither TOML, dotenv, typing, dataclasses nor cold libraries."""
    bundle = make_bundle(env)
    flags = ["-config", str(make_config())] if with_config else []
    modules, execed = stage_modules(bundle, [*flags, "prestart"], tmp_path)
    assert not execed
    assert "hook" in modules
    assert modules.isdisjoint(NOT_BEFORE_CONFIG), sorted(modules & NOT_BEFORE_CONFIG)


def test_non_gpu_container_with_the_generated_default_config(tmp_path: Path, make_bundle: MakeBundle) -> None:
    """A node whose config.toml is `gpu-env-hook config default` (every key spelled out) still skips parsing
    it for a container that asks for no GPU."""
    config = tmp_path / "config.toml"
    config.write_text(
        subprocess.run([*HOOK, "config", "default"], capture_output=True, text=True, check=True).stdout
    )
    modules, execed = stage_modules(
        make_bundle(["PATH=/bin"]), ["-config", str(config), "prestart"], tmp_path
    )
    assert not execed
    assert modules.isdisjoint(NOT_BEFORE_CONFIG), sorted(modules & NOT_BEFORE_CONFIG)
    full_names = set((tmp_path / "modules.txt").read_text().split("\n"))
    assert "hook.prestart" in full_names
    assert "hook.config" not in full_names


@pytest.mark.parametrize(
    "stage", [pytest.param("prestart", id="prestart"), pytest.param("createRuntime", id="cri")]
)
def test_gpu_container_without_env_file(
    stage: str, tmp_path: Path, make_bundle: MakeBundle, make_config: MakeConfig
) -> None:
    """A GPU container with a plain config reaches the exec without tomllib, typing, json, dotenv or cold libraries."""
    bundle = make_bundle(["NVIDIA_VISIBLE_DEVICES=0"])
    modules, execed = stage_modules(bundle, ["-config", str(make_config()), stage], tmp_path)
    assert execed
    assert modules.isdisjoint(NOT_WITHOUT_ENV_FILE), sorted(modules & NOT_WITHOUT_ENV_FILE)


def test_config_beyond_the_subset_uses_tomllib(
    tmp_path: Path, make_bundle: MakeBundle, make_config: MakeConfig
) -> None:
    """A config.toml beyond the plain subset (here a string escape) is parsed by tomllib, still without cold ones."""
    bundle = make_bundle(["NVIDIA_VISIBLE_DEVICES=0"])
    config = make_config('[nvidia-container-runtime]\nmode = "\\u0061uto"\n')
    modules, execed = stage_modules(bundle, ["-config", str(config), "prestart"], tmp_path)
    assert execed
    assert "tomllib" in modules
    assert modules.isdisjoint(COLD | {"dotenv"}), sorted(modules & (COLD | {"dotenv"}))


@pytest.mark.parametrize(
    "stage", [pytest.param("poststart", id="poststart"), pytest.param("poststop", id="poststop")]
)
def test_noop_stages_stay_lean(stage: str, tmp_path: Path, make_bundle: MakeBundle) -> None:
    """poststart and poststop import nothing beyond the entry point's needs."""
    modules, execed = stage_modules(make_bundle(["NVIDIA_VISIBLE_DEVICES=0"]), [stage], tmp_path)
    assert not execed
    assert modules.isdisjoint(NOT_BEFORE_CONFIG), sorted(modules & NOT_BEFORE_CONFIG)

"""Coexistence, said aloud: NVIDIA's hooks.d entry beside ours, NVIDIA's runtime in a CDI mode under
--as-nvidia-hook, hooks.d entries with a missing executable, engines that have not loaded what install wrote."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from hook.install import InstallOptions, coexist, write_install
from hook.util import paths

PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path
HOOKS = paths.OCI_HOOKS_DIRS[0]
NVIDIA_JSON = {
    "version": "1.0.0",
    "hook": {"path": "/usr/bin/nvidia-container-toolkit", "args": ["nvidia-container-toolkit", "prestart"]},
    "when": {"always": True},
    "stages": ["prestart"],
}


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """An empty node tree."""
    root = tmp_path / "node"
    root.mkdir()
    return root


def put(node: Path, path: str, content: str, mode: int = 0o644) -> Path:
    """Write a node file."""
    where = node / path.lstrip("/")
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(content)
    where.chmod(mode)
    return where


def install(node: Path, engine: str, **options: object) -> list[str]:
    """Install into the node tree."""
    return write_install(InstallOptions(engine=engine, python=PYTHON, root=str(node), **options))  # type: ignore[arg-type]


# --- NVIDIA's hooks.d entry ------------------------------------------------------------------------------


def test_nvidia_hook_json_beside_ours_is_named_by_doctor_and_install(node: Path) -> None:
    """NVIDIA's oci-nvidia-hook.json in the hooks directory we install into: both hooks would run for every
    container; doctor says ✗ and install warns."""
    put(node, "/usr/bin/nvidia-container-toolkit", "#!/bin/sh\n", 0o755)
    put(node, f"{HOOKS}/oci-nvidia-hook.json", json.dumps(NVIDIA_JSON))
    lines = install(node, "crio")
    expected = (
        f"{HOOKS}/oci-nvidia-hook.json beside {HOOKS}/gpu-env-hook.json: podman and CRI-O run both, so every "
        "GPU container gets a second GPU hook (NVIDIA's ignores NVIDIA_ENV_FROM_FILE)"
    )
    fix = f"remove {HOOKS}/oci-nvidia-hook.json (gpu-env-hook does what it does), or uninstall gpu-env-hook"
    assert f"warning: {expected}; {fix}" in lines
    assert coexist.check_nvidia_hook_json(str(node)) == (
        coexist.Finding("NVIDIA hooks.d entry", ok=False, detail=expected, fix=fix)
    )


@pytest.mark.parametrize(
    ("files", "ok"),
    [
        pytest.param({}, True, id="none"),
        pytest.param({f"{HOOKS}/oci-nvidia-hook.json": NVIDIA_JSON}, None, id="only-nvidias"),
    ],
)
def test_nvidia_hook_json_alone_or_absent(node: Path, files: dict[str, object], ok: bool | None) -> None:
    """Without ours, NVIDIA's entry is only worth knowing; with neither, all is well."""
    for path, document in files.items():
        put(node, path, json.dumps(document))
    assert coexist.check_nvidia_hook_json(str(node)).ok is ok


# --- NVIDIA's runtime mode ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "ok"),
    [
        pytest.param("cdi", False, id="cdi"),
        pytest.param("jit-cdi", False, id="jit-cdi"),
        pytest.param("legacy", True, id="legacy"),
        pytest.param(None, True, id="unset-no-nvidia-runtime"),
    ],
)
def test_nvidia_runtime_in_a_cdi_mode_defeats_the_alias(node: Path, mode: str | None, ok: bool) -> None:
    """With --as-nvidia-hook, NVIDIA's runtime in cdi/jit-cdi mode drops our alias from every spec it runs:
    doctor says ✗ with the fix, install warns."""
    table = f'[nvidia-container-runtime]\nmode = "{mode}"\n' if mode else "[nvidia-container-runtime]\n"
    put(node, coexist.NVIDIA_RUNTIME_CONFIG, table)
    lines = install(node, "docker", as_nvidia_hook=True)
    finding = coexist.check_nvidia_runtime_mode(str(node))
    assert finding.ok is ok
    warned = [line for line in lines if "NVIDIA's runtime removes prestart hooks" in line]
    if ok:
        assert warned == []
    else:
        assert finding.detail == (
            f'/etc/nvidia-container-runtime/config.toml sets mode = "{mode}": NVIDIA\'s runtime removes '
            "prestart hooks named nvidia-container-runtime-hook, so /usr/local/bin/nvidia-container-runtime-hook "
            "(gpu-env-hook) does not run for the containers it starts"
        )
        assert warned == [f"warning: {finding.detail}; {finding.fix}"]


def test_nvidia_runtime_mode_unset_with_nvidias_runtime_installed_is_worth_knowing(node: Path) -> None:
    """No mode and NVIDIA's runtime on the node: "auto" may pick CDI (toolkit 1.18+): said, not failed."""
    put(node, "/usr/bin/nvidia-container-runtime", "#!/bin/sh\n", 0o755)
    install(node, "docker", as_nvidia_hook=True)
    assert coexist.check_nvidia_runtime_mode(str(node)).ok is None


def test_nvidia_runtime_mode_does_not_concern_a_node_without_our_alias(node: Path) -> None:
    """Without --as-nvidia-hook the mode changes nothing for us."""
    put(node, coexist.NVIDIA_RUNTIME_CONFIG, '[nvidia-container-runtime]\nmode = "cdi"\n')
    install(node, "docker")
    assert coexist.check_nvidia_runtime_mode(str(node)).ok is None


# --- hooks.d entries with a missing executable --------------------------------------------------------------


def test_hooks_entry_with_a_missing_executable_is_named(node: Path) -> None:
    """podman and CRI-O skip an entry whose executable is missing without a word: doctor says so."""
    put(node, f"{HOOKS}/oci-nvidia-hook.json", json.dumps(NVIDIA_JSON))
    finding = coexist.check_hooks_executables(str(node))
    assert finding.ok is False
    assert finding.detail == (
        f"{HOOKS}/oci-nvidia-hook.json (/usr/bin/nvidia-container-toolkit): missing or not executable; podman "
        "and CRI-O skip such an entry silently (the container starts without that hook: no GPU, no error)"
    )
    python = node / "usr/bin/python3"
    put(node, "/usr/bin/python3", "#!/bin/sh\n", 0o755)  # the node's interpreter, as far as this check sees
    write_install(InstallOptions(engine="podman", python="/usr/bin/python3", root=str(node)))
    assert f"{HOOKS}/gpu-env-hook.json" not in coexist.check_hooks_executables(str(node)).detail
    python.unlink()  # the interpreter the entry starts is gone
    assert (
        f"{HOOKS}/gpu-env-hook.json (/usr/bin/python3)" in coexist.check_hooks_executables(str(node)).detail
    )


# --- engines that have not loaded what install wrote ---------------------------------------------------------


def fake_proc(root: Path, command: str, started_ago: float) -> Path:
    """A /proc with a boot time and one process ``command`` that started ``started_ago`` seconds ago."""
    proc = root / "proc"
    (proc / "4242").mkdir(parents=True)
    boot = int(time.time()) - 100_000
    (proc / "stat").write_text(f"cpu  1 2 3\nbtime {boot}\n")
    ticks = os.sysconf("SC_CLK_TCK")
    start_ticks = int((time.time() - started_ago - boot) * ticks)
    fields = ["S", *["0"] * 18, str(start_ticks)]
    (proc / "4242" / "stat").write_text(f"4242 ({command}) {' '.join(fields)}\n")
    return proc


@pytest.mark.parametrize(
    ("engine", "command", "options", "fix"),
    [
        pytest.param("docker", "dockerd", {}, "systemctl reload docker (or SIGHUP)", id="docker-reload"),
        pytest.param(
            "docker",
            "dockerd",
            {"as_nvidia_hook": True},
            "systemctl restart docker",
            id="docker-alias-restart",
        ),
        pytest.param("crio", "crio", {}, "systemctl restart crio", id="crio-restart"),
    ],
)
def test_an_engine_started_before_install_is_told_to_reload_or_restart(
    node: Path, engine: str, command: str, options: dict[str, object], fix: str
) -> None:
    """An engine process older than the files install wrote runs without them: doctor names the files and
    the reload (dockerd's runtimes) or restart (the hook alias, containerd, CRI-O) that loads them."""
    install(node, engine, **options)
    proc = fake_proc(node, command, started_ago=3600)
    (finding,) = coexist.check_engines_loaded(str(node), str(proc))
    assert (finding.name, finding.ok, finding.fix) == (f"{engine} loaded", False, fix)
    assert finding.detail.startswith(f"{command} started before install changed ")


def test_an_engine_started_after_install_has_loaded_it(node: Path) -> None:
    """A daemon younger than every file install wrote is fine."""
    install(node, "docker")
    proc = fake_proc(node, "dockerd", started_ago=0)
    for path in (node / "etc/docker/daemon.json", node / paths.runtime_wrapper("docker").lstrip("/")):
        os.utime(path, (time.time() - 60, time.time() - 60))
    assert [finding.ok for finding in coexist.check_engines_loaded(str(node), str(proc))] == [True]

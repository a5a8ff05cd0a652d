"""What install and uninstall tell the user to do next, through the real command: every ``next:`` line comes
after the changes and warnings it follows from, in the order the user does them, and is true when it is
printed (uninstall never asks to disable a unit whose file it has just removed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_install_nri import LINE_17, node_with
from test_install_retire import snapshot

from hook.install.docker import RESTART_FOR_GPUS
from hook.install.nri import UNIT_WANTS
from hook.util import paths

PYTHON_ARGV = [sys.executable, "-I", "-m", "hook"]
HOOKS_DIR = paths.OCI_HOOKS_DIRS[0]
CRIO_RESTART_NRI = (
    "next: restart CRI-O (systemctl restart crio) to load the runtime handler gpu-env (the settings of CRI-O's "
    "default runtime, crun)"
)
CRIO_RESTART = CRIO_RESTART_NRI + "; the hooks JSON applies to new containers without it"
CRIO_AFTER = (
    "next: restart CRI-O (systemctl restart crio) when no container uses runtime handler gpu-env: it keeps the "
    "handlers it loaded until then (it notices hooks.d changes by itself)"
)
DOCKER_RELOAD = (
    "next: reload dockerd (systemctl reload docker, or SIGHUP) to load the runtime; then `docker run "
    "--runtime=gpu-env ...`"
)
CONTAINERD_AFTER = (
    "next: restart containerd (systemctl restart containerd) when no container uses runtime handler gpu-env: "
    "it keeps the config it loaded until then"
)
DOCKER_AFTER = (
    "next: restart dockerd (systemctl restart docker) when no container uses runtime gpu-env: a reload does "
    "not remove a runtime, `docker info` lists it until the restart (and `docker run --gpus` keeps the driver "
    "it registered at start)"
)
NRI_START = (
    "next: start the NRI plugin: systemctl daemon-reload && systemctl enable --now gpu-env-hook-nri (written to "
    "{root}/etc/systemd/system/gpu-env-hook-nri.service)"
)
NRI_STOP = (
    "next: systemctl stop gpu-env-hook-nri; systemctl daemon-reload (the NRI plugin's unit file is gone; stop "
    "ends the plugin if it still runs)"
)


def containerd_restart(root: Path, base: str) -> str:
    """containerd's install step: restart it to load the handler (added to the node's main config)."""
    return (
        f"next: restart containerd (systemctl restart containerd) to load the runtime handler gpu-env (added to "
        f"{root}/etc/containerd/config.toml, with the options of runtime {base}); pods select it with a "
        "RuntimeClass whose handler is gpu-env"
    )


def run(*args: str) -> list[str]:
    """Run the gpu-env-hook command; it must succeed with nothing on stderr; return its stdout's lines."""
    done = subprocess.run([*PYTHON_ARGV, *args], capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stderr) == (0, ""), done.stdout
    return done.stdout.splitlines()


def next_steps(lines: list[str]) -> list[str]:
    """The report's next: lines, which must be its last lines."""
    first = next((index for index, line in enumerate(lines) if line.startswith("next: ")), len(lines))
    assert all(line.startswith("next: ") for line in lines[first:]), lines
    return lines[first:]


@pytest.mark.parametrize(
    ("engine", "extra", "installed", "uninstalled"),
    [
        pytest.param(
            "podman",
            (),
            [f"next: podman reads {HOOKS_DIR} when it creates a container: no restart needed"],
            ["next: nothing to restart: podman reads its hooks directories when it creates a container"],
            id="podman",
        ),
        pytest.param(
            "crio",
            (),
            [CRIO_RESTART],
            [CRIO_AFTER],
            id="crio",
        ),
        pytest.param(
            "crio", ("--nri",), [CRIO_RESTART_NRI, NRI_START], [NRI_STOP, CRIO_AFTER], id="crio-nri"
        ),
        pytest.param("containerd", (), ["containerd-restart:runc"], [CONTAINERD_AFTER], id="containerd"),
        pytest.param(
            "containerd",
            ("--nri", "--containerd-binary", "/usr/bin/containerd"),
            ["containerd-restart:runc", NRI_START],
            [NRI_STOP, CONTAINERD_AFTER],
            id="containerd-nri-plugin-stops-first",
        ),
        pytest.param(
            "docker",
            (),
            [DOCKER_RELOAD],
            [DOCKER_AFTER],
            id="docker",
        ),
        pytest.param("docker", ("--as-nvidia-hook",), [RESTART_FOR_GPUS], [DOCKER_AFTER], id="docker-gpus"),
    ],
)
def test_next_steps_come_last_in_the_order_they_are_done(
    tmp_path: Path, engine: str, extra: tuple[str, ...], installed: list[str], uninstalled: list[str]
) -> None:
    """install, then uninstall, for each engine: the next: lines are last, as pinned; uninstall restores the
    node."""
    root = node_with(tmp_path / "node", None, LINE_17)
    (root / "usr/sbin").mkdir(parents=True)
    (root / "usr/sbin/runc").write_text("#!/bin/sh\n")
    (root / "usr/sbin/runc").chmod(0o755)
    before = snapshot(root)
    common = ("--engine", engine, "--root", str(root))
    lines = run("install", *common, "--python", "/usr/bin/python3", *extra)
    expected = [
        containerd_restart(root, step.partition(":")[2]) if step.startswith("containerd-restart:") else step
        for step in installed
    ]
    assert next_steps(lines) == [step.format(root=root) for step in expected]
    assert next_steps(run("uninstall", *common)) == uninstalled
    assert snapshot(root) == before


def test_uninstall_leaves_an_enabled_nri_unit_and_says_what_to_run_first(tmp_path: Path) -> None:
    """While the NRI plugin's unit is enabled, uninstall changes nothing and says in one line to disable it
    first (systemctl needs the unit file for that); once disabled, uninstall removes it."""
    root = node_with(tmp_path / "node", None, LINE_17)
    common = ("--engine", "containerd", "--root", str(root))
    run(
        "install",
        *common,
        "--python",
        "/usr/bin/python3",
        "--nri",
        "--containerd-binary",
        "/usr/bin/containerd",
    )
    wants = root / UNIT_WANTS.lstrip("/")
    wants.parent.mkdir(parents=True)
    # What `systemctl enable` makes (relative here: the snapshot follows links, and the tree is not at /).
    wants.symlink_to("../gpu-env-hook-nri.service")
    installed = snapshot(root)
    done = subprocess.run(
        [*PYTHON_ARGV, "uninstall", *common], capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"gpu-env-hook: uninstall: the NRI plugin's unit is enabled ({root}{UNIT_WANTS}): run `systemctl disable "
        "--now gpu-env-hook-nri` first (uninstall removes its unit file)\n"
    )
    assert snapshot(root) == installed
    wants.unlink()
    assert next_steps(run("uninstall", *common))[0] == NRI_STOP

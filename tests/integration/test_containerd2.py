"""containerd 2.x built from its source (not packaged by Debian 12): its own verdict, ``config dump``, on what
``install --engine containerd`` writes for a version-4 config (containerd >= 2.3) that imports the
``conf.d`` drop-in directory, beside NVIDIA's ``99-nvidia.toml``.

The binaries are found through ``GPU_ENV_HOOK_CONTAINERD2`` (a directory holding ``containerd``); without it
these tests are skipped (CI runs Debian's containerd 1.6 in tests/integration/test_containerd.py). Only
``containerd config default``/``config dump`` run: no daemon is started.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from containerd import config_dump
from engine_builds import containerd2_dir

from hook.util import paths

CONTAINERD2_DIR = containerd2_dir()
CONTAINERD2 = str(CONTAINERD2_DIR / "containerd") if CONTAINERD2_DIR else ""
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or CONTAINERD2_DIR is None,
        reason="needs root and GPU_ENV_HOOK_CONTAINERD2 (a directory holding containerd 2.x's binaries)",
    ),
]

RUNTIME = "io.containerd.cri.v1.runtime"
MAIN = "/etc/containerd/config.toml"
DROPIN = f"{paths.CONTAINERD_DROPIN_DIR}/{paths.CONTAINERD_DROPIN_NAME}"
PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path
# What nvidia-ctk runtime configure --runtime=containerd writes as its drop-in on a containerd 2.x node.
NVIDIA_DROPIN = f"""\
version = 3

[plugins]

  [plugins."{RUNTIME}"]

    [plugins."{RUNTIME}".containerd]

      [plugins."{RUNTIME}".containerd.runtimes]

        [plugins."{RUNTIME}".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"

          [plugins."{RUNTIME}".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
            SystemdCgroup = true
"""


def config_default() -> str:
    """containerd 2.x's ``config default``: what a node set up from it has as its main config."""
    proc = subprocess.run(
        [CONTAINERD2, "config", "default"], capture_output=True, text=True, timeout=60, check=True
    )
    return proc.stdout


def with_systemd_cgroup(default: str) -> str:
    """The default config with runc's SystemdCgroup on (what kubeadm guides tell people to set)."""
    assert default.count("SystemdCgroup = false") == 1  # runc's, the one runtime the default names
    return default.replace("SystemdCgroup = false", "SystemdCgroup = true")


def install(node: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run gpu-env-hook install/uninstall --engine containerd against the node tree."""
    return subprocess.run(
        [sys.executable, "-I", "-m", "hook", *args, "--engine", "containerd", "--root", str(node)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def write(node: Path, path: str, text: str) -> None:
    """Write a node file under the tree."""
    where = node / path.lstrip("/")
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(text)


def without_handler(dump: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The dump without our handler (and without ``imports``, which lists the drop-in), and the handler."""
    rest = copy.deepcopy(dump)
    rest.pop("imports", None)
    handler = rest["plugins"][RUNTIME]["containerd"]["runtimes"].pop(paths.RUNTIME_HANDLER)
    return rest, handler


@pytest.mark.parametrize(
    "nvidia", [pytest.param(True, id="beside-99-nvidia"), pytest.param(False, id="alone")]
)
def test_dropin_keeps_every_setting_in_containerd_2s_config_dump(tmp_path: Path, *, nvidia: bool) -> None:
    """config dump of containerd 2.x on its own default config (version 4, conf.d imported, SystemdCgroup
    on): install writes a drop-in and leaves the main config and NVIDIA's drop-in alone; the merged config
    is the one before plus exactly our handler, whose options are runc's with BinaryName = our wrapper;
    uninstall gives back the dump of before."""
    default = config_default()
    assert default.startswith("version = 4\n") or "\nversion = 4\n" in default
    node = tmp_path / "node"
    main = with_systemd_cgroup(default)
    write(node, MAIN, main)
    if nvidia:
        write(node, f"{paths.CONTAINERD_DROPIN_DIR}/99-nvidia.toml", NVIDIA_DROPIN)
    before = config_dump(node, tmp_path / "dump", binary=CONTAINERD2)
    proc = install(node, "install", "--python", PYTHON)
    assert proc.returncode == 0, proc.stderr
    assert (node / MAIN.lstrip("/")).read_text() == main
    assert (node / DROPIN.lstrip("/")).is_file()
    after = config_dump(node, tmp_path / "dump", binary=CONTAINERD2)
    rest, handler = without_handler(after)  # config dump lists imports as written (the glob): not compared
    before.pop("imports", None)
    assert rest == before
    runc = before["plugins"][RUNTIME]["containerd"]["runtimes"]["runc"]
    assert handler["options"] == {**runc["options"], "BinaryName": paths.runtime_wrapper("containerd")}
    assert handler["options"]["SystemdCgroup"] is True
    if nvidia:
        assert "nvidia" in rest["plugins"][RUNTIME]["containerd"]["runtimes"]
    proc = install(node, "uninstall")
    assert proc.returncode == 0, proc.stderr
    assert not (node / DROPIN.lstrip("/")).exists()
    again = config_dump(node, tmp_path / "dump", binary=CONTAINERD2)
    again.pop("imports", None)
    assert again == before


def test_dropin_on_a_config_naming_no_runtime_keeps_the_builtin_runc(tmp_path: Path) -> None:
    """config dump of containerd 2.x on a version-4 config that names no runtime: the drop-in writes out
    containerd's built-in runc (a runtimes table naming only ours would replace it), and the dump shows
    that runc exactly as containerd's default."""
    node = tmp_path / "node"
    main = f'version = 4\nimports = ["{paths.CONTAINERD_DROPIN_DIR}/*.toml"]\n'
    write(node, MAIN, main)
    before = config_dump(node, tmp_path / "dump", binary=CONTAINERD2)
    proc = install(node, "install", "--python", PYTHON)
    assert proc.returncode == 0, proc.stderr
    after = config_dump(node, tmp_path / "dump", binary=CONTAINERD2)
    rest, handler = without_handler(after)
    before.pop("imports", None)
    assert rest == before
    assert handler["options"]["BinaryName"] == paths.runtime_wrapper("containerd")


def test_doctor_on_the_node_names_the_dropin_containerd_2_loads(tmp_path: Path) -> None:
    """doctor on a containerd 2.3 node (its binary at /usr/bin/containerd, the node's /etc/containerd): the
    handler takes effect from our drop-in, and every conf.d file is loaded per containerd's own config dump
    (2.x lists the import glob as written; doctor expands it as containerd does)."""
    from containerd import namespace_argv

    node = tmp_path / "node"
    write(node, MAIN, with_systemd_cgroup(config_default()))
    write(node, f"{paths.CONTAINERD_DROPIN_DIR}/99-nvidia.toml", NVIDIA_DROPIN)
    proc = install(node, "install", "--python", PYTHON)
    assert proc.returncode == 0, proc.stderr
    # The wrapper doctor checks is the node tree's; show it at its node path too.
    swap = f'mount --bind "{CONTAINERD2}" /usr/bin/containerd && exec "$@"'
    doctor = [sys.executable, "-I", "-m", "hook", "doctor", "--no-color"]
    argv = namespace_argv(node, tmp_path / "ns", ["sh", "-c", swap, "sh", *doctor])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    lines = proc.stdout.splitlines()
    assert any(
        line.startswith("✓")
        and f"runtime handler {paths.RUNTIME_HANDLER} takes effect from {DROPIN} (a drop-in)" in line
        for line in lines
    ), proc.stdout + proc.stderr
    assert any(
        line.startswith("✓")
        and f"every file in {paths.CONTAINERD_DROPIN_DIR} is loaded (per containerd config dump)" in line
        for line in lines
    ), proc.stdout + proc.stderr

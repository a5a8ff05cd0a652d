"""install --engine crio: the handler drop-in inherits CRI-O's default runtime, as CRI-O merges its configs.

There is no CRI-O binary on the test machine: ``crio_effective`` applies CRI-O's documented merge to the
node's files plus our drop-in (parsed with tomllib): crio.conf, then crio.conf.d in lexical order; a later
scalar wins; each ``[crio.runtime.runtimes.NAME]`` a file defines replaces that handler whole
(pkg/config: ``UpdateFromDropInFile`` decodes each file over the config so far, and TOML decoding gives a
map entry a fresh value).
"""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from hook.install import InstallError, InstallOptions, write_install, write_uninstall
from hook.install.crio import DEFAULT_MONITOR_ENV, plan
from hook.util import paths

PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path
DROPIN_DIR = "/etc/crio/crio.conf.d"
OURS = f"{DROPIN_DIR}/99-gpu-env-hook.conf"
# What CRI-O's packages ship on Fedora/openSUSE-like systems: crun as default, in a drop-in.
CRUN_DEFAULT = """\
[crio.runtime]
default_runtime = "crun"

[crio.runtime.runtimes.crun]
runtime_path = "/usr/libexec/crio/crun"
runtime_root = "/run/crun"
monitor_path = "/usr/libexec/crio/conmon"
monitor_cgroup = "pod"
monitor_env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LOG=debug"]
allowed_annotations = ["io.containers.trace-syscall"]

[crio.runtime.runtimes.runc]
runtime_path = "/usr/libexec/crio/runc"
runtime_root = "/run/runc"
monitor_path = "/usr/libexec/crio/conmon"
"""
RUNC_MAIN = """\
[crio]
log_dir = "/var/log/crio/pods"

[crio.runtime]
default_runtime = "runc"
conmon_cgroup = "pod"

[crio.runtime.runtimes.runc]
runtime_type = "oci"
runtime_root = "/run/runc"
runtime_config_path = "/etc/crio/runc.json"
privileged_without_host_devices = true
"""


def write_node(root: Path, files: Mapping[str, str]) -> Path:
    """Write node files (node path → text) under root."""
    root.mkdir(parents=True, exist_ok=True)
    for path, content in files.items():
        where = root / path.lstrip("/")
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text(content)
    return root


def crio_effective(root: Path) -> tuple[str | None, dict[str, dict[str, Any]]]:
    """CRI-O's merged ``default_runtime`` and runtime handlers for the node's files, as CRI-O merges them."""
    files = [root / "etc/crio/crio.conf"] if (root / "etc/crio/crio.conf").is_file() else []
    dropins = root / DROPIN_DIR.lstrip("/")
    files += sorted(path for path in dropins.rglob("*") if path.is_file()) if dropins.is_dir() else []
    default: str | None = None
    runtimes: dict[str, dict[str, Any]] = {}
    for path in files:
        section = tomllib.loads(path.read_text()).get("crio", {}).get("runtime", {})
        default = section.get("default_runtime") or default
        runtimes.update(section.get("runtimes", {}))
    return default, runtimes


def install(node: Path, **options: Any) -> list[str]:
    """install --engine crio into the node tree."""
    return write_install(InstallOptions(engine="crio", python=PYTHON, root=str(node), **options))


@pytest.mark.parametrize(
    ("files", "base"),
    [
        pytest.param({f"{DROPIN_DIR}/10-crio.conf": CRUN_DEFAULT}, "crun", id="crun-default-in-dropin"),
        pytest.param({"/etc/crio/crio.conf": RUNC_MAIN}, "runc", id="runc-default-in-crio-conf"),
        pytest.param(
            {"/etc/crio/crio.conf": RUNC_MAIN, f"{DROPIN_DIR}/10-crio.conf": CRUN_DEFAULT},
            "crun",
            id="dropin-overrides-crio-conf",
        ),
    ],
)
def test_handler_inherits_the_default_runtime(tmp_path: Path, files: dict[str, str], base: str) -> None:
    """After CRI-O's merge, handler gpu-env is the default runtime's table with runtime_path = the wrapper
    and GPU_ENV_HOOK_ENGINE=crio in monitor_env; the default runtime and every other handler are unchanged."""
    node = write_node(tmp_path, files)
    default_before, before = crio_effective(node)
    install(node)
    default_after, after = crio_effective(node)
    assert default_after == default_before == base
    ours = after.pop(paths.RUNTIME_HANDLER)
    assert after == before
    expected = {key: value for key, value in before[base].items() if key != "runtime_path"}
    expected["runtime_path"] = paths.runtime_wrapper("crio")
    expected.setdefault("runtime_type", "oci")
    expected["monitor_env"] = [
        *before[base].get("monitor_env", DEFAULT_MONITOR_ENV),
        "GPU_ENV_HOOK_ENGINE=crio",
    ]
    assert ours == expected


def test_no_config_uses_crios_builtin_default(tmp_path: Path) -> None:
    """With no CRI-O config at all, the handler is based on CRI-O's built-in crun and keeps a PATH for conmon."""
    node = write_node(tmp_path, {})
    install(node)
    _, after = crio_effective(node)
    assert after == {
        paths.RUNTIME_HANDLER: {
            "runtime_path": paths.runtime_wrapper("crio"),
            "runtime_type": "oci",
            "monitor_env": [*DEFAULT_MONITOR_ENV, "GPU_ENV_HOOK_ENGINE=crio"],
        }
    }


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {f"{DROPIN_DIR}/10-crio.conf": CRUN_DEFAULT}, "/usr/libexec/crio/crun", id="runtime-path"
        ),
        pytest.param(
            {"/etc/crio/crio.conf": RUNC_MAIN, "/usr/bin/runc": "#!/bin/sh\n"}, "/usr/bin/runc", id="on-path"
        ),
        pytest.param({"/etc/crio/crio.conf": RUNC_MAIN}, None, id="not-found"),
    ],
)
def test_shim_execs_crios_default_runtime(
    tmp_path: Path, files: dict[str, str], expected: str | None
) -> None:
    """The runtime the shim execs is the default runtime's runtime_path, else its name on the node's PATH."""
    node = write_node(tmp_path, files)
    if (node / "usr/bin/runc").exists():
        (node / "usr/bin/runc").chmod(0o755)
    assert plan(InstallOptions(engine="crio", python=PYTHON, root=str(node))).runtime == expected


def test_uninstall_restores_the_node(tmp_path: Path) -> None:
    """install then uninstall leaves every file of the node as it was."""
    node = write_node(tmp_path, {f"{DROPIN_DIR}/10-crio.conf": CRUN_DEFAULT})
    before = {str(path): path.read_bytes() for path in node.rglob("*") if path.is_file()}
    install(node)
    write_uninstall("crio", str(node))
    assert {str(path): path.read_bytes() for path in node.rglob("*") if path.is_file()} == before


def test_reinstall_ignores_its_own_dropin(tmp_path: Path) -> None:
    """Installing again reads the node's files without our earlier drop-in and writes the same one."""
    node = write_node(tmp_path, {f"{DROPIN_DIR}/10-crio.conf": CRUN_DEFAULT})
    install(node)
    first = (node / OURS.lstrip("/")).read_bytes()
    install(node)
    assert (node / OURS.lstrip("/")).read_bytes() == first


@pytest.mark.parametrize(
    ("files", "message"),
    [
        pytest.param(
            {f"{DROPIN_DIR}/10-crio.conf": "[crio.runtime\n"},
            r"^{node}/etc/crio/crio.conf.d/10-crio.conf: not valid TOML \(.+\); fix it first$",
            id="invalid-toml",
        ),
        pytest.param(
            {f"{DROPIN_DIR}/10-crio.conf": '[crio.runtime]\ndefault_runtime = "youki"\n'},
            r"^{node}/etc/crio/crio.conf.d: default_runtime 'youki' has no \[crio.runtime.runtimes.youki\] "
            r"table; CRI-O does not start like this; fix it first$",
            id="default-without-table",
        ),
        pytest.param(
            {
                f"{DROPIN_DIR}/10-kata.conf": '[crio.runtime]\ndefault_runtime = "kata"\n[crio.runtime.runtimes.kata]\nruntime_type = "vm"\n'
            },
            r"^{node}/etc/crio/crio.conf.d: the default runtime 'kata' is of type 'vm'; the shim wraps only "
            r"runtimes called like runc \(oci, pod\)$",
            id="vm-default",
        ),
        pytest.param(
            {f"{DROPIN_DIR}/50-other.conf": '[crio.runtime.runtimes.gpu-env]\nruntime_path = "/x"\n'},
            r"^{node}/etc/crio/crio.conf.d: a runtime handler 'gpu-env' is already configured, not by "
            r"install; remove it first$",
            id="foreign-handler",
        ),
    ],
)
def test_install_refuses(tmp_path: Path, files: dict[str, str], message: str) -> None:
    """Each refusal is one line; nothing is written."""
    node = write_node(tmp_path / "node", files)
    with pytest.raises(InstallError, match=message.format(node=node)):
        install(node)
    assert not (node / OURS.lstrip("/")).exists()

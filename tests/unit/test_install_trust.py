"""Root runs or trusts only root's: an interpreter, a runtime, a config, an env-file directory or a naming key
that someone else can change (it, or a directory on the way to it) is refused in one line by the real
``gpu-env-hook install`` / ``env-file path`` processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from hook.install.common import InstallError, InstallOptions
from hook.install.nri import plan_unit

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="gives files to another user (chown)")

PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path
USER = 1000
RUNS = "whoever can change it runs code as root"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``gpu-env-hook ARGS`` as a process."""
    return subprocess.run(
        [PYTHON, "-I", "-m", "hook", *args], capture_output=True, text=True, check=False, timeout=300, env=env
    )


def put(root: Path, node_path: str, *, data: bytes = b"#!/bin/sh\n", mode: int = 0o755) -> Path:
    """A file at ``node_path`` beneath ``root`` (parents 0755 root), with ``mode``."""
    path = root / node_path.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)
    return path


def user_owned(path: Path) -> None:
    os.chown(path, USER, USER)


def world_writable(path: Path) -> None:
    path.chmod(0o777)


Damage = Callable[[Path], None]


@pytest.mark.parametrize(
    ("option", "node_path", "damaged", "damage", "problem", "why"),
    [
        pytest.param(
            "--python",
            "/opt/py/bin/python3",
            "/opt/py/bin/python3",
            user_owned,
            "must be owned by root (uid 0), is owned by uid 1000",
            RUNS,
            id="interpreter-owned-by-a-user",
        ),
        pytest.param(
            "--python",
            "/opt/py/bin/python3",
            "/opt/py",
            world_writable,
            "must not be group- or world-writable (mode 0777)",
            RUNS,
            id="interpreter-below-a-world-writable-directory",
        ),
        pytest.param(
            "--runtime",
            "/opt/rt/runc",
            "/opt/rt",
            user_owned,
            "must be owned by root (uid 0), is owned by uid 1000",
            RUNS,
            id="runtime-in-a-users-directory",
        ),
        pytest.param(
            "--config",
            "/etc/gpu-env-hook/config.toml",
            "/etc/gpu-env-hook/config.toml",
            user_owned,
            "must be owned by root (uid 0), is owned by uid 1000",
            "whoever can change it chooses what runs as root",
            id="config-owned-by-a-user",
        ),
    ],
)
def test_install_refuses_what_someone_else_can_change(
    tmp_path: Path, option: str, node_path: str, damaged: str, damage: Damage, problem: str, why: str
) -> None:
    """The interpreter every hook runs, the real runtime, the config: each refused when it (or a directory
    above it) is a user's or writable by others; nothing is written."""
    root = tmp_path / "node"
    put(root, node_path, data=b"" if option == "--config" else b"#!/bin/sh\n")
    damage(root / damaged.lstrip("/"))
    before = sorted(root.rglob("*"))
    proc = run("install", "--engine", "podman", "--root", str(root), option, node_path)
    assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr
    assert proc.stderr == f"gpu-env-hook: {option} {node_path}: {root}{damaged} {problem}; {why}\n"
    assert sorted(root.rglob("*")) == before


def test_install_follows_a_symlink_as_the_kernel_would(tmp_path: Path) -> None:
    """--python /usr/bin/python3, a link into a world-writable directory: the directory the link leads
    to is judged (beneath --root, an absolute target starts at the node's /)."""
    root = tmp_path / "node"
    put(root, "/opt/py/python3")
    world_writable(root / "opt/py")
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/python3").symlink_to("/opt/py/python3")
    proc = run("install", "--engine", "podman", "--root", str(root), "--python", "/usr/bin/python3")
    assert proc.returncode == 1
    assert proc.stderr == (
        f"gpu-env-hook: --python /usr/bin/python3: {root}/opt/py must not be group- or world-writable "
        f"(mode 0777); {RUNS}\n"
    )


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        pytest.param(user_owned, "must be owned by root (uid 0), is owned by uid 1000", id="owned-by-a-user"),
        pytest.param(world_writable, "must not be group- or world-writable (mode 0777)", id="mode-0777"),
    ],
)
def test_install_refuses_an_env_directory_someone_else_can_write(
    tmp_path: Path, damage: Damage, problem: str
) -> None:
    """An existing env-file directory that is a user's or world-writable is no longer kept silently."""
    root = tmp_path / "node"
    put(root, "/etc/gpu-env-hook.toml", data=b'[env-file]\ndirectories = ["/run/env"]\n', mode=0o644)
    (root / "run/env").mkdir(parents=True)
    damage(root / "run/env")
    proc = run("install", "--engine", "podman", "--root", str(root), "--config", "/etc/gpu-env-hook.toml")
    assert proc.returncode == 1
    assert proc.stderr == (
        f"gpu-env-hook: [env-file] directories: /run/env: {root}/run/env {problem}; whoever can write there "
        "chooses what containers get as root\n"
    )


def test_install_warns_about_an_interpreter_not_there_yet_and_judges_none(tmp_path: Path) -> None:
    """Under --root, an interpreter that is not there yet is a warning (a DaemonSet may add it later)."""
    root = tmp_path / "node"
    root.mkdir()
    proc = run("install", "--engine", "podman", "--root", str(root), "--python", "/opt/py/bin/python3")
    assert proc.returncode == 0, proc.stderr
    assert (
        f"warning: no executable at {root}/opt/py/bin/python3 yet; the engines run /opt/py/bin/python3"
        in (proc.stdout.splitlines())
    )


def test_nri_unit_refuses_an_interpreter_a_user_owns(tmp_path: Path) -> None:
    """The interpreter the NRI unit runs as root (--nri-python, or the one install ran from) is held to the
    same rule."""
    root = tmp_path / "node"
    user_owned(put(root, "/home/u/venv/bin/python"))
    options = InstallOptions(engine="containerd", python=PYTHON, root=str(root), nri=True)
    with pytest.raises(InstallError) as caught:
        plan_unit(options._replace(nri_python="/home/u/venv/bin/python"))
    assert str(caught.value) == (
        f"--nri-python /home/u/venv/bin/python: {root}/home/u/venv/bin/python must be owned by root (uid 0), "
        f"is owned by uid 1000; {RUNS}"
    )


@pytest.mark.parametrize(
    ("layout", "at", "problem"),
    [
        pytest.param("0777", "keys", "must not be group- or world-writable (mode 0777)", id="key-dir-0777"),
        pytest.param(
            "user", "keys", "must be owned by root (uid 0), is owned by uid 1000", id="key-dir-a-users"
        ),
        pytest.param(
            "sticky-parent",
            "keys",
            "must not be group- or world-writable (mode 1777)",
            id="created-in-sticky",
        ),
        pytest.param(
            "user-key",
            "keys/alloc.key",
            "must be owned by root (uid 0), is owned by uid 1000",
            id="key-a-users",
        ),
    ],
)
def test_env_file_path_refuses_a_key_place_someone_else_can_change(
    tmp_path: Path, layout: str, at: str, problem: str
) -> None:
    """The naming key is neither created nor read in a directory a user owns or others can write (a sticky
    one such as /tmp included: the key would be created right in it), nor read from a user's file."""
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    key = keys / "alloc.key"
    if layout == "0777":
        world_writable(keys)
    elif layout == "user":
        user_owned(keys)
    elif layout == "sticky-parent":
        keys.chmod(0o1777)
        key = keys / "alloc.key"
    elif layout == "user-key":
        key.write_bytes(os.urandom(32))
        key.chmod(0o600)
        user_owned(key)
    env = {"PATH": "/usr/bin:/bin", "GPU_ENV_HOOK_NAME_KEY": str(key)}
    proc = run("env-file", "path", "--directory", "/run/nvidia-env", "gpu-0", env=env)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr == (
        f"gpu-env-hook: naming key {key}: {tmp_path / at} {problem} (it is never replaced: every "
        "allocation's name derives from it)\n"
    )
    assert not key.exists() or layout == "user-key"


def test_the_walk_allows_a_sticky_ancestor_but_not_a_sticky_parent(tmp_path: Path) -> None:
    """/tmp-like directories (root's, sticky) may lie on the way; the one holding the entry may not be one."""
    from hook.util.beneath import untrusted_on_the_way

    sticky = tmp_path / "sticky"
    (sticky / "root-dir").mkdir(parents=True)
    sticky.chmod(0o1777)
    (sticky / "root-dir").chmod(0o755)
    target = put(sticky, "/root-dir/python3")
    assert untrusted_on_the_way(str(target)) is None
    assert untrusted_on_the_way(str(sticky / "python3"), missing_ok=True) == (
        str(sticky),
        "must not be group- or world-writable (mode 1777)",
    )
    shutil.rmtree(sticky)


def test_doctor_names_a_loose_parent_of_the_env_directory(tmp_path: Path) -> None:
    """doctor judges the env-file directory's parents by the same walk: a 0777 directory holding it is named."""
    from hook.commands.doctor import check_env_directory

    root = tmp_path / "node"
    (root / "run/nvidia-env").mkdir(parents=True, mode=0o700)
    world_writable(root / "run")
    check = check_env_directory(str(root), "/run/nvidia-env")
    assert (check.ok, check.detail, check.fix) == (
        False,
        f"parent {root}/run must not be group- or world-writable (mode 0777)",
        f"chmod go-w {root}/run",
    )

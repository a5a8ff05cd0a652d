"""install writes every file and directory with the mode it means, whatever the caller's umask; a start never
writes bytecode into the tree the engines run from."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hook.install.common import ENGINES
from hook.install.manifest import manifest_path
from hook.install.nri import UNIT_PATH
from hook.launcher import PYTHON_DIR, PYTHON_FLAGS, build_code, bundled_command
from hook.util import paths

PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path
NODE_PYTHON = "/usr/bin/python3"
ENV_DIR = "/run/nvidia-env"
PRIVATE_DIRS = {paths.STATE_DIR, paths.REFUSAL_LOG_DIR, ENV_DIR}
PRIVATE_FILES = {manifest_path(engine) for engine in ENGINES}
EXECUTABLES = {paths.HOOK_WRAPPER, paths.NVIDIA_HOOK_ALIAS, *paths.RUNTIME_WRAPPERS}


def make_node(tmp_path: Path) -> Path:
    """A node's / holding the interpreter the engines run (so install byte-compiles the tree with it)."""
    root = tmp_path / "node"
    (root / "usr/bin").mkdir(parents=True)
    shutil.copy2(os.path.realpath(PYTHON), root / NODE_PYTHON.lstrip("/"))
    (root / "etc/containerd").mkdir(parents=True)
    (root / "etc/containerd/config.toml").write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n')
    containerd = root / "usr/bin/containerd"  # what --nri asks for its version: one with NRI
    containerd.write_text(
        "#!/bin/sh\necho 'containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437'\n"
    )
    containerd.chmod(0o755)
    return root


def install(root: Path, *args: str, umask: int = 0o022) -> subprocess.CompletedProcess[str]:
    """Run the ``gpu-env-hook install`` process for ``root`` under ``umask``; it must succeed."""
    proc = subprocess.run(
        [PYTHON, "-I", "-m", "hook", "install", "--root", str(root), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        umask=umask,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def install_under(root: Path, umask: int, *args: str) -> None:
    """Run ``install`` under ``umask`` with the node's interpreter (``NODE_PYTHON``) unless ``args`` say."""
    install(root, "--python", NODE_PYTHON, *args, umask=umask)


def meant_mode(node_path: str, is_dir: bool) -> int:
    """The mode install means for what it wrote at ``node_path``."""
    if node_path.startswith(paths.RUNTIME_TREE + "/"):
        return 0o755 if is_dir else 0o644  # the package and its caches: only root writes, everyone reads
    if is_dir:
        return 0o700 if node_path in PRIVATE_DIRS else 0o755
    if node_path in PRIVATE_FILES:
        return 0o600
    return 0o755 if node_path in EXECUTABLES else 0o644


def modes(root: Path) -> dict[str, tuple[bool, int]]:
    """Every entry under ``root`` but symlinks: node path -> (is a directory, permission bits)."""
    found = {}
    for parent, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(parent, name)
            info = path.lstat()
            if not stat.S_ISLNK(info.st_mode):
                found["/" + str(path.relative_to(root))] = (
                    stat.S_ISDIR(info.st_mode),
                    stat.S_IMODE(info.st_mode),
                )
    return found


@pytest.mark.parametrize(
    ("umask", "args"),
    [
        pytest.param(0o000, ("--engine", "podman", "--precreate", "--as-nvidia-hook"), id="podman-umask-000"),
        pytest.param(0o002, ("--engine", "podman", "--precreate", "--as-nvidia-hook"), id="podman-umask-002"),
        pytest.param(0o000, ("--engine", "containerd"), id="containerd-umask-000"),
        pytest.param(0o077, ("--engine", "containerd"), id="containerd-umask-077"),
        pytest.param(
            0o000,
            ("--engine", "containerd", "--nri", "--nri-python", NODE_PYTHON),
            id="containerd-nri-unit-umask-000",
        ),
        pytest.param(0o000, ("--engine", "crio"), id="crio-umask-000"),
        pytest.param(0o002, ("--engine", "docker", "--as-nvidia-hook"), id="docker-umask-002"),
    ],
)
def test_every_mode_install_writes_is_the_one_it_means_under_any_umask(
    tmp_path: Path, umask: int, args: tuple[str, ...]
) -> None:
    """Under umask 000 (or 002, or a strict 077) every file and directory install writes -- wrappers,
    hooks.d JSON, drop-ins, tmpfiles.d, the manifest, the version tree and the byte-compiled caches in it --
    has exactly install's mode: nothing group- or world-writable, the tree readable by the engines."""
    root = make_node(tmp_path)
    before = modes(root)
    install_under(root, umask, *args)
    written = {path: found for path, found in modes(root).items() if path not in before}
    if "--nri" in args:
        assert written[UNIT_PATH] == (False, 0o644)
    caches = [path for path in written if path.endswith(".pyc")]
    assert caches, "the tree was not byte-compiled"
    assert any("/__pycache__" in path for path, (is_dir, _) in written.items() if is_dir)
    wrong = {
        path: f"{mode:04o} (meant {meant_mode(path, is_dir):04o})"
        for path, (is_dir, mode) in written.items()
        if mode != meant_mode(path, is_dir)
    }
    assert wrong == {}


def start_under_umask_000(command: list[str], tree: Path) -> None:
    """Run ``gpu-env-hook --version`` from ``tree`` as the engines start it (``PYTHON_FLAGS``), under umask 000."""
    code = build_code("hook.__main__", "gpu-env-hook", tree=str(tree))
    proc = subprocess.run(
        [*command, *PYTHON_FLAGS, "-c", code, "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        umask=0,
    )
    assert proc.returncode == 0, proc.stderr


def test_a_start_never_writes_bytecode_into_the_tree(tmp_path: Path) -> None:
    """A tree install could not compile (its interpreter was not there yet) stays without caches when the
    engines start it under umask 000: the launch flags write no bytecode where root's code lives."""
    root = tmp_path / "node"
    root.mkdir()
    install_under(root, 0o022, "--engine", "podman")
    tree = root / paths.RUNTIME_TREE.lstrip("/")
    assert not list(tree.rglob("__pycache__"))
    start_under_umask_000([PYTHON], tree)
    assert not list(tree.rglob("__pycache__"))


def test_a_start_of_the_tree_interpreter_writes_no_bytecode_either(tmp_path: Path) -> None:
    """The interpreter copied into the tree (``--python tree``) imports its own standard library's
    ``encodings`` before any launch code runs: with its caches gone, a start under umask 000 still writes
    none (``-B``, not only the launch code's own setting)."""
    root = tmp_path / "node"
    root.mkdir()
    install_under(root, 0o022, "--engine", "podman", "--python", "tree")
    tree = root / paths.RUNTIME_TREE.lstrip("/")
    version = (tree / "current").resolve()
    for caches in list(version.rglob("__pycache__")):
        shutil.rmtree(caches)
    start_under_umask_000(bundled_command(str(version / PYTHON_DIR)), tree)
    assert not list(version.rglob("__pycache__"))


def test_install_again_repairs_a_tree_an_earlier_install_left_writable(tmp_path: Path) -> None:
    """A version an earlier build left with a world-writable cache directory (its umask) is put right by
    the next install: modes as meant, and its caches, which anyone could have replaced, written anew."""
    root = make_node(tmp_path)
    install_under(root, 0o022, "--engine", "podman")
    lib = root / paths.RUNTIME_TREE.lstrip("/") / "current/lib"
    caches = lib / "hook/__pycache__"
    planted = next(caches.glob("launcher.*.pyc"))
    caches.chmod(0o777)
    planted.write_bytes(b"replaced by a local user")
    proc = install(root, "--engine", "podman")
    version = (root / paths.RUNTIME_TREE.lstrip("/") / "current").resolve()
    assert (
        f"fixed the modes of {version} (others could write to part of it) and replaced its byte-compiled "
        "caches" in proc.stdout.splitlines()
    )
    assert stat.S_IMODE(caches.stat().st_mode) == 0o755
    assert planted.read_bytes() != b"replaced by a local user"
    assert not [path for path in version.rglob("*") if path.lstat().st_mode & 0o022 and not path.is_symlink()]


def test_doctor_reports_a_tree_that_is_loose_or_not_compiled(tmp_path: Path) -> None:
    """doctor's runtime-tree check: ✓ for what install wrote with the interpreter there; a tree without
    caches (a start does not write them) and one with an entry others can write are each named."""
    from hook.commands.doctor import run_checks

    def tree_check(root: Path) -> tuple[bool | None, str, str]:
        (check,) = [
            check
            for check in run_checks(root=str(root), config=None, environ={})
            if check.name == "runtime tree"
        ]
        return check.ok, check.detail, check.fix

    compiled = make_node(tmp_path / "compiled")
    install_under(compiled, 0o022, "--engine", "podman")
    version = (
        paths.RUNTIME_TREE + "/" + str((compiled / paths.RUNTIME_TREE.lstrip("/") / "current").readlink())
    )
    assert tree_check(compiled)[:2] == (True, f"{version}: root-owned, writable by root alone, byte-compiled")
    (compiled / version.lstrip("/") / "lib/hook/__pycache__").chmod(0o777)
    assert tree_check(compiled) == (
        False,
        (
            f"{version}/lib/hook/__pycache__ must not be group- or world-writable (mode 0777): whoever can "
            "write there runs code as root"
        ),
        "gpu-env-hook install again (it sets the tree's modes and writes its caches anew)",
    )
    plain = tmp_path / "plain"
    plain.mkdir()
    install_under(plain, 0o022, "--engine", "podman")
    assert tree_check(plain) == (
        False,
        f"{version} is not byte-compiled: every start compiles the package",
        "gpu-env-hook install again once the interpreter the engines run is on the node",
    )


def test_the_tree_interpreter_gets_the_modes_install_means_under_umask_000(tmp_path: Path) -> None:
    """``--python tree`` (the interpreter copied into the version, with its loader and standard library):
    under umask 000 every mode in the version is what it is under umask 022, nothing in it is group- or
    world-writable, and the interpreter stays executable."""
    found = {}
    for umask in (0o000, 0o022):
        root = tmp_path / f"umask-{umask:03o}"
        root.mkdir()
        install(root, "--python", "tree", "--engine", "podman", umask=umask)
        found[umask] = {
            path: mode for path, mode in modes(root).items() if path.startswith(paths.RUNTIME_TREE + "/")
        }
    assert found[0o000] == found[0o022]
    assert [path for path, (_, mode) in found[0o000].items() if mode & 0o022] == []
    executables = [path for path, (is_dir, mode) in found[0o000].items() if not is_dir and mode == 0o755]
    assert any(path.endswith("/bin/python3." + str(sys.version_info[1])) for path in executables), executables
    assert any(path.endswith(".pyc") for path in found[0o000])

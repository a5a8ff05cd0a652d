"""The self-contained runtime tree: the node's own copy of the hot-path package, under ``/opt/gpu-env-hook``.

The engines start our Python on every container start, long after ``install`` ran: what they start must
depend on neither a checkout nor a development venv (``make clean``, a deleted checkout or a venv rebuilt
for another Python must not break a node). So ``install`` copies the package into a tree of its own::

    /opt/gpu-env-hook/
        0.1.0-1a2b3c4d5e6f/          one version: <package version>-<digest of its files>
            lib/hook/...             the package (pure Python: no site-packages, no dependency needed)
            .gpu-env-hook-tree       what this directory is (only such directories are ever removed)
        current -> 0.1.0-1a2b3c4d5e6f

and the wrappers and hooks JSON start ``<python> -I -S -B -X utf8 -c <launch code>`` (``hook.launcher``),
which reads ``current`` once and puts that version's ``lib`` on ``sys.path``. A version directory is named by
its content, so it is never rewritten while something runs from it: a new version is built under a temporary
name, renamed into place whole, and ``current`` is switched by an atomic rename of a new symlink. The version
``current`` pointed at before stays (a create that started just before the switch still imports from it);
older ones are removed. Nothing else in the directory (a DaemonSet's interpreter, say) is touched.

When the interpreter the engines run is there at install, it byte-compiles the new version (``compileall``
with the node paths as file names) before the rename. Without it (an interpreter that is not there yet),
every start compiles in memory: a start never writes bytecode into the tree (``-B``, ``hook.launcher``).
Whatever install puts into a version, and whatever made it, gets its mode from one place before the rename
(``settle_modes``: directories 0755, files 0644 or 0755, owned by root), so the caller's umask never
reaches the tree; a version install keeps that was not so (an earlier release under a loose umask) is
settled and its caches written anew (``repair_version``).

Versions written by earlier releases also held ``lib/hook.frozen`` (precompiled modules served by a finder
of their own); install removes it from the versions it keeps (``STALE_BLOB``): a version without it imports
its modules the usual way.

The hot path imports only the standard library (``tests/test_import_guard.py``); ``RUNTIME_DEPENDENCIES``
names the third-party top-level packages a container start may still need, copied beside ``hook``: PyYAML,
which the shim's CDI mode imports only when a spec is YAML (``nvidia-ctk cdi generate`` writes YAML by
default; without it such a spec cannot be read). Its optional C extension is copied too and used only when
it matches the node's interpreter (PyYAML falls back to its pure-Python loader otherwise).
"""

import contextlib
import errno
import hashlib
import os
import stat
import subprocess
from typing import NamedTuple

from hook import __version__
from hook.install.bundle import STDLIB, BundledFile, collect_bundle, find_loader, interpreter
from hook.install.common import InstallError, check_trusted
from hook.install.rootfs import NodeRoot, could_not
from hook.launcher import CURRENT, LIB, TREE_PYTHON
from hook.util import atomicwrite, paths
from hook.util.safetext import os_reason

TREE_MARK = ".gpu-env-hook-tree"
# What versions of earlier releases held beside the package: removed from every version install keeps.
STALE_BLOB = f"{LIB}/hook.frozen"
# Third-party top-level packages a container start may import (copied into lib/ beside hook).
RUNTIME_DEPENDENCIES: tuple[str, ...] = ("yaml",)
_SKIPPED_DIRS = ("__pycache__",)
_SKIPPED_SUFFIXES = (".pyc", ".pyo")
FILE_MODE = 0o644
EXECUTABLE_FILE_MODE = 0o755
DIR_MODE = 0o755


class TreeContent(NamedTuple):
    """The files of one version (relative to its directory, ``lib/hook/...``) and the version's name; with
    ``install --python tree``, the interpreter's files too (``python/...``, copied from where they are)."""

    name: str
    files: tuple[tuple[str, bytes], ...]
    bundled: "tuple[BundledFile, ...]" = ()


def package_dirs() -> list[tuple[str, str]]:
    """Return (top-level name, directory on disk) of ``hook`` and each runtime dependency."""
    import importlib

    found = []
    for name in ("hook", *RUNTIME_DEPENDENCIES):
        module = importlib.import_module(name)
        where = os.path.dirname(os.path.abspath(module.__file__ or ""))
        found.append((name, where))
    return found


def collect_tree(*, bundle: bool = False) -> TreeContent:
    """Read the package files this process runs from (``bundle``: and find its interpreter's,
    ``hook.install.bundle``); name the version by their digest."""
    files: list[tuple[str, bytes]] = []
    for name, directory in package_dirs():
        for parent, dirs, names in os.walk(directory):
            dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
            for file_name in sorted(names):
                if file_name.endswith(_SKIPPED_SUFFIXES):
                    continue
                path = os.path.join(parent, file_name)
                relative = os.path.relpath(path, directory)
                with open(path, "rb") as fh:
                    files.append((f"{LIB}/{name}/{relative}", fh.read()))
    bundled: list[BundledFile] = []
    if bundle:
        extensions = [
            os.path.join(directory, relative[len(f"{LIB}/{name}/") :])
            for name, directory in package_dirs()
            for relative, _ in files
            if relative.startswith(f"{LIB}/{name}/") and relative.endswith(".so")
        ]
        bundled = collect_bundle(extensions)
    digest = hashlib.sha256()
    for relative, data in files:
        digest.update(relative.encode() + b"\0" + hashlib.sha256(data).digest())
    for item in bundled:
        with open(item.source, "rb") as fh:
            data = fh.read()
        digest.update(f"{item.path}\0{item.mode:o}\0{item.mtime_ns}".encode() + hashlib.sha256(data).digest())
    return TreeContent(f"{__version__}-{digest.hexdigest()[:12]}", tuple(files), tuple(bundled))


def editable_warning() -> str | None:
    """Say so when this package is an editable install (a checkout): the node gets a copy of it as it is."""
    import json
    from importlib import metadata

    try:
        text = metadata.distribution("gpu-env-hook").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        text = None
    editable = False
    if text:
        with contextlib.suppress(ValueError):
            editable = bool(json.loads(text).get("dir_info", {}).get("editable"))
    if not editable:
        return None
    import hook

    source = os.path.dirname(os.path.dirname(os.path.abspath(hook.__file__ or "")))
    return (
        f"warning: gpu-env-hook is an editable install ({source}): the node gets a copy of that checkout as "
        "it is now, not a released version; install from a wheel on production nodes"
    )


def ensure_directory(node: NodeRoot, directory: str) -> list[str]:
    """Create ``directory`` and its missing parents (0755) beneath the root; return the node paths created."""
    missing = []
    current = directory
    while current not in ("", "/") and not node.is_dir(current):
        missing.append(current)
        current = os.path.dirname(current)
    for path in reversed(missing):
        node.mkdir(path, DIR_MODE)
    return list(reversed(missing))


def write_tree(
    node: NodeRoot, content: TreeContent, tree: str = paths.RUNTIME_TREE, *, compile_with: str | None
) -> list[str]:
    """Put ``content`` at ``<tree>/<name>`` (unless it is there already), switch ``current`` to it, and
    remove versions older than the one ``current`` named before. ``compile_with``: an interpreter (as seen
    from here) that byte-compiles the new version; None leaves that to the first start. Return the report."""
    lines = [f"created directory {node.show(path)}" for path in ensure_directory(node, tree)]
    version = f"{tree}/{content.name}"
    if not node.is_dir(version):
        build_version(node, tree, content, compile_with=compile_with)
        lines.append(f"wrote {node.show(version)} (the package the engines run)")
    previous = current_version(node, tree)
    if previous != content.name:
        node.symlink_atomic(f"{tree}/{CURRENT}", content.name)
        lines.append(f"switched {node.show(tree + '/' + CURRENT)} to {content.name}")
    keep = {content.name, previous}
    for name in sorted(filter(None, keep)):
        if node.is_dir(f"{tree}/{name}"):
            lines += repair_version(node, tree, name, compile_with=compile_with)
        if node.lstat(f"{tree}/{name}/{STALE_BLOB}") is not None:
            node.unlink(f"{tree}/{name}/{STALE_BLOB}")
            lines.append(f"removed {node.show(f'{tree}/{name}/{STALE_BLOB}')} (no longer used)")
    lines += [
        f"removed {node.show(tree + '/' + old)} (an older version)"
        for old in remove_versions(node, tree, keep)
    ]
    return lines


def current_version(node: NodeRoot, tree: str) -> str | None:
    """Return the version directory ``current`` names (None: no link)."""
    found = node.lstat(f"{tree}/{CURRENT}")
    if found is None or not stat.S_ISLNK(found.st_mode):
        return None
    return os.path.basename(node.readlink(f"{tree}/{CURRENT}").rstrip("/"))


def build_version(node: NodeRoot, tree: str, content: TreeContent, *, compile_with: str | None) -> None:
    """Write the version under a temporary name in ``tree`` and rename it into place whole."""
    where = node.show(f"{tree}/{content.name}")
    try:
        with node.parent(f"{tree}/{content.name}") as (parent, name):
            tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
            os.mkdir(tmp, DIR_MODE, dir_fd=parent)
            try:
                top = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
                try:
                    os.fchmod(top, DIR_MODE)
                    _write_files(top, content)
                    if compile_with is not None:
                        _compile_version(compile_with, top, f"{tree}/{content.name}")
                    settle_modes(top)
                finally:
                    os.close(top)
                os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                _remove_all(parent, tmp)
                raise
    except OSError as err:
        raise could_not("write", where, err) from None


def _write_files(top: int, content: TreeContent) -> None:
    """Write every file (and the directories on the way) below the directory ``top``, then the marker."""
    made: set[str] = set()
    for item in content.bundled:
        _make_parents(top, item.path, made)
        with open(item.source, "rb") as fh:
            data = fh.read()
        fd = atomicwrite.create(item.path, top)
        try:
            atomicwrite.fill(fd, data, mode=item.mode)
            os.utime(fd, ns=(item.mtime_ns, item.mtime_ns))
        finally:
            os.close(fd)
    for relative, data in (*content.files, (TREE_MARK, f"gpu-env-hook {content.name}\n".encode())):
        _make_parents(top, relative, made)
        fd = atomicwrite.create(relative, top)
        try:
            atomicwrite.fill(fd, data, mode=FILE_MODE)
        finally:
            os.close(fd)


def settle_modes(top: int) -> bool:
    """Give the directory ``top`` and everything below it the mode install means, whatever made it and under
    whatever umask (the files written here, the caches ``compileall`` made, anything else copied in):
    directories ``DIR_MODE``, files ``EXECUTABLE_FILE_MODE`` when any execute bit is set, else
    ``FILE_MODE`` (no set-id bit, nothing group- or world-writable), owned by root when install runs as
    root. Symlinks are left as they are (their own mode means nothing); nothing else (a FIFO, a device)
    belongs in a version and is refused. Return whether anything was not so already."""
    info = os.fstat(top)
    if stat.S_ISDIR(info.st_mode):
        meant = DIR_MODE
    elif stat.S_ISREG(info.st_mode):
        meant = EXECUTABLE_FILE_MODE if info.st_mode & 0o111 else FILE_MODE
    else:
        raise OSError(errno.EINVAL, "a version holds only files, directories and symlinks")
    changed = stat.S_IMODE(info.st_mode) != meant
    if os.geteuid() == 0 and (info.st_uid, info.st_gid) != (0, 0):
        os.fchown(top, 0, 0)
        changed = True
    if changed:
        os.fchmod(top, meant)
    if stat.S_ISDIR(info.st_mode):
        for name in os.listdir(top):
            if stat.S_ISLNK(os.stat(name, dir_fd=top, follow_symlinks=False).st_mode):
                continue
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=top)
            try:
                changed = settle_modes(fd) or changed
            finally:
                os.close(fd)
    return changed


def repair_version(node: NodeRoot, tree: str, name: str, *, compile_with: str | None) -> list[str]:
    """Settle the modes of a version install keeps (``settle_modes``). One that was not as meant (an
    earlier install under a loose umask left its caches writable by others) cannot be trusted to hold what
    install compiled: its caches are removed and, with ``compile_with``, written again. Return the report."""
    where = node.show(f"{tree}/{name}")
    try:
        with node.parent(f"{tree}/{name}") as (parent, leaf):
            top = os.open(leaf, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            try:
                if not settle_modes(top):
                    return []
                _remove_caches(top)
                if compile_with is not None:
                    _compile_version(compile_with, top, f"{tree}/{name}")
                    settle_modes(top)
            finally:
                os.close(top)
    except OSError as err:
        raise could_not("repair", where, err) from None
    return [
        f"fixed the modes of {where} (others could write to part of it) and replaced its byte-compiled caches"
    ]


def _remove_caches(top: int) -> None:
    """Remove every ``__pycache__`` directory below the directory ``top``."""
    for name in os.listdir(top):
        if not stat.S_ISDIR(os.stat(name, dir_fd=top, follow_symlinks=False).st_mode):
            continue
        if name in _SKIPPED_DIRS:
            _remove_all(top, name)
            continue
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=top)
        try:
            _remove_caches(fd)
        finally:
            os.close(fd)


def _make_parents(top: int, relative: str, made: set[str]) -> None:
    """Create the directories on the way to ``relative`` below ``top`` (0755), once each."""
    parts = relative.split("/")
    for depth in range(1, len(parts)):
        directory = "/".join(parts[:depth])
        if directory not in made:
            os.mkdir(directory, DIR_MODE, dir_fd=top)
            os.chmod(directory, DIR_MODE, dir_fd=top)
            made.add(directory)


def _compile_version(python: str, top: int, node_version: str) -> None:
    """Byte-compile the version open as ``top`` (its node path ``node_version``): the package, and the
    standard library of the interpreter copied into it (``install --python tree``) when it holds one."""
    for part in (LIB, STDLIB):
        if os.path.isdir(f"/proc/self/fd/{top}/{part}"):
            _compile(python, f"/proc/self/fd/{top}/{part}", f"{node_version}/{part}", top)


def _compile(python: str, lib: str, node_lib: str, top: int) -> bool:
    """Byte-compile ``lib`` with the interpreter the engines run (its own cache tags), naming the files by
    their node paths; a failure only leaves the compiling to the first start. Return whether it succeeded."""
    return _run_node_python(python, ["-m", "compileall", "-q", "-d", node_lib, lib], top)


def _run_node_python(python: str, args: list[str], top: int) -> bool:
    """Run ``python -I -S -X utf8 ARGS`` quietly, with the directory ``top`` open in it; return success."""
    try:
        proc = subprocess.run(
            [python, "-I", "-S", "-X", "utf8", *args],
            env={"PATH": paths.FIXED_PATH},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
            check=False,
            pass_fds=(top,),
            umask=0o022,  # what it creates is settled after (settle_modes); this keeps the window closed too
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def remove_versions(node: NodeRoot, tree: str, keep: set[str | None]) -> list[str]:
    """Remove the version directories of ``tree`` (those holding our marker) not in ``keep``; return them."""
    removed = []
    try:
        with node.parent(f"{tree}/{CURRENT}") as (parent, _):
            fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=parent)
            try:
                names = sorted(os.listdir(fd))
            finally:
                os.close(fd)
            for name in names:
                if name in keep or not _is_version(parent, name):
                    continue
                _remove_all(parent, name)
                removed.append(name)
    except FileNotFoundError:
        return []
    except OSError as err:
        raise could_not("clean", node.show(tree), err) from None
    return removed


def remove_tree(node: NodeRoot, tree: str = paths.RUNTIME_TREE) -> list[str]:
    """Remove ``current`` and every version directory of ``tree`` (the directory itself, when install created
    it, goes with the manifest's directories)."""
    if not node.is_dir(tree):
        return []
    found = node.lstat(f"{tree}/{CURRENT}")
    lines = []
    if found is not None and stat.S_ISLNK(found.st_mode):
        node.unlink(f"{tree}/{CURRENT}")
        lines.append(f"removed {node.show(tree + '/' + CURRENT)}")
    lines += [f"removed {node.show(tree + '/' + name)}" for name in remove_versions(node, tree, set())]
    return lines


def _is_version(parent: int, name: str) -> bool:
    """Tell whether ``name`` in the directory ``parent`` is a version directory install wrote."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        return stat.S_ISDIR(st.st_mode) and os.path.exists(f"/proc/self/fd/{parent}/{name}/{TREE_MARK}")
    except OSError:
        return False


def _remove_all(parent: int, name: str) -> None:
    """Remove the directory ``name`` in ``parent`` and everything below it, never following a symlink."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except FileNotFoundError:
        return
    except OSError:
        os.unlink(name, dir_fd=parent)
        return
    try:
        for entry in os.listdir(fd):
            st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                _remove_all(fd, entry)
            else:
                os.unlink(entry, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def check_interpreter(python: str, root: str) -> list[str]:
    """Refuse an interpreter that is not an executable file on the node (root ``/``), or older than 3.11;
    under another root, warn when it is not there yet (a DaemonSet may put it there later). ``tree``: the
    interpreter running install, copied into the tree (``hook.install.bundle``), must be one it can copy."""
    if python == TREE_PYTHON:
        find_loader(interpreter())
        return []
    if not python.startswith("/"):
        raise InstallError(f"--python {python}: must be an absolute path")
    node = NodeRoot(root)
    found = node.stat(python)
    there = found is not None and stat.S_ISREG(found.st_mode) and bool(found.st_mode & 0o111)
    if root not in ("", "/"):
        if there:
            check_trusted("--python", python, root)
        return (
            [] if there else [f"warning: no executable at {node.show(python)} yet; the engines run {python}"]
        )
    if not there:
        raise InstallError(f"--python {python}: no executable file there")
    check_trusted("--python", python, root)
    probe = "import sys; sys.stdout.write('%d.%d' % sys.version_info[:2])"
    try:
        proc = subprocess.run(
            [python, "-I", "-S", "-c", probe],
            env={"PATH": paths.FIXED_PATH},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except OSError as err:
        raise InstallError(f"--python {python}: cannot run it: {os_reason(err, go=True)}") from None
    except subprocess.TimeoutExpired:
        raise InstallError(f"--python {python}: cannot run it: no answer within 60 seconds") from None
    major, _, minor = proc.stdout.partition(".")
    if (
        proc.returncode != 0
        or not (major.isdigit() and minor.isdigit())
        or (int(major), int(minor)) < (3, 11)
    ):
        got = proc.stdout or "no version"
        raise InstallError(f"--python {python}: must be Python 3.11 or later, got {got}")
    return []

"""Writing a file so that a reader sees the old or the new one, never a mix; removing one only if the file
that goes is the one judged; and the temp files a killed writer left behind.

config.json (the hook, the shim, precreate), env files (the producer), CDI specs and install's files
beneath ``--root`` are all replaced the same way: a temp file beside the target, locked while it lives,
fsync'd, renamed over the target, then the directory fsync'd (config.json without the two fsyncs: see
``hook.pipeline.bundle.write_spec``); install's ``current`` link is replaced by a temp link of the same
name shape (``symlink_atomic``). Kept apart from ``hook.pipeline.bundle`` so that reading a spec
(every container) does not load the writing code (only a container whose spec is rewritten does).
"""

import posix

from hook.util import paths

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


def write_atomic(
    path: str,
    data: bytes,
    *,
    mode: int | None = None,
    owner: tuple[int, int] | None = None,
    durable: bool = True,
    dir_fd: int | None = None,
) -> None:
    """Write ``data`` to ``path`` so a reader sees the old or the new file, never a mix.

    The mode is kept from the file replaced (or ``mode``, else 0o644); ``owner`` is a (uid, gid) to give
    the file before it appears; the temp file goes on failure. The temp file is locked (``lockf``) from
    just after its creation until it is renamed, which tells a later writer that it is live; the temp
    files a killed writer left for this same path are removed first (``remove_stale_temps``). ``durable``
    (the default) fsyncs the file before the rename and the directory after it, so that the new file also
    survives a crash of the node; a reader never sees a mix either way. With ``dir_fd`` (a descriptor of
    the directory, ``O_PATH`` is enough), ``path`` is a name in that directory and no path is resolved at
    all: install's writes beneath ``--root`` (``hook.install.rootfs``) go through here that way.
    """
    if dir_fd is None:
        directory, name = paths.dirname(path) or ".", paths.basename(path)
        parent = posix.open(directory, posix.O_RDONLY | posix.O_DIRECTORY | posix.O_CLOEXEC)
    else:
        name = path
        parent = posix.open(".", posix.O_RDONLY | posix.O_DIRECTORY | posix.O_CLOEXEC, dir_fd=dir_fd)
    try:
        remove_stale_temps(parent, name)
        if mode is None:
            try:
                mode = posix.stat(name, dir_fd=parent).st_mode & 0o7777
            except FileNotFoundError:
                mode = 0o644
        tmp = _temp_name(name)
        fd = create(tmp, parent)
        try:
            try:
                _lock(fd)
                fill(fd, data, mode=mode, owner=owner, durable=durable)
                posix.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
            finally:
                posix.close(fd)  # releases the lock, after the rename
        except BaseException:
            _discard(tmp, parent)
            raise
        if durable:
            posix.fsync(parent)
    finally:
        posix.close(parent)


def symlink_atomic(name: str, target: str, *, dir_fd: int) -> None:
    """Replace ``name`` in the directory ``dir_fd`` with a symlink to ``target`` as ``write_atomic`` replaces
    a file: a temp link of the same name shape beside it, renamed over it, then the directory fsync'd."""
    parent = posix.open(".", posix.O_RDONLY | posix.O_DIRECTORY | posix.O_CLOEXEC, dir_fd=dir_fd)
    try:
        tmp = _temp_name(name)
        posix.symlink(target, tmp, dir_fd=parent)
        try:
            posix.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            _discard(tmp, parent)
            raise
        posix.fsync(parent)
    finally:
        posix.close(parent)


def remove_if(name: str, dir_fd: int, still: "Callable[[int], bool]") -> bool:
    """Remove ``name`` from the directory ``dir_fd`` if ``still``, given a read descriptor of the very file
    that would go, says it should; return whether it went (False also when ``name`` is not there).

    Linux has no unlink by descriptor, and a writer may rename a new file over ``name`` between a caller's
    judgement and an unlink by name. So the entry is first renamed aside to a temp name of this directory
    (the shape ``write_atomic`` gives its temps, locked while it lives): whatever a writer renames over
    ``name`` from then on is a new entry, never touched here. ``still`` judges the file at the private name,
    which no writer can replace; if it should go it is unlinked, else it is linked back under ``name`` (no
    link ever replaces an entry: a file a writer put there meanwhile is newer and stays, as its own rename
    would have replaced this one) and the private name removed. An error (``still`` raising too) puts the
    file back first. Writers that replace the file in place are judged by what they finished writing before
    ``still`` reads.
    """
    aside = _temp_name(name)
    try:
        posix.rename(name, aside, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    fd = -1
    gone = False
    try:
        flags = posix.O_RDWR | posix.O_NOFOLLOW | posix.O_NONBLOCK | posix.O_CLOEXEC | posix.O_NOCTTY
        fd = posix.open(aside, flags, dir_fd=dir_fd)
        _lock(fd)  # a writer's remove_stale_temps keeps it while we decide
        gone = still(fd)
    finally:
        try:
            if gone:
                posix.unlink(aside, dir_fd=dir_fd)
            else:
                _put_back(aside, name, dir_fd)
        finally:
            if fd >= 0:
                posix.close(fd)
    return gone


def _put_back(aside: str, name: str, dir_fd: int) -> None:
    """Give ``remove_if``'s file its name back, never replacing what a writer put there meanwhile."""
    if posix.lstat(aside, dir_fd=dir_fd).st_mode & 0o170000 == 0o040000:  # a directory cannot be linked,
        posix.rename(aside, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # and renames over no file
        return
    try:  # noqa: SIM105 - contextlib costs ~5 ms on the hook's path
        posix.link(aside, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        pass  # a writer's newer file: it stays, as its own rename would have replaced this one
    posix.unlink(aside, dir_fd=dir_fd)


def _temp_name(name: str) -> str:
    """A new temp name for ``name``: ``.<name>.<pid>.<8 hex digits>.tmp`` (``parse_temp_name`` reads it)."""
    return f".{name}.{posix.getpid()}.{posix.urandom(4).hex()}{TEMP_SUFFIX}"


def _discard(tmp: str, dir_fd: int) -> None:
    """Remove a temp entry after a failed replace; one already gone is fine."""
    try:  # noqa: SIM105 - contextlib costs ~5 ms on the hook's path
        posix.unlink(tmp, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def create(name: str, dir_fd: int) -> int:
    """Create ``name`` in the directory ``dir_fd`` for writing: a new file (never an existing one, never
    through a symlink), mode 0o600 until ``fill`` gives it its own."""
    flags = posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_CLOEXEC | posix.O_NOFOLLOW
    return posix.open(name, flags, 0o600, dir_fd=dir_fd)


def fill(
    fd: int, data: bytes, *, mode: int, owner: tuple[int, int] | None = None, durable: bool = True
) -> None:
    """The write step every file we write takes: owner, mode, all of ``data``, then (``durable``) fsync."""
    if owner is not None:
        posix.fchown(fd, *owner)
    posix.fchmod(fd, mode)
    view = memoryview(data)
    while view:
        view = view[posix.write(fd, view) :]
    if durable:
        posix.fsync(fd)


# --- temp files a killed writer left behind ---------------------------------------------------------------

TEMP_SUFFIX = ".tmp"
# A temp file whose writer's pid is alive here is kept this long even when unlocked (the instant between
# its creation and its lock, or a writer on a file system without locks).
STALE_AFTER_SECONDS = 600
_HEX_DIGITS = frozenset("0123456789abcdef")


def parse_temp_name(entry: str, name: str) -> int | None:
    """Return the writer's pid if ``entry`` is exactly ``.<name>.<pid>.<8 hex digits>.tmp``, else None."""
    prefix = f".{name}."
    if not (entry.startswith(prefix) and entry.endswith(TEMP_SUFFIX)):
        return None
    pid_text, dot, hex_text = entry[len(prefix) : -len(TEMP_SUFFIX)].partition(".")
    if not (dot and pid_text.isascii() and pid_text.isdigit() and not pid_text.startswith("0")):
        return None
    if len(hex_text) != 8 or not _HEX_DIGITS.issuperset(hex_text):
        return None
    return int(pid_text)


def remove_stale_temps(dir_fd: int, name: str) -> None:
    """Remove this name's temp files in the directory ``dir_fd`` that no live writer holds; never a name of
    another shape.

    A temp file goes only if its name is exactly ours for ``name``, nobody holds its lock (a writer holds
    it from creation to rename; the kernel drops it when the writer dies), and its pid is not alive here
    or it is older than ``STALE_AFTER_SECONDS``. Best effort: a failure here never stops the write.
    """
    try:
        entries = posix.listdir(dir_fd)
    except OSError:
        return
    for entry in entries:
        pid = parse_temp_name(entry, name)
        if pid is not None:
            _remove_if_stale(dir_fd, entry, pid)


def _remove_if_stale(dir_fd: int, entry: str, pid: int) -> None:
    """Unlink ``entry`` if it is a regular file whose lock is free and whose writer is gone."""
    flags = posix.O_WRONLY | posix.O_NOFOLLOW | posix.O_NONBLOCK | posix.O_CLOEXEC | posix.O_NOCTTY
    try:
        fd = posix.open(entry, flags, dir_fd=dir_fd)
    except OSError:
        return
    try:
        info = posix.fstat(fd)
        if info.st_mode & 0o170000 != 0o100000:  # not a regular file (stat.S_ISREG)
            return
        try:
            posix.lockf(fd, posix.F_TLOCK, 0)
        except OSError:
            return  # a live writer holds it
        import time

        if _pid_alive(pid) and time.time() - info.st_mtime < STALE_AFTER_SECONDS:
            return
        posix.unlink(entry, dir_fd=dir_fd)
    except OSError:
        return
    finally:
        posix.close(fd)


def _pid_alive(pid: int) -> bool:
    """Tell whether a process with this pid exists in our pid namespace."""
    try:
        posix.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists
        return True
    return True


def _lock(fd: int) -> None:
    """Lock the temp file for as long as it is open; a file system without locks only loses the hint."""
    try:  # noqa: SIM105 - contextlib costs ~5 ms on the hook's path
        posix.lockf(fd, posix.F_TLOCK, 0)
    except OSError:
        pass

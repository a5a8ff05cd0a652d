"""The decoded YAML CDI specs a create has read before, so that the next one imports no YAML parser.

A YAML spec costs PyYAML's import (~35 ms) and its parse on every create; a JSON spec costs neither (the
C JSON scanner). So, per YAML spec path, this cache keeps the document the spec decoded to, once it passed
validation, as JSON, with the identity of the file it came from: device, inode, size, mtime and ctime (in
nanoseconds). A user can set a file's mtime back, not its ctime; any write moves the ctime. On a hit the
document is validated again exactly as a decoded one (``hook.cdi.spec.build_spec``), so the verdict is the
one without the cache. On any doubt the spec is decoded and its entry rewritten:

* the directory must be root's, mode 0700, not a symlink; an entry a regular file, root's, mode 0600,
  opened without following a symlink; a process that is not root uses no cache at all;
* an entry must be JSON of this format and package version, naming this spec path and identity exactly;
* a spec whose ctime is less than ``SETTLE_NS`` before it was read is not stored: a write in the same
  timestamp tick, after the read, would leave the identity unchanged (git's "racily clean" index entry).

The directory is ``[gpu-env.cdi] spec-cache`` (default ``/run/gpu-env-hook/cdi-specs``, on a tmpfs: it
goes at the node's next boot); ``""`` turns the cache off. Entries are written by ``util/atomicwrite``
beneath the checked directory's descriptor. A cache failure never fails a create: the spec is decoded.
"""

import posix

from hook import __version__
from hook.util import paths
from hook.util.safetext import os_reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FORMAT = 1
SETTLE_NS = 1_000_000_000
MAX_ENTRY_BYTES = 1024 * 1024
MAX_NAME = 240
ENTRY_SUFFIX = ".json"
_DIR_FLAGS = posix.O_RDONLY | posix.O_DIRECTORY | posix.O_NOFOLLOW | posix.O_CLOEXEC
_FILE_FLAGS = posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_NONBLOCK | posix.O_CLOEXEC


def identity(info: posix.stat_result) -> list[int]:
    """A spec file's identity: what changes whenever its content may have."""
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def entry_name(path: str) -> str | None:
    """The entry's file name for a spec path: the path with ``%`` and ``/`` escaped (one entry per path,
    never two paths on one name); None for a relative path or one too long to name."""
    name = path.replace("%", "%25").replace("/", "%2F") + ENTRY_SUFFIX
    return name if path.startswith("/") and len(name) <= MAX_NAME else None


def lookup(directory: str, path: str, key: list[int]) -> "dict[str, Any] | None":
    """The document cached for ``path`` with identity ``key``, or None (no entry, or any doubt about it)."""
    name = entry_name(path)
    if not directory or name is None or posix.geteuid() != 0:
        return None
    from hook.util.jsontext import decode

    try:
        dir_fd = _open_directory(directory, create=False)
        if dir_fd is None:
            return None
        try:
            data = _read_entry(dir_fd, name)
        finally:
            posix.close(dir_fd)
        entry = decode(data.decode("utf-8")) if data is not None else None
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(entry, dict):
        return None
    expected = {"format": FORMAT, "version": __version__, "path": path, "identity": key}
    if any(entry.get(field) != value for field, value in expected.items()):
        return None
    document = entry.get("document")
    return document if isinstance(document, dict) else None


def store(directory: str, path: str, key: list[int], document: "dict[str, Any]", *, read_at_ns: int) -> None:
    """Write the entry for ``path`` (a spec read at ``read_at_ns`` with identity ``key`` that decoded to
    ``document`` and passed validation); nothing when the cache is off or unusable, or the spec is new."""
    name = entry_name(path)
    if not directory or name is None or posix.geteuid() != 0 or read_at_ns - key[4] < SETTLE_NS:
        return
    from hook.util.atomicwrite import write_atomic
    from hook.util.jsontext import encode

    entry = {"format": FORMAT, "version": __version__, "path": path, "identity": key, "document": document}
    try:
        data = encode(entry).encode("utf-8")
        dir_fd = _open_directory(directory, create=True)
        if dir_fd is None:
            return
        try:
            write_atomic(name, data, mode=0o600, durable=False, dir_fd=dir_fd)
        finally:
            posix.close(dir_fd)
    except (OSError, ValueError):
        return


def directory_problem(directory: str) -> str | None:
    """Say why an existing cache directory is not used (not root's, mode not 0700, a symlink); None when it
    is usable or absent (the first YAML spec read creates it)."""
    try:
        info = posix.lstat(directory)
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"cannot be inspected: {os_reason(err)}"
    if info.st_mode & 0o170000 != 0o040000:
        return "is not a directory"
    return _untrusted(info, 0o700)


def _untrusted(info: posix.stat_result, mode: int) -> str | None:
    """Why the owner or mode of the cache directory (``mode`` 0700) or an entry (0600) rules it out: root's
    alone, exactly that mode (the one check, for doctor and for every use)."""
    if info.st_uid != 0:
        return f"must be owned by root (uid 0), is owned by uid {info.st_uid}"
    if info.st_mode & 0o7777 != mode:
        return f"must have mode {mode:04o}, has {info.st_mode & 0o7777:04o}"
    return None


def remove_cache(directory: str, *, dir_fd: int | None = None) -> bool:
    """Remove the cache's entries and temp files from ``directory`` (a name in the directory ``dir_fd``,
    when given), then the directory if that left it empty; never a file of another shape (the directory is
    a setting). Return whether it is gone."""
    try:
        fd = posix.open(directory, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        for name in posix.listdir(fd):
            entry = name.startswith("%2F") and name.endswith(ENTRY_SUFFIX)
            if entry or (name.startswith(".%2F") and name.endswith(".tmp")):
                posix.unlink(name, dir_fd=fd)
        posix.rmdir(directory, dir_fd=dir_fd)
    except OSError:
        return False
    finally:
        posix.close(fd)
    return True


def _open_directory(directory: str, *, create: bool) -> int | None:
    """Open the cache directory if it is root's and mode 0700 (created so, with any missing parent, when
    ``create``); None when it is absent and not created, or not to be trusted."""
    try:
        fd = posix.open(directory, _DIR_FLAGS)
    except FileNotFoundError:
        if not create:
            return None
        _make_directories(directory)
        fd = posix.open(directory, _DIR_FLAGS)
    if _untrusted(posix.fstat(fd), 0o700) is not None:
        posix.close(fd)
        return None
    return fd


def _make_directories(directory: str) -> None:
    """Create ``directory`` and its missing parents, mode 0700."""
    parent = paths.dirname(directory)
    if parent and parent != directory and not paths.exists(parent):
        _make_directories(parent)
    try:  # noqa: SIM105 - contextlib costs ~5 ms on the create path
        posix.mkdir(directory, 0o700)
    except FileExistsError:
        pass


def _read_entry(dir_fd: int, name: str) -> bytes | None:
    """The bytes of the entry ``name`` if it is a regular file, root's, mode 0600 and not too large."""
    try:
        fd = posix.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        info = posix.fstat(fd)
        regular = info.st_mode & 0o170000 == 0o100000
        if not regular or _untrusted(info, 0o600) is not None or info.st_size > MAX_ENTRY_BYTES:
            return None
        data = b""
        while len(data) <= MAX_ENTRY_BYTES:
            chunk = posix.read(fd, MAX_ENTRY_BYTES + 1 - len(data))
            if not chunk:
                return data
            data += chunk
        return None
    finally:
        posix.close(fd)

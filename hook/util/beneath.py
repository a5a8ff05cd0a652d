"""Paths beneath the env-file directories: the one walk the hook (reading) and the producer (writing) share.

A path is accepted only below a configured ``[env-file] directories`` entry, without ``.`` or ``..``; the
configured directory is the administrator's and is opened as named; every component below it is opened
relative to its parent with O_NOFOLLOW, so no symlink is followed anywhere below it, and no FIFO, socket or
device is ever opened. Every refusal is an EnvFileError whose one line names the (escaped) path.
"""

import posix
import stat

from hook.util import paths
from hook.util.errors import EnvFileError, EnvFileMissingError
from hook.util.safetext import escape, os_reason

_WALK_FLAGS = posix.O_PATH | posix.O_DIRECTORY | posix.O_NOFOLLOW | posix.O_CLOEXEC
_OPEN_FLAGS = posix.O_RDONLY | posix.O_NONBLOCK | posix.O_NOFOLLOW | posix.O_CLOEXEC | posix.O_NOCTTY


def show_path(path: str) -> str:
    """Quote a tenant-chosen path for a one-line message (escaped, bounded)."""
    return f"'{escape(path)}'"


def refuse(path: str, reason: str, *, line: int | None = None) -> EnvFileError:
    """Build the one-line refusal for ``path``."""
    where = f"env file {show_path(path)}" + (f" line {line}" if line is not None else "")
    return EnvFileError(f"{where}: {reason}")


def missing(path: str, reason: str) -> EnvFileMissingError:
    """Build the refusal for a file or directory that does not exist (``on-missing`` may ignore it)."""
    return EnvFileMissingError(refuse(path, reason).args[0])


# --- opening ---------------------------------------------------------------------------------------------


def split_beneath(path: str, directories: tuple[str, ...]) -> tuple[str, list[str]]:
    """Return the configured directory that holds ``path`` and the components below it (pure)."""
    if not path.startswith("/"):
        raise refuse(path, "must be an absolute path")
    if "\x00" in path:
        raise refuse(path, "must not contain a NUL character")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError as err:  # a JSON \udc80 escape decodes to a lone surrogate: no file name
        code = ord(path[err.start])
        raise refuse(path, f"holds a lone surrogate (U+{code:04X}), not Unicode text") from None
    parts = [part for part in path.split("/") if part]
    if any(part in (".", "..") for part in parts):
        raise refuse(path, "must not contain '.' or '..' components")
    for directory in directories:
        base = [part for part in paths.normpath(directory).split("/") if part]
        if len(parts) > len(base) and parts[: len(base)] == base:
            return directory, parts[len(base) :]
    raise refuse(path, f"is not inside the env-file directories ({', '.join(directories)})")


def open_beneath(path: str, directories: tuple[str, ...]) -> int:
    """Open ``path`` read-only below a configured directory, following no symlink at any component.

    The configured directory itself is the administrator's and is opened as named; each component below it
    is opened relative to its parent with O_NOFOLLOW, and the file itself is checked with lstat before the
    open so that FIFOs, sockets and device nodes are never opened.
    """
    parent, where, name = _walk_to_parent(path, directories)
    try:
        return _open_leaf(parent, where, name, path)
    finally:
        posix.close(parent)


def open_directory_beneath(path: str, directories: tuple[str, ...]) -> tuple[int, str]:
    """Open the directory that is to hold ``path`` (for writing it), by the same walk as :func:`open_beneath`;
    return an ``O_PATH`` descriptor of it and the file's name in it. The caller closes the descriptor."""
    parent, _, name = _walk_to_parent(path, directories)
    return parent, name


def _walk_to_parent(path: str, directories: tuple[str, ...]) -> tuple[int, str, str]:
    """Walk from the configured directory to the one holding ``path``, no symlink followed; return its
    ``O_PATH`` descriptor, its path (for messages) and the last component's name."""
    directory, components = split_beneath(path, directories)
    try:
        current = posix.open(directory, posix.O_PATH | posix.O_DIRECTORY | posix.O_CLOEXEC)
    except FileNotFoundError:
        raise missing(path, "does not exist (no such directory)") from None
    except OSError as err:
        raise refuse(path, f"cannot open its directory: {os_reason(err)}") from None
    where = directory.rstrip("/") or "/"
    try:
        for depth, name in enumerate(components[:-1], start=1):
            following = _open_component(current, where, name, path, depth)
            posix.close(current)
            current = following
            where = paths.join(where, name)
    except BaseException:
        posix.close(current)
        raise
    return current, where, components[-1]


def _open_component(parent: int, where: str, name: str, path: str, depth: int) -> int:
    """Open one directory component below ``parent`` (the directory ``where``) without following a
    symlink."""
    try:
        return posix.open(name, _WALK_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        raise missing(path, "does not exist (no such directory)") from None
    except OSError as err:
        kind = _kind_at(parent, where, name, path)
        if kind == "a symlink":
            raise refuse(path, f"component {depth} below the env-file directory is a symlink") from None
        if kind is not None and kind != "a directory":
            raise refuse(path, f"component {depth} below the env-file directory is not a directory") from None
        raise refuse(path, f"cannot open component {depth}: {os_reason(err)}") from None


def _open_leaf(parent: int, where: str, name: str, path: str) -> int:
    """Open the file itself: it must be a regular file, and it is re-checked on the descriptor after."""
    kind = _kind_at(parent, where, name, path)
    if kind is None:
        raise missing(path, "does not exist")
    if kind != "a regular file":
        raise refuse(path, f"is {kind}, not a regular file")
    try:
        return posix.open(name, _OPEN_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        raise missing(path, "does not exist") from None
    except OSError as err:
        raise refuse(path, f"cannot open: {os_reason(err)}") from None


def _kind_at(parent: int, where: str, name: str, path: str) -> str | None:
    """Name the type of the entry ``name`` below ``parent`` (lstat); None if it does not exist.

    Looking up a name needs search permission on its directory: without it, the directory is what is
    reported (``cannot enter directory``), not the entry.
    """
    try:
        mode = posix.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None
    except PermissionError as err:
        raise refuse(path, f"cannot enter directory {show_path(where)}: {os_reason(err)}") from None
    except OSError as err:
        raise refuse(path, f"cannot inspect: {os_reason(err)}") from None
    return describe_mode(mode)


def describe_mode(mode: int) -> str:
    """Name a file type for a message."""
    for test, name in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "of an unknown type"


def trust_problem(uid: int, mode: int) -> str | None:
    """Say why a file or directory that changes what runs as root (an env file, a CDI spec, a directory
    holding them) is not to be trusted: not owned by root, or group- or world-writable. None when it is."""
    if uid != 0:
        return f"must be owned by root (uid 0), is owned by uid {uid}"
    if mode & 0o022:
        return f"must not be group- or world-writable (mode {stat.S_IMODE(mode):04o})"
    return None

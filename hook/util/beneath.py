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


def trust_problem(
    uid: int, mode: int, *, owners: tuple[int, ...] = (0,), sticky_ok: bool = False
) -> str | None:
    """Say why a file or directory that changes what runs as root (an env file, a CDI spec, a directory
    holding them, an interpreter, a key) is not to be trusted: not owned by root (``owners``: also an
    unprivileged caller's own uid), or group- or world-writable (a sticky directory passes with
    ``sticky_ok``: others cannot rename or remove what they do not own there). None when it is."""
    if uid not in owners:
        return f"must be owned by root (uid 0), is owned by uid {uid}"
    if mode & 0o022 and not (sticky_ok and mode & stat.S_ISVTX):
        return f"must not be group- or world-writable (mode {stat.S_IMODE(mode):04o})"
    return None


MAX_SYMLINKS = 40


def untrusted_on_the_way(
    path: str, *, root: str = "/", owners: tuple[int, ...] = (0,), missing_ok: bool = False
) -> tuple[str, str] | None:
    """Tell whether root may run or trust ``path`` (a node path; ``root``: the node's ``/`` as seen from
    here, itself the administrator's and not judged): the path is resolved component by component as the
    kernel would (a symlink's target walked in its place, an absolute one from the root), and every
    directory passed must be ``trust_problem``-clean (sticky ones allowed), the entry itself and the
    directory holding it strictly (no sticky exception: whoever can create entries there could have put
    it there). Return (the node path at fault, why), or None when every one is root's alone.

    A component that does not exist raises FileNotFoundError; with ``missing_ok`` the walk ends there
    instead and the last directory reached (the one a new entry would be made in) is judged strictly."""
    prefix = "" if root in ("", "/") else root.rstrip("/")
    pending = [part for part in path.split("/") if part not in ("", ".")]
    resolved: list[str] = []
    links = 0
    while pending:
        name = pending.pop(0)
        if name == "..":
            if resolved:
                resolved.pop()
            continue
        here = "/" + "/".join([*resolved, name])
        try:
            info = posix.lstat(prefix + here)
        except FileNotFoundError:
            if not missing_ok:
                raise
            return _strictly(prefix, ["/" + "/".join(resolved)], owners)
        if stat.S_ISLNK(info.st_mode):
            links += 1
            if links > MAX_SYMLINKS:
                raise OSError(40, "Too many levels of symbolic links")  # ELOOP
            target = posix.readlink(prefix + here)
            if target.startswith("/"):
                resolved = []
            pending[:0] = [part for part in target.split("/") if part not in ("", ".")]
            continue
        resolved.append(name)
        if pending:
            problem = trust_problem(info.st_uid, info.st_mode, owners=owners, sticky_ok=True)
            if problem:
                return here, problem
    return _strictly(prefix, ["/" + "/".join(resolved[:-1]), "/" + "/".join(resolved)], owners)


def _strictly(prefix: str, node_paths: list[str], owners: tuple[int, ...]) -> tuple[str, str] | None:
    """Judge each node path with no sticky exception (the root itself, beneath ``prefix``, is skipped)."""
    for node_path in dict.fromkeys(node_paths):
        if node_path == "/" and prefix:
            continue
        info = posix.lstat(prefix + node_path if prefix else node_path)
        problem = trust_problem(info.st_uid, info.st_mode, owners=owners)
        if problem:
            return node_path, problem
    return None

"""The node's files as install sees them: every node path resolved beneath ``--root``, never outside it.

``install --root /host`` acts on a tree it does not own (a DaemonSet's view of the host): a symlink in it
may point anywhere, and an absolute one means a path on the *node*, not here. So every path is walked one
component at a time from a descriptor of the root (``openat``-style), symlinks are resolved as the node would
resolve them with the root as ``/`` (an absolute target starts again at the root, ``..`` stops there; at
most ``MAX_SYMLINKS``), and each step opens the next directory with ``O_NOFOLLOW`` relative to the last one.
Nothing is ever read from or written to outside the root, whatever the links say.

A config file is opened ``O_NONBLOCK | O_NOFOLLOW`` and checked with ``fstat``: a FIFO, a socket or a device
where ``daemon.json`` should be is refused in one line, never opened for reading (a FIFO would block).

Writes are atomic (``hook.util.atomicwrite`` given the parent's descriptor: a temp file in the same
directory, fsync, ``renameat``, fsync of the directory), and
every operation keeps the parent directory's descriptor it resolved, so a link swapped in between two steps
cannot redirect a write.
"""

import contextlib
import errno
import os
import stat
from collections.abc import Iterator

from hook.install.common import InstallError, rooted
from hook.util import atomicwrite
from hook.util.beneath import describe_mode
from hook.util.safetext import os_reason

MAX_SYMLINKS = 40
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY


def could_not(action: str, where: str, err: OSError) -> InstallError:
    """Return the one-line error for a failed operation on ``where``."""
    return InstallError(f"could not {action} {where}: {os_reason(err, go=True)}")


def _parts(path: str) -> list[str]:
    """Split a path into its names, dropping empty and ``.`` components (``..`` kept: the walk handles it)."""
    return [part for part in path.split("/") if part not in ("", ".")]


class NodeRoot:
    """The node's ``/`` at ``path`` (the administrator's own choice: opened as named)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def show(self, node_path: str) -> str:
        """Return how messages name a node path: as seen from this process (the root prefixed)."""
        return rooted(self.path, node_path)

    # --- the walk ----------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def parent(self, node_path: str, *, follow: bool = False) -> Iterator[tuple[int, str]]:
        """Yield (a descriptor of the directory holding ``node_path``, its last name), beneath the root.

        ``follow``: a symlink as the last component is resolved too (reading a config through a link);
        otherwise the last component is the entry itself (what a write replaces).
        Raises FileNotFoundError (as an OSError) when a directory on the way does not exist.
        """
        with self._walk(node_path, follow=follow) as (parent, _, name):
            yield parent, name

    def resolve(self, node_path: str, *, follow: bool = True) -> str:
        """Return where ``node_path`` is, seen from this process, its links resolved as the node resolves
        them (the root as ``/``; ``follow``: the last component's too). A directory missing on the way ends
        the walk there (the rest as written below it: looking there finds nothing either); a path that
        cannot be walked otherwise (a loop, a file as a directory) is returned as written."""
        if not _parts(node_path):
            return self.path
        try:
            with self._walk(node_path, follow=follow) as (_, names, name):
                return self.show("/" + "/".join([*names, name]))
        except FileNotFoundError as err:
            return self.show(err.filename if isinstance(err.filename, str) else node_path)
        except (OSError, InstallError):
            return self.show(node_path)

    @contextlib.contextmanager
    def _walk(self, node_path: str, *, follow: bool) -> Iterator[tuple[int, list[str], str]]:
        """``parent``, also yielding the names of the directories walked from the root (links resolved)."""
        if not node_path.startswith("/") or not _parts(node_path):
            raise InstallError(f"{node_path}: must be an absolute path below /")
        root_fd = os.open(self.path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        chain = [root_fd]
        names: list[str] = []
        try:
            pending = _parts(node_path)
            links = 0
            while True:
                name = pending.pop(0)
                if name == "..":
                    if len(chain) > 1:
                        os.close(chain.pop())
                        names.pop()
                    if not pending:
                        raise InstallError(f"{self.show(node_path)}: must name a file, not a directory")
                    continue
                last = not pending
                try:
                    st = os.stat(name, dir_fd=chain[-1], follow_symlinks=False)
                except FileNotFoundError as err:
                    if last:
                        yield chain[-1], names, name
                        return
                    err.filename = "/" + "/".join([*names, name, *pending])  # where the walk stopped
                    raise
                if stat.S_ISLNK(st.st_mode) and (follow or not last):
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
                    target = os.readlink(name, dir_fd=chain[-1])
                    if target.startswith("/"):
                        for fd in chain[1:]:
                            os.close(fd)
                        del chain[1:]
                        names.clear()
                    pending = _parts(target) + pending
                    if not pending:  # a link to the root itself
                        raise InstallError(f"{self.show(node_path)}: must name a file, not a directory")
                    continue
                if last:
                    yield chain[-1], names, name
                    return
                if not stat.S_ISDIR(st.st_mode):
                    raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
                chain.append(os.open(name, _DIR_FLAGS, dir_fd=chain[-1]))
                names.append(name)
        finally:
            for fd in chain:
                os.close(fd)

    # --- reading -----------------------------------------------------------------------------------------

    def lstat(self, node_path: str) -> os.stat_result | None:
        """Return the entry's own status (a symlink as a symlink), or None when there is none."""
        try:
            with self.parent(node_path) as (parent, name):
                return os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise could_not("inspect", self.show(node_path), err) from None

    def stat(self, node_path: str) -> os.stat_result | None:
        """Return the status of what ``node_path`` names, links resolved beneath the root (None: nothing)."""
        try:
            with self.parent(node_path, follow=True) as (parent, name):
                return os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise could_not("inspect", self.show(node_path), err) from None

    def is_dir(self, node_path: str) -> bool:
        """Tell whether ``node_path`` is a directory (symlinks resolved beneath the root)."""
        if not _parts(node_path):
            return True
        found = self.stat(node_path)
        return found is not None and stat.S_ISDIR(found.st_mode)

    def read(self, node_path: str, *, follow: bool = True) -> bytes | None:
        """Return a regular file's bytes, or None when there is none; refuse anything else in one line."""
        where = self.show(node_path)
        try:
            with self.parent(node_path, follow=follow) as (parent, name):
                try:
                    fd = os.open(name, _READ_FLAGS, dir_fd=parent)
                except FileNotFoundError:
                    return None
                except OSError as err:
                    if err.errno != errno.ELOOP:
                        raise
                    mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
                    raise InstallError(f"{where}: is {describe_mode(mode)}, not a regular file") from None
                try:
                    mode = os.fstat(fd).st_mode
                    if not stat.S_ISREG(mode):
                        raise InstallError(
                            f"{where}: is {describe_mode(mode)}, not a regular file; move it away"
                        )
                    chunks = []
                    while chunk := os.read(fd, 1 << 16):
                        chunks.append(chunk)
                    return b"".join(chunks)
                finally:
                    os.close(fd)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise could_not("read", where, err) from None

    def readlink(self, node_path: str) -> str:
        """Return the target of the symlink at ``node_path`` (as written: a node path when absolute)."""
        try:
            with self.parent(node_path) as (parent, name):
                return os.readlink(name, dir_fd=parent)
        except OSError as err:
            raise could_not("read the link", self.show(node_path), err) from None

    # --- writing -----------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _replacing(self, node_path: str) -> Iterator[tuple[int, str]]:
        """``parent`` for replacing the entry at ``node_path`` (a symlink itself, not its target); an OSError
        inside is one ``could not write`` line."""
        where = self.show(node_path)
        try:
            with self.parent(node_path) as found:
                yield found
        except OSError as err:
            raise could_not("write", where, err) from None

    def write_atomic(
        self, node_path: str, data: bytes, *, mode: int, owner: tuple[int, int] | None = None
    ) -> None:
        """Replace the entry at ``node_path`` with a file holding ``data``, atomically."""
        with self._replacing(node_path) as (parent, name):
            atomicwrite.write_atomic(name, data, mode=mode, owner=owner, dir_fd=parent)

    def symlink_atomic(self, node_path: str, target: str) -> None:
        """Replace the entry at ``node_path`` with a symlink to ``target``, atomically."""
        with self._replacing(node_path) as (parent, name):
            atomicwrite.symlink_atomic(name, target, dir_fd=parent)

    def unlink(self, node_path: str) -> None:
        """Remove a file (or symlink); one that is already gone is fine."""
        try:
            with self.parent(node_path) as (parent, name):
                os.unlink(name, dir_fd=parent)
        except FileNotFoundError:
            return
        except OSError as err:
            raise could_not("remove", self.show(node_path), err) from None

    def mkdir(self, node_path: str, mode: int) -> None:
        """Create one directory (its parent must exist) with exactly ``mode``."""
        where = self.show(node_path)
        try:
            with self.parent(node_path) as (parent, name):
                os.mkdir(name, mode, dir_fd=parent)
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
                try:
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)
        except OSError as err:
            raise could_not("create directory", where, err) from None

    def rmdir(self, node_path: str) -> bool:
        """Remove an empty directory; False when it holds something. A missing one counts as removed."""
        try:
            with self.parent(node_path) as (parent, name):
                os.rmdir(name, dir_fd=parent)
        except FileNotFoundError:
            return True
        except OSError as err:
            if err.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return False
            raise could_not("remove directory", self.show(node_path), err) from None
        return True


def check_root(root: str) -> NodeRoot:
    """Return the node root at ``root``; refuse one that is not an existing directory (a mistyped
    ``--root`` must not become a new tree that no engine reads)."""
    try:
        st = os.stat(root)
    except FileNotFoundError:
        raise InstallError(f"--root {root}: no such directory; give the node's / (it must exist)") from None
    except OSError as err:
        raise could_not("inspect --root", root, err) from None
    if not stat.S_ISDIR(st.st_mode):
        raise InstallError(f"--root {root}: not a directory; give the node's /")
    return NodeRoot(root)

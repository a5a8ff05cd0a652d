"""Which containers still use the runtime wrapper: read from the node's live processes, engine by engine.

An engine keeps the runtime binary it created a container with for that container's whole life, and calls
it again to stop, kill and delete it. Where it keeps it:

* containerd and dockerd (runc v2 shim): the shim runs with the container's bundle as its working
  directory, and the bundle's ``options.json`` holds ``binary_name`` (the handler's ``BinaryName``, Docker's
  ``runtimes.<name>.path``); a pod's containers share their sandbox's shim;
* CRI-O and podman (conmon): conmon's command line names the runtime (``-r`` / ``--runtime``).

So a container uses the wrapper while a ``containerd-shim*`` process's ``cwd/options.json`` names it or a
process's command line holds it as an argument. This reads the node's ``/proc``: under ``--root``,
``<root>/proc`` (the node's own when the root is the node's ``/`` bind-mounted recursively, as in the
DaemonSet) unless ``--proc`` says where it is. A root with no live ``/proc`` (an image tree, a test tree)
runs no container: nothing uses the wrapper there. A ``--proc`` that is not a live ``/proc`` (a DaemonSet pod
that sees the node's ``/`` without its ``/proc``) says nothing about the node's containers: which ones use
the wrapper cannot be told (``Users.unseen``), and uninstall keeps it as a passthrough, which stops and
deletes every container whoever created it.
"""

import json
import os
import stat
from typing import NamedTuple

MAX_OPTIONS_BYTES = 64 * 1024


class Users(NamedTuple):
    """Who keeps the runtime for a container (a process each), as read from ``proc``."""

    proc: str | None
    users: tuple[str, ...]
    # ``proc`` was given but holds no processes: whether a container uses the runtime cannot be told.
    unseen: bool = False

    @property
    def idle(self) -> bool:
        """True when no container uses the runtime (as far as can be told: never when ``unseen``)."""
        return not self.users and not self.unseen


def is_live_proc(proc: str) -> bool:
    """Tell whether ``proc`` is a mounted procfs with processes in it."""
    return os.path.isfile(os.path.join(proc, "1", "cmdline")) or os.path.isfile(
        os.path.join(proc, "self", "cmdline")
    )


def node_proc(root: str, override: str | None = None) -> str | None:
    """Return where the node's ``/proc`` is seen from here: ``override`` (live or not: ``find_runtime_users``
    tells), else ``<root>/proc`` when it is a live one, else None (a tree where nothing runs)."""
    if override is not None:
        return override
    proc = os.path.join(root, "proc")
    return proc if is_live_proc(proc) else None


def read_small(path: str, limit: int = MAX_OPTIONS_BYTES) -> bytes | None:
    """Read at most ``limit`` bytes of a regular file without blocking on anything else (a FIFO or a
    device is never read); None when it is not there or not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _shim_binary(proc: str, pid: str) -> str | None:
    """Return the ``binary_name`` of the bundle a runc v2 shim serves, or None."""
    data = read_small(os.path.join(proc, pid, "cwd", "options.json"))
    if data is None:
        return None
    try:
        options = json.loads(data)
    except ValueError:
        return None
    binary = options.get("binary_name") if isinstance(options, dict) else None
    return binary if isinstance(binary, str) else None


def find_runtime_users(proc: str | None, runtime: str) -> Users:
    """Return the processes that keep ``runtime`` (a node path) for a container: shims and conmons."""
    if proc is None:
        return Users(proc=None, users=())
    if not is_live_proc(proc):
        return Users(proc=proc, users=(), unseen=True)
    found = []
    try:
        entries = os.listdir(proc)
    except OSError as err:
        from hook.install.rootfs import could_not

        raise could_not("list the processes in", proc, err) from None
    for pid in entries:
        if not pid.isdigit():
            continue
        raw = read_small(os.path.join(proc, pid, "cmdline"))
        if not raw:
            continue
        argv = [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]
        name = os.path.basename(argv[0])
        if name.startswith("containerd-shim") and _shim_binary(proc, pid) == runtime:
            container = argv[argv.index("-id") + 1] if "-id" in argv[:-1] else "?"
            found.append(f"{name} pid {pid} (container {container[:12]})")
        elif runtime in argv or f"--runtime={runtime}" in argv:
            found.append(f"{name} pid {pid}")
    return Users(proc=proc, users=tuple(sorted(found)))

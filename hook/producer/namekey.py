"""The node's naming key: env-file and allocation names are keyed hashes of the device ids, so a tenant who
can guess the ids (often ``gpu-0-slice-3``) still cannot compute another allocation's name.

The key is 32 random bytes in a file, by default ``/var/lib/gpu-env-hook/alloc.key``
(``GPU_ENV_HOOK_NAME_KEY`` names another), root-only (0600, owner root, in a 0700 directory); the file and
every directory on the way to it must be root's and not writable by others, or the key is refused. It lives on
persistent storage, not ``/run``: kubelet checkpoints ``Allocate``'s answer (the name) across restarts, and
every later ``PreStartContainer`` must compute the same name. The first producer to need it creates it: the
bytes go into a private temporary file that is then linked to the name, so producers racing on first use all
end with the one key
that won the link. A key that is present is never replaced -- one that cannot be read, or is not
exactly 32 bytes, is refused, never regenerated (that would rename every allocation on the node).

A name is the first 32 hex digits (128 bits) of HMAC-SHA256 (RFC 2104, the standard library's ``hmac``)
over the sorted, distinct ids joined by newlines. ``hmac`` and ``hashlib`` are imported where a name is
computed: they load OpenSSL (about 5 ms), which the producer commands that name nothing (``env-file write``,
``check``) do without.
"""

import posix

from hook.util import envvars, paths
from hook.util.errors import UsageError
from hook.util.safetext import os_reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

DEFAULT_PATH = "/var/lib/gpu-env-hook/alloc.key"
KEY_BYTES = 32
NAME_HEX_CHARS = 32
SUFFIX = ".env"
LEGACY_HEX_CHARS = 16  # unkeyed sha256 names written before the key (accepted during the migration)


def keyed_name(device_ids: list[str], key: bytes) -> str:
    """The name of a set of device ids (already sorted, distinct and checked) under ``key``."""
    import hmac

    message = "\n".join(device_ids).encode("utf-8", "surrogatepass")
    return hmac.digest(key, message, "sha256").hex()[:NAME_HEX_CHARS]


def legacy_name(device_ids: list[str]) -> str:
    """The unkeyed name written before the key: 16 hex digits of sha256 over the same text (the migration:
    specs and files named so are still read, listed, removed and collected)."""
    import hashlib

    message = "\n".join(device_ids).encode("utf-8", "surrogatepass")
    return hashlib.sha256(message).hexdigest()[:LEGACY_HEX_CHARS]


# --- the env-file path scheme -------------------------------------------------------------------------------


def checked_ids(device_ids: "Iterable[str]", command: str) -> list[str]:
    """The sorted, distinct device ids a name is made from; none, an empty one or one with a newline or NUL
    is a usage error naming ``command``."""
    ids = sorted(set(device_ids))
    if not ids:
        raise UsageError(f"{command}: at least one device id is required")
    for device_id in ids:
        if not device_id or "\n" in device_id or "\0" in device_id:
            raise UsageError(f"{command}: a device id must be non-empty, without newline or NUL")
    return ids


def env_file_name(device_ids: "Iterable[str]", key: bytes | None = None) -> str:
    """Return ``<name>.env``: the keyed name of the set of ids (HMAC-SHA256 under the node's key, 32 hex
    digits), the same in any order, with any repetition; ``key`` None: the node's key."""
    ids = checked_ids(device_ids, "env-file path")
    return keyed_name(ids, key if key is not None else load_key()) + SUFFIX


def env_file_path(device_ids: "Iterable[str]", directory: str | None = None, key: bytes | None = None) -> str:
    """Return the env file's path for ``device_ids`` under ``directory`` (default: the first configured
    ``[env-file] directories`` entry of a default node, ``/run/nvidia-env``)."""
    if directory is None:
        from hook.pipeline.config import default_settings

        directory = default_settings()["env-file"]["directories"][0]
    return paths.join(directory, env_file_name(device_ids, key))


class AllocateAnswer:
    """What a device plugin's ``Allocate`` returns for a container (``ContainerAllocateResponse``): ``envs``
    names the env file, ``cdi_devices`` the env-file guard (docs/nri.md): the container starts only once the
    NRI plugin or the runtime shim applied the file."""

    __slots__ = ("cdi_devices", "envs")

    def __init__(self, envs: dict[str, str], cdi_devices: tuple[str, ...]) -> None:
        self.envs = envs
        self.cdi_devices = cdi_devices


def allocate_answer(
    device_ids: "Iterable[str]", directory: str | None = None, key: bytes | None = None
) -> AllocateAnswer:
    """Return the ``Allocate`` answer for ``device_ids``: ``NVIDIA_ENV_FROM_FILE`` (the path of
    :func:`env_file_path`) and the guard's CDI device."""
    return AllocateAnswer(
        {envvars.NVIDIA_ENV_FROM_FILE: env_file_path(device_ids, directory, key)},
        (paths.ENV_FILE_GUARD_DEVICE,),
    )


# --- the key ---------------------------------------------------------------------------------------------


def key_path() -> str:
    """Where the key is: ``GPU_ENV_HOOK_NAME_KEY`` (set by whoever runs the producer) or the default."""
    return paths.environ().get(envvars.GPU_ENV_HOOK_NAME_KEY) or DEFAULT_PATH


def load_key(path: str | None = None) -> bytes:
    """Return the node's key, creating it (atomically, 0600) when there is none; refuse one that is there
    but cannot be read or is not a key."""
    path = path or key_path()
    _check_place(path)
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    _create_key(path)
    try:
        return _read_key(path)
    except FileNotFoundError:
        raise _refuse(path, "vanished just after it was created") from None


def _refuse(path: str, reason: str) -> UsageError:
    return UsageError(
        f"naming key {path}: {reason} (it is never replaced: every allocation's name derives from it)"
    )


def _check_place(path: str) -> None:
    """Refuse a key that someone other than root could replace or have put there: the file, its directory
    and every directory on the way to it (symlinks followed as the kernel would) root-owned (or ours) and
    not writable by others (``hook.util.beneath.untrusted_on_the_way``); a key not there yet is judged by
    the directory it would be created in."""
    from hook.util.beneath import untrusted_on_the_way

    try:
        found = untrusted_on_the_way(path, owners=(0, posix.geteuid()), missing_ok=True)
    except OSError as err:
        raise _refuse(path, f"cannot be inspected: {os_reason(err)}") from None
    if found is not None:
        raise _refuse(path, f"{found[0]} {found[1]}")


def _read_key(path: str) -> bytes:
    """Read the key file: a regular file of exactly KEY_BYTES, owned by root (or by us), not readable by
    group or others."""
    import stat

    try:
        fd = posix.open(path, posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_NONBLOCK | posix.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise _refuse(path, f"cannot be read: {os_reason(err)}") from None
    try:
        info = posix.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(path, "is not a regular file")
        if info.st_uid not in (0, posix.geteuid()):
            raise _refuse(path, f"must be owned by root (uid 0), is owned by uid {info.st_uid}")
        if info.st_mode & 0o077:
            raise _refuse(path, f"must be readable by its owner only (mode {stat.S_IMODE(info.st_mode):04o})")
        data = posix.read(fd, KEY_BYTES + 1)
    except OSError as err:
        raise _refuse(path, f"cannot be read: {os_reason(err)}") from None
    finally:
        posix.close(fd)
    if len(data) != KEY_BYTES:
        raise _refuse(path, f"holds {len(data)} bytes, not a {KEY_BYTES}-byte key")
    return data


def _create_key(path: str) -> None:
    """Write a new key into a private temporary file and link it to ``path``: the link fails when another
    producer linked its key first, and then that key is the one read."""
    import os  # once per node: os.makedirs

    directory = os.path.dirname(path) or "."
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(6).hex()}")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        _check_place(path)  # a directory someone else made in between is not used
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            if os.write(fd, os.urandom(KEY_BYTES)) != KEY_BYTES:
                raise OSError(5, "short write")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temporary, path)
        except FileExistsError:
            return  # another producer's key won
        finally:
            os.unlink(temporary)
        directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)
    except OSError as err:
        raise _refuse(path, f"cannot be created: {os_reason(err)}") from None

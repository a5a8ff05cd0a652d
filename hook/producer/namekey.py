"""The node's naming key: env-file and allocation names are keyed hashes of the device ids, so a tenant who
can guess the ids (often ``gpu-0-slice-3``) still cannot compute another allocation's name.

The key is 32 random bytes in a file, by default ``/var/lib/gpu-env-hook/alloc.key``
(``GPU_ENV_HOOK_NAME_KEY`` names another), root-only (0600, owner root, in a 0700 directory). It lives on
persistent storage, not ``/run``: kubelet checkpoints ``Allocate``'s answer (the name) across restarts, and
every later ``PreStartContainer`` must compute the same name. The first producer to need it creates it: the
bytes go into a private temporary file that is then linked to the name, so producers racing on first use all
end with the
one key that won the link. A key that is present is never replaced -- one that cannot be read, or is not
exactly 32 bytes, is refused, never regenerated (that would rename every allocation on the node).

A name is the first 32 hex digits (128 bits) of HMAC-SHA256 (RFC 2104) over the sorted, distinct ids joined
by newlines. The HMAC is computed here over the builtin SHA-256: ``hmac`` imports ``hashlib``, which loads
OpenSSL, a quarter of a producer command's start.
"""

import os

from hook.util import envvars
from hook.util.errors import UsageError
from hook.util.safetext import os_reason

DEFAULT_PATH = "/var/lib/gpu-env-hook/alloc.key"
KEY_BYTES = 32
NAME_HEX_CHARS = 32
LEGACY_HEX_CHARS = 16  # unkeyed sha256 names written before the key (accepted during the migration)
_BLOCK = 64
_INNER = bytes(byte ^ 0x36 for byte in range(256))
_OUTER = bytes(byte ^ 0x5C for byte in range(256))


def _sha256(data: bytes) -> object:
    """SHA-256 from the builtin implementation (hashlib would load OpenSSL)."""
    try:
        from _sha256 import sha256  # type: ignore[import-not-found]  # CPython 3.11
    except ImportError:  # pragma: no cover - 3.12 renamed it, other interpreters may lack it
        from hashlib import sha256
    return sha256(data)


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    """HMAC-SHA256 of ``message`` under ``key`` (RFC 2104; tests compare it with the ``hmac`` module)."""
    if len(key) > _BLOCK:
        key = _sha256(key).digest()  # type: ignore[attr-defined]
    key = key.ljust(_BLOCK, b"\0")
    inner = _sha256(key.translate(_INNER) + message).digest()  # type: ignore[attr-defined]
    digest: bytes = _sha256(key.translate(_OUTER) + inner).digest()  # type: ignore[attr-defined]
    return digest


def keyed_name(device_ids: list[str], key: bytes) -> str:
    """The name of a set of device ids (already sorted, distinct and checked) under ``key``."""
    return hmac_sha256(key, "\n".join(device_ids).encode("utf-8", "surrogatepass")).hex()[:NAME_HEX_CHARS]


def legacy_name(device_ids: list[str]) -> str:
    """The unkeyed name written before the key: 16 hex digits of sha256 over the same text (the migration:
    specs and files named so are still read, listed, removed and collected)."""
    digest: str = _sha256("\n".join(device_ids).encode("utf-8", "surrogatepass")).hexdigest()  # type: ignore[attr-defined]
    return digest[:LEGACY_HEX_CHARS]


def key_path() -> str:
    """Where the key is: ``GPU_ENV_HOOK_NAME_KEY`` (set by whoever runs the producer) or the default."""
    return os.environ.get(envvars.GPU_ENV_HOOK_NAME_KEY) or DEFAULT_PATH


def load_key(path: str | None = None) -> bytes:
    """Return the node's key, creating it (atomically, 0600) when there is none; refuse one that is there
    but cannot be read or is not a key."""
    path = path or key_path()
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


def _read_key(path: str) -> bytes:
    """Read the key file: a regular file of exactly KEY_BYTES, owned by root (or by us), not readable by
    group or others."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise _refuse(path, f"cannot be read: {os_reason(err)}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(path, "is not a regular file")
        if info.st_uid not in (0, os.geteuid()):
            raise _refuse(path, f"must be owned by root (uid 0), is owned by uid {info.st_uid}")
        if info.st_mode & 0o077:
            raise _refuse(path, f"must be readable by its owner only (mode {stat.S_IMODE(info.st_mode):04o})")
        data = os.read(fd, KEY_BYTES + 1)
    except OSError as err:
        raise _refuse(path, f"cannot be read: {os_reason(err)}") from None
    finally:
        os.close(fd)
    if len(data) != KEY_BYTES:
        raise _refuse(path, f"holds {len(data)} bytes, not a {KEY_BYTES}-byte key")
    return data


def _create_key(path: str) -> None:
    """Write a new key into a private temporary file and link it to ``path``: the link fails when another
    producer linked its key first, and then that key is the one read."""
    directory = os.path.dirname(path) or "."
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(6).hex()}")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
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

"""What the engine hands a hook: the OCI state on stdin (which bundle, which pid, which annotations) and the
bundle's config.json -- loaded as a raw dict (unknown fields survive), checked, the fields the hook reads
(env, mounts, annotations, root, privilege) and written back (atomically, through ``hook.util.atomicwrite``).
"""

from hook.util import paths
from hook.util.errors import SpecError, StateError, os_error
from hook.util.jsontext import decode_prefix
from hook.util.safetext import decode_error_reason, escape, json_kind, os_reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO

# --- the OCI state on stdin ------------------------------------------------------------------------------

# How much one read of stdin asks for: a pipe's capacity.
_CHUNK = 65536


class State:
    """The parts of the OCI state the hook uses."""

    __slots__ = ("annotations", "bundle", "pid")

    def __init__(self, *, bundle: str, pid: int, annotations: dict[str, str]) -> None:
        self.bundle = bundle
        self.pid = pid
        self.annotations = annotations


def parse_state(data: bytes) -> State:
    """Decode one JSON state document; ``bundle`` falls back to the pre-1.0 ``bundlePath``."""
    try:
        document, _ = decode_prefix(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise StateError(f"could not decode container state: {decode_error_reason(err)}") from None
    if not isinstance(document, dict):
        raise StateError("could not decode container state: the state must be a JSON object")
    pid = document.get("pid", 0)
    if pid is None:
        pid = 0
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise StateError(f"could not decode container state: pid must be an integer, got {json_kind(pid)}")
    bundle = document.get("bundle") or document.get("bundlePath") or ""
    if not isinstance(bundle, str):
        raise StateError(
            f"could not decode container state: bundle must be a string, got {json_kind(bundle)}"
        )
    annotations = document.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
        raise StateError("could not decode container state: annotations must map strings to strings")
    return State(bundle=bundle, pid=pid, annotations=annotations)


def load_state(stream: "BinaryIO") -> State:
    """Read the state from a binary stream (the hook's stdin), whatever its size (it carries the spec's
    annotations, and runc runs a spec of any size): the first JSON value, as upstream's decoder does — it
    does not wait for end of file, since a runtime may keep stdin open.

    Reads what is available (``read1``: what the writer has written so far) and tries to decode when a read
    ends with a closing bracket, after a short read (the writer paused) or once the data has doubled since
    the last try, so that a large state costs a bounded number of tries.
    """
    read = getattr(stream, "read1", stream.read)
    data = bytearray()
    tried = 0
    while True:
        chunk: bytes = read(_CHUNK)
        if not chunk:
            break
        data += chunk
        if chunk.rstrip().endswith((b"}", b"]")) and (len(chunk) < _CHUNK or len(data) >= 2 * tried):
            tried = len(data)
            state = _try_state(bytes(data))
            if state is not None:
                return state
    return parse_state(bytes(data))


def _try_state(data: bytes) -> State | None:
    """Decode the state when ``data`` already holds a whole first value; None when more input may help."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return parse_state(data)
    try:
        decode_prefix(text)
    except RecursionError:
        return parse_state(data)  # nested past the decoder's limit: the one-line refusal
    except ValueError as err:
        position = getattr(err, "pos", 0)
        message = getattr(err, "msg", "")
        if position >= len(text.rstrip()) - 16 or message.startswith("Unterminated string"):
            return None
    return parse_state(data)


# --- config.json ----------------------------------------------------------------------------------------
class Spec:
    """config.json as read: its path, its exact bytes and the decoded document."""

    __slots__ = ("document", "path", "raw")

    def __init__(self, *, path: str, raw: bytes, document: dict[str, object]) -> None:
        self.path = path
        self.raw = raw
        self.document = document


def spec_path(bundle: str) -> str:
    """Return ``<bundle>/config.json`` (relative to the cwd when the state names no bundle)."""
    return paths.join(bundle, "config.json")


def load_spec(bundle: str) -> Spec:
    """Read and decode ``<bundle>/config.json``."""
    path = spec_path(bundle)
    try:
        fh = open(path, "rb")  # noqa: SIM115 - an open error and a read error are told apart
    except OSError as err:
        raise SpecError(f"could not open OCI spec: open {path}: {os_reason(err, go=True)}") from None
    with fh:
        try:
            raw = fh.read()  # no size bound: runc itself reads any size (20 MB and 50 MB specs run)
        except OSError as err:
            raise os_error("read OCI spec", path, err) from None
    return Spec(path=path, raw=raw, document=parse_spec(raw))


def parse_spec(raw: bytes) -> dict[str, object]:
    """Decode config.json bytes into a dict, refusing anything that is not one JSON object."""
    from hook.util.jsontext import decode  # here: the shim reads the bytes and decodes only if they matter

    try:
        document = decode(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise SpecError(f"could not decode OCI spec: {decode_error_reason(err)}") from None
    if not isinstance(document, dict):
        raise SpecError(
            f"could not decode OCI spec: the spec must be a JSON object, got {json_kind(document)}"
        )
    return document


def check_spec(document: dict[str, object]) -> None:
    """Apply upstream's presence checks on ociVersion, process and root, and the types we rely on."""
    version = document.get("ociVersion")
    if version is None:
        raise SpecError("Version is empty in OCI spec")
    if not isinstance(version, str):
        raise SpecError(f"could not decode OCI spec: ociVersion must be a string, got {json_kind(version)}")
    process = document.get("process")
    if process is None:
        raise SpecError("Process is empty in OCI spec")
    if not isinstance(process, dict):
        raise SpecError(f"could not decode OCI spec: process must be an object, got {json_kind(process)}")
    root = document.get("root")
    if root is None:
        raise SpecError("Root is empty in OCI spec")
    if not isinstance(root, dict) or not isinstance(root.get("path", ""), str):
        raise SpecError("could not decode OCI spec: root must be an object with a string path")
    env = process.get("env")
    if env is not None and not (isinstance(env, list) and all(isinstance(item, str) for item in env)):
        raise SpecError("could not decode OCI spec: process.env must be an array of strings")
    mounts = document.get("mounts")
    if mounts is not None and not (
        isinstance(mounts, list)
        and all(
            isinstance(m, dict)
            and isinstance(m.get("source", ""), str)
            and isinstance(m.get("destination", ""), str)
            for m in mounts
        )
    ):
        raise SpecError("could not decode OCI spec: mounts must be an array of objects with string fields")


def process_env(document: dict[str, object]) -> list[str]:
    """Return ``process.env`` of a checked spec (empty when absent)."""
    process = document["process"]
    assert isinstance(process, dict)  # noqa: S101 - guaranteed by check_spec
    env = process.get("env")
    return list(env) if isinstance(env, list) else []


def parse_env(entries: list[str]) -> dict[str, str]:
    """Split ``NAME=value`` entries at the first ``=``; later duplicates win, as upstream.

    In C, without a Python step per entry (an env file can bring thousands): each entry split once at
    its first ``=`` and the pairs handed to ``dict``; an entry without ``=`` splits into one piece, which
    ``dict`` refuses, and only then is the list walked to name it.
    """
    try:
        return dict(map(str.split, entries, ["="] * len(entries), [1] * len(entries)))
    except ValueError:
        pass
    for index, entry in enumerate(entries):
        if "=" not in entry:
            raise SpecError(f"invalid environment variable: process.env[{index}] has no '='") from None
    raise AssertionError("unreachable: every entry has an '='")  # pragma: no cover


def spec_mounts(document: dict[str, object]) -> list[tuple[str, str]]:
    """Return ``(source, destination)`` of every mount of a checked spec."""
    mounts = document.get("mounts")
    if not isinstance(mounts, list):
        return []
    return [(str(m.get("source", "")), str(m.get("destination", ""))) for m in mounts]


def root_path(document: dict[str, object]) -> str:
    """Return ``root.path`` of a checked spec."""
    root = document["root"]
    assert isinstance(root, dict)  # noqa: S101 - guaranteed by check_spec
    return str(root.get("path", ""))


def spec_annotations(document: dict[str, object]) -> dict[str, str]:
    """Return the string-valued annotations of a spec."""
    annotations = document.get("annotations")
    if not isinstance(annotations, dict):
        return {}
    return {str(k): v for k, v in annotations.items() if isinstance(v, str)}


def set_process_env(document: dict[str, object], env: list[str]) -> dict[str, object]:
    """Return a copy of the document whose ``process.env`` is ``env``; nothing else changes."""
    process = document["process"]
    assert isinstance(process, dict)  # noqa: S101 - guaranteed by check_spec
    return {**document, "process": {**process, "env": env}}


def without_mount(document: dict[str, object], destination: str) -> dict[str, object]:
    """Return a copy of a checked spec without its mounts at ``destination`` (the document itself when it
    has none there); nothing else changes."""
    mounts = document.get("mounts")
    if not isinstance(mounts, list):
        return document
    kept = [mount for mount in mounts if mount.get("destination") != destination]
    return document if len(kept) == len(mounts) else {**document, "mounts": kept}


def dump_spec(document: dict[str, object], where: str = "config.json") -> bytes:
    """Serialise a spec the way runtimes write it (compact JSON, UTF-8, no ASCII escaping); refuse one whose
    text holds a lone surrogate (a JSON ``\\udc80`` escape decodes to one: not Unicode, so not UTF-8)."""
    from hook.util.jsontext import encode  # json's own encoder would import re

    text = encode(document)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        code = ord(text[err.start])
        raise SpecError(
            f"{where}: a string holds a lone surrogate (U+{code:04X}), which is not Unicode text; "
            "the spec cannot be written back"
        ) from None


def write_spec(path: str, document: dict[str, object]) -> None:
    """Replace config.json atomically: a temp file beside it, same mode, renamed over it (a reader, runc
    included, sees the old spec or the new one, never a mix).

    Not fsync'd (``durable=False``): config.json lives as long as its container's bundle, the engines that
    write it (containerd, CRI-O, podman) write it without an fsync, and after a crash of the node the
    engine makes the bundle again; the two fsyncs cost 0.5-1 ms on every env-file container on a disk.
    A failure (no space, a read-only bundle, an I/O error) leaves config.json as it was and is one line.
    """
    from hook.util.atomicwrite import write_atomic  # only when a spec is rewritten (an env file was merged)

    try:
        write_atomic(path, dump_spec(document), durable=False)
    except OSError as err:
        raise os_error("write", path, err) from None


# --- privileged: CAP_SYS_ADMIN in the bounding set (or the flat list of pre-rc5 specs) -----------------

CAP_SYS_ADMIN = "CAP_SYS_ADMIN"
_CAP_SETS = ("bounding", "effective", "inheritable", "permitted", "ambient")


def resolve_privileged(document: dict[str, object]) -> bool:
    """Return whether a checked spec grants CAP_SYS_ADMIN in the set upstream consults."""
    process = document["process"]
    assert isinstance(process, dict)  # noqa: S101 - guaranteed by bundle.check_spec
    capabilities = process.get("capabilities")
    version = document.get("ociVersion")
    flat = isinstance(version, str) and uses_flat_capabilities(version)
    if capabilities is None:
        return False
    if flat:
        if not _is_string_list(capabilities):
            raise SpecError(
                "could not decode Process.Capabilities in OCI spec: expected an array of strings for "
                f"ociVersion {escape(str(version))}, got {json_kind(capabilities)}"
            )
        assert isinstance(capabilities, list)  # noqa: S101 - checked above
        return CAP_SYS_ADMIN in capabilities
    if not isinstance(capabilities, dict):
        raise SpecError(
            "could not decode Process.Capabilities in OCI spec: "
            f"expected an object, got {json_kind(capabilities)}"
        )
    for name in _CAP_SETS:
        value = capabilities.get(name)
        if value is not None and not _is_string_list(value):
            raise SpecError(
                f"could not decode Process.Capabilities in OCI spec: {name} must be an array of strings"
            )
    bounding = capabilities.get("bounding") or []
    assert isinstance(bounding, list)  # noqa: S101 - checked above
    return CAP_SYS_ADMIN in bounding


def uses_flat_capabilities(version: str) -> bool:
    """Tell whether ``1.0.0-rc1 <= version < 1.0.0-rc5`` (Go x/mod semver; invalid sorts lowest)."""
    parsed = parse_semver(version)
    return parsed is not None and compare_semver(parsed, _RC1) >= 0 and compare_semver(parsed, _RC5) < 0


def parse_semver(version: str) -> tuple[tuple[int, int, int], tuple[str, ...]] | None:
    """Parse ``MAJOR[.MINOR[.PATCH]][-PRE][+BUILD]`` as golang.org/x/mod/semver does; None if invalid."""
    core, _, build = version.partition("+")
    if "+" in version and not _valid_identifiers(build, numeric_rule=False):
        return None
    core, dash, pre = core.partition("-")
    parts = core.split(".")
    if len(parts) > 3 or not all(_is_number(p) for p in parts):
        return None
    if len(parts) < 3 and (dash or "+" in version):
        return None
    if dash and not _valid_identifiers(pre, numeric_rule=True):
        return None
    numbers = [int(p) for p in parts] + [0] * (3 - len(parts))
    return (numbers[0], numbers[1], numbers[2]), tuple(pre.split(".")) if dash else ()


def compare_semver(
    a: tuple[tuple[int, int, int], tuple[str, ...]], b: tuple[tuple[int, int, int], tuple[str, ...]]
) -> int:
    """Compare two parsed versions by semver precedence: -1, 0 or 1."""
    if a[0] != b[0]:
        return -1 if a[0] < b[0] else 1
    pre_a, pre_b = a[1], b[1]
    if not pre_a or not pre_b:
        return (not pre_a) - (not pre_b)
    for x, y in zip(pre_a, pre_b, strict=False):
        if x == y:
            continue
        if x.isdigit() and y.isdigit():
            return -1 if int(x) < int(y) else 1
        if x.isdigit() != y.isdigit():
            return -1 if x.isdigit() else 1
        return -1 if x < y else 1
    return (len(pre_a) > len(pre_b)) - (len(pre_a) < len(pre_b))


def _is_number(text: str) -> bool:
    """A semver number: ASCII digits without a leading zero."""
    return text.isascii() and text.isdigit() and (text == "0" or not text.startswith("0"))


def _valid_identifiers(text: str, *, numeric_rule: bool) -> bool:
    """Dot-separated ``[0-9A-Za-z-]+`` identifiers; numeric ones without leading zeros when asked."""
    for ident in text.split("."):
        if not ident or not ident.isascii() or not all(c.isalnum() or c == "-" for c in ident):
            return False
        if numeric_rule and ident.isdigit() and not _is_number(ident):
            return False
    return True


def _is_string_list(value: object) -> bool:
    """Tell whether a JSON value is an array of strings."""
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


_RC1 = ((1, 0, 0), ("rc1",))
_RC5 = ((1, 0, 0), ("rc5",))

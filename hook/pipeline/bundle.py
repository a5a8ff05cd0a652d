"""A bundle's config.json: loaded as a raw dict (unknown fields survive), checked, and written back
(atomically, through ``hook.util.atomicwrite``)."""

from hook.util import paths
from hook.util.errors import SpecError, os_error
from hook.util.safetext import decode_error_reason, json_kind, os_reason


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

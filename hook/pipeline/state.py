"""The OCI state a runtime writes on a hook's stdin: which bundle, which pid, which annotations."""

from hook.util.errors import StateError
from hook.util.jsontext import decode_prefix
from hook.util.safetext import decode_error_reason, json_kind

# How much one read of stdin asks for: a pipe's capacity.
_CHUNK = 65536

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO


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

"""JSON decoding and encoding for the per-container path without the cost of importing ``json``.

``json.decoder`` and ``json.encoder`` compile regular expressions at import, which pulls in ``re`` (enum,
functools, the regex compiler): about a third of the interpreter's own start, paid by every container. The
decoding itself is done by CPython's C scanner ``_json.make_scanner``, the very scanner ``json.loads`` uses;
only the whitespace skipping and the error path (which needs ``json`` for its exception type and message) are
here. Encoding is done by the C encoder ``_json.make_encoder`` with the arguments ``json.dumps`` gives it.
Interpreters without ``_json`` use ``json`` itself. Same results as ``json.loads`` with default arguments and
as ``json.dumps(value, ensure_ascii=False, separators=(",", ":"))``.
"""

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    PairsHook = Callable[[list[tuple[str, object]]], object]

_WHITESPACE = " \t\n\r"
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Context:
    """The attributes ``_json.make_scanner`` reads, with json.loads's defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__
    memo: dict[str, str] = {}  # noqa: RUF012 - the scanner expects this attribute; it clears it itself


def _skip(text: str, index: int) -> int:
    """Return the index of the first non-whitespace character at or after ``index``."""
    while index < len(text) and text[index] in _WHITESPACE:
        index += 1
    return index


def _error(message: str, text: str, index: int) -> ValueError:
    """Build the exception json.loads raises (json.JSONDecodeError, a ValueError)."""
    import json

    return json.JSONDecodeError(message, text, index)


def decode_prefix(text: str, *, object_pairs_hook: "PairsHook | None" = None) -> tuple[object, int]:
    """Decode the JSON value at the start of ``text`` (after whitespace); return it and where it ended.

    Like ``json.JSONDecoder().raw_decode`` after stripping leading whitespace; raises a ValueError
    (json.JSONDecodeError) on invalid input. ``object_pairs_hook`` is json's (it builds every object).
    """
    try:
        from _json import make_scanner
    except ImportError:  # pragma: no cover - not CPython
        import json

        return json.JSONDecoder(object_pairs_hook=object_pairs_hook).raw_decode(text, _skip(text, 0))
    start = _skip(text, 0)
    context = _Context()
    if object_pairs_hook is not None:
        context.object_pairs_hook = object_pairs_hook  # type: ignore[assignment]
    try:
        return make_scanner(context)(text, start)  # type: ignore[arg-type]  # duck-typed like JSONDecoder
    except StopIteration as stop:
        raise _error("Expecting value", text, stop.value) from None
    except SystemError:
        # The C scanner builds its error from json.decoder only if that module is already loaded; when it
        # is not, it fails without an exception. Invalid input, then: let json say precisely why.
        import json

        return json.JSONDecoder(object_pairs_hook=object_pairs_hook).raw_decode(text, start)


def decode(text: str, *, object_pairs_hook: "PairsHook | None" = None) -> object:
    """Decode a whole JSON document, as ``json.loads`` does (trailing data is an error)."""
    if text.startswith("\ufeff"):
        raise _error("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    value, end = decode_prefix(text, object_pairs_hook=object_pairs_hook)
    end = _skip(text, end)
    if end != len(text):
        raise _error("Extra data", text, end)
    return value


def _not_serializable(value: object) -> object:
    """What ``json.JSONEncoder.default`` does: refuse a value that is not a JSON type."""
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def encode(value: object) -> str:
    """Encode ``value`` exactly as ``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` does.

    The C encoder is called with json.dumps's arguments for those options: circular references checked,
    NaN and infinities allowed, keys in insertion order, no key skipped.
    """
    try:
        from _json import encode_basestring, make_encoder
    except ImportError:  # pragma: no cover - not CPython
        import json

        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if isinstance(value, str):
        return encode_basestring(value)  # json.JSONEncoder.encode's shortcut for a bare string
    encoder = make_encoder({}, _not_serializable, encode_basestring, None, ":", ",", False, False, True)
    return "".join(encoder(value, 0))

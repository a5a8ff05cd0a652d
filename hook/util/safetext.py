"""Tenant-controlled text made safe for a one-line message, JSON values and decoding errors named without
quoting them, and the two diagnostic line shapes upstream prints on stderr (``info``: Go's ``log``;
``warning``: logrus): functions, no classes.

Every value or name a container, image or pod annotation can choose goes through :func:`escape` before it
reaches a message, and every message goes through it again as a whole (``HookError.__str__`` in
``hook.util.errors``, the log functions) as a second line of defence, so no tenant text can start a second
line or send a terminal control sequence. The error classes (``hook.util.errors``) build their messages
from these; every module that raises one imports its class at the top, like any other name.
"""

import sys
import time

ESCAPE_LIMIT = 256
LINE_LIMIT = 4096
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def shows(text: str, encoding: str | None) -> bool:
    """Tell whether an output stream in ``encoding`` can show ``text`` (a Latin-1 or ASCII terminal cannot
    show ✓, ✗ or —: the commands for people fall back to +, x and -)."""
    try:
        text.encode(encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def escape(value: str, limit: int = ESCAPE_LIMIT) -> str:
    """Render tenant-controlled text for a one-line message: printable characters as they are, every other
    character (C0/C1 controls, DEL, line and paragraph separators, format characters such as bidi
    overrides, lone surrogates) as a Python-style escape (``\\n``, ``\\x1b``, ``\\u2028``), and at most
    ``limit`` characters of the rendering, then ``...``. Linear in ``limit``, whatever the value's length.
    """
    if len(value) <= limit and value.isprintable():
        return value
    pieces: list[str] = []
    length = 0
    for char in value:
        piece = char if char.isprintable() else _escape_char(char)
        length += len(piece)
        if length > limit:
            pieces.append("...")
            break
        pieces.append(piece)
    return "".join(pieces)


def _escape_char(char: str) -> str:
    """Spell one non-printable character as an escape."""
    named = _NAMED_ESCAPES.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def os_reason(err: OSError, *, go: bool = False) -> str:
    """Return an OSError's reason without the path it may carry (``strerror``, else the errno's text, else
    the exception's name): the one way an OS error becomes text. ``go``: with Go's lower-case first letter
    (``no such file or directory``), where our line matches the upstream hook's or our own install's."""
    if err.strerror:
        text = err.strerror
    elif err.errno:
        import posix

        text = posix.strerror(err.errno)
    else:
        text = type(err).__name__
    return text[:1].lower() + text[1:] if go else text


def json_kind(value: object) -> str:
    """Name a JSON value's type for a message, never its content."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def decode_error_reason(err: Exception) -> str:
    """Describe a JSON or UTF-8 decoding error by position, without quoting the input."""
    if isinstance(err, UnicodeDecodeError):
        return f"not valid UTF-8 at byte {err.start}"
    if isinstance(err, RecursionError):  # arrays or objects nested past the decoder's recursion limit
        return "nested too deeply"
    msg, lineno, colno = getattr(err, "msg", None), getattr(err, "lineno", None), getattr(err, "colno", None)
    if isinstance(msg, str) and lineno is not None:
        return f"{msg} at line {lineno} column {colno}"
    return type(err).__name__


# --- diagnostics on stderr --------------------------------------------------------------------------------


def info(message: str) -> None:
    """Print a plain line, as Go's ``log.Printf`` with no flags does."""
    sys.stderr.write(escape(message, LINE_LIMIT) + "\n")


def warning(message: str) -> None:
    """Print a logrus-style text warning: ``time="…" level=warning msg="…"``."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    escaped = escape(message, LINE_LIMIT).replace("\\", "\\\\").replace('"', '\\"')
    sys.stderr.write(f'time="{stamp}" level=warning msg="{escaped}"\n')

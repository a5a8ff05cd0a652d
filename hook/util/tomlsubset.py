"""A reader for the plain subset of TOML that config.toml files are written in, without importing ``tomllib``.

``tomllib`` costs more than an interpreter start (it imports ``typing``, ``re``, ``string`` and
``datetime`` and compiles its regular expressions); the hook would pay that on every GPU container start.
NVIDIA's shipped config.toml, and every example in our docs, uses only: comments, ``[dotted.table]``
headers, and ``bare-key = value`` lines whose value is ``true``/``false``, a decimal integer, a
single-line string without escapes, or a single-line array of such strings.

``parse_toml_subset`` reads exactly that and returns ``None`` for anything else (escapes, multi-line
strings or arrays, inline tables, floats, dates, dotted or quoted keys, duplicates, control characters…);
the caller then parses the text with ``tomllib``, which also produces the error message for invalid TOML.
For any text where it returns a document, ``tomllib.loads`` returns the same document (tested).
"""

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_DIGITS = frozenset("0123456789")
_SPACE = " \t"
# Control characters TOML allows in no comment or string (tab is allowed).
_CONTROL = frozenset(chr(c) for c in (*range(0x09), *range(0x0A, 0x20), 0x7F))


class _NotSubsetError(Exception):
    """The text uses TOML beyond the subset (or is invalid): leave it to tomllib."""


def parse_toml_subset(text: str) -> dict[str, object] | None:
    """Parse ``text`` if it is in the subset; None if it is not (then use tomllib)."""
    try:
        return _parse(text)
    except _NotSubsetError:
        return None


def _parse(text: str) -> dict[str, object]:
    """Parse line by line; raise _NotSubsetError on anything outside the subset."""
    root: dict[str, object] = {}
    table = root
    headers: set[tuple[str, ...]] = set()
    lines = text.split("\n")
    for number, raw in enumerate(lines, start=1):
        line = raw.removesuffix("\r") if number < len(lines) else raw  # CR only as part of CRLF
        index = _skip(line, 0)
        if index == len(line) or line[index] == "#":
            _end_of_line(line, index)
            continue
        if line[index] == "[":
            path, index = _header(line, index)
            if path in headers:
                raise _NotSubsetError
            headers.add(path)
            table = _descend(root, path)
        else:
            key, index = _key(line, index)
            if key in table:
                raise _NotSubsetError
            table[key], index = _value(line, index)
        _end_of_line(line, _skip(line, index))
    return root


def _skip(line: str, index: int) -> int:
    """Skip spaces and tabs."""
    while index < len(line) and line[index] in _SPACE:
        index += 1
    return index


def _end_of_line(line: str, index: int) -> None:
    """Accept the end of a line: nothing, or a comment without control characters."""
    if index == len(line):
        return
    if line[index] != "#" or any(c in _CONTROL for c in line[index:]):
        raise _NotSubsetError


def _bare_key(line: str, index: int) -> tuple[str, int]:
    """Read a bare key ``[A-Za-z0-9_-]+``."""
    end = index
    while end < len(line) and line[end] in _BARE:
        end += 1
    if end == index:
        raise _NotSubsetError
    return line[index:end], end


def _header(line: str, index: int) -> tuple[tuple[str, ...], int]:
    """Read ``[a.b.c]`` (bare keys, no spaces, not an array of tables)."""
    keys: list[str] = []
    index += 1
    while True:
        key, index = _bare_key(line, index)
        keys.append(key)
        if index < len(line) and line[index] == ".":
            index += 1
            continue
        if index < len(line) and line[index] == "]":
            return tuple(keys), index + 1
        raise _NotSubsetError


def _descend(root: dict[str, object], path: tuple[str, ...]) -> dict[str, object]:
    """Return the table at ``path``, creating the tables on the way."""
    table = root
    for key in path:
        child = table.setdefault(key, {})
        if not isinstance(child, dict):
            raise _NotSubsetError
        table = child
    return table


def _key(line: str, index: int) -> tuple[str, int]:
    """Read ``key =`` and return the key and the index after the ``=``."""
    key, index = _bare_key(line, index)
    index = _skip(line, index)
    if index == len(line) or line[index] != "=":
        raise _NotSubsetError
    return key, _skip(line, index + 1)


def _value(line: str, index: int) -> tuple[object, int]:
    """Read a boolean, a decimal integer, a plain string or a one-line array of plain strings."""
    if index == len(line):
        raise _NotSubsetError
    char = line[index]
    if char in "\"'":
        return _string(line, index)
    if char == "[":
        return _array(line, index)
    for word, value in (("true", True), ("false", False)):
        if line.startswith(word, index):
            return value, index + len(word)
    return _integer(line, index)


def _string(line: str, index: int) -> tuple[str, int]:
    """Read ``"…"`` or ``'…'`` without escapes, on one line, without control characters."""
    quote = line[index]
    end = line.find(quote, index + 1)
    if end < 0 or line.startswith(quote * 3, index):
        raise _NotSubsetError
    content = line[index + 1 : end]
    if "\\" in content or any(c in _CONTROL for c in content):
        raise _NotSubsetError
    return content, end + 1


def _array(line: str, index: int) -> tuple[list[str], int]:
    """Read ``[ "a", 'b', ]`` on one line: strings only, an optional trailing comma."""
    items: list[str] = []
    index = _skip(line, index + 1)
    while index < len(line) and line[index] != "]":
        if line[index] not in "\"'":
            raise _NotSubsetError
        item, index = _string(line, index)
        items.append(item)
        index = _skip(line, index)
        if index < len(line) and line[index] == ",":
            index = _skip(line, index + 1)
        elif index < len(line) and line[index] != "]":
            raise _NotSubsetError
    if index == len(line):
        raise _NotSubsetError
    return items, index + 1


def _integer(line: str, index: int) -> tuple[int, int]:
    """Read a decimal integer: an optional sign, no leading zero, no underscores."""
    start = index
    if line[index] in "+-":
        index += 1
    digits = index
    while index < len(line) and line[index] in _DIGITS:
        index += 1
    text = line[digits:index]
    if not text or (len(text) > 1 and text[0] == "0"):
        raise _NotSubsetError
    if index < len(line) and line[index] not in _SPACE and line[index] != "#":
        raise _NotSubsetError  # 1.5, 1e3, 1_000, 0x1F, dates: not in the subset
    return int(line[start:index]), index

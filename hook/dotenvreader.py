"""A strict dotenv reader in linear time: python-dotenv's grammar, without regular expressions.

It reads exactly the files python-dotenv's ``parse_stream`` reads without an error binding, and gives the
same keys and values in the same order (``tests/differential/test_dotenvreader.py`` checks this against
python-dotenv, which stays the reference and the writer's format). Where python-dotenv reports an error
binding, this reader stops with :class:`DotenvSyntaxError`: the env file is then refused as a whole.

Linear time, whatever the input (python-dotenv's own regular expressions backtrack quadratically on long
blank runs): the text is read line by line, each line sliced a bounded number of times; the next line
break is searched forward from where the last search stopped; a run of whitespace is skipped in chunks that
double in size; the closing quote of a value (which may span lines) is found in windows that double in
size; cutting an inline comment (``\\s+#.*`` in python-dotenv) is one search for a blank before ``#``.
Every search is a ``str`` method, so the constant is small too.

The grammar, per binding (python-dotenv 1.x):

- whitespace, line breaks included, is skipped; a ``#`` where a key would start makes the line a comment;
- ``export`` followed by blanks is skipped;
- the key is ``'anything but a quote'`` or a run of characters other than ``=``, ``#`` and whitespace;
- blanks, then ``=`` and blanks, then the value; no ``=`` at all gives a key without a value (``None``);
- a value is ``'single-quoted'`` (``\\\\`` and ``\\'`` decoded), ``"double-quoted"`` (``\\\\ \\' \\" \\a \\b
  \\f \\n \\r \\t \\v`` decoded), may span lines; or unquoted to the end of the line, cut at the first blank
  run followed by ``#``, trailing whitespace removed; blanks after ``=`` then ``#`` mean an empty value;
- then optional blanks and a ``# comment``, optional blanks, and the end of the line (``\\r\\n``, ``\\n``,
  ``\\r``) or of the file; anything else is a syntax error.

"Whitespace" is ``str.isspace`` (the same set as ``\\s`` in ``re``); "blanks" are whitespace but ``\\r`` and
``\\n``.
"""

from __future__ import annotations

BLANKS = (
    "\t\x0b\x0c\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)
_BLANK_TO_SPACE = {ord(char): " " for char in BLANKS}
# After every escaped backslash is set aside, each of these pairs is replaced (in any order: none of them
# can make another appear); python-dotenv decodes exactly these, a backslash before anything else stays.
_DOUBLE_QUOTE_ESCAPES = (
    ("\\'", "'"),
    ('\\"', '"'),
    ("\\a", "\a"),
    ("\\b", "\b"),
    ("\\f", "\f"),
    ("\\n", "\n"),
    ("\\r", "\r"),
    ("\\t", "\t"),
    ("\\v", "\v"),
)
_SINGLE_QUOTE_ESCAPES = (("\\'", "'"),)
_FIRST_WINDOW = 64

Binding = tuple[str, "str | None", int]


class DotenvSyntaxError(ValueError):
    """The text is not a file python-dotenv reads without an error; ``line`` is where the binding starts,
    ``bindings`` what was read before it."""

    def __init__(self, line: int) -> None:
        super().__init__(f"not a valid dotenv line (line {line})")
        self.line = line
        self.bindings: list[Binding] = []


def parse_dotenv(text: str) -> list[Binding]:
    """Return ``(key, value, line)`` for every binding of ``text``, in order; ``value`` is None for a key
    without ``=``; ``line`` is the line the key starts on. Comments and blank lines give nothing. Raises
    DotenvSyntaxError at the first binding python-dotenv would report as an error. A leading byte-order
    mark is ignored, as python-dotenv does."""
    reader = _Reader(text.removeprefix("\ufeff"))
    found: list[Binding] = []
    try:
        reader.bindings(found)
    except DotenvSyntaxError as err:
        err.bindings = found
        raise
    return found


class _Reader:
    """One text being read: the position of the next line break is remembered between searches."""

    __slots__ = ("counted_line", "counted_to", "has_cr", "length", "next_cr", "next_lf", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.length = len(text)
        self.has_cr = "\r" in text
        self.next_lf = -1
        self.next_cr = -1 if self.has_cr else self.length
        self.counted_to = 0
        self.counted_line = 1

    def bindings(self, found: list[Binding]) -> None:
        """Read every binding into ``found``: line by line, the common shapes directly, others through
        :meth:`binding`.

        A text with a lone ``\r`` (a line break for python-dotenv, but not for a ``\n`` search) is read
        through :meth:`binding` only.
        """
        text, length = self.text, self.length
        if self.has_cr and text.count("\r") != text.count("\r\n"):
            self.bindings_one_by_one(found)
            return
        position, line = 0, 1
        while position < length:
            end = text.find("\n", position)
            if end < 0:
                end = length
            raw = text[position:end]
            stripped = raw.strip()
            if not stripped:
                start = self.skip_whitespace(end)
                line_start = text.rfind("\n", position, start) + 1
                line += text.count("\n", position, line_start)
                position = max(line_start, end)
                continue
            if stripped[0] != "#":
                binding = _simple_binding(stripped, line)
                if binding is None:
                    self.counted_to, self.counted_line = position, line
                    binding, after = self.binding(position + len(raw) - len(raw.lstrip()))
                    line += text.count("\n", position, after)
                    position = after
                    if binding is not None:
                        found.append(binding)
                    continue
                found.append(binding)
            position, line = end + 1, line + 1

    def bindings_one_by_one(self, found: list[Binding]) -> None:
        """Read every binding through :meth:`binding`."""
        position = self.skip_whitespace(0)
        while position < self.length:
            binding, position = self.binding(position)
            if binding is not None:
                found.append(binding)
            position = self.skip_whitespace(position)

    def binding(self, start: int) -> tuple[Binding | None, int]:
        """Read the binding whose first character (not whitespace) is at ``start``; return it (None for a
        comment) and the index after the line it ends on."""
        text = self.text
        end = self.end_of_line(start)
        line = self.line_at(start)
        if text.startswith("export", start) and start + 6 < end and text[start + 6] in BLANKS:
            start = self.skip_blanks(start + 6, end)
            if start >= end:
                raise DotenvSyntaxError(line)
        first = text[start]
        if first == "#":
            return None, self.after_line(end)
        if first == "'":
            close = self.find_char("'", start + 1)
            if close == start + 1:
                raise DotenvSyntaxError(line)
            key, position = text[start + 1 : close], close + 1
            if close > end:
                end = self.end_of_line(position)
        else:
            key = _unquoted_key(text[start:end])
            if not key:
                raise DotenvSyntaxError(line)
            position = start + len(key)
        position = self.skip_blanks(position, end)
        value: str | None = None
        if position < end and text[position] == "=":
            after = self.skip_blanks(position + 1, end)
            char = text[after] if after < end else ""
            if char == "#" and after > position + 1:
                value, position = "", after
            elif char in ("'", '"'):
                close = self.closing_quote(after + 1, char, line)
                escapes = _SINGLE_QUOTE_ESCAPES if char == "'" else _DOUBLE_QUOTE_ESCAPES
                value, position = _decode_escapes(text[after + 1 : close], escapes), close + 1
                if close > end:
                    end = self.end_of_line(position)
            elif not char:
                value, position = "", after
            else:
                value, position = _cut_inline_comment(text[after:end]), end
        position = self.skip_blanks(position, end)
        if position < end and text[position] != "#":
            raise DotenvSyntaxError(line)
        return (key, value, line), self.after_line(end)

    def end_of_line(self, start: int) -> int:
        """Return the index of the first ``\\n`` or ``\\r`` at or after ``start`` (``length`` if none);
        ``start`` never decreases between calls, so each search starts where the last one stopped."""
        if self.next_lf < start:
            found = self.text.find("\n", start)
            self.next_lf = self.length if found < 0 else found
        if self.next_cr < start:
            found = self.text.find("\r", start)
            self.next_cr = self.length if found < 0 else found
        return min(self.next_lf, self.next_cr)

    def after_line(self, end: int) -> int:
        """Return the index after the line break at ``end`` (``\\r\\n`` is one)."""
        if end >= self.length:
            return self.length
        if self.text[end] == "\r" and self.text.startswith("\n", end + 1):
            return end + 2
        return end + 1

    def skip_blanks(self, start: int, end: int) -> int:
        """Return the first index in ``[start, end)`` that is not a blank (``end`` if none)."""
        segment = self.text[start:end]
        return end - len(segment.lstrip(BLANKS))

    def skip_whitespace(self, start: int) -> int:
        """Return the first index at or after ``start`` that is not whitespace (line breaks included),
        reading chunks that double in size: a long run costs linear time, a short one a small slice."""
        text, size = self.text, _FIRST_WINDOW
        while start < self.length:
            chunk = text[start : start + size]
            rest = len(chunk.lstrip())
            start += len(chunk) - rest
            if rest:
                return start
            size *= 2
        return start

    def find_char(self, char: str, start: int) -> int:
        """Return the index of the next ``char`` at or after ``start`` (a quoted key may span lines)."""
        found = self.text.find(char, start)
        if found < 0:
            raise DotenvSyntaxError(self.line_at(start))
        return found

    def closing_quote(self, start: int, quote: str, line: int) -> int:
        """Return the index of the quote closing a value whose text starts at ``start``.

        A backslash escapes any character, line breaks included, and backslashes pair up from the left,
        so in each window escaped backslashes and then escaped quotes are masked before searching for the
        quote. A window never ends inside a backslash pair, so the next one starts afresh; windows double
        in size, so the search costs at most about twice the value's length. Unterminated: a syntax error.
        """
        text, length, size = self.text, self.length, _FIRST_WINDOW
        while start < length:
            stop = min(start + size, length)
            window = text[start:stop]
            if "\\" in window:
                run = len(window) - len(window.rstrip("\\"))
                if run % 2 and stop < length:
                    stop += 1  # keep the escaped character with its backslash
                    window = text[start:stop]
                window = window.replace("\\\\", "\0\0").replace("\\" + quote, "\0\0")
            found = window.find(quote)
            if found >= 0:
                return start + found
            start, size = stop, size * 2
        raise DotenvSyntaxError(line)

    def line_at(self, index: int) -> int:
        """Return the 1-based line of ``index`` (``\\r\\n``, ``\\n`` and ``\\r`` each end a line);
        ``index`` never decreases between calls."""
        text, start = self.text, self.counted_to
        if index > start:
            breaks = text.count("\n", start, index)
            if self.has_cr:
                breaks += text.count("\r", start, index) - text.count("\r\n", start, index)
                if start > 0 and text[start - 1] == "\r" and text[start] == "\n":
                    breaks -= 1  # the \r before this stretch already ended that line
            self.counted_line += breaks
            self.counted_to = index
        return self.counted_line


def _simple_binding(line_text: str, line: int) -> Binding | None:
    """Read a line (stripped, neither blank nor a comment) of the common shapes -- ``NAME=value``,
    ``NAME="value"``, ``NAME='value'`` or ``NAME``, ``export`` before them or not, with an ASCII identifier
    as the name, no backslash in a quoted value and nothing after it -- or return None for any other."""
    if line_text.startswith("export") and len(line_text) > 6 and line_text[6] in BLANKS:
        line_text = line_text[6:].lstrip(BLANKS)
    equals = line_text.find("=")
    if equals < 0:
        # (not ``export`` itself: the blanks after it, if any, were stripped with the line's end)
        simple = line_text.isascii() and line_text.isidentifier() and line_text != "export"
        return (line_text, None, line) if simple else None
    key = line_text[:equals]
    if not (key.isascii() and key.isidentifier()):
        return None
    value = line_text[equals + 1 :]
    after = value.lstrip(BLANKS)
    if not after:
        return key, "", line
    first = after[0]
    if first == "#" and len(after) < len(value):
        return key, "", line
    if first in ("'", '"'):
        if len(after) > 1 and after[-1] == first and after.count(first) == 2 and "\\" not in after:
            return key, after[1:-1], line
        return None
    return key, _cut_inline_comment(after), line


def _unquoted_key(rest_of_line: str) -> str:
    """Return the key at the start of ``rest_of_line``: everything before ``=``, ``#`` or whitespace."""
    end = rest_of_line.find("=")
    if end < 0:
        end = len(rest_of_line)
    comment = rest_of_line.find("#", 0, end)
    candidate = rest_of_line[: end if comment < 0 else comment]
    if candidate.isprintable() and " " not in candidate:
        return candidate  # no blank is printable but the space
    blank = candidate.translate(_BLANK_TO_SPACE).find(" ")
    return candidate if blank < 0 else candidate[:blank]


def _decode_escapes(raw: str, escapes: tuple[tuple[str, str], ...]) -> str:
    """Decode the escapes python-dotenv decodes in a quoted value; any other backslash stays as it is.

    ``str.replace`` pairs backslashes from the left, as python-dotenv's substitution does; escaped
    backslashes are set aside first (as a character the value does not hold), so that what is left of a
    backslash run is one backslash that escapes the character after it.
    """
    if "\\" not in raw:
        return raw
    aside = next((char for char in ("\0", "\ud800") if char not in raw), None)
    if aside is None:
        return _decode_escapes_stepwise(raw, dict(escapes))
    decoded = raw.replace("\\\\", aside)
    for escape, char in escapes:
        decoded = decoded.replace(escape, char)
    return decoded.replace(aside, "\\")


def _decode_escapes_stepwise(raw: str, escapes: dict[str, str]) -> str:
    """The same decoding one backslash at a time (for a value holding both NUL and a lone surrogate)."""
    pieces: list[str] = []
    position = 0
    while True:
        backslash = raw.find("\\", position)
        if backslash < 0:
            pieces.append(raw[position:])
            return "".join(pieces)
        pieces.append(raw[position:backslash])
        pair = raw[backslash : backslash + 2]
        if pair == "\\\\":
            pieces.append("\\")
            position = backslash + 2
        elif pair in escapes:
            pieces.append(escapes[pair])
            position = backslash + 2
        else:
            pieces.append("\\")
            position = backslash + 1


def _cut_inline_comment(part: str) -> str:
    """Cut an unquoted value at the first whitespace run followed by ``#``, then strip trailing whitespace
    (python-dotenv: ``re.sub(r"\\s+#.*", "", part).rstrip()``)."""
    if part.find("#", 1) > 0:
        blank_hash = part.translate(_BLANK_TO_SPACE).find(" #")
        if blank_hash >= 0:
            return part[:blank_hash].rstrip()
    return part.rstrip()

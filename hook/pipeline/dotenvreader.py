r"""A strict dotenv reader in linear time: python-dotenv's grammar, read binding by binding, without ``re``.

It reads exactly the files python-dotenv's ``parse_stream`` reads without an error binding, and gives the
same keys and values in the same order (``tests/differential/test_dotenvreader.py`` checks this against
python-dotenv, which stays the reference and the writer's format). Where python-dotenv reports an error
binding, this reader stops with :class:`DotenvSyntaxError`: the env file is then refused as a whole.

The grammar (python-dotenv 1.2's ``dotenv/parser.py``; a byte-order mark at the start is dropped first)::

    file     = ( WS* line )* WS*
    line     = EXPORT? ( comment EOL | binding )
    binding  = key BLANK* ( "=" BLANK* value )? BLANK* comment? EOL
    key      = "'" <anything but "'">+ "'"                              (may span lines)
             | <anything but "=", "#" and WS>+
    value    = "'" ( BACKSLASH ANY | <anything but "'" and BACKSLASH> )* "'"    (may span lines)
             | '"' ( BACKSLASH ANY | <anything but '"' and BACKSLASH> )* '"'    (may span lines)
             | <nothing, where BLANK+ after "=" is followed by "#": that starts the comment>
             | <the rest of the line, cut before its first WS+ "#", trailing WS removed>
    comment  = "#" <the rest of the line>
    EXPORT   = "export" BLANK+
    EOL      = CR LF | LF | CR | <the end of the text>
    WS       = <a str.isspace() character, CR and LF included>
    BLANK    = <WS but CR and LF>

A key without ``=`` has the value None. In a value, ``'single quotes'`` decode ``\\`` and ``\'``;
``"double quotes"`` decode ``\\ \' \" \a \b \f \n \r \t \v``; any other backslash stays as it is.
Anything else is a syntax error.

The text is read line by line from the start, as the grammar reads it: only a quote that is open at the end
of its line carries the binding on to the next ones. Linear time, whatever the input (python-dotenv's own
regular expressions backtrack quadratically on long blank runs): each line is sliced and searched a bounded
number of times with ``str`` methods (C loops); the next line break is searched forward from where the last
search stopped; a run of whitespace between lines is skipped in chunks that double in size, and so is the
search for the quote closing a value; line breaks are counted only where more than one is passed at once.
"""

BLANKS = (
    "\t\x0b\x0c\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)
_BLANK_TO_SPACE = {ord(char): " " for char in BLANKS}
# python-dotenv decodes exactly these (a backslash before anything else stays as it is); none of them can
# make another appear, so the order does not matter.
_SINGLE_QUOTE_ESCAPES = (("\\'", "'"),)
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
_FIRST_CHUNK = 64

Binding = tuple[str, "str | None", int]


class DotenvSyntaxError(ValueError):
    """The text is not a file python-dotenv reads without an error; ``line`` is where the binding starts,
    ``bindings`` what was read before it."""

    def __init__(self, line: int, bindings: list[Binding]) -> None:
        super().__init__(f"not a valid dotenv line (line {line})")
        self.line = line
        self.bindings = bindings


def parse_dotenv(text: str) -> list[Binding]:
    """Return ``(key, value, line)`` for every binding of ``text``, in order; ``value`` is None for a key
    without ``=``; ``line`` is the line the key starts on. Comments and blank lines give nothing. Raises
    DotenvSyntaxError at the first binding python-dotenv would report as an error."""
    return _Reader(text.removeprefix("\ufeff")).bindings()


class _Reader:
    """One text being read, binding by binding (see the grammar above)."""

    __slots__ = ("found", "has_cr", "length", "next_cr", "next_lf", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.length = len(text)
        self.has_cr = "\r" in text
        self.next_lf = -1
        self.next_cr = -1 if self.has_cr else self.length
        self.found: list[Binding] = []

    def bindings(self) -> list[Binding]:
        """Read every binding, line by line; a comment or a blank line gives none."""
        text, length, has_cr = self.text, self.length, self.has_cr
        position = self.skip_whitespace(0)
        line = 1 + self.breaks(0, position)
        while position < length:
            if has_cr:
                end = self.end_of_line(position)
            else:
                end = text.find("\n", position)
                if end < 0:
                    end = length
            if text[position] != "#":
                last = self.binding(position, end, line)
                if last > end:  # a quoted key or value went on past its line
                    line += self.breaks(end, last)
                    end = last
            position = end + 2 if has_cr and text.startswith("\r\n", end) else end + 1
            line += 1
            if position < length and text[position].isspace():
                skipped = self.skip_whitespace(position)
                line += self.breaks(position, skipped)
                position = skipped
        return self.found

    def binding(self, start: int, end: int, line: int) -> int:
        """Read the binding at ``start`` (not whitespace, not ``#``) on ``line``, which ends at ``end``;
        return where its last line ends (a quoted key or value may go on past its first line)."""
        text = self.text
        rest = text[start:end]  # (a line holds no line break: its whitespace is all blanks)
        if rest.startswith("export") and rest[6:7].isspace():
            rest = rest[6:].lstrip()
            if not rest:
                raise DotenvSyntaxError(line, self.found)
            if rest[0] == "#":
                return end
            start = end - len(rest)
        if rest[0] == "'":
            close = text.find("'", start + 1)
            if close <= start + 1:  # not closed, or an empty key
                raise DotenvSyntaxError(line, self.found)
            key = text[start + 1 : close]
            if close > end:
                end = self.end_of_line(close + 1)
            rest = text[close + 1 : end].lstrip()
        else:
            equals = rest.find("=")
            key = rest if equals < 0 else rest[:equals]
            if not key.isidentifier():  # (an identifier holds no whitespace, "#" or "=")
                key = key.partition("#")[0]
                key = key.split(None, 1)[0] if key else ""
                if not key:
                    raise DotenvSyntaxError(line, self.found)
            rest = rest[equals:] if equals == len(key) else rest[len(key) :].lstrip()
        value: str | None = None
        if rest[:1] == "=":
            after = rest[1:]
            rest = after.lstrip()
            first = rest[:1]
            if first == "#" and len(rest) < len(after):
                value = ""  # blanks, then "#": an empty value, then a comment
            elif first in ("'", '"'):
                close = rest.find(first, 1)
                if close > 0 and "\\" not in rest:  # (closed on its line, no escape)
                    value, rest = rest[1:close], rest[close + 1 :].lstrip()
                else:
                    opening = end - len(rest)
                    close = self.closing_quote(opening + 1, first, line)
                    escapes = _SINGLE_QUOTE_ESCAPES if first == "'" else _DOUBLE_QUOTE_ESCAPES
                    value = _decode_escapes(text[opening + 1 : close], escapes)
                    if close > end:
                        end = self.end_of_line(close + 1)
                    rest = text[close + 1 : end].lstrip()
            else:
                value, rest = (_cut_inline_comment(rest) if "#" in rest else rest.rstrip()), ""
        if rest and rest[0] != "#":
            raise DotenvSyntaxError(line, self.found)
        self.found.append((key, value, line))
        return end

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

    def breaks(self, start: int, stop: int) -> int:
        """How many line breaks (``\\r\\n``, ``\\n``, ``\\r``) ``text[start:stop]`` holds (neither end falls
        inside a ``\\r\\n``)."""
        text = self.text
        count = text.count("\n", start, stop)
        if self.has_cr:
            count += text.count("\r", start, stop) - text.count("\r\n", start, stop)
        return count

    def skip_whitespace(self, start: int) -> int:
        """Return the first index at or after ``start`` that is not whitespace (line breaks included),
        reading chunks that double in size: a long run costs linear time, a short one a small slice."""
        text, size = self.text, _FIRST_CHUNK
        while start < self.length:
            chunk = text[start : start + size]
            rest = len(chunk.lstrip())
            start += len(chunk) - rest
            if rest:
                return start
            size *= 2
        return start

    def closing_quote(self, start: int, quote: str, line: int) -> int:
        """Return the index of the quote closing a value whose text starts at ``start`` (on ``line``).

        A backslash escapes the character after it (line breaks included), pairing from the left; in each
        chunk, escaped backslashes and then escaped quotes are masked before the quote is searched for. A
        chunk never ends inside a backslash pair, so the next one starts afresh; chunks double in size, so
        the search costs at most about twice the value's length. No closing quote: a syntax error.
        """
        text, length, size = self.text, self.length, _FIRST_CHUNK
        while start < length:
            stop = min(start + size, length)
            chunk = text[start:stop]
            if "\\" in chunk:
                if (len(chunk) - len(chunk.rstrip("\\"))) % 2 and stop < length:
                    stop += 1  # keep the escaped character with its backslash
                    chunk = text[start:stop]
                chunk = chunk.replace("\\\\", "\0\0").replace("\\" + quote, "\0\0")
            found = chunk.find(quote)
            if found >= 0:
                return start + found
            start, size = stop, size * 2
        raise DotenvSyntaxError(line, self.found)


def _decode_escapes(raw: str, escapes: tuple[tuple[str, str], ...]) -> str:
    """Decode the escapes python-dotenv decodes in a quoted value; any other backslash stays as it is.

    Escaped backslashes pair up from the left, as python-dotenv's substitution reads them: they are set aside
    first as a character the value does not hold (a lone high surrogate: text decoded from bytes holds none),
    so that every backslash left escapes the character after it; ``str.replace`` then decodes each pair.
    """
    if "\\" not in raw:
        return raw
    aside = "\ud800"
    if aside in raw:  # (only in text not decoded from bytes)
        aside = next(char for char in map(chr, range(0xD801, 0x110000)) if char not in raw)
    decoded = raw.replace("\\\\", aside)
    for escape, char in escapes:
        decoded = decoded.replace(escape, char)
    return decoded.replace(aside, "\\")


def _cut_inline_comment(part: str) -> str:
    """Cut an unquoted value at the first whitespace run followed by ``#``, then strip trailing whitespace
    (python-dotenv: ``re.sub(r"\\s+#.*", "", part).rstrip()``): the first few ``#`` are looked at one by
    one, then the rest in one search with every blank made a space."""
    hash_at = part.find("#", 1)
    for _ in range(8):
        if hash_at < 0:
            return part.rstrip()
        if part[hash_at - 1].isspace():
            return part[:hash_at].rstrip()
        hash_at = part.find("#", hash_at + 1)
    if hash_at > 0:
        blank_hash = part.translate(_BLANK_TO_SPACE).find(" #")
        if blank_hash >= 0:
            return part[:blank_hash].rstrip()
    return part.rstrip()

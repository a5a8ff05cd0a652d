"""A strict dotenv reader in linear time: python-dotenv's grammar, without regular expressions.

It reads exactly the files python-dotenv's ``parse_stream`` reads without an error binding, and gives the
same keys and values in the same order (``tests/differential/test_dotenvreader.py`` checks this against
python-dotenv, which stays the reference and the writer's format). Where python-dotenv reports an error
binding, this reader stops with :class:`DotenvSyntaxError`: the env file is then refused as a whole.

Linear time with a small constant, whatever the input (python-dotenv's own regular expressions backtrack
quadratically on long blank runs). Two readers share the work, both made of ``str`` methods (C loops).

**Not called since the security fix** (:func:`read_dotenv` reads every text binding by binding): the bulk
path's guess of what is quoted could pair a quote in an inline comment with a later one and drop every line
between. What follows describes it until it is deleted.

**The bulk path** reads almost every file that is valid, in a fixed number of passes over the whole text
(and, for a file of many bindings, a few list comprehensions of one step per line; never a Python loop
per character):

1. Every line break (``\\r\\n``, ``\\r``) becomes ``\\n``. One-character searches decide whether a line
   may be blank, a comment or indented (the two-character search follows only where it could succeed).
2. Quoted line breaks are set aside where a quote may hold one: the text is split at one kind of quote,
   then the other, every second piece taken as quoted, and the line breaks in those pieces replaced by
   marks (characters the text does not hold), so that every binding is one line. That split is a guess (a
   quote in a comment, in an unquoted value, or escaped, throws it off), so a mark is accepted only inside
   a quoted key or value of its line (a comment line holding one drops the guess too).
   A file of many lines tries this first when it has fewer ``=`` than line breaks, else after step 4.
3. Blank lines and comment lines are dropped in one list comprehension (a run of 32 or more blank lines
   is skipped in a few slices). Line numbers are counted only if asked for (the hook asks only to name a
   line it refuses): from the marks of each line, or with ``list.index`` when few lines are kept.
4. A file of 16 lines or more (blank and comment lines aside) is read all at once. The lines are cut at
   their first ``=`` (one ``replace`` and ``split`` when every line holds exactly one, which ``translate``
   checks by keeping only the ``=`` and the line breaks of an ASCII text; else one ``replace(.., 1)`` per
   line, mapped in C).
   The keys are joined into one text and checked: plain (no whitespace, ``#`` or mark, once blanks and
   ``export`` around them are stripped) or whole ``'quoted keys'``. So are the values: plain, or whole
   quoted values, an inline comment cut (one ``partition`` per value) where they do not read as they
   stand.
   "Whole" is checked by counting: every quote must pair up within one value (on a ``translate`` skeleton
   of quotes, separators and marks for an ASCII text, else by splitting at the quote), and as many quotes
   must open a value as close one. (Where both kinds of quote open values, each kind is counted so when
   neither appears inside the other's values; else each value is looked at once, a slice and a count.)
   Escaped backslashes and quotes are set aside before the quotes are counted; escapes are decoded and
   marks turned back into line breaks in the joined text; one ``split`` then gives the keys, and one the
   values.
5. A file of fewer lines, or one that step 4 does not read, is read line by line: each line with a
   handful of slices and searches (a quote left open at the end of its line sends it to step 2).

**The binding-by-binding reader** (:class:`_Reader`) reads the rest: every text with a syntax error (it
names the line), and a text whose quoted line breaks the guess of step 2 got wrong. It reads binding by
binding, each line sliced a bounded number of times; the next line break is searched forward from where
the last search stopped; a run of whitespace is skipped in chunks that double in size; the closing quote
of a value (which may span lines) is found in windows that double in size; cutting an inline comment
(``\\s+#.*`` in python-dotenv) is one search for a blank before ``#``. Linear on every input, it costs one
to three microseconds a binding here; step 5 under a microsecond a line, and step 4 a few tenths of one.

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

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

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
_QUOTES = ("'", '"')
_FEW_LINES = 16  # a text of fewer lines is read line by line
_PLAIN, _BLANK, _SKIPPED, _INDENTED = 0, 1, 2, 3  # what the lines of a text may be: see _normalize_breaks
_LONG_BLANK_RUN = "\n" * 32  # blank lines in a run this long are skipped in bulk
_INDENTS = (" ", "\t")
_KEEP_TABLES: dict[str, dict[int, int | None]] = {}  # translate tables keeping a few characters (see below)
# Characters that may join pieces of the text or stand in for quoted line breaks: the first three the text
# does not hold are used (see _absent_characters).
_MARK_CANDIDATES = (
    "\0\1\2\3\4\5\6\7\x08\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x7f"
    "\ud800\ud801\ud802\ud803\ud804"  # (text decoded from bytes holds no surrogate but \udc80-\udcff)
)

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
    return read_dotenv(text).tuples()


def read_dotenv(text: str) -> DotenvBindings:
    """:func:`parse_dotenv`'s bindings as columns, read binding by binding (:class:`_Reader`).

    The bulk path is not called: its guess of what is quoted could be thrown off by a quote in an inline
    comment so that every line up to the next quote was dropped (a pin or a refused key among them), and
    python-dotenv's verdict was not kept. Every env file is read by the binding-by-binding reader only.
    """
    text = text.removeprefix("\ufeff")
    reader = _Reader(text)
    found: list[Binding] = []
    try:
        reader.bindings(found)
    except DotenvSyntaxError as err:
        err.bindings = found
        raise
    return _columns(found)


class DotenvBindings:
    """The bindings of a text as columns: ``keys``, ``values`` (None for a key without ``=``; ``all_set``
    when there is none) and ``lines`` (the line each key starts on, counted when first asked for)."""

    __slots__ = ("_count_lines", "_lines", "all_set", "keys", "values")

    def __init__(
        self,
        keys: Sequence[str],
        values: Sequence[str | None],
        lines: Sequence[int] | None,
        count_lines: Callable[[], Sequence[int]] | None = None,
        *,
        all_set: bool | None = None,
    ) -> None:
        self.keys = keys
        self.values = values
        self._lines = lines
        self._count_lines = count_lines
        self.all_set = None not in values if all_set is None else all_set  # every key has "="

    @property
    def lines(self) -> Sequence[int]:
        """The line each key starts on."""
        if self._lines is None:
            self._lines = self._count_lines() if self._count_lines else ()
        return self._lines

    def tuples(self) -> list[Binding]:
        """``(key, value, line)`` of every binding, in order."""
        return list(zip(self.keys, self.values, self.lines, strict=True))


def _columns(found: list[Binding]) -> DotenvBindings:
    """Bindings as columns."""
    if not found:
        return DotenvBindings((), (), ())
    keys, values, lines = zip(*found, strict=True)
    return DotenvBindings(keys, values, lines)


# --- the bulk path: whole-text str methods, no Python loop per character and few per line -------------------


class _UnsureError(Exception):
    """The bulk path cannot vouch for this text (a syntax error, or a shape it does not read): the
    binding-by-binding reader reads it instead. With the argument _OPEN_QUOTE: a quote is left open at the
    end of its line, so quoted line breaks are to be set aside first."""


_OPEN_QUOTE = "a quote left open at the end of its line"


def _read_in_bulk(text: str) -> DotenvBindings | None:
    """Read ``text`` with whole-text str methods; None if it holds anything the bulk path does not vouch
    for (every syntax error among them: the binding-by-binding reader then names the line).

    A text of many lines is read all at once: first its lines as they are; then, if a quote may hold a
    line break, with quoted line breaks set aside (all at once, else line by line); then its lines as they
    are, line by line. (When fewer ``=`` than line breaks, and a quote, hint at values going on past their
    line, it is first read all at once with quoted line breaks set aside.) A text of a few lines is read
    line by line (quoted line breaks set aside when a quote is found open at the end of its line).
    """
    marks = _absent_characters(text)
    if marks is None:
        return None
    separator, lf_mark, cr_mark, spare = marks
    normalized, lines_are = _normalize_breaks(text)
    breaks = normalized.count("\n")
    if breaks >= _FEW_LINES:
        if normalized.count("=") < breaks and ('"' in text or "'" in text):
            read = _read_joined(text, lines_are, separator, (lf_mark, cr_mark), spare, by_line=False)
            if read is not None:
                return read
        try:
            read = _read_lines(normalized, None, lines_are, separator, marks="", spare=spare, by_line=False)
        except _UnsureError:
            read = None
        if read is not None:
            return read
        read = _read_joined(text, lines_are, separator, (lf_mark, cr_mark), spare, by_line=True)
        if read is not None:
            return read
        try:
            return _read_lines(normalized, None, lines_are, separator, marks="", spare=spare, by_line=True)
        except _UnsureError:
            return None
    try:
        return _read_lines(normalized, None, lines_are, separator, marks="", spare=spare, by_line=True)
    except _UnsureError as err:
        if err.args != (_OPEN_QUOTE,):
            return None
    return _read_joined(text, lines_are, separator, (lf_mark, cr_mark), spare, by_line=True)


def _read_joined(
    text: str, lines_are: int, separator: str, marks: tuple[str, str], spare: str, *, by_line: bool
) -> DotenvBindings | None:
    """Read ``text`` with its quoted line breaks set aside (all at once, else line by line if ``by_line``);
    None if no quote holds a line break, or the guess of what is quoted was wrong, or the bulk path does not
    vouch for the text."""
    lf_mark, cr_mark = marks
    joined = _set_quoted_breaks_aside(text, separator, lf_mark, cr_mark)
    if joined is None:
        return None
    cr = cr_mark if "\r" in text else ""
    if lines_are == _PLAIN:  # (joining lines makes none blank, a comment or indented)
        joined = joined.replace("\r\n", "\n").replace("\r", "\n") if "\r" in joined else joined
    else:
        joined, lines_are = _normalize_breaks(joined)

    def count_lines() -> list[int]:
        return _line_numbers(joined.split("\n"), lf_mark, cr)

    try:
        return _read_lines(
            joined, count_lines, lines_are, separator, marks=lf_mark + cr, spare=spare, by_line=by_line
        )
    except _UnsureError:
        return None  # a quote in a comment or an unquoted value threw the guess off


def _absent_characters(text: str) -> tuple[str, str, str, str] | None:
    """Characters ``text`` does not hold (None if it holds too many candidates): one to join pieces with,
    two to stand in for ``\\r`` and ``\\n`` inside quotes, and two (as one string) to stand in for escaped
    backslashes and quotes. None is whitespace, a quote, ``#``, ``=`` or a backslash; text decoded from
    bytes never holds the lone surrogates at the end."""
    found = [char for char in _MARK_CANDIDATES if char not in text][:5]
    if len(found) < 5:
        return None
    return found[0], found[1], found[2], found[3] + found[4]


def _normalize_breaks(text: str) -> tuple[str, int]:
    """``text`` with every line break (``\\r\\n``, ``\\n``, ``\\r``) made ``\\n``, and what its lines may
    be: _PLAIN (neither blank nor a comment), _BLANK (some may be blank, none a comment), _SKIPPED (some
    may be either), _INDENTED (and some start with a space or a tab)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text[:1] in _INDENTS or (" " in text and "\n " in text) or ("\t" in text and "\n\t" in text):
        return text, _INDENTED  # (a two-character search only where its second character is found at all)
    if text[:1] == "#" or ("#" in text and "\n#" in text):
        return text, _SKIPPED
    if not text or text[0] == "\n" or "\n\n" in text:
        return text, _BLANK
    return text, _PLAIN


def _set_quoted_breaks_aside(text: str, separator: str, lf_mark: str, cr_mark: str) -> str | None:
    """``text`` with the line breaks inside quotes replaced by the marks, so that every binding is one
    line; None if no quote holds a line break (then there is nothing to join).

    The text is split at one kind of quote, then the other: every second piece is taken to be quoted.
    That is a guess (a quote in a comment or an unquoted value, or an escaped one, throws it off); it is
    checked line by line afterwards: a mark is allowed only inside a quoted key or value of its line.
    """
    changed = False
    for quote in ('"', "'"):
        if quote not in text:
            continue
        pieces = text.split(quote)
        inside = separator.join(pieces[1::2])
        if "\n" in inside or "\r" in inside:
            pieces[1::2] = inside.replace("\n", lf_mark).replace("\r", cr_mark).split(separator)
            text = quote.join(pieces)
            changed = True
    return text if changed else None


def _line_numbers(lines: list[str], lf_mark: str, cr_mark: str) -> list[int]:
    """The number of each line's first line in the text, once quoted line breaks were set aside
    (``cr_mark`` empty: the text has no ``\\r``)."""
    if cr_mark:
        pair = cr_mark + lf_mark
        breaks = [line.count(lf_mark) + line.count(cr_mark) - line.count(pair) for line in lines]
    else:
        breaks = list(map(str.count, lines, [lf_mark] * len(lines)))
    number = 0
    return [(number := number + 1 + count) - count for count in breaks]


def _read_lines(
    text: str,
    numbers: Sequence[int] | Callable[[], Sequence[int]] | None,
    lines_are: int,
    separator: str,
    *,
    marks: str,
    spare: str,
    by_line: bool,
) -> DotenvBindings | None:
    """Read the bindings of ``text`` (every line break ``\\n``, every line a whole binding, a comment or
    blank; ``numbers``: each line's number, or what counts them, None for 1, 2, ...; ``lines_are``: see
    _normalize_breaks): in bulk where every binding has a shape :func:`_bulk_bindings` reads, else line by
    line (``by_line``; else None). The line numbers are counted only if asked for."""
    kept_numbers: Sequence[int] | Callable[[], Sequence[int]]
    if lines_are != _PLAIN:
        lines = _lines_but_long_blank_runs(text, None)[0]
        if lines_are == _INDENTED:
            lines = list(map(str.lstrip, lines))
        if lines_are == _BLANK:
            kept_lines = list(filter(None, lines))  # (C drops the empty lines)
        else:
            kept_lines = [line for line in lines if line and not "#" <= line < "$"]
        all_text, all_numbers = text, numbers

        def kept_numbers() -> Sequence[int]:  # counted only if asked for
            numbered = all_numbers() if callable(all_numbers) else all_numbers
            return _kept_numbers(lines, _lines_but_long_blank_runs(all_text, numbered)[1], kept_lines)

        text = "\n".join(kept_lines)
        if marks and _count_marks(text, marks) != _count_marks("".join(lines), marks):
            raise _UnsureError  # a comment holds a mark: the quotes were guessed wrong
        count = len(kept_lines)
    else:
        text = text.removesuffix("\n")  # (no blank line: at most one break at the end)
        count = text.count("\n") + 1 if text else 0
        if numbers is None:
            kept_numbers = range(1, count + 1)
        elif callable(numbers):
            count_all = numbers

            def kept_numbers() -> Sequence[int]:  # counted only if asked for
                return count_all()[:count]

        else:
            kept_numbers = numbers[:count]
    if not count:
        return DotenvBindings((), (), ())
    if count >= _FEW_LINES:
        bulk = _bulk_bindings(text, count, separator, marks, spare)
        if bulk is not None:
            if callable(kept_numbers):
                return DotenvBindings(bulk[0], bulk[1], None, kept_numbers, all_set=True)
            return DotenvBindings(bulk[0], bulk[1], kept_numbers, all_set=True)
        if not by_line:
            return None
    if callable(kept_numbers):
        kept_numbers = kept_numbers()
    found: list[Binding] = []
    for number, line in zip(kept_numbers, text.split("\n"), strict=True):
        binding = _line_binding(line, marks)
        if binding is not None:
            found.append((binding[0], binding[1], number))
    return _columns(found)


def _kept_numbers(lines: list[str], numbers: Sequence[int], kept: list[str]) -> Sequence[int]:
    """The numbers of the ``kept`` lines among ``lines`` (none of the others equals a kept one): found one
    by one with ``list.index`` when few lines are kept (a file of comments), else numbered in one list
    comprehension."""
    if len(kept) * 4 > len(lines):
        return [number for number, line in zip(numbers, lines, strict=True) if line and not "#" <= line < "$"]
    found: list[int] = []
    index = -1
    for line in kept:
        index = lines.index(line, index + 1)
        found.append(numbers[index])
    return found


def _lines_but_long_blank_runs(text: str, numbers: Sequence[int] | None) -> tuple[list[str], Sequence[int]]:
    """The lines of ``text`` and their numbers, without the blank lines of long runs (each skipped in a
    few slices, so that a file of blank lines costs no Python step per line)."""
    if _LONG_BLANK_RUN not in text:
        all_lines = text.split("\n")
        return all_lines, numbers or range(1, len(all_lines) + 1)
    lines: list[str] = []
    line_numbers: list[int] = []
    index = position = 0
    while True:
        run = text.find(_LONG_BLANK_RUN, position)
        piece = text[position:] if run < 0 else text[position:run]
        piece_lines = piece.split("\n")
        lines += piece_lines
        line_numbers += (
            numbers[index : index + len(piece_lines)]
            if numbers
            else range(index + 1, index + 1 + len(piece_lines))
        )
        if run < 0:
            return lines, line_numbers
        after = run + _skip(text, run, "\n")
        index += len(piece_lines) - 1 + after - run
        position = after


def _skip(text: str, start: int, chars: str) -> int:
    """How many characters of ``chars`` ``text`` holds in a row from ``start``, read in chunks that double
    in size (a long run costs linear time, a short one a small slice)."""
    size, skipped = _FIRST_WINDOW, 0
    while start + skipped < len(text):
        chunk = text[start + skipped : start + skipped + size]
        rest = len(chunk.lstrip(chars))
        skipped += len(chunk) - rest
        if rest:
            break
        size *= 2
    return skipped


def _bulk_bindings(
    text: str, count: int, separator: str, marks: str, spare: str
) -> tuple[Sequence[str], Sequence[str]] | None:
    """Read lines (``text``: no blank line, no comment) that are all ``KEY=VALUE`` of the common shapes at
    once, or return None.

    The lines are cut at their first ``=`` (in one ``replace`` and ``split`` when every line holds exactly
    one: ``translate`` keeps only the ``=`` and line breaks of an ASCII text, which must then alternate;
    else each line's first ``=`` is made a line break by a ``replace`` per line, mapped in C);
    the keys are joined into one text and so are the values, and each is checked and decoded as a whole:
    see :func:`_bulk_keys` and :func:`_bulk_values`.
    """
    keys: Sequence[str]
    values: Sequence[str]
    equals = text.count("=")
    if equals < count:
        return None  # a line without "=" (a key alone, or a value going on past its line)
    if equals == count and text.isascii() and f"{text}\n".translate(_keep_table("=\n")) == "=\n" * count:
        pieces = text.replace("=", "\n").split("\n")
        keys, values = pieces[0::2], pieces[1::2]
    else:
        cut = "\n".join(map(str.replace, text.split("\n"), ["="] * count, ["\n"] * count, [1] * count))
        pieces = cut.split("\n")  # (each line's first "=" made a line break: key, value, key, value, ...)
        if len(pieces) != 2 * count:
            return None  # a line without "="
        keys, values = pieces[0::2], pieces[1::2]
    bulk_keys = _bulk_keys(keys, separator, marks)
    if bulk_keys is None:
        return None
    bulk_values = _bulk_values(values, separator, marks, spare)
    if bulk_values is None:
        return None
    return bulk_keys, bulk_values


def _bulk_keys(keys: Sequence[str], separator: str, marks: str) -> Sequence[str] | None:
    """The keys, if each is a plain key (no whitespace, ``#`` or quote) or a whole ``'quoted key'``."""
    if "" in keys:
        return None
    joined = separator.join(keys)
    spaced = _has_whitespace(joined)
    if spaced:  # blanks around a key, or export before it
        keys = list(map(str.lstrip, keys))
        if "export" in joined:
            keys = [key[6:].lstrip() if key[6:7].isspace() and key[:6] == "export" else key for key in keys]
        keys = list(map(str.rstrip, keys))
        if "" in keys:
            return None
        joined = separator.join(keys)
        spaced = _has_whitespace(joined)
    plain = not (spaced or "#" in joined or (marks and _holds_any(joined, marks)))
    if "'" not in joined:
        return keys if plain else None
    if "''" in joined:
        return None  # an empty quoted key (or two quotes in a plain one)
    if plain and joined.isascii():
        if not _whole_quoted_counted(joined, "'", separator, ""):
            return None
    else:
        quoted = _whole_quoted(joined, "'", separator)
        if quoted is None:
            return None
        outside = quoted[0]
        if "#" in outside or _has_whitespace(outside) or (marks and _holds_any(outside, marks)):
            return None  # a plain key holds no whitespace (a quoted one may)
    joined = joined.replace("'", "")
    if marks:
        joined = _restore_breaks(joined, marks)
    return joined.split(separator)


def _bulk_values(values: Sequence[str], separator: str, marks: str, spare: str) -> list[str] | None:
    """The values, if each is plain (cut at an inline comment) or a whole quoted value (a comment after it
    cut), else None.

    A comment is cut in bulk only when the values do not read as they stand: a ``#`` after whitespace may
    be inside quotes as well as after them."""
    stripped = list(map(str.strip, values))  # the blanks after "=" and at the line's end
    joined = separator.join(stripped)
    if "#" not in joined:
        return _values_as_they_stand(stripped, joined, separator, marks, spare)
    if joined.startswith("#") or separator + "#" in joined:
        return None  # "= #..." (an empty value) or "=#..." (a value): line by line
    if not _has_whitespace(joined):
        return _values_as_they_stand(stripped, joined, separator, marks, spare)  # every "#" is literal
    if _any_quoted(joined, separator):
        read = _values_as_they_stand(stripped, joined, separator, marks, spare)
        if read is not None:
            return read
    cut = _cut_comments(stripped, joined, separator)
    if cut is None:
        return None
    return _values_as_they_stand(cut, separator.join(cut), separator, marks, spare)


def _values_as_they_stand(
    stripped: list[str], joined: str, separator: str, marks: str, spare: str
) -> list[str] | None:
    """The values (stripped, and ``joined`` by ``separator``), if each is plain or a whole quoted value."""
    double = joined.startswith('"') or separator + '"' in joined
    single = joined.startswith("'") or separator + "'" in joined
    if double and single:
        return _values_of_both_quotes(stripped, joined, separator, marks)
    if not double and not single:
        return stripped if _plain_values(joined, marks) else None
    quote = '"' if double else "'"
    if joined.count(separator + quote) + joined.startswith(quote) != joined.count(
        quote + separator
    ) + joined.endswith(quote):
        return None  # a quoted value with something after its closing quote (a comment?)
    if "\\" in joined:
        return _bulk_escaped_values(joined, quote, separator, marks, spare)
    if "#" not in joined and joined.isascii():
        if not _whole_quoted_counted(joined, quote, separator, marks):
            return None
    else:
        quoted = _whole_quoted(joined, quote, separator)
        if quoted is None or not _plain_values(quoted[0], marks):
            return None
    joined = joined.replace(quote, "")
    if marks:
        joined = _restore_breaks(joined, marks)
    return joined.split(separator)


def _values_of_both_quotes(stripped: list[str], joined: str, separator: str, marks: str) -> list[str] | None:
    """:func:`_values_as_they_stand` where some values are quoted with one kind of quote and some with the
    other, none holding a backslash or a mark: counted for each kind (when neither appears inside the
    other's values), else each value looked at once (a slice and a count)."""
    if "\\" in joined or (marks and _holds_any(joined, marks)):
        return None
    if (
        "#" not in joined
        and joined.isascii()
        and _whole_quoted_counted(joined, '"', separator, "")
        and _whole_quoted_counted(joined, "'", separator, "")
    ):
        return joined.replace('"', "").replace("'", "").split(separator)  # (neither kind inside the other)
    values = [
        (value[1:-1] if len(value) > 1 and value[-1] == first and value.count(first) == 2 else None)
        if (first := value[:1]) in _QUOTES
        else value
        for value in stripped
    ]
    if None in values:
        return None  # a quoted value that is not whole
    if "#" in joined:
        plain = separator.join([value for value in stripped if value[:1] not in _QUOTES])
        if not _plain_values(plain, ""):
            return None
    return values  # type: ignore[return-value]  # (None is not in it)


def _bulk_escaped_values(joined: str, quote: str, separator: str, marks: str, spare: str) -> list[str] | None:
    """:func:`_bulk_values` for values holding backslashes: escaped backslashes, then escaped quotes, are
    set aside (as pairs of the ``spare`` characters) before the quotes are checked, so that only quotes that
    open or close a value are left; the escapes are then put back and decoded in the quoted pieces only
    (an unquoted value keeps its backslashes)."""
    pair, escaped = spare[0] * 2, spare[1] * 2
    masked = joined.replace("\\\\", pair).replace("\\" + quote, escaped)
    quoted = _whole_quoted(masked, quote, separator)
    if quoted is None or not _plain_values(quoted[0], marks):
        return None
    pieces = masked.split(quote)
    inside = quoted[1].replace(pair, "\\\\").replace(escaped, "\\" + quote)
    escapes = _DOUBLE_QUOTE_ESCAPES if quote == '"' else _SINGLE_QUOTE_ESCAPES
    pieces[1::2] = _decode_escapes(inside, escapes).split(separator)
    joined = "".join(pieces).replace(pair, "\\\\").replace(escaped, "\\" + quote)
    if marks:
        joined = _restore_breaks(joined, marks)
    return joined.split(separator)


def _any_quoted(joined: str, separator: str) -> bool:
    """Whether any of the values ``joined`` by ``separator`` starts with a quote."""
    return joined[:1] in _QUOTES or separator + '"' in joined or separator + "'" in joined


def _plain_values(text: str, marks: str) -> bool:
    """Whether the unquoted values in ``text`` (joined by ``separator``) are read as they stand: no mark,
    and no ``#`` that may start a comment (after whitespace)."""
    if marks and _holds_any(text, marks):
        return False
    return "#" not in text or not _has_whitespace(text)


def _cut_comments(values: list[str], joined: str, separator: str) -> list[str] | None:
    """``values`` (``joined`` by ``separator``; none starts with ``#``) each cut at its first whitespace
    run followed by ``#`` (an inline comment): one ``partition`` per value where the only blank is the
    space, else after one ``translate`` of them all (blanks made spaces; ASCII only). A quoted value cut
    inside its quotes is then no longer whole, and is read line by line."""
    if not joined.isascii():
        return None
    spaced = joined.translate(_BLANK_TO_SPACE)
    if spaced == joined:
        return [value.partition(" #")[0].rstrip() for value in values]
    return [
        value[: len(blanked.partition(" #")[0])].rstrip()
        for value, blanked in zip(values, spaced.split(separator), strict=True)
    ]


def _whole_quoted(joined: str, quote: str, separator: str) -> tuple[str, str] | None:
    """Split ``joined`` (pieces joined by ``separator``) at ``quote``; if every quoted stretch is a whole
    piece, return the text outside the quotes and the quoted stretches joined by ``separator``."""
    pieces = joined.split(quote)
    if len(pieces) % 2 == 0:
        return None
    inside_pieces = pieces[1::2]
    inside = separator.join(inside_pieces)
    count = len(inside_pieces)
    if inside.count(separator) != count - 1:
        return None  # a quoted stretch runs over into the next piece
    opened = joined.count(separator + quote) + joined.startswith(quote)
    closed = joined.count(quote + separator) + joined.endswith(quote)
    if opened != count or closed != count:
        return None  # a quote inside a piece, not at its ends
    return "".join(pieces[0::2]), inside


def _whole_quoted_counted(joined: str, quote: str, separator: str, marks: str) -> bool:
    """Whether every ``quote`` in ``joined`` (an ASCII text of pieces joined by ``separator``) pairs up into
    a whole ``quote``-quoted piece, and every mark is inside one: :func:`_whole_quoted` without a string
    per piece.

    ``translate`` keeps only the quotes, separators and marks (one pass in C for an ASCII text). With the
    marks left out, the quotes must pair up with no separator between them; as many quotes must open a
    piece (first in it) as there are pairs, and as many close one (last in it): so each pair is a whole
    piece. A mark next to a separator, or at either end, is then outside every pair.
    """
    skeleton = joined.translate(_keep_table(quote + separator + marks))
    for mark in marks:
        if mark in skeleton and (
            separator + mark in skeleton
            or mark + separator in skeleton
            or skeleton.startswith(mark)
            or skeleton.endswith(mark)
        ):
            return False
        skeleton = skeleton.replace(mark, "")
    pairs = skeleton.count(quote + quote)
    if quote in skeleton.replace(quote + quote, ""):
        return False
    opened = joined.count(separator + quote) + joined.startswith(quote)
    closed = joined.count(quote + separator) + joined.endswith(quote)
    return opened == closed == pairs


def _keep_table(kept: str) -> dict[int, int | None]:
    """A ``translate`` table deleting every ASCII character but ``kept`` (built once, on first use)."""
    table = _KEEP_TABLES.get(kept)
    if table is None:
        others = "".join(char for char in map(chr, range(128)) if char not in kept)
        table = _KEEP_TABLES[kept] = str.maketrans("", "", others)
    return table


def _has_whitespace(text: str) -> bool:
    """Whether ``text`` holds any whitespace (one C pass: splitting at whitespace leaves it whole)."""
    return bool(text) and text.split() != [text]


def _count_marks(text: str, marks: str) -> int:
    """How many of ``marks`` ``text`` holds."""
    return sum(text.count(mark) for mark in marks)


def _holds_any(text: str, chars: str) -> bool:
    """Whether ``text`` holds any of ``chars``."""
    return any(char in text for char in chars)


def _restore_breaks(text: str, marks: str) -> str:
    """Put back the line breaks the marks (``\\n``, then ``\\r`` if the text has one) stand for."""
    text = text.replace(marks[0], "\n")
    return text.replace(marks[1], "\r") if len(marks) > 1 else text


def _line_binding(line: str, marks: str) -> tuple[str, str | None] | None:
    """Read one line (a whole binding, a comment or blank; no line break): ``(key, value)``, or None for a
    comment or a blank line. Raises _UnsureError(_OPEN_QUOTE) where a quote is not closed on the line
    (``marks`` empty: quoted line breaks not yet set aside), _UnsureError for anything else the bulk path
    does not vouch for (a syntax error among them)."""
    rest = line.lstrip()
    if rest.startswith("export") and rest[6:7].isspace():
        rest = rest[6:].lstrip()
        if not rest:
            raise _UnsureError
    if not rest or rest[0] == "#":
        _check_marks(line, marks, "")
        return None
    quoted = ""
    if rest[0] == "'":
        close = rest.find("'", 1)
        if close < 0:
            raise _UnsureError if marks else _UnsureError(_OPEN_QUOTE)
        if close == 1:
            raise _UnsureError
        key = quoted = rest[1:close]
        rest = rest[close + 1 :].lstrip()
    else:
        key = _unquoted_key(rest)
        if not key:
            raise _UnsureError
        rest = rest[len(key) :].lstrip()
    value: str | None = None
    if rest and rest[0] != "#":
        if rest[0] != "=":
            raise _UnsureError
        value, raw = _line_value(rest[1:], marks)
        quoted += raw
    if marks:
        _check_marks(line, marks, quoted)
        key = _restore_breaks(key, marks)
        if value is not None:
            value = _restore_breaks(value, marks)
    return key, value


def _line_value(after: str, marks: str) -> tuple[str, str]:
    """Read the value after ``=`` (to the end of the line): the value, and its quoted text as it stands."""
    rest = after.lstrip()
    if not rest or (rest[0] == "#" and len(rest) < len(after)):
        return "", ""  # nothing, or blanks then a comment
    if rest[0] not in _QUOTES:
        return _cut_inline_comment(rest), ""
    quote, body = rest[0], rest[1:]
    masked = body.replace("\\\\", "\0\0").replace("\\" + quote, "\0\0") if "\\" in body else body
    close = masked.find(quote)
    if close < 0:
        raise _UnsureError if marks else _UnsureError(_OPEN_QUOTE)
    tail = body[close + 1 :].lstrip()
    if tail and tail[0] != "#":
        raise _UnsureError
    raw = body[:close]
    return _decode_escapes(raw, _DOUBLE_QUOTE_ESCAPES if quote == '"' else _SINGLE_QUOTE_ESCAPES), raw


def _check_marks(line: str, marks: str, quoted: str) -> None:
    """Raise _UnsureError unless every mark of ``line`` is inside its quoted key or value (``quoted``)."""
    for mark in marks:
        if line.count(mark) != quoted.count(mark):
            raise _UnsureError


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

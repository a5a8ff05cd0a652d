"""Fully-qualified CDI device names (``vendor/class=name``), as the CDI parser defines them.

``is_qualified_name`` is on the hot path (the hook's mode check); the parsers with messages are for the
CDI engine. Messages follow container-device-interface's ``pkg/parser`` word for word, with every value
quoted by ``quote`` (bounded, no control characters), when the caller reveals the name (a container's
request, ``cdi validate``); a name read from a spec file on a container's start is never quoted.
"""

from hook.util.errors import CdiError
from hook.util.safetext import escape

_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
# The two grammars: (allowed first, allowed between; a letter or digit last in both), and the words for each
# rule broken, as the reference words them ({name}: the quoted text, {char}: the character not allowed
# between), then without the text, for a message that must not show it ({index}: where the character is).
_QUALIFIER = (
    _LETTERS,
    _ALNUM | frozenset("_-."),
    {
        "empty": "empty name",
        "first": "{name}, should start with letter",
        "between": "invalid character {char} in name {name}",
        "last": "{name}, should end with a letter or digit",
    },
    {
        "first": "should start with letter",
        "between": "invalid character at index {index} in name",
        "last": "should end with a letter or digit",
    },
)
_NAME = (
    _ALNUM,
    _ALNUM | frozenset("_-.:"),
    {
        "empty": "invalid (empty) device name",
        # The reference says "invalid class" here (pkg/parser's ValidateDeviceName): it is the device's name.
        "first": "invalid device name {name}, should start with a letter or digit",
        "between": "invalid character {char} in device name {name}",
        "last": "invalid name {name}, should end with a letter or digit",
    },
    {
        "first": "invalid device name, should start with a letter or digit",
        "between": "invalid character at index {index} in device name",
        "last": "invalid device name, should end with a letter or digit",
    },
)
_Grammar = tuple[frozenset[str], frozenset[str], dict[str, str], dict[str, str]]


def is_qualified_name(device: str) -> bool:
    """Tell whether ``device`` is ``vendor/class=name``.

    Upstream's validator panics on a one-character vendor or class; here those are simply valid.
    """
    if device.startswith("/"):
        return False
    kind, sep, name = device.partition("=")
    if not sep or not kind or not name:
        return False
    vendor, slash, klass = kind.partition("/")
    if not slash:
        return False
    return all(
        _error(text, grammar, False) is None
        for text, grammar in ((vendor, _QUALIFIER), (klass, _QUALIFIER), (name, _NAME))
    )


def quote(text: str, limit: int = 256) -> str:
    """Quote ``text`` for a message as Go's ``%q`` does: in double quotes, ``"`` and ``\\`` escaped, and the
    rest rendered by ``hook.util.safetext.escape`` (no control characters, at most ``limit`` characters)."""
    return '"' + escape(text.replace("\\", "\\\\").replace('"', '\\"'), limit) + '"'


def parse_qualifier(kind: str) -> tuple[str, str]:
    """Split ``vendor/class``; without a ``/`` (or an empty side) the vendor is "" and the class ``kind``."""
    vendor, slash, klass = kind.partition("/")
    if not slash or not vendor or not klass:
        return "", kind
    return vendor, klass


def parse_device(device: str) -> tuple[str, str, str]:
    """Split ``vendor/class=name`` unchecked; an unqualified name comes back as ``("", "", device)``."""
    if not device or device.startswith("/"):
        return "", "", device
    kind, sep, name = device.partition("=")
    if not sep or not kind or not name:
        return "", "", device
    vendor, klass = parse_qualifier(kind)
    if not vendor:
        return "", "", device
    return vendor, klass, name


def vendor_error(vendor: str, *, reveal: bool = False) -> str | None:
    """Say why ``vendor`` is no valid vendor name (None when it is); ``reveal``: quote it (see ``_error``)."""
    reason = _error(vendor, _QUALIFIER, reveal)
    return None if reason is None else f"invalid vendor. {reason}"


def class_error(klass: str, *, reveal: bool = False) -> str | None:
    """Say why ``klass`` is no valid class name (None when it is); ``reveal``: quote it (see ``_error``)."""
    reason = _error(klass, _QUALIFIER, reveal)
    return None if reason is None else f"invalid class. {reason}"


def device_name_error(name: str, *, reveal: bool = False) -> str | None:
    """Say why ``name`` is no valid device name (None when it is); ``reveal``: quote it (see ``_error``)."""
    return _error(name, _NAME, reveal)


def _error(text: str, grammar: _Grammar, reveal: bool) -> str | None:
    """The words for the first rule of ``grammar`` that ``text`` breaks (empty, first character, a character
    between, last character); None when ``text`` is valid. With ``reveal`` (a name a person or a container
    gave, or ``cdi validate``), the reference's words, the text quoted and the character at fault rendered as
    Go's ``'%c'`` would (control characters escaped); without it (a spec file read on a container's start),
    the rule and the character's index only: the file's content never reaches a message."""
    first, between, words, hidden = grammar
    index = next((i for i, char in enumerate(text[1:-1], 1) if char not in between), 0)
    if not text:
        rule = "empty"
    elif text[0] not in first:
        rule = "first"
    elif index:
        rule = "between"
    elif text[-1] not in _ALNUM:
        rule = "last"
    else:
        return None
    if not reveal:
        return hidden.get(rule, words[rule]).format(index=index)
    char = "'" + quote(text[index] if index else "")[1:-1] + "'"
    return words[rule].format(name=quote(text), char=char)


def parse_qualified_name(device: str) -> tuple[str, str, str]:
    """Return ``(vendor, class, name)`` of a fully qualified device name, or raise CdiError saying why not."""
    vendor, klass, name = parse_device(device)
    if not vendor:
        raise CdiError(f"unqualified device {quote(device)}, missing vendor")
    for reason in (
        vendor_error(vendor, reveal=True),
        class_error(klass, reveal=True),
        device_name_error(name, reveal=True),
    ):
        if reason is not None:
            raise CdiError(f"invalid device {quote(device)}: {reason}")
    return vendor, klass, name

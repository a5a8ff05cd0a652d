"""Fully-qualified CDI device names (``vendor/class=name``), as the CDI parser defines them.

``is_qualified_name`` is on the hot path (the hook's mode check); the parsers with messages are for the
CDI engine. Messages follow container-device-interface's ``pkg/parser`` word for word, with every value
quoted by ``quote`` (bounded, no control characters).
"""

from __future__ import annotations

from hook.util.errors import CdiError
from hook.util.safetext import escape

_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_QUALIFIER_MIDDLE = _ALNUM | frozenset("_-.")
_NAME_MIDDLE = _ALNUM | frozenset("_-.:")


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
    return _valid_qualifier(vendor) and _valid_qualifier(klass) and _valid_name(name)


def _valid_qualifier(text: str) -> bool:
    """Vendor or class: a letter first, a letter or digit last, letters, digits, ``_-.`` between."""
    if not text or text[0] not in _LETTERS or text[-1] not in _ALNUM:
        return False
    return all(c in _QUALIFIER_MIDDLE for c in text[1:-1])


def _valid_name(text: str) -> bool:
    """Device name: a letter or digit first and last, also ``_-.:`` between."""
    if not text or text[0] not in _ALNUM or text[-1] not in _ALNUM:
        return False
    return all(c in _NAME_MIDDLE for c in text[1:-1])


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


def vendor_error(vendor: str) -> str | None:
    """Say why ``vendor`` is no valid vendor name (None when it is)."""
    reason = _qualifier_error(vendor)
    return None if reason is None else f"invalid vendor. {reason}"


def class_error(klass: str) -> str | None:
    """Say why ``klass`` is no valid class name (None when it is)."""
    reason = _qualifier_error(klass)
    return None if reason is None else f"invalid class. {reason}"


def _qualifier_error(text: str) -> str | None:
    """The reference's rule for a vendor or class: a letter first, a letter or digit last, ``_-.`` between."""
    if not text:
        return "empty name"
    if text[0] not in _LETTERS:
        return f"{quote(text)}, should start with letter"
    for char in text[1:-1]:
        if char not in _QUALIFIER_MIDDLE:
            return f"invalid character {_char(char)} in name {quote(text)}"
    if text[-1] not in _ALNUM:
        return f"{quote(text)}, should end with a letter or digit"
    return None


def device_name_error(name: str) -> str | None:
    """Say why ``name`` is no valid device name (None when it is), in the reference's words."""
    if not name:
        return "invalid (empty) device name"
    if name[0] not in _ALNUM:
        return f"invalid class {quote(name)}, should start with a letter or digit"
    for char in name[1:-1]:
        if char not in _NAME_MIDDLE:
            return f"invalid character {_char(char)} in device name {quote(name)}"
    if name[-1] not in _ALNUM:
        return f"invalid name {quote(name)}, should end with a letter or digit"
    return None


def _char(char: str) -> str:
    """Render one character as Go's ``'%c'`` would, control characters escaped."""
    return "'" + quote(char)[1:-1] + "'"


def parse_qualified_name(device: str) -> tuple[str, str, str]:
    """Return ``(vendor, class, name)`` of a fully qualified device name, or raise CdiError saying why not."""
    vendor, klass, name = parse_device(device)
    if not vendor:
        raise CdiError(f"unqualified device {quote(device)}, missing vendor")
    for reason in (vendor_error(vendor), class_error(klass), device_name_error(name)):
        if reason is not None:
            raise CdiError(f"invalid device {quote(device)}: {reason}")
    return vendor, klass, name

"""Fully-qualified CDI device names (``vendor/class=name``), as the CDI parser defines them."""

from __future__ import annotations

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

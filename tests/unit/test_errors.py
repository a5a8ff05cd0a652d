"""hook.errors: escape() renders tenant text safely, and every HookError is one safe line whatever it holds."""

from __future__ import annotations

import re

import pytest

from hook.errors import LINE_LIMIT, EnvFileError, HookError, RequestError, escape


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("compute,utility", "compute,utility", id="plain-text-unchanged"),
        pytest.param("a b", "a b", id="space-kept"),
        pytest.param("x\nlevel=fatal", "x\\nlevel=fatal", id="newline"),
        pytest.param("\r\t", "\\r\\t", id="carriage-return-and-tab"),
        pytest.param("\x1b[31mred", "\\x1b[31mred", id="escape-sequence"),
        pytest.param("\x00\x7f\x85\x9b", "\\x00\\x7f\\x85\\x9b", id="nul-del-c1"),
        pytest.param("a\u2028b\u2029c", "a\\u2028b\\u2029c", id="unicode-line-separators"),
        pytest.param("\u202egnp.exe", "\\u202egnp.exe", id="bidi-override"),
        pytest.param("\udcff", "\\udcff", id="lone-surrogate"),
        pytest.param("\U000e0001", "\\U000e0001", id="astral-format-char"),
        pytest.param("é中", "é中", id="printable-non-ascii-unchanged"),
        pytest.param("", "", id="empty"),
    ],
)
def test_escape(value: str, expected: str) -> None:
    """Printable characters stay; every other one becomes a visible escape."""
    assert escape(value) == expected


@pytest.mark.parametrize(
    ("value", "limit", "expected"),
    [
        pytest.param("a" * 10, 10, "a" * 10, id="at-the-limit"),
        pytest.param("a" * 11, 10, "a" * 10 + "...", id="over-the-limit"),
        pytest.param("abcdefghi\n", 10, "abcdefghi...", id="escape-that-would-cross-the-limit"),
        pytest.param("\n" * 1000, 6, "\\n\\n\\n...", id="limit-counts-the-rendering"),
    ],
)
def test_escape_bounds_length(value: str, limit: int, expected: str) -> None:
    """At most ``limit`` characters of the rendering, then ``...``."""
    assert escape(value, limit) == expected


def test_escape_default_limit() -> None:
    """The default bound is 256 characters (and ``...``), whatever the value's length."""
    assert escape("x" * (16 * 1024 * 1024)) == "x" * 256 + "..."


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(HookError("bad\n\x1b[2Jvalue"), id="hook-error"),
        pytest.param(EnvFileError("bad\n\x1b[2Jvalue"), id="env-file-error"),
        pytest.param(RequestError("bad\n\x1b[2Jvalue", variable="X"), id="request-error"),
    ],
)
def test_hook_error_str_is_one_safe_line(error: HookError) -> None:
    """A message built without escaping still prints as one line without control characters."""
    assert str(error) == "bad\\n\\x1b[2Jvalue"


def test_hook_error_str_is_bounded() -> None:
    """A whole message is bounded too."""
    assert re.fullmatch(rf"^x{{{LINE_LIMIT}}}\.\.\.$", str(HookError("x" * (LINE_LIMIT * 2))))

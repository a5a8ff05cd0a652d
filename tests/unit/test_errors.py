"""hook.util.errors: escape() renders tenant text safely, every HookError is one safe line whatever it holds, and
an OSError becomes one line with the action, the path and the reason."""

from __future__ import annotations

import errno
import os
import re

import pytest

from hook.util.errors import (
    EnvFileError,
    HookError,
    RequestError,
    SystemCallError,
    describe_os_error,
    os_error,
)
from hook.util.safetext import LINE_LIMIT, escape


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


@pytest.mark.parametrize(
    ("action", "path", "err", "line"),
    [
        pytest.param(
            "write",
            "/b/config.json",
            OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/b/.config.json.1.ab.tmp"),
            "could not write /b/config.json: No space left on device",
            id="enospc-temp-name-not-shown",
        ),
        pytest.param(
            "write",
            "/b/config.json",
            OSError(errno.EROFS, os.strerror(errno.EROFS)),
            "could not write /b/config.json: Read-only file system",
            id="read-only",
        ),
        pytest.param(
            "read env file",
            "/run/nvidia-env/a.env",
            OSError(errno.EIO, os.strerror(errno.EIO)),
            "could not read env file /run/nvidia-env/a.env: Input/output error",
            id="eio",
        ),
        pytest.param(
            "read env file",
            "/run/nvidia-env/a\nb\x1b.env",
            PermissionError(errno.EACCES, os.strerror(errno.EACCES)),
            "could not read env file /run/nvidia-env/a\\nb\\x1b.env: Permission denied",
            id="control-characters-escaped",
        ),
        pytest.param(
            "read",
            "/x",
            OSError(errno.EIO, ""),
            "could not read /x: Input/output error",
            id="no-strerror-uses-errno-text",
        ),
        pytest.param("read", "/x", OSError(), "could not read /x: OSError", id="no-errno"),
    ],
)
def test_os_error_is_one_line(action: str, path: str, err: OSError, line: str) -> None:
    """The action, the path (control characters escaped) and the system's reason, on one line."""
    result = os_error(action, path, err)
    assert isinstance(result, SystemCallError)
    assert str(result) == line
    assert result.errno == err.errno
    assert result.exit_code == 1


def test_os_error_bounds_the_path() -> None:
    """A very long path is cut, so a message stays one readable line."""
    assert str(os_error("read", "/" + "a" * 1000, OSError(errno.EIO, "Input/output error"))) == (
        f"could not read /{'a' * 255}...: Input/output error"
    )


@pytest.mark.parametrize(
    ("err", "line"),
    [
        pytest.param(
            OSError(errno.ENOSPC, "No space left on device", "/b/f"),
            "could not access /b/f: No space left on device",
            id="one-path",
        ),
        pytest.param(
            OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b"),
            "could not access /a -> /b: Invalid cross-device link",
            id="two-paths",
        ),
        pytest.param(
            OSError(errno.EIO, "Input/output error"), "system error: Input/output error", id="no-path"
        ),
    ],
)
def test_describe_os_error(err: OSError, line: str) -> None:
    """The entry points' last line of defence still names the path and the reason."""
    assert describe_os_error(err) == line

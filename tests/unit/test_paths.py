"""hook.util.paths' path operations give exactly os.path's results, without importing os."""

from __future__ import annotations

import os
import posixpath
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hook.util import paths
from hook.util.paths import go_clean

# Paths made of the characters that matter to these functions.
PATHS = st.text(alphabet="/.a-", max_size=14)


@settings(max_examples=1500, deadline=None)
@given(PATHS, st.lists(PATHS, max_size=3))
def test_same_results_as_os_path(path: str, parts: list[str]) -> None:
    """join, dirname, basename and normpath agree with posixpath on random slash/dot paths."""
    assert paths.join(path, *parts) == posixpath.join(path, *parts)
    assert paths.dirname(path) == posixpath.dirname(path)
    assert paths.basename(path) == posixpath.basename(path)
    assert paths.normpath(path) == posixpath.normpath(path)


def test_exists_and_isfile(tmp_path: Path) -> None:
    """exists and isfile follow symlinks and say False for what is not there, as os.path's do."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for name in ("file", "link", "dangling", "nowhere", ""):
        path = str(tmp_path / name)
        assert (paths.exists(path), paths.isfile(path)) == (os.path.exists(path), os.path.isfile(path))  # noqa: PTH110, PTH113 - the reference
    assert (paths.exists("a\0b"), paths.isfile("a\0b")) == (False, False)


def test_environ_is_os_environ() -> None:
    """environ() decodes the process environment as os.environ does (undecodable bytes included)."""
    env = {b"PLAIN": b"value", b"BYTES": b"\xff\xfe", b"UTF8": "é".encode()}
    code = "import os, sys; from hook.util.paths import environ; sys.exit(0 if environ() == dict(os.environ) else 1)"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


@pytest.mark.parametrize(
    ("path", "cleaned"),
    [
        pytest.param("", ".", id="empty"),
        pytest.param("//dev/null", "/dev/null", id="double-slash-root"),
        pytest.param("///a//b/../c/", "/a/c", id="mixed"),
        pytest.param("a/../../b", "../b", id="relative-up"),
    ],
)
def test_go_clean(path: str, cleaned: str) -> None:
    """Lexical cleaning matches Go's filepath.Clean."""
    assert go_clean(path) == cleaned

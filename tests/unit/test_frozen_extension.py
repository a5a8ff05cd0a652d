"""The interpreter's extension modules the finder serves (``hook.freeze.EXTENSIONS``: ``_json``): found in
their directory at once, as the path finder would find them, and only while the file is the one install saw.
"""

from __future__ import annotations

import _json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from hook import FrozenFinder
from hook.freeze import extension_entry
from hook.install.tree import _FREEZE_CODE

JSON_FILE = str(getattr(_json, "__file__", ""))
pytestmark = pytest.mark.skipif(not JSON_FILE, reason="_json is built into this interpreter")


def test_the_entry_names_the_file_and_its_path_entry() -> None:
    """The entry: the file's name, mtime and size, and the sys.path entry (from the end) that holds it."""
    entry = extension_entry("_json")
    assert entry is not None
    name, mtime, size, cached, index, end = entry
    found = Path(JSON_FILE).stat()
    assert (sys.path[index] + "/" + name, mtime, size, cached, end) == (
        JSON_FILE,
        found.st_mtime_ns,
        found.st_size,
        "",
        -1,
    )


@pytest.mark.parametrize(
    ("change", "served"),
    [
        pytest.param({}, True, id="as-installed"),
        pytest.param({1: 1}, False, id="other-mtime"),
        pytest.param({2: 1}, False, id="other-size"),
        pytest.param({4: -99}, False, id="no-such-path-entry"),
    ],
)
def test_the_finder_serves_the_file_only_while_it_is_unchanged(change: dict[int, int], served: bool) -> None:
    """A spec with the interpreter's own extension loader and origin, or None (the usual import)."""
    found = extension_entry("_json")
    assert found is not None
    name, mtime, size, cached, index, end = found
    mtime += change.get(1, 0)
    size += change.get(2, 0)
    index += change.get(4, 0)
    finder = FrozenFinder("/nonexistent", {"_json": (name, mtime, size, cached, index, end)}, -1, 0)
    spec = finder.find_spec("_json")
    if not served:
        assert spec is None
        return
    assert spec is not None
    assert (spec.origin, type(spec.loader).__name__, spec.has_location) == (
        JSON_FILE,
        "ExtensionFileLoader",
        True,
    )


def test_a_started_hook_loads_json_without_listing_its_directory(tmp_path: Path) -> None:
    """In a fresh ``python -I -S`` with a blob-built lib: ``_json`` is the same file, and the path finder
    never looked at (listed) its directory."""
    lib = tmp_path / "lib"
    shutil.copytree(REPO / "hook", lib / "hook", ignore=shutil.ignore_patterns("__pycache__"))
    # built as install builds it: the interpreter with -I -S, the package's lib first on sys.path
    subprocess.run(
        [sys.executable, "-I", "-S", "-B", "-c", _FREEZE_CODE, str(lib), str(lib)], check=True, timeout=60
    )
    code = (
        "import sys\n"
        f"sys.path[:0] = [{str(lib)!r}]\n"
        "import hook\n"
        f"hook.install_finder({str(lib)!r})\n"
        "import _json\n"
        "print(_json.__file__)\n"
        "print(_json.__file__.rpartition('/')[0] in sys.path_importer_cache)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30, check=True
    )
    assert proc.stdout.splitlines() == [JSON_FILE, "False"]

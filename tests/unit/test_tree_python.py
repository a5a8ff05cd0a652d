"""``install --python tree``: the interpreter copied into the tree (hook.install.bundle) and how everything
starts it (hook.launcher: through its own loader, with only its own libraries)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hook.install.bundle import elf_interpreter, find_loader, kept, parse_list
from hook.install.common import InstallError
from hook.launcher import bundled_command, own_command, python_command, tree_command

LIST_OUTPUT = """\
\tlinux-vdso.so.1 (0x00007ffd5a1f2000)
\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f3c1a2b4000)
\tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f3c1a295000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f3c1a0b4000)
\t/lib64/ld-linux-x86-64.so.2 => /lib64/ld-linux-x86-64.so.2 (0x00007f3c1a3b6000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f3c1a3b6000)
"""


def test_bundled_command_is_the_loader_with_only_the_tree_libraries() -> None:
    """The command names the loader, the tree's library directory, and the interpreter twice (as argv[0] for
    sys.executable, and as the file the loader runs)."""
    assert tree_command("/opt/gpu-env-hook") == [
        "/opt/gpu-env-hook/current/python/ld-linux-x86-64.so.2",
        "--library-path",
        "/opt/gpu-env-hook/current/python/lib",
        "--argv0",
        "/opt/gpu-env-hook/current/python/bin/python3.11",
        "/opt/gpu-env-hook/current/python/bin/python3.11",
    ]
    assert python_command("tree", "/t") == tree_command("/t")
    assert python_command("/usr/bin/python3", "/t") == ["/usr/bin/python3"]


def test_parse_list_names_each_library_once_and_skips_the_loader_and_vdso() -> None:
    """The loader's --list output: soname -> path; the vDSO and the loader (copied on its own) are not libraries."""
    assert parse_list(LIST_OUTPUT, "python") == {
        "libm.so.6": "/lib/x86_64-linux-gnu/libm.so.6",
        "libz.so.1": "/lib/x86_64-linux-gnu/libz.so.1",
        "libc.so.6": "/lib/x86_64-linux-gnu/libc.so.6",
    }


def test_parse_list_refuses_a_library_it_cannot_find() -> None:
    """A library the loader does not find here cannot be copied: install stops in one line."""
    with pytest.raises(InstallError) as caught:
        parse_list("\tlibyaml-0.so.2 => not found\n", "/x/_yaml.so")
    assert str(caught.value) == (
        "--python tree: /x/_yaml.so needs libyaml-0.so.2, which the loader does not find here"
    )


def test_elf_interpreter_reads_pt_interp() -> None:
    """This machine's interpreter names its loader; a script and a static binary name none."""
    with open(os.path.realpath(sys.executable), "rb") as fh:
        assert elf_interpreter(fh.read(65536)) == "/lib64/ld-linux-x86-64.so.2"
    assert elf_interpreter(b"#!/bin/sh\n") is None
    with open("/bin/busybox", "rb") as fh:  # busybox-static
        assert elf_interpreter(fh.read(65536)) is None


@pytest.mark.parametrize(
    ("relative", "copied"),
    [
        pytest.param("json/decoder.py", True, id="json"),
        pytest.param("__pycache__/shlex.cpython-311.pyc", True, id="kept-module-pyc"),
        pytest.param("__pycache__/shlex.cpython-311.opt-1.pyc", False, id="optimised-pyc"),
        pytest.param("__pycache__/turtle.cpython-311.pyc", False, id="skipped-module-pyc"),
        pytest.param("asyncio/events.py", False, id="asyncio"),
        pytest.param("encodings/utf_8.py", True, id="utf-8"),
        pytest.param("encodings/__pycache__/cp1252.cpython-311.pyc", False, id="cp1252"),
        pytest.param("lib-dynload/_json.cpython-311-x86_64-linux-gnu.so", True, id="_json"),
        pytest.param("lib-dynload/_ssl.cpython-311-x86_64-linux-gnu.so", False, id="_ssl-openssl"),
        pytest.param("lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so", False, id="_ctypes-libffi"),
    ],
)
def test_standard_library_selection(relative: str, copied: bool) -> None:
    """What of the standard library goes into the tree."""
    assert kept(relative) is copied


def run_tree(tree_python: list[str], code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with the tree's interpreter as the engines start it (-I -S -X utf8), empty environment."""
    return subprocess.run(
        [*tree_python, "-I", "-S", "-X", "utf8", "-c", code],
        env={},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_tree_python_finds_its_prefix_and_stays_isolated(tree_python: list[str]) -> None:
    """Started through its loader, the interpreter is the tree's (sys.executable, sys.prefix), isolated and
    without site, with its own standard library only."""
    directory = str(Path(tree_python[-1]).parent.parent)
    code = (
        "import sys, json; print(json.dumps([sys.executable, sys.prefix, sys.flags.isolated, "
        "sys.flags.no_site, sys.path]))"
    )
    done = run_tree(tree_python, code)
    assert done.returncode == 0, done.stderr
    executable, prefix, isolated, no_site, path = json.loads(done.stdout)
    assert (executable, prefix, isolated, no_site) == (tree_python[-1], directory, 1, 1)
    assert all(entry.startswith(directory + "/lib/") for entry in path)


def test_own_command_of_the_tree_python_is_its_loader_form(tree_python: list[str]) -> None:
    """What the shim and the NRI plugin put into config.json: the tree's interpreter started as it was."""
    package = str(Path(__file__).resolve().parents[2])
    done = run_tree(
        tree_python,
        f"import sys; sys.path[:0] = [{package!r}]\nfrom hook.launcher import own_command; print(own_command())",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{bundled_command(str(Path(tree_python[-1]).parent.parent))}\n"
    assert own_command() == [sys.executable]


def test_a_start_writes_nothing_into_the_tree(tree_python: list[str]) -> None:
    """The copied byte-compiled files are valid (their sources keep their times): a start that imports what
    the stages and CDI import compiles nothing, so nothing is written into the node's tree."""
    directory = Path(tree_python[-1]).parent.parent

    def listing() -> dict[str, int]:
        return {str(path): path.stat().st_mtime_ns for path in directory.rglob("*")}

    before = listing()
    code = "import json, re, tomllib, shlex, hmac, subprocess, traceback, base64, fnmatch, typing"
    done = run_tree(tree_python, code)
    assert done.returncode == 0, done.stderr
    assert listing() == before


def test_an_interpreter_without_the_x86_64_glibc_loader_is_refused_in_one_line(tmp_path: Path) -> None:
    """``--python tree`` copies only what its loader form can start: a static binary (or a script) is
    refused, naming the loader it has."""
    with pytest.raises(InstallError) as caught:
        find_loader("/bin/busybox")
    assert str(caught.value) == (
        "--python tree: /bin/busybox is not a dynamically linked x86_64 glibc interpreter (its loader: none); "
        "run install with one (the DaemonSet's image has Debian 12's)"
    )


def test_dry_run_names_the_interpreter_it_would_copy(tmp_path: Path) -> None:
    """``install --python tree --dry-run`` says the tree gets the interpreter too, and writes nothing."""
    done = subprocess.run(
        [sys.executable, "-I", "-m", "hook", "install", "--engine", "podman", "--root", str(tmp_path),
         "--python", "tree", "--runtime", "/usr/sbin/runc", "--dry-run"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "more: the interpreter they run, its loader and libraries) and point" in done.stdout
    assert "/opt/gpu-env-hook/current/python/ld-linux-x86-64.so.2 --library-path" in done.stdout
    assert list(tmp_path.iterdir()) == []

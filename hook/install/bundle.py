"""``install --python tree``: the interpreter install copies into each version of the tree, so that a node
needs neither a Python nor a C library of its own (``hook.launcher.bundled_command`` starts it).

What is copied is the interpreter running install (a venv's base: in the DaemonSet's image, Debian 12's
python3.11), into ``<tree>/<version>/python``::

    ld-linux-x86-64.so.2     its dynamic loader (the ELF's PT_INTERP), which the engines execute
    bin/python3.11           the interpreter
    lib/<soname>             every shared library the interpreter and the kept extension modules (and
                             PyYAML's, beside the package) load, found by asking the loader (``--list``)
    lib/python3.11/...       the standard library less what no node-side path imports (``SKIPPED``), with
                             the byte-compiled files and their sources' times (so that they stay valid)
    lib/python3.11/lib-dynload/
                             the extension modules but those that would bring further libraries or that
                             nothing of ours loads (``SKIPPED_EXTENSIONS``: OpenSSL, libffi, ncurses, ...)

The node-side paths are the stages (the hook, the shim, precreate) and the CDI code with YAML
specs; the commands for people and install run elsewhere (a venv, the image). A module of the standard
library the hook needs but that is skipped here fails the tests that run every stage with this interpreter
(tests/test_import_guard.py).
"""

import os
import struct
import subprocess
import sys
import sysconfig
from typing import NamedTuple

from hook.install.common import InstallError
from hook.launcher import LIB, LOADER, PYTHON_BIN, PYTHON_DIR
from hook.util.safetext import os_reason

# The standard library's directory in a version (beside the interpreter's libraries).
STDLIB = f"{PYTHON_DIR}/{LIB}/python{sys.version_info[0]}.{sys.version_info[1]}"
# What of the standard library no node-side path imports (top-level packages, then modules): tools,
# protocols, archives and formats no stage reads, debuggers, profilers, tests. The encodings beyond UTF-8,
# ASCII and Latin-1 are not copied either (the stages run with -X utf8).
# fmt: off
SKIPPED_PACKAGES = frozenset({
    "__phello__", "asyncio", "concurrent", "config-3.11-x86_64-linux-gnu", "ctypes", "curses", "dbm",
    "dist-packages", "distutils", "email", "ensurepip", "html", "http", "idlelib", "lib2to3", "logging",
    "msilib", "multiprocessing", "pydoc_data", "site-packages", "sqlite3", "test", "tkinter", "turtledemo",
    "unittest", "urllib", "venv", "wsgiref", "xml", "xmlrpc", "zoneinfo",
})
SKIPPED_MODULES = frozenset({
    "_aix_support", "_osx_support", "_pydecimal", "_pyio", "aifc", "antigravity", "argparse", "asynchat",
    "asyncore", "bdb", "binhex", "bz2", "calendar", "cgi", "cgitb", "chunk", "code", "codeop", "compileall",
    "configparser", "cProfile", "crypt", "difflib", "doctest", "filecmp", "fileinput", "ftplib", "getpass",
    "imaplib", "imghdr", "ipaddress", "lzma", "mailbox", "mailcap", "mimetypes", "modulefinder", "netrc",
    "nntplib", "nturl2path", "optparse", "pdb", "pickletools", "pipes", "plistlib", "poplib", "profile",
    "pstats", "pty", "py_compile", "pyclbr", "pydoc", "quopri", "sched", "shelve", "smtpd", "smtplib",
    "sndhdr", "socketserver", "ssl", "statistics", "sunau", "tabnanny", "tarfile", "telnetlib", "this",
    "trace", "tty", "turtle", "uu", "uuid", "wave", "webbrowser", "xdrlib", "zipapp", "zipfile",
})
# fmt: on
SKIPPED = SKIPPED_PACKAGES | {f"{name}.py" for name in SKIPPED_MODULES}
KEPT_ENCODINGS = frozenset({"__init__", "aliases", "ascii", "latin_1", "utf_8", "utf_8_sig"})
# Extension modules not copied, by the start of their names: those that load libraries beyond the C library
# such as OpenSSL, libffi, libmpdec, bz2, lzma, sqlite, ncurses, readline, gdbm, libnsl, libuuid, libcrypt or
# Tk, and those nothing of ours imports: tests, CJK codecs, asyncio, multiprocessing, profilers.
SKIPPED_EXTENSIONS = (
    "_ssl.", "_hashlib.", "_ctypes", "_decimal.", "_bz2.", "_lzma.", "_sqlite3.", "_curses", "readline.",
    "_dbm.", "_gdbm.", "nis.", "_uuid.", "_crypt.", "_tkinter.", "_test", "xx", "_xx", "audioop.",
    "ossaudiodev.", "_codecs_", "_multibytecodec.", "_asyncio.", "_multiprocessing.", "_posixshmem.",
    "_lsprof.", "_zoneinfo.", "pyexpat.", "_elementtree.",
)  # fmt: skip
# The byte-compiled files of another optimisation level (the engines never run -O).
SKIPPED_SUFFIXES = (".opt-1.pyc", ".opt-2.pyc")
EXECUTABLE = 0o755
FILE = 0o644
_PT_INTERP = 3


class BundledFile(NamedTuple):
    """One file of the interpreter: its path in the version (``python/...``), where it is read from, its
    mode, and its modification time (kept: a ``.pyc`` is checked against its source's)."""

    path: str
    source: str
    mode: int
    mtime_ns: int


def interpreter() -> str:
    """The interpreter running install (a venv's base), resolved."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def elf_interpreter(data: bytes) -> str | None:
    """Return the PT_INTERP (the dynamic loader) of a 64-bit little-endian ELF executable; None: not one,
    or statically linked."""
    if data[:6] != b"\x7fELF\x02\x01":
        return None
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    entry_size, count = struct.unpack_from("<HH", data, 0x36)
    for index in range(count):
        at = phoff + index * entry_size
        (kind,) = struct.unpack_from("<I", data, at)
        if kind == _PT_INTERP:
            offset, _, _, size = struct.unpack_from("<QQQQ", data, at + 8)
            return data[offset : offset + size].rstrip(b"\0").decode("utf-8", "replace")
    return None


def find_loader(python: str) -> str:
    """Return the dynamic loader of ``python``; refuse one this layout cannot start (``LOADER``)."""
    try:
        with open(python, "rb") as fh:
            head = fh.read(64 * 1024)
    except OSError as err:
        raise InstallError(f"--python tree: cannot read {python}: {os_reason(err)}") from None
    loader = elf_interpreter(head)
    if loader is None or os.path.basename(loader) != LOADER:
        raise InstallError(
            f"--python tree: {python} is not a dynamically linked x86_64 glibc interpreter (its loader: "
            f"{loader or 'none'}); run install with one (the DaemonSet's image has Debian 12's)"
        )
    return os.path.realpath(loader)


def parse_list(output: str, what: str) -> dict[str, str]:
    """Return soname -> path of the libraries in the loader's ``--list`` output (``\\tNAME => PATH (0x...)``;
    the vDSO and the loader itself have no ``=>``); refuse a library it did not find."""
    found = {}
    for line in output.splitlines():
        name, arrow, rest = line.strip().partition(" => ")
        if not arrow or "/" in name:  # the vDSO, the loader (named by its path: copied as LOADER)
            continue
        if rest.startswith("not found"):
            raise InstallError(f"--python tree: {what} needs {name}, which the loader does not find here")
        found[name] = rest.rpartition(" (")[0] or rest
    return found


def libraries(loader: str, objects: list[str]) -> dict[str, str]:
    """Return soname -> path of every library the ``objects`` load, as the loader resolves them here."""
    found: dict[str, str] = {}
    for path in objects:
        try:
            done = subprocess.run(
                [loader, "--list", path], env={}, capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.SubprocessError) as err:
            raise InstallError(f"--python tree: cannot run {loader} --list: {type(err).__name__}") from None
        if done.returncode != 0:
            raise InstallError(f"--python tree: {loader} --list {path} failed: {done.stderr.strip()[:200]}")
        found.update(parse_list(done.stdout, path))
    return found


def kept(relative: str) -> bool:
    """Tell whether a file of the standard library (its path relative to it) is copied."""
    parts = relative.split("/")
    top, module = parts[0], parts[-1].split(".")[0]
    if top in SKIPPED or relative.endswith(SKIPPED_SUFFIXES):
        return False
    if top == "__pycache__":  # a top-level module's byte-compiled file: kept with the module
        return module not in SKIPPED_MODULES
    if top == "encodings":
        return module in KEPT_ENCODINGS
    if top == "lib-dynload":
        return not parts[-1].startswith(SKIPPED_EXTENSIONS)
    return True


def stdlib_files(stdlib: str) -> list[tuple[str, str]]:
    """Return (path relative to the standard library, path here) of each file copied from it."""
    found = []
    for parent, dirs, names in os.walk(stdlib):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(parent, name)
            relative = os.path.relpath(path, stdlib)
            if kept(relative) and not os.path.islink(path):
                found.append((relative, path))
        if parent == stdlib:
            dirs[:] = [d for d in dirs if d not in SKIPPED]
    return found


def collect_bundle(extensions: list[str]) -> list[BundledFile]:
    """Return the files of the interpreter running install (``extensions``: further extension modules the
    package carries, PyYAML's, whose libraries come too)."""
    python = interpreter()
    loader = find_loader(python)
    stdlib = sysconfig.get_path("stdlib")
    std = stdlib_files(stdlib)
    modules = [path for relative, path in std if relative.endswith(".so")]
    needed = libraries(loader, [python, *modules, *extensions])
    files = [
        (LOADER, loader, EXECUTABLE),
        (PYTHON_BIN, python, EXECUTABLE),
        *((f"{LIB}/{name}", path, FILE) for name, path in sorted(needed.items())),
    ]
    return [
        *(
            BundledFile(f"{PYTHON_DIR}/{relative}", source, mode, os.stat(source).st_mtime_ns)
            for relative, source, mode in files
        ),
        *(
            BundledFile(f"{STDLIB}/{relative}", path, FILE, os.stat(path).st_mtime_ns)
            for relative, path in std
        ),
    ]

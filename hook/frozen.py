"""The installed tree's hot-path modules served from one precompiled file, ``<lib>/hook.frozen``.

A start of the hook imports about twenty of the package's modules. Found the usual way, each costs the
import machinery's walk beyond its own code: the path finder, a ``stat`` of the source, an open and read of
its ``.pyc``, importlib's bookkeeping in Python. ``install`` therefore writes, beside the byte-compiled
package, one file holding the code of the modules the stages load (``MODULES``), compiled by the node's
interpreter with the node paths as file names; the launch code (``hook.launch``) calls ``install_finder``
before it imports the entry, and the finder put first on ``sys.meta_path`` serves those modules from the
table it read at start.

What keeps this as safe as the ``.pyc`` files it stands in for:

* the file starts with this format's mark, the interpreter's bytecode magic number and its optimization
  level: a file built by another Python (an upgraded interpreter) is ignored;
* a module is served only while its source file has the size and modification time (in nanoseconds) it
  had when it was compiled: an edited source is imported from the source, as a stale ``.pyc`` is;
* anything wrong with the file (missing, unreadable, truncated, corrupt, another interpreter's) means no
  finder: the imports go the usual way. Nothing is printed, nothing raised.

Each module's code is kept marshalled in the table and loaded only when that module is imported. The
package itself (``hook``: its ``__file__`` and resources) and subpackages are never served.

Run time needs builtin modules only (``sys``, ``posix``, ``marshal``); ``write_blob`` runs at install, with
the node's interpreter, from the version directory being built.
"""

from __future__ import annotations

import marshal
import posix
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import CodeType, ModuleType

    # A module's entry: its path relative to lib, its source's mtime (ns) and size, where its code is.
    Entry = tuple[str, int, int, int, int]
else:
    Loader = object
    ModuleSpec = type(sys.__spec__)

BLOB = "hook.frozen"
# The package's plain modules that the stages load: the union of the module sets tests/test_import_guard.py
# pins for the hot-path cases (test_frozen_modules_are_the_hot_path there ties the two together).
MODULES = (
    "hook.__main__",
    "hook.beneath",
    "hook.bundle",
    "hook.capabilities",
    "hook.config",
    "hook.configfile",
    "hook.devices",
    "hook.dotenvreader",
    "hook.envfile",
    "hook.envvars",
    "hook.errors",
    "hook.handoff",
    "hook.jsontext",
    "hook.launch",
    "hook.log",
    "hook.mode",
    "hook.nvcli",
    "hook.paths",
    "hook.precreate",
    "hook.prestart",
    "hook.privilege",
    "hook.producer",
    "hook.producercli",
    "hook.records",
    "hook.request",
    "hook.requirements",
    "hook.shim",
    "hook.specenv",
    "hook.state",
    "hook.tomlsubset",
)
_MARK = b"gpu-env-hook frozen 1\n"
# The first read: the header and the table, as built (a larger table is read on).
_FIRST_READ = 8192


def header() -> bytes:
    """What a blob this interpreter can use starts with: the format's mark, the bytecode magic number and
    the optimization level (``-O``) the code was compiled for."""
    magic: bytes = sys.modules["_frozen_importlib_external"].MAGIC_NUMBER
    return _MARK + magic + bytes((sys.flags.optimize,))


class FrozenFinder(Loader):
    """Finder and loader of the modules in one blob: its table ``{name: (path relative to lib, source
    mtime in ns, source size, start, end)}`` and the open blob, where each module's marshalled code is
    at ``base + start`` up to ``base + end``."""

    def __init__(self, lib: str, table: dict[str, Entry], fd: int, base: int) -> None:
        self.lib = lib
        self.table = table
        self.fd = fd
        self.base = base

    def find_spec(
        self,
        name: str,
        path: object = None,  # noqa: ARG002 - the meta path finder's signature
        target: object = None,  # noqa: ARG002
    ) -> ModuleSpec | None:
        """A spec for ``name`` while its source is unchanged since it was compiled; None otherwise (the
        finders after this one import it as usual)."""
        entry = self.table.get(name)
        if entry is None:
            return None
        try:
            relative, mtime, size, start, end = entry
            source = self.lib + "/" + relative
            found = posix.stat(source)
            if found.st_mtime_ns != mtime or found.st_size != size:
                return None
            code = marshal.loads(posix.pread(self.fd, end - start, self.base + start))  # noqa: S302
            sys.modules["_imp"]._fix_co_filename(code, source)
        except Exception:  # noqa: BLE001 - an entry that cannot be served is imported the usual way
            return None
        spec = ModuleSpec(name, self, origin=source, loader_state=code)
        spec.has_location = True
        return spec

    def create_module(self, spec: ModuleSpec) -> None:
        """The default module object."""

    def exec_module(self, module: ModuleType) -> None:
        """Run the module's code (unmarshalled by ``find_spec``) in its namespace."""
        code: CodeType = module.__spec__.loader_state  # type: ignore[union-attr]
        exec(code, module.__dict__)  # noqa: S102 - the package's own code, compiled at install

    def get_source(self, name: str) -> str | None:
        """The module's source text, as the file loader gives it (for ``inspect`` and ``linecache``)."""
        from importlib.util import decode_source

        entry = self.table.get(name)
        if entry is None:
            return None
        with open(self.lib + "/" + entry[0], "rb") as fh:
            return decode_source(fh.read())


def install_finder(lib: str) -> None:
    """Put a finder for ``<lib>/hook.frozen`` first on ``sys.meta_path`` when the file is there and built
    for this interpreter; otherwise do nothing. The file stays open (close-on-exec) for the process."""
    try:
        fd = posix.open(lib + "/" + BLOB, posix.O_RDONLY | posix.O_CLOEXEC)
    except Exception:  # noqa: BLE001 - no finder: the usual imports
        return
    try:
        found = _read_table(fd)
    except Exception:  # noqa: BLE001 - a truncated or corrupt table: no finder
        found = None
    if found is None:
        posix.close(fd)
        return
    sys.meta_path.insert(0, FrozenFinder(lib, found[0], fd, found[1]))


def _read_table(fd: int) -> tuple[dict[str, Entry], int] | None:
    """Return the blob's table and where its code begins; None when it was built by another interpreter."""
    head = header()
    index = len(head) + 4
    data = posix.read(fd, _FIRST_READ)
    if data[: len(head)] != head:
        return None
    base = index + int.from_bytes(data[len(head) : index], "little")
    if base > len(data):
        data += posix.read(fd, base - len(data))
    table = marshal.loads(data[index:base])  # noqa: S302 - install wrote it, beside the package's code
    return (table, base) if type(table) is dict else None


def build_blob(lib: str, node_lib: str, modules: tuple[str, ...] = MODULES) -> bytes:
    """Compile ``modules`` from the sources in ``lib`` (this interpreter, as ``compileall`` does), naming
    each by its node path in ``node_lib``; return the blob's bytes. A module without a plain source file
    there is left out (it is imported the usual way)."""
    table = {}
    codes = []
    end = 0
    for name in modules:
        relative = name.replace(".", "/") + ".py"
        try:
            fd = posix.open(lib + "/" + relative, posix.O_RDONLY | posix.O_CLOEXEC | posix.O_NOFOLLOW)
        except FileNotFoundError:
            continue
        try:
            found = posix.fstat(fd)
            source = posix.read(fd, found.st_size + 1)
        finally:
            posix.close(fd)
        if len(source) != found.st_size:
            continue
        code = marshal.dumps(compile(source, node_lib + "/" + relative, "exec", dont_inherit=True))
        table[name] = (relative, found.st_mtime_ns, found.st_size, end, end + len(code))
        codes.append(code)
        end += len(code)
    index = marshal.dumps(table)
    return header() + len(index).to_bytes(4, "little") + index + b"".join(codes)


def write_blob(lib: str, node_lib: str) -> None:
    """Write ``<lib>/hook.frozen`` atomically (a temp file, fsync, rename)."""
    data = build_blob(lib, node_lib)
    tmp = f"{lib}/.{BLOB}.{posix.getpid()}.tmp"
    fd = posix.open(tmp, posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_CLOEXEC, 0o644)
    try:
        try:
            posix.fchmod(fd, 0o644)
            view = memoryview(data)
            while view:
                view = view[posix.write(fd, view) :]
            posix.fsync(fd)
        finally:
            posix.close(fd)
        posix.rename(tmp, f"{lib}/{BLOB}")
    except BaseException:
        posix.unlink(tmp)
        raise

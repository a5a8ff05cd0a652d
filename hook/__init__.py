"""gpu-env-hook: an OCI prestart hook for GPU containers that honours NVIDIA_ENV_FROM_FILE.

This file is also where every launched process starts (the hook, the runtime shim, the commands through
the installed wrappers): the launch code (``hook.launcher``) finds the package and calls ``run`` here, so
that importing the package is the one import before the stages' modules are served from one file. It is
kept to builtin modules (``sys``, ``posix``, ``marshal``, ``atexit``) and has no ``from __future__`` import
(that would load ``__future__`` before any finder is in place).

The stages' modules from one precompiled file, ``<lib>/hook.frozen``
---------------------------------------------------------------------
A start of the hook imports about twenty of the package's modules. Found the usual way, each costs the
import machinery's walk beyond its own code: the path finder, a ``stat`` of the source, an open and read of
its ``.pyc``, importlib's bookkeeping in Python. ``install`` therefore writes, beside the byte-compiled
package, one file holding the code of the modules the stages load (``hook.freeze``), compiled by the
node's interpreter with the node paths as file names; ``run`` calls ``install_finder`` before it imports
the entry, and the finder put first on ``sys.meta_path`` serves those modules from that file.

What keeps this as safe as the ``.pyc`` files it stands in for:

* the file starts with this format's mark, the interpreter's bytecode magic number and its optimization
  level: a file built by another Python (an upgraded interpreter) is ignored;
* a module is served only while its source file has the size and modification time (in nanoseconds) it
  had when it was compiled: an edited source is imported from the source, as a stale ``.pyc`` is;
* anything wrong with the file (missing, unreadable, truncated, corrupt, another interpreter's) means no
  finder: the imports go the usual way. Nothing is printed, nothing raised.

Each module's code is kept marshalled in the file and read and loaded only when that module is imported
(a ``pread`` of its bytes). The package itself (``hook``: its ``__file__`` and resources) and subpackages
are never served. The file is written by ``hook.freeze``, at install, with the node's interpreter.
"""

import marshal
import posix
import sys

__version__ = "0.1.0"

TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import CodeType, ModuleType
    from typing import NoReturn

    # A module's entry (``hook.freeze`` writes them): its source's path relative to lib, mtime (ns) and
    # size, its .pyc's path relative to lib (``__cached__``), where its code is. An extension module's:
    # its file name, mtime and size, "", the index of its sys.path entry counted from the end, and -1.
    Entry = tuple[str, int, int, str, int, int]
else:
    Loader = object
    ModuleSpec = type(sys.__spec__)

BLOB = "hook.frozen"
_MARK = b"gpu-env-hook frozen 1\n"
# The first read: the header and the table, as built (a larger table is read on).
_FIRST_READ = 8192


def header() -> bytes:
    """What a blob this interpreter can use starts with: the format's mark, the bytecode magic number and
    the optimization level (``-O``) the code was compiled for."""
    magic: bytes = sys.modules["_frozen_importlib_external"].MAGIC_NUMBER
    return _MARK + magic + bytes((sys.flags.optimize,))


class FrozenFinder(Loader):
    """Finder and loader of the modules in one blob: its table ``{name: (source path relative to lib,
    source mtime in ns, source size, .pyc path relative to lib, start, end)}`` and the open blob, where
    each module's marshalled code is at ``base + start`` up to ``base + end``."""

    def __init__(self, lib: str, table: "dict[str, Entry]", fd: int, base: int) -> None:
        self.lib = lib
        self.table = table
        self.fd = fd
        self.base = base

    def find_spec(
        self,
        name: str,
        path: object = None,  # noqa: ARG002 - the meta path finder's signature
        target: object = None,  # noqa: ARG002
    ) -> "ModuleSpec | None":
        """A spec for ``name`` while its source is unchanged since it was compiled; None otherwise (the
        finders after this one import it as usual)."""
        entry = self.table.get(name)
        if entry is None:
            return None
        try:
            relative, mtime, size, cached, start, end = entry
            # An extension module of the interpreter (end < 0) is in the sys.path entry ``start`` counts
            # from the end (lib-dynload): found there at once, without listing that directory.
            source = (sys.path[start] if end < 0 else self.lib) + "/" + relative
            found = posix.stat(source)
            if found.st_mtime_ns != mtime or found.st_size != size:
                return None
            if end < 0:
                return _extension_spec(name, source)
            code = marshal.loads(posix.pread(self.fd, end - start, self.base + start))  # noqa: S302
            sys.modules["_imp"]._fix_co_filename(code, source)
        except Exception:  # noqa: BLE001 - an entry that cannot be served is imported the usual way
            return None
        spec = ModuleSpec(name, self, origin=source, loader_state=code)
        spec.has_location = True
        spec.cached = self.lib + "/" + cached  # as the file loader's (importlib would compute it)
        return spec

    def create_module(self, spec: "ModuleSpec") -> None:
        """The default module object."""

    def exec_module(self, module: "ModuleType") -> None:
        """Run the module's code (unmarshalled by ``find_spec``) in its namespace."""
        code: CodeType = module.__spec__.loader_state  # type: ignore[union-attr]
        exec(code, module.__dict__)  # noqa: S102 - the package's own code, compiled at install

    def get_source(self, name: str) -> str | None:
        """The module's source text, as the file loader gives it (for ``inspect`` and ``linecache``)."""
        from importlib.util import decode_source

        entry = self.table.get(name)
        if entry is None or entry[5] < 0:  # not ours, or an extension module (its own loader serves it)
            return None
        with open(self.lib + "/" + entry[0], "rb") as fh:
            return decode_source(fh.read())


def _extension_spec(name: str, path: str) -> "ModuleSpec":
    """The spec the path finder would give for the extension module at ``path``."""
    loader = sys.modules["_frozen_importlib_external"].ExtensionFileLoader(name, path)
    spec = ModuleSpec(name, loader, origin=path)
    spec.has_location = True
    return spec


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


def _read_table(fd: int) -> "tuple[dict[str, Entry], int] | None":
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


def run(lib: str, entry: str, failed: str, **call: object) -> "NoReturn":
    """Run ``entry``'s ``main(**call)`` with the package in ``lib``, served from the blob when there is one,
    and end the process with its status. A failure to import the entry is one line: ``failed`` followed by
    the reason, and status 1."""
    install_finder(lib)
    try:
        main = __import__(entry, None, None, ["main"]).main
    except Exception as err:  # noqa: BLE001 - one line, never a traceback
        sys.stderr.write(failed + " ".join(str(err).split()) + "\n")
        raise SystemExit(1) from None
    finish(main(**call))


def finish(code: object) -> "NoReturn":
    """End the process with ``code`` like a C program: stdout and stderr flushed, then ``_exit``.

    Tearing the interpreter down (freeing every object and module) takes about as long as a sixth of its
    start, and a stage has nothing to clean up: its files are closed by their with-blocks, it starts no
    thread and registers no exit handler; a stage that execs the cli never gets here. When an exit handler
    is registered or a thread still runs (a command for people may bring either), when ``code`` is not an
    int, or when a flush fails, the interpreter ends as usual (``SystemExit``) and reports it.
    """
    import atexit

    threading = sys.modules.get("threading")
    alone = threading is None or threading.active_count() == 1
    if type(code) is int and not atexit._ncallbacks() and alone:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001 - the usual ending reports it
            raise SystemExit(code) from None
        posix._exit(code)
    raise SystemExit(code)

"""Write ``<lib>/hook.frozen``: the stages' modules precompiled into one file that the package's finder serves
(``hook.install_finder``, in ``hook/__init__.py``).

``install`` runs ``write_blob`` with the node's interpreter (``python -I -S -B``), from the version
directory it is building, after ``compileall``: the code is that interpreter's, compiled as ``compileall``
compiles it but without docstrings and without the runtime import of ``__future__`` (``compile_lean``),
each file named by its node path (``-d``), so tracebacks name the node's files and lines.

The file: ``hook.header()`` (format, bytecode magic number, optimization level), the length of the
table (4 bytes, little-endian), the table (marshal: ``{module: (source path relative to lib, source mtime
in ns, source size, .pyc path relative to lib, start, end)}``), then each module's marshalled code object
at ``start:end`` of what follows the table. The table also names the interpreter's extension modules the
stages load (``EXTENSIONS``): their file, its mtime and size, and which ``sys.path`` entry holds it.
"""

from __future__ import annotations

import marshal
import posix
import sys
from importlib.util import cache_from_source

from hook import BLOB, header

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import CodeType

    from hook import Entry

# The package's plain modules that the stages load: the union of the module sets tests/test_import_guard.py
# pins for the hot-path cases (test_frozen_modules_are_the_hot_path there ties the two together).
MODULES = (
    "hook.__main__",
    "hook.util.atomicwrite",
    "hook.util.beneath",
    "hook.pipeline.bundle",
    "hook.pipeline.capabilities",
    "hook.pipeline.config",
    "hook.pipeline.configfile",
    "hook.pipeline.devices",
    "hook.pipeline.dotenvreader",
    "hook.pipeline.envfile",
    "hook.util.envvars",
    "hook.util.errors",
    "hook.pipeline.handoff",
    "hook.util.jsontext",
    "hook.launcher",
    "hook.nri.backstop",
    "hook.util.log",
    "hook.pipeline.mode",
    "hook.pipeline.nvcli",
    "hook.util.paths",
    "hook.pipeline.pod",
    "hook.stages.precreate",
    "hook.stages.prestart",
    "hook.pipeline.privilege",
    "hook.producer.envfile",
    "hook.producer.namekey",
    "hook.commands.envfile",
    "hook.pipeline.request",
    "hook.pipeline.requirements",
    "hook.util.safetext",
    "hook.stages.shim",
    "hook.pipeline.specenv",
    "hook.pipeline.state",
    "hook.util.tomlsubset",
)


# Extension modules of the interpreter the stages load: found in their directory without listing it.
EXTENSIONS = ("_json",)


def build_blob(lib: str, node_lib: str, modules: tuple[str, ...] = MODULES) -> bytes:
    """Compile ``modules`` from the sources in ``lib`` (this interpreter, as ``compileall`` does), naming
    each by its node path in ``node_lib``; return the blob's bytes. A module without a plain source file
    there is left out (it is imported the usual way)."""
    table: dict[str, Entry] = {}
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
        code = marshal.dumps(compile_lean(source, node_lib + "/" + relative))
        cached = cache_from_source(relative)
        table[name] = (relative, found.st_mtime_ns, found.st_size, cached, end, end + len(code))
        codes.append(code)
        end += len(code)
    for name in EXTENSIONS:
        entry = extension_entry(name)
        if entry is not None:
            table[name] = entry
    index = marshal.dumps(table)
    return header() + len(index).to_bytes(4, "little") + index + b"".join(codes)


def extension_entry(name: str) -> Entry | None:
    """Where this interpreter finds the extension module ``name``: its file name, mtime, size and the
    index of its ``sys.path`` entry counted from the end (the launch code puts lib first, as here); None
    for a module built into the interpreter or found anywhere else (then it is imported the usual way)."""
    path = getattr(__import__(name), "__file__", None)
    if not isinstance(path, str):
        return None
    directory, _, filename = path.rpartition("/")
    if directory not in sys.path:
        return None
    found = posix.stat(path)
    return (filename, found.st_mtime_ns, found.st_size, "", sys.path.index(directory) - len(sys.path), -1)


def compile_lean(source: bytes, filename: str) -> CodeType:
    """Compile a module as ``compileall`` does, less what costs every start and serves none: no docstrings
    (nothing on the stages' path reads one; each is a string to unmarshal) and no runtime import of
    ``__future__`` (``from __future__ import annotations`` becomes the compiler flag it stands for, so the
    annotations are the same strings, without loading the ``__future__`` module). Line numbers are the
    source's: a traceback shows the node file's lines."""
    import __future__

    import ast

    tree = ast.parse(source, filename)
    flags = 0
    body = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            for alias in node.names:
                flags |= getattr(__future__, alias.name).compiler_flag
            continue
        body.append(node)
    tree.body = body
    scopes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for scope in ast.walk(tree):
        if isinstance(scope, scopes) and scope.body and _is_docstring(first := scope.body[0]):
            scope.body = scope.body[1:] or [ast.Pass(lineno=first.lineno, col_offset=first.col_offset)]
    code: CodeType = compile(tree, filename, "exec", flags=flags, dont_inherit=True)
    return code


def _is_docstring(statement: object) -> bool:
    """Tell whether a body's first statement is a docstring (a bare string constant)."""
    import ast

    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def write_blob(lib: str, node_lib: str) -> None:
    """Write ``<lib>/hook.frozen`` atomically, 0644 (``hook.util.atomicwrite``: temp file, fsync, rename)."""
    from hook.util.atomicwrite import write_atomic

    write_atomic(f"{lib}/{BLOB}", build_blob(lib, node_lib), mode=0o644)

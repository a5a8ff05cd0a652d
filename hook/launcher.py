"""How the engines start our Python, and how the process ends.

Every start of the hook or the shim, whoever writes it (the wrappers ``install`` writes, the oci-hooks.d
JSON, the prestart hook the shim adds to a spec), is ``<python> -I -S -B -X utf8 -c <code> ARGS``:

* ``-I``: no ``PYTHON*`` variable, no user site-packages, and neither the script's directory nor the
  working directory (runc runs hooks in the bundle) on ``sys.path``;
* ``-S``: no ``site``: no site-packages, no ``.pth`` files (setuptools' ``_distutils_hack``), about 2 ms
  less per start; the one directory the package lives in is put on ``sys.path`` by the code instead;
* ``-B``: no bytecode written, from the interpreter's first import on (the standard library's
  ``encodings`` included): a start never writes where root's code lives (under the engine's umask, a
  ``__pycache__`` there could be anyone's); ``install`` alone compiles the tree, with the modes it means
  (``-I`` ignores PYTHONDONTWRITEBYTECODE);
* ``-X utf8``: file names are UTF-8 bytes to the kernel under any locale (``C``, ``POSIX``, an ISO-8859
  one, none), as in config.json, whose paths are UTF-8 JSON text.

The code (``build_code``) puts the package's directory first on ``sys.path`` and calls ``run`` here, which
imports the entry, calls its ``main`` and ends the process. For an installed tree (``/opt/gpu-env-hook``)
the directory is read through the ``current`` symlink once, at start, so that one process runs one version
even if ``install`` switches ``current`` meanwhile. A failure to load the package is one line on stderr and
exit status 1, never a traceback.

The ending (``finish``): a status that is a ``Done`` (what the stage paths return: they register no exit
handler, start no thread and close their files in with-blocks) ends the process like a C program: stdout
and stderr flushed, then ``posix._exit``, without the interpreter's teardown (about 1 ms, a sixth of its
start). Any other status (the commands for people, an error report, ``None``) ends as Python ends.

The interpreter (``python_command``): a node's own (``/usr/bin/python3``: its path is the command), or the
one ``install --python tree`` copies into each version of the tree (``<tree>/<version>/python``: Debian's
python3.11 with its own dynamic loader and shared libraries), which is started through that loader so that
every library comes from the tree and none from the node's ``/lib`` or ``/etc/ld.so.cache``::

    <dir>/ld-linux-x86-64.so.2 --library-path <dir>/lib --argv0 <dir>/bin/python3.11 <dir>/bin/python3.11

(``--argv0`` makes ``sys.executable`` the interpreter's path, from which it finds ``sys.prefix``: ``<dir>``).
The loader's options are not environment variables, so nothing the hook runs (``nvidia-container-cli``,
``ldconfig``: the node's own) inherits them. ``own_command`` tells how this process was started, so that the
hook the shim adds to a spec runs as the shim did.

This module imports nothing of the package (every part may use it) and only builtin modules (``sys``,
``posix``: ``os`` is not loaded by ``python -I -S`` and the stages do without it).
"""

import posix
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

PYTHON_FLAGS = ("-I", "-S", "-B", "-X", "utf8")
# The first line of every launch code: how the shim recognises a hook entry that already is ours.
CODE_MARK = "# gpu-env-hook launch"
CURRENT = "current"
LIB = "lib"
# ``install --python tree``: the interpreter in each version of the tree (``<tree>/<version>/python``), its
# dynamic loader and its binary within that directory (x86_64 glibc only).
TREE_PYTHON = "tree"
PYTHON_DIR = "python"
LOADER = "ld-linux-x86-64.so.2"
PYTHON_BIN = "bin/python3.11"


class Done(int):
    """An exit status from a path that left nothing to tear down: ``finish`` ends the process at once."""

    __slots__ = ()


def build_code(
    entry: str, prog: str, *, lib: str | None = None, tree: str | None = None, call: str = ""
) -> str:
    """Return the ``-c`` code that runs ``entry``'s ``main(call)`` with the package found in ``lib`` (a
    fixed directory) or in ``<tree>/<target of tree/current>/lib`` (resolved once, at start).

    ``prog`` names the program in the one line printed when the package cannot be loaded.
    """
    if (lib is None) == (tree is None):
        raise ValueError("give exactly one of lib and tree")
    if tree is not None:
        where = f"{tree}/{CURRENT}"
        find = (
            f"    target = posix.readlink({literal(where)})\n"
            f'    lib = (target if target.startswith("/") else {literal(tree + "/")} + target)'
            f" + {literal('/' + LIB)}\n"
        )
    else:
        assert lib is not None  # noqa: S101 - checked above
        where = lib
        find = f"    lib = {literal(lib)}\n"
    return (
        f"{CODE_MARK}\n"
        "import sys\n"
        f"failed = {literal(prog + ': cannot load gpu-env-hook from ' + where + ': ')}\n"
        "try:\n"
        "    import posix\n"
        f"{find}"
        "    sys.path[:0] = [lib]\n"
        "    from hook.launcher import run\n"
        "except Exception as err:\n"
        '    sys.stderr.write(failed + " ".join(str(err).split()) + "\\n")\n'
        "    raise SystemExit(1)\n"
        f"run({literal(entry)}, failed{', ' + call if call else ''})\n"
    )


def literal(value: str) -> str:
    """Write ``value`` as a Python string literal, in double quotes when it can be (so that the code
    needs no escaping inside a shell's single quotes)."""
    literal = repr(value)
    if literal.startswith("'") and '"' not in value:
        return '"' + literal[1:-1] + '"'
    return literal


def bundled_command(directory: str) -> list[str]:
    """Return the command that starts the interpreter copied into ``directory`` (``<tree>/.../python``):
    through its own loader, with only its own libraries."""
    binary = f"{directory}/{PYTHON_BIN}"
    return [f"{directory}/{LOADER}", "--library-path", f"{directory}/{LIB}", "--argv0", binary, binary]


def tree_command(tree: str) -> list[str]:
    """Return the command that starts the interpreter of the tree's current version, named through
    ``current`` (what install writes into engine configs: never a version)."""
    return bundled_command(f"{tree}/{CURRENT}/{PYTHON_DIR}")


def python_command(python: str, tree: str) -> list[str]:
    """Return the command that starts ``python``: ``tree`` (``TREE_PYTHON``) for the tree's own interpreter,
    else the interpreter's path."""
    return tree_command(tree) if python == TREE_PYTHON else [python]


def own_command() -> list[str]:
    """Return the command that starts the interpreter running this process: the tree's one through its
    loader (``sys.executable`` is ``<dir>/bin/python3.11`` with the loader in ``<dir>``), else
    ``sys.executable``."""
    executable = sys.executable
    if executable.endswith("/" + PYTHON_BIN):
        directory = executable[: -len(PYTHON_BIN) - 1]
        try:
            posix.stat(f"{directory}/{LOADER}")
        except OSError:
            return [executable]
        return bundled_command(directory)
    return [executable]


def is_launch_code(args: list[object]) -> bool:
    """Tell whether an argv runs launch code built here (``-c`` followed by code with our mark)."""
    for index in range(1, len(args)):
        code = args[index]
        if args[index - 1] == "-c" and isinstance(code, str) and code.startswith(CODE_MARK):
            return True
    return False


def run(entry: str, failed: str, **call: object) -> "NoReturn":
    """Run ``entry``'s ``main(**call)`` and end the process with its status (``finish``). A failure to
    import the entry is one line: ``failed`` followed by the reason, and status 1."""
    try:
        main = __import__(entry, None, None, ["main"]).main
    except Exception as err:  # noqa: BLE001 - one line, never a traceback
        sys.stderr.write(failed + " ".join(str(err).split()) + "\n")
        raise SystemExit(1) from None
    finish(main(**call))


def finish(code: object) -> "NoReturn":
    """End the process with ``code``: at once (flushed, then ``posix._exit``) for a ``Done``, as Python
    ends (``SystemExit``: exit handlers, threads joined, teardown) for anything else or when a flush fails
    (the interpreter's own ending reports it)."""
    if type(code) is Done:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001 - the usual ending reports it
            raise SystemExit(int(code)) from None
        posix._exit(code)
    raise SystemExit(code)

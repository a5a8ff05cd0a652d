"""How a launched process ends (``hook.launcher.finish``): no interpreter finalization when ``main``
returns a ``Done`` (a stage path: nothing to tear down), the usual ending for any other status.

Each case runs the real launch code (``hook.launcher.build_code``) in ``python -I -S -X utf8`` with a ``lib``
directory holding the package (a link to this checkout's) and a small entry module of its own, and looks
at what the process printed and how it exited.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from hook.launcher import PYTHON_FLAGS, build_code

# An object whose finalizer prints: it runs only if the interpreter is torn down.
FINALIZER = """\
import sys as _sys
class Witness:
    def __del__(self, write=_sys.stderr.write):
        write("finalized\\n")
WITNESS = Witness()
"""


def make_lib(tmp_path: Path, package: Path = REPO / "hook") -> Path:
    """A ``lib`` directory holding ``package`` as ``hook`` (a link)."""
    lib = tmp_path / "lib"
    lib.mkdir(exist_ok=True)
    (lib / "hook").symlink_to(package)
    return lib


def launch(
    tmp_path: Path, body: str, *, stdout: int | None = subprocess.PIPE
) -> subprocess.CompletedProcess[bytes]:
    """Run the launch code with ``entry.py`` (``FINALIZER`` + ``body``, which defines ``main``) on the path."""
    lib = make_lib(tmp_path)
    (lib / "entry.py").write_text(FINALIZER + body, encoding="utf-8")
    code = build_code("entry", "gpu-env-hook", lib=str(lib))
    return subprocess.run(
        [sys.executable, *PYTHON_FLAGS, "-c", code],
        stdout=stdout,
        stderr=subprocess.PIPE,
        timeout=30,
        check=False,
    )


def test_a_stage_status_ends_the_process_without_finalization(tmp_path: Path) -> None:
    """A ``Done``: buffered stdout (1 MiB) and stderr arrive whole, the status is main's, and no finalizer
    runs."""
    body = (
        "import sys\n"
        "from hook.launcher import Done\n"
        "def main():\n"
        "    sys.stdout.write('x' * 1048576)\n"
        "    sys.stderr.write('one line')\n"
        "    return Done(3)\n"
    )
    proc = launch(tmp_path, body)
    assert (proc.returncode, len(proc.stdout), proc.stderr) == (3, 1048576, b"one line")


@pytest.mark.parametrize(
    ("body", "stderr"),
    [
        pytest.param(
            "import atexit, sys\n"
            "def main():\n"
            "    atexit.register(lambda: sys.stderr.write('exit handler\\n'))\n"
            "    return 4\n",
            b"exit handler\nfinalized\n",
            id="exit-handler",
        ),
        pytest.param(
            "import sys, threading, time\n"
            "def late():\n"
            "    time.sleep(0.2)\n"
            "    sys.stderr.write('thread done\\n')\n"
            "def main():\n"
            "    threading.Thread(target=late).start()\n"
            "    return 4\n",
            b"thread done\nfinalized\n",
            id="running-thread",
        ),
        pytest.param("def main():\n    return 4\n", b"finalized\n", id="plain-status"),
        pytest.param("def main():\n    return None\n", b"finalized\n", id="no-status"),
    ],
)
def test_any_other_status_ends_as_python_ends(tmp_path: Path, body: str, stderr: bytes) -> None:
    """A status that is not a ``Done`` (a command for people: it may register an exit handler or leave a
    thread running) or no status: the interpreter's own ending, handlers run and threads joined."""
    proc = launch(tmp_path, body)
    assert proc.stderr == stderr
    assert proc.returncode == (0 if "None" in body else 4)


def test_system_exit_from_main_keeps_its_meaning(tmp_path: Path) -> None:
    """``main`` raising SystemExit with a message: the message on stderr and status 1, as Python does."""
    proc = launch(tmp_path, "def main():\n    raise SystemExit('refused')\n")
    assert (proc.returncode, proc.stderr) == (1, b"refused\nfinalized\n")


def test_a_failed_flush_is_reported_as_python_reports_it(tmp_path: Path) -> None:
    """stdout's reader gone: the flush fails, and the interpreter's own ending reports it (status 120)."""
    body = "import sys\nfrom hook.launcher import Done\ndef main():\n    sys.stdout.write('x' * 100)\n    return Done(0)\n"
    lib = make_lib(tmp_path)
    (lib / "entry.py").write_text(body, encoding="utf-8")
    code = build_code("entry", "gpu-env-hook", lib=str(lib))
    proc = subprocess.Popen(
        [sys.executable, *PYTHON_FLAGS, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.close()  # nobody reads: the flush gets EPIPE
    stderr = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(timeout=30) == 120
    assert b"BrokenPipeError" in stderr


def test_a_package_without_the_launcher_is_one_line(tmp_path: Path) -> None:
    """``current`` pointing at a package that has no ``hook.launcher`` (one from before it): the one line
    naming where the package was looked for, and status 1."""
    old = tmp_path / "old-hook"
    old.mkdir()
    (old / "__init__.py").write_text("", encoding="utf-8")
    lib = make_lib(tmp_path, old)
    code = build_code("hook.__main__", "gpu-env-hook", lib=str(lib))
    proc = subprocess.run(
        [sys.executable, *PYTHON_FLAGS, "-c", code], capture_output=True, timeout=30, check=False
    )
    assert (proc.returncode, proc.stderr) == (
        1,
        f"gpu-env-hook: cannot load gpu-env-hook from {lib}: No module named 'hook.launcher'\n".encode(),
    )


def test_an_entry_that_cannot_be_imported_is_one_line(tmp_path: Path) -> None:
    """The entry's import fails: the one line naming where the package was looked for, and status 1."""
    lib = make_lib(tmp_path)
    (lib / "entry.py").write_text("raise ImportError('broken\\nentry')\n", encoding="utf-8")
    code = build_code("entry", "gpu-env-hook", lib=str(lib))
    proc = subprocess.run(
        [sys.executable, *PYTHON_FLAGS, "-c", code], capture_output=True, timeout=30, check=False
    )
    assert proc.returncode == 1
    assert proc.stderr == f"gpu-env-hook: cannot load gpu-env-hook from {lib}: broken entry\n".encode()


# The launch code runtime wrappers carried before the layout (ed2f726), as build_code wrote it then; `lib` is
# filled in. During an upgrade such a wrapper can start against the new tree for the milliseconds between
# `current`'s switch and the wrappers' rewrite.
PRE_LAYOUT_RUNTIME_CODE = """\
# gpu-env-hook launch
import sys
failed = "gpu-env-runtime: cannot load gpu-env-hook from {lib}: "
try:
    import posix
    lib = {lib!r}
    sys.path[:0] = [lib]
    try:
        from hook import run
    except ImportError:  # a package from before hook.run
        from hook.shim import main
        run = lambda *_, **call: sys.exit(main(**call))
except Exception as err:
    sys.stderr.write(failed + " ".join(str(err).split()) + "\\n")
    raise SystemExit(1)
run(lib, "hook.shim", failed, runtime="/usr/sbin/runc")
"""


def test_a_pre_layout_runtime_wrapper_still_starts_the_shim(tmp_path: Path) -> None:
    """An earlier version's runtime wrapper, run against this tree, reaches the shim (its probe answers)
    instead of failing with 'cannot load'."""
    code = PRE_LAYOUT_RUNTIME_CODE.format(lib=str(make_lib(tmp_path)))
    proc = subprocess.run(
        [sys.executable, *PYTHON_FLAGS, "-c", code],
        capture_output=True,
        env={"GPU_ENV_RUNTIME_PROBE": "42", "PATH": "/usr/bin:/bin"},
        timeout=30,
        check=False,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"gpu-env-runtime probe 42\n", b"")

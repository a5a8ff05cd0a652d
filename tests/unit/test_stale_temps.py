"""Writers clean up after a killed writer: the next write of a path removes that path's leftover temp files,
never a live writer's and never a file of another shape."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hook.util.atomicwrite import STALE_AFTER_SECONDS, parse_temp_name, symlink_atomic, write_atomic

# A writer that stops inside write_atomic, its temp file written and locked, until a byte arrives on fd 0
# (then it finishes); it says "ready" once it is there.
_PAUSED_WRITER = """
import os, posix, sys
import hook.util.atomicwrite
real_fsync = posix.fsync
def paused_fsync(fd):
    print("ready", flush=True)
    os.read(0, 1)
    real_fsync(fd)
posix.fsync = paused_fsync  # hook.util.atomicwrite calls posix.fsync (it does not import os)
hook.util.atomicwrite.write_atomic(sys.argv[1], b"from the paused writer\\n")
"""


@contextlib.contextmanager
def paused_writer(path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real writer of ``path``, mid-write (temp file there, lock held) until it reads a byte; killed and
    reaped at the end if it is still there."""
    with subprocess.Popen(
        [sys.executable, "-I", "-c", _PAUSED_WRITER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as writer:
        try:
            assert writer.stdout is not None
            assert writer.stdout.readline() == b"ready\n"
            yield writer
        finally:
            if writer.poll() is None:
                writer.kill()


def temps(directory: Path) -> list[str]:
    """The names of the temp files in ``directory``."""
    return sorted(entry.name for entry in directory.iterdir() if entry.name.endswith(".tmp"))


def dead_pid() -> int:
    """A pid that no process has now: a child's, once it has exited and been reaped."""
    with subprocess.Popen(["true"]) as child:
        child.wait()
    try:
        os.kill(child.pid, 0)
    except ProcessLookupError:
        return child.pid
    pytest.fail("the pid of a reaped child is in use again")


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("config.json", id="bundle-config-json"),
        pytest.param("0123456789abcdef.env", id="env-file"),
    ],
)
def test_sigkilled_writer_leftover_is_removed_by_the_next_write(tmp_path: Path, name: str) -> None:
    """SIGKILL a writer mid-write: its temp file stays; the next write of the same path removes it."""
    path = tmp_path / name
    path.write_bytes(b"old\n")
    with paused_writer(path) as writer:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert len(temps(tmp_path)) == 1
    assert path.read_bytes() == b"old\n"
    write_atomic(str(path), b"new\n")
    assert temps(tmp_path) == []
    assert path.read_bytes() == b"new\n"


def test_live_writer_temp_file_is_kept(tmp_path: Path) -> None:
    """A writer still at work (its lock held) keeps its temp file and finishes its own rename after."""
    path = tmp_path / "config.json"
    path.write_bytes(b"old\n")
    with paused_writer(path) as writer:
        live = temps(tmp_path)
        write_atomic(str(path), b"second\n")
        assert temps(tmp_path) == live
        assert writer.stdin is not None
        writer.stdin.write(b"go")
        writer.stdin.close()
        assert writer.wait(timeout=30) == 0
    assert path.read_bytes() == b"from the paused writer\n"
    assert temps(tmp_path) == []


def test_symlink_replaces_the_entry_and_a_failed_one_leaves_no_temp(tmp_path: Path) -> None:
    """symlink_atomic puts a link where a file was, through the directory's descriptor, with no temp left;
    a replace that fails (a directory in the way) removes its temp link and raises."""
    (tmp_path / "current").write_bytes(b"a file\n")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_bytes(b"")
    fd = os.open(tmp_path, os.O_PATH | os.O_DIRECTORY)
    try:
        symlink_atomic("current", "v2", dir_fd=fd)
        with pytest.raises(IsADirectoryError):
            symlink_atomic("busy", "v2", dir_fd=fd)
    finally:
        os.close(fd)
    assert (tmp_path / "current").readlink() == Path("v2")
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["busy", "current"]


def test_foreign_and_fresh_files_survive(tmp_path: Path) -> None:
    """Only exact names of this path, unlocked, with a dead pid (or too old) go; everything else stays."""
    gone_pid = dead_pid()
    me = os.getpid()
    path = tmp_path / "config.json"
    path.write_bytes(b"old\n")
    stale = [f".config.json.{gone_pid}.0a1b2c3d.tmp", f".config.json.{me}.00000000.tmp"]
    foreign = [
        f".config.json.{gone_pid}.0A1B2C3D.tmp",  # upper-case hex: not our name
        f".config.json.{gone_pid}.0a1b2c.tmp",  # 6 hex digits
        f".config.json.{gone_pid}.tmp",  # no random part
        f"config.json.{gone_pid}.0a1b2c3d.tmp",  # no leading dot
        f".other.json.{gone_pid}.0a1b2c3d.tmp",  # another file's temp
        f".config.json.{gone_pid}.0a1b2c3d.tmp.bak",
        f".config.json.0{gone_pid}.0a1b2c3d.tmp",  # a pid is never written with a leading zero
        f".config.json.{me}.11111111.tmp",  # a live pid and fresh: maybe a writer between create and lock
    ]
    for entry in stale + foreign:
        (tmp_path / entry).write_bytes(b"x")
    old = time.time() - STALE_AFTER_SECONDS - 60
    os.utime(tmp_path / stale[1], (old, old))  # live pid, unlocked and older than the bound
    (tmp_path / f".config.json.{gone_pid}.0a1b2c3e.tmp").mkdir()  # our shape but a directory
    write_atomic(str(path), b"new\n")
    remaining = sorted(entry.name for entry in tmp_path.iterdir())
    assert remaining == sorted(["config.json", *foreign, f".config.json.{gone_pid}.0a1b2c3e.tmp"])


@pytest.mark.parametrize(
    ("entry", "pid"),
    [
        pytest.param(".config.json.123.0a1b2c3d.tmp", 123, id="ours"),
        pytest.param(".config.json.123.0a1b2c3.tmp", None, id="short-hex"),
        pytest.param(".config.json.12a.0a1b2c3d.tmp", None, id="pid-not-digits"),
        pytest.param(".config.json.\u0661\u0662.0a1b2c3d.tmp", None, id="non-ascii-digits"),
        pytest.param(".config.json..0a1b2c3d.tmp", None, id="empty-pid"),
        pytest.param(".config.json.123.0a1b2c3d", None, id="no-suffix"),
    ],
)
def test_parse_temp_name(entry: str, pid: int | None) -> None:
    """Our temp-file name is recognised exactly."""
    assert parse_temp_name(entry, "config.json") == pid

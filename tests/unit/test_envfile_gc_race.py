"""``env-file gc`` racing a device plugin: a new pod's file written over a name gc has judged gone is kept.

Deterministic: the real ``gpu-env-hook env-file gc`` process stops at its first call that takes a name away
(``rename``/``replace``/``unlink``, or at its first ``unlink`` only) until the test lets it go; meanwhile the
real ``gpu-env-hook env-file write`` process writes the same name for a live pod. Before the
rename-aside protocol (``hook.util.atomicwrite.remove_if``) gc unlinked the name it had judged, and the new
pod's file with it. Then ``remove_if``'s own cases: judged gone, judged live on the second look, a newer
file meanwhile, an error.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import REPO, env_settings

from hook.pipeline.envfile import find_pins, load_env_file_bytes, read_env_file
from hook.producer.envfile import write_env_file
from hook.producer.namekey import env_file_path
from hook.util.atomicwrite import remove_if, write_atomic
from hook.util.errors import EnvFileError

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="env files are root's: the writer chowns to root")

# gc, started as `python -I -m hook` would start it, stopping at the first call of the named functions
# (in os and posix alike) on the file named (not, say, the interpreter's bytecode cache): it writes the call
# and its first argument on fd READY, then waits for a byte on stdin.
_PAUSED_GC = """
import os, posix, sys
from hook.__main__ import main
ready, names, target = int(sys.argv[1]), sys.argv[2].split(","), sys.argv[3]
paused = []
def pausing(name, real):
    def call(*args, **kwargs):
        if not paused and target in str(args[0]):
            paused.append(name)
            os.write(ready, f"{name} {args[0]}".encode())
            os.close(ready)
            os.read(0, 1)
        return real(*args, **kwargs)
    return call
for module in (os, posix):
    for name in names:
        setattr(module, name, pausing(name, getattr(module, name)))
sys.exit(main(sys.argv[4:]))
"""


def pin_of(path: Path, directory: Path) -> str:
    """The pod UID the file at ``path`` is pinned to, read with the hook's own reader."""
    data = load_env_file_bytes(str(path), env_settings(directory))
    return find_pins(read_env_file(data, str(path)).bindings, str(path))["GPU_ENV_HOOK_POD_UID"]


@needs_root
@pytest.mark.parametrize(
    ("pause_at", "reported"),
    [
        pytest.param("rename,replace,unlink", "", id="writer-between-judging-and-taking-the-name"),
        pytest.param("unlink", "removed {path}\n", id="writer-while-the-judged-file-is-aside"),
    ],
)
def test_gc_racing_a_writer_keeps_the_new_file(
    tmp_path: Path, env_dir: Path, pause_at: str, reported: str
) -> None:
    """gc judged the file of a gone pod; a device plugin writes the same name for a live pod before gc takes
    the name away (or while it holds the judged file aside): the live pod's file is there afterwards, whole,
    one link, and gc leaves nothing behind."""
    config = tmp_path / "config.toml"
    config.write_text(f'[env-file]\ndirectories = ["{env_dir}"]\n')
    path = Path(env_file_path(["gpu-0"], str(env_dir)))
    write_env_file(
        str(path), {"NVIDIA_VISIBLE_DEVICES": "0"}, pod_uid="gone-pod", settings=env_settings(env_dir)
    )
    args = ["-config", str(config), "env-file"]
    ready_read, ready_write = os.pipe()
    with subprocess.Popen(
        [
            sys.executable,
            "-I",
            "-c",
            _PAUSED_GC,
            str(ready_write),
            pause_at,
            path.name,
            *args,
            "gc",
            "--live",
            "new-pod",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=(ready_write,),
        cwd=REPO,
    ) as gc:
        try:
            os.close(ready_write)
            with os.fdopen(ready_read, "rb") as ready:
                paused = ready.read().decode()  # EOF once gc wrote it (or ended without pausing)
            assert paused.split(" ")[0] in pause_at.split(","), f"gc did not pause: {gc.communicate()}"
            assert path.name in paused
            written = subprocess.run(
                [
                    sys.executable,
                    "-I",
                    "-m",
                    "hook",
                    *args,
                    "write",
                    str(path),
                    "NVIDIA_VISIBLE_DEVICES=1",
                    "--pod-uid",
                    "new-pod",
                ],
                capture_output=True,
                text=True,
                cwd=REPO,
                timeout=60,
                check=False,
            )
            assert (written.returncode, written.stderr) == (0, "")
            out, err = gc.communicate(b"go", timeout=60)
        finally:
            gc.kill()
    assert (gc.returncode, out.decode(), err.decode()) == (0, reported.format(path=path), "")
    assert pin_of(path, env_dir) == "new-pod"
    assert path.stat().st_nlink == 1
    assert sorted(p.name for p in env_dir.iterdir()) == [path.name]


def _newer_file_meanwhile(directory: Path) -> bool:
    """A writer renames a newer file over the name while the judged one is aside; the judge keeps it."""
    write_atomic(str(directory / "f.env"), b"newer\n", mode=0o600)
    return False


def _refusing(_: Path) -> bool:
    raise EnvFileError("env file 'f.env': must not be group- or world-writable (mode 0666)")


@pytest.mark.parametrize(
    ("judge", "gone", "left"),
    [
        pytest.param(lambda _: True, True, None, id="still-judged-gone"),
        pytest.param(lambda _: False, False, b"judged\n", id="judged-live-on-second-look-put-back"),
        pytest.param(_newer_file_meanwhile, False, b"newer\n", id="newer-write-meanwhile-stays"),
    ],
)
def test_remove_if(tmp_path: Path, judge: Callable[[Path], bool], gone: bool, left: bytes | None) -> None:
    """remove_if judges the file under a private name and removes it, or links it back unless a newer file
    took the name; nothing of its own is left behind, and the name never has two links."""
    (tmp_path / "f.env").write_bytes(b"judged\n")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert remove_if("f.env", fd, lambda _: judge(tmp_path)) is gone
    finally:
        os.close(fd)
    assert [p.name for p in tmp_path.iterdir()] == ([] if left is None else ["f.env"])
    if left is not None:
        assert ((tmp_path / "f.env").read_bytes(), (tmp_path / "f.env").stat().st_nlink) == (left, 1)


def test_remove_if_puts_back_on_error_and_ignores_a_missing_name(tmp_path: Path) -> None:
    """A judge that raises leaves the file where it was (the error goes on); a name not there is not removed."""
    (tmp_path / "f.env").write_bytes(b"judged\n")
    inode = (tmp_path / "f.env").stat().st_ino
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(EnvFileError, match=r"^env file 'f\.env': must not be"):
            remove_if("f.env", fd, lambda _: _refusing(tmp_path))
        assert remove_if("missing.env", fd, lambda _: True) is False
    finally:
        os.close(fd)
    assert [(p.name, p.stat().st_ino) for p in tmp_path.iterdir()] == [("f.env", inode)]


def test_remove_if_puts_a_directory_back(tmp_path: Path) -> None:
    """A directory at the name (it cannot be opened as a file, nor linked) is renamed back, never removed."""
    (tmp_path / "f.env" / "inside").mkdir(parents=True)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(IsADirectoryError):
            remove_if("f.env", fd, lambda _: True)
    finally:
        os.close(fd)
    assert [p.name for p in tmp_path.iterdir()] == ["f.env"]
    assert (tmp_path / "f.env" / "inside").is_dir()

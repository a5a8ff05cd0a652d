"""The runtime wrapper (POSIX sh): which commands start Python, and what the runtime gets."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hook.install import build_runtime_wrapper
from hook.launcher import literal
from hook.stages.shim import CREATE_COMMANDS, parse_runtime_args

RECORDER = """#!/bin/sh
# Records who ran: its role, argv (one per line), and the environment.
{{ echo "{role}"; [ $# -eq 0 ] || printf '%s\\n' "$@"; }} > "{out}/{role}"
env > "{out}/{role}.env"
"""


@pytest.fixture
def wrapper(tmp_path: Path) -> Path:
    """A runtime wrapper whose runtime and interpreter are recorders."""
    out = tmp_path / "out"
    out.mkdir()
    for role in ("runtime", "python"):
        path = tmp_path / role
        path.write_text(RECORDER.format(role=role, out=out))
        path.chmod(0o755)
    data = build_runtime_wrapper(
        python=str(tmp_path / "python"), runtime=str(tmp_path / "runtime"), engine="containerd"
    )
    path = tmp_path / "gpu-env-runtime"
    path.write_bytes(data)
    path.chmod(0o755)
    return path


def run(wrapper: Path, args: list[str], env: dict[str, str] | None = None) -> tuple[str, list[str], str]:
    """Run the wrapper; return who ran (runtime or python), its argv, its environment."""
    out = wrapper.parent / "out"
    for stale in out.iterdir():
        stale.unlink()
    proc = subprocess.run(
        [str(wrapper), *args], env=env or {}, capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0, proc.stderr
    (ran,) = [path for path in out.iterdir() if not path.name.endswith(".env")]
    lines = ran.read_text().splitlines()
    return ran.name, lines[1:], (out / f"{ran.name}.env").read_text()


ARGVS = [
    ["create", "--bundle", "/b", "id"],
    ["run", "-d", "id"],
    ["--root", "/r", "create", "id"],
    ["--root=/r", "--log", "/l", "--log-format", "json", "run", "id"],
    ["-root", "/r", "-systemd-cgroup", "create", "id"],
    ["--root", "create", "kill", "id", "KILL"],
    ["--log", "run", "state", "id"],
    ["--cgroup-manager", "systemd", "--log-level", "debug", "create", "x"],
    ["--rootless", "true", "--criu", "/c", "run", "x"],
    ["--debug", "delete", "--force", "create"],
    ["state", "run"],
    ["--", "create", "x"],
    ["--version"],
    ["-v"],
    ["--help", "create", "--bundle", "/b", "id"],
    ["-h", "run", "id"],
    ["--debug", "--version", "create", "id"],
    ["-v", "run", "id"],
    ["-help", "create", "id"],
    ["list", "--format", "json"],
    ["kill", "id", "9"],
    ["-", "create"],
    [],
]


@pytest.mark.parametrize("argv", [pytest.param(argv, id=" ".join(argv) or "empty") for argv in ARGVS])
def test_wrapper_and_shim_agree_on_the_command(wrapper: Path, argv: list[str]) -> None:
    """The wrapper starts Python exactly when the shim's own parser finds create or run; otherwise it execs
    the runtime with the argv untouched."""
    ran, args, _ = run(wrapper, argv)
    expected = "python" if parse_runtime_args(argv).command in CREATE_COMMANDS else "runtime"
    assert ran == expected
    if ran == "runtime":
        assert args == argv
    else:
        assert args[:6] == ["-I", "-S", "-B", "-X", "utf8", "-c"]
        assert args[-len(argv) :] == argv


def test_runtime_gets_the_engines_environment_less_the_loader(wrapper: Path) -> None:
    """The runtime keeps the caller's environment (NOTIFY_SOCKET, proxies, ...) less LD_*, plus the loop
    guard: its own pid (the wrapper execs it)."""
    caller = {"PATH": "/usr/bin:/bin", "NOTIFY_SOCKET": "/s", "LD_PRELOAD": "/x.so", "LD_LIBRARY_PATH": "/e"}
    _, _, env = run(wrapper, ["state", "id"], caller)
    names = {line.partition("=")[0] for line in env.splitlines()}
    assert {"PATH", "NOTIFY_SOCKET", "GPU_ENV_RUNTIME_PID"} <= names
    assert not names & {"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"}


def test_wrapper_answers_the_probe_and_stops_a_loop(wrapper: Path) -> None:
    """With the probe variable it only answers; started again from its own pid it refuses in one line."""
    probe = subprocess.run(
        [str(wrapper), "--version"],
        env={"GPU_ENV_RUNTIME_PROBE": "t"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (probe.returncode, probe.stdout) == (0, "gpu-env-runtime probe t\n")
    loop = subprocess.run(
        ["sh", "-c", f'GPU_ENV_RUNTIME_PID=$$ exec "{wrapper}" state id'],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (loop.returncode, loop.stdout) == (1, "")
    assert loop.stderr == (
        "gpu-env-runtime: refusing to run: the runtime it executed started it again (a loop); set the real "
        "runtime (runc, crun) with `install --runtime PATH` or [gpu-env-runtime] runtime\n"
    )
    assert not any((wrapper.parent / "out").iterdir())


def test_a_missing_interpreter_fails_only_create(wrapper: Path) -> None:
    """Without its interpreter the wrapper still passes state through; create fails in one line."""
    (wrapper.parent / "python").unlink()
    assert run(wrapper, ["state", "id"])[0] == "runtime"
    proc = subprocess.run([str(wrapper), "create", "id"], env={}, capture_output=True, text=True, check=False)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        f"gpu-env-runtime: cannot create the container: the interpreter {wrapper.parent / 'python'} is not "
        "there (or not executable); run `gpu-env-hook install` again\n"
    )


def test_wrapper_is_posix_sh() -> None:
    """The wrapper parses with dash's and busybox's -n (no bash-isms that would break on a minimal node)."""
    data = build_runtime_wrapper(python="/usr/bin/python3", runtime="/usr/sbin/runc", engine="crio")
    for shell in (["dash", "-n"], ["busybox", "sh", "-n"]):
        proc = subprocess.run([*shell, "/dev/stdin"], input=data, capture_output=True, check=False)
        assert proc.returncode == 0, (shell, proc.stderr)


@pytest.mark.parametrize("engine", ["containerd", "crio", "docker"])
def test_each_engines_wrapper_carries_its_engine_and_its_runtime(tmp_path: Path, engine: str) -> None:
    """An engine's wrapper hands the shim its engine's name (GPU_ENV_HOOK_ENGINE, which the hook the shim
    injects inherits: the pod-binding engine) and its own runtime; other commands exec that runtime."""
    out = tmp_path / "out"
    out.mkdir()
    for role in (f"runtime-{engine}", "python"):
        path = tmp_path / role
        path.write_text(RECORDER.format(role=role, out=out))
        path.chmod(0o755)
    runtime = str(tmp_path / f"runtime-{engine}")
    wrapper = tmp_path / "gpu-env-runtime"
    wrapper.write_bytes(
        build_runtime_wrapper(python=str(tmp_path / "python"), runtime=runtime, engine=engine)
    )
    wrapper.chmod(0o755)
    ran, args, env = run(wrapper, ["create", "--bundle", "/b", "id"], {"GPU_ENV_HOOK_ENGINE": "podman"})
    assert ran == "python"
    assert f"GPU_ENV_HOOK_ENGINE={engine}" in env.splitlines()
    assert f"failed, runtime={literal(runtime)})" in "\n".join(args)
    ran, args, env = run(wrapper, ["kill", "id", "9"])
    assert (ran, args) == (f"runtime-{engine}", ["kill", "id", "9"])
    assert "GPU_ENV_HOOK_ENGINE" not in env


def test_the_runtime_tree_carries_pyyaml_beside_hook() -> None:
    """The shim's CDI mode reads YAML specs (nvidia-ctk's default) from the installed tree, which runs under
    ``-S``: PyYAML must be in the tree itself, not only in some site-packages."""
    from hook.install.tree import collect_tree

    names = {relative.split("/")[1] for relative, _ in collect_tree().files}
    assert names == {"hook", "yaml"}

"""hook.commands.envfile: plain env-file invocations run without typer, with typer's output, messages and codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, MakeConfig
from typer.testing import CliRunner

from hook.commands.cli import build_app
from hook.commands.envfile import columns, mark, parse_command

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="env files must be root-owned")


@pytest.mark.parametrize(
    ("args", "parsed"),
    [
        pytest.param(["path", "0", "1"], ("path", ["0", "1"], {}), id="path"),
        pytest.param(["path", "--directory", "/d", "0"], ("path", ["0"], {"--directory": "/d"}), id="option-first"),
        pytest.param(["path", "0", "--directory=/d"], ("path", ["0"], {"--directory": "/d"}), id="option-equals"),
        pytest.param(["path", "0", "--directory", "/a", "--directory", "/b"], ("path", ["0"], {"--directory": "/b"}), id="last-wins"),
        pytest.param(["path", "--", "-1"], ("path", ["-1"], {}), id="double-dash"),
        pytest.param(["path", "-"], ("path", ["-"], {}), id="lone-dash"),
        pytest.param(["write", "/f", "A=1", "--pod-uid", "p", "B=2"], ("write", ["/f", "A=1", "B=2"], {"--pod-uid": "p"}), id="write"),
        pytest.param(["check", "/f", "--container=c", "--pod-uid", "p"], ("check", ["/f"], {"--container": "c", "--pod-uid": "p"}), id="check"),
    ],
)  # fmt: skip
def test_plain_invocations_parse(args: list[str], parsed: tuple[str, list[str], dict[str, str]]) -> None:
    """Options before, between and after the arguments, ``=`` or a space, the last one winning."""
    assert parse_command(args) == parsed


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([], id="no-command"),
        pytest.param(["frobnicate"], id="unknown-command"),
        pytest.param(["path", "--help"], id="help"),
        pytest.param(["write", "-h"], id="short-help"),
        pytest.param(["path"], id="no-device-id"),
        pytest.param(["write", "/f"], id="no-assignment"),
        pytest.param(["check"], id="no-path"),
        pytest.param(["check", "/f", "/g"], id="extra-argument"),
        pytest.param(["check", "/f", "--directory", "/d"], id="option-of-another-command"),
        pytest.param(["path", "0", "--directory"], id="option-without-value"),
        pytest.param(["path", "0", "--directory", "--other"], id="value-looks-like-an-option"),
    ],
)
def test_anything_else_is_left_to_typer(args: list[str]) -> None:
    """Help, unknown options and missing or extra arguments go to typer, which words them."""
    assert parse_command(args) is None


def test_marks_are_what_click_styles() -> None:
    """On a terminal the marks carry the bytes click.style gives them; elsewhere they are plain."""
    import typer

    assert mark(True, colour=True) == typer.style("✓", fg="green")
    assert mark(False, colour=True) == typer.style("✗", fg="red")
    assert (mark(True, colour=False), mark(False, colour=False), mark(None, colour=True)) == ("✓", "✗", "-")
    assert columns([("a", "bb", "c"), ("ccc", "d", "e")]) == "a    bb  c\nccc  d   e\n"


def process(*args: str, config: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -I -S`` with the package (and its dependencies) on sys.path, as the wrapper runs it."""
    path = [str(REPO), *sys.path]
    launcher = f"import sys; sys.path[:0] = {path!r}; from hook.__main__ import main; sys.exit(main())"
    argv = [sys.executable, "-I", "-S", "-c", launcher, "-config", str(config), *args]
    env = {"PATH": "/usr/bin:/bin", "GPU_ENV_HOOK_NAME_KEY": os.environ["GPU_ENV_HOOK_NAME_KEY"]}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)


def runner(*args: str, config: Path) -> tuple[int, str, str]:
    """Run the typer command; return exit code, stdout, stderr."""
    result = CliRunner().invoke(build_app(config=str(config)), list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def config(make_config: MakeConfig, tmp_path: Path) -> Path:
    """A config.toml whose [env-file] directory is tmp/nvidia-env, on a containerd node (named here, so that
    a GPU_ENV_HOOK_ENGINE in the test's own environment cannot make the two paths differ)."""
    (tmp_path / "nvidia-env").mkdir(mode=0o755)
    return make_config(
        f'[env-file]\ndirectories = ["{tmp_path / "nvidia-env"}"]\npod-binding-engine = "containerd"\n'
    )


@needs_root
@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["env-file", "path", "b", "a", "b"], id="path"),
        pytest.param(["env-file", "path", "--directory=/elsewhere", "0"], id="path-directory"),
        pytest.param(["env-file", "write", "{dir}/a.env", "NVIDIA_VISIBLE_DEVICES=0", "--pod-uid", "p1"], id="write"),
        pytest.param(["env-file", "write", "{dir}/a.env", "A"], id="not-key-value"),
        pytest.param(["env-file", "write", "{dir}/a.env", "A=1", "A=2"], id="given-twice"),
        pytest.param(["env-file", "write", "{dir}/a.env", "LD_PRELOAD=/x.so"], id="refused-key"),
        pytest.param(["env-file", "write", "/elsewhere/a.env", "A=1"], id="outside"),
        pytest.param(["env-file", "check", "{dir}/a.env", "--pod-uid", "p1"], id="check"),
        pytest.param(["env-file", "check", "{dir}/a.env", "--pod-uid", "p2"], id="check-fails"),
        pytest.param(["env-file", "check", "{dir}/missing.env"], id="check-missing"),
    ],
)  # fmt: skip
def test_same_output_messages_and_codes_as_typer(args: list[str], config: Path, tmp_path: Path) -> None:
    """The typer-free path prints what the typer command prints and exits with its status."""
    args = [arg.replace("{dir}", str(tmp_path / "nvidia-env")) for arg in args]
    subprocess.run(  # the file the check cases look at
        [sys.executable, "-I", "-m", "hook", "-config", str(config), "env-file", "write",
         str(tmp_path / "nvidia-env" / "a.env"), "NVIDIA_VISIBLE_DEVICES=0", "--pod-uid", "p1"],
        check=True, capture_output=True,
    )  # fmt: skip
    lean = process(*args, config=config)
    assert (lean.returncode, lean.stdout, lean.stderr) == runner(*args, config=config)
    assert lean.stdout or lean.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(["env-file", "path", "--help"], r"^Usage: gpu-env-hook env-file path \[OPTIONS\]", id="help"),
        pytest.param(["env-file", "path"], r"^gpu-env-hook: Missing argument 'DEVICE_ID\.\.\.'\.\n$", id="missing"),
        pytest.param(["env-file", "path", "0", "--frob"], r"^gpu-env-hook: No such option: --frob\n$", id="unknown-option"),
    ],
)  # fmt: skip
def test_help_and_usage_errors_are_typers(args: list[str], expected: str, config: Path) -> None:
    """What the lean parser does not take, typer answers, as before."""
    proc = process(*args, config=config)
    text = proc.stdout if "--help" in args else proc.stderr
    assert proc.returncode == (0 if "--help" in args else 2)
    assert pytest.importorskip("re").match(expected, text), text

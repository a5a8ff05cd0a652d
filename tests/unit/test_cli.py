"""Tests for hook.commands.cli: each command through typer's runner and as a real ``python -I -m hook`` process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import REPO, MakeBundle, MakeConfig
from typer.testing import CliRunner

from hook.commands.cli import build_app, build_default_config_toml, run_cli
from hook.pipeline.config import default_settings
from hook.producer.namekey import env_file_path

HOOK = [sys.executable, "-I", "-m", "hook"]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="env files must be root-owned")


def hook(*args: str, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -I -m hook [-config FILE] ARGS`` and capture its output."""
    argv = [*HOOK, *(["-config", str(config)] if config else []), *args]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "XDG_CONFIG_HOME": "/nonexistent",
        "GPU_ENV_HOOK_NAME_KEY": os.environ["GPU_ENV_HOOK_NAME_KEY"],
    }
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=60, check=False)


def invoke(*args: str, config: Path | None = None) -> tuple[int, str, str]:
    """Run a command through typer's test runner; return exit code, stdout, stderr."""
    result = CliRunner().invoke(build_app(config=str(config) if config else None), list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def env_config(make_config: MakeConfig, tmp_path: Path) -> Path:
    """A config.toml whose [env-file] directory is tmp/nvidia-env (created, mode 0755), on a containerd node."""
    directory = tmp_path / "nvidia-env"
    directory.mkdir(mode=0o755)
    return make_config(f'[env-file]\ndirectories = ["{directory}"]\npod-binding-engine = "containerd"\n')


# --- run_cli: exit codes and one-line errors -------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param(["resolve"], 2, r"^gpu-env-hook: Missing option '--bundle'\.\n$", id="missing-option"),
        pytest.param(
            ["validate", "nope", "x"], 2, r"^gpu-env-hook: No such command 'nope'\.\n$", id="no-such-kind"
        ),
        pytest.param(
            ["doctor", "--frobnicate"], 2, r"^gpu-env-hook: No such option: --frobnicate\n$", id="bad-flag"
        ),
        pytest.param(
            ["env-file", "write", "/run/nvidia-env/a.env", "A"],
            2,
            r"^gpu-env-hook: env-file write: 'A' is not KEY=VALUE\n$",
            id="not-key-value",
        ),
        pytest.param(
            ["validate", "state", "/nonexistent/x"],
            1,
            r"^gpu-env-hook: /nonexistent/x: cannot read: No such file or directory\n$",
            id="missing-file",
        ),
    ],
)
def test_run_cli_returns_exit_codes_and_prints_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], code: int, message: str
) -> None:
    """Usage errors exit 2, failures 1, each with one line on stderr and no traceback."""
    assert run_cli(args, config=None) == code
    assert re.match(message, capsys.readouterr().err)


def test_run_cli_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    """``COMMAND --help`` documents the command and exits 0."""
    assert run_cli(["env-file", "write", "--help"], config=None) == 0
    assert "--pod-uid UID" in capsys.readouterr().out


# --- config default --------------------------------------------------------------------------------------


def test_config_default_parses_back_to_the_defaults() -> None:
    """The printed config.toml, parsed with tomllib, is exactly default_settings()."""
    assert tomllib.loads(build_default_config_toml()) == default_settings()


def test_config_default_comments_every_scalar_key() -> None:
    """Every key line is preceded by a comment saying what it does."""
    lines = build_default_config_toml().splitlines()
    for index, line in enumerate(lines):
        if " = " in line and not line.startswith("#"):
            assert lines[index - 1].startswith("# "), line


def test_config_default_through_runner_and_process() -> None:
    """``config default`` prints the same text through the runner and as a process, exit 0."""
    code, out, _ = invoke("config", "default")
    proc = hook("config", "default")
    assert (code, proc.returncode) == (0, 0)
    assert out == proc.stdout == build_default_config_toml()


# --- validate --------------------------------------------------------------------------------------------


def test_validate_config_accepts_a_bundle(make_bundle: MakeBundle) -> None:
    """A good bundle validates with exit 0 through both paths."""
    bundle = make_bundle(["A=1"])
    code, out, _ = invoke("validate", "config", str(bundle))
    proc = hook("validate", "config", str(bundle))
    assert (code, proc.returncode) == (0, 0)
    assert out == proc.stdout == f"✓ {bundle}: valid OCI runtime config (runtime-spec 1.3)\n"


def test_validate_prints_every_problem_with_its_path(tmp_path: Path) -> None:
    """A bad hooks JSON gets one line per problem and exit 1 through both paths."""
    path = tmp_path / "hook.json"
    document = {
        "version": "1.0.0",
        "hook": {"path": "/bin/sh"},
        "when": {"commands": ["(?=x)"]},
        "stages": ["x"],
    }
    path.write_text(json.dumps(document))
    stages = "createContainer, createRuntime, poststart, poststop, precreate, prestart, startContainer"
    expected = (
        f'✗ {path}: $.when.commands[0]: invalid command "(?=x)": invalid perl operator: (?= (Go RE2 syntax)\n'
        f'✗ {path}: $.stages[0]: unknown stage "x": must be one of {stages}\n'
    )
    code, out, _ = invoke("validate", "hooks-json", str(path))
    proc = hook("validate", "hooks-json", str(path))
    assert (code, proc.returncode) == (1, 1)
    assert out == proc.stdout == expected


def test_validate_hooks_json_accepts_with_warnings(tmp_path: Path) -> None:
    """A legacy file podman reads is accepted, said to be legacy, and the count of warnings is right."""
    path = tmp_path / "hook.json"
    path.write_text(json.dumps({"hook": "/bin/sh", "stage": ["prestart"], "cmds": ["^sh$"]}))
    code, out, _ = invoke("validate", "hooks-json", str(path))
    assert code == 0
    assert out == (
        f"! {path}: $: legacy hook format 0.1.0: podman and CRI-O still read it; version 1.0.0 replaces it\n"
        f"✓ {path}: podman accepts this hooks file (legacy format 0.1.0), 1 warning\n"
    )


@pytest.mark.parametrize(
    ("kind", "content", "code"),
    [
        pytest.param(
            "state", {"ociVersion": "1.0.2", "id": "x", "status": "creating", "bundle": "/b"}, 0, id="state"
        ),
        pytest.param("state", {"id": "x"}, 1, id="bad-state"),
        pytest.param("config-toml", None, 0, id="config-toml"),
    ],
)
def test_validate_kinds_as_process(tmp_path: Path, kind: str, content: object, code: int) -> None:
    """Each kind validates a file as a real process."""
    path = tmp_path / "doc"
    path.write_text(build_default_config_toml() if content is None else json.dumps(content))
    assert hook("validate", kind, str(path)).returncode == code


# --- env-file --------------------------------------------------------------------------------------------


def test_env_file_path_is_order_independent_through_both_paths(env_config: Path, tmp_path: Path) -> None:
    """``env-file path`` prints one path for a set of ids, under the configured directory."""
    expected = env_file_path(["fake0", "fake1"], str(tmp_path / "nvidia-env")) + "\n"
    code, out, _ = invoke("env-file", "path", "fake1", "fake0", config=env_config)
    proc = hook("env-file", "path", "fake0", "fake1", "fake0", config=env_config)
    assert (code, proc.returncode) == (0, 0)
    assert out == proc.stdout == expected


@needs_root
def test_env_file_write_then_check_through_both_paths(env_config: Path, tmp_path: Path) -> None:
    """A written file passes every check of ``env-file check``; a pod mismatch fails it."""
    path = tmp_path / "nvidia-env" / "a.env"
    code, out, _ = invoke(
        "env-file",
        "write",
        str(path),
        "NVIDIA_VISIBLE_DEVICES=0,1",
        "X=a b",
        "--pod-uid",
        "p1",
        config=env_config,
    )
    assert (code, out) == (0, f"{path}\n")
    proc = hook(
        "env-file", "write", str(path), "NVIDIA_VISIBLE_DEVICES=0,1", "--pod-uid", "p1", config=env_config
    )
    assert proc.returncode == 0, proc.stderr
    code, out, _ = invoke("env-file", "check", str(path), "--pod-uid", "p1", config=env_config)
    assert code == 0
    assert [line.split()[1] for line in out.splitlines()] == ["location", "file", "binding", "content"]
    proc = hook("env-file", "check", str(path), "--pod-uid", "p2", config=env_config)
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1].startswith("✗  binding")


def test_env_file_write_refuses_an_empty_pin(env_config: Path, tmp_path: Path) -> None:
    """``--pod-uid ""`` (or an empty container name) is refused: the hook would refuse the file."""
    path = tmp_path / "nvidia-env" / "a.env"
    for option in ("--pod-uid", "--container"):
        pod = [] if option == "--pod-uid" else ["--pod-uid", "p1"]
        proc = hook("env-file", "write", str(path), "A=1", *pod, option, "", config=env_config)
        name = "GPU_ENV_HOOK_POD_UID" if option == "--pod-uid" else "GPU_ENV_HOOK_CONTAINER_NAME"
        assert (proc.returncode, proc.stderr) == (
            1,
            f"gpu-env-hook: env file '{path}': {name} must not be empty (the hook refuses an empty pin)\n",
        )
        assert not path.exists()


def test_env_file_write_refuses_a_refused_key_through_both_paths(env_config: Path, tmp_path: Path) -> None:
    """A key the hook refuses fails with one line and exit 1; nothing is written."""
    path = tmp_path / "nvidia-env" / "a.env"
    code, _, err = invoke("env-file", "write", str(path), "LD_PRELOAD=/x.so", config=env_config)
    proc = hook("env-file", "write", str(path), "LD_PRELOAD=/x.so", config=env_config)
    line = (
        f"gpu-env-hook: env file '{path}': key LD_PRELOAD matches LD_* and may not be set from an env file\n"
    )
    assert (code, err) == (1, line)
    assert (proc.returncode, proc.stderr) == (1, line)
    assert not path.exists()


# --- resolve ---------------------------------------------------------------------------------------------


def test_resolve_json_through_both_paths(make_bundle: MakeBundle, make_config: MakeConfig) -> None:
    """``resolve --json`` gives the same versioned document through the runner and as a process."""
    bundle = make_bundle(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute"])
    config = make_config()
    code, out, _ = invoke("resolve", "--bundle", str(bundle), "--json", config=config)
    proc = hook("resolve", "--bundle", str(bundle), "--json", config=config)
    assert (code, proc.returncode) == (0, 0)
    document = json.loads(out)
    assert document["version"] == 1
    assert document["outcome"] == "gpu"
    assert document["cli"]["argv"][-3:] == ["--compute", "--pid=0", f"{bundle}/rootfs"]
    assert json.loads(proc.stdout)["cli"] == document["cli"]


def test_resolve_human_output_shows_sources_and_command_line(
    make_bundle: MakeBundle, make_config: MakeConfig
) -> None:
    """The human view names the variables with their source and ends with the cli's command line."""
    bundle = make_bundle(["NVIDIA_VISIBLE_DEVICES=0,1"])
    code, out, _ = invoke("resolve", "--bundle", str(bundle), config=make_config())
    assert code == 0
    assert "NVIDIA_VISIBLE_DEVICES  0,1    config.json" in out
    assert "--device=0,1" in out.splitlines()[-3]


def test_resolve_refusal_exits_one(make_bundle: MakeBundle, make_config: MakeConfig) -> None:
    """A container the hook refuses makes resolve exit 1 with the hook's message."""
    bundle = make_bundle(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=bogus,compute"])
    proc = hook(
        "resolve",
        "--bundle",
        str(bundle),
        "--json",
        config=make_config('supported-driver-capabilities = "utility"'),
    )
    document = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert document["outcome"] == "refused"
    assert document["error"]


def test_resolve_writes_nothing(make_bundle: MakeBundle, make_config: MakeConfig, record_path: Path) -> None:
    """A dry run leaves config.json byte-identical and never starts the cli."""
    bundle = make_bundle(["NVIDIA_VISIBLE_DEVICES=all"])
    before = (bundle / "config.json").read_bytes()
    assert hook("resolve", "--bundle", str(bundle), config=make_config()).returncode == 0
    assert (bundle / "config.json").read_bytes() == before
    assert not record_path.exists()


# --- doctor ----------------------------------------------------------------------------------------------


def test_doctor_as_process_reports_a_bare_tree(tmp_path: Path) -> None:
    """On an empty tree doctor prints one line per check, ✗ for the missing cli and directory, exit 1."""
    proc = hook("doctor", "--root", str(tmp_path))
    assert proc.returncode == 1
    names = [line.split()[1] for line in proc.stdout.splitlines()]
    assert names[:4] == ["config", "installed", "nvidia-container-cli", "env"]
    assert proc.stdout.splitlines()[2].startswith("✗")
    assert "\x1b[" not in proc.stdout, "no colour when stdout is not a terminal"


@pytest.mark.parametrize(
    "command", [pytest.param("env-file", id="env-file-check"), pytest.param("doctor", id="doctor")]
)
def test_output_is_safe_under_a_latin_1_locale(tmp_path: Path, command: str) -> None:
    """Through the pip-installed command (no -X utf8) with a Latin-1 stdout: + and x instead of ✓ and ✗,
    text Latin-1 cannot show escaped, never an internal error."""
    directory = tmp_path / "env"
    directory.mkdir()
    directory.chmod(0o755)
    missing = directory / "\u03c3.env"  # named in the refusal: not Latin-1 (a Greek sigma)
    config = tmp_path / "config.toml"
    config.write_text(f'[env-file]\ndirectories = ["{directory}"]\n')
    script = Path(sys.executable).parent / "gpu-env-hook"
    argv = ["env-file", "check", str(missing)]
    if command == "doctor":
        argv = ["doctor", "--root", str(tmp_path)]
    environ = {"PYTHONIOENCODING": "iso-8859-1", "NVIDIA_CTK_CONFIG_FILE_PATH": str(config), "PATH": "/bin"}
    proc = subprocess.run([str(script), *argv], capture_output=True, env=environ, timeout=120, check=False)
    assert b"internal error" not in proc.stderr, proc.stderr
    out = proc.stdout.decode("iso-8859-1")
    assert out.splitlines()[0].startswith(("+  ", "x  ")), out
    if command == "env-file":
        assert proc.returncode == 1, out
        assert f"x  file      env file '{directory}/\\u03c3.env': does not exist" in out

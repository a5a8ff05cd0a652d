"""The command line for people: help on stdout, global flags after the command, colour, alignment, -debug."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from hook.__main__ import ENGINE_COMMANDS, HUMAN_COMMANDS, USAGE, main
from hook.commands import cli
from hook.commands.clihelp import COMMAND_ORDER, STAGES
from hook.commands.envfile import columns

HOOK = [sys.executable, "-I", "-m", "hook"]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
BAD_CONFIG_ERROR = (
    "gpu-env-hook: error getting hook config: failed to load config: {c}: disable-require must be a boolean, "
    "got an integer\n"
)
TYPE_NAMES = re.compile(r"<(str|int|list|bool|path)|\{[a-z_]+\}")


def hook(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -I -m hook ARGS`` with pipes."""
    base = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "XDG_CONFIG_HOME": "/nonexistent",
        "COLUMNS": "100",
        "GPU_ENV_HOOK_NAME_KEY": os.environ["GPU_ENV_HOOK_NAME_KEY"],
    }
    return subprocess.run(
        [*HOOK, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**base, **(env or {})},
        timeout=60,
        check=False,
    )


def on_terminal(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``python -I -m hook ARGS`` with stdout on a pseudo-terminal; return its status and output."""
    base = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "XDG_CONFIG_HOME": "/nonexistent",
        "TERM": "xterm",
        "GPU_ENV_HOOK_NAME_KEY": os.environ["GPU_ENV_HOOK_NAME_KEY"],
    }
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [*HOOK, *args], stdout=follower, stderr=subprocess.DEVNULL, cwd=REPO, env={**base, **(env or {})}
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        code = proc.wait(timeout=60)
    finally:
        os.close(leader)
    return code, b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.mark.parametrize(
    "args", [["--help"], ["-h"], ["-help"], ["help"]], ids=["help-flag", "h", "go-help", "word"]
)
def test_main_help_on_stdout(args: list[str]) -> None:
    """Every spelling of help prints the whole help on stdout and exits 0; stages come before people's commands."""
    proc = hook(*args)
    assert (proc.returncode, proc.stderr) == (0, "")
    out = proc.stdout
    stage_lines = [out.index(f"\n  {name} ") for name, _ in STAGES]
    command_lines = [out.index(f"\n  {name} ") for name in (*HUMAN_COMMANDS, "help")]
    assert max(stage_lines) < min(command_lines)
    for name, description in STAGES:
        assert re.search(rf"\n  {name} +{re.escape(description)}\n", out)


def test_main_help_describes_every_command_in_full() -> None:
    """Each command for people has its one-line description, whole (never cut off with '...')."""
    out = hook("--help").stdout
    command = cli._command(None)
    assert set(command.commands) == set(HUMAN_COMMANDS) == set(COMMAND_ORDER)
    flat = " ".join(out.split())
    for name in HUMAN_COMMANDS:
        description = command.commands[name].short_help
        assert description
        assert f"{name} {description}" in flat
    assert not TYPE_NAMES.search(out)


def test_help_before_a_stage_keeps_go_usage_on_stderr() -> None:
    """``-h prestart`` is upstream's flag package: the usage on stderr, exit 0."""
    proc = hook("-h", "prestart")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", USAGE)


@pytest.mark.parametrize(
    "args",
    [
        *(pytest.param([stage, "--help"], id=f"{stage}--help") for stage in ENGINE_COMMANDS),
        *(pytest.param([stage, "-h"], id=f"{stage}-h") for stage in ENGINE_COMMANDS),
        *(pytest.param(["help", stage], id=f"help-{stage}") for stage in ENGINE_COMMANDS),
        pytest.param(["nri", "/run/nri.sock", "-help"], id="nri-socket-go-help"),
        pytest.param(["-config", "/nonexistent.toml", "prestart", "--h"], id="prestart-flags-go-h"),
        pytest.param(["nri", "extra", "--help"], id="nri-later-help"),
    ],
)
def test_help_after_an_engine_command_prints_usage(args: list[str]) -> None:
    """``STAGE --help`` (and ``-h``, Go's ``-help``/``--h``, ``help STAGE``) prints the usage on stdout and
    exits 0 for every command an engine runs: no stdin read, no socket dialled, no config loaded."""
    proc = hook(*args)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, USAGE, "")


@pytest.mark.parametrize(
    ("args", "same_as"),
    [
        pytest.param(["env-file", "write", "/x.env", "K=V", "--help"], "write", id="write-with-arguments"),
        pytest.param(["env-file", "write", "--pod-uid", "u", "-h"], "write", id="write-after-option"),
        pytest.param(["env-file", "path", "dev0", "--help"], "path", id="path-with-ids"),
        pytest.param(["env-file", "check", "/x.env", "-h"], "check", id="check-with-file"),
        pytest.param(["env-file", "gc", "--live", "u", "--help"], "gc", id="gc-with-live"),
    ],
)
def test_help_through_the_producer_dispatch(args: list[str], same_as: str) -> None:
    """A device plugin's commands, parsed without typer when plain, still give typer's help for ``-h``
    wherever it stands, and exit 0."""
    proc = hook(*args)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == hook("env-file", same_as, "--help").stdout


def every_command(command: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """List the path of every command and group of the app."""
    paths = [path] if path else []
    for name, sub in getattr(command, "commands", {}).items():
        paths += every_command(sub, (*path, name))
    return paths


@pytest.mark.parametrize("path", every_command(cli._command(None)), ids="-".join)
def test_every_command_has_help_for_people(path: tuple[str, ...]) -> None:
    """``COMMAND -h`` and ``COMMAND --help`` print the help on stdout: no type names, nothing cut off."""
    short = hook(*path, "-h")
    long = hook(*path, "--help")
    assert (short.returncode, short.stderr) == (0, "")
    assert short.stdout == long.stdout
    out = short.stdout
    assert out.startswith(f"Usage: gpu-env-hook {' '.join(path)}")
    assert "-h, --help" in out
    assert not TYPE_NAMES.search(out), out
    assert "..." not in out.replace("VALUE...", "").replace("ID...", "").replace("[ARGS]...", "")


def test_help_word_gives_a_commands_help() -> None:
    """``help resolve`` is ``resolve --help``."""
    assert hook("help", "resolve").stdout == hook("resolve", "--help").stdout


@pytest.fixture
def bad_config(tmp_path: Path) -> Path:
    """A config.toml with a value of the wrong type."""
    path = tmp_path / "config.toml"
    path.write_text("disable-require = 1\n")
    return path


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["-config", "{c}", "env-file", "path", "dev0"], id="before"),
        pytest.param(["env-file", "path", "dev0", "--config", "{c}"], id="after"),
        pytest.param(["env-file", "path", "--config={c}", "dev0"], id="after-with-equals"),
        pytest.param(["env-file", "path", "dev0", "-config", "{c}"], id="after-go-style"),
    ],
)
def test_global_config_before_or_after_the_command(args: list[str], bad_config: Path) -> None:
    """``--config`` is the same flag before and after the command word (the bad file is read either way)."""
    proc = hook(*[arg.format(c=bad_config) for arg in args])
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == BAD_CONFIG_ERROR.format(c=bad_config)


def test_doctor_config_after_the_command(tmp_path: Path, bad_config: Path) -> None:
    """``doctor --config X`` reads X, as ``-config X doctor`` does."""
    after = hook("doctor", "--root", str(tmp_path), "--config", str(bad_config))
    before = hook("-config", str(bad_config), "doctor", "--root", str(tmp_path))
    assert after.stdout == before.stdout
    assert str(bad_config) in after.stdout


def test_commands_own_option_wins() -> None:
    """``resolve --debug`` stays resolve's own option (the hook's -debug), not the global one."""
    rest, found = cli._global_flags(["resolve", "--bundle", "b", "--debug", "--no-color"])
    assert (rest, found) == (["resolve", "--bundle", "b", "--debug"], {"no_color": True})


def test_stage_refuses_no_color() -> None:
    """The stages keep upstream's flag set: ``-no-color prestart`` is an undefined flag, exit 2."""
    proc = hook("-no-color", "prestart")
    assert proc.returncode == 2
    assert proc.stderr.startswith("flag provided but not defined: -no-color\n")


@pytest.mark.parametrize(
    ("args", "env", "coloured"),
    [
        pytest.param([], {}, True, id="terminal"),
        pytest.param([], {"NO_COLOR": "1"}, False, id="no-color-env"),
        pytest.param([], {"NO_COLOR": ""}, True, id="empty-no-color-env"),
        pytest.param(["--no-color"], {}, False, id="flag-after"),
        pytest.param(["-no-color"], {}, False, id="go-flag-after"),
    ],
)
def test_colour_on_a_terminal_unless_turned_off(
    args: list[str], env: dict[str, str], coloured: bool, tmp_path: Path
) -> None:
    """On a terminal the marks are coloured; NO_COLOR (not empty) and --no-color turn colour off."""
    code, out = on_terminal("doctor", "--root", str(tmp_path), *args, env=env)
    assert code == 1
    assert bool(ANSI.search(out)) == coloured


def test_no_color_before_the_command(tmp_path: Path) -> None:
    """``--no-color`` is accepted before the command word too."""
    _, out = on_terminal("--no-color", "doctor", "--root", str(tmp_path))
    assert "✗" in out
    assert not ANSI.search(out)


def test_doctor_columns_align_with_colour(tmp_path: Path) -> None:
    """With colour on, every row's check name and detail start in the same column on screen."""
    _, out = on_terminal("doctor", "--root", str(tmp_path))
    assert ANSI.search(out)
    rows = [ANSI.sub("", line) for line in out.splitlines() if line]
    assert len(rows) >= 3
    starts = {re.match(r"^\S+\s+", row).end() for row in rows}  # type: ignore[union-attr]
    assert len(starts) == 1, rows
    details = {re.match(r"^\S+\s+\S+(?: \S+)*?\s{2,}", row).end() for row in rows}  # type: ignore[union-attr]
    assert len(details) == 1, rows


def test_columns_ignore_colour_codes() -> None:
    """A coloured cell is padded by what shows, not by its escape codes."""
    rows: list[tuple[str, ...]] = [("\x1b[32m✓\x1b[0m", "a", "x"), ("-", "longer", "y")]
    assert ANSI.sub("", columns(rows)) == "✓  a       x\n-  longer  y\n"


def test_debug_prints_the_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An internal error in a command is one line; with -debug (before or after the command) a traceback too."""
    import hook.commands.doctor

    def broken(**_: object) -> list[object]:
        raise RuntimeError("boom")

    monkeypatch.setattr(hook.commands.doctor, "run_checks", broken)
    assert cli.run_cli(["doctor"], config=None) == 1
    assert capsys.readouterr().err == "gpu-env-hook: internal error: RuntimeError\n"
    assert main(["-debug", "doctor"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpu-env-hook: internal error: RuntimeError\nTraceback (most recent call last):\n")
    assert err.endswith("RuntimeError: boom\n")
    assert cli.run_cli(["doctor", "--debug"], config=None) == 1
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("path", "content", "engine"),
    [
        pytest.param("/etc/containerd/config.toml", "", "containerd", id="containerd-path"),
        pytest.param(
            "{tmp}/x.toml",
            'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n',
            "containerd",
            id="containerd-content",
        ),
        pytest.param("/etc/crio/crio.conf", "", "CRI-O", id="crio-path"),
        pytest.param("{tmp}/x.conf", "[crio.runtime]\n", "CRI-O", id="crio-content"),
        pytest.param("/etc/docker/daemon.json", "", "Docker", id="docker-path"),
        pytest.param("{tmp}/d.json", '{"runtimes": {}}', "Docker", id="docker-content"),
        pytest.param("{tmp}/c.conf", "[engine]\n", "podman", id="podman-content"),
        pytest.param("{tmp}/config.toml", "disable-require = false\n", None, id="ours"),
    ],
)
def test_engine_config_warning(path: str, content: str, engine: str | None, tmp_path: Path) -> None:
    """--config naming an engine's config file (by path or content) gets a warning naming the engine."""
    path = path.format(tmp=tmp_path)
    if content:
        Path(path).write_text(content)
    warning = cli.engine_config_warning(path)
    if engine is None:
        assert warning is None
    else:
        assert warning == (
            f"{path} looks like {engine}'s configuration, not gpu-env-hook's config.toml (by default "
            "/etc/nvidia-container-runtime/config.toml); the hook reads only its own keys from it"
        )


def test_engine_config_warning_on_stderr(tmp_path: Path) -> None:
    """The warning is printed once, on stderr, and the command still runs."""
    config = tmp_path / "config.toml"
    config.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n')
    proc = hook("config", "default", "--config", str(config))
    assert proc.returncode == 0
    assert proc.stderr.startswith(f"gpu-env-hook: warning: {config} looks like containerd's configuration")
    assert proc.stderr.count("\n") == 1


@pytest.mark.parametrize(("count", "text"), [(0, "0 variables"), (1, "1 variable"), (2, "2 variables")])
def test_plural(count: int, text: str) -> None:
    """Counts read right."""
    assert cli.plural(count, "variable") == text


def test_resolve_table_names_sources_truthfully() -> None:
    """The table says where a value came from: config.json, the env file (and what config.json had), config.toml."""
    document = {
        "bundle": "/b",
        "config": {"path": "/c.toml", "found": True},
        "outcome": "not-gpu",
        "error": None,
        "env_file": {
            "path": "/run/nvidia-env/a.env",
            "pinned": False,
            "variables": ["NVIDIA_VISIBLE_DEVICES"],
        },
        "state": None,
        "variables": [
            {"name": "NVIDIA_DISABLE_REQUIRE", "value": "true", "source": "config", "image_value": None},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "all", "source": "image", "image_value": "all"},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "0", "source": "env-file", "image_value": "fake"},
        ],
        "request": None,
        "cli": None,
    }
    out = cli.format_resolve_document(document)
    assert "/run/nvidia-env/a.env (not pinned, 1 variable)\n" in out
    assert out.endswith(
        "VARIABLE                    VALUE  FROM\n"
        "NVIDIA_DISABLE_REQUIRE      true   config.toml\n"
        "NVIDIA_DRIVER_CAPABILITIES  all    config.json\n"
        "NVIDIA_VISIBLE_DEVICES      0      env file (config.json had 'fake')\n"
    )

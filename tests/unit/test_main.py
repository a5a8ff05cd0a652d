"""The entry point: Go ``flag`` parsing before the command word, dispatch, exit codes and what is printed."""

from __future__ import annotations

import io
import re

import pytest

from hook import __main__ as entry
from hook import __version__
from hook.launcher import Done
from hook.stages.prestart import Options
from hook.util.errors import UsageError


@pytest.mark.parametrize(
    ("argv", "flags", "rest"),
    [
        pytest.param(["prestart"], {}, ["prestart"], id="command-only"),
        pytest.param(
            ["-config", "X", "prestart"], {"config": "X"}, ["prestart"], id="single-dash-separate-value"
        ),
        pytest.param(
            ["--config", "X", "prestart"], {"config": "X"}, ["prestart"], id="double-dash-separate-value"
        ),
        pytest.param(["-config=X", "prestart"], {"config": "X"}, ["prestart"], id="single-dash-equals"),
        pytest.param(["--config=X", "prestart"], {"config": "X"}, ["prestart"], id="double-dash-equals"),
        pytest.param(["-config=", "prestart"], {"config": ""}, ["prestart"], id="empty-config-value"),
        pytest.param(
            ["-config", "-debug", "p"], {"config": "-debug"}, ["p"], id="string-flag-takes-next-word"
        ),
        pytest.param(["-debug", "prestart"], {"debug": True}, ["prestart"], id="bool-flag"),
        pytest.param(["-debug=false", "prestart"], {"debug": False}, ["prestart"], id="bool-flag-false"),
        pytest.param(
            ["--debug=T", "prestart"], {"debug": True}, ["prestart"], id="bool-flag-go-true-spelling"
        ),
        pytest.param(["-debug=0", "prestart"], {"debug": False}, ["prestart"], id="bool-flag-zero"),
        pytest.param(["-version"], {"version": True}, [], id="version-no-command"),
        pytest.param(
            ["-debug", "-config", "c", "x"], {"debug": True, "config": "c"}, ["x"], id="several-flags"
        ),
        pytest.param(
            ["prestart", "-bogus", "x"], {}, ["prestart", "-bogus", "x"], id="flags-after-command-kept"
        ),
        pytest.param(["--", "-debug"], {}, ["-debug"], id="double-dash-ends-flags"),
        pytest.param(["-", "prestart"], {}, ["-", "prestart"], id="lone-dash-is-a-word"),
        pytest.param([], {}, [], id="nothing"),
    ],
)
def test_parse_flags(argv: list[str], flags: dict[str, object], rest: list[str]) -> None:
    """Flags before the first non-flag word are parsed as Go's flag package does; the rest is returned."""
    assert entry.parse_flags(argv) == (flags, rest)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["-bogus", "prestart"], "flag provided but not defined: -bogus", id="unknown-flag"),
        pytest.param(["--bogus=1"], "flag provided but not defined: -bogus", id="unknown-flag-with-value"),
        pytest.param(["-debug=yes"], 'invalid boolean value "yes" for -debug: parse error', id="bad-bool"),
        pytest.param(["-config"], "flag needs an argument: -config", id="string-flag-without-value"),
        pytest.param(["---config"], "bad flag syntax: ---config", id="three-dashes"),
        pytest.param(["-=x"], "bad flag syntax: -=x", id="empty-name"),
    ],
)
def test_parse_flags_refuses(argv: list[str], message: str) -> None:
    """A malformed flag is a usage error (exit 2) named as Go names it."""
    with pytest.raises(UsageError, match=rf"^{re.escape(message)}$") as info:
        entry.parse_flags(argv)
    assert info.value.exit_code == 2


@pytest.mark.parametrize("flag", [pytest.param("-h", id="h"), pytest.param("--help", id="help")])
def test_help_prints_usage_and_exits_zero(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``-h`` / ``-help`` print the usage on stderr and exit 0, even before a command."""
    assert entry.main([flag, "prestart"]) == 0
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", entry.USAGE)


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        pytest.param([], "no command given", id="no-command"),
        pytest.param(["-debug"], "no command given", id="flags-but-no-command"),
        pytest.param(["bogus"], "unknown command: bogus", id="unknown-command"),
        pytest.param(["Prestart"], "unknown command: Prestart", id="command-is-case-sensitive"),
        pytest.param(["-x", "prestart"], "flag provided but not defined: -x", id="unknown-flag"),
    ],
)
def test_usage_errors_exit_two(argv: list[str], reason: str, capsys: pytest.CaptureFixture[str]) -> None:
    """No command, an unknown command or a bad flag: one line saying why, then the usage, exit 2."""
    assert entry.main(argv) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", f"{reason}\n{entry.USAGE}")


def test_usage_lists_upstream_flags_and_stages() -> None:
    """The usage text names every upstream flag and stage in Go's layout."""
    for line in (
        "  -config string",
        "    \tconfiguration file",
        "  -debug",
        "  -version",
        "  prestart",
        "  poststop",
    ):
        assert f"\n{line}\n" in entry.USAGE


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["-version"], id="alone"),
        pytest.param(["-version", "prestart"], id="before-prestart"),
        pytest.param(["--version=true", "bogus"], id="before-unknown-command"),
    ],
)
def test_version_wins_over_any_command(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """``-version`` prints one line on stdout and exits 0 whatever the command is."""
    assert entry.main(argv) == 0
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == (f"gpu-env-hook version {__version__}\n", "")


class _Unreadable(io.RawIOBase):
    """A stdin that fails the test if it is read."""

    def readable(self) -> bool:
        """Claim to be readable, so only an actual read fails."""
        return True

    def readinto(self, buffer: object) -> int:  # noqa: ARG002 - the signature io requires
        """Fail: the no-op stages must not read stdin."""
        raise AssertionError("stdin was read")


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["poststart"], id="poststart"),
        pytest.param(["poststop"], id="poststop"),
        pytest.param(["-config", "/nonexistent/config.toml", "poststop"], id="missing-config-not-loaded"),
        pytest.param(["poststop", "-bogus", "extra"], id="args-after-command-ignored"),
    ],
)
def test_noop_stages(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """poststart and poststop exit 0 without reading stdin or the config (a stage: nothing to tear down)."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(_Unreadable())))
    status = entry.main(argv)
    assert (status, type(status)) == (0, Done)
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(
    "stage", [pytest.param("prestart", id="prestart"), pytest.param("createRuntime", id="cri")]
)
def test_prestart_and_create_runtime_dispatch(
    stage: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """prestart and createRuntime both run the prestart stage with the parsed options; later args are ignored."""
    seen: list[tuple[str | None, bool]] = []

    def fake_run_prestart(options: Options, stdin: object, environ: object, cwd: object) -> int:
        seen.append((options.config, options.debug))
        return 7

    monkeypatch.setattr("hook.stages.prestart.run_prestart", fake_run_prestart)
    status = entry.main(["--config=/c.toml", "-debug", stage, "-version", "junk"])
    assert (status, type(status)) == (7, Done)
    assert seen == [("/c.toml", True)]


def test_empty_config_flag_means_no_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    """``-config=`` is the same as no flag (upstream only uses a non-empty value)."""
    seen: list[str | None] = []

    def fake_run_prestart(options: Options, *_: object) -> int:
        seen.append(options.config)
        return 0

    monkeypatch.setattr("hook.stages.prestart.run_prestart", fake_run_prestart)
    assert entry.main(["-config=", "prestart"]) == 0
    assert seen == [None]


def test_hook_error_prints_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A HookError from a stage is its one line on stderr and exit status 1, as upstream's."""
    from hook.util.errors import SpecError

    def fail(*_: object) -> int:
        raise SpecError("Root is empty in OCI spec")

    monkeypatch.setattr("hook.stages.prestart.run_prestart", fail)
    status = entry.main(["prestart"])
    assert (status, type(status)) == (1, int)  # an error report ends as Python ends
    assert capsys.readouterr() == ("", "Root is empty in OCI spec\n")


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        pytest.param(["-version"], Done, id="version"),
        pytest.param(["help"], int, id="help-for-people"),
        pytest.param(["config", "default"], int, id="command-for-people"),
    ],
)
def test_only_stage_paths_end_at_once(
    argv: list[str], kind: type, capsys: pytest.CaptureFixture[str]
) -> None:
    """The launcher ends a process at once only for a ``Done``: the stage paths; the commands for people
    (typer, which may register exit handlers) return a plain int and end as Python ends."""
    status = entry.main(argv)
    assert (status, type(status)) == (0, kind)
    assert capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "traceback"),
    [pytest.param([], False, id="without-debug"), pytest.param(["-debug"], True, id="with-debug")],
)
def test_unexpected_exception_is_one_line(
    flags: list[str], traceback: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unexpected exception prints one line and exits 1; only ``-debug`` adds the traceback."""

    def boom(*_: object) -> int:
        raise RuntimeError("secret content")

    monkeypatch.setattr("hook.stages.prestart.run_prestart", boom)
    assert entry.main([*flags, "prestart"]) == 1
    err = capsys.readouterr().err
    first, _, more = err.partition("\n")
    assert first == "gpu-env-hook: internal error: RuntimeError"
    assert ("Traceback (most recent call last):" in more) is traceback
    assert ("secret content" in err) is traceback


# --- refusals in a stage: exit status per class, and the refusal log ---------------------------------------


def _raise(err: Exception) -> object:
    """A stage function that fails with ``err``."""

    def fail(*_: object) -> int:
        raise err

    return fail


@pytest.mark.parametrize(
    ("error", "status"),
    [
        pytest.param("ConfigError", 10, id="config-toml-10"),
        pytest.param("StateError", 11, id="state-11"),
        pytest.param("SpecError", 12, id="config-json-12"),
        pytest.param("RequestError", 13, id="gpu-request-13"),
        pytest.param("EnvFileError", 14, id="env-file-14"),
        pytest.param("EnvFileMissingError", 14, id="env-file-missing-14"),
        pytest.param("CdiError", 15, id="cdi-15"),
        pytest.param("ExecError", 16, id="nvidia-container-cli-16"),
        pytest.param("SystemCallError", 17, id="system-call-17"),
        pytest.param("HookError", 1, id="other-refusal-1"),
    ],
)
@pytest.mark.parametrize("stage", ["prestart", "precreate"])
def test_a_stage_exits_with_its_refusal_classs_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: str, status: int, stage: str
) -> None:
    """Started as the hooks JSON starts it (-refusal-log): podman shows a failing hook only as `exit status
    N`, so each refusal class has its own N."""
    from hook.util import errors

    module = (
        "hook.stages.prestart.run_prestart" if stage == "prestart" else "hook.stages.precreate.run_precreate"
    )
    monkeypatch.setattr(module, _raise(getattr(errors, error)("refused here")))
    assert entry.main(["-refusal-log", "", stage]) == status
    assert capsys.readouterr().err == "refused here\n"


def test_an_internal_error_in_a_stage_is_status_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What is not a refusal keeps status 1 (and its one line)."""
    monkeypatch.setattr("hook.stages.precreate.run_precreate", _raise(KeyError("x")))
    assert entry.main(["-refusal-log", "", "precreate"]) == 1
    assert capsys.readouterr().err == "gpu-env-hook: internal error: KeyError\n"


def test_refusal_log_gets_one_line_per_refusal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    """-refusal-log FILE: each refused start appends one line (UTC time, stage, status, the reason) to a
    root-only file created 0600; a success writes nothing."""
    from pathlib import Path

    from hook.util.errors import EnvFileError

    log = Path(str(tmp_path)) / "refusals.log"
    monkeypatch.setattr("hook.stages.precreate.run_precreate", _raise(EnvFileError("env file '/x': too big")))
    assert entry.main(["-refusal-log", str(log), "precreate"]) == 14
    assert entry.main(["-refusal-log", str(log), "precreate"]) == 14
    capsys.readouterr()
    lines = log.read_text().splitlines()
    assert len(lines) == 2
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ precreate exit status 14: env file '/x': too big", lines[0]
    )
    assert log.stat().st_mode & 0o777 == 0o600
    monkeypatch.setattr("hook.stages.precreate.run_precreate", lambda *_: 0)
    assert entry.main(["-refusal-log", str(log), "precreate"]) == 0
    assert len(log.read_text().splitlines()) == 2


def test_refusal_log_never_blocks_and_stays_bounded(tmp_path: object) -> None:
    """A FIFO at the log path is not opened (no reader: the write would block), a log others can read or
    write is left alone, and a full log is moved to FILE.1 before the next line."""
    import os
    from pathlib import Path

    base = Path(str(tmp_path))
    fifo = base / "fifo.log"
    os.mkfifo(fifo)
    entry.write_refusal_log(str(fifo), "precreate exit status 14: x")  # returns at once
    loose = base / "loose.log"
    loose.write_text("")
    loose.chmod(0o644)
    entry.write_refusal_log(str(loose), "precreate exit status 14: x")
    assert loose.read_text() == ""
    full = base / "full.log"
    full.write_bytes(b"x" * (entry.REFUSAL_LOG_LIMIT - 10) + b"\n")
    full.chmod(0o600)
    entry.write_refusal_log(str(full), "precreate exit status 14: the next one")
    assert (base / "full.log.1").stat().st_size == entry.REFUSAL_LOG_LIMIT - 9
    assert full.read_text().endswith("precreate exit status 14: the next one\n")
    assert full.stat().st_size < 100


def test_commands_for_people_keep_status_1(capsys: pytest.CaptureFixture[str]) -> None:
    """Outside the stages a refusal keeps status 1 (the per-class statuses are for the engines)."""
    from hook.util.errors import EnvFileError

    assert entry.report_error(EnvFileError("no"), debug=False) == 1
    assert capsys.readouterr().err == "no\n"


def test_troubleshooting_lists_every_stage_status() -> None:
    """docs/troubleshooting.md's table of exit statuses names exactly the statuses a stage can exit with."""
    from conftest import REPO

    text = (REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    documented = {int(status) for status in re.findall(r"^\| (\d+) \| ", text, re.MULTILINE)}
    assert documented == {1} | {status for _, status in entry.STAGE_STATUSES}

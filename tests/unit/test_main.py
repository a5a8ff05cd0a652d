"""The entry point: Go ``flag`` parsing before the command word, dispatch, exit codes and what is printed."""

from __future__ import annotations

import io
import re

import pytest

from hook import __main__ as entry
from hook import __version__
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
    """poststart and poststop exit 0 without reading stdin or the config."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(_Unreadable())))
    assert entry.main(argv) == 0
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
    assert entry.main(["--config=/c.toml", "-debug", stage, "-version", "junk"]) == 7
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
    """A HookError from a stage is its one line on stderr and its exit code."""
    from hook.util.errors import SpecError

    def fail(*_: object) -> int:
        raise SpecError("Root is empty in OCI spec")

    monkeypatch.setattr("hook.stages.prestart.run_prestart", fail)
    assert entry.main(["prestart"]) == 1
    assert capsys.readouterr() == ("", "Root is empty in OCI spec\n")


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

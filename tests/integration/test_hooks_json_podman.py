"""``validate hooks-json`` against the real podman 4.3.1: one hooks file per row, podman's verdict beside ours.

Each row's file is the only one in a fresh ``--hooks-dir``; ``podman run`` of a busybox ``true`` then either
starts (podman accepts the file) or fails (it refuses it, as it would refuse every container on the node).
Our report must have errors exactly when podman fails. The hook executable is a script that records that it
ran and copies stdin to stdout (so it also works as a precreate hook); rows that say whether the hook runs
check that record, which is how the "never runs" and "skipped" warnings are proven.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import NamedTuple

import pytest
from podman import import_busybox_image, podman_env

from hook.commands.hooksjson import check_hooks_file

pytestmark = pytest.mark.integration

IMAGE = "localhost/gpu-env-hook-busybox"
RUN_OPTIONS = ("--net=none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096")


class Row(NamedTuple):
    """A hooks file (``@EXE@`` stands for the recording executable's absolute path) and what we expect."""

    text: str
    verdict: (
        str  # "error": podman refuses; "warning": accepts, with a warning; "valid": accepts, nothing to say
    )
    runs: bool | None = (
        None  # does the hook run for `podman run --annotation k=v IMAGE true`? None: not checked
    )
    name: str = "hook.json"


def v1(when: str = '{"always": true}', stages: str = '["prestart"]', hook: str = '{"path": "@EXE@"}') -> str:
    """A 1.0.0 file from its parts (each a JSON text)."""
    return f'{{"version": "1.0.0", "hook": {hook}, "when": {when}, "stages": {stages}}}'


def cmd(pattern: str) -> str:
    """A 1.0.0 file whose only condition is one command pattern (given as JSON string content)."""
    return v1(when=f'{{"commands": ["{pattern}"]}}')


def annotation(key: str, value: str) -> str:
    """A 1.0.0 file whose only condition is one annotation (key and value given as JSON string content)."""
    return v1(when=f'{{"annotations": {{"{key}": "{value}"}}}}')


ROWS = [
    # Regular expressions Go's RE2 refuses: podman refuses the file, and with it every container.
    pytest.param(Row(cmd("["), "error"), id="command-unclosed-bracket"),
    pytest.param(Row(cmd("(a"), "error"), id="command-unclosed-group"),
    pytest.param(Row(cmd("(?=t)"), "error"), id="command-lookahead"),
    pytest.param(Row(cmd("(?!x)"), "error"), id="command-negative-lookahead"),
    pytest.param(Row(cmd("(?<=t)rue"), "error"), id="command-lookbehind"),
    pytest.param(Row(cmd("(t)\\\\1"), "error"), id="command-backreference"),
    pytest.param(Row(cmd("t++"), "error"), id="command-possessive"),
    pytest.param(Row(cmd("(?>t)"), "error"), id="command-atomic-group"),
    pytest.param(Row(cmd("true\\\\Z"), "error"), id="command-backslash-capital-z"),
    pytest.param(Row(cmd("t{1001}"), "error"), id="command-repeat-over-1000"),
    pytest.param(Row(cmd("(t{100}){11}"), "error"), id="command-nested-repeat-over-1000"),
    pytest.param(Row(cmd("(?<n>t)"), "error"), id="command-angle-named-group-go-1-19"),
    pytest.param(Row(cmd("\\\\C"), "error"), id="command-any-byte-escape"),
    pytest.param(Row(cmd("(?P<n>t)|(?P<n>x)"), "valid", runs=True), id="command-repeated-group-name"),
    pytest.param(Row(cmd("(" * 1000 + "t" + ")" * 1000), "error"), id="command-groups-1000-deep"),
    pytest.param(
        Row(cmd("(?:" * 1200 + "t" + ")" * 1200), "valid", runs=True), id="command-plain-groups-deep"
    ),
    pytest.param(Row(annotation("(?=k)", ".*"), "error"), id="annotation-key-lookahead"),
    pytest.param(Row(annotation("[", "v"), "error"), id="annotation-key-unclosed-bracket"),
    pytest.param(Row(annotation("k", "(v)\\\\1"), "error"), id="annotation-value-backreference"),
    pytest.param(Row(annotation("k", "v*+"), "error"), id="annotation-value-possessive"),
    # Regular expressions Go accepts (some that look odd).
    pytest.param(Row(cmd("^true$"), "valid", runs=True), id="command-matches"),
    pytest.param(Row(cmd("(?i)TRUE"), "valid", runs=True), id="command-case-insensitive-flag"),
    pytest.param(Row(cmd("\\\\p{Greek}|^t"), "valid", runs=True), id="command-unicode-class"),
    pytest.param(Row(cmd("\\\\Q(\\\\E|true"), "valid", runs=True), id="command-quoted-literal"),
    pytest.param(Row(cmd("(?P<n>t)rue"), "valid", runs=True), id="command-named-group"),
    pytest.param(Row(cmd("(" * 999 + "t" + ")" * 999), "valid", runs=True), id="command-groups-999-deep"),
    pytest.param(Row(cmd("t{1000}|true"), "valid", runs=True), id="command-repeat-1000"),
    pytest.param(Row(cmd("a{,3}|true"), "valid", runs=True), id="command-brace-literal"),
    pytest.param(Row(annotation("^k$", "^v$"), "valid", runs=True), id="annotation-matches"),
    # The document's structure and types.
    pytest.param(Row('{"version": "1.0.0", "hook": {"path": "@EXE@"},}', "error"), id="invalid-json"),
    pytest.param(Row("\ufeff" + v1(), "error"), id="byte-order-mark"),
    pytest.param(Row("[]", "error"), id="top-level-array"),
    pytest.param(Row(v1().replace('"1.0.0"', '"2.0.0"'), "error"), id="unknown-version"),
    pytest.param(Row(v1().replace('"1.0.0"', "1"), "error"), id="version-number"),
    pytest.param(Row(v1(stages="null"), "error"), id="stages-null"),
    pytest.param(
        Row('{"version": "1.0.0", "hook": {"path": "@EXE@"}, "when": {"always": true}}', "error"),
        id="stages-missing",
    ),
    pytest.param(Row(v1(stages='["prestop"]'), "error"), id="unknown-stage"),
    pytest.param(Row(v1(hook='{"args": ["x"]}'), "error"), id="path-missing"),
    pytest.param(Row(v1(hook='{"path": ""}'), "error"), id="path-empty"),
    pytest.param(Row(v1(hook='{"path": "@EXE@", "timeout": 1.5}'), "error"), id="timeout-fraction"),
    pytest.param(Row(v1(hook='{"path": "@EXE@", "timeout": "5"}'), "error"), id="timeout-string"),
    pytest.param(Row(v1(hook='{"path": "@EXE@", "timeout": NaN}'), "error"), id="timeout-nan"),
    pytest.param(Row(v1(hook='{"path": "@EXE@", "args": "x"}'), "error"), id="args-string"),
    pytest.param(Row(v1(when="[]"), "error"), id="when-array"),
    pytest.param(Row(annotation("k", "v").replace('"v"', "1"), "error"), id="annotation-value-number"),
    pytest.param(Row(v1(when='{"always": "yes"}'), "error"), id="always-string"),
    pytest.param(
        Row('{"hook": {"path": "@EXE@"}, "when": {"always": true}, "stages": ["prestart"]}', "error"),
        id="no-version-is-read-as-legacy",
    ),
    pytest.param(Row("null", "error"), id="null-document"),
    # What runc then refuses when it runs the hook.
    pytest.param(Row(v1(hook='{"path": "@EXE@", "timeout": 0}'), "error"), id="timeout-zero"),
    pytest.param(Row(v1(hook='{"path": "@NOEXEC@"}'), "error"), id="not-executable"),
    pytest.param(Row(v1(hook='{"path": "@EXE@/x"}'), "error"), id="path-below-a-file"),
    # Accepted, and the hook runs.
    pytest.param(Row(v1(), "valid", runs=True), id="minimal-always"),
    pytest.param(
        Row(
            v1(hook='{"path": "@EXE@", "args": ["hook", "a"], "env": ["A=1"], "timeout": 5}'),
            "valid",
            runs=True,
        ),
        id="args-env-timeout",
    ),
    pytest.param(Row(v1(stages='["precreate"]'), "valid", runs=True), id="precreate-stage"),
    pytest.param(Row(v1(stages='["createRuntime", "prestart"]'), "valid", runs=True), id="two-stages"),
    pytest.param(
        Row(
            '{"version": "1.0.0", "hook": {"path": "@EXE@"}, "hook": {"args": ["x"]}, '
            '"when": {"always": true}, "stages": ["prestart"]}',
            "warning",
            runs=True,
        ),
        id="repeated-hook-objects-merge",
    ),
    pytest.param(
        Row(
            '{"VERSION": "1.0.0", "Hook": {"PATH": "@EXE@"}, "when": {"Always": true}, '
            '"stages": ["prestart"]}',
            "warning",
            runs=True,
        ),
        id="keys-match-case-insensitively",
    ),
    pytest.param(
        Row(
            '{"version": "1.0.0", "hoo\\u212a": {"path": "@EXE@"}, "when": {"always": true}, '
            '"stages": ["prestart"]}',
            "warning",
            runs=True,
        ),
        id="kelvin-sign-folds-to-k",
    ),
    pytest.param(
        Row(v1(when='{"always": true, "command": ["x"]}'), "warning", runs=True),
        id="unknown-when-key-ignored",
    ),
    pytest.param(Row(cmd("\\ud800|true"), "valid", runs=True), id="lone-surrogate-escape"),
    # The legacy 0.1.0 format: accepted, and said to be legacy.
    pytest.param(
        Row('{"hook": "@EXE@", "stage": ["prestart"], "cmds": ["true"]}', "warning", runs=True),
        id="legacy-without-version",
    ),
    pytest.param(
        Row(
            '{"version": "0.1.0", "hook": "@EXE@", "stages": ["prestart"], "cmd": ["^t"]}',
            "warning",
            runs=True,
        ),
        id="legacy-with-version",
    ),
    pytest.param(
        Row('{"hook": "@EXE@", "stage": ["prestart"], "annotations": ["(", ")"]}', "warning", runs=True),
        id="legacy-annotations-joined-before-compiling",
    ),
    pytest.param(
        Row('{"hook": "@EXE@", "stage": ["prestart"], "stages": ["prestart"], "cmds": ["t"]}', "error"),
        id="legacy-stage-and-stages",
    ),
    pytest.param(
        Row('{"hook": "@EXE@", "stage": ["prestart"], "cmds": ["t"], "cmd": ["t"]}', "error"),
        id="legacy-cmd-and-cmds",
    ),
    pytest.param(Row('{"stage": ["prestart"], "cmds": ["true"]}', "error"), id="legacy-hook-missing"),
    pytest.param(
        Row('{"hook": "@EXE@", "stage": ["prestart"], "cmds": ["(?=t)"]}', "error"), id="legacy-lookahead"
    ),
    pytest.param(Row('{"hook": "@EXE@", "cmds": ["true"]}', "error"), id="legacy-stages-missing"),
    # Accepted, but the hook never runs: warnings.
    pytest.param(Row(v1(when="{}"), "warning", runs=False), id="when-empty"),
    pytest.param(Row(v1(when="null"), "warning", runs=False), id="when-null"),
    pytest.param(Row(v1(when='{"commands": []}'), "warning", runs=False), id="when-commands-empty"),
    pytest.param(Row(v1(when='{"always": false}'), "warning", runs=False), id="always-false"),
    pytest.param(Row(v1(when='{"hasBindMounts": false}'), "warning", runs=False), id="has-bind-mounts-false"),
    pytest.param(Row(v1(stages="[]"), "warning", runs=False), id="stages-empty"),
    pytest.param(
        Row('{"hook": "@EXE@", "stage": ["prestart"]}', "warning", runs=False), id="legacy-without-condition"
    ),
    pytest.param(
        Row(v1(hook='{"path": "/nonexistent/gpu-env-hook"}'), "warning", runs=False), id="executable-missing"
    ),
    pytest.param(
        Row(cmd("(?=t)").replace("@EXE@", "/nonexistent/hook"), "warning", runs=False),
        id="executable-missing-hides-bad-pattern",
    ),
    pytest.param(
        Row(v1(hook='{"path": "nonexistent-hook"}'), "warning", runs=False), id="relative-path-missing"
    ),
    pytest.param(Row(v1(hook='{"path": "recording-hook"}'), "error"), id="relative-path-present"),
    pytest.param(Row(cmd("(?=t)"), "warning", runs=False, name="hook.conf"), id="name-without-json-ignored"),
]


@pytest.fixture(scope="module")
def image() -> str:
    """The busybox image, imported once."""
    import_busybox_image(IMAGE)
    return IMAGE


def write_recorder(directory: Path, record: Path) -> Path:
    """Write the hook executable: appends a line to ``record``, copies stdin to stdout."""
    exe = directory / "recording-hook"
    exe.write_text(f"#!/bin/sh\necho ran >> '{record}'\nexec cat\n")
    exe.chmod(0o755)
    return exe


@pytest.mark.parametrize("row", ROWS)
def test_podman_agrees(row: Row, image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Our verdict on a hooks file is podman's: errors exactly when `podman run` fails with it installed."""
    record = tmp_path / "record"
    exe = write_recorder(tmp_path, record)
    noexec = tmp_path / "not-executable"
    noexec.write_text("#!/bin/sh\n")
    noexec.chmod(0o644)
    hooks_dir = tmp_path / "hooks.d"
    hooks_dir.mkdir()
    hook_file = hooks_dir / row.name
    hook_file.write_text(row.text.replace("@EXE@", str(exe)).replace("@NOEXEC@", str(noexec)))
    monkeypatch.chdir(tmp_path)  # podman and we both stat a relative path from here

    report = check_hooks_file(str(hook_file))
    name = f"gpu-env-hook-hooksjson-{uuid.uuid4().hex[:12]}"
    proc = subprocess.run(
        [
            "podman",
            "--hooks-dir",
            str(hooks_dir),
            "run",
            "--rm",
            "--name",
            name,
            *RUN_OPTIONS,
            "--annotation",
            "k=v",
            image,
            "true",
        ],
        env=podman_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    subprocess.run(
        ["podman", "rm", "--force", "--ignore", name],
        env=podman_env(),
        capture_output=True,
        timeout=60,
        check=False,
    )

    ours = "error" if report.errors else ("warning" if report.warnings else "valid")
    assert (proc.returncode != 0) == (ours == "error"), (
        f"podman exit {proc.returncode} ({proc.stderr.strip()!r}); ours: {report.findings}"
    )
    assert ours == row.verdict, report.findings
    if row.runs is not None:
        assert record.exists() == row.runs, report.findings

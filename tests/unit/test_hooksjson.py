"""Unit tests for hook.commands.hooksjson: the exact findings (messages, paths, severities) for podman's reading.

Which files podman accepts is proven against the real podman in
tests/integration/test_hooks_json_podman.py; these pin what we say about them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hook.commands.hooksjson import Finding, check_hooks_file, check_hooks_json, regexp_error

EXE = "/bin/sh"


def v1(**parts: object) -> bytes:
    """A 1.0.0 document with defaults for every part."""
    document: dict[str, object] = {
        "version": "1.0.0",
        "hook": {"path": EXE},
        "when": {"always": True},
        "stages": ["prestart"],
    }
    document.update(parts)
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(
            v1(when={"commands": ["a++"]}),
            [
                Finding(
                    "$.when.commands[0]",
                    'invalid command "a++": bad repetition operator: ++ (Go RE2 syntax)',
                    "error",
                )
            ],
            id="possessive-command",
        ),
        pytest.param(
            v1(when={"annotations": {"(?<=a)": "b", "k": "(x)\\1"}}),
            [
                Finding(
                    '$.when.annotations["(?<=a)"]',
                    'invalid annotation key "(?<=a)": invalid perl operator: (?<= (Go RE2 syntax)',
                    "error",
                ),
                Finding(
                    "$.when.annotations.k",
                    'invalid annotation value "(x)\\\\1": invalid escape sequence: \\1 (Go RE2 syntax)',
                    "error",
                ),
            ],
            id="annotation-key-and-value",
        ),
        pytest.param(
            v1(stages=None),
            [Finding("$.stages", "missing required property: stages", "error")],
            id="stages-null",
        ),
        pytest.param(
            v1(hook={"path": EXE, "timeout": "5"}),
            [Finding("$.hook.timeout", "must be an integer, got a string", "error")],
            id="timeout-type",
        ),
        pytest.param(
            v1(hook={"path": EXE, "timeout": 1.5, "args": {"a": "b"}}),
            [
                Finding("$.hook.timeout", "must be an integer, got a number", "error"),
                Finding("$.hook.args", "must be an array of strings, got an object", "error"),
            ],
            id="fraction-and-object-types",
        ),
        pytest.param(
            v1(hook={"path": EXE, "timeout": 0}),
            [
                Finding(
                    "$.hook.timeout",
                    "must be between 1 and 9223372036 seconds: runc times the hook out at once and every container it applies to fails to start",
                    "error",
                )
            ],
            id="timeout-zero",
        ),
        pytest.param(
            v1(version="2"),
            [Finding("$.version", 'unrecognized hook version "2": must be "1.0.0"', "error")],
            id="unknown-version",
        ),
        pytest.param(
            b"[1]",
            [Finding("$", "must be an object, got an array", "error")],
            id="array",
        ),
        pytest.param(
            b'{"version": "1.0.0", "x": NaN}',
            [Finding("$", "invalid JSON: NaN is not JSON", "error")],
            id="nan",
        ),
        pytest.param(
            v1(when={}),
            [
                Finding(
                    "$.when",
                    "no condition (always, annotations, commands, hasBindMounts): the hook never runs",
                    "warning",
                )
            ],
            id="empty-when",
        ),
        pytest.param(
            v1(when={"hasBindMounts": False}),
            [
                Finding(
                    "$.when.hasBindMounts",
                    "false: the hook never runs (false does not mean 'without bind mounts'; omit it instead)",
                    "warning",
                )
            ],
            id="has-bind-mounts-false",
        ),
        pytest.param(
            v1(stages=[]),
            [Finding("$.stages", "no stage: the hook never runs", "warning")],
            id="no-stage",
        ),
        pytest.param(
            v1(hook={"path": "/nonexistent/x"}, stages=["nope"]),
            [
                Finding(
                    "$.hook.path",
                    'does not exist: "/nonexistent/x" (podman skips this hook silently)',
                    "warning",
                ),
                Finding(
                    "$.stages[0]",
                    'once /nonexistent/x exists podman refuses this file: unknown stage "nope": must be one of createContainer, createRuntime, poststart, poststop, precreate, prestart, startContainer',
                    "warning",
                ),
            ],
            id="missing-executable-defers-errors",
        ),
        pytest.param(
            v1(hook={"path": "/etc"}),
            [
                Finding(
                    "$.hook.path",
                    '"/etc" is not an executable file: every container it applies to fails to start',
                    "error",
                )
            ],
            id="directory",
        ),
        pytest.param(
            b'{"version": "1.0.0", "Hook": {"path": "/bin/sh"}, "when": {"always": true, "cmds": []}, "stages": ["prestart"]}',
            [
                Finding(
                    "$.Hook", "podman reads this as 'hook' (JSON keys match case-insensitively)", "warning"
                ),
                Finding("$.when.cmds", "unknown property: podman ignores it", "warning"),
            ],
            id="spelling",
        ),
        pytest.param(
            b'{"hook": "/bin/sh", "stage": ["prestart"], "annotations": ["(", ")"]}',
            [
                Finding(
                    "$",
                    "legacy hook format 0.1.0: podman and CRI-O still read it; version 1.0.0 replaces it",
                    "warning",
                )
            ],
            id="legacy-annotations-joined",
        ),
        pytest.param(
            b'{"hook": "/bin/sh", "stage": ["prestart"], "stages": ["prestart"]}',
            [
                Finding(
                    "$",
                    "legacy hook format 0.1.0: podman and CRI-O still read it; version 1.0.0 replaces it",
                    "warning",
                ),
                Finding("$", "cannot set both 'stage' and 'stages'", "error"),
            ],
            id="legacy-stage-and-stages",
        ),
    ],
)
def test_findings(data: bytes, expected: list[Finding]) -> None:
    """Each kind of problem is reported at its JSON path with its full message and severity."""
    assert check_hooks_json(data).findings == expected


def test_legacy_version_is_reported() -> None:
    """A file without ``version`` is read as the legacy format, and the report says so."""
    assert check_hooks_json(b'{"hook": "/bin/sh", "stage": ["prestart"], "cmds": ["x"]}').version == "0.1.0"
    assert check_hooks_json(v1()).version == "1.0.0"


def test_repeated_objects_merge_as_in_go() -> None:
    """A second ``hook`` object adds to the first (Go decodes into the same struct), so path is still set."""
    data = b'{"version": "1.0.0", "hook": {"path": "/bin/sh"}, "hook": {"args": ["sh"]}, "when": {"always": true}, "stages": ["prestart"]}'
    assert check_hooks_json(data).findings == [
        Finding("$.hook", "repeats 'hook': the later value wins", "warning")
    ]


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        pytest.param("(?=a)", "invalid perl operator: (?=", id="lookahead"),
        pytest.param("(?<n>a)", "invalid or unsupported Perl syntax: (?<", id="angle-named-group"),
        pytest.param("\\C", "invalid escape sequence: \\C", id="any-byte"),
        pytest.param("\\\\C", None, id="escaped-backslash"),
        pytest.param("\\Q(?<n>\\E", None, id="quoted"),
        pytest.param("[(?<n>]", None, id="in-class"),
        pytest.param("a{1001}", "invalid repetition size: {1001}", id="repeat"),
        pytest.param("(" * 1000 + ")" * 1000, "expression nests too deeply", id="deep"),
        pytest.param("(?:" * 1000 + ")" * 1000, None, id="deep-non-capturing"),
        pytest.param("(?P<n>a)|(?P<n>b)", None, id="repeated-name"),
    ],
)
def test_regexp_error(pattern: str, reason: str | None) -> None:
    """RE2's verdict, plus what Go alone refuses."""
    assert regexp_error(pattern) == reason


def test_file_not_named_json_is_ignored_by_podman(tmp_path: Path) -> None:
    """Podman skips a file whose name does not end in .json; its problems are said for when it is renamed."""
    path = tmp_path / "hook.conf"
    path.write_bytes(v1(stages=["x"]))
    findings = check_hooks_file(str(path)).findings
    assert [finding.severity for finding in findings] == ["warning", "warning"]
    assert findings[0].message == "podman reads only files whose name ends in .json: it ignores this one"
    assert findings[1].message.startswith('once renamed to .json: unknown stage "x"')


def test_unreadable_file(tmp_path: Path) -> None:
    """A file that cannot be read is one error naming why."""
    report = check_hooks_file(str(tmp_path / "missing.json"))
    assert report.findings == [Finding("$", "cannot read: No such file or directory", "error")]


def test_every_problem_is_listed_not_only_podmans_first() -> None:
    """A missing hook.path, a non-boolean when.always and an unknown stage: podman refuses the file at the
    first; all three are listed (the verdict, an error, is podman's)."""
    data = json.dumps(
        {
            "version": "1.0.0",
            "hook": {"args": ["x"]},
            "when": {"always": "yes"},
            "stages": ["prestart", "befor"],
        }
    ).encode()
    report = check_hooks_json(data)
    assert [(finding.path, finding.message) for finding in report.errors] == [
        ("$.when.always", "must be a boolean, got a string"),
        ("$.hook.path", "missing required property: hook.path"),
        (
            "$.stages[1]",
            (
                'unknown stage "befor": must be one of createContainer, createRuntime, poststart, poststop, '
                "precreate, prestart, startContainer"
            ),
        ),
    ]

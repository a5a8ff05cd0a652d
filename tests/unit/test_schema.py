"""Unit tests for hook.install.schema: the shipped schemas accept good documents and name every problem by path."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from hook.install.schema import (
    Problem,
    SchemaError,
    build_config_toml_schema,
    load_schema,
    validate_document,
    validate_file,
)
from hook.pipeline.config import default_settings

GOOD: dict[str, dict[str, Any]] = {
    "config": {
        "ociVersion": "1.0.2",
        "process": {
            "cwd": "/",
            "args": ["sh"],
            "env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"],
            "capabilities": {"bounding": ["CAP_CHOWN"], "effective": ["CAP_CHOWN"]},
        },
        "root": {"path": "rootfs", "readonly": True},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid"]}],
        "hooks": {
            "prestart": [
                {"path": "/usr/bin/hook", "args": ["hook", "prestart"], "env": ["A=1"], "timeout": 5}
            ]
        },
        "annotations": {"io.kubernetes.cri.sandbox-uid": "abc"},
        "linux": {"namespaces": []},
    },
    "state": {
        "ociVersion": "1.0.2",
        "id": "c1",
        "status": "created",
        "pid": 42,
        "bundle": "/run/bundle",
        "annotations": {"a": "b"},
    },
    "hooks-json": {
        "version": "1.0.0",
        "hook": {
            "path": "/usr/libexec/hook",
            "args": ["hook", "prestart"],
            "env": ["PATH=/bin"],
            "timeout": 10,
        },
        "when": {"always": True, "annotations": {"^a$": "b"}, "commands": [".*"], "hasBindMounts": False},
        "stages": ["prestart", "precreate"],
    },
    "config-toml": {**default_settings(), "nvidia-container-cli": {"environment": ["A=1"]}},
}

REQUIRED = [
    ("config", (), "ociVersion"),
    ("config", ("root",), "path"),
    ("config", ("process",), "cwd"),
    ("config", ("mounts", 0), "destination"),
    ("config", ("hooks", "prestart", 0), "path"),
    ("state", (), "ociVersion"),
    ("state", (), "id"),
    ("state", (), "status"),
    ("state", (), "bundle"),
    ("state", (), "pid"),
    ("hooks-json", (), "version"),
    ("hooks-json", (), "hook"),
    ("hooks-json", (), "when"),
    ("hooks-json", (), "stages"),
    ("hooks-json", ("hook",), "path"),
]

# (kind, path to the property, a value of the wrong type, expected message)
WRONG_TYPE = [
    ("config", ("ociVersion",), 1, "must be a string, got a number"),
    ("config", ("process",), [], "must be an object, got an array"),
    ("config", ("process", "env"), "A=1", "must be an array, got a string"),
    ("config", ("process", "env", 0), 1, "must be a string, got a number"),
    ("config", ("process", "args"), {}, "must be an array, got an object"),
    ("config", ("process", "capabilities", "bounding"), "CAP_CHOWN", "must be an array, got a string"),
    ("config", ("root", "path"), None, "must be a string, got null"),
    ("config", ("root", "readonly"), "yes", "must be a boolean, got a string"),
    ("config", ("mounts",), {}, "must be an array, got an object"),
    ("config", ("mounts", 0, "options"), "ro", "must be an array, got a string"),
    ("config", ("hooks", "prestart"), {}, "must be an array, got an object"),
    ("config", ("hooks", "prestart", 0, "timeout"), "5", "must be an integer, got a string"),
    ("config", ("annotations", "io.kubernetes.cri.sandbox-uid"), 1, "must be a string, got a number"),
    ("state", ("pid",), "42", "must be an integer, got a string"),
    ("state", ("bundle",), 1, "must be a string, got a number"),
    ("state", ("status",), "paused", 'must be one of "creating", "created", "running", "stopped"'),
    ("state", ("annotations",), [], "must be an object, got an array"),
    ("hooks-json", ("version",), "0.1.0", 'must be "1.0.0"'),
    ("hooks-json", ("hook", "path"), "relative", "must match ^/"),
    ("hooks-json", ("hook", "args"), "x", "must be an array, got a string"),
    ("hooks-json", ("hook", "env"), {}, "must be an array, got an object"),
    ("hooks-json", ("hook", "timeout"), 0, "must be at least 1"),
    ("hooks-json", ("when", "always"), "true", "must be a boolean, got a string"),
    ("hooks-json", ("when", "annotations"), [], "must be an object, got an array"),
    ("hooks-json", ("when", "commands"), ".*", "must be an array, got a string"),
    ("hooks-json", ("when", "hasBindMounts"), 1, "must be a boolean, got a number"),
    ("hooks-json", ("stages",), [], "must have at least 1 item"),
    (
        "hooks-json",
        ("stages", 0),
        "prestop",
        (
            'must be one of "prestart", "createRuntime", "createContainer", '
            '"startContainer", "poststart", "poststop", "precreate"'
        ),
    ),
    ("config-toml", ("disable-require",), "yes", "must be a boolean, got a string"),
    ("config-toml", ("nvidia-container-cli",), "x", "must be an object, got a string"),
    ("config-toml", ("nvidia-container-cli", "environment"), "A=1", "must be an array, got a string"),
    ("config-toml", ("nvidia-container-cli", "environment", 0), 1, "must be a string, got a number"),
    ("config-toml", ("env-file", "max-bytes"), "1", "must be an integer, got a string"),
    ("config-toml", ("env-file", "max-bytes"), 0, "must be at least 1"),
    ("config-toml", ("env-file", "on-missing"), "skip", 'must be one of "error", "ignore"'),
    ("config-toml", ("env-file", "directories", 0), "relative", "must match ^/"),
    ("config-toml", ("env-file", "variable"), "1BAD", "must match ^[A-Za-z_][A-Za-z0-9_]*$"),
]


def render(parts: tuple[str | int, ...]) -> str:
    """Render a path the way problems name it."""
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if "." not in part else f'["{part}"]')
    return out


def at(document: Any, parts: tuple[str | int, ...]) -> Any:
    """Return the value at a path."""
    for part in parts:
        document = document[part]
    return document


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_good_documents_are_valid(kind: str) -> None:
    """A complete, correct document of each kind has no problem."""
    assert validate_document(GOOD[kind], kind) == []


@pytest.mark.parametrize(
    ("kind", "parent", "name"),
    [pytest.param(*case, id=f"{case[0]}-{render(case[1])}-{case[2]}") for case in REQUIRED],
)
def test_every_required_property_is_reported_by_path(
    kind: str, parent: tuple[str | int, ...], name: str
) -> None:
    """Removing a required property gives exactly one problem naming it at its parent's path."""
    document = copy.deepcopy(GOOD[kind])
    del at(document, parent)[name]
    assert validate_document(document, kind) == [
        Problem(render(parent), f"missing required property {name!r}")
    ]


@pytest.mark.parametrize(
    ("kind", "path", "value", "message"),
    [pytest.param(*case, id=f"{case[0]}-{render(case[1])}-{type(case[2]).__name__}") for case in WRONG_TYPE],
)
def test_every_wrong_type_or_value_is_reported_by_path(
    kind: str, path: tuple[str | int, ...], value: object, message: str
) -> None:
    """A property of the wrong type or value gives one problem at its own path."""
    document = copy.deepcopy(GOOD[kind])
    at(document, path[:-1])[path[-1]] = value
    assert validate_document(document, kind) == [Problem(render(path), message)]


def test_every_problem_is_reported_not_only_the_first() -> None:
    """A document with several problems gets one line for each."""
    document = {"version": "2", "hook": {}, "when": {}, "stages": ["x"]}
    assert [str(p) for p in validate_document(document, "hooks-json")] == [
        "$.hook: missing required property 'path'",
        (
            '$.stages[0]: must be one of "prestart", "createRuntime", "createContainer", "startContainer", '
            '"poststart", "poststop", "precreate"'
        ),
        '$.version: must be "1.0.0"',
        "$.when: must have at least 1 property",
    ]


def test_unknown_when_condition_and_capability_set_are_reported() -> None:
    """Closed objects name the unknown property."""
    hooks = {**GOOD["hooks-json"], "when": {"always": True, "sometimes": True}}
    assert validate_document(hooks, "hooks-json") == [Problem("$.when", "unknown property 'sometimes'")]


def test_config_toml_cross_key_rule_is_reported() -> None:
    """parse_config's ldconfig rule is applied once the types are right, and reported at the key it names."""
    document = {"nvidia-container-cli": {"ldconfig": "/sbin/ldconfig"}}
    assert validate_document(document, "config-toml") == [
        Problem(
            "$.nvidia-container-cli.ldconfig",
            "value \"/sbin/ldconfig\" is not host-relative (does not start with a '@')",
        )
    ]


def test_config_toml_value_rule_at_its_key() -> None:
    """A value rule of parse_config (capabilities) is reported at the key, naming what is allowed."""
    document = {"supported-driver-capabilities": "compute,bogus"}
    assert validate_document(document, "config-toml") == [
        Problem(
            "$.supported-driver-capabilities",
            "must list only compat32, compute, display, graphics, ngx, utility, video or be 'all', got unknown "
            "'bogus'",
        )
    ]


def test_config_toml_unknown_keys_are_allowed() -> None:
    """Unknown keys are ignored, as upstream and the hook do."""
    assert validate_document({"future-key": 1, "env-file": {"other": True}}, "config-toml") == []


def test_shipped_config_toml_schema_is_the_generated_one() -> None:
    """schemas/config-toml.json equals the schema generated from default_settings(), so it cannot drift."""
    assert load_schema("config-toml") == build_config_toml_schema()


def test_config_toml_schema_covers_every_default_key() -> None:
    """Every key of default_settings() has a property with its default."""

    def walk(defaults: dict[str, Any], schema: dict[str, Any]) -> None:
        assert set(schema["properties"]) == set(defaults)
        for key, value in defaults.items():
            if isinstance(value, dict):
                walk(value, schema["properties"][key])
            else:
                assert schema["properties"][key]["default"] == value

    walk(default_settings(), build_config_toml_schema())


def test_validate_file_reads_a_bundle_directory(tmp_path: Path) -> None:
    """A bundle directory stands for its config.json."""
    (tmp_path / "config.json").write_text(json.dumps(GOOD["config"]), encoding="utf-8")
    assert validate_file(str(tmp_path), "config") == []


@pytest.mark.parametrize(
    ("kind", "content", "message"),
    [
        pytest.param(
            "state",
            b"{",
            r"^.*/doc: invalid JSON: Expecting property name enclosed in double quotes at "
            r"line 1 column 2$",
            id="bad-json",
        ),
        pytest.param("state", b"\xff", r"^.*/doc: not valid UTF-8 at byte 0$", id="bad-utf8"),
        pytest.param("config-toml", b"a = ", r"^.*/doc: invalid TOML: ", id="bad-toml"),
    ],
)
def test_undecodable_files_are_one_error(tmp_path: Path, kind: str, content: bytes, message: str) -> None:
    """A file that cannot be decoded is one SchemaError naming the file and the position."""
    path = tmp_path / "doc"
    path.write_bytes(content)
    with pytest.raises(SchemaError, match=message):
        validate_file(str(path), kind)


def test_missing_file_is_one_error(tmp_path: Path) -> None:
    """A missing file is one SchemaError naming it."""
    with pytest.raises(SchemaError, match=r"^.*/nope: cannot read: No such file or directory$"):
        validate_file(str(tmp_path / "nope"), "state")

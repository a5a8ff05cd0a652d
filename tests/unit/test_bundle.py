"""config.json: loading, upstream's presence checks, the env split, and the atomic write."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest

from hook.pipeline.bundle import (
    check_spec,
    dump_spec,
    load_spec,
    parse_env,
    parse_spec,
    process_env,
    root_path,
    set_process_env,
    spec_annotations,
    spec_mounts,
    spec_path,
    write_spec,
)
from hook.util.atomicwrite import write_atomic
from hook.util.errors import SpecError

VALID: dict[str, object] = {"ociVersion": "1.0.2", "process": {"env": ["A=1"]}, "root": {"path": "rootfs"}}


def test_spec_path() -> None:
    """The spec is ``<bundle>/config.json``, relative to the cwd when the state names no bundle."""
    assert spec_path("/b") == "/b/config.json"
    assert spec_path("") == "config.json"


def test_load_spec_missing(tmp_path: Path) -> None:
    """A missing config.json is refused with Go's open error text."""
    path = re.escape(str(tmp_path / "config.json"))
    with pytest.raises(
        SpecError, match=rf"^could not open OCI spec: open {path}: no such file or directory$"
    ):
        load_spec(str(tmp_path))


def test_load_spec_keeps_raw_bytes(tmp_path: Path) -> None:
    """The spec is kept as its exact bytes and a dict holding unknown fields."""
    raw = b'{"ociVersion": "1.0.2", "x-unknown": {"kept": true}}'
    (tmp_path / "config.json").write_bytes(raw)
    spec = load_spec(str(tmp_path))
    assert (spec.path, spec.raw, spec.document["x-unknown"]) == (
        str(tmp_path / "config.json"),
        raw,
        {"kept": True},
    )


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        pytest.param(b"", "Expecting value at line 1 column 1", id="empty"),
        pytest.param(
            b'{"a": 1,}', "Expecting property name enclosed in double quotes at line 1 column 9", id="comma"
        ),
        pytest.param(b'{\n "a": \xff}', "not valid UTF-8 at byte 8", id="not-utf8"),
        pytest.param(b"[]", "the spec must be a JSON object, got an array", id="array"),
        pytest.param(b"null", "the spec must be a JSON object, got null", id="null"),
        pytest.param(b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "nested too deeply", id="nested"),
    ],
)
def test_parse_spec_refuses(raw: bytes, reason: str) -> None:
    """Undecodable config.json is one line naming the position, never the content."""
    with pytest.raises(SpecError, match=rf"^could not decode OCI spec: {re.escape(reason)}$"):
        parse_spec(raw)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"ociVersion": None}, "Version is empty in OCI spec", id="no-version"),
        pytest.param(
            {"ociVersion": 1},
            "could not decode OCI spec: ociVersion must be a string, got a number",
            id="version-int",
        ),
        pytest.param({"process": None}, "Process is empty in OCI spec", id="no-process"),
        pytest.param(
            {"process": []},
            "could not decode OCI spec: process must be an object, got an array",
            id="process-array",
        ),
        pytest.param({"root": None}, "Root is empty in OCI spec", id="no-root"),
        pytest.param(
            {"root": "rootfs"},
            "could not decode OCI spec: root must be an object with a string path",
            id="root-string",
        ),
        pytest.param(
            {"root": {"path": 1}},
            "could not decode OCI spec: root must be an object with a string path",
            id="path-int",
        ),
        pytest.param(
            {"process": {"env": "A=1"}},
            "could not decode OCI spec: process.env must be an array of strings",
            id="env-string",
        ),
        pytest.param(
            {"process": {"env": [1]}},
            "could not decode OCI spec: process.env must be an array of strings",
            id="env-int",
        ),
        pytest.param(
            {"mounts": {}},
            "could not decode OCI spec: mounts must be an array of objects with string fields",
            id="mounts-object",
        ),
        pytest.param(
            {"mounts": [{"source": 1}]},
            "could not decode OCI spec: mounts must be an array of objects with string fields",
            id="mount-source-int",
        ),
    ],
)
def test_check_spec_refuses(change: dict[str, object], message: str) -> None:
    """ociVersion, process and root must be present (upstream's messages), and the fields we use well-typed."""
    document = {key: value for key, value in {**VALID, **change}.items() if value is not None}
    with pytest.raises(SpecError, match=rf"^{re.escape(message)}$"):
        check_spec(document)


@pytest.mark.parametrize(
    "document",
    [
        pytest.param(VALID, id="minimal"),
        pytest.param({**VALID, "ociVersion": ""}, id="empty-version-string"),
        pytest.param({**VALID, "root": {}}, id="root-without-path"),
        pytest.param({**VALID, "process": {}}, id="process-without-env"),
        pytest.param({**VALID, "mounts": [{"destination": "/x"}]}, id="mount-without-source"),
    ],
)
def test_check_spec_accepts(document: dict[str, object]) -> None:
    """A spec with the three required fields and well-typed optional ones passes."""
    check_spec(document)


def test_accessors_of_checked_spec() -> None:
    """process.env, mounts, root.path and annotations are read with their defaults."""
    document: dict[str, object] = {
        **VALID,
        "mounts": [{"source": "/dev/null", "destination": "/x"}, {"type": "tmpfs"}],
        "annotations": {"a": "b", "n": 1},
    }
    assert process_env(document) == ["A=1"]
    assert process_env({**VALID, "process": {}}) == []
    assert spec_mounts(document) == [("/dev/null", "/x"), ("", "")]
    assert spec_mounts(VALID) == []
    assert root_path(document) == "rootfs"
    assert root_path({**VALID, "root": {}}) == ""
    assert spec_annotations(document) == {"a": "b"}
    assert spec_annotations(VALID) == {}


@pytest.mark.parametrize(
    ("entries", "env"),
    [
        pytest.param([], {}, id="empty"),
        pytest.param(["A=1", "B="], {"A": "1", "B": ""}, id="empty-value"),
        pytest.param(["A=x=y"], {"A": "x=y"}, id="split-at-first-equals"),
        pytest.param(["A=1", "A=2"], {"A": "2"}, id="later-duplicate-wins"),
        pytest.param(["a=1", "A=2"], {"a": "1", "A": "2"}, id="case-sensitive"),
        pytest.param(["=v"], {"": "v"}, id="empty-name"),
        pytest.param(["A= 1 "], {"A": " 1 "}, id="value-not-trimmed"),
    ],
)
def test_parse_env(entries: list[str], env: dict[str, str]) -> None:
    """Entries split at the first '='; later duplicates overwrite earlier ones."""
    assert parse_env(entries) == env


def test_parse_env_without_equals_names_index_not_content() -> None:
    """An entry without '=' is refused by its index; its content is never echoed."""
    with pytest.raises(SpecError, match=r"^invalid environment variable: process\.env\[2\] has no '='$"):
        parse_env(["A=1", "B=2", "SECRET_TOKEN"])


def test_set_process_env_copies() -> None:
    """Replacing process.env returns a new document and leaves the original alone."""
    changed = set_process_env(VALID, ["B=2"])
    assert process_env(changed) == ["B=2"]
    assert process_env(VALID) == ["A=1"]
    assert changed["root"] == VALID["root"]


def test_dump_spec_is_compact_utf8() -> None:
    """Specs are written as compact JSON without ASCII escaping."""
    assert dump_spec({"a": ["é", 1]}) == '{"a":["é",1]}'.encode()


def test_write_atomic_keeps_mode_and_leaves_no_temp(tmp_path: Path) -> None:
    """Replacing a file keeps its mode and leaves nothing but the file."""
    path = tmp_path / "config.json"
    path.write_bytes(b"old")
    path.chmod(0o600)
    write_atomic(str(path), b"new")
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [pytest.param(None, 0o644, id="default-mode"), pytest.param(0o640, 0o640, id="explicit")],
)
def test_write_atomic_new_file(tmp_path: Path, mode: int | None, expected: int) -> None:
    """A new file gets 0644 unless a mode is given."""
    path = tmp_path / "new.json"
    write_atomic(str(path), b"x", mode=mode)
    assert stat.S_IMODE(path.stat().st_mode) == expected


def test_write_atomic_failure_removes_temp(tmp_path: Path) -> None:
    """When the rename fails the temp file is removed and the error propagates."""
    target = tmp_path / "dir"
    target.mkdir()
    (target / "keep").write_text("x")
    with pytest.raises(OSError, match=r"Is a directory|Directory not empty"):
        write_atomic(str(target), b"x")
    assert [p.name for p in tmp_path.iterdir()] == ["dir"]


def test_write_spec_round_trips(tmp_path: Path) -> None:
    """write_spec writes a document load_spec reads back equal."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(VALID))
    write_spec(str(path), {**VALID, "x": "é"})
    assert load_spec(str(tmp_path)).document == {**VALID, "x": "é"}

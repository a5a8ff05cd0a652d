"""``validate config``: the OCI runtime-spec's own schema test cases, then what the hook needs on top.

tests/fixtures/oci-config/{good,bad} hold the cases of the runtime-spec's ``schema/test/config`` suite (the
facts the OCI project checks its schema with). A good config passes the OCI schema; the ones without
``process`` then get the hook's own refusal, separately. A bad one is refused for its real defect.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hook.install.schema import Problem, SchemaError, hook_problems, load_document, validate_document

CASES = Path(__file__).resolve().parent.parent / "fixtures" / "oci-config"
NO_PROCESS = Problem(
    "$.process",
    'the hook cannot act on this config: it refuses it with "Process is empty in OCI spec" (process is optional '
    "in OCI; the hook, like nvidia-container-runtime-hook, needs it)",
)


@pytest.mark.parametrize(
    ("name", "hook"),
    [
        pytest.param("freebsd-example", [], id="freebsd-example"),
        pytest.param("freebsd-minimal", [NO_PROCESS], id="freebsd-minimal"),
        pytest.param("linux-netdevice", [NO_PROCESS], id="linux-netdevice"),
        pytest.param("linux-rdma", [NO_PROCESS], id="linux-rdma"),
        pytest.param("minimal-for-start", [], id="minimal-for-start"),
        pytest.param("minimal", [NO_PROCESS], id="minimal"),
        pytest.param("spec-example", [], id="spec-example"),
        pytest.param("zos-example", [], id="zos-example"),
        pytest.param("zos-minimal", [NO_PROCESS], id="zos-minimal"),
    ],
)
def test_oci_good_configs(name: str, hook: list[Problem]) -> None:
    """Every good case of the OCI suite is valid OCI; the hook's needs are said apart from the schema."""
    document = load_document(str(CASES / "good" / f"{name}.json"), "config")
    assert validate_document(document, "config") == []
    assert hook_problems(document, "config") == hook


@pytest.mark.parametrize(
    ("name", "problems"),
    [
        pytest.param(
            "freebsd-vnet-disable",
            [Problem("$.freebsd.jail.vnet", 'must be one of "new", "inherit"')],
            id="freebsd-vnet-disable",
        ),
        pytest.param(
            "linux-hugepage",
            [Problem("$.linux.resources.hugepageLimits[0].pageSize", "must match ^[1-9][0-9]*[KMG]B$")],
            id="linux-hugepage",
        ),
        pytest.param(
            "linux-netdevice",
            [Problem("$.linux.netDevices.eth0.name", "must be a string, got a number")],
            id="linux-netdevice",
        ),
        pytest.param(
            "linux-rdma",
            [Problem("$.linux.resources.rdma.mlx5_1.hcaHandles", "must be an integer, got a string")],
            id="linux-rdma",
        ),
    ],
)
def test_oci_bad_configs(name: str, problems: list[Problem]) -> None:
    """Every bad case of the OCI suite is refused for its real defect, at its JSON path."""
    document = load_document(str(CASES / "bad" / f"{name}.json"), "config")
    assert validate_document(document, "config") == problems


def test_oci_invalid_json() -> None:
    """The suite's invalid-json case is refused as undecodable, with the position."""
    path = CASES / "bad" / "invalid-json.json"
    with pytest.raises(
        SchemaError,
        match=r"^.*invalid-json\.json: invalid JSON: Expecting property name enclosed in double quotes at line 1 column 2$",
    ):
        load_document(str(path), "config")


def spec_with(**changes: Any) -> dict[str, Any]:
    """The suite's spec-example with top-level parts replaced."""
    document: dict[str, Any] = json.loads((CASES / "good" / "spec-example.json").read_text())
    document.update(changes)
    return document


@pytest.mark.parametrize(
    ("change", "problems"),
    [
        pytest.param(
            {"process": {"cwd": "/", "user": {"uid": -1, "gid": 0}}},
            [Problem("$.process.user.uid", "must be at least 0")],
            id="negative-uid",
        ),
        pytest.param(
            {"process": {"cwd": "/", "user": {"uid": 4294967296, "gid": 0}}},
            [Problem("$.process.user.uid", "must be at most 4294967295")],
            id="uid-over-uint32",
        ),
        pytest.param(
            {"process": {"cwd": "/", "rlimits": [{"type": "nofile", "soft": 1, "hard": 1}]}},
            [Problem("$.process.rlimits[0].type", "must match ^RLIMIT_[A-Z]+$")],
            id="rlimit-type",
        ),
        pytest.param(
            {"windows": {"layerFolders": "C:\\\\layers"}},
            [Problem("$.windows.layerFolders", "must be an array, got a string")],
            id="windows-typed",
        ),
        pytest.param(
            {"solaris": {"milestone": 1}},
            [Problem("$.solaris.milestone", "must be a string, got a number")],
            id="solaris-typed",
        ),
        pytest.param(
            {"vm": {"kernel": {}}},
            [Problem("$.vm.kernel", "missing required property 'path'")],
            id="vm-kernel-path",
        ),
        pytest.param(
            {"hooks": {"prestart": [{"path": "/x", "timeout": 0}]}},
            [Problem("$.hooks.prestart[0].timeout", "must be at least 1")],
            id="hook-timeout",
        ),
    ],
)
def test_oci_fields_are_checked(change: dict[str, Any], problems: list[Problem]) -> None:
    """Fields the hook never reads are still checked, with every platform at least typed."""
    assert validate_document(spec_with(**change), "config") == problems


@pytest.mark.parametrize(
    ("change", "hook"),
    [
        pytest.param(
            {"root": None},
            [
                Problem(
                    "$.root",
                    'the hook cannot act on this config: it refuses it with "Root is empty in OCI spec" (root is '
                    "optional in OCI; the hook, like nvidia-container-runtime-hook, needs it)",
                )
            ],
            id="no-root",
        ),
        pytest.param(
            {"process": {"cwd": "/", "env": ["PATH=/bin", "JUNK"]}},
            [
                Problem(
                    "$.process.env[1]",
                    'the hook cannot act on this config: it refuses it with "invalid environment variable: '
                    "process.env[1] has no '='\"",
                )
            ],
            id="env-entry-without-equals",
        ),
    ],
)
def test_hook_needs_beyond_oci(change: dict[str, Any], hook: list[Problem]) -> None:
    """A config valid for OCI that the hook cannot act on says exactly that, at the path."""
    document = {key: value for key, value in spec_with(**change).items() if value is not None}
    assert validate_document(document, "config") == []
    assert hook_problems(document, "config") == hook


def test_oci_state_example() -> None:
    """The runtime-spec's state example is a valid state the hook can read."""
    document = load_document(str(CASES.parent / "oci-state" / "spec-example.json"), "state")
    assert validate_document(document, "state") == []
    assert hook_problems(document, "state") == []


def test_oci_state_problems_by_path() -> None:
    """A running container's state without pid, and a negative pid, are named at their paths."""
    state = {"ociVersion": "1.2.0", "id": "c", "status": "running", "bundle": "/b"}
    assert validate_document(state, "state") == [Problem("$", "missing required property 'pid'")]
    assert validate_document({**state, "pid": -1}, "state") == [Problem("$.pid", "must be at least 0")]

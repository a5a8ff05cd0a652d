"""hook.cdi.spec and hook.cdi.version: decoding and checking a spec file as container-device-interface does."""

from __future__ import annotations

import copy
import gc
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import hypothesis
import hypothesis.strategies
import pytest
import yaml

from hook.cdi.names import parse_qualified_name, quote
from hook.cdi.spec import (
    MAX_EXPANDED_SIZE,
    MAX_NESTING,
    MAX_SPEC_FILE_BYTES,
    build_spec,
    decode_spec_text,
    load_spec,
    untrusted_reason,
    yaml_loader,
)
from hook.cdi.spec import _check_nodes as check_nodes
from hook.cdi.version import minimum_version
from hook.util.errors import CdiError

NODE = {"path": "/dev/nvidia0"}
BASE: dict[str, Any] = {
    "cdiVersion": "0.3.0",
    "kind": "nvidia.com/gpu",
    "devices": [{"name": "gpu0", "containerEdits": {"deviceNodes": [NODE]}}],
}


def spec_with(**changes: Any) -> dict[str, Any]:
    """BASE with top-level keys replaced (None removes one)."""
    spec = copy.deepcopy(BASE)
    for key, value in changes.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    return spec


def device(name: str = "gpu0", **edits: Any) -> dict[str, Any]:
    return {"name": name, "containerEdits": edits or {"deviceNodes": [NODE]}}


@pytest.mark.parametrize(
    ("spec", "needed"),
    [
        pytest.param(BASE, "0.3.0", id="plain"),
        pytest.param(
            spec_with(devices=[device(mounts=[{"hostPath": "/a", "containerPath": "/b", "type": "bind"}])]),
            "0.4.0",
            id="mount-type",
        ),
        pytest.param(spec_with(devices=[device("0")]), "0.5.0", id="name-starts-with-digit"),
        pytest.param(
            spec_with(devices=[device(deviceNodes=[{"path": "/dev/x", "hostPath": "/dev/y"}])]),
            "0.5.0",
            id="host-path",
        ),
        pytest.param(spec_with(annotations={"a": "b"}), "0.6.0", id="spec-annotations"),
        pytest.param(
            spec_with(devices=[{**device(), "annotations": {"a": "b"}}]), "0.6.0", id="device-annotations"
        ),
        pytest.param(spec_with(kind="nvidia.com/gpu.x"), "0.6.0", id="dot-in-class"),
        pytest.param(spec_with(containerEdits={"additionalGids": [5]}), "0.7.0", id="additional-gids"),
        pytest.param(spec_with(devices=[device(intelRdt={})]), "0.7.0", id="intel-rdt"),
        pytest.param(
            spec_with(devices=[device(intelRdt={"enableMonitoring": True})]), "1.1.0", id="rdt-monitoring"
        ),
        pytest.param(spec_with(containerEdits={"intelRdt": {"schemata": []}}), "1.1.0", id="rdt-schemata"),
        pytest.param(
            spec_with(devices=[device(netDevices=[{"hostInterfaceName": "eth1", "name": "e"}])]),
            "1.1.0",
            id="net-devices",
        ),
    ],
)
def test_minimum_version(spec: dict[str, Any], needed: str) -> None:
    """Each version's new fields raise the minimum version, as specs-go's requiresVxyz functions do."""
    assert minimum_version(spec) == needed


@pytest.mark.parametrize(
    ("spec", "shown", "hidden"),
    [
        pytest.param(
            spec_with(cdiVersion="0.9.0"),
            'invalid version "0.9.0" in cdiVersion',
            "invalid version in cdiVersion",
            id="unknown-version",
        ),
        pytest.param(
            spec_with(cdiVersion=None),
            'invalid version "" in cdiVersion',
            "invalid version in cdiVersion",
            id="no-version",
        ),
        pytest.param(
            spec_with(cdiVersion="0.2.0"),
            'the spec version must be at least v0.3.0 (cdiVersion is "0.2.0"; every spec needs it)',
            'the spec version must be at least v0.3.0 (cdiVersion is "0.2.0"; every spec needs it)',
            id="too-old",
        ),
        pytest.param(
            spec_with(cdiVersion="0.5.0", annotations={"a": "b"}),
            'the spec version must be at least v0.6.0 (cdiVersion is "0.5.0"; annotations needs it)',
            'the spec version must be at least v0.6.0 (cdiVersion is "0.5.0"; annotations needs it)',
            id="annotations-need-0.6",
        ),
        pytest.param(
            spec_with(
                cdiVersion="1.0.0",
                containerEdits={"netDevices": [{"hostInterfaceName": "eth1", "name": "e"}]},
            ),
            'the spec version must be at least v1.1.0 (cdiVersion is "1.0.0"; netDevices needs it)',
            'the spec version must be at least v1.1.0 (cdiVersion is "1.0.0"; netDevices needs it)',
            id="net-devices-need-1.1",
        ),
        pytest.param(
            spec_with(cdiVersion="0.6.0", containerEdits={"additionalGids": [5]}),
            'the spec version must be at least v0.7.0 (cdiVersion is "0.6.0"; additionalGids needs it)',
            'the spec version must be at least v0.7.0 (cdiVersion is "0.6.0"; additionalGids needs it)',
            id="additional-gids-need-0.7",
        ),
        pytest.param(
            spec_with(kind="gpu"),
            "kind: invalid vendor. empty name",
            "kind: invalid vendor. empty name",
            id="kind-without-vendor",
        ),
        pytest.param(
            spec_with(kind="1nvidia/gpu"),
            'kind: invalid vendor. "1nvidia", should start with letter',
            "kind: invalid vendor. should start with letter",
            id="vendor-digit",
        ),
        pytest.param(
            spec_with(kind="nvidia/gp_"),
            'kind: invalid class. "gp_", should end with a letter or digit',
            "kind: invalid class. should end with a letter or digit",
            id="class-end",
        ),
        pytest.param(
            spec_with(kind="nvidia/g!u"),
            "kind: invalid class. invalid character '!' in name \"g!u\"",
            "kind: invalid class. invalid character at index 1 in name",
            id="class-char",
        ),
        pytest.param(
            spec_with(devices=[]),
            "invalid spec, no devices",
            "invalid spec, no devices",
            id="no-devices",
        ),
        pytest.param(
            spec_with(devices=[device(), device()]),
            'devices[1].name: invalid spec, multiple device "gpu0" (as devices[0])',
            "devices[1].name: invalid spec, multiple device (as devices[0])",
            id="device-twice",
        ),
        pytest.param(
            spec_with(devices=[device("-x")]),
            'devices[0].name: invalid device name "-x", should start with a letter or digit',
            "devices[0].name: invalid device name, should start with a letter or digit",
            id="device-name-start",
        ),
        pytest.param(
            spec_with(devices=[{"name": "gpu0", "containerEdits": {}}]),
            "devices[0].containerEdits: invalid device, empty device edits",
            "devices[0].containerEdits: invalid device, empty device edits",
            id="empty-device-edits",
        ),
        pytest.param(
            spec_with(devices=[device(env=["=x"])]),
            'devices[0].containerEdits.env[0]: invalid environment variable "=x"',
            "devices[0].containerEdits.env[0]: invalid environment variable",
            id="device-env",
        ),
        pytest.param(
            spec_with(containerEdits={"env": ["NOEQUALS"]}),
            'containerEdits.env[0]: invalid environment variable "NOEQUALS"',
            "containerEdits.env[0]: invalid environment variable",
            id="spec-env",
        ),
        pytest.param(
            spec_with(containerEdits={"deviceNodes": [{"path": ""}]}),
            "containerEdits.deviceNodes[0].path: invalid (empty) device path",
            "containerEdits.deviceNodes[0].path: invalid (empty) device path",
            id="node-no-path",
        ),
        pytest.param(
            spec_with(containerEdits={"deviceNodes": [{"path": "/dev/x", "type": "x"}]}),
            'containerEdits.deviceNodes[0].type: invalid type "x"',
            "containerEdits.deviceNodes[0].type: invalid type",
            id="node-type",
        ),
        pytest.param(
            spec_with(containerEdits={"deviceNodes": [{"path": "/dev/x", "permissions": "rwx"}]}),
            'containerEdits.deviceNodes[0].permissions: invalid permissions "rwx"',
            "containerEdits.deviceNodes[0].permissions: invalid permissions",
            id="node-permissions",
        ),
        pytest.param(
            spec_with(containerEdits={"hooks": [{"hookName": "poststart2", "path": "/x"}]}),
            'containerEdits.hooks[0].hookName: invalid hook name "poststart2" (want one of prestart, createRuntime, createContainer, startContainer, poststart, poststop)',
            "containerEdits.hooks[0].hookName: invalid hook name (want one of prestart, createRuntime, createContainer, startContainer, poststart, poststop)",
            id="hook-name",
        ),
        pytest.param(
            spec_with(containerEdits={"hooks": [{"path": "/x"}]}),
            'containerEdits.hooks[0].hookName: invalid hook name "" (want one of prestart, createRuntime, '
            "createContainer, startContainer, poststart, poststop)",
            "containerEdits.hooks[0].hookName: invalid hook name (want one of prestart, createRuntime, "
            "createContainer, startContainer, poststart, poststop)",
            id="hook-without-name",
        ),
        pytest.param(
            spec_with(containerEdits={"hooks": [{"hookName": "prestart"}]}),
            'containerEdits.hooks[0].path: invalid hook "prestart" with empty path',
            'containerEdits.hooks[0].path: invalid hook "prestart" with empty path',
            id="hook-path",
        ),
        pytest.param(
            spec_with(containerEdits={"hooks": [{"hookName": "prestart", "path": "/x", "env": ["X"]}]}),
            'containerEdits.hooks[0].env[0]: invalid environment variable "X"',
            "containerEdits.hooks[0].env[0]: invalid environment variable",
            id="hook-env",
        ),
        pytest.param(
            spec_with(containerEdits={"mounts": [{"containerPath": "/x"}]}),
            "containerEdits.mounts[0].hostPath: invalid mount, empty host path",
            "containerEdits.mounts[0].hostPath: invalid mount, empty host path",
            id="mount-host",
        ),
        pytest.param(
            spec_with(containerEdits={"mounts": [{"hostPath": "/x"}]}),
            "containerEdits.mounts[0].containerPath: invalid mount, empty container path",
            "containerEdits.mounts[0].containerPath: invalid mount, empty container path",
            id="mount-container",
        ),
        pytest.param(
            spec_with(cdiVersion="0.7.0", containerEdits={"intelRdt": {"closID": ".."}}),
            "containerEdits.intelRdt.closID: invalid ClosID",
            "containerEdits.intelRdt.closID: invalid ClosID",
            id="rdt-clos",
        ),
        pytest.param(
            spec_with(cdiVersion="1.1.0", containerEdits={"netDevices": [{"hostInterfaceName": "eth0"}]}),
            "containerEdits.netDevices[0].name: invalid linux net device, empty Name",
            "containerEdits.netDevices[0].name: invalid linux net device, empty Name",
            id="net-name",
        ),
        pytest.param(
            spec_with(
                cdiVersion="1.1.0",
                containerEdits={
                    "netDevices": [
                        {"hostInterfaceName": "eth0", "name": "a"},
                        {"hostInterfaceName": "eth0", "name": "b"},
                    ]
                },
            ),
            'containerEdits.netDevices[1].hostInterfaceName: invalid linux net device, duplicate HostInterfaceName "eth0" (as containerEdits.netDevices[0])',
            "containerEdits.netDevices[1].hostInterfaceName: invalid linux net device, duplicate HostInterfaceName (as containerEdits.netDevices[0])",
            id="net-twice",
        ),
        pytest.param(
            spec_with(extra=1),
            'the spec has unknown field "extra"',
            "the spec has an unknown field (its field 4)",
            id="unknown-field",
        ),
        pytest.param(
            spec_with(
                devices=[
                    {"name": "gpu0", "containerEdits": {"deviceNodes": [{"path": "/dev/x", "major": "195"}]}}
                ]
            ),
            "devices[0].containerEdits.deviceNodes[0].major must be an integer",
            "devices[0].containerEdits.deviceNodes[0].major must be an integer",
            id="major-string",
        ),
        pytest.param(
            spec_with(
                devices=[{"name": "gpu0", "containerEdits": {"deviceNodes": [{"path": "/dev/x", "uid": -1}]}}]
            ),
            "devices[0].containerEdits.deviceNodes[0].uid must be an integer from 0 to 4294967295",
            "devices[0].containerEdits.deviceNodes[0].uid must be an integer from 0 to 4294967295",
            id="uid-negative",
        ),
        pytest.param(
            spec_with(
                devices=[
                    {"name": "gpu0", "containerEdits": {"deviceNodes": [{"path": "/dev/x", "major": True}]}}
                ]
            ),
            "devices[0].containerEdits.deviceNodes[0].major must be an integer",
            "devices[0].containerEdits.deviceNodes[0].major must be an integer",
            id="major-boolean",
        ),
        pytest.param(
            spec_with(containerEdits={"env": "A=1"}),
            "containerEdits.env must be an array of strings",
            "containerEdits.env must be an array of strings",
            id="env-not-array",
        ),
    ],
)
def test_invalid_specs_refused(spec: dict[str, Any], shown: str, hidden: str) -> None:
    """Every rule of the reference's Spec.validate, naming the field at fault by its JSON path: for ``cdi
    validate`` (``reveal``) with the value quoted as Go's %q; on a container's start without any decoded
    key or value of the file."""
    with pytest.raises(CdiError) as caught:
        build_spec(spec, path="/etc/cdi/x.json", priority=0, reveal=True)
    assert str(caught.value) == shown
    with pytest.raises(CdiError) as caught:
        build_spec(spec, path="/etc/cdi/x.json", priority=0)
    assert str(caught.value) == hidden


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(spec_with(cdiVersion="v0.3.0"), id="leading-v"),
        pytest.param(spec_with(cdiVersion="1.1.0"), id="newest-for-old-fields"),
        pytest.param(
            spec_with(devices=[device(deviceNodes=[{"path": "/dev/x", "permissions": "none"}])]),
            id="permissions-none",
        ),
        pytest.param(spec_with(containerEdits={"env": None}), id="null-field-is-absent"),
        pytest.param(
            spec_with(
                cdiVersion="1.1.0", devices=[device(netDevices=[{"hostInterfaceName": "e", "name": "f"}])]
            ),
            id="net-device-only",
        ),
        pytest.param(
            spec_with(cdiVersion="0.7.0", devices=[device(intelRdt={"closID": "/"})]), id="rdt-root-clos"
        ),
    ],
)
def test_valid_specs_accepted(spec: dict[str, Any]) -> None:
    """Specs the reference accepts are accepted, null fields dropped from the kept document."""
    built = build_spec(spec, path="/etc/cdi//x.json", priority=1)
    assert built.path == "/etc/cdi/x.json"
    assert (built.vendor, built.klass) == parse_qualified_name(f"{spec['kind']}=x")[:2]
    assert "env" not in built.document.get("containerEdits", {})


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        pytest.param(
            "x.json",
            '{"cdiVersion": "0.3.0", "cdiVersion": "0.4.0"}',
            r"repeated field in the spec \(its field 2\)",
            id="json-repeated-key",
        ),
        pytest.param(
            "x.yaml",
            "cdiVersion: 0.3.0\ncdiVersion: 0.4.0\n",
            r"repeated field in the spec \(its field 2\)",
            id="yaml-repeated-key",
        ),
        pytest.param(
            "x.yaml", "cdiVersion: [\n", r"not valid JSON or YAML at line 2 column 1", id="yaml-broken"
        ),
        pytest.param("x.json", "", r"no Spec data", id="empty"),
        pytest.param("x.json", "[1]", r"the spec must be an object", id="not-object"),
        pytest.param("x.json", b"\xff", r"not valid UTF-8 at byte 0", id="not-utf8"),
    ],
)
def test_undecodable_files(name: str, content: str | bytes, message: str, tmp_path: Path) -> None:
    """A file that is no spec object is refused naming the file and the position, never quoting content."""
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(CdiError, match=rf"^invalid CDI spec {path}: {message}$"):
        load_spec(str(path))


def test_json_spec_written_as_yaml_still_reads(tmp_path: Path) -> None:
    """A .json file holding YAML is read, as the reference (which parses every spec as YAML) reads it."""
    path = tmp_path / "x.json"
    path.write_text(
        "cdiVersion: 0.3.0\nkind: a.com/b\ndevices:\n- name: d\n  containerEdits:\n    env: [A=1]\n"
    )
    assert list(load_spec(str(path)).devices) == ["d"]


def test_yaml_octal_file_mode(tmp_path: Path) -> None:
    """YAML 1.1 octal (``0666``) is a number, as go-yaml reads it."""
    path = tmp_path / "x.yaml"
    path.write_text(
        "cdiVersion: 0.3.0\nkind: a.com/b\ndevices:\n- name: d\n  containerEdits:\n"
        "    deviceNodes:\n    - path: /dev/x\n      fileMode: 0666\n"
    )
    node = load_spec(str(path)).devices["d"]["containerEdits"]["deviceNodes"][0]
    assert node["fileMode"] == 0o666


def test_fifo_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO named like a spec is refused at once (nothing blocks forever)."""
    path = tmp_path / "x.json"
    os.mkfifo(path)
    with pytest.raises(CdiError, match=rf"^could not read {path}: not a regular file$"):
        load_spec(str(path))


def test_os_error_names_the_reason(tmp_path: Path) -> None:
    """An OS error reading or inspecting a spec is the system's reason (hook.util.safetext.os_reason), never
    ``None``: a path through a regular file is ``Not a directory``."""
    (tmp_path / "file").write_text("")
    path = tmp_path / "file" / "x.json"
    with pytest.raises(CdiError) as caught:
        load_spec(str(path))
    assert str(caught.value) == f"could not read {path}: Not a directory"
    assert untrusted_reason(str(path)) == "the file cannot be inspected: Not a directory"


def test_json_spec_does_not_import_yaml(tmp_path: Path) -> None:
    """Reading a JSON spec keeps to the lean path: neither yaml nor json is imported."""
    path = tmp_path / "x.json"
    path.write_text(json.dumps(BASE))
    code = (
        "import sys; from hook.cdi.spec import load_spec; load_spec(sys.argv[1]);"
        "print(' '.join(m for m in ('yaml', 'json', 'typing') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code, str(path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[2],
    )
    assert out.stdout.strip() == ""


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        pytest.param("a", '"a"', id="plain"),
        pytest.param('a"b\\', '"a\\"b\\\\"', id="quote-backslash"),
        pytest.param("a\nb\x1b", '"a\\nb\\x1b"', id="control"),
        pytest.param("x" * 300, '"' + "x" * 256 + '..."', id="bounded"),
    ],
)
def test_quote(text: str, quoted: str) -> None:
    """Values in messages are quoted on one line, with no control characters and a bounded length."""
    assert quote(text) == quoted


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param("gpu0", r'unqualified device "gpu0", missing vendor', id="bare"),
        pytest.param(
            "nvidia.com/gpu=", r'unqualified device "nvidia.com/gpu=", missing vendor', id="no-name"
        ),
        pytest.param(
            "nvidia.com/gpu=a/b",
            r"invalid device \"nvidia.com/gpu=a/b\": invalid character '/' in "
            r'device name "a/b"',
            id="slash-in-name",
        ),
    ],
)
def test_parse_qualified_name_errors(name: str, message: str) -> None:
    """pkg/parser's messages for names that are not fully qualified."""
    with pytest.raises(CdiError, match=rf"^{message}$"):
        parse_qualified_name(name)


# --- bounded decoding: one verdict from the JSON decoder, libyaml's CSafeLoader and PyYAML's SafeLoader ------

LOADERS = [
    pytest.param(yaml.CSafeLoader, id="c-loader"),
    pytest.param(yaml.SafeLoader, id="python-loader"),
]
TOO_DEEP = f"nested more than {MAX_NESTING} levels deep"
EXPANDED = (
    f"YAML aliases expand the document past {MAX_EXPANDED_SIZE} (its characters and nodes, counted as if "
    "every alias were written out)"
)
RECURSIVE = "a YAML alias (*name) refers to a node that contains it"


def nested_annotations(depth: int) -> str:
    """A spec of ``depth`` nested mappings in all, the innermost holding a string (JSON, which YAML reads too)."""
    inner = '"x"'
    for _ in range(depth - 1):
        inner = '{"a": ' + inner + "}"
    return '{"annotations": ' + inner + "}"


def alias_bomb(levels: int = 9) -> str:
    """The billion laughs: each list names the previous one ten times (10**levels strings when expanded)."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def merge_bomb(levels: int = 30) -> str:
    """Merge keys doubling a mapping's pairs at every level (flattened, 2**levels pairs)."""
    lines = ["m0: &m0 {a: 1}"]
    lines += [f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}]}}" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("[" * 5_000 + "]" * 5_000, TOO_DEEP, id="deep-flow-past-libyaml-bound"),
        pytest.param("[" * 500 + "]" * 500, TOO_DEEP, id="deep-flow-500"),
        pytest.param(nested_annotations(MAX_NESTING + 1), TOO_DEEP, id="deep-annotations-just-over"),
        pytest.param(
            "".join(f"{' ' * i}a:\n" for i in range(300)) + " " * 300 + "a: x\n",
            TOO_DEEP,
            id="deep-block-yaml",
        ),
        pytest.param(alias_bomb(), EXPANDED, id="alias-bomb"),
        pytest.param(merge_bomb(), EXPANDED, id="merge-key-bomb"),
        pytest.param(
            "a: &a [" + ", ".join(["x" * 1000] * 10) + "]\nb: [" + ", ".join(["*a"] * 200) + "]\n",
            EXPANDED,
            id="long-scalars-aliased",
        ),
        pytest.param("a: &a [*a]\n", RECURSIVE, id="alias-inside-itself"),
        pytest.param("a: &a {b: [{c: *a}]}\n", RECURSIVE, id="alias-inside-itself-deeper"),
        pytest.param("a: &a {<<: *a}\n", RECURSIVE, id="merge-of-itself"),
        pytest.param(
            "a: &a [[[[[[[[x]]]]]]]]\n"
            + "".join(f"l{i}: &l{i} [*l{i - 1}]\n" for i in range(1, 60)).replace("*l0", "*a"),
            TOO_DEEP,
            id="deep-through-aliases",
        ),
        pytest.param("? [a]\n: b\n", "a mapping key must be a string", id="sequence-key"),
        pytest.param(
            "".join(f"k{i}: {i}\n" for i in range(5_000)) + "k7: 0\n",
            "repeated field in the spec (its field 5001)",
            id="many-keys-repeat",
        ),
        pytest.param('"a": 1\na: 2\n', "repeated field in the spec (its field 2)", id="quoted-and-plain-key"),
        pytest.param("a: !!int x\n", "not valid JSON or YAML", id="tag-value-error"),
        pytest.param("a: !!float x\n", "not valid JSON or YAML", id="float-tag-value-error"),
        pytest.param("a: !!timestamp x\n", "not valid JSON or YAML", id="timestamp-tag-value-error"),
    ],
)
@pytest.mark.parametrize("loader", LOADERS)
def test_bounded_yaml_one_verdict(text: str, message: str, loader: type) -> None:
    """Each bad shape is refused in the same words by either PyYAML loader."""
    with pytest.raises(CdiError, match=rf"^{re.escape(message)}$"):
        decode_spec_text(text, yaml=True, loader=loader)


def test_json_deep_past_recursion_limit() -> None:
    """100,000 nested arrays: the C scanner's RecursionError is the same refusal, not an internal error."""
    with pytest.raises(CdiError, match=rf"^{re.escape(TOO_DEEP)}$"):
        decode_spec_text("[" * 100_000 + "]" * 100_000, yaml=False)


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("[" * 5_000 + "]" * 5_000, TOO_DEEP, id="deep-5000"),
        pytest.param("[" * 500 + "]" * 500, TOO_DEEP, id="deep-500"),
        pytest.param(nested_annotations(MAX_NESTING + 1), TOO_DEEP, id="just-over"),
        pytest.param('{"a": 1, "b": 2, "a": 3}', "repeated field in the spec (its field 3)", id="repeated"),
        pytest.param(
            '{"devices": [{"containerEdits": {"env": [], "env": []}}]}',
            "repeated field in devices[0].containerEdits (its field 2)",
            id="repeated-nested",
        ),
        pytest.param(
            '{"token-abc": {"x": 1, "x": 2}}',
            "repeated field in (field 1) (its field 2)",
            id="repeated-under-unknown",
        ),
    ],
)
def test_json_and_yaml_one_verdict(text: str, message: str, loader: type) -> None:
    """JSON text gets the same verdict read as JSON (a .json file) and as YAML (a .yaml file); a repeated
    key is named by the path of its object and its place there, never by a key that is no CDI field."""
    for as_yaml in (False, True):
        with pytest.raises(CdiError, match=rf"^{re.escape(message)}$"):
            decode_spec_text(text, yaml=as_yaml, loader=loader)


@pytest.mark.parametrize("loader", LOADERS)
def test_repeated_key_quoted_for_a_person(loader: type) -> None:
    """``cdi validate`` (``reveal``) quotes the repeated key and shows the keys of the path, JSON or YAML."""
    for as_yaml in (False, True):
        with pytest.raises(CdiError) as caught:
            decode_spec_text('{"token-abc": {"x": 1, "x": 2}}', yaml=as_yaml, loader=loader, reveal=True)
        assert str(caught.value) == 'repeated field "x" in token-abc (its field 2)'


@pytest.mark.parametrize("loader", LOADERS)
def test_nesting_limit_itself_accepted(loader: type) -> None:
    """Nested exactly MAX_NESTING levels decodes (to be refused by the shape check, not the decoder)."""
    text = nested_annotations(MAX_NESTING)
    assert decode_spec_text(text, yaml=False) == decode_spec_text(text, yaml=True, loader=loader)


def test_default_loader_is_libyaml() -> None:
    """YAML specs are parsed by libyaml when PyYAML has it (the pure-Python loader is ~5x slower)."""
    assert yaml_loader() is yaml.CSafeLoader


def test_repeated_key_check_is_linear() -> None:
    """The node walk over four times the keys costs well under sixteen times as long (the old check compared
    each key with every earlier one); best of five, the collector paused, so that a busy machine counts less."""

    def best(keys: int) -> float:
        loader = yaml.CSafeLoader("".join(f"k{i}: {i}\n" for i in range(keys)))
        node = loader.get_single_node()
        times = []
        gc.disable()
        try:
            for _ in range(5):
                started = time.perf_counter()
                check_nodes(node)
                times.append(time.perf_counter() - started)
        finally:
            gc.enable()
            loader.dispose()
        return min(times)

    assert best(40_000) < 8 * best(10_000)


def test_spec_over_size_cap_skipped_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec larger than the cap is refused from its size, before a byte is read."""
    path = tmp_path / "big.json"
    with path.open("wb") as fh:
        fh.truncate(MAX_SPEC_FILE_BYTES + 1)

    def no_read(fd: int, size: int) -> bytes:
        raise AssertionError("read")

    monkeypatch.setattr(os, "read", no_read)
    with pytest.raises(CdiError, match=rf"^could not read {path}: larger than {MAX_SPEC_FILE_BYTES} bytes$"):
        load_spec(str(path))


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(text=hypothesis.strategies.text(alphabet="[]{}:,-&*!<>?|'\"\n #abx01.", max_size=80))
@pytest.mark.parametrize("loader", LOADERS)
def test_any_text_is_a_value_or_a_refusal(loader: type, text: str) -> None:
    """Whatever the text, decoding ends in a value or a CdiError (never another exception). The two PyYAML
    parsers themselves differ on odd text (``!`` alone is "" to libyaml, null to PyYAML), so only the bounds
    above are pinned to one verdict."""
    try:
        decode_spec_text(text, yaml=True, loader=loader)
    except CdiError as err:
        message = str(err)
    else:
        message = ""
    assert "\n" not in message


@pytest.mark.parametrize(
    ("spec", "shown", "hidden"),
    [
        pytest.param(
            spec_with(
                containerEdits={"hooks": [{"hookName": "prestart", "path": "/bin/true", "timeout": -1}]}
            ),
            'containerEdits.hooks[0].timeout: invalid hook "prestart": negative timeout -1',
            'containerEdits.hooks[0].timeout: invalid hook "prestart": negative timeout',
            id="negative-hook-timeout",
        ),
        pytest.param(
            spec_with(devices=[device(deviceNodes=[{"path": "/dev/x", "major": -1, "minor": 0}])]),
            "devices[0].containerEdits.deviceNodes[0]: invalid (negative) device number -1:0 (major, minor)",
            "devices[0].containerEdits.deviceNodes[0]: invalid (negative) device number (major, minor)",
            id="negative-device-number",
        ),
    ],
)
def test_reference_refusals(spec: dict[str, Any], shown: str, hidden: str) -> None:
    """What the reference library refuses and we once accepted (the number quoted only with ``reveal``)."""
    with pytest.raises(CdiError) as caught:
        build_spec(spec, path="/x.json", priority=0, reveal=True)
    assert str(caught.value) == shown
    with pytest.raises(CdiError) as caught:
        build_spec(spec, path="/x.json", priority=0)
    assert str(caught.value) == hidden


def test_yaml_number_where_a_string_is_wanted_is_its_text(tmp_path: Path) -> None:
    """YAML ``name: 0`` is the device "0", as the reference (sigs.k8s.io/yaml) reads a scalar in a string
    field; so are numbers and booleans in env entries and annotations."""
    path = tmp_path / "x.yaml"
    path.write_text(
        "cdiVersion: 0.6.0\nkind: a.com/b\nannotations: {ready: true, count: 3}\ndevices:\n- name: 0\n"
        "  containerEdits:\n    env: [A=1]\n    hooks: [{hookName: prestart, path: /bin/true, args: [x, 1]}]\n"
    )
    spec = load_spec(str(path))
    assert list(spec.devices) == ["0"]
    assert spec.document["annotations"] == {"ready": "true", "count": "3"}
    assert spec.devices["0"]["containerEdits"]["hooks"][0]["args"] == ["x", "1"]


ANCHORED_SPEC = """\
cdiVersion: 0.5.0
kind: example.com/gpu
containerEdits:
  env: [EXAMPLE_DRIVER=1]
  hooks: &ldcache
  - {hookName: createContainer, path: /usr/bin/example-hook, args: [example-hook, update-ldcache]}
devices:
- name: gpu0
  containerEdits: &gpu0
    env: &common-env [EXAMPLE_VISIBLE=1, EXAMPLE_CAPS=compute]
    deviceNodes:
    - &ctl {path: /dev/examplectl, type: c, major: 195, minor: 255, permissions: rw}
    - {path: /dev/example0, type: c, major: 195, minor: 0}
    mounts: &libs
    - hostPath: /usr/lib/x86_64-linux-gnu/libexample.so.1
      containerPath: /usr/lib/x86_64-linux-gnu/libexample.so.1
      options: &ro [ro, nosuid, nodev, bind]
- name: gpu1
  containerEdits:
    env: *common-env
    deviceNodes: [*ctl, {path: /dev/example1, type: c, major: 195, minor: 1}]
    mounts: *libs
- name: gpu0-debug
  containerEdits:
    <<: *gpu0
    env: [EXAMPLE_VISIBLE=1, EXAMPLE_DEBUG=1]
    hooks: *ldcache
"""


@pytest.mark.parametrize("loader", LOADERS)
def test_spec_with_anchors_accepted_as_expanded(loader: type, tmp_path: Path) -> None:
    """A spec sharing containerEdits pieces through anchors, aliases and a merge key (which the reference
    loads) is accepted, with exactly the document and devices of the same spec written out without them."""
    anchored = tmp_path / "anchored.yaml"
    anchored.write_text(ANCHORED_SPEC)
    expanded = tmp_path / "expanded.json"
    expanded.write_text(json.dumps(yaml.safe_load(ANCHORED_SPEC)))
    assert "*" not in expanded.read_text()
    got = load_spec(str(anchored), loader=loader)
    want = load_spec(str(expanded))
    assert got.document == want.document
    assert got.devices == want.devices
    assert list(got.devices) == ["gpu0", "gpu1", "gpu0-debug"]
    debug = got.devices["gpu0-debug"]["containerEdits"]
    assert debug["env"] == ["EXAMPLE_VISIBLE=1", "EXAMPLE_DEBUG=1"]  # the key beside the merge wins
    assert debug["deviceNodes"][1]["path"] == "/dev/example0"
    assert debug["hooks"][0]["args"] == ["example-hook", "update-ldcache"]


@pytest.mark.parametrize("loader", LOADERS)
def test_expanded_size_budget_edge(loader: type) -> None:
    """The budget counts the document as if written out: a list of scalars aliased up to the budget is read,
    one character more is refused (each scalar: its length plus one; each sequence and mapping: one)."""
    item = "x" * 99  # 100 each
    inner = 1 + 10 * 100  # the anchored list: 1001
    copies = (MAX_EXPANDED_SIZE - 1 - 4 - 2 - inner - 2) // inner  # root, keys "a" and "b", list b
    text = f"a: &a [{', '.join([item] * 10)}]\nb: [{', '.join(['*a'] * copies)}]\n"
    total = 1 + 2 + (inner) + 2 + 1 + copies * inner
    spare = MAX_EXPANDED_SIZE - total
    padded = text + f"c: {'y' * (spare - 3)}\n"  # key "c" (2) and the value (spare - 2): exactly the budget
    assert isinstance(decode_spec_text(padded, yaml=True, loader=loader), dict)
    with pytest.raises(CdiError, match=rf"^{re.escape(EXPANDED)}$"):
        decode_spec_text(padded.replace("c: ", "c: z"), yaml=True, loader=loader)

"""hook.cdi.registry: spec directories, priorities and conflicts as container-device-interface's Cache."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from cdi_helpers import make_fake_node, nvidia_like_spec, write_spec

from hook.cdi import registry as registry_module
from hook.cdi.registry import load_registry, resolve_edits
from hook.util.errors import CdiError


def one_device(kind: str, name: str, env: str) -> dict[str, Any]:
    """A minimal spec: one device whose only edit is an env entry (so the winner is visible)."""
    return {
        "cdiVersion": "0.5.0",
        "kind": kind,
        "devices": [{"name": name, "containerEdits": {"env": [env]}}],
    }


def test_later_directory_wins(tmp_path: Path) -> None:
    """/var/run/cdi (listed later) overrides /etc/cdi for the same device; no error is recorded."""
    write_spec(tmp_path / "etc", "a.json", one_device("x.com/gpu", "0", "FROM=etc"))
    write_spec(tmp_path / "run", "a.yaml", one_device("x.com/gpu", "0", "FROM=run"))
    registry = load_registry([str(tmp_path / "etc"), str(tmp_path / "run")])
    assert resolve_edits(registry, ["x.com/gpu=0"]) == [{}, {"env": ["FROM=run"]}]
    assert registry.errors == {}


def test_same_directory_conflict_drops_device(tmp_path: Path) -> None:
    """Two specs of one directory defining a device: a conflict recorded against both, the device gone."""
    first = write_spec(tmp_path / "etc", "a.json", one_device("x.com/gpu", "0", "FROM=a"))
    second = write_spec(tmp_path / "etc", "b.json", one_device("x.com/gpu", "0", "FROM=b"))
    write_spec(tmp_path / "etc", "c.json", one_device("x.com/gpu", "1", "FROM=c"))
    registry = load_registry([str(tmp_path / "etc")])
    message = f'conflicting device "x.com/gpu=0" (specs "{second}", "{first}")'
    assert registry.errors == {str(first): [message], str(second): [message]}
    assert sorted(registry.devices) == ["x.com/gpu=1"]
    assert registry.conflicts == frozenset({"x.com/gpu=0"})


def test_conflict_in_lower_directory_still_drops_device(tmp_path: Path) -> None:
    """The reference drops a conflicting name even when a higher-priority directory defines it once."""
    write_spec(tmp_path / "etc", "a.json", one_device("x.com/gpu", "0", "FROM=a"))
    write_spec(tmp_path / "etc", "b.json", one_device("x.com/gpu", "0", "FROM=b"))
    write_spec(tmp_path / "run", "c.json", one_device("x.com/gpu", "0", "FROM=c"))
    registry = load_registry([str(tmp_path / "etc"), str(tmp_path / "run")])
    assert "x.com/gpu=0" not in registry.devices


def test_files_skipped_and_errors_recorded(tmp_path: Path) -> None:
    """Only .json/.yaml files count, subdirectories are not entered, a broken spec does not hide the rest."""
    etc = tmp_path / "etc"
    write_spec(etc, "good.json", one_device("x.com/gpu", "0", "A=1"))
    write_spec(etc / "sub", "deep.json", one_device("x.com/gpu", "9", "A=1"))
    (etc / "notes.txt").write_text("{")
    (etc / "spec.yml").write_text("{")
    broken = etc / "broken.json"
    broken.write_text('{"cdiVersion": "0.3.0"}')
    registry = load_registry([str(etc), str(tmp_path / "missing")])
    assert sorted(registry.devices) == ["x.com/gpu=0"]
    assert registry.errors == {str(broken): [f"invalid CDI spec {broken}: kind: invalid vendor. empty name"]}


def test_spec_edits_once_per_spec(tmp_path: Path) -> None:
    """Spec-wide edits come once, before the first device of that spec; devices in request order."""
    node = make_fake_node(tmp_path / "node")
    spec = nvidia_like_spec(node)
    write_spec(tmp_path / "etc", "nvidia.yaml", spec)
    write_spec(tmp_path / "etc", "other.json", one_device("y.com/nic", "a", "NIC=a"))
    registry = load_registry([str(tmp_path / "etc")])
    edits = resolve_edits(registry, ["nvidia.com/gpu=1", "y.com/nic=a", "nvidia.com/gpu=0"])
    common, devices = spec["containerEdits"], spec["devices"]
    assert edits == [
        common,
        devices[1]["containerEdits"],
        {},
        {"env": ["NIC=a"]},
        devices[0]["containerEdits"],
    ]


@pytest.mark.parametrize(
    ("names", "message"),
    [
        pytest.param(["x.com/gpu=7"], r'unresolvable CDI devices "x.com/gpu=7"', id="one"),
        pytest.param(
            ["x.com/gpu=7", "x.com/gpu=0", "gpu\n8"],
            r'unresolvable CDI devices "x.com/gpu=7", "gpu\\n8"',
            id="several-escaped",
        ),
    ],
)
def test_unresolvable(names: list[str], message: str, tmp_path: Path) -> None:
    """Unknown names are refused together, in one line, with their values escaped."""
    write_spec(tmp_path / "etc", "a.json", one_device("x.com/gpu", "0", "A=1"))
    with pytest.raises(CdiError, match=rf"^{message}$"):
        resolve_edits(load_registry([str(tmp_path / "etc")]), names)


BAD_SHAPES = [
    pytest.param(
        "deep.json", "[" * 100_000 + "]" * 100_000, "nested more than 64 levels deep", id="deep-json"
    ),
    pytest.param(
        "deep.yaml", "[" * 100_000 + "]" * 100_000, "nested more than 64 levels deep", id="deep-yaml"
    ),
    pytest.param(
        "bomb.yaml",
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        ),
        "YAML aliases expand the document past 1048576 (its characters and nodes, counted as if every alias were written out)",
        id="alias-bomb",
    ),
    pytest.param(
        "keys.yaml",
        "".join(f"key{i:07d}: {i:07d}\n" for i in range(1_000_000 // 20)),
        "could not read {path}: larger than 262144 bytes",
        id="1mb-many-keys",
    ),
]


def best_of(runs: int, action: Any) -> float:
    """The fastest of ``runs`` timings of ``action()`` (seconds)."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times)


@pytest.mark.parametrize(("name", "text", "reason"), BAD_SHAPES)
def test_bad_spec_harms_no_one_else(name: str, text: str, reason: str, tmp_path: Path) -> None:
    """A spec that cannot be decoded is skipped: another spec's device resolves, adding at most 50 ms; its
    own device is refused naming the skipped file."""
    etc = tmp_path / "etc"
    write_spec(etc, "good.json", one_device("x.com/gpu", "0", "A=1"))

    def create() -> None:
        resolve_edits(load_registry([str(etc)]), ["x.com/gpu=0"])

    before = best_of(5, create)
    bad = etc / name
    bad.write_text(text)
    registry = load_registry([str(etc)])
    assert resolve_edits(registry, ["x.com/gpu=0"]) == [{}, {"env": ["A=1"]}]
    where = reason.format(path=bad) if reason.startswith("could not") else f"invalid CDI spec {bad}: {reason}"
    assert registry.errors == {str(bad): [where]}
    assert registry.skipped == (str(bad),)
    with pytest.raises(
        CdiError, match=rf'^unresolvable CDI devices "x.com/gpu=1" \(skipped specs: "{bad}"\)$'
    ):
        resolve_edits(registry, ["x.com/gpu=1"])
    assert best_of(5, create) - before < 0.050


@pytest.mark.parametrize(
    ("mode", "owner", "reason"),
    [
        pytest.param(0o666, 0, "must not be group- or world-writable (mode 0666)", id="world-writable"),
        pytest.param(0o664, 0, "must not be group- or world-writable (mode 0664)", id="group-writable"),
        pytest.param(0o644, 1000, "must be owned by root (uid 0), is owned by uid 1000", id="other-owner"),
    ],
)
def test_untrusted_spec_skipped(mode: int, owner: int, reason: str, tmp_path: Path) -> None:
    """A spec anyone but root could have written is skipped unread (its hooks would run as root)."""
    etc = tmp_path / "etc"
    write_spec(etc, "good.json", one_device("x.com/gpu", "0", "A=1"))
    loose = write_spec(etc, "loose.json", one_device("x.com/gpu", "1", "B=1"))
    loose.chmod(mode)
    os.chown(loose, owner, 0)
    registry = load_registry([str(etc)])
    assert sorted(registry.devices) == ["x.com/gpu=0"]
    assert registry.errors == {str(loose): [f"untrusted CDI spec {loose}: {reason}"]}
    with pytest.raises(
        CdiError, match=rf'^unresolvable CDI devices "x.com/gpu=1" \(skipped specs: "{loose}"\)$'
    ):
        resolve_edits(registry, ["x.com/gpu=1"])


@pytest.mark.parametrize(
    ("mode", "owner", "reason"),
    [
        pytest.param(0o777, 0, "must not be group- or world-writable (mode 0777)", id="world-writable"),
        pytest.param(0o755, 1000, "must be owned by root (uid 0), is owned by uid 1000", id="other-owner"),
    ],
)
def test_untrusted_spec_directory_skipped(mode: int, owner: int, reason: str, tmp_path: Path) -> None:
    """A spec directory anyone but root could write to: none of its specs is read; the other directory's are."""
    etc, run = tmp_path / "etc", tmp_path / "run"
    write_spec(etc, "good.json", one_device("x.com/gpu", "0", "A=1"))
    write_spec(run, "other.json", one_device("x.com/gpu", "1", "B=1"))
    run.chmod(mode)
    os.chown(run, owner, 0)
    registry = load_registry([str(etc), str(run)])
    assert sorted(registry.devices) == ["x.com/gpu=0"]
    assert registry.errors == {str(run): [f"untrusted CDI spec directory {run}: {reason}"]}
    assert registry.skipped == (str(run),)


def test_a_rescan_decodes_only_what_changed(tmp_path: Path) -> None:
    """A long-running process (the NRI plugin scans at every create) gets the spec it validated before while
    the file's bytes and priority are the same; new bytes (even of the same size, the mtime unchanged) are
    decoded again, a loosened mode is refused with the bytes unchanged, a file moved to another priority is
    read at that priority, and a file no longer listed is forgotten."""
    etc, run = tmp_path / "etc", tmp_path / "run"
    spec = write_spec(etc, "a.json", one_device("x.com/gpu", "0", "V=1"))
    first = load_registry([str(etc), str(run)])
    again = load_registry([str(etc), str(run)])
    assert again.specs[0] is first.specs[0]
    stamp = spec.stat()
    spec.write_text(spec.read_text().replace("V=1", "V=2"))
    os.utime(spec, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    changed = load_registry([str(etc), str(run)])
    assert resolve_edits(changed, ["x.com/gpu=0"]) == [{}, {"env": ["V=2"]}]
    spec.chmod(0o664)
    loosened = load_registry([str(etc), str(run)])
    assert (loosened.devices, loosened.skipped) == ({}, (str(spec),))
    spec.chmod(0o644)
    run.mkdir()
    moved = run / "a.json"
    spec.rename(moved)
    later = load_registry([str(etc), str(run)])
    assert [(s.path, s.priority) for s in later.specs] == [(str(moved), 1)]
    assert str(spec) not in registry_module._SPECS
    assert resolve_edits(later, ["x.com/gpu=0"]) == [{}, {"env": ["V=2"]}]

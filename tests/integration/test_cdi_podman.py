"""Differential: the CDI edits we apply to a config.json vs what podman 4.3.1 generates for ``--device``.

For each case the same spec files sit in scratch CDI directories; podman creates and initialises one
container with ``--device`` and one without, and our ``apply_edits`` applied to the plain one's config.json
must give the other one's, but for two pinned differences (podman 4.3.1 vendors container-device-interface
v0.5.1, we follow the current ``pkg/cdi``):

- ``fileMode``: the current reference fills an unset device-node file mode from the host node; v0.5.1 does
  not (runc then creates the node 0666). We follow the current reference: the container's node gets the
  mode the host's node has, which is what NVIDIA's spec generator expects.
- mount order within one depth: both sort every mount by the number of ``/`` in its destination, stably;
  the order among mounts of equal depth is the order the engine had before injecting, which podman keeps
  internally (sorted by destination) and which differs from its final config.json. So mounts are compared
  as depth-sorted lists, each side ordered by destination within a depth.

podman builds ``process.env`` from a map, so two containers list the same variables in different orders:
variables are compared as sets, and the ones CDI adds must close the list, in the order of the edits.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from busybox import unique_id
from cdi_helpers import FakeNode, make_fake_node, nvidia_like_spec, write_spec
from cdi_podman import created_config, podman_with_cdi, remove
from podman import import_busybox_image, podman

from hook.cdi.edits import apply_edits
from hook.cdi.registry import load_registry, resolve_edits
from hook.util.errors import CdiError
from hook.util.paths import go_clean

pytestmark = pytest.mark.integration
IMAGE = "localhost/gpu-env-hook-busybox"


def one_device(kind: str, name: str, **edits: Any) -> dict[str, Any]:
    return {"cdiVersion": "0.5.0", "kind": kind, "devices": [{"name": name, "containerEdits": edits}]}


@dataclass(frozen=True)
class Case:
    """Spec files per directory (name -> builder of the spec from the scratch node), devices, podman flags."""

    etc: dict[str, Any]
    devices: list[str]
    run: dict[str, Any] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    refused: str | None = None


def nvidia(version: str = "0.5.0") -> Any:
    return lambda node: nvidia_like_spec(node, version=version)


CASES = [
    pytest.param(Case({"nvidia.json": nvidia()}, ["nvidia.com/gpu=0"]), id="nvidia-gpu0"),
    pytest.param(Case({"nvidia.json": nvidia()}, ["nvidia.com/gpu=all"]), id="nvidia-all"),
    pytest.param(
        Case({"nvidia.json": nvidia()}, ["nvidia.com/gpu=1", "nvidia.com/gpu=0"]),
        id="two-devices-spec-edits-once",
    ),
    pytest.param(Case({"nvidia.yaml": nvidia()}, ["nvidia.com/gpu=0"]), id="yaml-spec"),
    pytest.param(
        Case(
            {"x.json": lambda _node: one_device("x.com/env", "a", env=["NEW=1", "OTHER=2"])}, ["x.com/env=a"]
        ),
        id="env-appended",
    ),
    pytest.param(
        Case(
            {
                "x.json": lambda node: one_device(
                    "x.com/mnt",
                    "a",
                    mounts=[
                        {
                            "hostPath": str(node.lib / "libcuda.so.1"),
                            "containerPath": "/etc/hostname",
                            "options": ["ro", "bind"],
                        },
                        {
                            "hostPath": str(node.lib),
                            "containerPath": "/opt/lib",
                            "type": "bind",
                            "options": ["rbind"],
                        },
                    ],
                )
            },
            ["x.com/mnt=a"],
        ),
        id="mounts-replace-and-type",
    ),
    pytest.param(
        Case(
            {
                "x.json": lambda _node: one_device(
                    "x.com/nul",
                    "a",
                    deviceNodes=[
                        {"path": "/dev/xnull", "type": "c", "major": 1, "minor": 3, "permissions": "rw"}
                    ],
                )
            },
            ["x.com/nul=a"],
        ),
        id="minimal-node-no-host-device",
    ),
    pytest.param(
        Case(
            {
                "x.json": lambda _node: one_device(
                    "x.com/hooks",
                    "a",
                    hooks=[
                        {
                            "hookName": stage,
                            "path": "/bin/true",
                            "args": ["true", stage],
                            "env": ["STAGE=" + stage],
                            "timeout": 5,
                        }
                        for stage in (
                            "prestart",
                            "createRuntime",
                            "createContainer",
                            "startContainer",
                            "poststart",
                            "poststop",
                        )
                    ],
                )
            },
            ["x.com/hooks=a"],
        ),
        id="hooks-every-stage",
    ),
    pytest.param(
        Case(
            {"x.json": lambda _node: one_device("x.com/prio", "a", env=["FROM=etc"])},
            ["x.com/prio=a"],
            run={"x.json": lambda _node: one_device("x.com/prio", "a", env=["FROM=run"])},
        ),
        id="run-directory-wins",
    ),
    pytest.param(
        Case(
            {"nvidia.json": nvidia(), "nic.json": lambda _node: one_device("y.com/nic", "n", env=["NIC=1"])},
            ["y.com/nic=n", "nvidia.com/gpu=1"],
        ),
        id="two-vendors",
    ),
    pytest.param(
        Case({"nvidia.json": nvidia()}, ["nvidia.com/gpu=0"], flags=("--user", "1000:1000")),
        id="non-root-user-owns-nodes",
    ),
    pytest.param(
        Case(
            {
                "a.json": lambda _node: one_device("x.com/conflict", "a", env=["A=1"]),
                "b.json": lambda _node: one_device("x.com/conflict", "a", env=["A=2"]),
            },
            ["x.com/conflict=a"],
            refused="unresolvable CDI devices x.com/conflict=a",
        ),
        id="same-directory-conflict-refused",
    ),
    pytest.param(
        Case(
            {"nvidia.json": nvidia()},
            ["nvidia.com/gpu=7"],
            refused="unresolvable CDI devices nvidia.com/gpu=7",
        ),
        id="unknown-device-refused",
    ),
]


@pytest.fixture(scope="module")
def image() -> str:
    import_busybox_image(IMAGE)
    return IMAGE


@pytest.fixture(scope="module")
def plain(image: str) -> Iterator[dict[str, str]]:
    """One container without CDI per set of flags (config.json normalised), created on demand."""
    made: dict[str, str] = {}
    yield made
    remove(*made.values())


def plain_config(plain: dict[str, str], image: str, flags: tuple[str, ...]) -> dict[str, Any]:
    key = " ".join(flags)
    if key not in plain:
        plain[key] = unique_id("cdi-plain")
        podman("create", "--name", plain[key], *flags, image, "true")
        podman("init", plain[key])
    return created_config(plain[key])


def write_specs(case: Case, node: FakeNode, etc: Path, run: Path) -> None:
    for directory, specs in ((etc, case.etc), (run, case.run)):
        for name, build in specs.items():
            write_spec(directory, name, build(node))


def depth(mount: dict[str, Any]) -> int:
    return go_clean(str(mount.get("destination", ""))).count("/")


def pinned(document: dict[str, Any]) -> dict[str, Any]:
    """Drop the pinned differences: device fileMode, mount order within one depth (both checked apart)."""
    out = copy.deepcopy(document)
    for device in out.get("linux", {}).get("devices", []):
        device.pop("fileMode", None)
    mounts = out.get("mounts", [])
    assert [depth(m) for m in mounts] == sorted(depth(m) for m in mounts), "mounts not sorted by depth"
    out["mounts"] = sorted(mounts, key=lambda m: (depth(m), m["destination"]))
    out["process"]["env"] = sorted(out["process"]["env"])
    return out


def added_env(document: dict[str, Any], base: dict[str, Any]) -> list[str]:
    """The variables that close ``document``'s env and whose names ``base`` does not have."""
    names = {entry.partition("=")[0] for entry in base["process"]["env"]}
    env = document["process"]["env"]
    new = [entry for entry in env if entry.partition("=")[0] not in names]
    assert env[len(env) - len(new) :] == new, "added variables are not at the end"
    return new


@pytest.mark.parametrize("case", CASES)
def test_edits_match_podman(case: Case, tmp_path: Path, image: str, plain: dict[str, str]) -> None:
    """Our edits on podman's plain config.json equal podman's own --device config.json (pins aside)."""
    node = make_fake_node(tmp_path / "node")
    etc, run = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    write_specs(case, node, etc, run)
    base = plain_config(plain, image, case.flags)
    registry = load_registry([str(etc), str(run)])
    name = unique_id("cdi-dev")
    device_flags = [arg for device in case.devices for arg in ("--device", device)]
    try:
        podman_with_cdi(
            etc, run, tmp_path, "create", "--name", name, *device_flags, *case.flags, image, "true"
        )
        initialised = podman_with_cdi(etc, run, tmp_path, "init", name, check=False)
        if case.refused is not None:
            assert initialised.returncode != 0
            assert case.refused in initialised.stderr
            with pytest.raises(CdiError, match=r"^unresolvable CDI devices "):
                resolve_edits(registry, case.devices)
            return
        assert initialised.returncode == 0, initialised.stderr
        theirs = created_config(name)
    finally:
        remove(name)
    ours = apply_edits(base, resolve_edits(registry, case.devices))
    assert pinned(ours) == pinned(theirs)
    assert added_env(ours, base) == added_env(theirs, base)
    # The pinned fileMode difference, exactly: ours is the host node's mode where the spec gave none.
    added = [
        d
        for d in ours.get("linux", {}).get("devices", [])
        if d not in base.get("linux", {}).get("devices", [])
    ]
    for device in added:
        host = {f"/dev/nvidia{i}": node.gpu(i) for i in range(2)} | {"/dev/nvidiactl": node.dev / "nvidiactl"}
        if device["path"] in host:
            assert device["fileMode"] == host[device["path"]].stat().st_mode & 0o7777
            assert "fileMode" not in next(
                d for d in theirs["linux"]["devices"] if d["path"] == device["path"]
            )


def podman_init_with(
    etc: Path, tmp_path: Path, image: str, device: str
) -> tuple[int, str, dict[str, Any] | None]:
    """Create and initialise a container with one --device; return init's status, stderr and config.json."""
    name = unique_id("cdi-pin")
    try:
        created = podman_with_cdi(
            etc,
            tmp_path / "run-cdi",
            tmp_path,
            "create",
            "--name",
            name,
            "--device",
            device,
            image,
            "true",
            check=False,
        )
        if created.returncode != 0:
            return created.returncode, created.stderr, None
        initialised = podman_with_cdi(etc, tmp_path / "run-cdi", tmp_path, "init", name, check=False)
        config = created_config(name) if initialised.returncode == 0 else None
        return initialised.returncode, initialised.stderr, config
    finally:
        remove(name)


def test_pinned_newer_spec_versions(tmp_path: Path, image: str) -> None:
    """Pinned: podman 4.3.1 (CDI v0.5.1) knows spec versions up to 0.5.0 only; we accept up to 1.1.0, as the
    current reference does (NVIDIA's generator writes the smallest version its fields need, often 0.5.0+)."""
    node = make_fake_node(tmp_path / "node")
    etc = tmp_path / "etc-cdi"
    write_spec(etc, "nvidia.json", nvidia_like_spec(node, version="0.6.0"))
    status, stderr, _ = podman_init_with(etc, tmp_path, image, "nvidia.com/gpu=0")
    assert status != 0
    assert "unresolvable CDI devices nvidia.com/gpu=0" in stderr
    assert "nvidia.com/gpu=0" in load_registry([str(etc)]).devices


def test_pinned_version_older_than_fields(tmp_path: Path, image: str) -> None:
    """Pinned: a 0.3.0 spec using ``hostPath`` (a 0.5.0 field) works in podman 4.3.1, which checks no minimum
    version; the current reference (and we) refuse it, naming the version needed."""
    node = make_fake_node(tmp_path / "node")
    etc = tmp_path / "etc-cdi"
    path = write_spec(etc, "nvidia.json", nvidia_like_spec(node, version="0.3.0"))
    status, stderr, config = podman_init_with(etc, tmp_path, image, "nvidia.com/gpu=0")
    assert status == 0, stderr
    assert config is not None
    assert any(d["path"] == "/dev/nvidia0" for d in config["linux"]["devices"])
    assert load_registry([str(etc)]).errors == {
        str(path): [
            (
                f"invalid CDI spec {path}: the spec version must be at least v0.5.0 (cdiVersion is "
                '"0.3.0"; name (a device name starting with a digit) needs it)'
            )
        ]
    }


def test_pinned_one_character_class(tmp_path: Path, image: str) -> None:
    """Pinned: podman 4.3.1 panics on a one-character class (``x.com/g=a``: v0.5.1's validator slices out of
    range); the name is valid, and we resolve it as the current reference does."""
    etc = tmp_path / "etc-cdi"
    write_spec(etc, "x.json", one_device("x.com/g", "a", env=["A=1"]))
    status, stderr, _ = podman_init_with(etc, tmp_path, image, "x.com/g=a")
    assert status != 0
    assert "panic: runtime error: slice bounds out of range" in stderr
    assert resolve_edits(load_registry([str(etc)]), ["x.com/g=a"]) == [{}, {"env": ["A=1"]}]


def test_pinned_variable_already_set(tmp_path: Path, image: str, plain: dict[str, str]) -> None:
    """Pinned: podman 4.3.1 injects CDI edits into a spec that has no environment yet and adds the image's and
    its own (PATH, TERM, container, HOSTNAME) afterwards, so a CDI variable of the same name ends up twice in
    its config.json. The reference's rule, which we follow (config.json is complete when we edit it), replaces
    the variable where it stands, so the container sees one value."""
    etc = tmp_path / "etc-cdi"
    write_spec(etc, "x.json", one_device("x.com/env", "a", env=["TERM=dumb", "PATH=/cdi:/bin"]))
    status, stderr, config = podman_init_with(etc, tmp_path, image, "x.com/env=a")
    assert status == 0, stderr
    assert config is not None
    theirs = sorted(e for e in config["process"]["env"] if e.startswith(("TERM=", "PATH=")))
    assert theirs == [
        "PATH=/cdi:/bin",
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "TERM=dumb",
        "TERM=xterm",
    ]
    base = plain_config(plain, image, ())
    ours = apply_edits(base, resolve_edits(load_registry([str(etc)]), ["x.com/env=a"]))
    assert sorted(e for e in ours["process"]["env"] if e.startswith(("TERM=", "PATH="))) == [
        "PATH=/cdi:/bin",
        "TERM=dumb",
    ]
    assert ours["process"]["env"].index("TERM=dumb") == base["process"]["env"].index("TERM=xterm")

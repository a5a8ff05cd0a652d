"""hook.cdi.edits: CDI container edits applied to a config.json dict as ContainerEdits.Apply does."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from hook.cdi.edits import apply_edits, fill_device_node
from hook.util.errors import CdiError


def base(**changes: Any) -> dict[str, Any]:
    """A config.json like runc's spec, with top-level keys replaced."""
    doc: dict[str, Any] = {
        "ociVersion": "1.0.2",
        "process": {"user": {"uid": 0, "gid": 0}, "env": ["PATH=/bin", "A=old", "B=1"]},
        "root": {"path": "rootfs"},
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm"},
        ],
        "linux": {"devices": [{"path": "/dev/x", "type": "c", "major": 1, "minor": 1}]},
    }
    doc.update(changes)
    return doc


def fake_stat(path: str) -> tuple[str, int, int, int]:
    """A host where /host/gpuN is a char device 195:N (0o660), /host/fifo a FIFO, nothing else exists."""
    if path.startswith("/host/gpu"):
        return "c", 195, int(path[len("/host/gpu") :]), 0o660
    if path == "/host/fifo":
        return "p", 0, 0, 0o600
    raise CdiError("lstat " + path + ": no such file or directory")


def apply(doc: dict[str, Any], *edits: dict[str, Any]) -> dict[str, Any]:
    return apply_edits(doc, list(edits), stat=fake_stat)


def test_env_replaced_in_place_and_appended() -> None:
    """A variable already set is replaced where it stands; a new one is appended; later edits win."""
    out = apply(base(), {"env": ["A=new", "C=1"]}, {"env": ["C=2"]})
    assert out["process"]["env"] == ["PATH=/bin", "A=new", "B=1", "C=2"]


def test_device_node_filled_and_cgroup_rule() -> None:
    """Type/major/minor/mode come from the host node; an allow rule with rwm is added."""
    out = apply(base(), {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/host/gpu3"}]})
    assert out["linux"]["devices"][-1] == {
        "path": "/dev/nvidia0",
        "type": "c",
        "major": 195,
        "minor": 3,
        "fileMode": 0o660,
    }
    assert out["linux"]["resources"]["devices"] == [
        {"allow": True, "type": "c", "major": 195, "minor": 3, "access": "rwm"}
    ]


def test_device_node_replaces_same_path_and_takes_user_ids() -> None:
    """A node at an existing device path replaces it; a non-root user's uid/gid become the node's owner."""
    doc = base(process={"user": {"uid": 1000, "gid": 100}, "env": []})
    out = apply(doc, {"deviceNodes": [{"path": "/dev/x", "hostPath": "/host/gpu0", "permissions": "none"}]})
    assert out["linux"]["devices"] == [
        {"path": "/dev/x", "type": "c", "major": 195, "minor": 0, "fileMode": 0o660, "uid": 1000, "gid": 100}
    ]
    assert out["linux"]["resources"]["devices"] == [{"allow": True, "type": "c", "major": 195, "minor": 0}]


def test_minimal_node_needs_no_host_device() -> None:
    """A node with type and major is taken as given when the host has no such path."""
    out = apply(
        base(), {"deviceNodes": [{"path": "/dev/y", "type": "b", "major": 8, "minor": 1, "permissions": "r"}]}
    )
    assert out["linux"]["devices"][-1] == {"path": "/dev/y", "type": "b", "major": 8, "minor": 1}
    assert out["linux"]["resources"]["devices"][-1]["access"] == "r"


@pytest.mark.parametrize(
    ("node", "message"),
    [
        pytest.param(
            {"path": "/dev/q"},
            r'failed to stat CDI host device "/dev/q": lstat /dev/q: no such file or '
            r"directory",
            id="missing",
        ),
        pytest.param(
            {"path": "/dev/q", "hostPath": "/host/gpu0", "type": "b"},
            r'CDI device \("/dev/q", "/host/gpu0"\), host type mismatch \(b, c\)',
            id="type-mismatch",
        ),
    ],
)
def test_device_node_errors(node: dict[str, Any], message: str) -> None:
    """A node the host cannot back is refused, and nothing of the document changes."""
    doc = base()
    with pytest.raises(CdiError, match=rf"^{message}$"):
        apply(doc, {"env": ["Z=1"]}, {"deviceNodes": [node]})
    assert doc == base()


def test_fifo_node_keeps_zero_numbers() -> None:
    """A FIFO gets its type and mode but no major/minor, and no cgroup rule."""
    out = apply(base(), {"deviceNodes": [{"path": "/dev/f", "hostPath": "/host/fifo"}]})
    assert out["linux"]["devices"][-1] == {
        "path": "/dev/f",
        "type": "p",
        "major": 0,
        "minor": 0,
        "fileMode": 0o600,
    }
    assert "resources" not in out["linux"]


def test_mounts_replace_and_sort_stably() -> None:
    """A mount at an existing destination replaces it; then all mounts are sorted by depth, stably."""
    out = apply(
        base(),
        {
            "mounts": [
                {"hostPath": "/h/lib", "containerPath": "/usr/lib/x/libcuda.so", "options": ["ro", "bind"]},
                {"hostPath": "/h/shm", "containerPath": "/dev/shm", "type": "bind"},
                {"hostPath": "/h/top", "containerPath": "/top/"},
            ]
        },
    )
    assert [m["destination"] for m in out["mounts"]] == [
        "/proc",
        "/top/",
        "/dev/shm",
        "/usr/lib/x/libcuda.so",
    ]
    assert out["mounts"][2] == {"destination": "/dev/shm", "type": "bind", "source": "/h/shm"}


def test_user_namespace_bind_mounts_get_idmap() -> None:
    """With a user namespace a bind mount gets idmap (ridmap for rbind), unless one is given."""
    doc = base(linux={"namespaces": [{"type": "user"}]})
    out = apply(
        doc,
        {
            "mounts": [
                {"hostPath": "/a", "containerPath": "/a", "options": ["bind"]},
                {"hostPath": "/b", "containerPath": "/b", "options": ["rbind"]},
                {"hostPath": "/c", "containerPath": "/c", "options": ["bind", "idmap"]},
                {"hostPath": "/d", "containerPath": "/d"},
            ]
        },
    )
    options = {m["destination"]: m.get("options") for m in out["mounts"]}
    assert [options[d] for d in ("/a", "/b", "/c", "/d")] == [
        ["bind", "idmap"],
        ["rbind", "ridmap"],
        ["bind", "idmap"],
        None,
    ]


def test_hooks_gids_rdt_and_net_devices() -> None:
    """Hooks go to their stage; gids are added once and never 0; the last intelRdt wins; net devices keyed."""
    out = apply(
        base(),
        {
            "hooks": [{"hookName": "createContainer", "path": "/h", "args": ["h", "x"], "timeout": 0}],
            "additionalGids": [0, 44, 44],
            "intelRdt": {"closID": "a"},
        },
        {
            "hooks": [{"hookName": "poststop", "path": "/p", "env": []}],
            "additionalGids": [45],
            "intelRdt": {"closID": "b", "enableMonitoring": False},
            "netDevices": [{"hostInterfaceName": "eth1", "name": "net0"}],
        },
    )
    assert out["hooks"] == {
        "createContainer": [{"path": "/h", "args": ["h", "x"], "timeout": 0}],
        "poststop": [{"path": "/p"}],
    }
    assert out["process"]["user"]["additionalGids"] == [44, 45]
    assert out["linux"]["intelRdt"] == {"closID": "b"}
    assert out["linux"]["netDevices"] == {"eth1": {"name": "net0"}}


def test_no_edits_no_change() -> None:
    """Empty edits leave an equal document (mounts are sorted only when a mount is added)."""
    doc = base(mounts=[{"destination": "/a/b"}, {"destination": "/a"}])
    assert apply(doc, {}) == doc


def test_wrong_spec_shape_is_a_spec_error() -> None:
    """A config.json whose linux.devices is not an array is refused as a spec error."""
    from hook.util.errors import SpecError

    with pytest.raises(SpecError, match=r"^could not decode OCI spec: linux.devices must be an array$"):
        apply(base(linux={"devices": {}}), {"deviceNodes": [{"path": "/dev/y", "type": "c", "major": 1}]})


def test_real_character_device(tmp_path: Path) -> None:
    """On a real mknod'ed node, lstat gives the numbers and mode."""
    path = tmp_path / "nvidia7"
    os.mknod(path, 0o640 | stat.S_IFCHR, os.makedev(195, 7))
    path.chmod(0o640)
    assert fill_device_node({"path": "/dev/nvidia7", "hostPath": str(path)}) == {
        "path": "/dev/nvidia7",
        "hostPath": str(path),
        "type": "c",
        "major": 195,
        "minor": 7,
        "fileMode": 0o640,
    }

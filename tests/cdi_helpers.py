"""CDI test material: specs shaped like ``nvidia-ctk cdi generate`` output, over real device nodes made
with mknod in a scratch directory and scratch files standing in for the driver's libraries."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Majors/minors as NVIDIA's nodes have them (195 for /dev/nvidia*, 0..n the GPU index, 255 nvidiactl).
GPU_MAJOR = 195
CTL_MINOR = 255


@dataclass(frozen=True)
class FakeNode:
    """A scratch host: its device nodes, its "libraries" and the marker its hook writes."""

    root: Path

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    @property
    def lib(self) -> Path:
        return self.root / "lib"

    def gpu(self, index: int) -> Path:
        return self.dev / f"nvidia{index}"


def make_fake_node(root: Path, gpus: int = 2) -> FakeNode:
    """Create character devices nvidia0..n and nvidiactl (mknod), two library files and a hook script."""
    node = FakeNode(root)
    node.dev.mkdir(parents=True, exist_ok=True)
    node.lib.mkdir(parents=True, exist_ok=True)
    for index in range(gpus):
        if not node.gpu(index).exists():
            os.mknod(node.gpu(index), 0o666 | stat.S_IFCHR, os.makedev(GPU_MAJOR, index))
    ctl = node.dev / "nvidiactl"
    if not ctl.exists():
        os.mknod(ctl, 0o666 | stat.S_IFCHR, os.makedev(GPU_MAJOR, CTL_MINOR))
    for name in ("libcuda.so.1", "libnvidia-ml.so.1"):
        (node.lib / name).write_text(f"not really {name}\n")
    return node


def nvidia_like_spec(
    node: FakeNode,
    *,
    gpus: int = 2,
    kind: str = "nvidia.com/gpu",
    version: str = "0.5.0",
    hook_path: str = "/bin/true",
    hook_args: list[str] | None = None,
) -> dict[str, Any]:
    """A spec shaped like ``nvidia-ctk cdi generate``: common env, library mounts, a createContainer hook,
    a device node per GPU (type/major/minor left for the engine to fill from the host node)."""
    devices = [
        {
            "name": str(index),
            "containerEdits": {
                "deviceNodes": [{"path": f"/dev/nvidia{index}", "hostPath": str(node.gpu(index))}]
            },
        }
        for index in range(gpus)
    ]
    devices.append(
        {
            "name": "all",
            "containerEdits": {
                "deviceNodes": [
                    {"path": f"/dev/nvidia{index}", "hostPath": str(node.gpu(index))} for index in range(gpus)
                ]
            },
        }
    )
    return {
        "cdiVersion": version,
        "kind": kind,
        "devices": devices,
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu"],
            "deviceNodes": [{"path": "/dev/nvidiactl", "hostPath": str(node.dev / "nvidiactl")}],
            "mounts": [
                {
                    "hostPath": str(node.lib / name),
                    "containerPath": f"/usr/lib/x86_64-linux-gnu/{name}",
                    "options": ["ro", "nosuid", "nodev", "bind"],
                }
                for name in ("libcuda.so.1", "libnvidia-ml.so.1")
            ],
            "hooks": [
                {
                    "hookName": "createContainer",
                    "path": hook_path,
                    "args": hook_args if hook_args is not None else ["nvidia-cdi-hook", "update-ldcache"],
                }
            ],
        },
    }


def write_spec(directory: Path, name: str, spec: dict[str, Any]) -> Path:
    """Write a spec as JSON (``.json``) or YAML (``.yaml``) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    if name.endswith(".yaml"):
        import yaml

        path.write_text(yaml.safe_dump(spec, sort_keys=False))
    else:
        path.write_text(json.dumps(spec, indent=2))
    return path


# A string standing for a secret: what a spec path that is a symlink to a root-only file would hold.
SECRET = "s3cret-7f3a9c"  # noqa: S105 - a marker, not a credential


def write_secret_specs(directory: Path, outside: Path) -> list[tuple[str, str]]:
    """Write into ``directory`` specs whose decoded keys and values hold ``SECRET`` where a refusal would
    quote them (an unknown field, a device name, a variable, a hook name, a kind, a version, a repeated
    key), among them two symlinks to root-only files in ``outside`` (a secret that is no spec at all); return
    each file's name and the reason a container's start gives for skipping it, which names the field and
    its position and nothing of the content (in the order the registry reads them)."""
    directory.mkdir(parents=True, exist_ok=True)
    outside.mkdir(parents=True, exist_ok=True)
    for name, text in (
        ("token.json", json.dumps({f"{SECRET}-key": f"{SECRET}-value"})),
        ("token.yaml", f"{SECRET}: 1\n"),
    ):
        target = outside / name
        target.write_text(text)
        target.chmod(0o600)
        (directory / f"link-{name}").symlink_to(target)
    edits = {"env": ["A=1"]}
    specs: dict[str, dict[str, Any]] = {
        "field.json": {
            "cdiVersion": "0.3.0",
            "kind": "x.com/gpu",
            "devices": [{"name": "0", "containerEdits": {"env": ["A=1"], SECRET: []}}],
        },
        "hook.yaml": {
            "cdiVersion": "0.3.0",
            "kind": "x.com/gpu",
            "devices": [
                {"name": "d", "containerEdits": {"hooks": [{"hookName": SECRET, "path": "/bin/true"}]}}
            ],
        },
        "kind.json": {
            "cdiVersion": "0.3.0",
            "kind": f"x.com/{SECRET}!",
            "devices": [{"name": "d", "containerEdits": edits}],
        },
        "name.yaml": {
            "cdiVersion": "0.3.0",
            "kind": "x.com/gpu",
            "devices": [{"name": f"{SECRET}!x", "containerEdits": edits}],
        },
        "start.json": {
            "cdiVersion": "0.3.0",
            "kind": "x.com/gpu",
            "devices": [{"name": f"-{SECRET}", "containerEdits": edits}],
        },
        "variable.json": {
            "cdiVersion": "0.3.0",
            "kind": "x.com/gpu",
            "devices": [{"name": "d", "containerEdits": {"env": ["A=1", SECRET]}}],
        },
        "version.yaml": {
            "cdiVersion": SECRET,
            "kind": "x.com/gpu",
            "devices": [{"name": "d", "containerEdits": edits}],
        },
    }
    for name, spec in specs.items():
        write_spec(directory, name, spec)
    (directory / "repeated.json").write_text(
        '{"cdiVersion": "0.3.0", "annotations": {"' + SECRET + '": "1", "' + SECRET + '": "2"}}'
    )
    for path in directory.iterdir():
        if not path.is_symlink():
            path.chmod(0o644)
    stages = "prestart, createRuntime, createContainer, startContainer, poststart, poststop"
    return [
        ("field.json", "devices[0].containerEdits has an unknown field (its field 2)"),
        (
            "hook.yaml",
            f"devices[0].containerEdits.hooks[0].hookName: invalid hook name (want one of {stages})",
        ),
        ("kind.json", "kind: invalid class. should end with a letter or digit"),
        ("link-token.json", "the spec has an unknown field (its field 1)"),
        ("link-token.yaml", "the spec has an unknown field (its field 1)"),
        ("name.yaml", f"devices[0].name: invalid character at index {len(SECRET)} in device name"),
        ("repeated.json", "repeated field in annotations (its field 2)"),
        ("start.json", "devices[0].name: invalid device name, should start with a letter or digit"),
        ("variable.json", "devices[0].containerEdits.env[1]: invalid environment variable"),
        ("version.yaml", "invalid version in cdiVersion"),
    ]

"""The CDI commands: cdi list/validate, per-allocation specs (API and commands), resolve and doctor in CDI mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cdi_helpers import FakeNode, make_fake_node, nvidia_like_spec, write_spec
from typer.testing import CliRunner

from hook.cdi.registry import load_registry
from hook.cdi.spec import load_spec
from hook.commands.cdidoctor import (
    check_nvidia_runtime_mode,
    check_nvidia_spec,
    check_skipped_specs,
    check_yaml_loader,
)
from hook.commands.cli import build_app
from hook.install.coexist import Finding
from hook.pipeline.config import parse_config
from hook.producer.alloc import (
    alloc_device,
    alloc_name,
    alloc_pins,
    alloc_spec_path,
    build_alloc_spec,
    gc_alloc_specs,
    list_alloc_specs,
    write_alloc_spec,
)
from hook.producer.namekey import legacy_name
from hook.util.errors import CdiError, UsageError


class Node:
    """A scratch node: devices, NVIDIA-shaped spec in etc-cdi, an empty run-cdi, and a CDI-mode config."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.node: FakeNode = make_fake_node(tmp_path / "node")
        self.etc, self.run = tmp_path / "etc-cdi", tmp_path / "run-cdi"
        self.spec_path = write_spec(self.etc, "nvidia.yaml", nvidia_like_spec(self.node, version="0.5.0"))
        self.config = tmp_path / "config.toml"
        self.config.write_text(
            f'[gpu-env]\ndevice-mode = "cdi"\n\n[gpu-env.cdi]\nspec-dirs = ["{self.etc}", "{self.run}"]\n'
            f'spec-cache = "{tmp_path / "spec-cache"}"\n'
        )

    def invoke(self, *args: str) -> tuple[int, str, str]:
        result = CliRunner().invoke(build_app(config=str(self.config)), list(args))
        return result.exit_code, result.stdout, result.stderr

    def settings(self) -> Any:
        return parse_config(self.config.read_text(), source=str(self.config), suse=False)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def test_alloc_name_is_order_free() -> None:
    """The allocation's device depends on the set of ids only, as the env file's name does."""
    assert (
        alloc_device(["b", "a", "a"])
        == alloc_device(["a", "b"])
        == f"gpu-env.dev/alloc={alloc_name(['a', 'b'])}"
    )
    assert len(alloc_name(["a"])) == 32


def test_alloc_spec_carries_real_edits_and_variables(node: Node) -> None:
    """One device with the real devices' edits (spec-wide ones once), the variables, void; smallest version."""
    registry = load_registry([str(node.etc)])
    spec = build_alloc_spec(
        "0123456789abcdef",
        ["1", "nvidia.com/gpu=0"],
        {"USER_X": "1"},
        registry,
        default_kind="nvidia.com/gpu",
    )
    assert spec["cdiVersion"] == "0.5.0"  # hostPath needs 0.5.0; nothing newer is used
    assert spec["kind"] == "gpu-env.dev/alloc"
    (device,) = spec["devices"]
    edits = device["containerEdits"]
    assert [n["path"] for n in edits["deviceNodes"]] == ["/dev/nvidiactl", "/dev/nvidia1", "/dev/nvidia0"]
    assert edits["env"][-2:] == ["USER_X=1", "NVIDIA_VISIBLE_DEVICES=void"]
    assert len(edits["hooks"]) == 1
    assert len(edits["mounts"]) == 2


@pytest.mark.parametrize(
    ("devices", "values", "message"),
    [
        pytest.param([], {}, r"cdi alloc: at least one real device is required", id="no-device"),
        pytest.param(
            ["gpu-env.dev/alloc=0123456789abcdef"],
            {},
            r'cdi alloc: "gpu-env.dev/alloc=0123456789abcdef" is '
            r"an allocation, not a real device",
            id="nested",
        ),
        pytest.param(
            ["0"],
            {"LD_PRELOAD": "/x.so"},
            r"cdi alloc: key LD_PRELOAD matches LD_\* and may not be set for a container",
            id="refused-key",
        ),
        pytest.param(
            ["0"],
            {"GPU_ENV_HOOK_POD_UID": "x"},
            r"cdi alloc: key GPU_ENV_HOOK_POD_UID is reserved: the pod "
            r"is given with the --pod options",
            id="reserved-key",
        ),
    ],
)
def test_alloc_spec_refusals(devices: list[str], values: dict[str, str], message: str, node: Node) -> None:
    """What an allocation may not carry, each refused in one line."""
    with pytest.raises(UsageError, match=rf"^{message}$"):
        build_alloc_spec(
            "0123456789abcdef", devices, values, load_registry([str(node.etc)]), default_kind="nvidia.com/gpu"
        )


def test_alloc_spec_unknown_real_device(node: Node) -> None:
    """A real device the node's specs do not define is refused before anything is written."""
    with pytest.raises(CdiError, match=r'^unresolvable CDI devices "nvidia.com/gpu=9"$'):
        build_alloc_spec(
            "0123456789abcdef", ["9"], {}, load_registry([str(node.etc)]), default_kind="nvidia.com/gpu"
        )


def test_write_replaces_other_pods_and_gc(node: Node) -> None:
    """Writing moves the allocation to its pod (another pod's copy goes); gc removes specs of dead pods."""
    registry = load_registry([str(node.etc)])
    name = alloc_name(["v1"])
    spec = build_alloc_spec(name, ["0"], {}, registry, default_kind="nvidia.com/gpu")
    old = write_alloc_spec(spec, alloc_pins("pod-old"), str(node.run))
    other = write_alloc_spec(
        build_alloc_spec(alloc_name(["v2"]), ["1"], {}, registry, default_kind="nvidia.com/gpu"),
        alloc_pins("pod-b"),
        str(node.run),
    )
    new = write_alloc_spec(spec, alloc_pins("pod-new"), str(node.run))
    assert not Path(old).exists()
    assert Path(new).name == f"gpu-env.dev-alloc_{name}_pod-new.json"
    assert Path(new).stat().st_mode & 0o777 == 0o600
    assert load_spec(new).devices[name]["containerEdits"]["env"][-1] == "NVIDIA_VISIBLE_DEVICES=void"
    assert sorted(s.pod for s in list_alloc_specs(str(node.run))) == ["pod-b", "pod-new"]
    assert gc_alloc_specs(frozenset({"pod-new"}), str(node.run)) == ([other], [])
    assert [s.path for s in list_alloc_specs(str(node.run))] == [new]
    # The node's registry now resolves the allocation like any device.
    assert f"gpu-env.dev/alloc={name}" in load_registry([str(node.etc), str(node.run)]).devices


def unkeyed_spec(node: Node, ids: list[str], pod_uid: str) -> Path:
    """An allocation spec as written before the naming key: named by the plain sha256 of the ids (written as
    such a version wrote it, which removed no other pod's spec of another name)."""
    registry = load_registry([str(node.etc)])
    spec = build_alloc_spec(legacy_name(ids), ["0"], {}, registry, default_kind="nvidia.com/gpu")
    node.run.mkdir(exist_ok=True)
    path = Path(alloc_spec_path(legacy_name(ids), alloc_pins(pod_uid), str(node.run)))
    path.write_text(json.dumps(spec))
    path.chmod(0o600)
    return path


def run_hook(node: Node, *args: str) -> tuple[int, str, str]:
    """``gpu-env-hook -config CONFIG ARGS`` as a device plugin runs it: the real process."""
    done = subprocess.run(
        [sys.executable, "-I", "-m", "hook", "-config", str(node.config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def write_v1(node: Node) -> tuple[int, str, str]:
    """Run ``cdi alloc write`` as a device plugin does: id v1 (device 0) for pod-new, in ``node.run``."""
    args = ["--pod-uid", "pod-new", "--id", "v1", "--device", "0", "--dir", str(node.run)]
    return run_hook(node, "cdi", "alloc", "write", *args)


def test_alloc_write_retires_the_unkeyed_spec_of_its_ids(node: Node) -> None:
    """Writing ids for a pod removes their spec named before the key when it is another pod's (a native CDI
    engine would still resolve that computable name to devices now another pod's); the same pod's
    unkeyed spec (its containers may name it), other ids' and a file that is not ours stay."""
    old = unkeyed_spec(node, ["v1"], "pod-old")
    same_pod = unkeyed_spec(node, ["v1"], "pod-new")
    other_ids = unkeyed_spec(node, ["v2"], "pod-b")
    not_ours = node.run / f"gpu-env.dev-alloc_{legacy_name(['v1'])}_pod-x.json"
    not_ours.write_text(json.dumps({"cdiVersion": "0.5.0", "kind": "vendor.com/x", "devices": []}))
    code, out, err = write_v1(node)
    keyed = node.run / f"gpu-env.dev-alloc_{alloc_name(['v1'])}_pod-new.json"
    assert (code, out, err) == (0, f"{alloc_device(['v1'])}\t{keyed}\n", "")
    assert sorted(node.run.iterdir()) == sorted([keyed, same_pod, other_ids, not_ours])
    assert not old.exists()
    unkeyed = f"gpu-env.dev/alloc={legacy_name(['v1'])}"
    assert load_registry([str(node.run)]).devices[unkeyed][0].path == str(same_pod)


def test_alloc_write_writes_nothing_when_the_old_spec_cannot_go(node: Node) -> None:
    """The old name is retired before the new spec is written: when it cannot be (here a directory has its
    name), the write is refused in one line and nothing is written or lost."""
    blocker = node.run / f"gpu-env.dev-alloc_{legacy_name(['v1'])}_pod-old.json"
    (blocker / "inside").mkdir(parents=True)
    code, out, err = write_v1(node)
    assert (code, out) == (1, "")
    assert err == f"gpu-env-hook: could not remove CDI spec {blocker}: Is a directory\n"
    assert [p.name for p in node.run.iterdir()] == [blocker.name]
    assert (blocker / "inside").is_dir()


def test_unkeyed_alloc_names_refuse_ends_the_migration(node: Node) -> None:
    """[gpu-env.cdi] unkeyed-alloc-names = "refuse": every write and every gc removes every spec named before
    the key, whoever's, live pods' too; keyed specs and files that are not ours stay."""
    node.config.write_text(node.config.read_text() + 'unkeyed-alloc-names = "refuse"\n')
    live = unkeyed_spec(node, ["v2"], "pod-b")
    not_ours = node.run / f"gpu-env.dev-alloc_{legacy_name(['v2'])}_pod-x.json"
    not_ours.write_text("not a spec")
    code, _, err = write_v1(node)
    keyed = node.run / f"gpu-env.dev-alloc_{alloc_name(['v1'])}_pod-new.json"
    assert (code, err) == (0, "")
    assert sorted(node.run.iterdir()) == sorted([keyed, not_ours])
    again = unkeyed_spec(node, ["v3"], "pod-c")
    code, out, err = run_hook(
        node,
        "cdi",
        "alloc",
        "gc",
        "--live",
        "pod-c",
        "--live",
        "pod-new",
        "--live",
        "pod-x",
        "--dir",
        str(node.run),
    )
    assert (code, out, err) == (0, f"removed {again}\n", "")
    assert not live.exists()
    assert sorted(node.run.iterdir()) == sorted([keyed, not_ours])


def test_cli_alloc_write_name_remove_gc(node: Node) -> None:
    """The commands a device plugin runs: name in Allocate, write in PreStartContainer, remove, gc."""
    code, out, err = node.invoke("cdi", "alloc", "name", "v2", "v1")
    assert (code, err) == (0, "")
    device = out.strip()
    assert device == alloc_device(["v1", "v2"])
    code, out, err = node.invoke(
        "cdi",
        "alloc",
        "write",
        "--pod-uid",
        "pod-1",
        "--id",
        "v1",
        "--id",
        "v2",
        "--device",
        "nvidia.com/gpu=1",
        "--dir",
        str(node.run),
        "USER_X=hello",
    )
    assert (code, err) == (0, "")
    written = node.run / f"gpu-env.dev-alloc_{alloc_name(['v1', 'v2'])}_pod-1.json"
    assert out == f"{device}\t{written}\n"
    assert json.loads(written.read_text())["devices"][0]["containerEdits"]["env"][-2] == "USER_X=hello"
    code, out, _ = node.invoke("cdi", "list")
    assert code == 0
    assert f"{device}  {written}" in out.splitlines()
    pods = node.tmp / "pods"
    (pods / "pod-1").mkdir(parents=True)
    assert node.invoke("cdi", "alloc", "gc", "--kubelet-pods", str(pods), "--dir", str(node.run))[1] == ""
    assert written.exists()
    (pods / "pod-1").rmdir()
    assert node.invoke("cdi", "alloc", "gc", "--kubelet-pods", str(pods), "--dir", str(node.run))[1] == (
        f"removed {written}\n"
    )
    node.invoke(
        "cdi", "alloc", "write", "--pod-uid", "pod-2", "--id", "v3", "--device", "0", "--dir", str(node.run)
    )
    code, out, _ = node.invoke("cdi", "alloc", "remove", "v3", "--dir", str(node.run))
    assert out == f"removed {node.run / ('gpu-env.dev-alloc_' + alloc_name(['v3']) + '_pod-2.json')}\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--pod-uid", "../x", "--id", "v", "--device", "0"],
            "gpu-env-hook: cdi alloc: --pod-uid \"../x\" must be letters, digits and '-'",
            id="bad-pod-uid",
        ),
        pytest.param(
            ["--pod-uid", "p", "--device", "0"],
            "gpu-env-hook: cdi alloc write: at least one --id is required",
            id="no-id",
        ),
        pytest.param(
            ["--pod-uid", "p", "--id", "v", "--device", "0", "NOEQUALS"],
            "gpu-env-hook: cdi alloc write: 'NOEQUALS' is not KEY=VALUE",
            id="bad-assignment",
        ),
    ],
)
def test_cli_alloc_write_refusals(args: list[str], message: str, node: Node) -> None:
    """Bad input: one line, exit 2, nothing written."""
    code, out, err = node.invoke("cdi", "alloc", "write", "--dir", str(node.run), *args)
    assert (code, out, err) == (2, "", message + "\n")
    assert not node.run.exists() or not list(node.run.iterdir())


def test_cli_list_shows_conflicts_and_errors(node: Node) -> None:
    """cdi list: devices with their file, a conflict, and a broken file (exit 1)."""
    other = write_spec(
        node.etc,
        "other.json",
        {
            "cdiVersion": "0.3.0",
            "kind": "x.com/nic",
            "devices": [{"name": "a", "containerEdits": {"env": ["A=1"]}}],
        },
    )
    twin = write_spec(
        node.etc,
        "twin.json",
        {
            "cdiVersion": "0.3.0",
            "kind": "x.com/nic",
            "devices": [{"name": "a", "containerEdits": {"env": ["A=2"]}}],
        },
    )
    broken = node.etc / "broken.json"
    broken.write_text("{")
    code, out, _ = node.invoke("cdi", "list")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"spec directories (later wins): {node.etc}, {node.run}"
    assert lines[1].split() == ["nvidia.com/gpu=0", str(node.spec_path)]
    assert "conflict: x.com/nic=a (defined twice at one priority; no engine resolves it)" in lines
    assert f'error: conflicting device "x.com/nic=a" (specs "{twin}", "{other}")' in lines
    assert f"error: invalid CDI spec {broken}: not valid JSON or YAML at line 2 column 1" in lines
    code, out, _ = node.invoke("cdi", "list", "--json")
    assert json.loads(out)["conflicts"] == ["x.com/nic=a"]


def test_cli_validate(node: Node, tmp_path: Path) -> None:
    """cdi validate FILE: the verdict with the version the fields need, or the one-line reason."""
    code, out, err = node.invoke("cdi", "validate", str(node.spec_path))
    assert (code, err) == (0, "")
    assert out == (
        f"{node.spec_path}: valid CDI spec, kind nvidia.com/gpu, cdiVersion 0.5.0 (its fields need 0.5.0), "
        "3 devices\n"
    )
    bad = write_spec(
        tmp_path,
        "bad.json",
        {
            "cdiVersion": "0.4.0",
            "kind": "a.com/b",
            "devices": [{"name": "0", "containerEdits": {"env": ["A=1"]}}],
        },
    )
    code, out, err = node.invoke("cdi", "validate", str(bad))
    assert (code, out) == (1, "")
    assert err == (
        f"gpu-env-hook: invalid CDI spec {bad}: the spec version must be at least v0.5.0 (cdiVersion is "
        '"0.4.0"; name (a device name starting with a digit) needs it)\n'
    )


def test_resolve_shows_cdi_edits(node: Node, tmp_path: Path) -> None:
    """resolve in CDI mode: the CDI devices, their spec file and each edit the shim would apply."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(
        json.dumps(
            {
                "ociVersion": "1.0.2",
                "root": {"path": "rootfs"},
                "process": {"env": ["NVIDIA_VISIBLE_DEVICES=1"]},
            }
        )
    )
    code, out, err = node.invoke("resolve", "--bundle", str(bundle))
    assert (code, err) == (0, "")
    assert "CDI mode: the shim or precreate stage applies these CDI edits before the runtime starts" in out
    tail = out[out.index("CDI devices:") :].splitlines()
    assert tail[:3] == [
        "CDI devices: nvidia.com/gpu=1",
        f"  from {node.spec_path}",
        "env: NVIDIA_VISIBLE_DEVICES=void",
    ]
    assert f"device node: /dev/nvidia1 (host {node.node.gpu(1)})" in tail
    assert "hook (createContainer): nvidia-cdi-hook update-ldcache" in tail
    assert tail[-1] == "then: NVIDIA_VISIBLE_DEVICES=void"
    code, out, _ = node.invoke("resolve", "--bundle", str(bundle), "--json")
    document = json.loads(out)
    assert document["outcome"] == "cdi"
    assert document["cdi"]["devices"] == ["nvidia.com/gpu=1"]


def test_resolve_refuses_unknown_cdi_device(node: Node, tmp_path: Path) -> None:
    """resolve says what stops the container in CDI mode: the device no spec defines."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(
        json.dumps(
            {
                "ociVersion": "1.0.2",
                "root": {"path": "rootfs"},
                "process": {"env": ["NVIDIA_VISIBLE_DEVICES=5"]},
            }
        )
    )
    code, _, err = node.invoke("resolve", "--bundle", str(bundle))
    assert code == 1
    assert err == 'gpu-env-hook: unresolvable CDI devices "nvidia.com/gpu=5"\n'


@pytest.mark.parametrize(
    ("mode", "ours", "ok", "detail"),
    [
        pytest.param(
            "auto",
            "legacy",
            None,
            "NVIDIA runtime mode auto (jit-cdi with toolkit 1.18 and later, legacy "
            "before); ours device-mode legacy",
            id="auto-legacy",
        ),
        pytest.param(
            "jit-cdi",
            "legacy",
            False,
            "NVIDIA runtime mode jit-cdi (CDI specs generated per container; hooks "
            "named nvidia-container-runtime-hook dropped); ours device-mode legacy",
            id="jit-cdi-legacy-fails",
        ),
        pytest.param(
            "cdi",
            "cdi",
            True,
            "NVIDIA runtime mode cdi (CDI devices from the specs; hooks named "
            "nvidia-container-runtime-hook dropped); ours device-mode cdi",
            id="cdi-cdi",
        ),
        pytest.param(
            "legacy",
            "legacy",
            True,
            "NVIDIA runtime mode legacy (NVIDIA's hook and nvidia-container-cli); ours device-mode legacy",
            id="legacy-legacy",
        ),
    ],
)
def test_doctor_runtime_mode(mode: str, ours: str, ok: bool | None, detail: str) -> None:
    """doctor reports NVIDIA's runtime mode, and fails the pairing that hands GPUs over wrongly."""
    settings = parse_config(
        f'[nvidia-container-runtime]\nmode = "{mode}"\n[gpu-env]\ndevice-mode = "{ours}"\n', suse=False
    )
    check = check_nvidia_runtime_mode(settings)
    assert (check.ok, check.detail) == (ok, detail)


def test_doctor_nvidia_spec_present_current_stale(node: Node) -> None:
    """NVIDIA's spec: current when every host path exists; stale once a library it mounts is gone; missing."""
    check = check_nvidia_spec("/", node.settings())
    assert (check.ok, check.detail) == (True, f"{node.spec_path}: cdiVersion 0.5.0, 3 devices, current")
    (node.node.lib / "libnvidia-ml.so.1").unlink()
    check = check_nvidia_spec("/", node.settings())
    assert check.ok is False
    assert (
        check.detail == f"{node.spec_path} is stale: {node.node.lib / 'libnvidia-ml.so.1'} no longer exist(s)"
    )
    node.spec_path.unlink()
    check = check_nvidia_spec("/", node.settings())
    assert (check.ok, check.detail) == (False, f"no spec of kind nvidia.com/gpu in {node.etc}, {node.run}")


def test_doctor_lists_cdi_checks(node: Node) -> None:
    """The doctor command's report carries both CDI lines."""
    code, out, _ = node.invoke("doctor")
    assert "device mode" in out
    assert "NVIDIA CDI spec" in out
    assert code in (0, 1)
    assert node.spec_path.exists()


def test_doctor_warns_without_libyaml(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """doctor says when PyYAML lacks libyaml's CSafeLoader (YAML specs then parse in pure Python)."""
    import yaml

    assert check_yaml_loader(node.settings()) == Finding(
        "YAML specs", ok=True, detail=f"PyYAML {yaml.__version__} with libyaml's CSafeLoader"
    )
    monkeypatch.delattr(yaml, "CSafeLoader")
    check = check_yaml_loader(node.settings())
    assert (check.ok, check.detail) == (
        False,
        f"PyYAML {yaml.__version__} lacks libyaml (CSafeLoader): YAML specs are read in pure Python",
    )
    _, out, _ = node.invoke("doctor")
    assert "lacks libyaml (CSafeLoader)" in out


def test_cli_validate_says_untrusted(node: Node) -> None:
    """cdi validate: a valid spec that the shim would skip as untrusted (file 0666, or its directory not root's)
    fails, saying why, in one line."""
    node.spec_path.chmod(0o666)
    code, out, err = node.invoke("cdi", "validate", str(node.spec_path))
    assert (code, out) == (1, "")
    assert err == (
        f"gpu-env-hook: {node.spec_path}: valid CDI spec, kind nvidia.com/gpu, cdiVersion 0.5.0 (its fields "
        "need 0.5.0), 3 devices; but untrusted where it is (the file must not be group- or world-writable "
        "(mode 0666)): the shim skips it\n"
    )
    node.spec_path.chmod(0o644)
    os.chown(node.spec_path.parent, 1000, 0)
    code, _, err = node.invoke("cdi", "validate", str(node.spec_path))
    assert code == 1
    assert err.endswith(
        "(its directory must be owned by root (uid 0), is owned by uid 1000): the shim skips it\n"
    )
    check = check_skipped_specs("/", node.settings())
    assert check.ok is False
    assert check.detail == (
        f"untrusted CDI spec directory {node.spec_path.parent}: must be owned by root (uid 0), is owned by "
        "uid 1000"
    )


def test_alloc_gc_leaves_foreign_files_and_reports_unremovable(node: Node) -> None:
    """cdi alloc gc removes only files named as cdi alloc write names them (prefix, hex name, pod, .json);
    it goes on past one it cannot remove, reports it in one line and exits 1."""
    registry = load_registry([str(node.etc)])
    spec = build_alloc_spec(alloc_name(["v1"]), ["0"], {}, registry, default_kind="nvidia.com/gpu")
    dead = Path(write_alloc_spec(spec, alloc_pins("dead"), str(node.run)))
    spec2 = build_alloc_spec(alloc_name(["v2"]), ["1"], {}, registry, default_kind="nvidia.com/gpu")
    stuck = Path(write_alloc_spec(spec2, alloc_pins(pod_namespace="ns", pod_name="gone"), str(node.run)))
    foreign = [
        node.run / "gpu-env.dev-alloc_notahash_dead.json",
        node.run / "gpu-env.dev-alloc_0123456789abcdef_dead.yaml",
        node.run / "gpu-env.dev-alloc_0123456789abcdef_../x.json".replace("/", "-"),
        node.run / "other-vendor.json",
    ]
    for path in foreign:
        path.write_text("{}")
    # A spec it cannot remove: its name is a non-empty directory.
    blocker = node.run / ("gpu-env.dev-alloc_" + "a" * 32 + "_dead.json")
    (blocker / "inside").mkdir(parents=True)
    code, out, err = node.invoke("cdi", "alloc", "gc", "--live", "pod-x", "--dir", str(node.run))
    assert code == 1
    assert sorted(out.splitlines()) == sorted([f"removed {dead}", f"removed {stuck}"])
    (line,) = err.splitlines()
    assert line.startswith(f"gpu-env-hook: could not remove CDI spec {blocker}: ")
    assert all(path.exists() for path in foreign)

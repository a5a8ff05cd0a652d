"""CDI mode: hook.pipeline.cdidevices, and the shim, precreate and prestart stages with device-mode = "cdi"."""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from cdi_helpers import make_fake_node, nvidia_like_spec, write_spec
from conftest import MakeEnvFile

from hook.pipeline.cdidevices import alloc_file_pins, cdi_device_names, resolve_cdi_spec
from hook.pipeline.config import parse_config
from hook.pipeline.nvcli import CDI_MODE_MESSAGE, DIRECT_INVOCATION_MESSAGE, check_mode
from hook.stages.precreate import resolve_precreate
from hook.stages.shim import resolve_spec
from hook.util.errors import CdiError, ConfigError, RequestError

HOOK: dict[str, object] = {"path": "/usr/bin/python3", "args": ["python3", "-I", "-m", "hook", "prestart"]}


@pytest.mark.parametrize(
    ("devices", "names"),
    [
        pytest.param(
            ["0", "GPU-1a2b", "0:1"],
            ["nvidia.com/gpu=0", "nvidia.com/gpu=GPU-1a2b", "nvidia.com/gpu=0:1"],
            id="plain-ids-default-kind",
        ),
        pytest.param(["all"], ["nvidia.com/gpu=all"], id="all"),
        pytest.param(["x.com/nic=a", "1"], ["x.com/nic=a", "nvidia.com/gpu=1"], id="qualified-kept"),
        pytest.param([""], [], id="none-asks-nothing"),
        pytest.param(["1", "nvidia.com/gpu=1"], ["nvidia.com/gpu=1"], id="once-each"),
    ],
)
def test_cdi_device_names(devices: list[str], names: list[str]) -> None:
    """Plain ids, UUIDs and ``all`` name devices of the default kind; qualified names stay."""
    assert cdi_device_names(devices, "nvidia.com/gpu") == names


class Node:
    """A scratch node with NVIDIA-shaped specs, and config.toml text in CDI mode for it."""

    def __init__(self, tmp_path: Path, extra: str = "") -> None:
        self.node = make_fake_node(tmp_path / "node")
        self.etc = tmp_path / "etc-cdi"
        write_spec(self.etc, "nvidia.json", nvidia_like_spec(self.node))
        self.config = (
            f'{extra}[env-file]\ndirectories = ["{tmp_path / "nvidia-env"}"]\n\n'
            f'[gpu-env]\ndevice-mode = "cdi"\n\n[gpu-env.cdi]\nspec-dirs = ["{self.etc}"]\n'
            f'spec-cache = "{tmp_path / "spec-cache"}"\n'
        )

    def settings(self) -> Any:
        return parse_config(self.config, source="c.toml", suse=False)


def document(env: list[str], **extra: Any) -> dict[str, Any]:
    doc = {
        "ociVersion": "1.0.2",
        "process": {"env": env, "args": ["sh"], "user": {"uid": 0, "gid": 0}},
        "root": {"path": "rootfs"},
    }
    return {**doc, **extra}


def visible(doc: dict[str, Any]) -> list[str]:
    return [e for e in doc["process"]["env"] if e.startswith("NVIDIA_VISIBLE_DEVICES=")]


def device_paths(doc: dict[str, Any]) -> list[str]:
    return [d["path"] for d in doc.get("linux", {}).get("devices", [])]


def test_shim_injects_cdi_edits_instead_of_hook(tmp_path: Path, make_env_file: MakeEnvFile) -> None:
    """The shim in CDI mode: the env file's device becomes CDI edits, no prestart hook, NVIDIA_VISIBLE_DEVICES=void."""
    node = Node(tmp_path)
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1\n")
    edited = resolve_spec(
        document([f"NVIDIA_ENV_FROM_FILE={env_file}"]), node.config, source="c.toml", hook=HOOK
    )
    assert edited is not None
    assert device_paths(edited) == ["/dev/nvidiactl", "/dev/nvidia1"]
    assert visible(edited) == ["NVIDIA_VISIBLE_DEVICES=void"]
    hooks: Any = edited["hooks"]
    assert "prestart" not in hooks
    assert hooks["createContainer"][0]["path"] == "/bin/true"


def test_shim_legacy_default_still_adds_hook(tmp_path: Path) -> None:
    """Without device-mode the shim adds NVIDIA's hook as before and applies no CDI edit."""
    edited = resolve_spec(document(["NVIDIA_VISIBLE_DEVICES=0"]), None, source=None, hook=HOOK)
    assert edited is not None
    hooks: Any = edited["hooks"]
    assert [entry["path"] for entry in hooks["prestart"]] == [HOOK["path"]]
    assert "linux" not in edited


def test_precreate_injects_for_image_request(tmp_path: Path) -> None:
    """podman's precreate stage in CDI mode applies edits for an image's own NVIDIA_VISIBLE_DEVICES too."""
    node = Node(tmp_path)
    raw = json.dumps(document(["NVIDIA_VISIBLE_DEVICES=0"])).encode()
    out = json.loads(resolve_precreate(raw, node.config, source="c.toml"))
    assert device_paths(out) == ["/dev/nvidiactl", "/dev/nvidia0"]
    assert visible(out) == ["NVIDIA_VISIBLE_DEVICES=void"]


def test_precreate_non_gpu_echoed(tmp_path: Path) -> None:
    """A container asking for no GPU goes back byte for byte in CDI mode."""
    raw = json.dumps(document(["PATH=/bin"])).encode()
    assert resolve_precreate(raw, Node(tmp_path).config, source="c.toml") is raw


def test_unresolvable_from_image_names_device(tmp_path: Path) -> None:
    """A device the image asks for that no spec defines: named (escaped) in the one line."""
    node = Node(tmp_path)
    with pytest.raises(CdiError, match=r'^unresolvable CDI devices "nvidia.com/gpu=7"$'):
        resolve_cdi_spec(document(["NVIDIA_VISIBLE_DEVICES=7"]), node.settings(), None)


def test_unresolvable_from_env_file_names_file(tmp_path: Path, make_env_file: MakeEnvFile) -> None:
    """A device the env file asks for that no spec defines: the file is named, its content never shown."""
    node = Node(tmp_path)
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=secret7\n")
    raw = json.dumps(document([f"NVIDIA_ENV_FROM_FILE={env_file}"])).encode()
    message = f"env file '{env_file}': a device it requests is defined by no CDI spec in {node.etc}"
    with pytest.raises(CdiError, match=rf"^{message}$"):
        resolve_precreate(raw, node.config, source="c.toml")


@pytest.mark.parametrize(
    ("file", "devices"),
    [
        pytest.param("NVIDIA_VISIBLE_DEVICES=1\n", [], id="unpinned-file-gated"),
        pytest.param(
            "GPU_ENV_HOOK_POD_UID=pod-1\nNVIDIA_VISIBLE_DEVICES=1\n",
            ["/dev/nvidiactl", "/dev/nvidia1"],
            id="pinned-file-trusted",
        ),
        pytest.param("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1\n", [], id="cdi-name-unpinned-file-gated"),
        pytest.param(
            "GPU_ENV_HOOK_POD_UID=pod-1\nNVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1\n",
            ["/dev/nvidiactl", "/dev/nvidia1"],
            id="cdi-name-pinned-file-trusted",
        ),
    ],
)
def test_unprivileged_gate_holds(
    file: str, devices: list[str], tmp_path: Path, make_env_file: MakeEnvFile
) -> None:
    """With env-var requests refused for unprivileged containers, only a file pinned to the pod passes."""
    node = Node(tmp_path, extra="accept-nvidia-visible-devices-envvar-when-unprivileged = false\n")
    node.config = node.config.replace("[env-file]\n", '[env-file]\npod-binding-engine = "crio"\n')
    env_file = make_env_file(file)
    doc = document([f"NVIDIA_ENV_FROM_FILE={env_file}"], annotations={"io.kubernetes.pod.uid": "pod-1"})
    out = json.loads(resolve_precreate(json.dumps(doc).encode(), node.config, source="c.toml"))
    assert device_paths(out) == devices


@pytest.mark.parametrize("request_value", ["1", "nvidia.com/gpu=1"], ids=["device-id", "cdi-name"])
def test_unprivileged_gate_from_image_env(request_value: str, tmp_path: Path) -> None:
    """An unprivileged container's own NVIDIA_VISIBLE_DEVICES is ignored behind the gate, a CDI name exactly
    as a device id (NVIDIA's accept-nvidia-visible-devices-envvar-when-unprivileged)."""
    node = Node(tmp_path, extra="accept-nvidia-visible-devices-envvar-when-unprivileged = false\n")
    doc = document([f"NVIDIA_VISIBLE_DEVICES={request_value}"])
    assert (
        resolve_precreate(json.dumps(doc).encode(), node.config, source="c.toml") == json.dumps(doc).encode()
    )


def test_prestart_refuses_cdi_names_in_cdi_mode() -> None:
    """The hook in CDI mode says where devices are injected, not NVIDIA's 'use the NVIDIA Container Runtime'."""
    with pytest.raises(RequestError, match=rf"^{CDI_MODE_MESSAGE}$"):
        check_mode("auto", ["nvidia.com/gpu=0"], skip=False, device_mode="cdi")
    with pytest.raises(RequestError) as legacy:
        check_mode("auto", ["nvidia.com/gpu=0"], skip=False)
    assert str(legacy.value) == DIRECT_INVOCATION_MESSAGE


def test_prestart_stage_in_cdi_mode(tmp_path: Path, make_env_file: MakeEnvFile) -> None:
    """run_prestart in CDI mode refuses a request it still sees, with our message."""
    from hook.stages.prestart import Options, run_prestart

    node = Node(tmp_path)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0\n")
    (bundle / "config.json").write_text(json.dumps(document([f"NVIDIA_ENV_FROM_FILE={env_file}"])))
    config = tmp_path / "c.toml"
    config.write_text(node.config)
    state = io.BytesIO(json.dumps({"pid": 1, "bundle": str(bundle)}).encode())
    with pytest.raises(RequestError, match=rf"^{CDI_MODE_MESSAGE}$"):
        run_prestart(Options(config=str(config)), state, os.environ, str(bundle))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            '[gpu-env]\ndevice-mode = "jit"\n', r"gpu-env.device-mode must be 'legacy' or 'cdi'", id="mode"
        ),
        pytest.param(
            '[gpu-env.cdi]\ndefault-kind = "gpu"\n',
            r"gpu-env.cdi.default-kind must be vendor/class: invalid vendor. empty name",
            id="kind",
        ),
        pytest.param(
            '[gpu-env.cdi]\nspec-dirs = ["cdi"]\n',
            r"gpu-env.cdi.spec-dirs must hold absolute paths, got 'cdi'",
            id="relative-dir",
        ),
    ],
)
def test_cdi_settings_checked(text: str, message: str) -> None:
    """The [gpu-env] settings are validated with one line each."""
    with pytest.raises(
        ConfigError, match=rf"^error getting hook config: failed to load config: c.toml: {message}$"
    ):
        parse_config(text, source="c.toml", suse=False)


def test_prestart_after_injection_does_nothing(tmp_path: Path, make_env_file: MakeEnvFile) -> None:
    """A prestart hook of ours in CDI mode, behind a shim or precreate stage that injected the devices
    (NVIDIA_VISIBLE_DEVICES=void in config.json), exits 0 even though the env file it reads names a device."""
    from hook.stages.prestart import Options, run_prestart

    node = Node(tmp_path)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0\n")
    spec = document([f"NVIDIA_ENV_FROM_FILE={env_file}", "NVIDIA_VISIBLE_DEVICES=void"])
    (bundle / "config.json").write_text(json.dumps(spec))
    config = tmp_path / "c.toml"
    config.write_text(node.config)
    state = io.BytesIO(json.dumps({"pid": 1, "bundle": str(bundle)}).encode())
    assert run_prestart(Options(config=str(config)), state, os.environ, str(bundle)) == 0


OUR_HOOK: dict[str, object] = {
    "path": "/usr/bin/python3",
    "args": ["python3", "-I", "-m", "hook", "prestart"],
}


def test_shim_hands_decision_to_our_hooks_in_cdi_mode(tmp_path: Path, make_env_file: MakeEnvFile) -> None:
    """An oci-hooks.d hook of ours already in the spec is told the shim's decision; no hook is added."""
    node = Node(tmp_path)
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1\n")
    spec = document([f"NVIDIA_ENV_FROM_FILE={env_file}"], hooks={"prestart": [OUR_HOOK]})
    edited = resolve_spec(spec, node.config, source="c.toml", hook=HOOK)
    assert edited is not None
    hooks: Any = edited["hooks"]
    assert len(hooks["prestart"]) == 1
    assert "-env-file-merged=unpinned:NVIDIA_VISIBLE_DEVICES" in hooks["prestart"][0]["args"]


def test_precreate_hands_decision_to_our_hooks(tmp_path: Path, make_env_file: MakeEnvFile) -> None:
    """The precreate stage in CDI mode gives hooks of ours in the spec its decision too."""
    node = Node(tmp_path)
    env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=0\n")
    raw = json.dumps(document([f"NVIDIA_ENV_FROM_FILE={env_file}"], hooks={"prestart": [OUR_HOOK]})).encode()
    out = json.loads(resolve_precreate(raw, node.config, source="c.toml"))
    assert "-env-file-merged=unpinned:NVIDIA_VISIBLE_DEVICES" in out["hooks"]["prestart"][0]["args"]
    assert device_paths(out) == ["/dev/nvidiactl", "/dev/nvidia0"]


def test_cdi_mode_stays_on_the_lean_path(tmp_path: Path) -> None:
    """Precreate in CDI mode with a JSON spec imports neither yaml, json, typing nor the cold libraries."""
    import subprocess
    import sys

    node = Node(tmp_path)
    config = tmp_path / "c.toml"
    config.write_text(node.config)
    raw = tmp_path / "spec.json"
    raw.write_text(json.dumps(document(["NVIDIA_VISIBLE_DEVICES=0"])))
    code = (
        "import sys; from hook.stages.precreate import resolve_precreate;"
        "out = resolve_precreate(open(sys.argv[1], 'rb').read(), open(sys.argv[2]).read(), source=sys.argv[2]);"
        "assert b'/dev/nvidia0' in out;"
        "print(' '.join(sorted(m for m in ('yaml', 'json', 'typing', 'typer', 'jsonschema') if m in sys.modules)))"
    )
    repo = Path(__file__).parents[2]
    out = subprocess.run([sys.executable, "-I", "-c", code, str(raw), str(config)], capture_output=True,
                         text=True, check=True, cwd=repo)  # fmt: skip
    assert out.stdout.strip() == ""


@pytest.mark.parametrize(
    ("file_name", "parsed"),
    [
        pytest.param(
            "gpu-env.dev-alloc_" + "a" * 32 + "_6f1c2a9e-0d7b.json",
            ("a" * 32, {"GPU_ENV_HOOK_POD_UID": "6f1c2a9e-0d7b"}),
            id="keyed-uid",
        ),
        pytest.param(
            "gpu-env.dev-alloc_0123456789abcdef_pod-1.json",
            ("0123456789abcdef", {"GPU_ENV_HOOK_POD_UID": "pod-1"}),
            id="legacy-16-hex-uid",
        ),
        pytest.param(
            "gpu-env.dev-alloc_" + "b" * 32 + "_team-a_web-0.example.json",
            ("b" * 32, {"GPU_ENV_HOOK_POD_NAMESPACE": "team-a", "GPU_ENV_HOOK_POD_NAME": "web-0.example"}),
            id="namespace-name",
        ),
        pytest.param("gpu-env.dev-alloc_notahex_pod-1.json", None, id="not-hex"),
        pytest.param("gpu-env.dev-alloc_" + "a" * 20 + "_pod-1.json", None, id="other-length"),
        pytest.param("gpu-env.dev-alloc_" + "a" * 32 + "_..json", None, id="dot-pod"),
        pytest.param("gpu-env.dev-alloc_" + "a" * 32 + "_ns_x_y.json", None, id="four-parts"),
        pytest.param("gpu-env.dev-alloc_" + "a" * 32 + "_NS_web.json", None, id="upper-case-namespace"),
        pytest.param("gpu-env.dev-alloc_" + "a" * 32 + "_pod-1.yaml", None, id="yaml"),
    ],
)
def test_alloc_file_pins(file_name: str, parsed: tuple[str, dict[str, str]] | None) -> None:
    """The pod an allocation's spec is for, read back from its file name; any other name is not ours."""
    assert alloc_file_pins(file_name) == parsed


def alloc_node(tmp_path: Path, file_pod: str) -> Node:
    """A node whose /var/run/cdi holds one allocation spec (GPU 1, a secret) named for ``file_pod``."""
    node = Node(tmp_path, extra="")
    run = tmp_path / "run-cdi"
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "gpu-env.dev/alloc",
        "devices": [
            {
                "name": "0123456789abcdef",
                "containerEdits": {
                    "env": ["SECRET=s3cret", "NVIDIA_VISIBLE_DEVICES=void"],
                    "deviceNodes": [{"path": "/dev/nvidia1", "hostPath": str(node.node.gpu(1))}],
                },
            }
        ],
    }
    write_spec(run, f"gpu-env.dev-alloc_0123456789abcdef_{file_pod}.json", spec)
    node.config = node.config.replace(f'spec-dirs = ["{node.etc}"]', f'spec-dirs = ["{node.etc}", "{run}"]')
    node.config = node.config.replace("[env-file]\n", '[env-file]\npod-binding-engine = "crio"\n')
    return node


@pytest.mark.parametrize(
    ("file_pod", "annotations", "message"),
    [
        pytest.param("pod-1", {"io.kubernetes.pod.uid": "pod-1"}, None, id="legacy-name-own-pod"),
        pytest.param(
            "ns_web-0",
            {"io.kubernetes.pod.namespace": "ns", "io.kubernetes.pod.name": "web-0"},
            None,
            id="namespace-name-own-pod",
        ),
        pytest.param(
            "ns_web-0",
            {"io.kubernetes.pod.namespace": "ns", "io.kubernetes.pod.name": "web-1"},
            "is pinned to another pod (annotation io.kubernetes.pod.name differs)",
            id="namespace-name-other-pod",
        ),
        pytest.param(
            "pod-1",
            {"io.kubernetes.pod.uid": "pod-2", "io.kubernetes.cri.sandbox-uid": "pod-1"},
            "is pinned to another pod (annotation io.kubernetes.pod.uid differs)",
            id="other-engines-key-ignored",
        ),
    ],
)
def test_precreate_allocation_bound_to_its_pod(
    tmp_path: Path,
    make_env_file: MakeEnvFile,
    file_pod: str,
    annotations: dict[str, str],
    message: str | None,
) -> None:
    """podman's precreate stage (here with CRI-O's pod keys) applies an allocation only for the pod its spec
    file names, requested by that pod's pinned env file; a legacy 16-hex name still works."""
    node = alloc_node(tmp_path, file_pod)
    pins = {
        "io.kubernetes.pod.uid": "GPU_ENV_HOOK_POD_UID",
        "io.kubernetes.pod.namespace": "GPU_ENV_HOOK_POD_NAMESPACE",
        "io.kubernetes.pod.name": "GPU_ENV_HOOK_POD_NAME",
    }
    pin = "".join(f"{pins[key]}={value}\n" for key, value in annotations.items() if key in pins)
    env_file = make_env_file(pin + "NVIDIA_VISIBLE_DEVICES=gpu-env.dev/alloc=0123456789abcdef\n")
    raw = json.dumps(document([f"NVIDIA_ENV_FROM_FILE={env_file}"], annotations=annotations)).encode()
    if message is None:
        out = json.loads(resolve_precreate(raw, node.config, source="c.toml"))
        assert "SECRET=s3cret" in out["process"]["env"]
        assert device_paths(out) == ["/dev/nvidia1"]
    else:
        with pytest.raises(
            CdiError, match=rf"^env file '{env_file}': a CDI allocation it requests {re.escape(message)}$"
        ):
            resolve_precreate(raw, node.config, source="c.toml")

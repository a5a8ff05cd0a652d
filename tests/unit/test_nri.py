"""The NRI plugin without a runtime: its generated code, its framing, and its decisions (hook.nri)."""

from __future__ import annotations

import filecmp
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cdi_helpers import SECRET, write_secret_specs
from conftest import REPO, MakeBundle, MakeConfig, RunHook
from hypothesis import given
from hypothesis import strategies as st
from record_helpers import replaced
from test_envfile_hook import FILE_REFUSALS

from hook.nri import nri_pb2, ttrpc_pb2, wire
from hook.nri.decide import Context, adjust_container, cdi_names_applied
from hook.nri.plugin import SERVICE_PLUGIN, Session, connect
from hook.pipeline.config import parse_config
from hook.util.errors import CdiError, EnvFileError, HookError

VAR = "NVIDIA_ENV_FROM_FILE"
HOOK: dict[str, object] = {
    "path": "/usr/local/bin/gpu-env-hook",
    "args": ["gpu-env-hook", "prestart"],
    "env": ["PATH=/usr/bin"],
}
POD = nri_pb2.PodSandbox(id="sandbox-1", name="web", uid="uid-1", namespace="team-a")


# --- the generated code is what protoc writes from the committed .proto files ------------------------------


def test_generated_code_matches_the_proto_files(tmp_path: Path) -> None:
    """nri_pb2.py/.pyi and ttrpc_pb2.py/.pyi are exactly protoc's output for the .proto files beside them."""
    from grpc_tools import protoc

    source = REPO / "hook"
    protos = [str(source / "nri" / "nri.proto"), str(source / "nri" / "ttrpc.proto")]
    status = protoc.main(
        ["protoc", f"-I{source}", f"--python_out={tmp_path}", f"--pyi_out={tmp_path}", *protos]
    )
    assert status == 0
    names = ["nri_pb2.py", "nri_pb2.pyi", "ttrpc_pb2.py", "ttrpc_pb2.pyi"]
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "nri", source / "nri", names, shallow=False)
    assert (mismatch, errors) == ([], []), "regenerate: see the comment at the top of hook/nri/nri.proto"
    assert sorted(match) == names


def test_field_numbers_are_nris() -> None:
    """The fields the plugin depends on carry NRI's numbers (pkg/api/api.proto)."""
    fields = {
        (message.name, field.name): field.number
        for message in nri_pb2.DESCRIPTOR.message_types_by_name.values()
        for field in message.fields
    }
    assert fields[("PodSandbox", "uid")] == 3
    assert fields[("PodSandbox", "namespace")] == 4
    assert fields[("Container", "env")] == 8
    assert fields[("Container", "hooks")] == 10
    assert fields[("ContainerAdjustment", "env")] == 4
    assert fields[("ContainerAdjustment", "hooks")] == 5
    assert fields[("ContainerAdjustment", "CDI_devices")] == 8
    assert fields[("SynchronizeRequest", "more")] == 3
    assert fields[("SynchronizeResponse", "more")] == 2
    assert fields[("ConfigureResponse", "events")] == 2
    assert "annotations" not in {name for message, name in fields if message == "PodSandbox"}


# --- framing ------------------------------------------------------------------------------------------------


def test_encode_lays_out_both_headers() -> None:
    """One mux frame: conn id and length, then ttrpc's length, stream id, type and flags, then the data."""
    assert wire.encode(2, 1, wire.REQUEST, b"abc") == (
        b"\x00\x00\x00\x02\x00\x00\x00\x0d" + b"\x00\x00\x00\x03\x00\x00\x00\x01\x01\x00" + b"abc"
    )


@given(
    messages=st.lists(
        st.tuples(st.sampled_from([1, 2]), st.integers(0, 2**32 - 1), st.binary(max_size=300)), max_size=6
    ),
    cuts=st.lists(st.integers(1, 40), min_size=1, max_size=20),
)
def test_demux_reassembles_any_cut(messages: list[tuple[int, int, bytes]], cuts: list[int]) -> None:
    """Messages come out whole and in order however the socket cuts the bytes."""
    data = b"".join(wire.encode(conn, stream, wire.RESPONSE, payload) for conn, stream, payload in messages)
    demux = wire.Demux()
    out: list[wire.Message] = []
    position = 0
    index = 0
    while position < len(data):
        step = cuts[index % len(cuts)]
        out += demux.feed(data[position : position + step])
        position += step
        index += 1
    assert [(m.conn, m.stream, m.data) for m in out] == messages


def test_a_message_spanning_frames_is_joined() -> None:
    """The runtime's ttrpc writes a large message in pieces (its buffered writer's size), each its own
    frame, interleaved with the other connection's frames: the message is joined again."""
    payload = bytes(range(256)) * 40
    stream = wire.encode(1, 3, wire.REQUEST, payload)[wire.MUX_HEADER.size :]
    other = wire.encode(2, 1, wire.RESPONSE, b"ok")
    pieces = [stream[start : start + 4096] for start in range(0, len(stream), 4096)]
    data = b"".join(wire.MUX_HEADER.pack(1, len(piece)) + piece + other for piece in pieces)
    messages = wire.Demux().feed(data)
    assert [(m.conn, m.stream, m.data) for m in messages] == [(2, 1, b"ok")] * 2 + [
        (1, 3, payload),
        (2, 1, b"ok"),
    ]


def test_too_large_a_message_is_not_sent() -> None:
    """An answer above ttrpc's 4 MiB limit is an error here, not a frame the runtime refuses."""
    with pytest.raises(wire.ProtocolError) as refused:
        wire.encode(1, 1, wire.RESPONSE, bytes(wire.TTRPC_MAX + 1))
    assert str(refused.value) == "message of 4194305 bytes exceeds ttrpc's limit of 4194304"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(
            b"\x00\x00\x00\x00\x00\x00\x00\x01x", "bad multiplexer frame (connection 0, 1 bytes)", id="conn-0"
        ),
        pytest.param(
            b"\x00\x00\x00\x01\x01\x00\x00\x00",
            "bad multiplexer frame (connection 1, 16777216 bytes)",
            id="huge-frame",
        ),
        pytest.param(
            b"\x00\x00\x00\x01\x00\x00\x00\x0a" + b"\x00\x50\x00\x00\x00\x00\x00\x01\x01\x00",
            "ttrpc message of 5242880 bytes exceeds the limit of 4194304",
            id="huge-message",
        ),
    ],
)
def test_broken_framing_is_a_protocol_error(data: bytes, message: str) -> None:
    """A peer that breaks the framing ends the session (the plugin reconnects)."""
    with pytest.raises(wire.ProtocolError) as broken:
        wire.Demux().feed(data)
    assert str(broken.value) == message


# --- decisions ----------------------------------------------------------------------------------------------


def make_context(
    tmp_path: Path, toml: str = "", runtime: tuple[str, str] = ("containerd", "v2.3.0")
) -> Context:
    """A plugin context whose env files live in tmp/nvidia-env."""
    text = f'[env-file]\ndirectories = ["{tmp_path / "nvidia-env"}"]\n{toml}'
    settings = parse_config(text, suse=False, engine="containerd")
    return Context(
        settings=settings, config_text=text, hook=HOOK, runtime_name=runtime[0], runtime_version=runtime[1]
    )


def write_env_file(tmp_path: Path, content: str, name: str = "a.env") -> Path:
    """A root-owned 0644 env file in the accepted directory."""
    directory = tmp_path / "nvidia-env"
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(content)
    path.chmod(0o644)
    return path


def container(env: list[str], *, name: str = "main", hooks: nri_pb2.Hooks | None = None) -> nri_pb2.Container:
    """A container as NRI describes it at CreateContainer."""
    return nri_pb2.Container(id="c1", pod_sandbox_id="sandbox-1", name=name, env=env, hooks=hooks)


def env_of(adjust: nri_pb2.ContainerAdjustment) -> list[tuple[str, str]]:
    """The env adjustments, in order."""
    return [(kv.key, kv.value) for kv in adjust.env]


def test_container_without_env_file_is_untouched(tmp_path: Path) -> None:
    """No env file: no adjustment at all, whatever else the container asks for."""
    context = make_context(tmp_path)
    assert adjust_container(POD, container(["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"]), context) is None
    assert adjust_container(POD, container([f"{VAR}="]), context) is None


def test_legacy_mode_merges_and_adds_our_hook_with_the_decision(tmp_path: Path) -> None:
    """The file's variables as env adjustments, the variable naming it set empty, and our prestart hook told
    that the file is merged and pinned (it never reads the file again)."""
    path = write_env_file(tmp_path, "GPU_ENV_HOOK_POD_UID=uid-1\nNVIDIA_VISIBLE_DEVICES=0\nA=1\n")
    adjust = adjust_container(POD, container(["PATH=/bin", f"{VAR}={path}"]), make_context(tmp_path))
    assert adjust is not None
    assert env_of(adjust) == [(VAR, ""), ("NVIDIA_VISIBLE_DEVICES", "0"), ("A", "1")]
    [hook] = adjust.hooks.prestart
    assert hook.path == "/usr/local/bin/gpu-env-hook"
    assert list(hook.args) == ["gpu-env-hook", "-env-file-merged=pinned:NVIDIA_VISIBLE_DEVICES,A", "prestart"]
    assert list(hook.env) == ["PATH=/usr/bin"]
    assert hook.timeout.value == 60
    assert not adjust.CDI_devices
    assert [(mount.destination, mount.source) for mount in adjust.mounts] == [
        ("-/run/gpu-env-hook/env-file-not-applied", "")
    ]


def test_pin_is_checked_against_the_pod_and_container_nri_names(tmp_path: Path) -> None:
    """GPU_ENV_HOOK_CONTAINER_NAME is checked against the container's name in the request."""
    path = write_env_file(tmp_path, "GPU_ENV_HOOK_POD_UID=uid-1\nGPU_ENV_HOOK_CONTAINER_NAME=main\nX=1\n")
    assert adjust_container(POD, container([f"{VAR}={path}"]), make_context(tmp_path)) is not None
    with pytest.raises(EnvFileError) as refused:
        adjust_container(POD, container([f"{VAR}={path}"], name="sidecar"), make_context(tmp_path))
    assert str(refused.value) == (
        f"env file '{path}': is pinned to another container "
        "(annotation io.kubernetes.cri.container-name differs)"
    )


@pytest.mark.parametrize(
    ("runtime", "pin", "refusal"),
    [
        pytest.param(
            ("cri-o", "1.36.3"),
            "GPU_ENV_HOOK_POD_UID=uid-2\nX=1\n",
            "is pinned to another pod (annotation io.kubernetes.pod.uid differs)",
            id="cri-o-other-uid",
        ),
        pytest.param(
            ("cri-o", "1.36.3"),
            "GPU_ENV_HOOK_POD_UID=uid-1\nGPU_ENV_HOOK_CONTAINER_NAME=sidecar\n",
            "is pinned to another container (annotation io.kubernetes.container.name differs)",
            id="cri-o-other-container",
        ),
        pytest.param(
            ("containerd", "2.3.4"),
            "GPU_ENV_HOOK_POD_UID=uid-2\nX=1\n",
            "is pinned to another pod (annotation io.kubernetes.cri.sandbox-uid differs)",
            id="containerd-other-uid",
        ),
        pytest.param(("cri-o", "1.36.3"), "GPU_ENV_HOOK_POD_UID=uid-1\nX=1\n", None, id="cri-o-same-pod"),
    ],
)
def test_refusal_names_the_key_of_the_runtime_that_configured_the_plugin(
    tmp_path: Path, runtime: tuple[str, str], pin: str, refusal: str | None
) -> None:
    """The identity is NRI's on every runtime; a refusal names it by the annotation key that runtime writes
    (CRI-O's io.kubernetes.pod.*, containerd's io.kubernetes.cri.*), the one its users can look up."""
    path = write_env_file(tmp_path, pin)
    context = make_context(tmp_path, runtime=runtime)
    if refusal is None:
        assert adjust_container(POD, container([f"{VAR}={path}"]), context) is not None
        return
    with pytest.raises(EnvFileError) as refused:
        adjust_container(POD, container([f"{VAR}={path}"]), context)
    assert str(refused.value) == f"env file '{path}': {refusal}"


@pytest.mark.parametrize(
    ("pin", "refusal"),
    [
        pytest.param(
            "GPU_ENV_HOOK_POD_NAMESPACE=team-a\nGPU_ENV_HOOK_POD_NAME=web\n", None, id="namespace-and-name"
        ),
        pytest.param(
            "GPU_ENV_HOOK_POD_NAMESPACE=team-b\nGPU_ENV_HOOK_POD_NAME=web\n",
            "is pinned to another pod (annotation io.kubernetes.cri.sandbox-namespace differs)",
            id="other-namespace",
        ),
        pytest.param(
            "GPU_ENV_HOOK_POD_NAMESPACE=team-a\nGPU_ENV_HOOK_POD_NAME=db\n",
            "is pinned to another pod (annotation io.kubernetes.cri.sandbox-name differs)",
            id="other-name",
        ),
    ],
)
def test_pin_by_namespace_and_name(tmp_path: Path, pin: str, refusal: str | None) -> None:
    """A pin by namespace and name is checked against the pod's namespace and name in the NRI request."""
    path = write_env_file(tmp_path, pin + "X=1\n")
    request = container([f"{VAR}={path}"])
    if refusal is None:
        adjust = adjust_container(POD, request, make_context(tmp_path))
        assert adjust is not None
        assert ("X", "1") in env_of(adjust)
        return
    with pytest.raises(EnvFileError) as refused:
        adjust_container(POD, request, make_context(tmp_path))
    assert str(refused.value) == f"env file '{path}': {refusal}"


def test_pod_without_identity_cannot_use_a_pinned_file(tmp_path: Path) -> None:
    """A pod the runtime gives no uid (not a CRI pod) never matches a pin."""
    path = write_env_file(tmp_path, "GPU_ENV_HOOK_POD_UID=uid-1\nX=1\n")
    anonymous = nri_pb2.PodSandbox(id="s", name="x")
    with pytest.raises(EnvFileError) as refused:
        adjust_container(anonymous, container([f"{VAR}={path}"]), make_context(tmp_path))
    assert str(refused.value) == (
        f"env file '{path}': is pinned to a pod but the container has no io.kubernetes.cri.sandbox-uid "
        "annotation (pod-binding-engine containerd)"
    )


@pytest.mark.parametrize(("setup", "message"), FILE_REFUSALS)
def test_refusals_are_the_hooks(tmp_path: Path, setup: Callable[[Path, Path], str], message: str) -> None:
    """The hook's table of env-file refusals, through the plugin: the same one line, no content shown."""
    env_dir = tmp_path / "nvidia-env"
    env_dir.mkdir()
    name = setup(env_dir, tmp_path)
    request = container(["NVIDIA_VISIBLE_DEVICES=fake0", f"{VAR}={env_dir}/{name}"])
    with pytest.raises(EnvFileError) as refused:
        adjust_container(POD, request, make_context(tmp_path))
    assert str(refused.value) == message.format(dir=env_dir)


def test_missing_file_ignored_still_marks_the_container_handled(tmp_path: Path) -> None:
    """on-missing = "ignore": nothing merged, no hook, but the variable is set empty (handled)."""
    (tmp_path / "nvidia-env").mkdir()
    request = container([f"{VAR}={tmp_path}/nvidia-env/none.env"])
    adjust = adjust_container(POD, request, make_context(tmp_path, 'on-missing = "ignore"\n'))
    assert adjust is not None
    assert env_of(adjust) == [(VAR, "")]
    assert not adjust.hooks.prestart
    assert [mount.destination for mount in adjust.mounts] == ["-/run/gpu-env-hook/env-file-not-applied"]


@pytest.mark.parametrize(
    "hooks",
    [
        pytest.param(
            nri_pb2.Hooks(prestart=[nri_pb2.Hook(path="/usr/bin/nvidia-container-runtime-hook", args=["x"])]),
            id="nvidias-hook",
        ),
        pytest.param(
            nri_pb2.Hooks(create_runtime=[nri_pb2.Hook(path="/opt/x/gpu-env-hook", args=["gpu-env-hook"])]),
            id="ours-at-create-runtime",
        ),
    ],
)
def test_no_second_gpu_hook(tmp_path: Path, hooks: nri_pb2.Hooks) -> None:
    """A container that already has a GPU hook gets its variables but no hook of ours (the cli runs once)."""
    path = write_env_file(tmp_path, "NVIDIA_VISIBLE_DEVICES=0\n")
    adjust = adjust_container(POD, container([f"{VAR}={path}"], hooks=hooks), make_context(tmp_path))
    assert adjust is not None
    assert not adjust.hooks.prestart
    assert ("NVIDIA_VISIBLE_DEVICES", "0") in env_of(adjust)


def write_cdi_specs(tmp_path: Path) -> Path:
    """CDI specs in tmp/cdi: nvidia.com/gpu=0 and =1 (a variable and /dev/nvidia-test<N>, the host's
    /dev/null), and an allocation device written for the pod uid-2."""
    directory = tmp_path / "cdi"
    directory.mkdir()
    devices = [
        {
            "name": str(index),
            "containerEdits": {
                "env": [f"CDI_GPU={index}"],
                "deviceNodes": [{"path": f"/dev/nvidia-test{index}", "hostPath": "/dev/null"}],
            },
        }
        for index in range(2)
    ]
    gpus = {"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": devices}
    (directory / "gpus.json").write_text(json.dumps(gpus))
    alloc = {
        "cdiVersion": "0.6.0",
        "kind": "gpu-env.dev/alloc",
        "devices": [{"name": ALLOC, "containerEdits": {"env": ["ALLOCATED=1"]}}],
    }
    (directory / f"gpu-env.dev-alloc_{ALLOC}_uid-2.json").write_text(json.dumps(alloc))
    for path in directory.iterdir():
        path.chmod(0o644)
    return directory


ALLOC = "0123456789abcdef"


def cdi_context(tmp_path: Path, version: str) -> Context:
    """CDI mode, specs from tmp/cdi, on containerd ``version``."""
    specs = write_cdi_specs(tmp_path)
    toml = f'[gpu-env]\ndevice-mode = "cdi"\n[gpu-env.cdi]\nspec-dirs = ["{specs}"]\nspec-cache = "{tmp_path / "spec-cache"}"\n'
    return make_context(tmp_path, toml, runtime=("containerd", version))


def test_cdi_mode_names_devices_on_containerd_2_1(tmp_path: Path) -> None:
    """CDI mode on containerd >= 2.1: the file's devices as CDI names (the pin lets them past the
    unprivileged gate), NVIDIA_VISIBLE_DEVICES void, no hook."""
    context = cdi_context(tmp_path, "2.1.4")
    path = write_env_file(tmp_path, "GPU_ENV_HOOK_POD_UID=uid-1\nNVIDIA_VISIBLE_DEVICES=0,1\n")
    adjust = adjust_container(POD, container([f"{VAR}={path}"]), context)
    assert adjust is not None
    assert [device.name for device in adjust.CDI_devices] == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]
    assert env_of(adjust) == [(VAR, ""), ("NVIDIA_VISIBLE_DEVICES", "void")]  # each name once (NRI's rule)
    assert not adjust.hooks.prestart
    assert not adjust.linux.devices


def test_cdi_mode_applies_the_edits_on_containerd_2_0(tmp_path: Path) -> None:
    """containerd 2.0 ignores CDI names: the devices' edits are the adjustment (device node with the host
    device's numbers, the variables)."""
    context = cdi_context(tmp_path, "v2.0.5")
    path = write_env_file(tmp_path, "GPU_ENV_HOOK_POD_UID=uid-1\nNVIDIA_VISIBLE_DEVICES=1\nA=1\n")
    adjust = adjust_container(POD, container(["PATH=/bin", f"{VAR}={path}"]), context)
    assert adjust is not None
    assert not adjust.CDI_devices
    [device] = adjust.linux.devices
    null = Path("/dev/null").stat()
    assert (device.path, device.type, device.major, device.minor) == (
        "/dev/nvidia-test1",
        "c",
        os.major(null.st_rdev),
        os.minor(null.st_rdev),
    )
    assert env_of(adjust) == [(VAR, ""), ("NVIDIA_VISIBLE_DEVICES", "void"), ("A", "1"), ("CDI_GPU", "1")]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(
            "GPU_ENV_HOOK_POD_UID=uid-1\nNVIDIA_VISIBLE_DEVICES=7\n",
            "env file '{path}': a device it requests is defined by no CDI spec in {specs}",
            id="unknown-device",
        ),
        pytest.param(
            f"GPU_ENV_HOOK_POD_UID=uid-1\nNVIDIA_VISIBLE_DEVICES=gpu-env.dev/alloc={ALLOC}\n",
            "env file '{path}': a CDI allocation it requests is pinned to another pod "
            "(annotation io.kubernetes.cri.sandbox-uid differs)",
            id="another-pods-allocation",
        ),
        pytest.param(
            f"NVIDIA_VISIBLE_DEVICES=gpu-env.dev/alloc={ALLOC}\n",
            'CDI allocation "gpu-env.dev/alloc={alloc}" may be requested only by its pod\'s pinned env file, '
            "not by the image or the container's own environment",
            id="allocation-from-an-unpinned-file",
        ),
    ],
)
@pytest.mark.parametrize("version", ["2.1.0", "2.0.5"])
def test_cdi_devices_checked_before_any_is_named(
    tmp_path: Path, content: str, message: str, version: str
) -> None:
    """Whatever the runtime does with the answer, a device no spec defines, or an allocation written for
    another pod, is refused before it is named: the runtime shim's checks, with the NRI pod identity."""
    context = cdi_context(tmp_path, version)
    context.settings = replaced(context.settings, accept_envvar_unprivileged=True)
    path = write_env_file(tmp_path, content)
    with pytest.raises(CdiError) as refused:
        adjust_container(POD, container([f"{VAR}={path}"]), context)
    assert str(refused.value) == message.format(path=path, specs=tmp_path / "cdi", alloc=ALLOC)


@pytest.mark.parametrize("version", ["2.1.0", "2.0.5"])
def test_cdi_spec_content_never_in_the_plugins_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    """The NRI decision path reads the specs as the shim does: specs holding a secret where a refusal would
    quote it (two of them symlinks to root-only files) are skipped with one warning each naming the file,
    the field and its position; the request's error for a device only they define names the files; the
    secret is in neither."""
    context = cdi_context(tmp_path, version)
    specs = tmp_path / "cdi"
    reasons = write_secret_specs(specs, tmp_path / "root-only")
    path = write_env_file(tmp_path, "GPU_ENV_HOOK_POD_UID=uid-1\nNVIDIA_VISIBLE_DEVICES=1\n")
    assert adjust_container(POD, container([f"{VAR}={path}"]), context) is not None
    warnings = [line.split(' msg="', 1)[1] for line in capsys.readouterr().err.splitlines()]
    assert warnings == [f'invalid CDI spec {specs}/{name}: {reason}; skipped"' for name, reason in reasons]
    refused = write_env_file(
        tmp_path, "GPU_ENV_HOOK_POD_UID=uid-1\nNVIDIA_VISIBLE_DEVICES=x.com/gpu=d\n", "b.env"
    )
    with pytest.raises(CdiError) as caught:
        adjust_container(POD, container([f"{VAR}={refused}"]), context)
    skipped = ", ".join(f'"{specs}/{name}"' for name, _ in reasons[:4])
    assert str(caught.value) == (
        f"env file '{refused}': a device it requests is defined by no CDI spec in {specs} "
        f"(skipped specs: {skipped} and {len(reasons) - 4} more)"
    )
    assert SECRET not in capsys.readouterr().err + str(caught.value)


@pytest.mark.parametrize(
    ("name", "version", "expected"),
    [
        pytest.param("containerd", "v2.1.0", True, id="v2.1"),
        pytest.param("containerd", "2.3.0-dev", True, id="2.3-dev"),
        pytest.param("containerd", "v2.0.7", False, id="v2.0"),
        pytest.param("containerd", "1.7.27", False, id="1.7"),
        pytest.param("containerd", "garbage", False, id="unparsable"),
        pytest.param("cri-o", "1.34.0", True, id="cri-o-1.34"),
        pytest.param("cri-o", "1.36.3", True, id="cri-o-1.36"),
        pytest.param("cri-o", "1.33.5", False, id="cri-o-1.33"),
        pytest.param("podman", "5.0.0", False, id="another-runtime"),
    ],
)
def test_cdi_names_applied(name: str, version: str, expected: bool) -> None:
    """The runtime name and version from Configure decide whether CDI names are applied."""
    assert cdi_names_applied(name, version) is expected


# --- the backstop hook ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "refused"),
    [
        pytest.param(["PATH=/bin"], False, id="no-env-file"),
        pytest.param(["PATH=/bin", f"{VAR}="], False, id="handled-variable-set-empty"),
        pytest.param(["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"], False, id="variable-removed"),
        pytest.param(["A=mentions NVIDIA_ENV_FROM_FILE in a value"], False, id="name-only-in-a-value"),
        pytest.param(["PATH=/bin", f"{VAR}=/run/nvidia-env/a.env"], True, id="unhandled"),
    ],
)
def test_backstop_refuses_only_an_unhandled_env_file(
    make_bundle: MakeBundle, run_hook: RunHook, env: list[str], refused: bool
) -> None:
    """The backstop hook stops a container that still names an env file (the plugin was not there); any
    other container passes; config.json is never changed."""
    bundle = make_bundle(env)
    run = run_hook(bundle, command="nri-backstop")
    assert run.spec_after == run.spec_before
    assert run.record is None
    if refused:
        assert run.returncode == 1
        assert run.stderr == (
            "env file '/run/nvidia-env/a.env': not handled by the NRI plugin (is `gpu-env-hook nri` "
            "running?); the container is not started without its variables\n"
        )
    else:
        assert (run.returncode, run.stderr) == (0, "")


def test_backstop_follows_a_renamed_variable(
    make_bundle: MakeBundle, make_config: MakeConfig, run_hook: RunHook
) -> None:
    """[env-file] variable names the variable the backstop looks for."""
    config = make_config('[env-file]\nvariable = "MY_GPU_FILE"\n', standin=False)
    run = run_hook(make_bundle(["MY_GPU_FILE=/x/a.env"]), config=config, command="nri-backstop")
    assert run.returncode == 1
    assert run.stderr.startswith("env file '/x/a.env': not handled by the NRI plugin")


# --- the socket ------------------------------------------------------------------------------------------------


def test_the_plugin_subscribes_to_create_container_alone(tmp_path: Path) -> None:
    """Configure is answered with CreateContainer as the only event (NRI's mask: bit event-1): each event a
    plugin subscribes to is a round trip under the runtime's node-wide NRI lock. A RemoveContainer a runtime
    sends anyway is answered, so no container's removal fails on the plugin."""
    plugin_end, runtime_end = socket.socketpair()
    with plugin_end, runtime_end:
        session = Session(wire.Link(plugin_end), make_context(tmp_path), lambda _line: None)
        configure = ttrpc_pb2.Request(
            service=SERVICE_PLUGIN,
            method="Configure",
            payload=nri_pb2.ConfigureRequest(
                runtime_name="containerd", runtime_version="v2.3.4"
            ).SerializeToString(),
        )
        response, ended = session.answer(configure)
        assert (response.status.code, ended) == (0, False)
        assert nri_pb2.ConfigureResponse.FromString(response.payload).events == 0b1000
        assert nri_pb2.CREATE_CONTAINER == 4
        remove = ttrpc_pb2.Request(
            service=SERVICE_PLUGIN,
            method="RemoveContainer",
            payload=nri_pb2.RemoveContainerRequest(pod=POD, container=container([])).SerializeToString(),
        )
        response, ended = session.answer(remove)
        assert (response.status.code, response.payload, ended) == (0, b"", False)


def test_a_socket_served_by_another_user_is_refused() -> None:
    """A socket whose listener is neither root nor the plugin's user could forge every pod's identity: the
    plugin does not talk to it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to listen as another user")
    shared = Path(tempfile.mkdtemp(prefix="nri-sock-", dir="/tmp"))  # pytest's tmp is root's alone
    shared.chmod(0o777)
    path = shared / "nri.sock"
    ready_read, ready_write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child listens as nobody until killed
        try:
            os.setgid(65534)
            os.setuid(65534)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(str(path))
            server.listen(1)
            os.write(ready_write, b"x")
            time.sleep(30)
        finally:
            os._exit(0)
    try:
        os.close(ready_write)
        assert os.read(ready_read, 1) == b"x"
        with pytest.raises(HookError) as refused:
            connect(str(path))
        assert (
            str(refused.value) == f"gpu-env-hook nri: {path} is served by uid 65534, not root: not connecting"
        )
    finally:
        os.close(ready_read)
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        shutil.rmtree(shared)


def test_the_plugin_logs_on_stdout_a_line_at_a_time(tmp_path: Path) -> None:
    """gpu-env-hook nri logs on stdout (a pod's log collector takes stderr as errors), each line as it
    happens through a pipe (not when a buffer fills): no runtime yet, then TERM; nothing on stderr."""
    config = tmp_path / "config.toml"
    config.write_text("")
    missing = tmp_path / "nri.sock"
    plugin = subprocess.Popen(
        [sys.executable, "-I", "-m", "hook", "-config", str(config), "nri", str(missing)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert plugin.stdout is not None
        readable, _, _ = select.select([plugin.stdout], [], [], 30)
        assert readable, "no line on stdout within 30 s"
        first = plugin.stdout.readline()  # while it runs: flushed per line
        assert (
            first
            == f"gpu-env-hook nri: cannot connect to {missing}: No such file or directory; retrying in 0.1 s\n"
        )
        plugin.send_signal(signal.SIGTERM)
        out, err = plugin.communicate(timeout=30)
    finally:
        if plugin.poll() is None:
            plugin.kill()
            plugin.wait()
    assert (plugin.returncode, err) == (0, "")
    assert out.splitlines()[-1] == "gpu-env-hook nri: stopped"


def test_without_protobuf_the_plugin_says_so_in_one_line() -> None:
    """Started without site-packages (as the node tree's wrappers start the hook), the plugin cannot load
    protobuf: one line saying how to run it, exit 1, never an internal error."""
    code = f"import sys; sys.path[:0] = [{str(REPO)!r}]; from hook.__main__ import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, "nri", "/nonexistent/nri.sock"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        "gpu-env-hook nri: cannot load google: run it with an interpreter that has the protobuf package "
        "(pip install gpu-env-hook), not the engines' -S wrapper\n"
    )


@pytest.mark.parametrize(
    ("node_python", "command"),
    [
        pytest.param(
            "tree",
            [
                "/opt/gpu-env-hook/current/python/ld-linux-x86-64.so.2",
                "--library-path",
                "/opt/gpu-env-hook/current/python/lib",
                "--argv0",
                "/opt/gpu-env-hook/current/python/bin/python3.11",
                "/opt/gpu-env-hook/current/python/bin/python3.11",
            ],
            id="the-nodes-tree",
        ),
        pytest.param("/usr/bin/python3", ["/usr/bin/python3"], id="the-nodes-python"),
    ],
)
def test_in_a_pod_the_hook_runs_what_install_wrote_on_the_node(node_python: str, command: list[str]) -> None:
    """GPU_ENV_HOOK_NRI_NODE_PYTHON (the DaemonSet's plugin): the prestart hook the plugin adds runs the
    node's interpreter with the node's copy of the package (/opt/gpu-env-hook/current/lib), never the pod's
    own paths."""
    code = "import json; from hook.nri.main import build_context; print(json.dumps(build_context(None).hook))"
    env = {
        "PATH": "/usr/bin:/bin",
        "GPU_ENV_HOOK_NRI_NODE_PYTHON": node_python,
        "XDG_CONFIG_HOME": "/nonexistent",
    }
    proc = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, env=env, check=True
    )
    hook = json.loads(proc.stdout)
    assert hook["path"] == command[0]
    assert hook["args"][: len(command)] == command
    code_arg = hook["args"][hook["args"].index("-c") + 1]
    assert 'lib = "/opt/gpu-env-hook/current/lib"' in code_arg
    assert sys.prefix not in json.dumps(hook)

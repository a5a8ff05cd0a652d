"""The NRI path as gpu-env-hook-nri.yaml deploys it, with the image `make image` builds, on a real containerd 2.x.

A scratch node root (the image's own Debian 12 root filesystem, exported) gets what the manifest's init
container does: the image's entrypoint run in a privileged podman container with the node's / at /host,
MODE=install THEN=exit. containerd 2.x (``GPU_ENV_HOOK_CONTAINERD2``) serves NRI at the node root's
``/run/nri/nri.sock`` and reads CDI specs from its ``/etc/cdi``, where install put the env-file guard. The
plugin container then runs as the manifest runs it: its command, its environment and its volume mounts taken
from the manifest (each hostPath under the node root), privileged, its readiness probe's command run in it.
Through CRI (default handler, no RuntimeClass): a pinned env file is applied, another pod's is refused; with
the plugin container stopped (TERM: it exits 0), an env-file container never runs while a plain one does.
Nothing is placed by hand but the env files (the device plugin's) and the hook's config (CDI mode).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from busybox import unique_id
from containerd import CONTAINERD_IMAGE, running, write_image_archive
from cri import CriClient, read_cri_log, remove_pod, start_pod
from engine_builds import containerd2_dir
from podman import podman
from runc_hooks import STANDIN_CLI
from test_daemonset_image import debian_node, debian_root_tar, image  # noqa: F401 - fixtures
from test_nri_containerd import GPUS, containerd_config

from hook.util import paths

BINARIES = containerd2_dir()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("podman") or not shutil.which("mmdebstrap") or BINARIES is None,
        reason="needs root, podman, mmdebstrap and GPU_ENV_HOOK_CONTAINERD2 (containerd 2.x)",
    ),
]

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "packaging/kubernetes/gpu-env-hook-nri.yaml"
VAR = "NVIDIA_ENV_FROM_FILE"
PODMAN_LIMITS = ("--net=none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096")


def pod_spec() -> dict[str, Any]:
    """The manifest's DaemonSet pod spec."""
    documents = yaml.safe_load_all(MANIFEST.read_text())
    spec: dict[str, Any] = next(doc for doc in documents if doc and doc["kind"] == "DaemonSet")["spec"]
    return spec["template"]["spec"]  # type: ignore[no-any-return]


def container_args(container: dict[str, Any], volumes: dict[str, Any], node: Path) -> list[str]:
    """podman run arguments for one of the manifest's containers: its environment, and its volume mounts with
    each hostPath under the node root (a DirectoryOrCreate one created, as kubelet does; an emptyDir a tmpfs)."""
    args = [f"--env={item['name']}={item['value']}" for item in container.get("env", [])]
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:
            args.append(f"--tmpfs={mount['mountPath']}")
            continue
        source = beneath(node, volume["hostPath"]["path"])
        if volume["hostPath"].get("type") == "DirectoryOrCreate":
            source.mkdir(parents=True, exist_ok=True)
        args.append(f"--volume={source}:{mount['mountPath']}{':ro' if mount.get('readOnly') else ''}")
    return args


def beneath(node: Path, path: str) -> Path:
    """A node path as seen here, its symlinks resolved beneath the node root (the node's /var/run -> /run)."""
    where = node
    for part in [part for part in path.split("/") if part]:
        where = where / part
        if where.is_symlink():
            target = str(where.readlink())
            where = (
                beneath(node, target)
                if target.startswith("/")
                else beneath(node, str(where.parent.relative_to(node) / target))
            )
    return where


def write_env_file(node: Path, name: str, content: str) -> str:
    """An env file as a device plugin writes it (root-owned, 0600) in the node's /run/nvidia-env; its node
    path."""
    path = node / "run/nvidia-env" / name
    path.write_text(content)
    path.chmod(0o600)
    return f"/run/nvidia-env/{name}"


@pytest.fixture
def node(debian_root_tar: Path, tmp_path: Path) -> Path:  # noqa: F811 - the imported fixture
    """The scratch node root."""
    return debian_node(debian_root_tar, tmp_path / "node")


@pytest.fixture
def plugin(image: str, node: Path, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:  # noqa: F811
    """The manifest's init container run to its end, the hook's config (the device mode of the test's
    parameter; legacy: the stand-in cli recording into tmp/cli-records), then the plugin container started
    (not yet ready: the runtime is not there); the container's name. Removed after."""
    config = node / "etc/nvidia-container-runtime/config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    if request.param == "cdi":
        config.write_text('[gpu-env]\ndevice-mode = "cdi"\n')
    else:
        records = tmp_path / "cli-records"
        records.mkdir()
        config.write_text(
            f'[nvidia-container-cli]\npath = "{STANDIN_CLI}"\nenvironment = ["STANDIN_RECORD_DIR={records}"]\n'
        )
    install_node(image, node, "containerd")
    with plugin_container(image, node, "gpu-env-hook-nri") as name:
        yield name


def install_node(tag: str, node: Path, engine: str) -> None:
    """Run the manifest's init container (the image ``tag``) to its end with ``ENGINE=engine``: install onto
    the node root, the guard's CDI spec written."""
    spec = pod_spec()
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    (install,) = spec["initContainers"]
    args = container_args(install, volumes, node)
    args = [arg for arg in args if not arg.startswith("--env=ENGINE=")] + [f"--env=ENGINE={engine}"]
    done = podman(
        "run", "--rm", "--privileged", "--read-only", *PODMAN_LIMITS, *args, tag, timeout=300, check=False
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gpu-env-hook: installed; stays installed when the pod stops" in done.stdout
    assert (node / paths.ENV_FILE_GUARD_SPEC.lstrip("/")).is_file()


@contextlib.contextmanager
def plugin_container(tag: str, node: Path, prefix: str) -> Iterator[str]:
    """Start the manifest's plugin container (its command, environment and volume mounts; not yet ready
    while no runtime is there); its name. Removed after."""
    spec = pod_spec()
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    (container,) = spec["containers"]
    name = f"{prefix}-{unique_id()}"
    command = container["command"]
    podman(
        "run", "--detach", "--name", name, "--privileged", "--read-only", *PODMAN_LIMITS,
        *container_args(container, volumes, node), f"--entrypoint={command[0]}", tag, *command[1:],
    )  # fmt: skip
    try:
        yield name
    finally:
        podman("rm", "--force", name, check=False)


def wait_ready(name: str) -> None:
    """Wait (60 s at most) until the plugin container passes the manifest's readinessProbe."""
    deadline = time.monotonic() + 60
    while not ready(name):
        assert time.monotonic() < deadline, podman("logs", name).stdout
        time.sleep(0.2)


def ready(name: str) -> bool:
    """The manifest's readinessProbe, run in the plugin container."""
    (container,) = pod_spec()["containers"]
    probe = container["readinessProbe"]["exec"]["command"]
    return podman("exec", name, *probe, check=False).returncode == 0


def run_pod(
    client: CriClient, workdir: Path, container_image: str, name: str, env: dict[str, str], guard: bool
) -> tuple[Any, list[str]]:
    """Run one pod's container to its end on the default handler (printing its environment, devices and
    mounts), the env-file guard's CDI device named when ``guard``; its status and log lines."""
    pod = start_pod(
        client, workdir=workdir, handler="", image=container_image, name=name, env=env,
        command=["/bin/sh", "-c", "env; ls /dev; cat /proc/self/mounts"],
        cdi_devices=(paths.ENV_FILE_GUARD_DEVICE,) if guard else (),
    )  # fmt: skip
    try:
        return client.wait_exited(pod.container), read_cri_log(pod.log)
    finally:
        remove_pod(client, pod.sandbox)


@pytest.mark.parametrize("plugin", ["cdi", "legacy"], indirect=True)
def test_the_images_plugin_applies_refuses_and_fails_closed_when_stopped(
    node: Path, plugin: str, tmp_path: Path
) -> None:
    """The plugin from the image, in a privileged container with the manifest's mounts, against a real
    containerd 2.x through CRI: ready once registered; a pinned file applied (CDI mode: the file's device and
    variables; legacy mode: the variables, and the prestart hook it adds runs the node's tree, install's copy,
    which calls the stand-in cli once with the file's device); the guard's mount gone; another pod's file
    refused with the plugin's line; TERM stops it with status 0; then an env-file container never runs and a
    plain one does."""
    assert BINARIES is not None
    legacy = (tmp_path / "cli-records").is_dir()
    devices = [
        {"name": str(index), "containerEdits": {"env": [f"CDI_GPU={index}"], "deviceNodes": [
            {"path": f"/dev/nvidia-test{index}", "hostPath": "/dev/null"}]}}
        for index in range(GPUS)
    ]  # fmt: skip
    (node / "etc/cdi/test-gpus.json").write_text(
        json.dumps({"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": devices})
    )
    (node / "run/nri").mkdir(parents=True, exist_ok=True)
    pinned = write_env_file(
        node, "pod-a.env", "GPU_ENV_HOOK_POD_UID=uid-gpu-a\nNVIDIA_VISIBLE_DEVICES=3\nA=1\n"
    )
    other = write_env_file(node, "pod-b.env", "GPU_ENV_HOOK_POD_UID=uid-else\nNVIDIA_VISIBLE_DEVICES=1\n")
    # containerd sees the node's /opt/gpu-env-hook, /usr/local and hook config at their node paths (the hook
    # legacy mode adds runs there), and its own config (install's handler edit replaced: not used here).
    (node / "etc/containerd/config.toml").write_text(
        containerd_config(node / "run/nri/nri.sock", node / "etc/cdi")
    )
    archive = write_image_archive(tmp_path / "image.tar", CONTAINERD_IMAGE, ["/bin/sleep", "3600"])
    binds = {"/etc/nvidia-container-runtime": node / "etc/nvidia-container-runtime"}
    with running(node, tmp_path / "daemon", binaries=BINARIES, binds=binds) as daemon:
        daemon.import_image(archive)
        client = CriClient(daemon.address)
        try:
            wait_ready(plugin)

            run = functools.partial(run_pod, client, tmp_path, CONTAINERD_IMAGE)

            status, stdout = run("gpu-a", {VAR: pinned}, True)
            assert (status.exit_code, status.reason) == (0, "Completed"), daemon.log()
            assert "A=1" in stdout
            assert not any(paths.ENV_FILE_GUARD_TARGET in line for line in stdout)
            if legacy:
                assert "NVIDIA_VISIBLE_DEVICES=3" in stdout
                [call] = [json.loads(path.read_text()) for path in (tmp_path / "cli-records").glob("*.json")]
                assert "--device=3" in call["argv"]
            else:
                assert {"CDI_GPU=3", "NVIDIA_VISIBLE_DEVICES=void", "nvidia-test3"} <= set(stdout)
            with pytest.raises(grpc.RpcError) as refused:
                run("gpu-a", {VAR: other}, True)
            assert f"env file '{other}': is pinned to another pod" in (refused.value.details() or "")

            podman("stop", "--time", "10", plugin, timeout=60)
            assert podman("inspect", "--format", "{{.State.ExitCode}}", plugin).stdout.strip() == "0"
            assert podman("logs", plugin).stdout.splitlines()[-1] == "gpu-env-hook nri: stopped"
            with pytest.raises(grpc.RpcError) as failed:
                run("gpu-a", {VAR: pinned}, True)
            assert f"{paths.ENV_FILE_GUARD_SOURCE}: no such file or directory" in (
                failed.value.details() or ""
            )
            status, stdout = run("plain", {"FROM_CRI": "yes"}, False)
            assert (status.exit_code, status.reason) == (0, "Completed"), daemon.log()
            assert "FROM_CRI=yes" in stdout
        finally:
            client.close()

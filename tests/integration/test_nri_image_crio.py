"""The NRI path as gpu-env-hook-nri.yaml deploys it, with the image `make image` builds, on a real CRI-O.

The CRI-O counterpart of ``test_nri_image.py`` (whose helpers it takes): a scratch node root (the image's own
Debian 12 root filesystem, exported) with CRI-O's config gets what the manifest's init container does (the
image's entrypoint in a privileged podman container, the node's / at /host, ``ENGINE=crio``); CRI-O
(``GPU_ENV_HOOK_CRIO``) then runs on that node root, serving NRI in the node root's ``/run/nri`` and reading
its ``/etc/cdi``, hooks directory, ``/usr/local`` and ``/opt/gpu-env-hook``; the plugin container runs as the
manifest runs it (its command, environment and volume mounts, each hostPath under the node root). Through
CRI (default handler, no RuntimeClass): ready once registered, a pinned env file applied, another pod's
refused; with the plugin container stopped (TERM: exit 0), an env-file container is never created while a
plain one runs. Nothing is placed by hand but CRI-O's config, the env files and the hook's config.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from containerd import write_image_archive
from cri import CriClient
from crio import CRIO_IMAGE, node_config, running
from engine_builds import crio_dir
from podman import podman
from runc_hooks import STANDIN_CLI
from test_daemonset_image import debian_node, debian_root_tar, image  # noqa: F401 - fixtures
from test_nri_containerd import GPUS
from test_nri_image import VAR, install_node, plugin_container, run_pod, wait_ready, write_env_file

from hook.util import paths

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0
        or not shutil.which("podman")
        or not shutil.which("mmdebstrap")
        or crio_dir() is None,
        reason="needs root, podman, mmdebstrap and GPU_ENV_HOOK_CRIO (CRI-O)",
    ),
]


@pytest.fixture
def node(debian_root_tar: Path, tmp_path: Path) -> Path:  # noqa: F811 - the imported fixture
    """The scratch node root, with CRI-O's config (runc as its default runtime, as on this machine)."""
    root = debian_node(debian_root_tar, tmp_path / "node")
    (root / "etc/crio").mkdir(parents=True, exist_ok=True)
    (root / "etc/crio/crio.conf").write_text(node_config(tmp_path / "daemon"))
    return root


@pytest.fixture
def plugin(image: str, node: Path, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:  # noqa: F811
    """The manifest's init container run to its end with ENGINE=crio, the hook's config (the test's device
    mode; legacy: the stand-in cli recording into tmp/cli-records), then the plugin container started (not
    yet ready: CRI-O is not there); the container's name. Removed after."""
    config = node / "etc/nvidia-container-runtime/config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    if request.param == "cdi":
        config.write_text('[gpu-env]\ndevice-mode = "cdi"\n')
    else:
        records = tmp_path / "cli-records"
        records.mkdir()
        # The strict gate: a pinned file's devices pass because the plugin's hook is told the file was
        # pinned (a hooks JSON's hook, which install --nri does not write, would not be).
        config.write_text(
            "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"
            f'[nvidia-container-cli]\npath = "{STANDIN_CLI}"\nenvironment = ["STANDIN_RECORD_DIR={records}"]\n'
        )
    install_node(image, node, "crio")
    # NRI=pod: no hooks JSON (its hook would run for every container) and no systemd unit.
    assert not (node / paths.OCI_HOOKS_DIRS[0].lstrip("/") / paths.HOOK_JSON_NAME).exists()
    assert not (node / "etc/systemd/system/gpu-env-hook-nri.service").exists()
    with plugin_container(image, node, "gpu-env-hook-nri-crio") as name:
        yield name


@pytest.mark.parametrize("plugin", ["cdi", "legacy"], indirect=True)
def test_the_images_plugin_on_crio_applies_refuses_and_fails_closed_when_stopped(
    node: Path, plugin: str, tmp_path: Path
) -> None:
    """The plugin from the image, in a privileged container with the manifest's mounts, against a real CRI-O
    through CRI: ready once registered; a pinned file applied (CDI mode: the file's device through CRI-O's
    CDI injection, and its variables; legacy mode: the variables, and the stand-in cli called with the
    file's device); the guard's mount gone; another pod's file refused with the plugin's line; TERM stops it
    with status 0; then an env-file container is never created and a plain one runs."""
    legacy = (tmp_path / "cli-records").is_dir()
    devices = [
        {"name": str(index), "containerEdits": {"env": [f"CDI_GPU={index}"], "deviceNodes": [
            {"path": f"/dev/nvidia-test{index}", "hostPath": "/dev/null"}]}}
        for index in range(GPUS)
    ]  # fmt: skip
    (node / "etc/cdi/test-gpus.json").write_text(
        json.dumps({"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": devices})
    )
    pinned = write_env_file(
        node, "pod-a.env", "GPU_ENV_HOOK_POD_UID=uid-gpu-a\nNVIDIA_VISIBLE_DEVICES=3\nA=1\n"
    )
    other = write_env_file(node, "pod-b.env", "GPU_ENV_HOOK_POD_UID=uid-else\nNVIDIA_VISIBLE_DEVICES=1\n")
    archive = write_image_archive(tmp_path / "image.tar", CRIO_IMAGE, ["/bin/sleep", "3600"])
    binds = {"/etc/nvidia-container-runtime": node / "etc/nvidia-container-runtime"}
    with running(node, tmp_path / "daemon", nri_dir=node / "run/nri", binds=binds) as daemon:
        daemon.import_image(archive)
        client = CriClient(daemon.address)
        try:
            wait_ready(plugin)
            assert "configured by cri-o 1.36" in podman("logs", plugin).stdout

            run = functools.partial(run_pod, client, tmp_path, CRIO_IMAGE)

            status, stdout = run("gpu-a", {VAR: pinned}, True)
            assert (status.exit_code, status.reason) == (0, "Completed"), daemon.log()
            assert "A=1" in stdout
            assert not any(paths.ENV_FILE_GUARD_TARGET in line for line in stdout)
            if legacy:
                assert "NVIDIA_VISIBLE_DEVICES=3" in stdout
                calls = [json.loads(path.read_text()) for path in (tmp_path / "cli-records").glob("*.json")]
                assert any("--device=3" in call["argv"] for call in calls), calls
            else:
                assert {"CDI_GPU=3", "NVIDIA_VISIBLE_DEVICES=void", "nvidia-test3"} <= set(stdout)
            with pytest.raises(grpc.RpcError) as refused:
                run("gpu-a", {VAR: other}, True)
            details = refused.value.details() or ""
            assert (
                f"env file '{other}': is pinned to another pod (annotation io.kubernetes.pod.uid differs)"
                in details
            )

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

"""A real containerd (Debian's 1.6) on node trees that ``install --engine containerd --root NODE`` edited.

Each test starts its own daemon (``tests/integration/containerd.py``: own root, state and socket, the node
tree's files bind-mounted at the node paths in a private mount namespace) and stops it, and every shim it
started, even when the test fails. What each test exercises is named in its docstring: ``config dump``
(containerd's merged view of the config), the CRI plugin's status, or a container started through the CRI
gRPC API as kubelet starts it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from containerd import CONTAINERD_IMAGE, running, write_image_archive
from cri import CriClient, run_in_pod

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("containerd") or not shutil.which("ctr"),
        reason="needs root and containerd",
    ),
]

CRI = "io.containerd.grpc.v1.cri"
# This VM grants no CAP_SYS_RESOURCE: a pod sandbox's oom_score_adj of -998 makes runc fail
# ("can't get final child's PID from pipe"), so pods run with restrict_oom_score_adj.
CRI_TEST_CONFIG = (
    "version = 2\n"
    f'[plugins."{CRI}"]\n'
    f'  sandbox_image = "{CONTAINERD_IMAGE}"\n'
    "  restrict_oom_score_adj = true\n"
)


@pytest.fixture(scope="module")
def containerd_image_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``docker save`` archive of the busybox test image, built once for this module."""
    directory = tmp_path_factory.mktemp("containerd-image")
    return write_image_archive(directory / "image.tar", CONTAINERD_IMAGE, ["/bin/sleep", "3600"])


def test_fixture_runs_a_pod_through_cri_and_leaves_no_shim(
    tmp_path: Path, containerd_image_archive: Path
) -> None:
    """CRI: the fixture's daemon loads the CRI plugin and runs a kubelet-shaped pod with the default runtime;
    after ``stop()`` no shim of its socket is left."""
    node = tmp_path / "node"
    (node / "etc/containerd").mkdir(parents=True)
    (node / "etc/containerd/config.toml").write_text(CRI_TEST_CONFIG)
    with running(node, tmp_path / "daemon") as daemon:
        assert daemon.plugin_status("cri") == {"io.containerd.grpc.v1": "ok"}
        daemon.import_image(containerd_image_archive)
        client = CriClient(daemon.address)
        try:
            status, stdout = run_in_pod(
                client,
                workdir=tmp_path,
                handler="",
                image=CONTAINERD_IMAGE,
                command=["/bin/env"],
                env={"FROM_CRI": "yes"},
            )
        finally:
            client.close()
        assert (status.exit_code, status.reason) == (0, "Completed")
        assert "FROM_CRI=yes" in stdout
    assert daemon.shim_pids() == []

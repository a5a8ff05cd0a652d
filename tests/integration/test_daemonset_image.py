"""The DaemonSet's image, built by `make image`, run as its pod runs it: a real podman container (privileged, the
node's / at /host) whose entrypoint installs, upgrades and uninstalls against a scratch node root.

The Debian node is the image's own root filesystem (Debian 12 with Python 3.11), exported to a directory: a
node with the Python the hook needs. The node without Python is a busybox root filesystem: the entrypoint
refuses it in one line (packaging/kubernetes/README.md: the node's own Python runs the hook)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from busybox import make_busybox_rootfs, unique_id
from podman import podman, podman_env

from hook import __version__
from hook.util import paths

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("podman") or not shutil.which("mmdebstrap"),
        reason="needs root, podman and mmdebstrap",
    ),
]

REPO = Path(__file__).resolve().parents[2]
IMAGE = f"localhost/gpu-env-hook:{__version__}-test"
# Where the image keeps its package: a file there mounted with other bytes makes another version.
SITE = "/usr/local/lib/gpu-env-hook/lib/python3.11/site-packages/hook"
NODE_PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def image() -> str:
    """Build the image with `make image` into the tests' podman storage (base and layers reused when there)."""
    proc = subprocess.run(
        ["make", "-C", str(REPO), "image"],
        env=podman_env({"IMAGE": IMAGE}),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return IMAGE


@pytest.fixture(scope="module")
def debian_root_tar(image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's root filesystem as a tarball: a Debian 12 node with /usr/bin/python3."""
    name = f"gpu-env-hook-node-{unique_id()}"
    tar = tmp_path_factory.mktemp("node-tar") / "node.tar"
    podman("create", "--name", name, image)
    try:
        podman("export", "--output", str(tar), name, timeout=300)
    finally:
        podman("rm", "--force", name, check=False)
    return tar


def debian_node(tar: Path, where: Path) -> Path:
    """Unpack the Debian node root at ``where``, with a /proc (install creates the env-file directory)."""
    where.mkdir()
    subprocess.run(["tar", "-xpf", str(tar), "-C", str(where), "--numeric-owner"], check=True, timeout=300)
    # The node's /proc as uninstall reads it (--proc /host/proc) to find containers still using the runtime
    # wrapper: only an init runs.
    (where / "proc/1").mkdir(parents=True)
    (where / "proc/1/cmdline").write_bytes(b"/sbin/init\0")
    return where


def snapshot(root: Path) -> dict[str, tuple[object, ...]]:
    """Every path under root: kind, mode, owner, and the digest of a file's bytes (a link's target; a special
    file's mode and device number: never read)."""
    found: dict[str, tuple[object, ...]] = {}
    for parent, dirs, files in os.walk(root):
        for name in sorted([*dirs, *files]):
            path = Path(parent, name)
            st = path.lstat()
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = ("link", str(path.readlink()))
            elif path.is_dir():
                found[rel] = ("dir", st.st_mode, st.st_uid, st.st_gid)
            elif not stat.S_ISREG(st.st_mode):  # a socket, a device node (the image's /dev/console)
                found[rel] = ("special", st.st_mode, st.st_rdev)
            else:
                found[rel] = (
                    "file",
                    st.st_mode,
                    st.st_uid,
                    st.st_gid,
                    hashlib.sha256(path.read_bytes()).digest(),
                )
    return found


@contextlib.contextmanager
def cri_socket(node: Path, name: str) -> Iterator[None]:
    """A listening Unix socket at the node path ``name`` (what --engine auto looks for), removed after."""
    path = node / name
    path.parent.mkdir(parents=True, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(str(path))
        yield
    finally:
        listener.close()
        path.unlink(missing_ok=True)


class Pod:
    """The image's entrypoint in a privileged podman container with the node root at /host, as the manifest
    runs it: started, read until its ready line (or its exit), then stopped with TERM as kubelet does."""

    def __init__(
        self, image: str, node: Path, mode: str, *, engine: str = "auto", mounts: tuple[str, ...] = ()
    ):
        self.name = f"gpu-env-hook-pod-{unique_id()}"
        volumes = [arg for mount in (f"{node}:/host", *mounts) for arg in ("--volume", mount)]
        podman(
            "run", "--detach", "--name", self.name, "--privileged", "--read-only", "--net=none",
            "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096",
            "--env", f"MODE={mode}", "--env", f"ENGINE={engine}", *volumes, image,
        )  # fmt: skip

    def wait_ready(self) -> tuple[bool, str]:
        """Wait for the "gpu-env-hook: installed|uninstalled" line or the container's exit; return whether it
        is still running, and its output so far."""
        deadline = time.monotonic() + 180
        while True:
            logs = podman("logs", self.name).stdout + podman("logs", self.name).stderr
            state = podman("inspect", "--format", "{{.State.Running}}", self.name).stdout.strip()
            if state != "true" or "gpu-env-hook: installed" in logs or "gpu-env-hook: uninstalled" in logs:
                return state == "true", logs
            assert time.monotonic() < deadline, logs
            time.sleep(0.3)

    def stop(self) -> int:
        """TERM the entrypoint (10 s before KILL, as the manifest's grace period) and return its exit status."""
        podman("stop", "--time", "10", self.name, timeout=60)
        return int(podman("inspect", "--format", "{{.State.ExitCode}}", self.name).stdout)

    def stderr(self) -> str:
        """What the entrypoint wrote on stderr."""
        return podman("logs", self.name).stderr

    def remove(self) -> None:
        """Remove the container whatever happened."""
        podman("rm", "--force", self.name, check=False)


def run_pod(image: str, node: Path, mode: str, *, engine: str = "auto", mounts: tuple[str, ...] = ()) -> str:
    """Run one pod to its ready line, TERM it, and return its output (it must have exited 0 on TERM)."""
    pod = Pod(image, node, mode, engine=engine, mounts=mounts)
    try:
        running, logs = pod.wait_ready()
        assert running, logs
        assert pod.stop() == 0, logs
        return logs
    finally:
        pod.remove()


def versions(node: Path) -> list[str]:
    """The version directories of the node's package tree."""
    tree = node / paths.RUNTIME_TREE.lstrip("/")
    return sorted(
        path.name
        for path in tree.iterdir()
        if not path.is_symlink() and (path / ".gpu-env-hook-tree").is_file()
    )


def test_image_installs_upgrades_and_uninstalls_a_debian_node(
    image: str, debian_root_tar: Path, tmp_path: Path
) -> None:
    """install (ENGINE=auto finds containerd's socket), a second start with another package version (beside
    the old one, `current` switched), the hook runnable by the node's own Python, and MODE=uninstall restoring
    the node root byte for byte."""
    node = debian_node(debian_root_tar, tmp_path / "node")
    tree = node / paths.RUNTIME_TREE.lstrip("/")
    with cri_socket(node, "run/containerd/containerd.sock"):
        before = snapshot(node)
        logs = run_pod(image, node, "install")
        assert "engine: containerd (found /host/run/containerd/containerd.sock)" in logs
        assert "gpu-env-hook: installed; stays installed when the pod stops" in logs
        (first,) = versions(node)
        assert (tree / "current").readlink() == Path(first)
        assert "gpu-env-runtime" in (node / "etc/containerd/config.toml").read_text()
        # The env-file directory as install, tmpfiles.d and SECURITY.md say: root's, 0700.
        env_dir = (node / "run/nvidia-env").lstat()
        assert stat.S_ISDIR(env_dir.st_mode), env_dir
        assert (stat.S_IMODE(env_dir.st_mode), env_dir.st_uid) == (0o700, 0)
        # The node's own Python runs what was installed (as the engines do, under the node's root).
        wrapper = subprocess.run(
            ["chroot", str(node), paths.HOOK_WRAPPER, "--version"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert wrapper.stdout == f"gpu-env-hook version {__version__}\n", wrapper.stderr

        # The next image (here: one package file with other bytes) is a new version beside the old.
        changed = tmp_path / "py.typed"
        changed.write_text("an upgrade\n")
        logs = run_pod(image, node, "install", mounts=(f"{changed}:{SITE}/py.typed:ro",))
        (second,) = set(versions(node)) - {first}
        assert sorted(versions(node)) == sorted([first, second])
        assert (tree / "current").readlink() == Path(second)
        assert f"switched /host{paths.RUNTIME_TREE}/current to {second}" in logs

        logs = run_pod(image, node, "uninstall")
        assert "gpu-env-hook: uninstalled; delete the DaemonSet" in logs
        assert snapshot(node) == before


def test_image_keeps_the_runtime_wrapper_running_containers_use(
    image: str, debian_root_tar: Path, tmp_path: Path
) -> None:
    """MODE=uninstall while a container still runs through the handler keeps the runtime wrapper as a
    passthrough; the same mode again, once it is gone, removes it: the node root is restored."""
    node = debian_node(debian_root_tar, tmp_path / "node")
    before = snapshot(node)
    run_pod(image, node, "install", engine="crio")
    conmon = node / "proc/77"
    conmon.mkdir()
    (conmon / "cmdline").write_bytes(f"/usr/bin/conmon\0-r\0{paths.runtime_wrapper('crio')}\0".encode())
    run_pod(image, node, "uninstall", engine="crio")
    assert "(retired)" in (node / paths.runtime_wrapper("crio").lstrip("/")).read_text()
    (conmon / "cmdline").unlink()
    conmon.rmdir()
    run_pod(image, node, "uninstall", engine="crio")
    assert snapshot(node) == before


@pytest.mark.parametrize(
    ("node_kind", "message"),
    [
        pytest.param(
            "busybox",
            f"gpu-env-hook: the node has no Python 3.11 or later at {NODE_PYTHON} (the engines run the hook "
            "with it): install one there, or set PY to its path\n",
            id="no-python",
        ),
        pytest.param(
            "debian",
            "gpu-env-hook: --engine auto: no CRI-O or containerd socket under /host/run; give --engine\n",
            id="no-cri-socket",
        ),
    ],
)
def test_image_refuses_a_node_it_cannot_serve_in_one_line(
    image: str, debian_root_tar: Path, tmp_path: Path, node_kind: str, message: str
) -> None:
    """A node without Python (busybox), or with ENGINE=auto and no CRI socket: the pod exits 1 with one line on
    stderr and the node root is untouched."""
    if node_kind == "busybox":
        node = make_busybox_rootfs(tmp_path / "node")
        socket_name: str | None = "run/containerd/containerd.sock"
    else:
        node = debian_node(debian_root_tar, tmp_path / "node")
        socket_name = None
    with cri_socket(node, socket_name) if socket_name else contextlib.nullcontext():
        before = snapshot(node)
        pod = Pod(image, node, "install")
        try:
            running, logs = pod.wait_ready()
            assert not running, logs
            assert int(podman("inspect", "--format", "{{.State.ExitCode}}", pod.name).stdout) == 1
            assert pod.stderr() == message
        finally:
            pod.remove()
        assert snapshot(node) == before


def manifest_mounts(node: Path) -> tuple[str, ...]:
    """The DaemonSet container's volume mounts but the node's / (Pod adds it), as podman --volume arguments
    with each hostPath under the node root (a DirectoryOrCreate one created, as kubelet does)."""
    import yaml

    documents = yaml.safe_load_all((REPO / "packaging/kubernetes/gpu-env-hook.yaml").read_text())
    spec = next(doc for doc in documents if doc and doc["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume["hostPath"] for volume in spec["volumes"]}
    found = []
    for mount in spec["containers"][0]["volumeMounts"]:
        host = volumes[mount["name"]]
        if host["path"] == "/":
            continue
        source = node / host["path"].lstrip("/")
        if host.get("type") == "DirectoryOrCreate":
            source.mkdir(parents=True, exist_ok=True)
        found.append(f"{source}:{mount['mountPath']}{':ro' if mount.get('readOnly') else ''}")
    return tuple(found)


def test_producer_commands_in_the_pod_write_the_nodes_files(
    image: str, debian_root_tar: Path, tmp_path: Path
) -> None:
    """What the manifest's comment promises: in the pod (its mounts as the manifest sets them), `env-file
    path|write` and `cdi alloc write` use the node's naming key and write into the node's /run/nvidia-env and
    /var/run/cdi, reading the node's /etc/cdi."""
    node = debian_node(debian_root_tar, tmp_path / "node")
    device = {"name": "0", "containerEdits": {"env": ["GPU=0"]}}
    spec = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [device]}
    (node / "etc/cdi").mkdir(parents=True)
    (node / "etc/cdi/nvidia.json").write_text(json.dumps(spec))
    with cri_socket(node, "run/containerd/containerd.sock"):
        pod = Pod(image, node, "install", mounts=manifest_mounts(node))
        try:
            running, logs = pod.wait_ready()
            assert running, logs

            def run(*args: str) -> str:
                done = podman("exec", pod.name, "gpu-env-hook", *args, check=False)
                assert (done.returncode, done.stderr) == (0, ""), done.stdout
                return done.stdout

            path = run("env-file", "path", "fake0", "fake1").strip()
            run("env-file", "write", path, "NVIDIA_VISIBLE_DEVICES=0", "--pod-uid", "uid-1")
            run("cdi", "alloc", "write", "--id", "fake0", "--device", "0", "--pod-uid", "uid-1")
        finally:
            pod.remove()
    key = node / "var/lib/gpu-env-hook/alloc.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    written = node / path.lstrip("/")
    assert path.startswith("/run/nvidia-env/")
    assert 'NVIDIA_VISIBLE_DEVICES="0"' in written.read_text().splitlines()
    assert [entry.name for entry in (node / "run/cdi").iterdir()], (
        "no allocation spec in the node's /var/run/cdi"
    )

"""The DaemonSet's image, built by `make image`, run as its pod runs it: a real podman container (privileged, the
node's / at /host) whose entrypoint installs, upgrades and uninstalls against a scratch node root.

The Debian node is the image's own root filesystem (Debian 12 with Python 3.11), exported to a directory. The
nodes without Python are busybox root filesystems: one without any C library, one whose /lib, loader and
ld.so.cache hold a stub C library that says so and exits 99 when anything loads it. With PY=tree (the
manifest's default) the image puts its own interpreter, loader and libraries into the node's tree, and the
hook runs there; with PY naming a node path that is not there, the entrypoint refuses in one line."""

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
        self,
        image: str,
        node: Path,
        mode: str,
        *,
        engine: str = "auto",
        mounts: tuple[str, ...] = (),
        env: tuple[str, ...] = (),
    ):
        self.name = f"gpu-env-hook-pod-{unique_id()}"
        volumes = [arg for mount in (f"{node}:/host", *mounts) for arg in ("--volume", mount)]
        variables = [arg for variable in env for arg in ("--env", variable)]
        podman(
            "run", "--detach", "--name", self.name, "--privileged", "--read-only", "--net=none",
            "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096",
            "--env", f"MODE={mode}", "--env", f"ENGINE={engine}", *variables, *volumes, image,
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
        # The tree's own interpreter runs what was installed (as the engines do, under the node's root).
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
            "with it): install one there and set PY to its path, or set PY=tree\n",
            id="no-python-at-PY",
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
    """PY naming a node Python the node lacks (busybox), or ENGINE=auto and no CRI socket: the pod exits 1 with
    one line on stderr and the node root is untouched."""
    if node_kind == "busybox":
        node = make_busybox_rootfs(tmp_path / "node")
        socket_name: str | None = "run/containerd/containerd.sock"
    else:
        node = debian_node(debian_root_tar, tmp_path / "node")
        socket_name = None
    with cri_socket(node, socket_name) if socket_name else contextlib.nullcontext():
        before = snapshot(node)
        pod = Pod(image, node, "install", env=(f"PY={NODE_PYTHON}",) if node_kind == "busybox" else ())
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


# --- nodes with no Python and no C library of their own (PY=tree) ---------------------------------------------

# A C library that is not the tree's: loaded by anything (as a library: its constructor; as the node's loader:
# its entry point), it says so on stderr and exits 99. Built without any C library itself.
STUB_C = r"""
static const char msg[] = "STUB C LIBRARY LOADED: a library came from the node\n";
static void die(void) {
    long r;
    __asm__ volatile ("syscall" : "=a"(r) : "a"(1), "D"(2), "S"(msg), "d"(sizeof msg - 1) : "rcx", "r11", "memory");
    __asm__ volatile ("syscall" : : "a"(231), "D"(99) : "rcx", "r11", "memory");
    for (;;) {}
}
__attribute__((constructor)) static void loaded(void) { die(); }
void _start(void) { die(); }
"""
STUB_NAMES = ("libc.so.6", "libm.so.6", "libz.so.1", "libexpat.so.1", "libpthread.so.0", "libdl.so.2")
STUB_MESSAGE = "STUB C LIBRARY LOADED"
# The recording nvidia-container-cli stand-in of a node without Python: busybox sh.
CLI_RECORD = "/tmp/nvidia-container-cli.args"
SH_STANDIN = f"""#!/bin/sh
# TEST STAND-IN ONLY: records its arguments, one per line.
printf '%s\\n' "$@" > {CLI_RECORD}
"""
POD_UID = "0d9c5e1a-7b3f-4c8e-9a52-3f1e2d4c6b70"
DEVICES = "GPU-11111111-2222-3333-4444-555555555555"
ENV_FILE = "/run/nvidia-env/pinned.env"
BUNDLE = "/run/test-bundle"
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"


def node_without_libc(where: Path) -> Path:
    """A node with no Python and no C library: static busybox, containerd's config, runc (this machine's, a
    file the runtime wrapper names: dynamically linked, it could not run here, and the tests never run it),
    the sh stand-in of nvidia-container-cli on the fixed PATH, an env-file directory holding a pinned file and
    a bundle that names it."""
    node = make_busybox_rootfs(where)
    (node / "usr/bin").mkdir(parents=True)
    (node / "usr/bin/env").symlink_to("/bin/busybox")
    (node / "usr/sbin").mkdir(parents=True)
    shutil.copy2("/usr/sbin/runc", node / "usr/sbin/runc")
    (node / "etc/containerd").mkdir(parents=True)
    (node / "etc/containerd/config.toml").write_text("version = 2\n")
    cli = node / "usr/bin/nvidia-container-cli"
    cli.write_text(SH_STANDIN)
    cli.chmod(0o755)
    env_file = node / ENV_FILE.lstrip("/")
    env_file.parent.mkdir(parents=True)
    env_file.parent.chmod(0o700)
    env_file.write_text(f"NVIDIA_VISIBLE_DEVICES={DEVICES}\nGPU_ENV_HOOK_POD_UID={POD_UID}\n")
    env_file.chmod(0o644)
    bundle = node / BUNDLE.lstrip("/")
    (bundle / "rootfs").mkdir(parents=True)
    spec = {
        "ociVersion": "1.0.2",
        "process": {"args": ["true"], "cwd": "/", "env": ["PATH=/bin", f"NVIDIA_ENV_FROM_FILE={ENV_FILE}"]},
        "root": {"path": f"{BUNDLE}/rootfs"},
        "annotations": {"io.kubernetes.cri.sandbox-uid": POD_UID, "io.kubernetes.cri.container-name": "main"},
    }
    (bundle / "config.json").write_text(json.dumps(spec))
    return node


def node_with_foreign_libc(where: Path, stubs: Path) -> Path:
    """The node without Python, with a C library that is not the tree's where a node keeps one: the stub under
    each library name the tree's interpreter loads, in /lib/x86_64-linux-gnu (named in /etc/ld.so.cache) and
    as the node's own loader."""
    node = node_without_libc(where)
    lib = node / "lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    for name in STUB_NAMES:
        shutil.copy2(stubs / name, lib / name)
    (node / "lib64").mkdir()
    shutil.copy2(stubs / "libc.so.6", node / "lib64/ld-linux-x86-64.so.2")
    (node / "etc/ld.so.conf").write_text("/lib/x86_64-linux-gnu\n")
    subprocess.run(["ldconfig", "-X", "-r", str(node)], check=True, capture_output=True, timeout=60)
    cached = subprocess.run(
        ["ldconfig", "-p", "-C", str(node / "etc/ld.so.cache")], check=True, capture_output=True, text=True
    ).stdout
    assert "libc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6" in cached, cached
    # The stub does what it is for: the node's runc (dynamically linked) dies by it there.
    runc = subprocess.run(
        ["chroot", str(node), "/usr/sbin/runc", "--version"], capture_output=True, text=True, check=False
    )
    assert (runc.returncode, STUB_MESSAGE in runc.stderr) == (99, True), runc
    return node


@pytest.fixture(scope="module")
def stubs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stub C library, built once under each name (its own soname)."""
    if not shutil.which("gcc"):
        pytest.skip("needs gcc to build the stub C library")
    where = tmp_path_factory.mktemp("stub-libc")
    source = where / "stub.c"
    source.write_text(STUB_C)
    for name in STUB_NAMES:
        subprocess.run(
            ["gcc", "-nostdlib", "-shared", "-fPIC", "-O2", f"-Wl,-soname,{name}", "-Wl,-e,_start",
             "-o", str(where / name), str(source)],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    return where


@contextlib.contextmanager
def live_proc(node: Path) -> Iterator[None]:
    """The node's /proc live under its root, as a hostPath of / gives the pod (--proc /host/proc), unmounted
    after."""
    subprocess.run(["mount", "--bind", "/proc", str(node / "proc")], check=True, timeout=30)
    try:
        yield
    finally:
        subprocess.run(["umount", "--lazy", str(node / "proc")], check=False, timeout=30)


def chroot_run(
    node: Path, argv: list[str], env: dict[str, str], stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` chrooted into the node with only ``env``."""
    return subprocess.run(
        [CHROOT, str(node), *argv],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("kind", ["no-libc", "foreign-libc"])
def test_image_installs_the_tree_interpreter_on_a_node_without_python_or_libc(
    image: str, request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> None:
    """PY=tree (the default) on a node with no Python and no C library (or a foreign one): install puts the
    image's interpreter into the node's tree; chrooted into the node, the hook command prints its version and,
    as a prestart hook started as every hook entry starts it (the loader, no shell), applies the bundle's
    pinned env file and calls the node's nvidia-container-cli with its devices; MODE=uninstall restores the
    node root byte for byte."""
    from hook.launcher import PYTHON_FLAGS, tree_command

    node = (
        node_without_libc(tmp_path / "node")
        if kind == "no-libc"
        else node_with_foreign_libc(tmp_path / "node", request.getfixturevalue("stubs"))
    )
    with cri_socket(node, "run/containerd/containerd.sock"):
        before = snapshot(node)
        with live_proc(node):
            logs = run_pod(image, node, "install")
        assert "gpu-env-hook: installed; stays installed when the pod stops" in logs
        (version,) = versions(node)
        python = node / paths.RUNTIME_TREE.lstrip("/") / version / "python"
        for path in [python, *python.rglob("*")]:
            info = path.lstat()
            expected = (
                0o755 if path.is_dir() or path.name in ("python3.11", "ld-linux-x86-64.so.2") else 0o644
            )
            assert (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (expected, 0, 0), path
        size = subprocess.run(["du", "-sk", str(python.parent)], capture_output=True, text=True, check=True)
        assert int(size.stdout.split()[0]) < 40 * 1024, size.stdout

        env = {"PATH": paths.FIXED_PATH, "GPU_ENV_HOOK_ENGINE": "containerd"}
        wrapper = chroot_run(node, [paths.HOOK_WRAPPER, "--version"], {})
        assert (wrapper.returncode, wrapper.stdout) == (0, f"gpu-env-hook version {__version__}\n"), wrapper
        entry = [*tree_command(paths.RUNTIME_TREE), *PYTHON_FLAGS, paths.LAUNCH_SCRIPT]
        direct = chroot_run(node, [*entry, "--version"], env)
        assert (direct.returncode, direct.stdout) == (0, f"gpu-env-hook version {__version__}\n"), direct
        state = json.dumps(
            {"ociVersion": "1.0.2", "id": "c1", "status": "created", "pid": 1, "bundle": BUNDLE}
        )
        config = node / BUNDLE.lstrip("/") / "config.json"
        spec_before = config.read_bytes()
        with live_proc(node):
            hook = chroot_run(node, [*entry, "prestart"], env, stdin=state)
        assert (hook.returncode, hook.stderr) == (0, "Auto-detected mode as 'legacy'\n"), hook
        record = node / CLI_RECORD.lstrip("/")
        argv = record.read_text().splitlines()
        assert argv[argv.index("configure") :] == [
            "configure", "--cuda-compat-mode=ldconfig", "--ldconfig=@/sbin/ldconfig", f"--device={DEVICES}",
            "--compute", "--utility", "--pid=1", f"{BUNDLE}/rootfs",
        ], argv  # fmt: skip
        # What the test made on the node goes before the comparison (the hook merged the file into config.json).
        record.unlink()
        config.write_bytes(spec_before)

        with live_proc(node):
            logs = run_pod(image, node, "uninstall")
        assert "gpu-env-hook: uninstalled; delete the DaemonSet" in logs
        assert snapshot(node) == before

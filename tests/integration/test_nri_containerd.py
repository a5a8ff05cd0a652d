"""``gpu-env-hook nri`` on a real containerd 2.x, through CRI as kubelet calls it (the default handler).

containerd 2.x is not packaged for Debian 12: these tests run a build found through the environment variable
``GPU_ENV_HOOK_CONTAINERD2`` (a directory holding ``containerd``, ``ctr`` and ``containerd-shim-runc-v2``, or
one with them in ``bin/``) and are skipped where it is absent. Each test starts its own daemon (NRI on, its
socket under the test's directory, the env-file guard's CDI spec as install writes it in its CDI spec
directory) and the plugin as a process, and stops both, even when it fails. Every container that names an
env file is created as a device plugin's would be: with the guard's CDI device.

With ``GPU_ENV_HOOK_NRI_RECORD=DIR``, the exchange of the first test between containerd and the plugin is
recorded (through a relaying socket) into ``DIR/containerd-<version>.json``: the data
``tests/unit/test_nri_replay.py`` replays in CI, where no containerd 2.x runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from containerd import CONTAINERD_IMAGE, Containerd, running, write_image_archive
from cri import CriClient, read_cri_log, remove_pod, start_pod
from engine_builds import containerd2_dir
from runc_hooks import STANDIN_CLI

from hook.install.guard import guard_spec
from hook.util import paths

REPO = Path(__file__).resolve().parents[2]


BINARIES = containerd2_dir()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or BINARIES is None,
        reason="needs root and GPU_ENV_HOOK_CONTAINERD2 (containerd 2.x)",
    ),
]

PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path
VAR = "NVIDIA_ENV_FROM_FILE"
GUARD = paths.ENV_FILE_GUARD_DEVICE
# What runc says when the guard's mount is still there (the plugin did not apply the file).
GUARD_FAILED = f"{paths.ENV_FILE_GUARD_SOURCE}: no such file or directory"
# Env files of these tests live here (a fixed path, so that a recorded exchange replays anywhere).
ENV_DIR = Path("/tmp/gpu-env-hook-nri-capture")
ENV_FILE = "# written by the device plugin\nNVIDIA_VISIBLE_DEVICES=1,2\nUSER_CUSTOM_ENV=hello\n"


def write_env_file(name: str, content: str) -> Path:
    """A root-owned 0644 env file in ENV_DIR."""
    ENV_DIR.mkdir(mode=0o755, exist_ok=True)
    path = ENV_DIR / name
    path.write_text(content)
    path.chmod(0o644)
    return path


def containerd_config(socket_path: Path, cdi_dir: Path) -> str:
    """containerd 2.x config: NRI on at ``socket_path``, the test image as the pause image, CDI specs from
    ``cdi_dir`` (this VM refuses a sandbox's oom_score_adj of -998). The runc handler is containerd's own:
    no base spec."""
    return (
        "version = 3\n"
        "[plugins.'io.containerd.cri.v1.images'.pinned_images]\n"
        f"  sandbox = '{CONTAINERD_IMAGE}'\n"
        "[plugins.'io.containerd.cri.v1.runtime']\n"
        "  restrict_oom_score_adj = true\n"
        "  enable_cdi = true\n"
        f"  cdi_spec_dirs = ['{cdi_dir}']\n"
        "[plugins.'io.containerd.nri.v1.nri']\n"
        "  disable = false\n"
        f"  socket_path = '{socket_path}'\n"
        "  plugin_request_timeout = '2s'\n"
    )


GPUS = 8


def write_cdi_spec(directory: Path) -> None:
    """A CDI spec for nvidia.com/gpu=0..7: each device's edits set CDI_GPU and add /dev/nvidia-test<N>
    (the host's /dev/null: there is no GPU here)."""
    directory.mkdir(parents=True, exist_ok=True)
    devices = [
        {
            "name": str(index),
            "containerEdits": {
                "env": [f"CDI_GPU={index}"],
                "deviceNodes": [{"path": f"/dev/nvidia-test{index}", "hostPath": "/dev/null"}],
            },
        }
        for index in range(GPUS)
    ]
    spec = {"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": devices}
    (directory / "test-gpus.json").write_text(json.dumps(spec))


def write_guard_spec(directory: Path) -> None:
    """The env-file guard's CDI spec, the bytes install writes (hook.install.guard)."""
    (directory / Path(paths.ENV_FILE_GUARD_SPEC).name).write_bytes(guard_spec())


class Relay:
    """A socket between the plugin and containerd's NRI socket that records both directions' bytes."""

    def __init__(self, listen: Path, target: Path) -> None:
        self.listen = listen
        self.target = target
        self.chunks: list[dict[str, str]] = []
        self.lock = threading.Lock()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(listen))
        self.server.listen(1)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            plugin, _ = self.server.accept()
            with plugin, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as runtime:
                runtime.connect(str(self.target))
                back = threading.Thread(target=self._copy, args=(runtime, plugin, "runtime"), daemon=True)
                back.start()
                self._copy(plugin, runtime, "plugin")
                back.join(timeout=5)

    def _copy(self, source: socket.socket, dest: socket.socket, name: str) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(1 << 16):
                with self.lock:
                    self.chunks.append({"from": name, "hex": data.hex()})
                dest.sendall(data)
        with contextlib.suppress(OSError):
            dest.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.server.close()
        self.thread.join(timeout=10)


class PluginNode:
    """An engine with NRI (containerd 2.x here, CRI-O in test_nri_crio.py), the plugin's configuration and a
    CRI client, for one test: the plugin started on ``socket``, stopped, its cli calls, a pod run."""

    def __init__(
        self, tmp_path: Path, daemon: Any, hook_config: Path, records: Path, *, socket: Path, image: str
    ) -> None:
        self.tmp_path = tmp_path
        self.daemon = daemon
        self.hook_config = hook_config
        self.records = records
        self.socket = socket
        self.image = image
        self.client = CriClient(daemon.address)
        self.plugin: subprocess.Popen[bytes] | None = None
        self.plugin_log = tmp_path / "plugin.log"
        self.ready = tmp_path / "plugin.ready"
        self.relay: Relay | None = None

    def start_plugin(self, argv: list[str] | None = None, *, record: bool = False) -> None:
        """Start ``gpu-env-hook nri`` on the engine's NRI socket (or ``argv``) and wait until it is ready: its
        readiness file (``GPU_ENV_HOOK_NRI_READY``, the manifest's readinessProbe), made once the engine
        configured and synchronized it. ``record``: through a relay that records the exchange."""
        self.ready.unlink(missing_ok=True)
        if argv is None:
            path = self.socket
            if record:
                self.relay = Relay(self.tmp_path / "relay.sock", self.socket)
                path = self.relay.listen
            argv = [PYTHON, "-I", "-m", "hook", "-config", str(self.hook_config), "nri", str(path)]
        with self.plugin_log.open("ab") as log:
            self.plugin = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "GPU_ENV_HOOK_NRI_READY": str(self.ready)},
            )
        deadline = time.monotonic() + 30
        while not self.ready.exists():
            assert self.plugin.poll() is None, self.plugin_log.read_text()
            assert time.monotonic() < deadline, f"plugin not ready: {self.plugin_log.read_text()}"
            time.sleep(0.05)

    def stop_plugin(self) -> None:
        """Stop the plugin (TERM, then KILL) and wait for it."""
        if self.plugin is not None and self.plugin.poll() is None:
            self.plugin.terminate()
            try:
                self.plugin.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.plugin.kill()
                self.plugin.wait(timeout=5)
        self.plugin = None

    def cli_calls(self) -> list[dict[str, Any]]:
        """What the stand-in cli recorded, one record per call."""
        return [json.loads(path.read_text()) for path in sorted(self.records.glob("*.json"))]

    def run_pod(
        self, name: str, env: dict[str, str], command: list[str] | None, cdi_devices: tuple[str, ...]
    ) -> tuple[Any, list[str]]:
        """A pod with one container through CRI (default handler), run to its end; its status and stdout."""
        pod = start_pod(
            self.client,
            workdir=self.tmp_path,
            handler="",
            image=self.image,
            command=command or ["/bin/env"],
            env=env,
            name=name,
            cdi_devices=cdi_devices,
        )
        try:
            status = self.client.wait_exited(pod.container)
            return status, read_cri_log(pod.log)
        finally:
            remove_pod(self.client, pod.sandbox)


class Node(PluginNode):
    """One containerd 2.x with NRI and the plugin's configuration, for one test."""

    daemon: Containerd

    def __init__(self, tmp_path: Path, daemon: Containerd, hook_config: Path, records: Path) -> None:
        super().__init__(
            tmp_path, daemon, hook_config, records, socket=tmp_path / "nri.sock", image=CONTAINERD_IMAGE
        )

    def run(self, name: str, env: dict[str, str], command: list[str] | None = None) -> tuple[Any, list[str]]:
        """A pod with one container through CRI, run to its end; its status and stdout. A container naming an
        env file gets the guard's CDI device, as from a device plugin's Allocate."""
        return self.run_pod(name, env, command, (GUARD,) if VAR in env else ())

    def never_runs(self, name: str, env: dict[str, str]) -> str:
        """Create and start an env-file container (with the guard) as kubelet does; assert it never ran its
        process (created, start refused, never Running, nothing on stdout) and return the start's error."""
        client = self.client
        logs = self.tmp_path / f"pod-logs-{name}"
        config = client.sandbox_config(name, logs, {})
        sandbox = client.run_pod_sandbox(config, "")
        try:
            container = client.create_container(
                sandbox,
                config,
                name=name,
                image=CONTAINERD_IMAGE,
                command=["/bin/echo", "ran"],
                env=env,
                log_path=f"{name}.log",
                cdi_devices=(GUARD,),
            )
            with pytest.raises(grpc.RpcError) as refused:
                client.start_container(container)
            status = client.container_status(container)
            assert status.state != client.pb.CONTAINER_RUNNING
            assert status.started_at == 0, status
            log = logs / f"{name}.log"
            assert not log.exists() or read_cri_log(log) == []
            return refused.value.details() or ""
        finally:
            remove_pod(client, sandbox)


@pytest.fixture(scope="module")
def image_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The busybox test image, built once for this module."""
    directory = tmp_path_factory.mktemp("containerd2-image")
    return write_image_archive(directory / "image.tar", CONTAINERD_IMAGE, ["/bin/sleep", "3600"])


@pytest.fixture
def node(tmp_path: Path, image_archive: Path, request: pytest.FixtureRequest) -> Iterator[Node]:
    """containerd 2.x with NRI, the guard's CDI spec, a hook config using the stand-in cli;
    in CDI mode when parametrized with "cdi"."""
    assert BINARIES is not None
    device_mode = getattr(request, "param", "legacy")
    records = tmp_path / "cli-records"
    records.mkdir()
    hook_config = tmp_path / "gpu-env-hook.toml"
    hook_config.write_text(
        "[nvidia-container-cli]\n"
        f'path = "{STANDIN_CLI}"\n'
        f'environment = ["STANDIN_RECORD_DIR={records}"]\n'
        "[env-file]\n"
        f'directories = ["{ENV_DIR}"]\n'
        f'[gpu-env]\ndevice-mode = "{device_mode}"\n'
        f'[gpu-env.cdi]\nspec-dirs = ["{tmp_path / "cdi"}"]\nspec-cache = "{tmp_path / "spec-cache"}"\n'
    )
    write_cdi_spec(tmp_path / "cdi")
    write_guard_spec(tmp_path / "cdi")
    tree = tmp_path / "node"
    (tree / "etc/containerd").mkdir(parents=True)
    (tree / "etc/containerd/config.toml").write_text(
        containerd_config(tmp_path / "nri.sock", tmp_path / "cdi")
    )
    with running(tree, tmp_path / "daemon", binaries=BINARIES) as daemon:
        daemon.import_image(image_archive)
        current = Node(tmp_path, daemon, hook_config, records)
        try:
            yield current
        finally:
            current.stop_plugin()
            if current.relay is not None:
                current.relay.close()
                save_record(current)
            current.client.close()
            shutil.rmtree(ENV_DIR, ignore_errors=True)  # the test's env files: nothing left in /tmp


def containerd_version(daemon: Containerd) -> str:
    """The daemon's version, as CRI reports it."""
    return str(CriClient(daemon.address).version().runtime_version)


def save_record(current: Node) -> None:
    """Write the relay's recording to GPU_ENV_HOOK_NRI_RECORD (the replay test's data)."""
    directory = os.environ.get("GPU_ENV_HOOK_NRI_RECORD", "")
    if not directory or current.relay is None:
        return
    version = containerd_version(current.daemon)
    document = {
        "runtime": f"containerd {version}",
        "recorded": time.strftime("%Y-%m-%d", time.gmtime()),
        "env_dir": str(ENV_DIR),
        "env_files": {path.name: path.read_text() for path in sorted(ENV_DIR.glob("*.env"))},
        "chunks": current.relay.chunks,
    }
    out = Path(directory) / f"containerd-{version.lstrip('v')}.json"
    out.write_text(json.dumps(document, indent=1) + "\n")


def test_env_file_reaches_the_process_and_the_cli_runs_once(node: Node) -> None:
    """Legacy mode: the process sees the file's variables (and no longer the variable naming it), the guard's
    mount is gone, the stand-in cli is called once with the file's devices; a container without an env file
    is untouched; a file pinned to another pod is refused at CreateContainer with our one line."""
    pinned = write_env_file("pod-a.env", ENV_FILE + "GPU_ENV_HOOK_POD_UID=uid-gpu-a\n")
    other = write_env_file("pod-b.env", ENV_FILE + "GPU_ENV_HOOK_POD_UID=uid-someone-else\n")
    node.start_plugin(record=bool(os.environ.get("GPU_ENV_HOOK_NRI_RECORD")))

    status, stdout = node.run("plain", {"FROM_CRI": "yes"})
    assert (status.exit_code, status.reason) == (0, "Completed"), node.daemon.log()
    assert "FROM_CRI=yes" in stdout
    assert not any(line.startswith(("NVIDIA_", "USER_CUSTOM_ENV")) for line in stdout)
    assert node.cli_calls() == []

    status, stdout = node.run("gpu-a", {VAR: str(pinned)}, ["/bin/sh", "-c", "env; cat /proc/self/mounts"])
    assert (status.exit_code, status.reason) == (0, "Completed"), node.daemon.log()
    assert "NVIDIA_VISIBLE_DEVICES=1,2" in stdout
    assert "USER_CUSTOM_ENV=hello" in stdout
    assert f"{VAR}=" in stdout  # set empty: handled
    assert not any(paths.ENV_FILE_GUARD_TARGET in line for line in stdout)
    calls = node.cli_calls()
    assert len(calls) == 1
    assert "--device=1,2" in calls[0]["argv"]

    with pytest.raises(grpc.RpcError) as refused:
        node.run("gpu-a", {VAR: str(other)})
    details = refused.value.details() or ""
    assert (
        f"env file '{other}': is pinned to another pod (annotation io.kubernetes.cri.sandbox-uid differs)"
        in details
    )
    assert "uid-someone-else" not in details
    assert len(node.cli_calls()) == 1


@pytest.mark.parametrize("node", ["cdi"], indirect=True)
def test_cdi_mode_the_devices_edits_are_in_the_container(node: Node) -> None:
    """CDI mode: the plugin names the file's devices; containerd 2.3 applies their CDI edits (a variable, a
    device node), the process sees the file's variables, and no hook or cli runs."""
    env_file = write_env_file(
        "pod-cdi.env", "GPU_ENV_HOOK_POD_UID=uid-gpu-cdi\nNVIDIA_VISIBLE_DEVICES=3\nA=1\n"
    )
    node.start_plugin()
    status, stdout = node.run("gpu-cdi", {VAR: str(env_file)}, ["/bin/sh", "-c", "env; ls /dev"])
    assert (status.exit_code, status.reason) == (0, "Completed"), node.daemon.log()
    assert {"CDI_GPU=3", "A=1", "NVIDIA_VISIBLE_DEVICES=void", "nvidia-test3"} <= set(stdout)
    assert "nvidia-test0" not in stdout
    assert node.cli_calls() == []


def test_pod_annotations_cannot_forge_the_identity(node: Node) -> None:
    """A pod annotated with containerd's sandbox-uid key and the victim's uid is still the pod it is."""
    victim = write_env_file("victim.env", ENV_FILE + "GPU_ENV_HOOK_POD_UID=uid-victim\n")
    node.start_plugin()
    client = node.client
    config = client.sandbox_config(
        "attacker", node.tmp_path / "logs", {"io.kubernetes.cri.sandbox-uid": "uid-victim"}
    )
    sandbox = client.run_pod_sandbox(config, "")
    try:
        with pytest.raises(grpc.RpcError) as refused:
            client.create_container(
                sandbox,
                config,
                name="attacker",
                image=CONTAINERD_IMAGE,
                command=["/bin/env"],
                env={VAR: str(victim)},
                log_path="attacker.log",
                cdi_devices=(GUARD,),
            )
        assert "is pinned to another pod" in (refused.value.details() or "")
    finally:
        remove_pod(client, sandbox)


def assert_plain_runs(node: Node) -> None:
    """A container without an env file (and without the guard) starts and runs."""
    status, stdout = node.run("plain", {"FROM_CRI": "yes"})
    assert (status.exit_code, status.reason) == (0, "Completed"), node.daemon.log()
    assert "FROM_CRI=yes" in stdout


def test_plugin_never_started_env_file_container_never_runs_others_do(node: Node) -> None:
    """No plugin ever registered: the env-file container is created but its start fails on the guard's
    mount (runc: no such file or directory) and it never runs; a plain container runs; nothing of ours
    ran (no cli call)."""
    env_file = write_env_file("pod-n.env", ENV_FILE)
    details = node.never_runs("gpu-n", {VAR: str(env_file)})
    assert GUARD_FAILED in details, details
    assert_plain_runs(node)
    assert node.cli_calls() == []


def test_plugin_killed_env_file_container_never_runs_others_do(node: Node) -> None:
    """The plugin killed (SIGKILL, no goodbye): containerd creates without it; the env-file container never
    runs, a plain container does; the plugin started again applies the file."""
    env_file = write_env_file("pod-c.env", ENV_FILE)
    node.start_plugin()
    assert node.plugin is not None
    node.plugin.kill()
    node.plugin.wait(timeout=10)
    node.plugin = None
    details = node.never_runs("gpu-c", {VAR: str(env_file)})
    assert GUARD_FAILED in details, details
    assert_plain_runs(node)
    assert node.cli_calls() == []
    node.start_plugin()
    status, stdout = node.run("gpu-c", {VAR: str(env_file)})
    assert (status.exit_code, status.reason) == (0, "Completed"), node.daemon.log()
    assert "USER_CUSTOM_ENV=hello" in stdout


def test_term_stops_the_plugin_promptly_and_it_is_no_longer_ready(node: Node) -> None:
    """SIGTERM (a pod's stop): the plugin exits 0 within a second, closing its connection and removing its
    readiness file; containerd then creates without it, so an env-file container never runs."""
    env_file = write_env_file("pod-t.env", ENV_FILE)
    node.start_plugin()
    assert node.plugin is not None
    stopped = time.monotonic()
    node.plugin.terminate()
    assert node.plugin.wait(timeout=5) == 0
    assert time.monotonic() - stopped < 1.0
    assert not node.ready.exists()
    assert node.plugin_log.read_text().splitlines()[-1] == "gpu-env-hook nri: stopped"
    node.plugin = None
    details = node.never_runs("gpu-t", {VAR: str(env_file)})
    assert GUARD_FAILED in details, details
    assert_plain_runs(node)


def test_plugin_past_the_timeout_env_file_container_never_runs_others_do(node: Node) -> None:
    """A plugin that does not answer (stopped with SIGSTOP) past containerd's 2 s request timeout: the
    env-file container never runs (its creation fails on the timeout, or, once containerd dropped the
    plugin, its start fails on the guard's mount); containerd keeps serving plain containers; once the
    plugin runs again it reconnects and the env file is honoured."""
    env_file = write_env_file("pod-e.env", ENV_FILE)
    node.start_plugin()
    assert node.plugin is not None
    os.kill(node.plugin.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as refused:
            node.run("gpu-e", {VAR: str(env_file)})
        assert time.monotonic() - started >= 2.0
        details = refused.value.details() or ""
        assert "10-gpu-env-hook" in details or GUARD_FAILED in details, details
        assert_plain_runs(node)
        details = node.never_runs("gpu-e", {VAR: str(env_file)})
        assert GUARD_FAILED in details, details
    finally:
        os.kill(node.plugin.pid, signal.SIGCONT)
    deadline = time.monotonic() + 30
    while node.plugin_log.read_text().count("configured by") < 2:
        assert time.monotonic() < deadline, node.plugin_log.read_text()
        time.sleep(0.1)
    status, stdout = node.run("gpu-e", {VAR: str(env_file)})
    assert (status.exit_code, status.reason) == (0, "Completed"), node.daemon.log()
    assert "USER_CUSTOM_ENV=hello" in stdout
    assert node.cli_calls() != []


def test_plugin_reconnects_after_containerd_restarts(node: Node, tmp_path: Path) -> None:
    """containerd restarted: until the plugin has reconnected (held here with SIGSTOP), an env-file container
    never runs and a plain one does; then the plugin reconnects by itself and handles env files again."""
    env_file = write_env_file("pod-d.env", ENV_FILE)
    node.start_plugin()
    assert node.plugin is not None
    os.kill(node.plugin.pid, signal.SIGSTOP)
    try:
        node.daemon.stop()
        node.daemon.start()
        node.client.close()
        node.client = CriClient(node.daemon.address)
        details = node.never_runs("gpu-d", {VAR: str(env_file)})
        assert GUARD_FAILED in details, details
        assert_plain_runs(node)
    finally:
        os.kill(node.plugin.pid, signal.SIGCONT)
    deadline = time.monotonic() + 30
    while node.plugin_log.read_text().count("configured by") < 2:
        assert time.monotonic() < deadline, node.plugin_log.read_text()
        time.sleep(0.1)
    status, stdout = node.run("gpu-d", {VAR: str(env_file)})
    assert (status.exit_code, status.reason) == (0, "Completed"), node.daemon.log()
    assert "USER_CUSTOM_ENV=hello" in stdout


MANIFEST = REPO / "packaging/kubernetes/gpu-env-hook-nri.yaml"
BURST = 100


def manifest_requests() -> tuple[int, int]:
    """The plugin container's CPU (millicores) and memory (bytes) requests in the NRI manifest."""
    import yaml

    documents = yaml.safe_load_all(MANIFEST.read_text())
    spec = next(doc for doc in documents if doc and doc["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    requests = spec["containers"][0]["resources"]["requests"]
    cpu, memory = requests["cpu"], requests["memory"]
    assert cpu.endswith("m"), requests
    assert memory.endswith("Mi"), requests
    return int(cpu[:-1]), int(memory[:-2]) << 20


class RequestCgroup:
    """cgroup v1 cpu and memory groups holding the plugin at its pod's requests, taken as limits (stricter
    than kubelet, which makes the CPU request a weight): cpu.shares as kubelet sets it, a CFS quota of the
    request itself, and the memory request as the memory limit. Removed after."""

    def __init__(self, name: str, cpu_milli: int, memory: int) -> None:
        base = Path("/sys/fs/cgroup")
        self.cpu, self.memory = base / "cpu" / name, base / "memory" / name
        for directory in (self.cpu, self.memory):
            directory.mkdir()
        (self.cpu / "cpu.shares").write_text(str(max(2, cpu_milli * 1024 // 1000)))
        (self.cpu / "cpu.cfs_period_us").write_text("100000")
        (self.cpu / "cpu.cfs_quota_us").write_text(str(cpu_milli * 100))
        (self.memory / "memory.limit_in_bytes").write_text(str(memory))

    def add(self, pid: int) -> None:
        for directory in (self.cpu, self.memory):
            (directory / "cgroup.procs").write_text(str(pid))

    def throttled(self) -> int:
        """How many CFS periods throttled the plugin."""
        stat = dict(line.split() for line in (self.cpu / "cpu.stat").read_text().splitlines())
        return int(stat["nr_throttled"])

    def remove(self) -> None:
        for directory in (self.cpu, self.memory):
            with contextlib.suppress(OSError):
                directory.rmdir()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def burst(
    node: PluginNode, files: list[Path], cgroup: RequestCgroup
) -> tuple[float, list[float], float, int]:
    """Start the plugin in ``cgroup``, then create and start a container per env file of ``files`` (with the
    guard) in one pod, all at once; return the wall time, each create+start's latency, the plugin's CPU
    seconds for the burst and its peak RSS (KiB)."""
    import concurrent.futures

    node.start_plugin()
    assert node.plugin is not None
    cgroup.add(node.plugin.pid)
    client = node.client
    config = client.sandbox_config("burst", node.tmp_path / "burst-logs", {})
    sandbox = client.run_pod_sandbox(config, "")
    try:
        before = cpu_seconds(node.plugin.pid)

        def create(index: int) -> float:
            started = time.monotonic()
            container = client.create_container(
                sandbox,
                config,
                name=f"c{index}",
                image=node.image,
                command=["/bin/true"],
                env={VAR: str(files[index])},
                log_path=f"c{index}.log",
                cdi_devices=(GUARD,),
            )
            client.start_container(container)
            return time.monotonic() - started

        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(files)) as pool:
            latencies = list(pool.map(create, range(len(files))))
        wall = time.monotonic() - started
        used = cpu_seconds(node.plugin.pid) - before
        status = Path(f"/proc/{node.plugin.pid}/status").read_text().splitlines()
        peak = int(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
    finally:
        remove_pod(client, sandbox)
    return wall, latencies, used, peak


@pytest.mark.skipif(not Path("/sys/fs/cgroup/cpu/cpu.shares").exists(), reason="needs cgroup v1 cpu, memory")
@pytest.mark.parametrize("node", ["cdi"], indirect=True)
def test_the_manifests_requests_hold_a_burst_of_creates(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    """The plugin held to the manifest's requests (its CPU request as a hard CFS quota, its memory request as
    the limit) answers a burst of 100 env-file creates at once through CRI: none is dropped (NRI's 2 s
    timeout would fail the create and disconnect the plugin), the plugin stays connected; its CPU time and
    peak RSS for the burst are printed (the figures packaging/kubernetes/README.md states)."""
    cpu_milli, memory = manifest_requests()
    uid = "uid-burst"
    files = [
        write_env_file(
            f"burst-{index}.env", f"GPU_ENV_HOOK_POD_UID={uid}\nNVIDIA_VISIBLE_DEVICES={index % GPUS}\n"
        )
        for index in range(BURST)
    ]
    cgroup = RequestCgroup(f"gpu-env-hook-nri-burst-{os.getpid()}", cpu_milli, memory)
    try:
        wall, latencies, used, peak = burst(node, files, cgroup)
        log = node.plugin_log.read_text()
        assert log.count("configured by") == 1, log
        assert "session ended" not in log, log
        assert node.plugin is not None
        assert node.plugin.poll() is None
        with capsys.disabled():
            print(
                f"\nburst of {BURST} creates, plugin at {cpu_milli}m CPU (quota) / {memory >> 20}Mi: wall {wall:.1f} s, "
                f"create+start p50 {sorted(latencies)[BURST // 2] * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms; "
                f"plugin CPU {used * 1000:.0f} ms ({used / BURST * 1000:.2f} ms a create), peak RSS {peak / 1024:.1f} MiB, "
                f"throttled periods {cgroup.throttled()}"
            )
    finally:
        for path in files:
            path.unlink(missing_ok=True)
        node.stop_plugin()
        cgroup.remove()

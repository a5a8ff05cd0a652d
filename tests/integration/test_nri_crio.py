"""``gpu-env-hook nri`` on a real CRI-O, through CRI as kubelet calls it (the default handler, no RuntimeClass).

CRI-O is not packaged for Debian 12: these tests run a build found through ``GPU_ENV_HOOK_CRIO`` (a directory
holding ``crio`` and ``pinns``, or one with them in ``bin/``) and are skipped where it is absent. Each test
starts its own daemon (``tests/integration/crio.py``: NRI on, as CRI-O 1.36 has it by default, its socket
under the test's directory; CDI specs, the env-file guard's among them, from the node's ``/etc/cdi``) and
the plugin as a process, and stops both, even when it fails.

What holds on CRI-O 1.36.3 for the env-file guard (``hook.install.guard``): CRI-O injects the CDI devices
CRI names (kubelet's CDIDevices) into the spec before NRI CreateContainer, so the plugin sees the guard's
mount; it applies an adjustment's removal of that mount; and it runs ``runc create`` within CreateContainer,
so without the removal the creation itself fails (runc cannot stat the source) and the container never
exists. A plugin past the 2 s request timeout is dropped and the container created without its adjustment:
the guard fails it the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from containerd import write_image_archive
from cri import CriClient, remove_pod
from crio import CRIO_IMAGE, Crio, node_config, running
from engine_builds import crio_dir
from runc_hooks import STANDIN_CLI
from test_nri_containerd import (
    ENV_FILE,
    GUARD,
    GUARD_FAILED,
    PYTHON,
    VAR,
    PluginNode,
    write_cdi_spec,
    write_guard_spec,
)

from hook.util import paths

# Env files of a recorded run live here (GPU_ENV_HOOK_NRI_RECORD; removed after each test).
CAPTURE_DIR = Path("/tmp/gpu-env-hook-nri-capture-crio")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or crio_dir() is None, reason="needs root and GPU_ENV_HOOK_CRIO (CRI-O)"
    ),
]


def write_env_file(directory: Path, name: str, content: str) -> Path:
    """A root-owned 0644 env file in the test's env-file directory."""
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / name
    path.write_text(content)
    path.chmod(0o644)
    return path


class Node(PluginNode):
    """One CRI-O with NRI, the plugin's configuration and a CRI client, for one test."""

    daemon: Crio

    def __init__(
        self, tmp_path: Path, daemon: Crio, hook_config: Path, records: Path, env_dir: Path | None = None
    ) -> None:
        super().__init__(tmp_path, daemon, hook_config, records, socket=daemon.nri_socket, image=CRIO_IMAGE)
        self.env_dir = env_dir or tmp_path / "nvidia-env"

    def configured(self) -> int:
        """How many times CRI-O configured a plugin of this test (each logs its Configure)."""
        if not self.plugin_log.exists():
            return 0
        return self.plugin_log.read_text(errors="replace").count("configured by cri-o")

    def run(
        self,
        name: str,
        env: dict[str, str],
        command: list[str] | None = None,
        cdi_devices: tuple[str, ...] = (),
    ) -> tuple[Any, list[str]]:
        """A pod with one container through CRI (default handler), run to its end; its status and stdout."""
        return self.run_pod(name, env, command, cdi_devices)


@pytest.fixture(scope="module")
def image_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The busybox test image, built once for this module."""
    directory = tmp_path_factory.mktemp("crio-image")
    return write_image_archive(directory / "image.tar", CRIO_IMAGE, ["/bin/sleep", "3600"])


@pytest.fixture
def node(tmp_path: Path, image_archive: Path, request: pytest.FixtureRequest) -> Iterator[Node]:
    """CRI-O with NRI (its default), the test GPUs' CDI spec and the env-file guard's (as install writes it)
    in the node's /etc/cdi, a hook config using the stand-in cli; in CDI mode when parametrized with "cdi"."""
    device_mode = getattr(request, "param", "legacy")
    # Recording (GPU_ENV_HOOK_NRI_RECORD): env files at a fixed path, so that the exchange replays anywhere.
    env_dir = CAPTURE_DIR if os.environ.get("GPU_ENV_HOOK_NRI_RECORD") else tmp_path / "nvidia-env"
    tree = tmp_path / "node"
    (tree / "etc/crio").mkdir(parents=True)
    (tree / "etc/crio/crio.conf").write_text(node_config(tmp_path / "daemon"))
    cdi = tree / "etc/cdi"
    write_cdi_spec(cdi)
    write_guard_spec(cdi)
    records = tmp_path / "cli-records"
    records.mkdir()
    hook_config = tmp_path / "gpu-env-hook.toml"
    hook_config.write_text(
        "[nvidia-container-cli]\n"
        f'path = "{STANDIN_CLI}"\n'
        f'environment = ["STANDIN_RECORD_DIR={records}"]\n'
        "[env-file]\n"
        f'directories = ["{env_dir}"]\n'
        f'[gpu-env]\ndevice-mode = "{device_mode}"\n'
        f'[gpu-env.cdi]\nspec-dirs = ["{cdi}"]\nspec-cache = "{tmp_path / "spec-cache"}"\n'
    )
    with running(tree, tmp_path / "daemon") as daemon:
        daemon.import_image(image_archive)
        current = Node(tmp_path, daemon, hook_config, records, env_dir)
        try:
            yield current
        finally:
            current.stop_plugin()
            if current.relay is not None:
                current.relay.close()
                save_record(current)
            current.client.close()
            if env_dir == CAPTURE_DIR:
                shutil.rmtree(CAPTURE_DIR, ignore_errors=True)


def save_record(current: Node) -> None:
    """Write the relay's recording to GPU_ENV_HOOK_NRI_RECORD as ``cri-o-<version>.json``: the data
    ``tests/unit/test_nri_replay.py`` replays in CI, where no CRI-O runs."""
    directory = os.environ.get("GPU_ENV_HOOK_NRI_RECORD", "")
    if not directory or current.relay is None:
        return
    version = str(current.client.version().runtime_version)
    document = {
        "runtime": f"cri-o {version}",
        "recorded": time.strftime("%Y-%m-%d", time.gmtime()),
        "env_dir": str(current.env_dir),
        "env_files": {path.name: path.read_text() for path in sorted(current.env_dir.glob("*.env"))},
        "chunks": current.relay.chunks,
    }
    (Path(directory) / f"cri-o-{version}.json").write_text(json.dumps(document, indent=1) + "\n")


def test_env_file_applied_from_the_nri_identity_another_pods_refused(node: Node) -> None:
    """Legacy mode on CRI-O: the plugin is configured by cri-o; a container without an env file is
    untouched; a file pinned to the pod (uid and container name, from NRI) reaches the process and the
    stand-in cli is called once with its devices through our prestart hook; a file pinned to another pod is
    refused at CreateContainer with our one line, naming CRI-O's annotation key, no file content echoed."""
    pinned = write_env_file(
        node.env_dir,
        "crio-a.env",
        ENV_FILE + "GPU_ENV_HOOK_POD_UID=uid-gpu-a\nGPU_ENV_HOOK_CONTAINER_NAME=gpu-a\n",
    )
    other = write_env_file(node.env_dir, "crio-b.env", ENV_FILE + "GPU_ENV_HOOK_POD_UID=uid-someone-else\n")
    node.start_plugin(record=bool(os.environ.get("GPU_ENV_HOOK_NRI_RECORD")))
    assert "configured by cri-o 1.36" in node.plugin_log.read_text()

    status, stdout = node.run("plain", {"FROM_CRI": "yes"})
    assert (status.exit_code, status.reason) == (0, "Completed"), node.daemon.log()
    assert "FROM_CRI=yes" in stdout
    assert not any(line.startswith(("NVIDIA_", "USER_CUSTOM_ENV")) for line in stdout)
    assert node.cli_calls() == []

    status, stdout = node.run("gpu-a", {VAR: str(pinned)})
    assert (status.exit_code, status.reason) == (0, "Completed"), node.daemon.log()
    assert {"NVIDIA_VISIBLE_DEVICES=1,2", "USER_CUSTOM_ENV=hello", f"{VAR}="} <= set(stdout)
    calls = node.cli_calls()
    assert len(calls) == 1
    assert "--device=1,2" in calls[0]["argv"]

    with pytest.raises(grpc.RpcError) as refused:
        node.run("gpu-a", {VAR: str(other)})
    details = refused.value.details() or ""
    assert (
        f"env file '{other}': is pinned to another pod (annotation io.kubernetes.pod.uid differs)" in details
    )
    assert "uid-someone-else" not in details
    assert len(node.cli_calls()) == 1


@pytest.mark.parametrize("node", ["cdi"], indirect=True)
def test_cdi_mode_crio_injects_the_devices_named_by_nri(node: Node) -> None:
    """CDI mode on CRI-O 1.36: the plugin names the file's devices (CRI-O >= 1.34 resolves NRI's CDI
    names); their edits (a variable, a device node) are in the container, the process sees the file's
    variables, and no hook or cli runs."""
    env_file = write_env_file(
        node.env_dir, "crio-cdi.env", "GPU_ENV_HOOK_POD_UID=uid-gpu-cdi\nNVIDIA_VISIBLE_DEVICES=3\nA=1\n"
    )
    node.start_plugin()
    status, stdout = node.run("gpu-cdi", {VAR: str(env_file)}, ["/bin/sh", "-c", "env; ls /dev"])
    assert (status.exit_code, status.reason) == (0, "Completed"), node.daemon.log()
    assert {"CDI_GPU=3", "A=1", "NVIDIA_VISIBLE_DEVICES=void", "nvidia-test3"} <= set(stdout)
    assert "nvidia-test0" not in stdout
    assert node.cli_calls() == []


def test_pod_annotations_cannot_forge_the_identity(node: Node) -> None:
    """A pod annotated with CRI-O's own pod-uid key and the victim's uid is still the pod it is: the identity
    comes from NRI's PodSandbox, never from an annotation."""
    victim = write_env_file(node.env_dir, "crio-victim.env", ENV_FILE + "GPU_ENV_HOOK_POD_UID=uid-victim\n")
    node.start_plugin()
    client = node.client
    config = client.sandbox_config(
        "attacker", node.tmp_path / "logs", {"io.kubernetes.pod.uid": "uid-victim"}
    )
    sandbox = client.run_pod_sandbox(config, "")
    try:
        with pytest.raises(grpc.RpcError) as refused:
            client.create_container(
                sandbox,
                config,
                name="attacker",
                image=CRIO_IMAGE,
                command=["/bin/env"],
                env={VAR: str(victim)},
                log_path="attacker.log",
            )
        assert "is pinned to another pod (annotation io.kubernetes.pod.uid differs)" in (
            refused.value.details() or ""
        )
    finally:
        remove_pod(client, sandbox)


def test_install_nri_end_to_end_on_a_node_with_nri_off(tmp_path: Path, image_archive: Path) -> None:
    """``install --engine crio --nri`` on a node whose crio.conf switches NRI off: CRI-O starts with the node's
    files plus the drop-in (NRI on at its default socket) and install's env-file guard in /etc/cdi; before
    the plugin runs, an env-file container with the guard's device is never created; the plugin, run as the
    unit's ExecStart says (in the node's mount namespace, as systemd runs it there), connects, applies a
    pinned file and refuses another pod's; uninstall restores every byte."""
    import shlex

    from test_containerd import CONFIG, gpu_env_hook

    from hook.install.nri import UNIT_PATH

    records = tmp_path / "cli-records"
    records.mkdir()
    # The strict gate: a pinned file's devices pass because the plugin's hook is told the file was pinned; a
    # hook that was not (hooks.d's, for every container) would see plain variables and pass none.
    hook_config = (
        "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"
        "[nvidia-container-cli]\n"
        f'path = "{STANDIN_CLI}"\n'
        f'environment = ["STANDIN_RECORD_DIR={records}"]\n'
        "[env-file]\n"
        f'directories = ["{tmp_path / "nvidia-env"}"]\n'
    )
    tree = tmp_path / "node"
    (tree / "etc/crio").mkdir(parents=True)
    (tree / "etc/crio/crio.conf").write_text(
        node_config(tmp_path / "daemon") + "[crio.nri]\nenable_nri = false\n"
    )
    (tree / CONFIG.lstrip("/")).parent.mkdir(parents=True)
    (tree / CONFIG.lstrip("/")).write_text(hook_config)
    before = {str(path): path.read_bytes() for path in tree.rglob("*") if path.is_file()}
    proc = gpu_env_hook(
        "install", "--engine", "crio", "--nri", "--root", str(tree), "--python", PYTHON,
        "--nri-python", PYTHON, "--config", CONFIG,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    exec_start = next(
        line.removeprefix("ExecStart=")
        for line in (tree / UNIT_PATH.lstrip("/")).read_text().splitlines()
        if line.startswith("ExecStart=")
    )
    pinned = write_env_file(
        tmp_path / "nvidia-env", "crio-e2e.env", ENV_FILE + "GPU_ENV_HOOK_POD_UID=uid-gpu-e2e\n"
    )
    other = write_env_file(
        tmp_path / "nvidia-env", "crio-e2e-other.env", ENV_FILE + "GPU_ENV_HOOK_POD_UID=uid-another\n"
    )
    with running(tree, tmp_path / "daemon") as daemon:
        daemon.import_image(image_archive)
        node = Node(tmp_path, daemon, tree / CONFIG.lstrip("/"), records)
        try:
            assert GUARD_FAILED in never_created(node, "gpu-e2e", {VAR: str(pinned)})
            node.start_plugin(daemon.nsenter_argv(shlex.split(exec_start)))
            status, stdout = node.run("gpu-e2e", {VAR: str(pinned)}, cdi_devices=(GUARD,))
            assert (status.exit_code, status.reason) == (0, "Completed"), daemon.log()
            assert {"NVIDIA_VISIBLE_DEVICES=1,2", "USER_CUSTOM_ENV=hello", f"{VAR}="} <= set(stdout)
            assert any("--device=1,2" in call["argv"] for call in node.cli_calls())
            refused = never_created(node, "gpu-e2e", {VAR: str(other)})
            assert "is pinned to another pod (annotation io.kubernetes.pod.uid differs)" in refused
        finally:
            node.stop_plugin()
            node.client.close()
    assert gpu_env_hook("uninstall", "--engine", "crio", "--root", str(tree)).returncode == 0
    assert {str(path): path.read_bytes() for path in tree.rglob("*") if path.is_file()} == before


def never_created(node: Node, name: str, env: dict[str, str]) -> str:
    """Create an env-file container with the guard's CDI device, as kubelet does with a device plugin's
    Allocate; assert CRI-O refused the creation (it runs ``runc create`` in CreateContainer, where the guard's
    mount fails): the container never existed, so never ran. Returns the refusal's details."""
    with pytest.raises(grpc.RpcError) as refused:
        node.run(name, env, cdi_devices=(GUARD,))
    return refused.value.details() or ""


def assert_plain_runs(node: Node) -> None:
    """A container without an env file (and without the guard) starts and runs."""
    status, stdout = node.run("plain", {"FROM_CRI": "yes"})
    assert (status.exit_code, status.reason) == (0, "Completed"), node.daemon.log()
    assert "FROM_CRI=yes" in stdout


def test_guard_applied_its_mount_is_gone_and_the_file_reaches_the_process(node: Node) -> None:
    """The plugin applies the file: CRI-O injected the guard's CDI device before NRI CreateContainer, the
    plugin's adjustment removed its mount, the container runs with the file's variables and without the
    mount."""
    env_file = write_env_file(node.env_dir, "crio-g.env", ENV_FILE + "GPU_ENV_HOOK_POD_UID=uid-gpu-g\n")
    node.start_plugin()
    command = ["/bin/sh", "-c", "env; cat /proc/self/mountinfo"]
    status, stdout = node.run("gpu-g", {VAR: str(env_file)}, command, cdi_devices=(GUARD,))
    assert (status.exit_code, status.reason) == (0, "Completed"), node.daemon.log()
    assert "USER_CUSTOM_ENV=hello" in stdout
    assert not any(paths.ENV_FILE_GUARD_TARGET in line for line in stdout)


def test_plugin_never_started_env_file_container_never_runs_others_do(node: Node) -> None:
    """No plugin ever registered: CreateContainer of the env-file container fails on the guard's mount (runc:
    no such file or directory); a plain container runs; nothing of ours ran."""
    env_file = write_env_file(node.env_dir, "crio-n.env", ENV_FILE)
    details = never_created(node, "gpu-n", {VAR: str(env_file)})
    assert GUARD_FAILED in details, details
    assert_plain_runs(node)
    assert node.cli_calls() == []


def test_plugin_killed_env_file_container_never_runs_others_do(node: Node) -> None:
    """The plugin killed (SIGKILL): CRI-O creates without it; the env-file container never runs, a plain
    one does; the plugin started again applies the file."""
    env_file = write_env_file(node.env_dir, "crio-k.env", ENV_FILE)
    node.start_plugin()
    assert node.plugin is not None
    node.plugin.kill()
    node.plugin.wait(timeout=10)
    node.plugin = None
    details = never_created(node, "gpu-k", {VAR: str(env_file)})
    assert GUARD_FAILED in details, details
    assert_plain_runs(node)
    node.start_plugin()
    status, stdout = node.run("gpu-k", {VAR: str(env_file)}, cdi_devices=(GUARD,))
    assert (status.exit_code, status.reason) == (0, "Completed"), node.daemon.log()
    assert "USER_CUSTOM_ENV=hello" in stdout


def test_plugin_past_the_timeout_env_file_container_never_runs_others_do(node: Node) -> None:
    """A plugin that does not answer (SIGSTOP) past CRI-O's 2 s request timeout: CRI-O waits the 2 s, drops
    the plugin and creates without its adjustment, so the guard's mount fails the env-file container's
    creation (no error of NRI's own); then plain containers run without waiting; once the plugin runs again
    it reconnects and the file is applied."""
    env_file = write_env_file(node.env_dir, "crio-t.env", ENV_FILE)
    node.start_plugin()
    assert node.plugin is not None
    os.kill(node.plugin.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        details = never_created(node, "gpu-t", {VAR: str(env_file)})
        assert time.monotonic() - started >= 2.0
        assert GUARD_FAILED in details, details
        assert_plain_runs(node)
        details = never_created(node, "gpu-t", {VAR: str(env_file)})
        assert GUARD_FAILED in details, details
    finally:
        os.kill(node.plugin.pid, signal.SIGCONT)
    deadline = time.monotonic() + 30
    while node.configured() < 2:
        assert time.monotonic() < deadline, node.plugin_log.read_text()
        time.sleep(0.1)
    status, stdout = node.run("gpu-t", {VAR: str(env_file)}, cdi_devices=(GUARD,))
    assert (status.exit_code, status.reason) == (0, "Completed"), node.daemon.log()
    assert "USER_CUSTOM_ENV=hello" in stdout


def test_plugin_reconnects_after_crio_restarts(node: Node) -> None:
    """CRI-O restarted: the plugin reconnects by itself and applies env files again."""
    env_file = write_env_file(node.env_dir, "crio-r.env", ENV_FILE)
    node.start_plugin()
    node.daemon.stop()
    node.daemon.start()
    node.client.close()
    node.client = CriClient(node.daemon.address)
    deadline = time.monotonic() + 30
    while node.configured() < 2:
        assert time.monotonic() < deadline, node.plugin_log.read_text()
        time.sleep(0.1)
    status, stdout = node.run("gpu-r", {VAR: str(env_file)}, cdi_devices=(GUARD,))
    assert (status.exit_code, status.reason) == (0, "Completed"), node.daemon.log()
    assert "USER_CUSTOM_ENV=hello" in stdout


def test_guard_spec_is_read_without_a_restart(node: Node) -> None:
    """A node without the guard's spec refuses the device itself (CRI-O cannot resolve it, plugin or not);
    the spec written while CRI-O runs (as install writes it) is used at the next creation, no restart."""
    from hook.install.guard import guard_spec

    spec = node.tmp_path / "node" / paths.ENV_FILE_GUARD_SPEC.lstrip("/")
    spec.unlink()
    env_file = write_env_file(node.env_dir, "crio-s.env", ENV_FILE)
    node.start_plugin()
    details = never_created(node, "gpu-s", {VAR: str(env_file)})
    assert f"CDI device injection failed: unresolvable CDI devices {GUARD}" in details, details
    spec.write_bytes(guard_spec())
    deadline = time.monotonic() + 10
    result: tuple[Any, list[str]] | str = ""
    while not isinstance(result, tuple) and time.monotonic() < deadline:
        try:
            result = node.run("gpu-s", {VAR: str(env_file)}, cdi_devices=(GUARD,))
        except grpc.RpcError as refused:  # the registry's watch has not fired yet
            result = refused.details() or ""
            time.sleep(0.5)
    assert isinstance(result, tuple), result
    status, stdout = result
    assert (status.exit_code, status.reason) == (0, "Completed"), node.daemon.log()
    assert "USER_CUSTOM_ENV=hello" in stdout


def test_term_stops_the_plugin_promptly_and_it_is_no_longer_ready(node: Node) -> None:
    """SIGTERM (its pod's stop): the plugin exits 0 within a second, closing its connection and removing its
    readiness file; CRI-O then creates without it, so an env-file container is never created."""
    env_file = write_env_file(node.env_dir, "crio-term.env", ENV_FILE)
    node.start_plugin()
    assert node.plugin is not None
    stopped = time.monotonic()
    node.plugin.terminate()
    assert node.plugin.wait(timeout=5) == 0
    assert time.monotonic() - stopped < 1.0
    assert not node.ready.exists()
    assert node.plugin_log.read_text().splitlines()[-1] == "gpu-env-hook nri: stopped"
    node.plugin = None
    details = never_created(node, "gpu-term", {VAR: str(env_file)})
    assert GUARD_FAILED in details, details
    assert_plain_runs(node)


@pytest.mark.skipif(not Path("/sys/fs/cgroup/cpu/cpu.shares").exists(), reason="needs cgroup v1 cpu, memory")
@pytest.mark.parametrize("node", ["cdi"], indirect=True)
def test_the_manifests_requests_hold_a_burst_of_creates(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    """On CRI-O, the plugin held to the NRI manifest's requests (its CPU request as a hard CFS quota, its
    memory request as the limit) answers a burst of 100 env-file creates at once through CRI: every one is
    created and started with its file applied (a dropped plugin would leave the guard's mount and fail the
    create), the plugin stays connected; its CPU time and peak RSS for the burst are printed."""
    from test_nri_containerd import BURST, GPUS, RequestCgroup, burst, manifest_requests

    cpu_milli, memory = manifest_requests()
    files = [
        write_env_file(
            node.env_dir,
            f"burst-{index}.env",
            f"GPU_ENV_HOOK_POD_UID=uid-burst\nNVIDIA_VISIBLE_DEVICES={index % GPUS}\n",
        )
        for index in range(BURST)
    ]
    cgroup = RequestCgroup(f"gpu-env-hook-nri-crio-burst-{os.getpid()}", cpu_milli, memory)
    try:
        wall, latencies, used, peak = burst(node, files, cgroup)
        log = node.plugin_log.read_text()
        assert node.configured() == 1, log
        assert "session ended" not in log, log
        assert node.plugin is not None
        assert node.plugin.poll() is None
        with capsys.disabled():
            print(
                f"\nCRI-O burst of {BURST} creates, plugin at {cpu_milli}m CPU (quota) / {memory >> 20}Mi: "
                f"wall {wall:.1f} s, create+start p50 {sorted(latencies)[BURST // 2] * 1000:.0f} ms, "
                f"max {max(latencies) * 1000:.0f} ms; plugin CPU {used * 1000:.0f} ms "
                f"({used / BURST * 1000:.2f} ms a create), peak RSS {peak / 1024:.1f} MiB, "
                f"throttled periods {cgroup.throttled()}"
            )
    finally:
        node.stop_plugin()
        cgroup.remove()

"""Fail-closed under load: the NRI plugin fails in the middle of a burst of creates through CRI on a real
containerd 2.x (``GPU_ENV_HOOK_CONTAINERD2``; skipped where absent).

Each test runs a burst of containers in one pod, half naming an env file (with the env-file guard's CDI
device, as a device plugin's Allocate returns it), half plain, started a little apart so that the fault
lands among them: the plugin killed (SIGKILL), frozen (SIGSTOP) past NRI's 2 s request timeout, containerd
restarted, or the plugin never started. Whatever the fault, no env-file container runs without its file:
each either failed to be created or started, and never ran (its stdout empty, never started), or it ran
with the file's variable; and plain containers keep starting (every one created and started while the
daemon answers). The guard tests one container at a time are in ``test_nri_containerd.py``.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import test_nri_containerd
from containerd import CONTAINERD_IMAGE
from cri import CriClient, read_cri_log
from test_nri_containerd import GUARD, GUARD_FAILED, VAR, Node, write_env_file

pytestmark = test_nri_containerd.pytestmark
# The fixtures of the one-at-a-time tests: the busybox image, and a containerd 2.x with NRI, the env-file
# guard's spec and a stand-in cli (``node.start_plugin()`` connects the plugin).
image_archive = test_nri_containerd.image_archive
node = test_nri_containerd.node

# Env-file and plain containers per burst (alternating), and the gap between two starts: the burst spans
# about EACH * 2 * GAP seconds, long enough for a fault to land in the middle of it.
EACH = 6
GAP = 0.15
# What an applied file sets, and what each container prints.
APPLIED = "APPLIED_FROM_FILE=yes"
COMMAND = ["/bin/sh", "-c", 'echo "APPLIED_FROM_FILE=$APPLIED_FROM_FILE"']


@dataclass
class Outcome:
    """What happened to each container of a burst."""

    ran_applied: list[str] = field(default_factory=list)  # env-file containers that ran with their file
    refused: list[str] = field(default_factory=list)  # env-file containers that never ran (and why)
    plain_started: list[str] = field(default_factory=list)
    plain_failed: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)  # anything that ran without its file


def burst(node: Node, tag: str, *, fault: Callable[[], None] | None = None, after: int = 3) -> Outcome:
    """Create and start EACH env-file and EACH plain containers, GAP apart, in one pod; run ``fault`` once
    ``after`` of them have been started. Return what happened to each, checked."""
    client = node.client
    logs = node.tmp_path / f"burst-{tag}"
    config = client.sandbox_config(f"burst-{tag}", logs, {})
    sandbox = client.run_pod_sandbox(config, "")
    env_file = write_env_file(f"burst-{tag}.env", f"{APPLIED}\nNVIDIA_VISIBLE_DEVICES=0\n")
    started = threading.Semaphore(0)

    def one(index: int) -> tuple[str, bool, str | None, str]:
        """(name, env file?, container id or None, error)."""
        time.sleep(index * GAP)
        gpu = index % 2 == 0
        name = f"{'gpu' if gpu else 'plain'}-{index}"
        container = None
        try:
            container = node.client.create_container(
                sandbox, config, name=name, image=CONTAINERD_IMAGE, command=COMMAND,
                env={VAR: str(env_file)} if gpu else {"PLAIN": "1"}, log_path=f"{name}.log",
                cdi_devices=(GUARD,) if gpu else (),
            )  # fmt: skip
            node.client.start_container(container)
        except grpc.RpcError as err:
            return name, gpu, container, f"{err.code()}: {err.details()}"
        else:
            return name, gpu, container, ""
        finally:
            started.release()

    def trigger() -> None:
        for _ in range(after):
            started.acquire()
        assert fault is not None
        fault()

    outcome = Outcome()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2 * EACH + 1) as pool:
        fault_done = pool.submit(trigger) if fault is not None else None
        results = list(pool.map(one, range(2 * EACH)))
        if fault_done is not None:
            fault_done.result(timeout=60)
    for name, gpu, container, error in results:
        check(node, outcome, logs / f"{name}.log", name, gpu, container, error)
    return outcome


def check(
    node: Node, outcome: Outcome, log: Path, name: str, gpu: bool, container: str | None, error: str
) -> None:
    """Sort one container into the outcome; one that ran without its file is a violation."""
    client = node.client
    if not gpu:
        (outcome.plain_failed if error else outcome.plain_started).append(
            f"{name}: {error}" if error else name
        )
        return
    if container is None:  # CreateContainer itself failed: no container, nothing ran
        outcome.refused.append(f"{name}: {error}")
        return
    status = client.wait_exited(container, timeout=30) if not error else client.container_status(container)
    output = read_cri_log(log) if log.exists() else []
    if error:
        if status.state == client.pb.CONTAINER_RUNNING or status.started_at != 0 or output:
            outcome.violations.append(f"{name}: start failed ({error}) but it ran: {output}")
        else:
            outcome.refused.append(f"{name}: {error}")
    elif output == [APPLIED]:
        outcome.ran_applied.append(name)
    else:
        outcome.violations.append(f"{name}: ran without its file: {output}")


def wait_configured(node: Node, count: int, timeout: float = 30) -> None:
    """Until the plugin has been configured ``count`` times (it reconnected)."""
    deadline = time.monotonic() + timeout
    while node.plugin_log.read_text(errors="replace").count("configured by") < count:
        assert time.monotonic() < deadline, node.plugin_log.read_text()
        time.sleep(0.1)


def restart_daemon(node: Node) -> None:
    """Restart containerd alone, as systemd does (its shims and containers stay), and reconnect CRI."""
    process = node.daemon.process
    assert process is not None
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    node.daemon.start()


def test_plugin_killed_mid_burst(node: Node) -> None:
    """SIGKILL while creates are under way: the create in flight goes on without the plugin (NRI closes
    it) and the guard stops it; every later env-file container is refused; plain ones all start."""
    node.start_plugin()
    assert node.plugin is not None
    plugin = node.plugin
    outcome = burst(node, "kill", fault=lambda: os.kill(plugin.pid, signal.SIGKILL))
    assert outcome.violations == []
    assert outcome.plain_failed == []
    assert len(outcome.plain_started) == EACH
    assert outcome.refused, "the kill landed after the burst: no env-file container was refused"
    assert all(GUARD_FAILED in line for line in outcome.refused), outcome.refused


def test_plugin_frozen_past_the_timeout_mid_burst(node: Node) -> None:
    """SIGSTOP for 3 s (past NRI's 2 s timeout) while creates are under way: NRI drops the plugin (its log
    says so); no env-file container runs without its file; plain ones all start; thawed, the plugin
    reconnects and applies files again."""
    node.start_plugin()
    assert node.plugin is not None
    plugin = node.plugin

    def freeze() -> None:
        os.kill(plugin.pid, signal.SIGSTOP)
        time.sleep(3)
        os.kill(plugin.pid, signal.SIGCONT)

    try:
        outcome = burst(node, "stop", fault=freeze)
    finally:
        os.kill(plugin.pid, signal.SIGCONT)
    assert outcome.violations == []
    assert outcome.plain_failed == []
    assert len(outcome.plain_started) == EACH
    assert outcome.refused, outcome
    assert "closing plugin" in node.daemon.log_path.read_text(errors="replace")
    wait_configured(node, 2)
    after = burst(node, "thawed")
    assert (after.violations, after.refused, after.plain_failed) == ([], [], [])
    assert len(after.ran_applied) == EACH


def test_containerd_restarted_mid_burst(node: Node) -> None:
    """containerd restarted while creates are under way: calls during the restart fail at CRI; no env-file
    container runs without its file, before or after the plugin reconnects; once the daemon is back every
    plain container starts, and once the plugin has reconnected every env-file container runs applied."""
    node.start_plugin()
    outcome = burst(node, "restart", fault=lambda: restart_daemon(node))
    assert outcome.violations == []
    wait_configured(node, 2)
    node.client.close()
    node.client = CriClient(node.daemon.address)
    after = burst(node, "restarted")
    assert (after.violations, after.refused, after.plain_failed) == ([], [], [])
    assert len(after.ran_applied) == EACH


def test_plugin_never_started_burst(node: Node) -> None:
    """No plugin at all: every env-file container of a burst is refused by the guard, every plain one starts."""
    outcome = burst(node, "none")
    assert outcome.violations == []
    assert outcome.ran_applied == []
    assert len(outcome.refused) == EACH
    assert all(GUARD_FAILED in line for line in outcome.refused), outcome.refused
    assert (len(outcome.plain_started), outcome.plain_failed) == (EACH, [])

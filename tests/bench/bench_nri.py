"""The NRI path against NVIDIA's runtime through CRI on a real containerd 2.x (``make bench-nri``).

One containerd 2.x (``GPU_ENV_HOOK_CONTAINERD2``; NRI on, CDI on) runs every setup, each in its own pod
sandbox; containers are created and started through CRI as kubelet does it (CreateContainer then
StartContainer, timed together; the container's exit, StopContainer with timeout 0 and RemoveContainer come
after, untimed). Every setup gives a container the same GPU, ``nvidia.com/gpu=0``, from the same CDI spec,
shaped as ``nvidia-ctk cdi generate`` (v1.20.0) writes it: a device node per GPU, ``/dev/nvidiactl``,
library mounts and its five ``nvidia-cdi-hook`` createContainer hooks (the real ``nvidia-cdi-hook`` of the
toolkit build runs them), over character devices made here (``195:N``, as NVIDIA's) in a scratch driver root.

Setups (the runtime handler each uses; one daemon, no restart between them):

- ``floor``: the default handler (runc), the device named in CRI's CDI field, no plugin. This is also
  NVIDIA's device plugin's CDI strategy with plain runc (setup 2a of issue 28): no process of NVIDIA's.
- ``nvidia-cdi``: the ``nvidia`` handler (``io.containerd.runc.v2`` with ``BinaryName =
  nvidia-container-runtime``, every other option as the default handler's), the device asked for as NVIDIA's
  device plugin does with its ``envvar`` strategy: ``NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0``. NVIDIA's
  config.toml (``mode = "auto"``, its default) is at its node path ``/etc/nvidia-container-runtime``
  in the daemon's mount namespace, so the runtime and its hook read it there.
- ``nvidia-legacy``: the ``nvidia-legacy`` handler (the same options, ``nvidia-container-runtime.legacy``: the
  runtime with its mode fixed to legacy, as NVIDIA's GPU operator's ``nvidia-legacy`` class runs it; v1.20.0's
  ``auto`` mode picks ``jit-cdi``, not legacy, for ``NVIDIA_VISIBLE_DEVICES=0``) with
  ``NVIDIA_VISIBLE_DEVICES=0``: its prestart hook (``nvidia-container-runtime-hook``) calls the recording
  stand-in ``nvidia-container-cli``.
- ``nvidia-nri``: NVIDIA's NRI plugin (``nvidia-ctk-installer --enable-nri-plugin``, toolkit installed into a
  scratch directory, no runtime config) names the device from the pod's ``nvidia.cdi.k8s.io/pod``
  annotation; default handler. Runs only when the toolkit directory has ``nvidia-ctk-installer``.
- ``ours-cdi``: the default handler, ``gpu-env-hook nri`` connected (CDI mode) in its own cgroup with the CPU
  and memory share of its pod's requests, each container naming its own env file (pinned to its pod) that
  selects GPU 0, and in CRI's CDI field the env-file guard's device (``gpu-env-hook.io/env-file=required``,
  its spec the bytes install writes), as a device plugin's Allocate returns them: the plugin applies the file,
  removes the guard's mount and names ``nvidia.com/gpu=0``; no process of ours runs.
- ``ours-legacy``: the same in legacy mode: our prestart hook hands the file's devices to the stand-in cli.

The toolkit comes from the directory of ``GPU_ENV_HOOK_NVIDIA_RUNTIME`` (its ``nvidia-container-runtime``,
with ``nvidia-container-runtime-hook``, ``nvidia-cdi-hook``, ``nvidia-ctk`` and optionally
``nvidia-ctk-installer`` beside it), the convention ``bench_cdi.py`` uses.

One at a time: ``--sequential`` containers per setup in ``--rounds`` blocks, setups alternated (A B C, C B
A, then rotated: ``block_order``); p50 and p95. Burst: ``--burst`` containers at once per setup (released
together), ``--bursts`` times, alternated likewise after ``--settle`` seconds of rest; p50, p95 of each
container's Create+Start and the median wall time of the bursts. The load average is recorded before and
after every block. Every container is checked after its timed part: it ran to exit code 0 with
``/dev/nvidia0`` and ``/dev/nvidiactl`` character devices and the CDI hooks' symlink in place (CDI setups), or
with the stand-in cli called with ``--device=0`` once per container (legacy setups). Plugins: their CPU time
per container over each block, containerd's mean wait for their CreateContainer answers (its NRI metrics),
containerd's log searched for a plugin dropped or timed out, and our plugin's answer timed in process on a
recorded request.

Targets (issue 28): ours-cdi adds fewer ms over the floor than nvidia-cdi one at a time (p50); ours-cdi's
burst p50 <= 1.1x the floor's; ours-legacy adds no more than nvidia-legacy, one at a time and in the burst.

Run as root: ``GPU_ENV_HOOK_CONTAINERD2=DIR GPU_ENV_HOOK_NVIDIA_RUNTIME=PATH .venv/bin/python
tests/bench/bench_nri.py`` (``--json FILE`` keeps the figures).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TESTS / "integration"))
sys.path.insert(0, str(TESTS))

from containerd import CONTAINERD_IMAGE, Containerd, running, write_image_archive  # noqa: E402
from cri import CriClient  # noqa: E402
from engine_builds import containerd2_dir, nvidia_toolkit_dir  # noqa: E402
from runc_hooks import STANDIN_CLI  # noqa: E402

from hook.install.guard import guard_spec  # noqa: E402
from hook.util import paths  # noqa: E402

PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path
GPUS = 4
NVIDIA_MAJOR = 195
DEVICE = "nvidia.com/gpu=0"
# The pod request of the plugin until its manifest names one: 100m CPU (cpu.shares 102, as kubelet sets it),
# 64Mi memory (enforced here as a limit, the stricter reading).
PLUGIN_CPU_MILLI = 100
PLUGIN_MEMORY = 64 << 20
LIB_DIR = "/usr/lib/x86_64-linux-gnu"
DRIVER_VERSION = "999.88.77"
CDI_CHECK = f"test -c /dev/nvidia0 && test -c /dev/nvidiactl && test -L {LIB_DIR}/libcuda.so"
LEGACY_CHECK = 'test -n "$NVIDIA_VISIBLE_DEVICES"'
BURST_TARGET = 1.1
NVIDIA_NRI_ANNOTATION = "nvidia.cdi.k8s.io/pod"
NVIDIA_CONFIG = "/etc/nvidia-container-runtime/config.toml"
RUNTIME_EXECUTABLES = (
    "nvidia-container-runtime", "nvidia-container-runtime.cdi", "nvidia-container-runtime.legacy",
    "nvidia-container-runtime-hook", "nvidia-ctk", "nvidia-cdi-hook",
)  # fmt: skip


@dataclass(frozen=True)
class Setup:
    """One way of giving a container GPU 0: the runtime handler, the plugin connected, what the container asks."""

    key: str
    handler: str  # "" = the default (runc)
    plugin: str | None  # None, "nvidia", "ours-cdi", "ours-legacy"
    mode: str  # "cdi" or "legacy": what the container is checked for
    description: str
    share: bool = True  # our plugin in the cgroup of its pod's requests


SETUPS = (
    Setup("floor", "", None, "cdi", "runc, the device in CRI's CDI field, no plugin (= NVIDIA's CDI strategy)"),
    Setup("nvidia-cdi", "nvidia", None, "cdi", "nvidia-container-runtime handler, NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"),
    Setup("nvidia-legacy", "nvidia-legacy", None, "legacy", "nvidia-container-runtime.legacy handler, NVIDIA_VISIBLE_DEVICES=0, stand-in cli"),
    Setup("nvidia-nri", "", "nvidia", "cdi", "runc, NVIDIA's NRI plugin, pod annotation nvidia.cdi.k8s.io/pod"),
    Setup("ours-cdi", "", "ours-cdi", "cdi", "runc, gpu-env-hook nri (CDI mode), env file naming GPU 0"),
    Setup("ours-legacy", "", "ours-legacy", "legacy", "runc, gpu-env-hook nri (legacy mode), env file, stand-in cli"),
)  # fmt: skip
# Run only when --only names them: where the time of ours-cdi goes.
EXTRA_SETUPS = (
    Setup("ours-plain", "", "ours-cdi", "cdi", "the floor's container with gpu-env-hook nri connected: NRI's round trip alone"),
    Setup("ours-cdi-unbound", "", "ours-cdi", "cdi", "ours-cdi with the plugin outside its pod's cgroup", share=False),
)  # fmt: skip


@dataclass
class Figures:
    """What one setup measured: seconds per Create+Start, burst walls, load and plugin CPU per block."""

    sequential: list[float] = field(default_factory=list)
    burst: list[float] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    loads: list[tuple[str, str, str]] = field(default_factory=list)  # (block, before, after)
    plugin_cpu_ms: list[float] = field(default_factory=list)  # per container, per block
    sequential_create: list[float] = field(default_factory=list)  # CreateContainer alone (NRI runs there)
    burst_create: list[float] = field(default_factory=list)
    # containerd's view of the plugins' CreateContainer calls per block: (block, calls, mean ms), NRI's metrics
    nri_calls: list[tuple[str, int, float]] = field(default_factory=list)
    # CPU ms per container in each burst's timed part: containerd's, the pod's shim with what it waited for
    # (runc or NVIDIA's runtime, hooks, the cli, the containers' processes), the plugin's
    burst_cpu: list[tuple[float, ...]] = field(default_factory=list)  # containerd, shim and children, plugin


def percentile(values: list[float], fraction: float) -> float:
    """The value at ``fraction`` of the sorted values (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def loadavg() -> str:
    """The first three fields of /proc/loadavg."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --- the node: driver root, CDI spec, configs ---------------------------------------------------------------


def make_driver_root(root: Path) -> Path:
    """Character devices nvidia0..N and nvidiactl (195:*) and the driver's library files, as on a GPU node."""
    (root / "dev").mkdir(parents=True)
    for index in range(GPUS):
        os.mknod(root / "dev" / f"nvidia{index}", 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, index))
    os.mknod(root / "dev" / "nvidiactl", 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, 255))
    libs = root / LIB_DIR.lstrip("/")
    libs.mkdir(parents=True)
    for name in ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so"):
        (libs / f"{name}.{DRIVER_VERSION}").write_text("not a library\n")
    return root


def nvidia_spec(driver: Path, cdi_hook: Path) -> dict[str, Any]:
    """The spec ``nvidia-ctk cdi generate`` (v1.20.0) writes for this driver root: a node per GPU, nvidiactl,
    NVIDIA_VISIBLE_DEVICES=void, the libraries bound read-only and its five createContainer hooks."""

    def hook(*args: str) -> dict[str, Any]:
        return {"hookName": "createContainer", "path": str(cdi_hook), "args": ["nvidia-cdi-hook", *args],
                "env": ["NVIDIA_CTK_DEBUG=false"]}  # fmt: skip

    libs = sorted((driver / LIB_DIR.lstrip("/")).iterdir())
    return {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [
            {"name": str(index), "containerEdits": {"deviceNodes": [
                {"path": f"/dev/nvidia{index}", "hostPath": str(driver / "dev" / f"nvidia{index}")}]}}
            for index in range(GPUS)
        ],
        "containerEdits": {
            "env": [f"NVIDIA_CTK_LIBCUDA_DIR={LIB_DIR}", "NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": [{"path": "/dev/nvidiactl", "hostPath": str(driver / "dev" / "nvidiactl")}],
            "hooks": [
                hook("create-symlinks", "--link", f"libcuda.so.1::{LIB_DIR}/libcuda.so"),
                hook("enable-cuda-compat", f"--host-driver-version={DRIVER_VERSION}"),
                hook("update-ldcache", "--folder", LIB_DIR),
                hook("disable-device-node-modification"),
                hook("update-application-profile"),
            ],
            "mounts": [
                {"hostPath": str(lib), "containerPath": f"{LIB_DIR}/{lib.name}",
                 "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]}
                for lib in libs
            ],
        },
    }  # fmt: skip


def nvidia_config(work: Path, toolkit: Path, cdi_dir: Path, records: Path) -> Path:
    """NVIDIA's config.toml (its defaults, ``mode = "auto"``) in a directory bound at
    /etc/nvidia-container-runtime: runc as the low-level runtime, CDI specs from ``cdi_dir``, the stand-in cli."""
    directory = work / "etc-nvidia-container-runtime"
    directory.mkdir()
    runc = shutil.which("runc") or "/usr/sbin/runc"
    (directory / "config.toml").write_text(
        "[nvidia-container-cli]\n"
        f'path = "{STANDIN_CLI}"\n'
        f'environment = ["STANDIN_RECORD_DIR={records}"]\n'
        'ldconfig = "@/sbin/ldconfig"\n\n'
        "[nvidia-container-runtime]\n"
        'mode = "auto"\n'
        f'runtimes = ["{runc}"]\n\n'
        "[nvidia-container-runtime.modes.cdi]\n"
        'default-kind = "nvidia.com/gpu"\n'
        f'spec-dirs = ["{cdi_dir}"]\n\n'
        "[nvidia-container-runtime-hook]\n"
        f'path = "{toolkit / "nvidia-container-runtime-hook"}"\n\n'
        "[nvidia-ctk]\n"
        f'path = "{toolkit / "nvidia-ctk"}"\n'
    )
    return directory


def hook_config(work: Path, mode: str, env_dir: Path, cdi_dir: Path, records: Path) -> Path:
    """Our config.toml for the plugin in ``mode``: the stand-in cli recording into ``records``."""
    path = work / f"gpu-env-hook-{mode}.toml"
    path.write_text(
        "[nvidia-container-cli]\n"
        f'path = "{STANDIN_CLI}"\n'
        f'environment = ["STANDIN_RECORD_DIR={records}"]\n'
        "[env-file]\n"
        f'directories = ["{env_dir}"]\n'
        f'[gpu-env]\ndevice-mode = "{mode}"\n'
        f'[gpu-env.cdi]\nspec-dirs = ["{cdi_dir}"]\nspec-cache = "{work / "spec-cache"}"\n'
    )
    return path


def containerd_config(work: Path, toolkit: Path, cdi_dir: Path, metrics: str) -> str:
    """containerd 2.x: NRI on (2 s timeout), CDI on, the default runc handler and the ``nvidia`` and
    ``nvidia-legacy`` handlers (the same runc.v2 options, NVIDIA's runtime as the binary); its metrics
    (NRI's per-plugin call latency among them) served at ``metrics``."""
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    handlers = "".join(
        f"[{runtime}.containerd.runtimes.{name}]\n"
        "  runtime_type = 'io.containerd.runc.v2'\n"
        f"[{runtime}.containerd.runtimes.{name}.options]\n"
        f"  BinaryName = '{toolkit / binary}'\n"
        for name, binary in (("nvidia", "nvidia-container-runtime"),
                             ("nvidia-legacy", "nvidia-container-runtime.legacy"))
    )  # fmt: skip
    return (
        "version = 3\n"
        "[metrics]\n"
        f"  address = '{metrics}'\n"
        "[plugins.'io.containerd.cri.v1.images'.pinned_images]\n"
        f"  sandbox = '{CONTAINERD_IMAGE}'\n"
        f"[{runtime}]\n"
        "  restrict_oom_score_adj = true\n"
        "  enable_cdi = true\n"
        f"  cdi_spec_dirs = ['{cdi_dir}']\n"
        f"[{runtime}.containerd.runtimes.runc]\n"
        "  runtime_type = 'io.containerd.runc.v2'\n"
        f"{handlers}"
        "[plugins.'io.containerd.nri.v1.nri']\n"
        "  disable = false\n"
        f"  socket_path = '{work / 'nri.sock'}'\n"
        "  plugin_request_timeout = '2s'\n"
    )


# --- plugins ------------------------------------------------------------------------------------------------


class PluginCgroup:
    """A cgroup with a pod's CPU request as its weight and its memory as a limit (v1 or v2), removed at exit."""

    def __init__(self, name: str, cpu_milli: int, memory: int) -> None:
        shares = max(2, cpu_milli * 1024 // 1000)  # kubelet's MilliCPUToShares
        base = Path("/sys/fs/cgroup")
        if (base / "cgroup.controllers").exists():  # v2: kubelet's shares -> weight conversion
            self.dirs = [base / name]
            settings = {"cpu.weight": str(1 + ((shares - 2) * 9999) // 262142), "memory.max": str(memory)}
        else:
            self.dirs = [base / "cpu" / name, base / "memory" / name]
            settings = {"cpu.shares": str(shares), "memory.limit_in_bytes": str(memory)}
        self.description = ", ".join(f"{key}={value}" for key, value in settings.items())
        for directory in self.dirs:
            directory.mkdir(exist_ok=True)
        for key, value in settings.items():
            for directory in self.dirs:
                if (directory / key).exists():
                    (directory / key).write_text(value)

    def add(self, pid: int) -> None:
        """Move ``pid`` (all its threads) into the cgroup."""
        for directory in self.dirs:
            (directory / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        """Remove the cgroup (its processes have ended)."""
        for directory in self.dirs:
            with contextlib.suppress(OSError):
                directory.rmdir()


def nri_create_latency(address: str) -> tuple[int, float]:
    """containerd's NRI metrics for CreateContainer, summed over plugins: calls and total seconds (what
    containerd waited for plugins' answers, from sending the request to decoding the answer)."""
    import urllib.request

    with urllib.request.urlopen(f"http://{address}/v1/metrics", timeout=30) as response:
        text = response.read().decode()
    count, total = 0, 0.0
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if not name.startswith("containerd_nri_plugin_latency_seconds") or "create" not in name.lower():
            continue
        if name.startswith("containerd_nri_plugin_latency_seconds_count"):
            count += int(float(value))
        elif name.startswith("containerd_nri_plugin_latency_seconds_sum"):
            total += float(value)
    return count, total


def cpu_seconds(pid: int, *, children: bool = False) -> float:
    """User + system CPU time of a process (all its threads) so far; with ``children``, also that of the
    children it has waited for (a shim's: runc, the runtime, hooks, the containers' processes)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


class Plugin:
    """One plugin process connected to the daemon's NRI socket for a block, then stopped."""

    def __init__(self, argv: list[str], log: Path, ready: str, cgroup: PluginCgroup | None) -> None:
        self.log = log
        offset = log.stat().st_size if log.exists() else 0
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        if cgroup is not None:
            cgroup.add(self.process.pid)
        deadline = time.monotonic() + 30
        while ready not in log.read_text(errors="replace")[offset:]:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"plugin not ready: {log.read_text(errors='replace')[offset:][-2000:]}")
            time.sleep(0.05)
        self.cpu_start = cpu_seconds(self.process.pid)

    def cpu(self) -> float:
        """CPU seconds the plugin used since it was ready."""
        return cpu_seconds(self.process.pid) - self.cpu_start

    def stop(self) -> None:
        """TERM, then KILL; wait."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


# --- the benchmark ------------------------------------------------------------------------------------------


class Bench:
    """The node, the daemon, a pod per setup, and the timed calls."""

    def __init__(
        self, args: argparse.Namespace, work: Path, daemon: Containerd, toolkit: Path, metrics: str
    ) -> None:
        self.args = args
        self.metrics = metrics
        self.work = work
        self.daemon = daemon
        self.toolkit = toolkit
        self.client = CriClient(daemon.address)
        self.env_dir = work / "env"
        self.env_dir.mkdir(mode=0o755)
        self.records = {key: work / "records" / key for key in ("nvidia-legacy", "ours-legacy")}
        for directory in self.records.values():
            directory.mkdir(parents=True)
        self.configs = {
            mode: hook_config(work, mode, self.env_dir, work / "cdi", self.records["ours-legacy"])
            for mode in ("cdi", "legacy")
        }
        self.cgroup = PluginCgroup(
            f"gpu-env-hook-bench-nri-{os.getpid()}", args.plugin_cpu, args.plugin_memory << 20
        )
        self.pods: dict[str, tuple[str, Any]] = {}
        self.counter = 0
        self.block = ""
        self.create_seconds: dict[str, float] = {}  # CreateContainer alone, per container
        self.failures: list[str] = []
        self.setups = [
            s
            for s in (*SETUPS, *EXTRA_SETUPS)
            if s.plugin != "nvidia" or (toolkit / "nvidia-ctk-installer").exists()
        ]
        self.figures = {setup.key: Figures() for setup in self.setups}

    def close(self) -> None:
        self.client.close()
        self.cgroup.remove()

    def pod(self, setup: Setup) -> tuple[str, Any]:
        """The setup's pod sandbox (made once): NVIDIA's NRI setup carries the device annotation."""
        if setup.key not in self.pods:
            annotations = {NVIDIA_NRI_ANNOTATION: DEVICE} if setup.plugin == "nvidia" else {}
            config = self.client.sandbox_config(f"bench-{setup.key}", self.work / "logs", annotations)
            self.pods[setup.key] = (self.client.run_pod_sandbox(config, setup.handler), config)
        return self.pods[setup.key]

    def shim(self, setup: Setup) -> int:
        """The pid of the shim serving the setup's pod (a runc.v2 shim per pod sandbox)."""
        sandbox, _ = self.pod(setup)
        for pid in self.daemon.shim_pids():
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if sandbox.encode() in argv:
                return pid
        raise RuntimeError(f"no shim for the pod of {setup.key}")

    def request(self, setup: Setup, index: int) -> tuple[dict[str, str], list[str], list[str]]:
        """The container's environment, CDI devices and command for this setup."""
        check = ["/bin/sh", "-c", CDI_CHECK if setup.mode == "cdi" else LEGACY_CHECK]
        if setup.key in ("floor", "ours-plain"):
            return {}, [DEVICE], check
        if setup.key == "nvidia-cdi":
            return {"NVIDIA_VISIBLE_DEVICES": DEVICE}, [], check
        if setup.key == "nvidia-legacy":
            return {"NVIDIA_VISIBLE_DEVICES": "0"}, [], check
        if setup.key == "nvidia-nri":
            return {}, [], check
        env_file = self.env_dir / f"{setup.key}-{index}.env"
        env_file.write_text(f"GPU_ENV_HOOK_POD_UID=uid-bench-{setup.key}\nNVIDIA_VISIBLE_DEVICES=0\n")
        env_file.chmod(0o644)
        # As a device plugin's Allocate answers: the file and the env-file guard's CDI device.
        return {"NVIDIA_ENV_FROM_FILE": str(env_file)}, [paths.ENV_FILE_GUARD_DEVICE], check

    @contextlib.contextmanager
    def plugin(self, setup: Setup) -> Iterator[Plugin | None]:
        """The setup's plugin connected for the block (none for the floor and NVIDIA's handler)."""
        if setup.plugin is None:
            yield None
            return
        nri_socket = str(self.work / "nri.sock")
        if setup.plugin == "nvidia":
            scratch = self.work / "nvidia-toolkit"
            argv = [
                str(self.toolkit / "nvidia-ctk-installer"), "--no-runtime-config", "--enable-nri-plugin",
                "--nri-namespace", "gpu-operator", "--nri-socket", nri_socket,
                "--toolkit-source-root", str(nvidia_artifacts(self.work, self.toolkit)),
                "--toolkit-install-dir", str(scratch / "install"), "--pid-file", str(scratch / "toolkit.pid"),
            ]  # fmt: skip
            started = Plugin(argv, self.work / "nvidia-nri.log", "Waiting for signal", None)
        else:
            mode = setup.plugin.removeprefix("ours-")
            argv = [PYTHON, "-I", "-m", "hook", "-config", str(self.configs[mode]), "nri", nri_socket]
            cgroup = self.cgroup if setup.share else None
            started = Plugin(argv, self.work / "ours-nri.log", "configured by", cgroup)
        calls, seconds = nri_create_latency(self.metrics)
        try:
            yield started
        finally:
            after_calls, after_seconds = nri_create_latency(self.metrics)
            started.stop()
            if after_calls > calls:
                mean = (after_seconds - seconds) * 1000 / (after_calls - calls)
                self.figures[setup.key].nri_calls.append((self.block, after_calls - calls, mean))

    def create_and_start(self, setup: Setup, index: int) -> tuple[float, str]:
        """CreateContainer + StartContainer, timed together; the seconds and the container id."""
        if setup.handler and self.daemon.process is not None:
            # NVIDIA's config as the daemon's namespace sees it: another daemon that used the same node path
            # and removed its mount point on the host (not under the engine lock) would take it away.
            seen = Path(f"/proc/{self.daemon.process.pid}/root{NVIDIA_CONFIG}")
            if not seen.is_file():
                raise RuntimeError(
                    f"{NVIDIA_CONFIG} is gone from the daemon's view (its mount point removed?)"
                )
        sandbox, config = self.pod(setup)
        env, devices, command = self.request(setup, index)
        name = f"{setup.key}-{index}"
        started = time.perf_counter()
        container = self.client.create_container(
            sandbox, config, name=name, image=CONTAINERD_IMAGE, command=command, env=env,
            log_path=f"{name}.log", cdi_devices=tuple(devices),
        )  # fmt: skip
        self.create_seconds[container] = time.perf_counter() - started
        self.client.start_container(container)
        return time.perf_counter() - started, container

    def finish(self, setup: Setup, container: str) -> None:
        """Untimed: the container ran its check to exit 0; StopContainer (timeout 0), RemoveContainer."""
        deadline = time.monotonic() + 30
        while (status := self.client.container_status(container)).state != self.client.pb.CONTAINER_EXITED:
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if status.exit_code != 0 or status.reason != "Completed":
            self.failures.append(f"{setup.key}: {container[:12]} exit {status.exit_code} {status.reason}")
        self.client.stop_container(container, timeout=0)
        self.client.remove_container(container)

    def next_indices(self, count: int) -> range:
        start = self.counter
        self.counter += count
        return range(start, start + count)

    def sequential_block(self, setup: Setup, count: int) -> None:
        """``count`` containers one at a time."""
        figures = self.figures[setup.key]
        before = loadavg()
        self.block = f"sequential x{count}"
        with self.plugin(setup) as plugin:
            for index in self.next_indices(count):
                seconds, container = self.create_and_start(setup, index)
                figures.sequential.append(seconds)
                figures.sequential_create.append(self.create_seconds[container])
                self.finish(setup, container)
            if plugin is not None:
                figures.plugin_cpu_ms.append(plugin.cpu() * 1000 / count)
        self.verify_cli(setup, count)
        figures.loads.append((f"sequential x{count}", before, loadavg()))

    def burst_block(self, setup: Setup, count: int) -> None:
        """``count`` containers at once (a thread each, released together)."""
        figures = self.figures[setup.key]
        time.sleep(self.args.settle)  # the previous block's removals finish in the background
        before = loadavg()
        self.block = f"burst x{count}"
        with self.plugin(setup) as plugin:
            indices = self.next_indices(count)
            self.pod(setup)
            for index in indices:  # the env files are there before the burst, as a device plugin's are
                self.request(setup, index)
            gate = threading.Barrier(count + 1)
            daemon = self.daemon.process.pid if self.daemon.process is not None else 0
            shim = self.shim(setup)

            def one(index: int) -> tuple[float, str]:
                gate.wait()
                return self.create_and_start(setup, index)

            with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
                futures = [pool.submit(one, index) for index in indices]
                daemon_cpu, shim_cpu = cpu_seconds(daemon), cpu_seconds(shim, children=True)
                plugin_cpu = plugin.cpu() if plugin is not None else 0.0
                gate.wait()
                started = time.perf_counter()
                results = [future.result() for future in futures]
                wall = time.perf_counter() - started
                daemon_cpu = cpu_seconds(daemon) - daemon_cpu
                shim_cpu = cpu_seconds(shim, children=True) - shim_cpu
                plugin_cpu = (plugin.cpu() if plugin is not None else 0.0) - plugin_cpu
            figures.burst_cpu.append(tuple(cpu * 1000 / count for cpu in (daemon_cpu, shim_cpu, plugin_cpu)))
            with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
                list(pool.map(lambda result: self.finish(setup, result[1]), results))
        self.verify_cli(setup, count)
        figures.burst += [seconds for seconds, _ in results]
        figures.burst_create += [self.create_seconds[container] for _, container in results]
        figures.walls.append(wall)
        figures.loads.append((f"burst x{count}", before, loadavg()))

    def verify_cli(self, setup: Setup, count: int) -> None:
        """A legacy block's cli calls: one per container, each with GPU 0; the records are removed after (the
        stand-in names a record by its pid, which a whole run's thousands of processes would reuse)."""
        if setup.key not in self.records:
            return
        records = list(self.records[setup.key].glob("*.json"))
        calls = [json.loads(path.read_text()) for path in records]
        wrong = [call["argv"] for call in calls if "--device=0" not in call["argv"]]
        if len(calls) != count or wrong:
            self.failures.append(
                f"{setup.key}: {len(calls)} cli calls for {count} containers, wrong: {wrong[:1]}"
            )
        for path in records:
            path.unlink()


@dataclass(frozen=True)
class Answer:
    """The plugin's answer in process: wall p50/p99 and CPU p99 (ms), the request's and answer's bytes."""

    p50: float
    p99: float
    cpu_p99: float
    request: int
    response: int


def answer_times(bench: Bench, setup: Setup, runs: int) -> Answer:
    """The plugin's answer to a real CreateContainer, in process: one container of ``setup`` created with the
    plugin connected through a recording relay; the runtime's CreateContainer request replayed to a session
    of the plugin's own code ``runs`` times (decode, decide, encode: what the plugin does between reading the
    request and writing the answer). Returns p50 and p99 in milliseconds and the request's size in bytes."""
    from test_nri_containerd import Relay

    from hook.nri import ttrpc_pb2, wire
    from hook.nri.main import build_context
    from hook.nri.plugin import Session

    mode = (setup.plugin or "").removeprefix("ours-")
    relay = Relay(bench.work / f"relay-{setup.key}.sock", bench.work / "nri.sock")
    argv = [PYTHON, "-I", "-m", "hook", "-config", str(bench.configs[mode]), "nri", str(relay.listen)]
    plugin = Plugin(argv, bench.work / f"ours-nri-relay-{mode}.log", "configured by", bench.cgroup)
    try:
        index = bench.next_indices(1)[0]
        _, container = bench.create_and_start(setup, index)
        bench.finish(setup, container)
    finally:
        plugin.stop()
        relay.close()
    runtime = b"".join(bytes.fromhex(chunk["hex"]) for chunk in relay.chunks if chunk["from"] == "runtime")
    requests = [
        ttrpc_pb2.Request.FromString(message.data)
        for message in wire.Demux().feed(runtime)
        if message.conn == wire.PLUGIN_CONN and message.kind == wire.REQUEST
    ]
    create = [request for request in requests if request.method == "CreateContainer"][-1]
    context = build_context(str(bench.configs[mode]))
    ours, theirs = socket.socketpair()
    with ours, theirs:
        session = Session(wire.Link(ours), context, lambda _line: None)
        for _ in range(20):  # its first answers load the decision's modules, once per plugin process
            session.answer(create)
        walls, cpus = [], []
        for _ in range(runs):
            cpu, started = time.thread_time(), time.perf_counter()
            response, _ = session.answer(create)
            response.SerializeToString()
            walls.append(time.perf_counter() - started)
            cpus.append(time.thread_time() - cpu)
    if response.status.code or not response.payload:
        bench.failures.append(f"{setup.key}: replayed CreateContainer refused: {response.status.message}")
    return Answer(
        statistics.median(walls) * 1000, percentile(walls, 0.99) * 1000, percentile(cpus, 0.99) * 1000,
        len(create.payload), len(response.payload),
    )  # fmt: skip


def nvidia_artifacts(work: Path, toolkit: Path) -> Path:
    """What ``nvidia-ctk-installer`` installs from (its package's layout): the toolkit's executables, the
    stand-in cli, and placeholder files for libnvidia-container (never loaded on the NRI path)."""
    root = work / "nvidia-artifacts"
    if root.exists():
        return root
    (root / "usr/bin").mkdir(parents=True)
    (root / LIB_DIR.lstrip("/")).mkdir(parents=True)
    for name in RUNTIME_EXECUTABLES:
        shutil.copy(toolkit / name, root / "usr/bin" / name)
    shutil.copy(STANDIN_CLI, root / "usr/bin/nvidia-container-cli")
    for name in ("libnvidia-container.so.1", "libnvidia-container-go.so.1"):
        (root / LIB_DIR.lstrip("/") / name).write_text("placeholder: not loaded on the NRI path\n")
    return root


def versions(binaries: Path, toolkit: Path, daemon: Containerd) -> list[str]:
    """The builds measured, as they name themselves."""

    def first_line(argv: list[str]) -> str:
        out = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30).stdout.strip()
        return out.splitlines()[0] if out else "?"

    client = CriClient(daemon.address)
    try:
        containerd = f"containerd {client.version().runtime_version}"
    finally:
        client.close()
    runc = first_line([shutil.which("runc") or "runc", "--version"])
    nvidia = first_line([str(toolkit / "nvidia-container-runtime"), "--version"])
    return [
        f"containerd: {containerd} ({binaries})",
        f"runc:       {runc}",
        f"NVIDIA:     {nvidia} ({toolkit}; a build without its version stamp says 'version unknown')",
        f"python:     {PYTHON} ({sys.version.split()[0]}), the plugin's interpreter and its hook's",
    ]


def nri_problems(log: str) -> list[str]:
    """containerd's log lines saying NRI dropped a plugin that was there (``closing plugin X, failed to handle
    Y request``: ``context deadline exceeded`` for the request timeout, or an error). Not counted: ``... ttrpc: closed``, which NRI logs for the
    first create after a plugin disconnected (here: stopped at the end of its block), as it takes closed
    plugins off its list only after that create."""
    return [
        line for line in log.splitlines() if "closing plugin" in line and not line.endswith('ttrpc: closed"')
    ]


# --- report -------------------------------------------------------------------------------------------------


def summary(figures: dict[str, Figures]) -> dict[str, dict[str, float]]:
    """Per setup: p50/p95 one at a time and in the burst (ms), median wall (s), ratios and ms over the floor."""
    out: dict[str, dict[str, float]] = {}
    for key, fig in figures.items():
        row: dict[str, float] = {}
        if fig.sequential:
            row["seq_p50"] = statistics.median(fig.sequential) * 1000
            row["seq_p95"] = percentile(fig.sequential, 0.95) * 1000
        if fig.burst:
            row["burst_p50"] = statistics.median(fig.burst) * 1000
            row["burst_p95"] = percentile(fig.burst, 0.95) * 1000
            row["wall"] = statistics.median(fig.walls)
        if fig.plugin_cpu_ms:
            row["plugin_cpu_ms"] = statistics.median(fig.plugin_cpu_ms)
        for index, name in enumerate(("containerd", "shim", "plugin")):
            if fig.burst_cpu:
                row[f"burst_{name}_cpu_ms"] = statistics.median(cpu[index] for cpu in fig.burst_cpu)
        if fig.sequential_create:
            row["seq_create_p50"] = statistics.median(fig.sequential_create) * 1000
        if fig.burst_create:
            row["burst_create_p50"] = statistics.median(fig.burst_create) * 1000
        out[key] = row
    floor = out.get("floor", {})
    for row in out.values():
        for metric in ("seq_p50", "seq_p95", "burst_p50", "burst_p95", "seq_create_p50", "burst_create_p50"):
            if metric in row and metric in floor:
                row[f"{metric}_added"] = row[metric] - floor[metric]
                row[f"{metric}_ratio"] = row[metric] / floor[metric]
        if "wall" in row and "wall" in floor:
            row["wall_ratio"] = row["wall"] / floor["wall"]
    return out


def report(rows: dict[str, dict[str, float]], n_seq: dict[str, int], n_burst: dict[str, int]) -> list[str]:
    """The table and the targets' verdicts."""
    header = (
        f"{'setup':<16} {'n':>4} {'p50 ms':>7} {'+ms':>6} {'x':>5} {'p95 ms':>7} {'+ms':>6}   "
        f"{'n':>4} {'p50 ms':>7} {'+ms':>6} {'x':>5} {'p95 ms':>7} {'x':>5} {'wall s':>6} {'x':>5}  plugin cpu ms/ctr"
    )  # fmt: skip
    lines = [header]
    for key, row in rows.items():

        def get(metric: str, fmt: str, row: dict[str, float] = row) -> str:
            return format(row[metric], fmt) if metric in row else "-"

        lines.append(
            f"{key:<16} {n_seq[key]:>4} {get('seq_p50', '7.1f')} {get('seq_p50_added', '+6.1f')} "
            f"{get('seq_p50_ratio', '5.2f')} {get('seq_p95', '7.1f')} {get('seq_p95_added', '+6.1f')}   "
            f"{n_burst[key]:>4} {get('burst_p50', '7.1f')} {get('burst_p50_added', '+6.1f')} "
            f"{get('burst_p50_ratio', '5.2f')} {get('burst_p95', '7.1f')} {get('burst_p95_ratio', '5.2f')} "
            f"{get('wall', '6.2f')} {get('wall_ratio', '5.2f')}  {get('plugin_cpu_ms', '.2f')}"
        )
    return lines


def targets(rows: dict[str, dict[str, float]]) -> list[tuple[str, bool]]:
    """Issue 28's targets, each with whether it holds (only those whose setups ran)."""
    verdicts = []
    ours, theirs = rows.get("ours-cdi", {}), rows.get("nvidia-cdi", {})
    if "seq_p50_added" in ours and "seq_p50_added" in theirs:
        text = (f"CDI, one at a time: ours adds {ours['seq_p50_added']:+.1f} ms (p50) over the floor, NVIDIA's "
                f"handler {theirs['seq_p50_added']:+.1f} ms: ours fewer")  # fmt: skip
        verdicts.append((text, ours["seq_p50_added"] < theirs["seq_p50_added"]))
    if "burst_p50_ratio" in ours:
        text = f"CDI, burst: ours p50 {ours['burst_p50_ratio']:.2f}x the floor's <= {BURST_TARGET}x"
        verdicts.append((text, ours["burst_p50_ratio"] <= BURST_TARGET))
    ours, theirs = rows.get("ours-legacy", {}), rows.get("nvidia-legacy", {})
    for metric, what in (("seq_p50_added", "one at a time"), ("burst_p50_added", "burst")):
        if metric in ours and metric in theirs:
            text = (f"legacy, {what}: ours adds {ours[metric]:+.1f} ms (p50), NVIDIA's handler "
                    f"{theirs[metric]:+.1f} ms: ours no more")  # fmt: skip
            verdicts.append((text, ours[metric] <= theirs[metric]))
    return verdicts


def block_order(setups: list[Setup], index: int) -> list[Setup]:
    """The setups' order in round ``index``: A B C, C B A, then rotated by one, and so on (each pair of rounds
    gives every setup the same mean position, so a drift in the machine's load does not favour one)."""
    shift = (index // 2) % len(setups)
    order = setups[shift:] + setups[:shift]
    return order if index % 2 == 0 else order[::-1]


def main(argv: list[str] | None = None) -> int:
    """Run every setup in alternating blocks, print the figures; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sequential", type=int, default=200, help="containers one at a time, per setup")
    parser.add_argument("--rounds", type=int, default=4, help="blocks the sequential containers come in")
    parser.add_argument("--burst", type=int, default=100, help="containers at once")
    parser.add_argument("--bursts", type=int, default=2, help="bursts per setup (their order rotated)")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds of rest before each burst")
    parser.add_argument("--only", default="", help="comma-separated setups to run (the floor always runs)")
    parser.add_argument(
        "--answer-runs", type=int, default=2000, help="replays of a CreateContainer, in process"
    )
    parser.add_argument(
        "--plugin-cpu", type=int, default=PLUGIN_CPU_MILLI, help="the plugin pod's CPU request, m"
    )
    parser.add_argument("--plugin-memory", type=int, default=PLUGIN_MEMORY >> 20, help="its memory, MiB")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--no-fail", action="store_true", help="exit 0 even when a target is missed")
    args = parser.parse_args(argv)
    binaries, toolkit = containerd2_dir(), nvidia_toolkit_dir()
    if os.geteuid() != 0 or binaries is None or toolkit is None:
        print("bench_nri: SKIP (needs root, GPU_ENV_HOOK_CONTAINERD2 and GPU_ENV_HOOK_NVIDIA_RUNTIME)")
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-nri-") as tmp:
        return run(args, Path(tmp), binaries, toolkit)


def run(args: argparse.Namespace, work: Path, binaries: Path, toolkit: Path) -> int:
    """The whole run in ``work``."""
    archive = write_image_archive(work / "image.tar", CONTAINERD_IMAGE, ["/bin/sleep", "3600"])
    cdi_dir = work / "cdi"
    cdi_dir.mkdir()
    import yaml

    spec = nvidia_spec(make_driver_root(work / "driver"), toolkit / "nvidia-cdi-hook")
    (cdi_dir / "nvidia.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    # The env-file guard's spec, the bytes install writes (in /etc/cdi on a node): there in every setup.
    (cdi_dir / Path(paths.ENV_FILE_GUARD_SPEC).name).write_bytes(guard_spec())
    records = work / "records" / "nvidia-legacy"
    binds = {"/etc/nvidia-container-runtime": nvidia_config(work, toolkit, cdi_dir, records)}
    tree = work / "node"
    (tree / "etc/containerd").mkdir(parents=True)
    with socket.socket() as probe:  # a free port for containerd's metrics
        probe.bind(("127.0.0.1", 0))
        metrics = f"127.0.0.1:{probe.getsockname()[1]}"
    (tree / "etc/containerd/config.toml").write_text(containerd_config(work, toolkit, cdi_dir, metrics))
    answers: dict[str, Answer] = {}
    with running(tree, work / "daemon", binaries=binaries, binds=binds) as daemon:
        daemon.import_image(archive)
        bench = Bench(args, work, daemon, toolkit, metrics)
        try:
            named = args.only.split(",") if args.only else [setup.key for setup in SETUPS]
            setups = [setup for setup in bench.setups if setup.key == "floor" or setup.key in named]
            bench.figures = {setup.key: Figures() for setup in setups}
            for line in versions(binaries, toolkit, daemon):
                print(line)
            print(
                f"plugin cgroup: {bench.cgroup.description} ({args.plugin_cpu}m CPU, {args.plugin_memory}Mi)"
            )
            print(f"load before: {loadavg()}  (nproc {os.cpu_count()})")
            for setup in setups:
                print(f"  {setup.key:<16} {setup.description}")
            for setup in setups:  # warm: the image's snapshot, each pod, each path once
                bench.sequential_block(setup, 2)
            bench.figures = {setup.key: Figures() for setup in setups}
            per_round = -(-args.sequential // args.rounds)
            for round_index in range(args.rounds):
                for setup in block_order(setups, round_index):
                    bench.sequential_block(setup, per_round)
                print(f"round {round_index + 1}/{args.rounds} done, load {loadavg()}", flush=True)
            for burst_index in range(args.bursts):
                for setup in block_order(setups, burst_index):
                    bench.burst_block(setup, args.burst)
                print(f"burst {burst_index + 1}/{args.bursts} done, load {loadavg()}", flush=True)
            answers = {
                setup.key: answer_times(bench, setup, args.answer_runs)
                for setup in setups
                if setup.key in ("ours-cdi", "ours-legacy")
            }
        finally:
            with contextlib.suppress(Exception):
                for sandbox, _ in bench.pods.values():
                    bench.client.stop_pod_sandbox(sandbox)
                    bench.client.remove_pod_sandbox(sandbox)
            bench.close()
        problems = nri_problems(daemon.log_path.read_text(errors="replace"))
    rows = summary(bench.figures)
    n_seq = {key: len(fig.sequential) for key, fig in bench.figures.items()}
    n_burst = {key: len(fig.burst) for key, fig in bench.figures.items()}
    print(
        f"\nCreate+Start through CRI, ms; one at a time | burst of {args.burst}; +ms and x against the floor"
    )
    for line in report(rows, n_seq, n_burst):
        print(line)
    print(
        "\nCreateContainer alone (NRI's plugins answer there), p50 ms and +ms over the floor: one at a time | burst"
    )
    for key, row in rows.items():
        print(f"  {key:<16} {row.get('seq_create_p50', 0):7.1f} {row.get('seq_create_p50_added', 0):+7.1f}   "
              f"{row.get('burst_create_p50', 0):7.1f} {row.get('burst_create_p50_added', 0):+7.1f}")  # fmt: skip
    print(
        "\nCPU ms per container in the bursts' timed part: containerd | the pod's shim with runc or the runtime,"
    )
    print("hooks, cli and the containers' processes | the plugin")
    for key, row in rows.items():
        print(f"  {key:<16} {row.get('burst_containerd_cpu_ms', 0):6.1f} | {row.get('burst_shim_cpu_ms', 0):6.1f} | "
              f"{row.get('burst_plugin_cpu_ms', 0):6.2f}")  # fmt: skip
    print("\nload (1/5/15 min) before -> after each block:")
    for key, fig in bench.figures.items():
        print(f"  {key:<16} " + "; ".join(f"{what}: {a} -> {b}" for what, a, b in fig.loads))
    print(
        "\ncontainerd's wait for the plugins' CreateContainer answers (NRI's metrics) per block: calls, mean ms"
    )
    for key, fig in bench.figures.items():
        if fig.nri_calls:
            print(f"  {key:<16} " + "; ".join(f"{what}: {n}, {ms:.2f} ms" for what, n, ms in fig.nri_calls))
    print(
        f"\ncontainers checked: {sum(n_seq.values()) + sum(n_burst.values())}, failures: {len(bench.failures)}"
    )
    for failure in bench.failures[:10]:
        print(f"  {failure}")
    print(f"containerd's log, NRI plugin dropped or timed out: {len(problems)} line(s)")
    for line in problems[:10]:
        print(f"  {line[:300]}")
    for key, answer in answers.items():
        print(f"plugin's answer in process ({key}: a recorded {answer.request}-byte CreateContainer, "
              f"{answer.response}-byte answer, {args.answer_runs} runs): wall p50 {answer.p50:.3f} ms, "
              f"p99 {answer.p99:.3f} ms; CPU p99 {answer.cpu_p99:.3f} ms")  # fmt: skip
    verdicts = targets(rows) + [
        (
            f"{key}: the plugin's answer in process, CPU p99 {answer.cpu_p99:.3f} ms < 1 ms",
            answer.cpu_p99 < 1.0,
        )
        for key, answer in answers.items()
    ]
    print()
    for text, held in verdicts:
        print(f"{'ok    ' if held else 'MISSED'} {text}")
    if args.json:
        document = {
            "rows": rows,
            "answers": {key: vars(answer) for key, answer in answers.items()},
            "n_seq": n_seq,
            "n_burst": n_burst,
            "failures": bench.failures,
            "nri_problems": problems,
            "figures": {key: vars(fig) for key, fig in bench.figures.items()},
        }
        Path(args.json).write_text(json.dumps(document, indent=1) + "\n")
    failed = bench.failures or problems or not all(held for _, held in verdicts)
    return 1 if failed and not args.no_fail else 0


if __name__ == "__main__":
    sys.exit(main())

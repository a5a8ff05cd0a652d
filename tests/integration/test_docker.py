"""What ``install --engine docker --root NODE`` wrote, used by a real dockerd 20.10 (Debian's docker.io).

Each test starts its own dockerd (``dockerd.Dockerd``: own roots and socket, the node tree's ``usr/local``
and ``etc/docker`` at the node paths, a PID namespace that takes every process down with it) and stops it,
even on failure. ``nvidia-container-cli`` is the recording stand-in: what it received is what a GPU node's
cli would have been asked to do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from dockerd import Dockerd, available, running
from runc_hooks import STANDIN_CLI, load_record

from hook.util import paths

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not available(), reason="needs root, dockerd and docker (docker.io) and unshare"),
]

CONFIG = "/usr/local/etc/gpu-env-hook/config.toml"  # a node path inside the bind-mounted /usr/local
ENV_FILE = "# written by the device plugin\nNVIDIA_VISIBLE_DEVICES=1,2\nUSER_CUSTOM_ENV=hello\n"
DAEMON_JSON = b'{\n  "log-level": "info",\n  "default-ulimits": {"nofile": {"Name": "nofile", "Hard": 4096, "Soft": 1024}}\n}\n'
PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path
RUN = ("run", "--rm", "--network", "none")
# A container process that ends on SIGTERM (a bare ``sleep`` as PID 1 ignores it).
WORKER = ("sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.2; done")


class Node:
    """A node tree with a daemon.json of its own, a config.toml pointing the hook at the stand-in cli, and
    an env file a device plugin wrote."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "node"
        self.record = tmp_path / "cli-record.json"
        self.env_file = tmp_path / "nvidia-env" / "pod-a.env"
        self.env_file.parent.mkdir()
        self.env_file.write_text(ENV_FILE)
        self.env_file.chmod(0o644)
        self.daemon_json = self.root / paths.DOCKER_DAEMON_JSON.lstrip("/")
        self.daemon_json.parent.mkdir(parents=True)
        self.daemon_json.write_bytes(DAEMON_JSON)
        # The runtime tree's directory, there before dockerd starts so that it sees what install puts in it.
        (self.root / "opt/gpu-env-hook").mkdir(parents=True)
        config = self.root / CONFIG.lstrip("/")
        config.parent.mkdir(parents=True)
        config.write_text(
            "[nvidia-container-cli]\n"
            f'path = "{STANDIN_CLI}"\n'
            f'environment = ["STANDIN_RECORD={self.record}"]\n'
            "[env-file]\n"
            f'directories = ["{self.env_file.parent}"]\n'
        )

    def install(self, *flags: str) -> list[str]:
        """``gpu-env-hook install --engine docker --root NODE --config CONFIG FLAGS``; its output lines."""
        proc = gpu_env_hook(
            "install", "--engine", "docker", "--root", str(self.root), "--config", CONFIG, *flags
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.splitlines()

    def uninstall(self, *flags: str, daemon: Dockerd | None = None) -> list[str]:
        """``gpu-env-hook uninstall --engine docker --root NODE FLAGS`` (``--purge`` alone: without
        ``--engine``); its output lines. With ``daemon``: run in its namespaces with ``--proc /proc``, so that
        the processes uninstall sees are that daemon's, as on a node."""
        engine = () if "--purge" in flags else ("--engine", "docker")
        args = ["uninstall", *engine, "--root", str(self.root), *flags]
        if daemon is None:
            proc = gpu_env_hook(*args)
        else:
            argv = daemon.in_namespace([PYTHON, "-I", "-m", "hook", *args, "--proc", "/proc"])
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.splitlines()

    def cli_argv(self) -> list[str]:
        """The argv the stand-in cli recorded (fails if the hook never called it)."""
        found: dict[str, Any] | None = load_record(self.record)
        assert found is not None, "the hook did not run nvidia-container-cli"
        argv: list[str] = found["argv"]
        return argv


def gpu_env_hook(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``gpu-env-hook ARGS`` from the project's interpreter."""
    return subprocess.run(
        [PYTHON, "-I", "-m", "hook", *args], capture_output=True, text=True, timeout=60, check=False
    )


def timed(daemon: Dockerd, *args: str, check: bool = False) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run a docker command and return it with its wall time in seconds."""
    start = time.monotonic()
    proc = daemon.docker(*args, check=check)
    return proc, time.monotonic() - start


# --- docker run --runtime gpu-env ------------------------------------------------------------------------


def test_runtime_gives_the_env_files_variables_and_devices(tmp_path: Path) -> None:
    """Installed while dockerd runs, a reload is enough for ``--runtime gpu-env``: the container's process
    sees the env file's variables and the cli gets the file's devices."""
    node = Node(tmp_path)
    with running(node.root) as daemon:
        image = daemon.import_busybox()
        lines = node.install()
        assert (
            "next: reload dockerd (systemctl reload docker, or SIGHUP) to load the runtime; then "
            "`docker run --runtime=gpu-env ...`"
        ) in lines
        daemon.reload()
        assert paths.RUNTIME_HANDLER in daemon.runtimes()
        proc, seconds = timed(
            daemon, *RUN, "--runtime", "gpu-env", "-e", f"NVIDIA_ENV_FROM_FILE={node.env_file}", image, "env"
        )
        assert proc.returncode == 0, proc.stderr
        env = proc.stdout.splitlines()
        assert "NVIDIA_VISIBLE_DEVICES=1,2" in env
        assert "USER_CUSTOM_ENV=hello" in env
        argv = node.cli_argv()
        assert argv[0] == str(STANDIN_CLI)
        assert "--device=1,2" in argv
        assert seconds < 30


def test_runtime_runs_a_container_without_gpus_as_runc_would(tmp_path: Path) -> None:
    """A container naming no env file and no GPU runs as usual through the shim; the cli is never called."""
    node = Node(tmp_path)
    node.install()
    with running(node.root) as daemon:
        image = daemon.import_busybox()
        proc = daemon.docker(*RUN, "--runtime", "gpu-env", image, "echo", "plain", check=False)
        assert (proc.returncode, proc.stdout) == (0, "plain\n"), proc.stderr
        assert load_record(node.record) is None


def test_runtime_refused_env_file_fails_docker_run_with_our_line(tmp_path: Path) -> None:
    """An env file outside the configured directories fails ``docker run``; docker's error carries our one
    line, and the cli is never called."""
    node = Node(tmp_path)
    outside = tmp_path / "elsewhere.env"
    outside.write_text(ENV_FILE)
    node.install()
    with running(node.root) as daemon:
        image = daemon.import_busybox()
        proc = daemon.docker(
            *RUN, "--runtime", "gpu-env", "-e", f"NVIDIA_ENV_FROM_FILE={outside}", image, "true", check=False
        )
        assert proc.returncode != 0
        line = f"env file '{outside}': is not inside the env-file directories ({node.env_file.parent})"
        assert line in proc.stderr, proc.stderr
        assert load_record(node.record) is None


# --- docker run --gpus with --as-nvidia-hook --------------------------------------------------------------


def test_gpus_runs_our_hook_as_nvidia_container_runtime_hook(tmp_path: Path) -> None:
    """With ``--as-nvidia-hook`` installed before dockerd starts, ``docker run --gpus`` runs our hook (dockerd
    looks nvidia-container-runtime-hook up on its PATH): the cli gets the GPUs --gpus asked for, and with an
    env file, the file's."""
    node = Node(tmp_path)
    node.install("--as-nvidia-hook")
    with running(node.root) as daemon:
        image = daemon.import_busybox()
        proc = daemon.docker(*RUN, "--gpus", "device=3", image, "true", check=False)
        assert proc.returncode == 0, proc.stderr
        assert "--device=3" in node.cli_argv()
        node.record.unlink()
        env = ("-e", f"NVIDIA_ENV_FROM_FILE={node.env_file}")
        proc = daemon.docker(*RUN, "--gpus", "all", *env, image, "true", check=False)
        assert proc.returncode == 0, proc.stderr
        assert "--device=1,2" in node.cli_argv()


def test_as_nvidia_hook_needs_a_restart_not_a_reload(tmp_path: Path) -> None:
    """dockerd registers its --gpus driver only when it starts and finds nvidia-container-runtime-hook: after
    ``install --as-nvidia-hook`` a reload leaves ``--gpus`` failing; a restart makes it work. install says so."""
    node = Node(tmp_path)
    node.install()
    with running(node.root) as daemon:
        image = daemon.import_busybox()
        lines = node.install("--as-nvidia-hook")
        assert any(line.startswith("next: restart dockerd (systemctl restart docker)") for line in lines), (
            lines
        )
        daemon.reload()
        proc = daemon.docker(*RUN, "--gpus", "all", image, "true", check=False)
        assert proc.returncode != 0
        assert 'could not select device driver "" with capabilities: [[gpu]]' in proc.stderr
        daemon.restart()
        proc = daemon.docker(*RUN, "--gpus", "all", image, "true", check=False)
        assert proc.returncode == 0, proc.stderr
        assert "--device=all" in node.cli_argv()


# --- uninstall --------------------------------------------------------------------------------------------


def test_uninstall_restores_daemon_json_and_dockerd_keeps_the_runtime_until_restart(tmp_path: Path) -> None:
    """uninstall puts daemon.json back byte for byte; a reload does not make dockerd forget the runtime
    (``docker info`` lists it until a restart), as uninstall says."""
    node = Node(tmp_path)
    with running(node.root) as daemon:
        node.install("--as-nvidia-hook")
        daemon.reload()
        assert paths.RUNTIME_HANDLER in daemon.runtimes()
        lines = node.uninstall()
        assert node.daemon_json.read_bytes() == DAEMON_JSON
        assert any(line.startswith("next: restart dockerd (systemctl restart docker)") for line in lines), (
            lines
        )
        daemon.reload()
        assert paths.RUNTIME_HANDLER in daemon.runtimes()
        daemon.restart()
        assert paths.RUNTIME_HANDLER not in daemon.runtimes()


# --- uninstall never strands a container -------------------------------------------------------------------


def tree(root: Path, *, skip: tuple[str, ...] = ()) -> dict[str, bytes | None]:
    """Every entry under ``root`` (a file's bytes, None for a directory), but the ``skip`` ones."""
    return {
        str(path.relative_to(root)): (path.read_bytes() if path.is_file() else None)
        for path in sorted(root.rglob("*"))
        if str(path.relative_to(root)) not in skip
    }


def test_uninstall_with_running_containers_leaves_them_stoppable_and_purge_cleans_up(tmp_path: Path) -> None:
    """Containers created through the runtime before an uninstall can still be stopped, killed and removed,
    promptly and with no process left behind: uninstall keeps the runtime wrapper as a passthrough to the
    real runtime (no Python) that refuses new containers; ``uninstall --purge`` removes it once none runs."""
    node = Node(tmp_path)
    before = tree(node.root)
    node.install()
    with running(node.root) as daemon:
        image = daemon.import_busybox()
        daemon.reload()
        names = [f"strand-{tmp_path.name[-8:]}-{index}" for index in range(2)]
        for name in names:
            detached = ("run", "-d", "--name", name, "--network", "none", "--runtime", "gpu-env")
            daemon.docker(*detached, image, *WORKER)
        lines = node.uninstall(daemon=daemon)
        kept = [
            line
            for line in lines
            if line.startswith(f"kept {node.root}{paths.runtime_wrapper('docker')} as a passthrough")
        ]
        assert kept, lines
        assert (
            "(no Python; it refuses new containers): 2 process(es) still use it: containerd-shim" in kept[0]
        )
        assert node.daemon_json.read_bytes() == DAEMON_JSON
        assert (node.root / "var/lib/gpu-env-hook/retired.json").is_file()

        proc, stop_seconds = timed(daemon, "stop", "-t", "10", names[0])
        assert proc.returncode == 0, proc.stderr
        assert stop_seconds < 5  # the worker exits on SIGTERM: docker did not fall back to SIGKILL after 10 s
        proc = daemon.docker("kill", names[1], check=False)
        assert proc.returncode == 0, proc.stderr
        proc = daemon.docker("rm", *names, check=False)
        assert proc.returncode == 0, proc.stderr
        deadline = time.monotonic() + 10
        while daemon.leftovers() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert daemon.leftovers() == []  # no shim, no container process left

        # dockerd still lists the runtime until it restarts: a new container is refused in one line.
        proc = daemon.docker(*RUN, "--runtime", "gpu-env", image, "true", check=False)
        assert proc.returncode != 0
        assert (
            "gpu-env-runtime: gpu-env-hook was uninstalled from this node; this runtime only stops and deletes "
            "the containers created before; restart docker and do not select runtime gpu-env"
        ) in proc.stderr

        lines = node.uninstall("--purge", daemon=daemon)
        assert f"remove {node.root}{paths.runtime_wrapper('docker')}" in lines
    assert tree(node.root, skip=("etc/docker/key.json",)) == before

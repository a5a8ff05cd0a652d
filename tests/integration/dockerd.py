"""Run a real dockerd (Debian's docker.io 20.10) against a node tree, and take it down again, even on failure.

``Dockerd(node)`` starts ``dockerd --iptables=false --bridge=none --storage-driver=vfs`` with its own
``--data-root``, ``--exec-root``, ``--pidfile`` and ``-H unix://…`` under a short temporary directory, inside
new mount and PID namespaces (``unshare --mount --pid --fork --kill-child``) where:

* the node tree's ``usr/local`` is ``/usr/local`` (the wrappers and ``nvidia-container-runtime-hook`` at the
  node paths ``install --root NODE`` wrote into daemon.json), its ``etc/docker`` is ``/etc/docker`` (so
  dockerd reads the node's ``daemon.json`` at its usual place, reloads it on SIGHUP, and writes its
  ``key.json`` into the node tree), and its ``opt/gpu-env-hook`` is ``/opt/gpu-env-hook`` when the node has one;
* a fresh tmpfs is ``/run``: the sockets and state containerd and its shims keep there
  (``/run/containerd/s``, ``/run/docker``) never reach the host's.

dockerd starts its own containerd under its exec-root. PID 1 of the namespace is tini (``docker-init``, which
reaps the shims containerd daemonizes, as a node's init does) and dockerd its child: when dockerd ends
(``stop()``: SIGTERM, then SIGKILL to ``unshare``, whose ``--kill-child`` kills tini), tini ends, and the
kernel kills every process left in the namespace: containerd, the shims, the containers. Nothing outlives a
test.

The image is a busybox root filesystem fed to ``docker import`` (no registry, no network).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from busybox import make_busybox_rootfs

from hook.util import paths

DOCKERD = shutil.which("dockerd", path="/usr/sbin:/usr/bin") or "/usr/sbin/dockerd"
# Debian's 20.10 client, by path: another docker client may come first on PATH.
DOCKER = "/usr/bin/docker"
# tini (docker.io depends on it): PID 1 of the namespace, so that orphaned shims are reaped as on a node.
INIT = "/usr/bin/docker-init"
IMAGE = "gpu-env-hook-busybox:test"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0
DAEMON_FLAGS = ("--iptables=false", "--ip-masq=false", "--bridge=none", "--storage-driver=vfs")


class DockerdError(RuntimeError):
    """dockerd did not start, or a docker command failed; the message carries its output."""


def available() -> bool:
    """Tell whether this machine can run the Docker tests (root, dockerd, the 20.10 client, unshare)."""
    return (
        os.geteuid() == 0
        and os.access(DOCKERD, os.X_OK)
        and os.access(DOCKER, os.X_OK)
        and os.access(INIT, os.X_OK)
        and shutil.which("unshare") is not None
    )


def _script(node: Path) -> str:
    """The shell run inside the new namespaces before it execs dockerd."""
    binds = [(node / "usr/local", "/usr/local"), (node / "etc/docker", "/etc/docker")]
    # The runtime tree install writes (/opt/gpu-env-hook), when the node has its directory (a test that
    # installs while dockerd runs creates it first).
    tree = node / "opt/gpu-env-hook"
    if tree.is_dir():
        binds.append((tree, "/opt/gpu-env-hook"))
    lines = ["set -e", "mount -t tmpfs -o mode=0755 tmpfs /run", "mkdir -p /opt/gpu-env-hook"]
    lines += [f'mount --bind "{source}" "{target}"' for source, target in binds]
    lines.append(f'exec {INIT} -- "$@"')
    return "\n".join(lines)


class Dockerd:
    """One dockerd for one test: own roots and socket, the node's files at node paths, a PID namespace."""

    def __init__(self, node: Path) -> None:
        self.node = node
        for directory in ("usr/local", "etc/docker"):
            (node / directory).mkdir(parents=True, exist_ok=True)
        # Short: unix socket paths (containerd's under the exec-root) must stay below 108 bytes.
        self.workdir = Path(tempfile.mkdtemp(prefix="gpu-env-dockerd-", dir="/tmp"))
        self.socket = self.workdir / "docker.sock"
        self.log_path = self.workdir / "dockerd.log"
        self.process: subprocess.Popen[bytes] | None = None

    # --- life cycle --------------------------------------------------------------------------------------

    def start(self) -> Dockerd:
        """Start dockerd and wait until it answers (raises with its log if it does not)."""
        argv = [
            DOCKERD,
            *DAEMON_FLAGS,
            "--data-root",
            str(self.workdir / "data"),
            "--exec-root",
            str(self.workdir / "exec"),
            "--pidfile",
            str(self.workdir / "docker.pid"),
            "-H",
            f"unix://{self.socket}",
        ]
        wrapped = [
            "unshare",
            "--mount",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--propagation",
            "private",
            "sh",
            "-c",
            _script(self.node),
            "sh",
            *argv,
        ]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                wrapped,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={"PATH": paths.FIXED_PATH, "HOME": str(self.workdir)},
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise DockerdError(f"dockerd exited ({self.process.returncode}): {self.log()}")
            if self.socket.exists() and self.docker("version", check=False, timeout=10).returncode == 0:
                return self
            time.sleep(0.1)
        self.stop()
        raise DockerdError(f"dockerd did not answer within {START_TIMEOUT:.0f}s: {self.log()}")

    def init_pid(self) -> int:
        """The namespace's PID 1 (tini), as seen from here: the child of ``unshare``."""
        assert self.process is not None, "dockerd was not started"
        return _first_child(self.process.pid)

    def pid(self) -> int:
        """dockerd's pid as seen from here (tini's child; its own pidfile says 2)."""
        return _first_child(self.init_pid())

    def in_namespace(self, argv: list[str]) -> list[str]:
        """Return ``argv`` wrapped to run in dockerd's mount and PID namespaces: there ``/proc`` lists only
        this daemon's processes (a node's /proc, with no other test's shims in it)."""
        return ["nsenter", "--target", str(self.init_pid()), "--mount", "--pid", "--", *argv]

    def reload(self) -> None:
        """SIGHUP dockerd (what ``systemctl reload docker`` does) and wait until it has reloaded."""
        mark = self.log().count("Reloaded configuration")
        os.kill(self.pid(), signal.SIGHUP)
        deadline = time.monotonic() + START_TIMEOUT
        while self.log().count("Reloaded configuration") == mark:
            if time.monotonic() > deadline:
                raise DockerdError(f"dockerd did not reload within {START_TIMEOUT:.0f}s: {self.log()}")
            time.sleep(0.05)

    def restart(self) -> None:
        """Stop dockerd and start it again on the same roots (what ``systemctl restart docker`` does)."""
        self.stop(cleanup=False)
        self.start()

    def stop(self, *, cleanup: bool = True) -> None:
        """End dockerd (TERM, then KILL), and with it every process in its PID namespace."""
        process = self.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(AssertionError, FileNotFoundError, ProcessLookupError):
                os.kill(self.pid(), signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()  # unshare --kill-child: dockerd gets SIGKILL, the namespace goes with it
                process.wait(timeout=STOP_TIMEOUT)
        self.process = None
        if cleanup:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log(self) -> str:
        """dockerd's log so far (its tail, for error messages)."""
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except FileNotFoundError:
            return ""

    def __enter__(self) -> Dockerd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- commands ----------------------------------------------------------------------------------------

    def docker(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run ``docker -H unix://SOCK ARGS`` (Debian's 20.10 client) and capture its output."""
        proc = subprocess.run(
            [DOCKER, "-H", f"unix://{self.socket}", *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={"PATH": paths.FIXED_PATH, "HOME": str(self.workdir), "DOCKER_CONFIG": str(self.workdir)},
        )
        if check and proc.returncode != 0:
            raise DockerdError(f"docker {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def import_busybox(self, name: str = IMAGE) -> str:
        """``docker import`` a busybox root filesystem as ``name`` (no registry involved)."""
        archive = self.workdir / "busybox.tar"
        with tempfile.TemporaryDirectory(prefix="busybox-", dir=self.workdir) as tmp:
            rootfs = make_busybox_rootfs(Path(tmp) / "rootfs")
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w") as tar:
                tar.add(rootfs, arcname=".")
            archive.write_bytes(buffer.getvalue())
        self.docker("import", str(archive), name)
        archive.unlink()
        return name

    def runtimes(self) -> list[str]:
        """The runtimes ``docker info`` lists."""
        proc = self.docker("info", "--format", "{{range $name, $_ := .Runtimes}}{{$name}} {{end}}")
        return proc.stdout.split()

    def leftovers(self) -> list[tuple[int, str]]:
        """Every live process in the namespace but tini, dockerd and its containerd (pid, command name):
        shims and container processes."""
        children: dict[int, list[int]] = {}
        names: dict[int, str] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            name, rest = stat.split("(", 1)[1].rsplit(")", 1)
            if rest.split()[0] == "Z":
                continue  # a zombie: dead, about to be reaped
            names[int(entry.name)] = name
            children.setdefault(int(rest.split()[1]), []).append(int(entry.name))
        dockerd = self.pid()
        daemons = {dockerd, *(pid for pid in children.get(dockerd, []) if names.get(pid) == "containerd")}
        found, pending = [], list(children.get(self.init_pid(), []))
        while pending:
            pid = pending.pop()
            if pid not in daemons:
                found.append((pid, names.get(pid, "?")))
            pending += children.get(pid, [])
        return sorted(found)


def _first_child(pid: int) -> int:
    """The first child of ``pid`` (fails the test when it has none)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert children, f"process {pid} has no child"
    return int(children[0])


@contextlib.contextmanager
def running(node: Path) -> Iterator[Dockerd]:
    """Start a dockerd for ``node`` and stop it (and everything in its PID namespace) however the block ends."""
    daemon = Dockerd(node)
    try:
        yield daemon.start()
    finally:
        daemon.stop()

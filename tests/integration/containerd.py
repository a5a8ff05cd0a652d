"""Run a real containerd (Debian's 1.6) against a node tree, and take it down again, even on failure.

``Containerd(node, workdir)`` starts ``containerd`` (its config: ``/etc/containerd/config.toml``) inside a private
mount namespace (``unshare --mount``) where the node tree's ``etc/containerd``, ``usr/local`` (and
``opt/gpu-env-hook`` when there is one) are bind-mounted over the real paths, so the daemon reads exactly
what ``install --root NODE`` wrote, at the node paths written into it, and nothing on the host changes
(the mount points and ``/opt/containerd`` it had to create are removed at exit: ``remove_empty_mount_points``). Its
``--root``, ``--state`` and ``--address`` are under ``workdir``, and a directory of ``workdir`` is mounted
over ``/run/containerd`` too: the runc.v2 shim keeps runc's state (``/run/containerd/runc``) and its
sockets (``/run/containerd/s``) there whatever ``--state`` says. ``stop()`` ends the daemon, every shim
started for its address and every process below them (the containers), by pid.

``config_dump(node)`` runs ``containerd config dump`` in the same kind of namespace: the merged config
containerd would run with (imports resolved), parsed with tomllib.

``write_image_archive`` builds a one-layer busybox image (``docker save`` format) that ``ctr images import``
loads; with ``sleep`` as its command it stands in for the pause image a pod sandbox runs.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from busybox import make_busybox_rootfs

CONTAINERD = shutil.which("containerd") or "/usr/bin/containerd"
CTR = shutil.which("ctr") or "/usr/bin/ctr"
CRI_NAMESPACE = "k8s.io"
NODE_CONFIG = "/etc/containerd/config.toml"
# Node directories a daemon sees from the node tree (when the tree has them); /etc/containerd always (an
# empty one when the node has none, so the host's own config never leaks in).
NODE_BINDS = ("/etc/containerd", "/usr/local", "/opt/gpu-env-hook")
# The image the containerd tests import into the CRI namespace: the pod sandbox's "pause" image (its
# command sleeps) and the containers' image alike.
CONTAINERD_IMAGE = "localhost/gpu-env-hook-busybox:1"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
# What a namespace's mount points (``mkdir -p`` of a target the host lacks) and containerd's own "opt" plugin
# create on the file system the namespace shares with the host. Those absent before the first daemon are
# removed again when the test process ends, if they hold nothing but empty directories (never a file).
HOST_PATHS = (*NODE_BINDS, "/run/containerd", "/opt/containerd", "/var/lib/containerd")
ABSENT_BEFORE = [Path(path) for path in HOST_PATHS if not os.path.lexists(path)]


def remove_empty_mount_points(absent_before: list[Path]) -> None:
    """Remove the empty directories namespaces left at paths that were absent before (deepest first); a
    directory holding a file is kept."""
    for path in absent_before:
        if path.is_symlink() or not path.is_dir():
            continue
        below = [entry for entry in path.rglob("*") if entry.is_dir() and not entry.is_symlink()]
        for directory in [*sorted(below, key=lambda entry: -len(entry.parts)), path]:
            with contextlib.suppress(OSError):  # not empty (a file the test did not make): keep it
                directory.rmdir()


atexit.register(remove_empty_mount_points, ABSENT_BEFORE)


class ContainerdError(RuntimeError):
    """containerd did not start, or a command against it failed; the message carries its output."""


def namespace_argv(
    node: Path, workdir: Path, argv: list[str], extra: dict[str, Path] | None = None
) -> list[str]:
    """Return ``argv`` wrapped to run in a private mount namespace that sees the node tree's files at the
    node paths (``NODE_BINDS``), ``workdir/run`` as ``/run/containerd``, and each ``extra`` directory at its
    node path (a directory another program reads at a fixed path, e.g. NVIDIA's /etc/nvidia-container-runtime)."""
    empty = workdir / "empty-etc-containerd"
    run = workdir / "run"
    empty.mkdir(parents=True, exist_ok=True)
    run.mkdir(parents=True, exist_ok=True)
    binds: list[tuple[Path, str]] = []
    for target in NODE_BINDS:
        source = node / target.lstrip("/")
        if source.is_dir():
            binds.append((source, target))
        elif target == "/etc/containerd":
            binds.append((empty, target))
    binds.append((run, "/run/containerd"))
    binds += [(source, target) for target, source in (extra or {}).items()]
    return bound_argv(binds, argv)


def bound_argv(binds: list[tuple[Path, str]], argv: list[str]) -> list[str]:
    """Return ``argv`` wrapped to run in a private mount namespace where each (source, node path) of
    ``binds`` is bind-mounted (the mount point made first); the containerd and CRI-O harnesses share it."""
    script = ["set -e"]
    for source, target in binds:
        script.append(f'mkdir -p "{target}" && mount --bind "{source}" "{target}"')
    script.append('exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script), "sh", *argv]


def config_flag(config: str) -> list[str]:
    """``--config CONFIG``, or nothing for the default path: as on a node, containerd then runs with its
    defaults when the file is missing (an explicit ``--config`` to a missing file is an error)."""
    return [] if config == NODE_CONFIG else ["--config", config]


def config_dump(
    node: Path, workdir: Path, config: str = NODE_CONFIG, *, binary: str = CONTAINERD
) -> dict[str, Any]:
    """Return ``containerd config dump`` (the merged config containerd would run with) as seen on the node,
    parsed. With no file at the default path containerd runs with its defaults, and ``config dump`` refuses
    to run: ``config default`` is what it would run with then. ``binary``: another containerd (2.x)."""
    command = ["config", "dump"]
    if config == NODE_CONFIG and not (node / config.lstrip("/")).exists():
        command = ["config", "default"]
    proc = subprocess.run(
        namespace_argv(node, workdir, [binary, *config_flag(config), *command]),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        raise ContainerdError(
            f"containerd {' '.join(command)} failed ({proc.returncode}): {proc.stderr.strip()}"
        )
    dumped: dict[str, Any] = tomllib.loads(proc.stdout)
    return dumped


class Containerd:
    """One containerd daemon for one test: own root, state and socket, the node's files at node paths."""

    def __init__(
        self,
        node: Path,
        workdir: Path,
        *,
        config: str = NODE_CONFIG,
        binaries: Path | None = None,
        binds: dict[str, Path] | None = None,
    ) -> None:
        self.node = node
        # Directories seen at node paths (target: source) besides the node tree's; a mount point the host
        # lacked is removed again when the daemon stops.
        self.binds = binds or {}
        self.absent_before = [Path(target) for target in self.binds if not os.path.lexists(target)]
        self.workdir = workdir
        self.config = config
        # Another build (e.g. containerd 2.x from source): its containerd, ctr and shim, found first on PATH.
        self.binaries = binaries
        self.containerd = str(binaries / "containerd") if binaries else CONTAINERD
        self.ctr_path = str(binaries / "ctr") if binaries and (binaries / "ctr").exists() else CTR
        self.address = str(workdir / "containerd.sock")
        self.log_path = workdir / "containerd.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Containerd:
        """Start the daemon and wait until it answers on its socket (raises with its log if it does not)."""
        for name in ("root", "state"):
            (self.workdir / name).mkdir(parents=True, exist_ok=True)
        argv = [
            self.containerd,
            *config_flag(self.config),
            "--root",
            str(self.workdir / "root"),
            "--state",
            str(self.workdir / "state"),
            "--address",
            self.address,
            "--log-level",
            "info",
        ]
        env = None
        if self.binaries is not None:
            env = {**os.environ, "PATH": f"{self.binaries}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                namespace_argv(self.node, self.workdir, argv, self.binds),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ContainerdError(f"containerd exited ({self.process.returncode}): {self.log()}")
            if Path(self.address).exists() and self.ctr("version", check=False).returncode == 0:
                return self
            time.sleep(0.1)
        self.stop()
        raise ContainerdError(f"containerd did not answer within {START_TIMEOUT:.0f}s: {self.log()}")

    def log(self) -> str:
        """The daemon's log so far (its tail, for error messages)."""
        return log_tail(self.log_path)

    def ctr(
        self, *args: str, namespace: str = CRI_NAMESPACE, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run ``ctr --address SOCK -n NAMESPACE ARGS`` and capture its output."""
        argv = [self.ctr_path, "--address", self.address, "--namespace", namespace, *args]
        proc = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise ContainerdError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def plugin_status(self, plugin_id: str) -> dict[str, str]:
        """Return each plugin type with this id mapped to its status (``ok``, ``error``, ``skip``)."""
        found: dict[str, str] = {}
        for line in self.ctr("plugins", "ls").stdout.splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 4 and fields[1] == plugin_id:
                found[fields[0]] = fields[-1]
        return found

    def import_image(self, archive: Path) -> None:
        """Load an image archive into the CRI namespace (``ctr images import``), unpacked for the snapshotter."""
        self.ctr("images", "import", str(archive), timeout=120)

    def shim_pids(self) -> list[int]:
        """The pids of the shims this daemon started (their command line names its socket)."""
        found = []
        for pid, argv in _processes():
            if len(argv) > 0 and "containerd-shim" in Path(argv[0]).name and self.address in argv:
                found.append(pid)
        return found

    def stop(self) -> None:
        """Stop the daemon (TERM, then KILL), then kill every shim of its address and their descendants."""
        stop_daemon(self.process, self.shim_pids)
        for path in self.absent_before:
            with contextlib.suppress(OSError):  # not empty (a file the test did not make): keep it
                path.rmdir()

    def __enter__(self) -> Containerd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def running(
    node: Path,
    workdir: Path,
    *,
    config: str = NODE_CONFIG,
    binaries: Path | None = None,
    binds: dict[str, Path] | None = None,
) -> Iterator[Containerd]:
    """Start a containerd for ``node`` and stop it (and its shims) when the block ends, however it ends."""
    daemon = Containerd(node, workdir, config=config, binaries=binaries, binds=binds)
    try:
        yield daemon.start()
    finally:
        daemon.stop()


def log_tail(path: Path) -> str:
    """The tail of a daemon's log so far, for error messages ("" before it has one)."""
    try:
        return path.read_text(errors="replace")[-4000:]
    except FileNotFoundError:
        return ""


def stop_daemon(process: subprocess.Popen[bytes] | None, helpers: Callable[[], list[int]]) -> None:
    """Stop a daemon (TERM, then KILL after ``STOP_TIMEOUT``), then kill every helper process of it (its
    shims, conmons: ``helpers`` lists their pids, asked before and after) and every process below them."""
    before = helpers()
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT)
    for pid in [*before, *helpers()]:
        _kill_tree(pid)


def _processes() -> Iterator[tuple[int, list[str]]]:
    """Yield (pid, argv) of every process that is still there."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        yield int(entry.name), [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _children() -> dict[int, list[int]]:
    """Map each pid to its children's pids."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(parent, []).append(int(entry.name))
    return tree


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it (stopped first so none can fork away), then reap."""
    tree = _children()
    order, pending = [], [pid]
    while pending:
        current = pending.pop()
        order.append(current)
        pending.extend(tree.get(current, []))
    for current in order:
        with contextlib.suppress(ProcessLookupError):
            os.kill(current, signal.SIGSTOP)
    for current in order:
        with contextlib.suppress(ProcessLookupError):
            os.kill(current, signal.SIGKILL)
            os.kill(current, signal.SIGCONT)


# --- images ----------------------------------------------------------------------------------------------


def _layer_bytes() -> bytes:
    """A tar of a fresh busybox root filesystem, owned by root, with fixed mtimes."""

    def reset(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = 0
        return info

    buffer = io.BytesIO()
    with tempfile.TemporaryDirectory(prefix="busybox-layer-") as tmp:
        rootfs = make_busybox_rootfs(Path(tmp) / "rootfs")
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(rootfs, arcname=".", filter=reset)
    return buffer.getvalue()


def write_image_archive(dest: Path, name: str, cmd: list[str]) -> Path:
    """Write a ``docker save``-format archive of a busybox image called ``name`` whose command is ``cmd``."""
    layer = _layer_bytes()
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": cmd, "Env": ["PATH=/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "gpu-env-hook tests"}],
    }
    config_bytes = json.dumps(config).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [name], "Layers": ["layer.tar"]}]
    members = {
        "layer.tar": layer,
        config_name: config_bytes,
        "manifest.json": json.dumps(manifest).encode(),
    }
    with tarfile.open(dest, "w") as tar:
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return dest

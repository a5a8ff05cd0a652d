"""Run a real CRI-O (a build from its source, ``GPU_ENV_HOOK_CRIO``) against a node tree, and take it down
again, even on failure.

``Crio(node, workdir)`` starts ``crio`` inside a private mount namespace (``unshare --mount``) where the node
tree's ``etc/crio`` (its ``crio.conf`` and ``crio.conf.d``, read at their default paths as on a node),
``usr/share/containers/oci/hooks.d``, ``etc/cdi``, ``usr/local`` and ``opt/gpu-env-hook`` are bind-mounted
over the real paths (an empty directory where the tree has none of the first three, so nothing of the host's
leaks in), so the daemon reads exactly what ``install --root NODE`` wrote, at the node paths written into
it. Everything CRI-O keeps is under ``workdir``, given as flags (which win over the config files): storage
(``vfs``), run root, socket, NRI plugin directories, exits, logs, version and shutdown files, namespaces;
the NRI socket stays where the node's config puts it (``/var/run/nri/nri.sock`` by default), in a directory
of ``workdir`` mounted over ``/var/run/nri``. The cgroup manager is cgroupfs (PID 1 is not systemd here),
conmon is Debian's, and pods run in the node's network namespace (no CNI). ``stop()`` ends the daemon, every conmon it started and every process
below them (the containers), by pid.

The node's config must name a runtime that exists: ``node_config(workdir)`` is a minimal one (runc, the
default runtime of this machine, with its state under ``workdir``; NRI as CRI-O has it by default). The image
comes from ``containerd.write_image_archive``, loaded into CRI-O's storage with podman (``import_image``): CRI-O
has no import of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from containerd import (
    CONTAINERD_IMAGE,
    _processes,
    bound_argv,
    log_tail,
    remove_empty_mount_points,
    stop_daemon,
)

CRIO_IMAGE = CONTAINERD_IMAGE
CONMON = shutil.which("conmon") or "/usr/bin/conmon"
RUNC = shutil.which("runc") or "/usr/sbin/runc"
# Node directories the daemon sees from the node tree, and the first three as empty directories when the
# tree has none (so the host's never count).
NODE_BINDS = (
    "/etc/crio",
    "/usr/share/containers/oci/hooks.d",
    "/etc/cdi",
    "/usr/local",
    "/opt/gpu-env-hook",
)
ALWAYS_BOUND = NODE_BINDS[:3]
# CRI-O's NRI socket directory (``nri_listen``'s default), a directory of the workdir in the namespace: a
# plugin there connects at the node path (``nsenter_argv``), one outside at ``Crio.nri_socket``.
NRI_DIR = "/var/run/nri"
# Node paths a test may bind besides (``Crio(binds=...)``): the hook's configuration directory.
MORE_BINDS = ("/etc/nvidia-container-runtime",)
START_TIMEOUT = 60.0
# Mount points the namespaces create on the host's file system (absent before the first daemon): removed
# again when the test process ends, if they hold nothing but empty directories.
# The topmost absent directory of each (``mkdir -p`` creates its parents too). CRI-O's cgroupfs parent for
# pods (``/crio`` under each controller) is removed the same way when it was not there before.
ABSENT_BEFORE = [
    next(path for path in [*reversed(Path(target).parents), Path(target)] if not os.path.lexists(path))
    for target in (*NODE_BINDS, NRI_DIR, *MORE_BINDS)
    if not os.path.lexists(target)
]
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUPS_BEFORE = {path for path in [*CGROUP_ROOT.glob("*/crio"), CGROUP_ROOT / "crio"] if path.exists()}
atexit.register(remove_empty_mount_points, ABSENT_BEFORE)


@atexit.register
def remove_pod_cgroups() -> None:
    """Remove the empty ``crio`` cgroups the daemons created (a cgroup with a process in it stays), as the
    empty mount points are."""
    created = [*CGROUP_ROOT.glob("*/crio"), CGROUP_ROOT / "crio"]
    remove_empty_mount_points([path for path in created if path not in CGROUPS_BEFORE])


class CrioError(RuntimeError):
    """CRI-O did not start, or a command against it failed; the message carries its output."""


def node_config(workdir: Path) -> str:
    """A minimal ``crio.conf`` for this machine: runc as the default runtime (crun refuses hybrid cgroups
    here), its state under ``workdir``; NRI left as CRI-O 1.36 has it (on)."""
    return (
        "[crio.runtime]\n"
        'default_runtime = "runc"\n'
        "[crio.runtime.runtimes.runc]\n"
        f'runtime_path = "{RUNC}"\n'
        'runtime_type = "oci"\n'
        f'runtime_root = "{workdir / "runc"}"\n'
        'monitor_path = "' + CONMON + '"\n'
    )


def namespace_argv(
    node: Path,
    workdir: Path,
    argv: list[str],
    *,
    nri_dir: Path | None = None,
    binds_more: dict[str, Path] | None = None,
) -> list[str]:
    """Return ``argv`` wrapped to run in a private mount namespace that sees the node tree's files at the
    node paths (``NODE_BINDS``, and ``binds_more``: node path -> directory), and ``nri_dir`` (else a
    directory of ``workdir``) as ``/var/run/nri``."""
    binds: list[tuple[Path, str]] = [(source, target) for target, source in (binds_more or {}).items()]
    for target in NODE_BINDS:
        source = node / target.lstrip("/")
        if source.is_dir():
            binds.append((source, target))
        elif target in ALWAYS_BOUND:
            empty = workdir / "empty" / target.strip("/").replace("/", "-")
            empty.mkdir(parents=True, exist_ok=True)
            binds.append((empty, target))
    nri = nri_dir or workdir / "nri"
    nri.mkdir(parents=True, exist_ok=True)
    binds.append((nri, NRI_DIR))
    return bound_argv(binds, argv)


def scratch_flags(workdir: Path) -> list[str]:
    """The flags that keep everything CRI-O writes under ``workdir`` (they win over the config files)."""
    run = workdir / "run"
    return [
        "--root", str(workdir / "storage"),
        "--runroot", str(run / "storage"),
        "--storage-driver", "vfs",
        "--listen", str(workdir / "crio.sock"),
        "--cgroup-manager", "cgroupfs",
        "--conmon-cgroup", "pod",
        "--conmon", CONMON,
        "--pinns-path", str(Path(crio_binary()).parent / "pinns"),
        "--log-dir", str(workdir / "pods"),
        "--container-exits-dir", str(run / "exits"),
        "--container-attach-socket-dir", str(run),
        "--version-file", str(run / "version"),
        "--version-file-persist", str(workdir / "version"),
        "--clean-shutdown-file", str(workdir / "clean.shutdown"),
        "--namespaces-dir", str(run / "ns"),
        "--nri-plugin-dir", str(workdir / "nri-plugins"),
        "--nri-plugin-config-dir", str(workdir / "nri-conf.d"),
        "--pause-image", CRIO_IMAGE,
        "--signature-policy", str(workdir / "policy.json"),
        "--cni-config-dir", str(workdir / "cni"),
        "--stream-port", "0",
    ]  # fmt: skip


def crio_binary() -> str:
    """The crio of ``GPU_ENV_HOOK_CRIO`` (``tests/engine_builds.py``)."""
    from engine_builds import crio_dir

    directory = crio_dir()
    if directory is None:
        raise CrioError("GPU_ENV_HOOK_CRIO names no CRI-O build")
    return str(directory / "crio")


def crio_config(node: Path, workdir: Path) -> subprocess.CompletedProcess[str]:
    """Run ``crio config`` (the configuration CRI-O would run with, as TOML) on the node's files; a config
    CRI-O cannot load fails here as it would fail CRI-O's start."""
    workdir.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        namespace_argv(node, workdir, [crio_binary(), *scratch_flags(workdir), "config"]),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def config_value(text: str, section: str, key: str) -> str | None:
    """The value ``crio config`` printed for ``key`` in ``[section]``, as written (``true``, ``"2s"``): it
    prints a value equal to CRI-O's default commented out (``# key = value``), so both forms count."""
    current = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            current = stripped[1:-1]
            continue
        name, sep, value = stripped.removeprefix("# ").partition(" = ")
        if current == section and sep and name == key:
            return value
    return None


class Crio:
    """One CRI-O daemon for one test: its own storage, run root and sockets, the node's files at node paths.

    ``nri_dir``: the directory mounted over ``/var/run/nri`` (default: one of ``workdir``), e.g. the node
    root's, where a plugin container with the manifest's mounts finds the socket; ``binds``: more node paths
    (of ``MORE_BINDS``) -> the directories they show."""

    def __init__(
        self,
        node: Path,
        workdir: Path,
        *,
        extra: list[str] | None = None,
        nri_dir: Path | None = None,
        binds: dict[str, Path] | None = None,
    ) -> None:
        self.node = node
        self.workdir = workdir
        self.extra = extra or []
        self.nri_dir = nri_dir or workdir / "nri"
        self.binds = binds or {}
        self.address = str(workdir / "crio.sock")
        # The NRI socket at the node path (CRI-O's default, or the node config's nri_listen beneath it), as
        # a process outside the namespace reaches it.
        self.nri_socket = self.nri_dir / "nri.sock"
        self.log_path = workdir / "crio.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Crio:
        """Start the daemon and wait until it answers CRI Version (raises with its log if it does not)."""
        from cri import CriClient

        self.workdir.mkdir(parents=True, exist_ok=True)
        for name in ("pods", "cni", "nri-plugins", "nri-conf.d"):
            (self.workdir / name).mkdir(exist_ok=True)
        (self.workdir / "policy.json").write_text('{"default": [{"type": "insecureAcceptAnything"}]}\n')
        argv = [crio_binary(), *scratch_flags(self.workdir), "--log-level", "info", *self.extra]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                namespace_argv(self.node, self.workdir, argv, nri_dir=self.nri_dir, binds_more=self.binds),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise CrioError(f"crio exited ({self.process.returncode}): {self.log()}")
            if Path(self.address).exists() and _answers(CriClient(self.address)):
                return self
            time.sleep(0.2)
        self.stop()
        raise CrioError(f"crio did not answer within {START_TIMEOUT:.0f}s: {self.log()}")

    def log(self) -> str:
        """The daemon's log so far (its tail, for error messages)."""
        return log_tail(self.log_path)

    def import_image(self, archive: Path) -> None:
        """Load an image archive (``docker save`` format) into CRI-O's storage with podman, which shares its
        storage library: the same root, run root and driver."""
        storage = self.workdir / "podman-storage.conf"
        storage.write_text(
            f'[storage]\ndriver = "vfs"\ngraphroot = "{self.workdir / "storage"}"\n'
            f'runroot = "{self.workdir / "run" / "storage"}"\n'
        )
        argv = [
            "podman", "--tmpdir", str(self.workdir / "podman-tmp"), "--events-backend", "none",
            "load", "-q", "-i", str(archive),
        ]  # fmt: skip
        env = {**os.environ, "CONTAINERS_CONF": "/dev/null", "CONTAINERS_STORAGE_CONF": str(storage)}
        proc = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False, env=env
        )
        if proc.returncode != 0:
            raise CrioError(f"podman load failed ({proc.returncode}): {proc.stderr.strip()}")

    def nsenter_argv(self, argv: list[str]) -> list[str]:
        """``argv`` to run in the daemon's mount namespace, where the node's files are at node paths (as a
        systemd unit on the node runs)."""
        assert self.process is not None
        return ["nsenter", f"--mount=/proc/{self.process.pid}/ns/mnt", "--", *argv]

    def conmon_pids(self) -> list[int]:
        """The pids of the conmons this daemon started (their command line names its exits directory)."""
        exits = str(self.workdir / "run" / "exits")
        return [
            pid
            for pid, argv in _processes()
            if argv and Path(argv[0]).name == "conmon" and any(exits in arg for arg in argv)
        ]

    def stop(self) -> None:
        """Stop the daemon (TERM, then KILL), then kill every conmon of it and what runs below them."""
        stop_daemon(self.process, self.conmon_pids)
        self.process = None

    def __enter__(self) -> Crio:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _answers(client: Any) -> bool:
    """Tell whether CRI-O answers CRI Version yet (and close the client)."""
    import grpc

    try:
        client.version()
    except grpc.RpcError:
        return False
    finally:
        client.close()
    return True


@contextlib.contextmanager
def running(
    node: Path,
    workdir: Path,
    *,
    extra: list[str] | None = None,
    nri_dir: Path | None = None,
    binds: dict[str, Path] | None = None,
) -> Iterator[Crio]:
    """Start a CRI-O for ``node`` and stop it (and its conmons, containers) when the block ends; ``nri_dir``
    (its NRI socket directory) and ``binds`` as for :class:`Crio`."""
    daemon = Crio(node, workdir, extra=extra, nri_dir=nri_dir, binds=binds)
    try:
        yield daemon.start()
    finally:
        daemon.stop()

"""Run rootful podman with the test configuration kept in tests/integration/podman/.

Why the configuration is needed on the test VM (Debian 12, podman 4.3.1, root,
no systemd as PID 1, hybrid cgroups v1, no CAP_SYS_RESOURCE) is written beside
each setting in podman/containers.conf and podman/storage.conf. Podman is
daemonless: no service has to be started. Pass ``--runtime /path/to/wrapper`` or
``--hooks-dir DIR`` as ordinary arguments; note that podman silently ignores a
``--hooks-dir`` that does not exist.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path

from busybox import make_busybox_rootfs

CONFIG_DIR = Path(__file__).resolve().parent / "podman"
CONFIG_ENV = {
    "CONTAINERS_CONF": str(CONFIG_DIR / "containers.conf"),
    "CONTAINERS_STORAGE_CONF": str(CONFIG_DIR / "storage.conf"),
    "CONTAINERS_REGISTRIES_CONF": str(CONFIG_DIR / "registries.conf"),
}


class PodmanError(subprocess.CalledProcessError):
    """A podman command failed; its message carries podman's stderr."""

    def __str__(self) -> str:
        """Return the usual message followed by the captured stderr."""
        return f"{super().__str__()}\nstderr:\n{self.stderr}"


def podman_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return the environment podman runs with: ours, the test config, then extra."""
    env = dict(os.environ)
    env.update(CONFIG_ENV)
    if extra:
        env.update(extra)
    return env


def podman(
    *args: str,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``podman ARGS`` with the test configuration and capture its output."""
    cmd = ["podman", *args]
    proc = subprocess.run(
        cmd,
        env=podman_env(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise PodmanError(proc.returncode, cmd, proc.stdout, proc.stderr)
    return proc


def _reset_owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Make a tar member root-owned with a fixed mtime so the layer is reproducible."""
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    return info


def write_busybox_tarball(dest: Path) -> Path:
    """Write a tarball of a fresh busybox root filesystem to dest and return dest."""
    with tempfile.TemporaryDirectory(prefix="busybox-rootfs-") as tmp:
        rootfs = make_busybox_rootfs(Path(tmp) / "rootfs")
        with tarfile.open(dest, "w") as tar:
            tar.add(rootfs, arcname=".", filter=_reset_owner)
    return dest


def image_id(name: str) -> str | None:
    """Return the full id of the local image name, or None if there is none."""
    proc = podman("image", "inspect", "--format", "{{.Id}}", name, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def import_busybox_image(name: str) -> str:
    """Import a busybox root filesystem as local image name (once) and return its id."""
    existing = image_id(name)
    if existing:
        return existing
    with tempfile.TemporaryDirectory(prefix="busybox-image-") as tmp:
        tarball = write_busybox_tarball(Path(tmp) / "rootfs.tar")
        podman("import", "--quiet", str(tarball), name)
    found = image_id(name)
    if not found:
        raise RuntimeError(f"podman import did not create image {name!r}")
    return found

"""podman 4.3.1 with scratch CDI spec directories, and the config.json it generates.

podman 4.3.1 reads CDI specs only from the fixed ``/etc/cdi`` and ``/var/run/cdi`` (containers.conf's
``cdi_spec_dirs`` came later), and resolves ``--device vendor/class=name`` both at ``create`` and at
``init``. So both run in a private mount namespace (``unshare -m``) where a scratch directory is bound at
each: ``/etc`` gets an overlay whose upper layer holds the mount point (the host's /etc is not touched);
``/run/cdi`` is created empty on the host when missing (nothing else can be bound there without changing
``/run``, which podman's run root lives in) and removed again afterwards if still empty.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from podman import PodmanError, podman, podman_env

RUN_CDI = Path("/run/cdi")
STORAGE = Path("/var/lib/gpu-env-hook-tests/storage")


@contextlib.contextmanager
def run_cdi_mount_point() -> Iterator[None]:
    """Make sure /run/cdi exists as a mount point for the duration; remove it after if we made it."""
    made = not RUN_CDI.exists()
    if made:
        RUN_CDI.mkdir()
    try:
        yield
    finally:
        if made:
            with contextlib.suppress(OSError):
                RUN_CDI.rmdir()


def podman_with_cdi(
    etc: Path, run: Path, scratch: Path, *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``podman ARGS`` in a mount namespace where /etc/cdi is ``etc`` and /var/run/cdi is ``run``."""
    upper, work = scratch / "etc-upper", scratch / "etc-work"
    for directory in (etc, run, upper, work):
        directory.mkdir(parents=True, exist_ok=True)
    overlay = f"lowerdir=/etc,upperdir={upper},workdir={work}"
    script = "\n".join(
        [
            "set -e",
            f"mount -t overlay overlay -o {shlex.quote(overlay)} /etc",
            "mkdir -p /etc/cdi",
            f"mount --bind {shlex.quote(str(etc))} /etc/cdi",
            f"mount --bind {shlex.quote(str(run))} /run/cdi",
            'exec podman "$@"',
        ]
    )
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *args]
    with run_cdi_mount_point():
        proc = subprocess.run(
            cmd,
            env=podman_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    if check and proc.returncode != 0:
        raise PodmanError(proc.returncode, cmd, proc.stdout, proc.stderr)
    return proc


def created_config(name: str) -> dict[str, Any]:
    """The config.json podman generated for an initialised container."""
    cid = podman("inspect", "--format", "{{.Id}}", name).stdout.strip()
    document: dict[str, Any] = json.loads(
        (STORAGE / "overlay-containers" / cid / "userdata" / "config.json").read_text()
    )
    return normalize_ids(document, cid)


def normalize_ids(document: dict[str, Any], cid: str) -> dict[str, Any]:
    """Replace what differs between two otherwise equal containers: id, hostname, creation time, rootfs."""
    text = json.dumps(document).replace(cid, "<id>").replace(cid[:12], "<id12>")
    out: dict[str, Any] = json.loads(text)
    out["root"]["path"] = "<rootfs>"
    out.get("annotations", {}).pop("io.kubernetes.cri-o.Created", None)
    return out


def remove(*names: str) -> None:
    """Remove containers by name, whatever their state."""
    podman("rm", "-f", "--ignore", *names, check=False)

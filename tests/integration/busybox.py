"""Build busybox root filesystems and runc bundles, and run them, for integration tests.

Facts about the test machine that shaped this module (Debian 12, runc 1.1.5, root,
no systemd as PID 1, hybrid cgroups v1 with cgroup2 on /sys/fs/cgroup/unified):
the unmodified ``runc spec`` config runs as is (no ``--no-pivot``, no
``--systemd-cgroup``); runc runs prestart hooks with cwd = the bundle directory,
the OCI state JSON on stdin and *only* the hook's own ``env`` list as environment.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "env", "cat", "echo", "sleep", "true", "false", "ls")
ROOTFS_DIRS = ("proc", "dev", "sys", "tmp", "etc")


def make_busybox_rootfs(dest: Path) -> Path:
    """Populate dest with static busybox, applet symlinks and mount-point dirs."""
    bindir = dest / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, bindir / "busybox")
    for applet in APPLETS:
        link = bindir / applet
        if not link.is_symlink():
            link.symlink_to("busybox")
    for name in ROOTFS_DIRS:
        (dest / name).mkdir(exist_ok=True)
    (dest / "tmp").chmod(0o1777)
    return dest


@functools.cache
def _runc_spec_text() -> str:
    """Return the config.json that ``runc spec`` writes, generated once per process."""
    with tempfile.TemporaryDirectory(prefix="runc-spec-") as tmp:
        subprocess.run(["runc", "spec"], cwd=tmp, check=True, capture_output=True)
        return (Path(tmp) / "config.json").read_text(encoding="utf-8")


def base_spec() -> dict[str, Any]:
    """Return a fresh copy of runc's default spec adjusted for non-interactive tests."""
    spec: dict[str, Any] = json.loads(_runc_spec_text())
    spec["process"]["terminal"] = False
    spec["root"]["readonly"] = False
    return spec


def make_runc_bundle(
    dir: Path,  # noqa: A002  (name fixed by the agreed helper signature)
    *,
    args: list[str],
    env: list[str],
    prestart: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
) -> Path:
    """Write dir/config.json (and a busybox dir/rootfs if missing) and return dir."""
    dir.mkdir(parents=True, exist_ok=True)
    if not (dir / "rootfs").exists():
        make_busybox_rootfs(dir / "rootfs")
    spec = base_spec()
    spec["process"]["args"] = list(args)
    spec["process"]["env"] = list(env)
    if prestart is not None:
        spec["hooks"] = {"prestart": list(prestart)}
    if annotations is not None:
        spec["annotations"] = dict(annotations)
    text = json.dumps(spec, indent=2) + "\n"
    (dir / "config.json").write_text(text, encoding="utf-8")
    return dir


def unique_id(prefix: str = "t") -> str:
    """Return a container id unlikely to clash with a concurrent test's."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def _delete(root: Path, cid: str) -> None:
    """Force-delete container cid under runc state root, ignoring 'does not exist'."""
    subprocess.run(
        ["runc", "--root", str(root), "delete", "-f", cid],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
        timeout=30,
    )


def run_container(
    bundle: Path,
    cid: str,
    *,
    root: Path | None = None,
    timeout: float = 30,
) -> subprocess.CompletedProcess[str]:
    """Run bundle as cid with ``runc run``, capture output, always delete it."""
    own_root = root is None
    state = Path(tempfile.mkdtemp(prefix="runc-root-")) if root is None else root
    cmd = ["runc", "--root", str(state), "run", "--bundle", str(bundle), cid]
    try:
        return subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    finally:
        _delete(state, cid)
        if own_root:
            shutil.rmtree(state, ignore_errors=True)

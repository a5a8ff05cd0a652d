"""README's podman quick start, run as written against the real podman and runc, with the recording stand-in.

The lines write node paths (/usr/local, /opt, /etc/tmpfiles.d, /usr/share/containers/oci, /var/lib,
/var/log, /run): they run in a private mount namespace where each of those is a fresh tmpfs (what podman
itself needs from them — its test storage under /var/lib and /run, /usr/share/containers — is bound back in),
so nothing on the host changes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from podman import import_busybox_image, podman_env

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("podman"), reason="needs root and podman"),
]
IMAGE = "localhost/gpu-env-hook-busybox"
# Node directories the quick start writes into: (directory, entries of the host's kept visible in it).
FRESH = (
    ("/usr/local", ()),
    ("/opt", ()),
    ("/etc/tmpfiles.d", ()),
    ("/var/log", ()),
    ("/var/lib", ("gpu-env-hook-tests",)),
    ("/run", ("gpu-env-hook-tests", "lock")),
)


def readme_block() -> str:
    """The sh block of README.md's podman quick start."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("### With podman, on this machine", 1)[1]
    match = re.search(r"^```sh\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert match is not None
    return match.group(1)


def namespace_script(work: Path) -> str:
    """sh that gives each FRESH directory a tmpfs (keeping the listed host entries) and a copy of
    /usr/share/containers (podman's seccomp profile) whose oci/ is empty, then execs its arguments."""
    lines = ["set -e"]
    for index, (directory, keep) in enumerate(FRESH):
        original = work / f"orig{index}"
        original.mkdir()
        lines.append(f'mount --bind "{directory}" "{original}"')
        lines.append(f'mount -t tmpfs -o mode=0755 tmpfs "{directory}"')
        lines += [
            f'mkdir "{directory}/{name}" && mount --bind "{original}/{name}" "{directory}/{name}"'
            for name in keep
            if (Path(directory) / name).exists()
        ]
    share = work / "share-containers"
    shutil.copytree("/usr/share/containers", share, symlinks=True)
    lines.append(f'mount --bind "{share}" /usr/share/containers')
    lines.append('exec "$@"')
    return "\n".join(lines)


def test_readme_podman_quick_start_runs_as_written(tmp_path: Path) -> None:
    """The container prints the env file's USER_CUSTOM_ENV, the stand-in was asked for --device=0, and the
    last line (uninstall) succeeds."""
    import_busybox_image(IMAGE)
    script = readme_block()
    work = tmp_path / "ns"
    work.mkdir()
    env = podman_env(
        {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "IMAGE": IMAGE,
        }
    )
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", namespace_script(work), "sh"]
    proc = subprocess.run(
        [*argv, "bash", "-e", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "USER_CUSTOM_ENV=hello" in proc.stdout.splitlines()
    assert "--device=0" in proc.stdout.splitlines()
    assert "removed" in proc.stdout

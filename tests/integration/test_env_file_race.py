"""One read of the env file per container: under a device plugin rewriting the file while containers start,
the container's process env and the GPUs the cli is asked for always come from the same version.

A writer process atomically alternates two versions as fast as it can (different variables, different
devices); containers run one after another through the shim in front of real runc. Each prints the
variable that names its version; the recording stand-in cli says which device it was asked to mount.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from busybox import make_runc_bundle, unique_id
from runc_hooks import load_record, write_config
from test_shim_runc import RUNC

pytestmark = pytest.mark.integration

CONTAINERS = 40
PODMAN_CONTAINERS = 15
VERSIONS = {"one": "0", "two": "1"}  # the version's name -> its NVIDIA_VISIBLE_DEVICES
_WRITER = """
import os, sys
from hook.util.atomicwrite import write_atomic
path, stop = sys.argv[1], sys.argv[2]
versions = [b"VERSION=one\\nNVIDIA_VISIBLE_DEVICES=0\\n", b"VERSION=two\\nNVIDIA_VISIBLE_DEVICES=1\\n"]
count = 0
while not os.path.exists(stop):
    write_atomic(path, versions[count % 2], mode=0o644)
    count += 1
print(count)
"""


@pytest.fixture
def racing_writer(tmp_path: Path) -> Iterator[Path]:
    """An env file rewritten without pause (version one, two, one, ...) until the test ends."""
    env_dir = tmp_path / "nvidia-env"
    env_dir.mkdir()
    env_file = env_dir / "race.env"
    stop = tmp_path / "stop"
    with subprocess.Popen(
        [sys.executable, "-I", "-c", _WRITER, str(env_file), str(stop)], stdout=subprocess.PIPE, text=True
    ) as writer:
        try:
            while not env_file.exists():
                assert writer.poll() is None, "the writer died"
            yield env_file
        finally:
            stop.touch()
            out, _ = writer.communicate(timeout=60)
            assert writer.returncode == 0
            assert int(out) > CONTAINERS  # it really rewrote the file while the containers started


def test_process_env_and_devices_come_from_one_version(tmp_path: Path, racing_writer: Path) -> None:
    """For every container: the VERSION it prints and the --device the cli got belong to the same version."""
    record = tmp_path / "record.json"
    config = write_config(tmp_path / "config.toml", record=record, env_dirs=[racing_writer.parent])
    root = tmp_path / "runc-root"
    bundle = make_runc_bundle(tmp_path / "bundle", args=["sh", "-c", "echo $VERSION"], env=["PATH=/bin"])
    pristine = (
        (bundle / "config.json")
        .read_text()
        .replace('"PATH=/bin"', f'"PATH=/bin", "NVIDIA_ENV_FROM_FILE={racing_writer}"')
    )
    seen: list[tuple[str, str]] = []
    for _ in range(CONTAINERS):
        (bundle / "config.json").write_text(pristine)
        record.unlink(missing_ok=True)
        cid = unique_id("race")
        try:
            result = subprocess.run(
                [
                    sys.executable,
                    "-I",
                    "-m",
                    "hook.stages.shim",
                    "--root",
                    str(root),
                    "run",
                    "--bundle",
                    str(bundle),
                    cid,
                ],
                env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(config)},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        finally:
            subprocess.run(
                [RUNC, "--root", str(root), "delete", "--force", cid], capture_output=True, check=False
            )
        assert result.returncode == 0, result.stderr
        cli = load_record(record)
        assert cli is not None, result.stderr
        devices = [arg.removeprefix("--device=") for arg in cli["argv"] if arg.startswith("--device=")]
        seen.append((result.stdout.strip(), ",".join(devices)))
    mismatched = [pair for pair in seen if VERSIONS.get(pair[0]) != pair[1]]
    assert mismatched == [], (
        f"{len(mismatched)} of {CONTAINERS} containers mixed two versions: {mismatched[:5]}"
    )
    assert {version for version, _ in seen} == set(VERSIONS)  # both versions were really met


def test_podman_precreate_one_version(tmp_path: Path, racing_writer: Path) -> None:
    """podman with the precreate and prestart hooks from oci-hooks.d: precreate merges the file and hands its
    decision to our prestart hook, so the container and its GPU come from one version here too."""
    from podman import import_busybox_image, podman
    from test_podman import IMAGE, Setup

    import_busybox_image(IMAGE)
    setup = Setup(tmp_path)
    setup.config = write_config(
        tmp_path / "config.toml", record=setup.record, env_dirs=[racing_writer.parent]
    )
    setup.write_hook("gpu-env-hook-precreate.json", "precreate")
    setup.write_hook("gpu-env-hook.json", "prestart")
    seen: list[tuple[str, str]] = []
    for _ in range(PODMAN_CONTAINERS):
        setup.record.unlink(missing_ok=True)
        proc = podman(
            "run", "--rm", "--name", unique_id("race-podman"), "--hooks-dir", str(setup.hooks_dir),
            "-e", f"NVIDIA_ENV_FROM_FILE={racing_writer}", IMAGE, "sh", "-c", "echo $VERSION",
        )  # fmt: skip
        cli = load_record(setup.record)
        assert cli is not None, proc.stderr
        devices = [arg.removeprefix("--device=") for arg in cli["argv"] if arg.startswith("--device=")]
        seen.append((proc.stdout.strip(), ",".join(devices)))
    mismatched = [pair for pair in seen if VERSIONS.get(pair[0]) != pair[1]]
    assert mismatched == [], f"{len(mismatched)} of {PODMAN_CONTAINERS} mixed two versions: {mismatched[:5]}"

"""``validate config`` on what real engines write: ``runc spec``, ``runc spec --rootless`` and the config.json
podman generates for a container. Each is valid OCI and one the hook can act on."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from podman import import_busybox_image, podman

from hook.commands.cli import run_cli

pytestmark = pytest.mark.integration

IMAGE = "localhost/gpu-env-hook-busybox"


def validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run ``validate config PATH``; return the exit status and stdout."""
    code = run_cli(["validate", "config", str(path)], config=None)
    return code, capsys.readouterr().out


@pytest.mark.parametrize(
    "args", [pytest.param([], id="runc-spec"), pytest.param(["--rootless"], id="rootless")]
)
def test_runc_spec(args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The config runc writes for a new bundle is valid OCI and the hook can act on it."""
    subprocess.run(["runc", "spec", *args], cwd=tmp_path, check=True, timeout=30)
    assert validate(tmp_path, capsys) == (0, f"✓ {tmp_path}: valid OCI runtime config (runtime-spec 1.3)\n")


def test_podman_generated_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The config.json podman writes into a container's bundle (after ``podman init``) passes both checks."""
    import_busybox_image(IMAGE)
    name = f"gpu-env-hook-validate-{uuid.uuid4().hex[:12]}"
    try:
        podman("create", "--name", name, "--net=none", "-e", "NVIDIA_VISIBLE_DEVICES=all", IMAGE, "true")
        podman("init", name)
        inspected = json.loads(podman("inspect", name).stdout)[0]
        config = Path(inspected["OCIConfigPath"])
        copy = tmp_path / "config.json"
        copy.write_bytes(config.read_bytes())
    finally:
        podman("rm", "--force", "--ignore", name, check=False)
    document = json.loads(copy.read_text())
    assert "NVIDIA_VISIBLE_DEVICES=all" in document["process"]["env"]
    assert validate(copy, capsys) == (0, f"✓ {copy}: valid OCI runtime config (runtime-spec 1.3)\n")

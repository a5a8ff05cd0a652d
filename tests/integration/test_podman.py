"""Rootful podman with a local busybox image: the env file reaches the container through the runtime shim
(``--runtime``) or through the precreate hook (``--hooks-dir``), and a refused file stops the container."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from busybox import unique_id
from podman import import_busybox_image, podman
from runc_hooks import HOOK_ENV, load_record, write_config

pytestmark = pytest.mark.integration

MakeEnvFile = Callable[..., Path]
IMAGE = "localhost/gpu-env-hook-busybox"
ENV_FILE = "# written by the device plugin\nNVIDIA_VISIBLE_DEVICES=0,1\nUSER_CUSTOM_ENV=hello\n"


@pytest.fixture(scope="module")
def image() -> str:
    """The busybox image, imported from a local rootfs tarball once per module."""
    import_busybox_image(IMAGE)
    return IMAGE


class Setup:
    """One test's config.toml, the stand-in's record, and the shim wrapper podman executes by path."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.record = tmp_path / "cli-record.json"
        self.config = write_config(
            tmp_path / "config.toml", record=self.record, env_dirs=[tmp_path / "nvidia-env"]
        )
        self.shim = tmp_path / "gpu-env-runtime"
        self.shim.write_text(
            "#!/bin/sh\n"
            f"NVIDIA_CTK_CONFIG_FILE_PATH='{self.config}'\n"
            "export NVIDIA_CTK_CONFIG_FILE_PATH\n"
            f'exec {sys.executable} -I -m hook.stages.shim "$@"\n'
        )
        self.shim.chmod(0o755)
        self.hooks_dir = tmp_path / "hooks.d"

    def write_hook(self, name: str, stage: str) -> None:
        """Write an oci-hooks.d 1.0.0 JSON running ``python -I -m hook -config CFG STAGE`` (full argv)."""
        self.hooks_dir.mkdir(exist_ok=True)
        args = [sys.executable, "-I", "-m", "hook", "-config", str(self.config), stage]
        document = {
            "version": "1.0.0",
            "hook": {"path": sys.executable, "args": args, "env": HOOK_ENV},
            "when": {"always": True},
            "stages": [stage],
        }
        (self.hooks_dir / name).write_text(json.dumps(document))


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    """A fresh setup in tmp_path."""
    return Setup(tmp_path)


def run_env(image: str, name: str, env_file: Path, *options: str) -> list[str]:
    """``podman run --rm OPTIONS`` a container that names the env file and prints its environment."""
    proc = podman(
        "run", "--rm", "--name", name, *options, "-e", f"NVIDIA_ENV_FROM_FILE={env_file}", image, "env"
    )
    return proc.stdout.splitlines()


def assert_no_container(name: str) -> None:
    """podman knows no container by that name (it was never created, or was removed)."""
    listed = podman("ps", "--all", "--format", "{{.Names}}").stdout.split()
    assert name not in listed


def test_podman_runtime_shim(setup: Setup, image: str, make_env_file: MakeEnvFile) -> None:
    """``podman --runtime <shim>``: the container sees the file's variables; the cli got its devices."""
    env_file = make_env_file(ENV_FILE)
    lines = run_env(image, unique_id("shim"), env_file, "--runtime", str(setup.shim))
    assert "USER_CUSTOM_ENV=hello" in lines
    assert "NVIDIA_VISIBLE_DEVICES=0,1" in lines
    cli = load_record(setup.record)
    assert cli is not None
    assert "--device=0,1" in cli["argv"]


def test_podman_precreate_hook(setup: Setup, image: str, make_env_file: MakeEnvFile) -> None:
    """``--hooks-dir`` with the precreate and prestart hooks, plain runc: the variables and devices arrive."""
    setup.write_hook("gpu-env-hook-precreate.json", "precreate")
    setup.write_hook("gpu-env-hook.json", "prestart")
    env_file = make_env_file(ENV_FILE)
    lines = run_env(image, unique_id("precreate"), env_file, "--hooks-dir", str(setup.hooks_dir))
    assert "USER_CUSTOM_ENV=hello" in lines
    assert "NVIDIA_VISIBLE_DEVICES=0,1" in lines
    cli = load_record(setup.record)
    assert cli is not None
    assert "--device=0,1" in cli["argv"]


def test_podman_precreate_alone_changes_only_env(
    setup: Setup, image: str, make_env_file: MakeEnvFile
) -> None:
    """The precreate hook alone merges the variables and adds nothing: no GPU hook runs."""
    setup.write_hook("gpu-env-hook-precreate.json", "precreate")
    env_file = make_env_file(ENV_FILE)
    lines = run_env(image, unique_id("precreate-only"), env_file, "--hooks-dir", str(setup.hooks_dir))
    assert "USER_CUSTOM_ENV=hello" in lines
    assert load_record(setup.record) is None


def test_podman_shim_refused_file(setup: Setup, image: str, make_env_file: MakeEnvFile) -> None:
    """Through the shim a refused file stops podman run with our one line in podman's error."""
    env_file = make_env_file(ENV_FILE)
    env_file.chmod(0o664)
    name = unique_id("shim-refused")
    proc = podman(
        "run", "--rm", "--name", name, "--runtime", str(setup.shim),
        "-e", f"NVIDIA_ENV_FROM_FILE={env_file}", image, "env",
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    line = f"gpu-env-runtime: env file '{env_file}': must not be group- or world-writable (mode 0664)"
    assert line in proc.stderr
    assert load_record(setup.record) is None
    assert_no_container(name)


def test_podman_precreate_refused_file(setup: Setup, image: str, make_env_file: MakeEnvFile) -> None:
    """Through the precreate hook a refused file stops podman run; podman 4.3 names only the failed hook."""
    setup.write_hook("gpu-env-hook-precreate.json", "precreate")
    env_file = make_env_file(ENV_FILE)
    env_file.chmod(0o664)
    name = unique_id("precreate-refused")
    proc = podman(
        "run", "--rm", "--name", name, "--hooks-dir", str(setup.hooks_dir),
        "-e", f"NVIDIA_ENV_FROM_FILE={env_file}", image, "env",
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "precreate" in proc.stderr
    assert "exit status 1" in proc.stderr
    assert_no_container(name)

"""A config.json of 20 MB or 50 MB (padding in an annotation) runs under runc, so it runs with us too: through
the prestart hook (runc hands the hook a state that carries the annotations too) and through the shim, for
a container without GPUs and for one with a GPU from an env file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from busybox import base_spec, make_busybox_rootfs, unique_id
from conftest import MakeEnvFile
from runc_hooks import hook_entry, load_record, write_config

pytestmark = pytest.mark.integration

RUNC = shutil.which("runc") or "runc"
MB = 1_000_000


def write_large_bundle(bundle: Path, size: int, env: list[str], prestart: list[dict[str, Any]]) -> Path:
    """Write a runc bundle whose config.json is ``size`` bytes or a little more (one padding annotation)."""
    make_busybox_rootfs(bundle / "rootfs")
    spec = base_spec()
    spec["process"]["args"] = ["sh", "-c", "echo marker=$MARKER devices=$NVIDIA_VISIBLE_DEVICES"]
    spec["process"]["env"] = env
    if prestart:
        spec["hooks"] = {"prestart": prestart}
    spec["annotations"] = {"example.com/padding": "x" * size}
    (bundle / "config.json").write_text(json.dumps(spec), encoding="utf-8")
    return bundle


class Runner:
    """runc (or the shim in front of it) with its own state root; every container is deleted after."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "runc-root"
        self.record = tmp_path / "record.json"
        self.config = write_config(
            tmp_path / "config.toml", record=self.record, env_dirs=[tmp_path / "nvidia-env"]
        )
        self.ids: list[str] = []

    def run(self, bundle: Path, *, shim: bool) -> subprocess.CompletedProcess[str]:
        """``run`` the bundle in the foreground, by runc or by ``gpu-env-runtime``."""
        cid = unique_id("large")
        self.ids.append(cid)
        front = [sys.executable, "-I", "-m", "hook.stages.shim"] if shim else [RUNC]
        return subprocess.run(
            [*front, "--root", str(self.root), "run", "--bundle", str(bundle), cid],
            env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(self.config), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    """A runner whose containers are force-deleted when the test ends."""
    value = Runner(tmp_path)
    yield value
    for cid in value.ids:
        subprocess.run(
            [RUNC, "--root", str(value.root), "delete", "--force", cid], capture_output=True, check=False
        )


@pytest.mark.parametrize("size", [pytest.param(20 * MB, id="20MB"), pytest.param(50 * MB, id="50MB")])
@pytest.mark.parametrize("gpu", [pytest.param(False, id="no-gpu"), pytest.param(True, id="gpu")])
@pytest.mark.parametrize("shim", [pytest.param(False, id="hook"), pytest.param(True, id="shim")])
def test_large_spec_runs(
    tmp_path: Path, runner: Runner, make_env_file: MakeEnvFile, size: int, gpu: bool, shim: bool
) -> None:
    """runc runs it, and so does the hook (as runc's prestart hook) or the shim; a GPU container gets its GPU."""
    env = ["PATH=/bin", "MARKER=large"]
    if gpu:
        env_file = make_env_file("NVIDIA_VISIBLE_DEVICES=3\n")
        env.append(f"NVIDIA_ENV_FROM_FILE={env_file}" if shim else "NVIDIA_VISIBLE_DEVICES=3")
    prestart = [] if shim else [hook_entry(runner.config)]
    bundle = write_large_bundle(tmp_path / "bundle", size, env, prestart)
    result = runner.run(bundle, shim=shim)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == f"marker=large devices={'3' if gpu else ''}\n"
    record = load_record(runner.record)
    if gpu:
        assert record is not None
        assert "--device=3" in record["argv"]
    else:
        assert record is None
    assert (bundle / "config.json").stat().st_size >= size

"""Our hook in a real ``runc run``: the cli gets the container's init pid and rootfs, refusals stop the start."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from busybox import make_runc_bundle, run_container, unique_id
from runc_hooks import hook_entry, load_record, probe_entry, write_config

pytestmark = pytest.mark.integration

MARKER = "container-ran"
ARGS = ["sh", "-c", f"echo {MARKER}"]
IMAGE_ENV = ["PATH=/bin"]


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, Path]:
    """Where the bundle, config and the two records go."""
    return {
        "bundle": tmp_path / "bundle",
        "config": tmp_path / "config.toml",
        "cli": tmp_path / "cli-record.json",
        "probe": tmp_path / "probe-record.json",
    }


def test_gpu_container_cli_gets_init_pid_and_rootfs(paths: dict[str, Path]) -> None:
    """The stand-in cli receives --pid=<the container's init pid> and <bundle>/rootfs, and the container runs."""
    config = write_config(paths["config"], record=paths["cli"])
    bundle = make_runc_bundle(
        paths["bundle"],
        args=ARGS,
        env=[*IMAGE_ENV, "NVIDIA_VISIBLE_DEVICES=0"],
        prestart=[probe_entry(paths["probe"]), hook_entry(config)],
    )
    result = run_container(bundle, unique_id("hook-gpu"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{MARKER}\n"
    probe = load_record(paths["probe"])
    assert probe is not None
    host_pid = probe["state"]["pid"]
    # NSpid lists the pid in each namespace from the host's down: the container's own view of it is 1.
    assert probe["nspid"] == [host_pid, 1]
    cli = load_record(paths["cli"])
    assert cli is not None, result.stderr
    argv = cli["argv"]
    assert f"--pid={host_pid}" in argv
    assert "--device=0" in argv
    assert argv[-1] == str(bundle.resolve() / "rootfs")
    assert argv[argv.index("configure") + 1 :].count(f"--pid={host_pid}") == 1


def test_non_gpu_container_runs_without_cli(paths: dict[str, Path]) -> None:
    """A container that asks for no GPU starts normally and the cli is never called."""
    config = write_config(paths["config"], record=paths["cli"])
    bundle = make_runc_bundle(paths["bundle"], args=ARGS, env=IMAGE_ENV, prestart=[hook_entry(config)])
    result = run_container(bundle, unique_id("hook-cpu"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{MARKER}\n"
    assert load_record(paths["cli"]) is None


def test_refused_request_fails_runc_with_one_line(paths: dict[str, Path]) -> None:
    """An unsupported capability makes runc run fail with our one-line message; the container never runs."""
    config = write_config(paths["config"], record=paths["cli"])
    env = [*IMAGE_ENV, "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,bogus"]
    bundle = make_runc_bundle(paths["bundle"], args=ARGS, env=env, prestart=[hook_entry(config)])
    result = run_container(bundle, unique_id("hook-refused"))
    assert result.returncode != 0
    # runc quotes the hook's stderr with its newline escaped: exactly our one line, nothing after it.
    assert re.search(
        r"error running hook #0: error running hook: exit status 1, stdout: , "
        r"stderr: unsupported capabilities found in 'bogus,compute' \(allowed 'compute'\)\\n\"$",
        result.stderr.strip(),
    ), result.stderr
    assert MARKER not in result.stdout
    assert load_record(paths["cli"]) is None

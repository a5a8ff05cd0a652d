"""Real system-call failures (a full bundle, a read-only bundle, an I/O error on the env file) become one line
that says what was being done, the path and the system's reason, from every stage; config.json stays as it
was and no temp file is left behind.

Each case runs in its own mount namespace (``unshare -m``): a tiny tmpfs that is full, a read-only bind
mount, and an env file that is a bind mount of ``/proc/<pid>/mem`` of a sleeping process, whose read at
offset 0 (an unmapped address) fails with EIO in the kernel: a real ``Input/output error``, no injection.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HOOK, STANDIN_CLI, MakeBundle, MakeEnvFile

pytestmark = pytest.mark.integration

SHIM = [sys.executable, "-I", "-m", "hook.stages.shim"]
ENV_FILE = "NVIDIA_VISIBLE_DEVICES=0\nUSER_CUSTOM_ENV=hello\n"


def write_config(tmp_path: Path, env_dir: Path) -> Path:
    """A config.toml with the stand-in cli and ``env_dir`` as the only env-file directory."""
    path = tmp_path / "config.toml"
    path.write_text(
        "[nvidia-container-cli]\n"
        f'path = "{STANDIN_CLI}"\n'
        f'environment = ["STANDIN_RECORD={tmp_path / "record.json"}"]\n'
        "[env-file]\n"
        f"directories = [{json.dumps(str(env_dir))}]\n",
        encoding="utf-8",
    )
    return path


def in_mount_namespace(
    setup: str, command: list[str], *, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    """Run ``setup`` (shell) then ``command`` in a private mount namespace that ends with the process."""
    script = f"set -e\n{setup}\nset +e\nexec {shlex.join(command)}\n"
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "XDG_CONFIG_HOME": "/nonexistent"},
    )


def full_tmpfs(directory: Path, staging: Path) -> str:
    """Shell: a 256 KiB tmpfs on ``directory`` holding ``staging``'s files, then filled to the last block."""
    return (
        f"mount -t tmpfs -o size=256k tmpfs {shlex.quote(str(directory))}\n"
        f"cp -a {shlex.quote(str(staging))}/. {shlex.quote(str(directory))}/\n"
        f"dd if=/dev/zero of={shlex.quote(str(directory / 'fill'))} bs=4096 2>/dev/null || true\n"
    )


def read_only(directory: Path, staging: Path) -> str:
    """Shell: ``staging`` bind-mounted read-only on ``directory``."""
    quoted, source = shlex.quote(str(directory)), shlex.quote(str(staging))
    return f"mount --bind {source} {quoted}\nmount -o remount,bind,ro {quoted}\n"


def stage_command(stage: str, config: Path, bundle: Path, env_file: Path) -> tuple[list[str], bytes, str]:
    """The argv, stdin and message prefix of one stage (the shim prefixes its lines with its name)."""
    if stage == "hook":
        state = json.dumps({"pid": 4242, "bundle": str(bundle)}).encode()
        return [*HOOK, "-config", str(config), "prestart"], state, ""
    if stage == "shim":
        env = ["env", f"NVIDIA_CTK_CONFIG_FILE_PATH={config}"]
        argv = [
            *env,
            *SHIM,
            "--root",
            str(bundle.parent / "runc-root"),
            "create",
            "--bundle",
            str(bundle),
            "x",
        ]
        return argv, b"", "gpu-env-runtime: "
    if stage == "precreate":
        return [*HOOK, "-config", str(config), "precreate"], (bundle / "config.json").read_bytes(), ""
    return [*HOOK, "-config", str(config), "env-file", "check", str(env_file)], b"", ""


@pytest.fixture
def staged(tmp_path: Path, make_bundle: MakeBundle, make_env_file: MakeEnvFile) -> tuple[Path, Path, Path]:
    """A GPU bundle naming an env file (staged beside its mount point ``bundle``), the env file, a config."""
    env_file = make_env_file(ENV_FILE)
    staging = make_bundle(["PATH=/bin", f"NVIDIA_ENV_FROM_FILE={env_file}"], name="staging")
    (tmp_path / "bundle").mkdir()
    return staging, env_file, write_config(tmp_path, env_file.parent)


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        pytest.param(full_tmpfs, "No space left on device", id="enospc"),
        pytest.param(read_only, "Read-only file system", id="read-only"),
    ],
)
@pytest.mark.parametrize("stage", [pytest.param("hook", id="hook"), pytest.param("shim", id="shim")])
def test_bundle_write_failure_is_one_line(
    tmp_path: Path, staged: tuple[Path, Path, Path], failure: object, reason: str, stage: str
) -> None:
    """The merged env cannot be written: one line naming config.json and the reason; the file unchanged."""
    staging, env_file, config = staged
    bundle = tmp_path / "bundle"
    before = (staging / "config.json").read_bytes()
    argv, stdin, prefix = stage_command(stage, config, bundle, env_file)
    listing = f"; ls -A {shlex.quote(str(bundle))}; sha256sum {shlex.quote(str(bundle / 'config.json'))}"
    setup = failure(bundle, staging)  # type: ignore[operator]
    command = ["sh", "-c", f"{shlex.join(argv)} <&0; echo rc=$?{listing}"]
    result = in_mount_namespace(setup, command, stdin=stdin)
    out = result.stdout.decode().split("\n")
    errors = [line for line in result.stderr.decode().splitlines() if not line.startswith("Auto-detected")]
    assert errors == [f"{prefix}could not write {bundle}/config.json: {reason}"]
    assert out[0] == "rc=1"
    assert sorted(out[1:-2]) == sorted(
        ["config.json", "rootfs", *(["fill"] if reason.startswith("No") else [])]
    )
    assert out[-2].split()[0] == hashlib.sha256(before).hexdigest()
    assert not (tmp_path / "record.json").exists()


def eio_env_file(env_file: Path, sleeper: int) -> str:
    """Shell: the env file replaced (in this namespace) by ``/proc/<sleeper>/mem``: a read gives EIO."""
    return f"mount --bind /proc/{sleeper}/mem {shlex.quote(str(env_file))}\n"


@pytest.mark.parametrize(
    "stage",
    [
        pytest.param("hook", id="hook"),
        pytest.param("shim", id="shim"),
        pytest.param("precreate", id="precreate"),
        pytest.param("check", id="env-file-check"),
    ],
)
def test_env_file_io_error_is_one_line(tmp_path: Path, staged: tuple[Path, Path, Path], stage: str) -> None:
    """EIO while reading the env file: every stage names the action, the file and ``Input/output error``."""
    staging, env_file, config = staged
    before = (staging / "config.json").read_bytes()
    argv, stdin, prefix = stage_command(stage, config, staging, env_file)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        result = in_mount_namespace(eio_env_file(env_file, sleeper.pid), argv, stdin=stdin)
    finally:
        sleeper.kill()
        sleeper.wait()
    line = f"could not read env file {env_file}: Input/output error"
    assert result.returncode == 1
    if stage == "check":
        assert line in result.stdout.decode()
        assert "internal error" not in result.stderr.decode()
    else:
        errors = [
            text for text in result.stderr.decode().splitlines() if not text.startswith("Auto-detected")
        ]
        assert (result.stdout, errors) == (b"", [f"{prefix}{line}"])
    assert (staging / "config.json").read_bytes() == before
    assert not (tmp_path / "record.json").exists()


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        pytest.param(full_tmpfs, "No space left on device", id="enospc"),
        pytest.param(read_only, "Read-only file system", id="read-only"),
    ],
)
def test_env_file_write_failure_is_one_line(tmp_path: Path, failure: object, reason: str) -> None:
    """``env-file write`` into a full or read-only env directory: one line, the old file kept, no temp file."""
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "a.env").write_text("NVIDIA_VISIBLE_DEVICES=0\n", encoding="utf-8")
    env_dir = tmp_path / "nvidia-env"
    env_dir.mkdir()
    config = write_config(tmp_path, env_dir)
    target = env_dir / "a.env"
    argv = [*HOOK, "-config", str(config), "env-file", "write", str(target), "NVIDIA_VISIBLE_DEVICES=1"]
    listing = f"; ls -A {shlex.quote(str(env_dir))}; cat {shlex.quote(str(target))}"
    setup = failure(env_dir, staging)  # type: ignore[operator]
    result = in_mount_namespace(setup, ["sh", "-c", f"{shlex.join(argv)}; echo rc=$?{listing}"])
    assert result.stderr.decode() == f"gpu-env-hook: could not write env file {target}: {reason}\n"
    out = result.stdout.decode().splitlines()
    assert out[0] == "rc=1"
    assert sorted(out[1:-1]) == sorted(["a.env", *(["fill"] if reason.startswith("No") else [])])
    assert out[-1] == "NVIDIA_VISIBLE_DEVICES=0"

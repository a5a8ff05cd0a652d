"""What ``install --engine podman --root NODE`` wrote, used by a real podman and a real runc.

The node tree's ``usr/local`` is bind-mounted over ``/usr/local`` in a private mount namespace
(``unshare --mount``), so podman finds the wrappers at the node paths the hooks JSON names, exactly as on a
node where install ran with ``--root /``; nothing outside the test's tmp directory is touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from busybox import make_runc_bundle, unique_id
from podman import import_busybox_image, podman_env
from runc_hooks import STANDIN_CLI, load_record

from hook.util import paths

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("podman"), reason="needs root and podman"),
]

IMAGE = "localhost/gpu-env-hook-busybox"
CONFIG = "/usr/local/etc/gpu-env-hook/config.toml"  # a node path inside the bind-mounted /usr/local
ENV_FILE = "# written by the device plugin\nNVIDIA_VISIBLE_DEVICES=1,2\nUSER_CUSTOM_ENV=hello\n"
PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path


class Node:
    """A node tree with gpu-env-hook installed for podman, and an env file a device plugin wrote."""

    def __init__(self, tmp_path: Path, *install_flags: str) -> None:
        self.root = tmp_path / "node"
        self.record = tmp_path / "cli-record.json"
        self.env_file = tmp_path / "nvidia-env" / "pod-a.env"
        self.env_file.parent.mkdir()
        self.env_file.write_text(ENV_FILE)
        self.env_file.chmod(0o644)
        config = self.root / CONFIG.lstrip("/")
        config.parent.mkdir(parents=True)
        config.write_text(
            "[nvidia-container-cli]\n"
            f'path = "{STANDIN_CLI}"\n'
            f'environment = ["STANDIN_RECORD={self.record}"]\n'
            "[env-file]\n"
            f'directories = ["{self.env_file.parent}"]\n'
        )
        proc = gpu_env_hook(
            "install", "--engine", "podman", "--root", str(self.root), "--config", CONFIG, *install_flags
        )
        assert proc.returncode == 0, proc.stderr
        self.hooks_dir = self.root / paths.OCI_HOOKS_DIRS[0].lstrip("/")

    def run(self, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` with ``env`` in a private mount namespace where the node's usr/local is /usr/local,
        its opt (the runtime tree install writes) is /opt and its var/log (the refusal log) is /var/log."""
        command = (
            'mount --bind "$1" /usr/local && mount --bind "$2" /opt && mount --bind "$3" /var/log && '
            'shift 3 && exec "$@"'
        )
        wrapped = ["unshare", "--mount", "--propagation", "private", "sh", "-c", command, "sh"]
        logs = self.root / "var/log"
        return subprocess.run(
            [*wrapped, str(self.root / "usr/local"), str(self.root / "opt"), str(logs), *argv],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def podman_run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``podman run --rm --hooks-dir <node hooks.d> ARGS`` with the test's podman settings."""
        return self.run(["podman", "run", "--rm", "--hooks-dir", str(self.hooks_dir), *args], podman_env())


def gpu_env_hook(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``gpu-env-hook ARGS`` from the project's interpreter."""
    return subprocess.run(
        [PYTHON, "-I", "-m", "hook", *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture(scope="module")
def image() -> str:
    """The busybox image, imported once."""
    import_busybox_image(IMAGE)
    return IMAGE


def cli_argv(record: Path) -> list[str]:
    """The argv the stand-in cli recorded (fails if the hook never called it)."""
    found: dict[str, Any] | None = load_record(record)
    assert found is not None, "the hook did not run nvidia-container-cli"
    argv: list[str] = found["argv"]
    return argv


def test_podman_hook_gives_the_env_files_devices(tmp_path: Path, image: str) -> None:
    """With the prestart hook only, the cli gets the file's devices; the process env stays the image's."""
    node = Node(tmp_path)
    proc = node.podman_run("-e", f"NVIDIA_ENV_FROM_FILE={node.env_file}", image, "env")
    assert proc.returncode == 0, proc.stderr
    argv = cli_argv(node.record)
    assert "--device=1,2" in argv
    assert argv[0] == str(STANDIN_CLI)
    assert "USER_CUSTOM_ENV=hello" not in proc.stdout.splitlines()


def test_podman_precreate_hook_gives_the_env_files_variables(tmp_path: Path, image: str) -> None:
    """With --precreate, the container's process sees the file's variables, and the cli its devices."""
    node = Node(tmp_path, "--precreate")
    proc = node.podman_run("-e", f"NVIDIA_ENV_FROM_FILE={node.env_file}", image, "env")
    assert proc.returncode == 0, proc.stderr
    env = proc.stdout.splitlines()
    assert "NVIDIA_VISIBLE_DEVICES=1,2" in env
    assert "USER_CUSTOM_ENV=hello" in env
    assert "--device=1,2" in cli_argv(node.record)


def test_podman_container_without_env_file_is_not_a_gpu_container(tmp_path: Path, image: str) -> None:
    """A container that names no env file and no GPUs runs as usual; the cli is never called."""
    node = Node(tmp_path, "--precreate")
    proc = node.podman_run(image, "echo", "plain")
    assert (proc.returncode, proc.stdout) == (0, "plain\n"), proc.stderr
    assert load_record(node.record) is None


def test_podman_refused_env_file_stops_the_container(tmp_path: Path, image: str) -> None:
    """An env file outside the configured directories is refused and the container does not start."""
    node = Node(tmp_path)
    outside = tmp_path / "elsewhere.env"
    outside.write_text(ENV_FILE)
    proc = node.podman_run("-e", f"NVIDIA_ENV_FROM_FILE={outside}", image, "true")
    assert proc.returncode != 0
    assert load_record(node.record) is None


@pytest.mark.parametrize("stage", ["precreate", "prestart"])
def test_podman_shows_a_short_error_and_the_refusal_log_has_the_reason(
    tmp_path: Path, image: str, stage: str
) -> None:
    """podman 4.3 shows a failing precreate hook as its argv and exit status only: the argv is short (the
    launch script, the refusal log it names), the status names the refusal class (14: the env file), the
    whole error is under 600 characters, and the log named there holds our one line. A prestart hook fails
    inside runc, which shows its status and stderr: our line is in podman's error itself, and in the log."""
    node = Node(tmp_path, *(["--precreate"] if stage == "precreate" else []))
    node.env_file.chmod(0o666)
    proc = node.podman_run("-e", f"NVIDIA_ENV_FROM_FILE={node.env_file}", image, "true")
    assert proc.returncode != 0
    error = proc.stderr.strip()
    print(f"podman {stage} refusal ({len(error)} characters):\n{error}")
    assert len(error) < 600, error
    reason = f"env file '{node.env_file}': must not be group- or world-writable (mode 0666)"
    if stage == "precreate":
        assert f"{paths.LAUNCH_SCRIPT} -refusal-log {paths.REFUSAL_LOG} {stage}]: exit status 14" in error
    else:
        assert f"exit status 14, stdout: , stderr: {reason}" in error
    assert "exit status 14" in error
    assert "cannot load" not in error
    log = (node.root / paths.REFUSAL_LOG.lstrip("/")).read_text().splitlines()
    assert log[-1].endswith(f"{stage} exit status 14: {reason}")
    assert (node.root / paths.REFUSAL_LOG.lstrip("/")).stat().st_mode & 0o777 == 0o600


def test_nvidia_alias_ignores_inherited_pythonpath_and_ld_preload(tmp_path: Path) -> None:
    """As ``docker run --gpus`` inserts it (no env: runc's own is inherited), the alias drops PYTHONPATH and
    LD_PRELOAD: a shadowing ``hook`` package is never imported and the cli's environment holds neither."""
    node = Node(tmp_path, "--as-nvidia-hook")
    shadow = tmp_path / "shadow"
    marker = tmp_path / "shadow-imported"
    (shadow / "hook").mkdir(parents=True)
    (shadow / "hook" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (shadow / "hook" / "__main__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    bundle = make_runc_bundle(
        tmp_path / "bundle",
        args=["true"],
        env=["PATH=/bin", f"NVIDIA_ENV_FROM_FILE={node.env_file}"],
        prestart=[{"path": paths.NVIDIA_HOOK_ALIAS, "args": ["nvidia-container-runtime-hook", "prestart"]}],
    )
    state = tmp_path / "runc-state"
    runc_env = {
        "PATH": paths.FIXED_PATH,
        "PYTHONPATH": str(shadow),
        "LD_PRELOAD": str(tmp_path / "libshadow.so"),
        "HOME": str(tmp_path),
    }
    argv = ["runc", "--root", str(state), "run", "--bundle", str(bundle), unique_id("alias")]
    proc = node.run(argv, runc_env)
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists()
    record = load_record(node.record)
    assert record is not None, proc.stderr
    assert "--device=1,2" in record["argv"]
    assert sorted(record["env"]) == ["LC_CTYPE", "NVIDIA_CTK_CONFIG_FILE_PATH", "PATH", "STANDIN_RECORD"]

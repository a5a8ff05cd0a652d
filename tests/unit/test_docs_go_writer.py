"""The Go writer example of docs/env-file.md, run with ``go run``, writes files our reader reads exactly.

Device-plugin authors mostly write Go; the specification in docs/env-file.md comes with a standard-library-only
writer (docs/examples/go-env-file-writer/main.go). This test runs it and feeds its output to the hook's own
checks: the path is ours for the same device ids, every value comes back byte for byte, the pin is read.
CI installs golang-go (.ci/run); without Go the test is skipped and says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, env_settings

from hook.producer.envfile import check_env_file
from hook.producer.namekey import allocate_answer, env_file_path, key_path, load_key

WRITER = REPO / "docs" / "examples" / "go-env-file-writer" / "main.go"
VALUES = {
    "NVIDIA_VISIBLE_DEVICES": "0,1",
    "QUOTES": "a \"double\" and 'single'",
    "BACKSLASHES": "\\ \\\\ \\n \\a \\x \\'",
    "CONTROL": "line1\nline2\rtab\tvt\vff\f",
    "NOT_EXPANDED": "${HOME} $PATH `id` $(id)",
    "HASHES": "value # not a comment #",
    "SPACES": "  leading and trailing  ",
    "EQUALS": "a=b=c",
    "EMPTY": "",
    "UNICODE": "GPU ✓ \u2013 ñ 中文 \u2028 \U0001f600",
}

pytestmark = pytest.mark.skipif(
    shutil.which("go") is None or os.geteuid() != 0,
    reason="needs Go (apt-get install golang-go, as .ci/run does) and root (the hook reads root-owned files)",
)


def test_go_writer_output_reads_back_exactly(tmp_path: Path) -> None:
    """go run main.go ... -- KEY=VALUE...: our path, our checks pass, every value exact, the pod pin read."""
    directory = tmp_path / "nvidia-env"
    directory.mkdir(mode=0o755)
    assignments = [f"{key}={value}" for key, value in VALUES.items()]
    proc = run_writer(
        tmp_path,
        "-pod-uid",
        "pod-1",
        "-container",
        "main",
        "fake2",
        "fake0",
        "fake1",
        "fake0",
        "--",
        *assignments,
    )
    assert proc.returncode == 0, proc.stderr
    path = proc.stdout.strip()
    assert path == env_file_path(["fake0", "fake1", "fake2"], str(directory))
    settings = env_settings(directory, pod_binding_engine="containerd")
    report = check_env_file(path, settings, pod_uid="pod-1", container="main")
    assert report.ok, [(step.name, step.detail) for step in report.steps]
    assert report.values == VALUES
    assert (report.pinned_pod_uid, report.pinned_container) == ("pod-1", "main")
    assert Path(path).stat().st_mode & 0o777 == 0o600
    assert [p.name for p in directory.iterdir()] == [Path(path).name]  # no temp file left behind


def test_go_writer_pins_by_namespace_and_name(tmp_path: Path) -> None:
    """The Go writer pins a file by the pod's namespace and name (what pod-resources List() gives a plugin),
    names it with the node's key as we do, and writes it 0600."""
    directory = tmp_path / "nvidia-env"
    proc = run_writer(
        tmp_path, "-pod-namespace", "ns", "-pod-name", "web-0", "gpu-1", "--", "NVIDIA_VISIBLE_DEVICES=1"
    )
    assert proc.returncode == 0, proc.stderr
    path = proc.stdout.strip()
    assert path == env_file_path(["gpu-1"], str(directory))
    report = check_env_file(
        path, env_settings(directory, pod_binding_engine="crio"), pod_namespace="ns", pod_name="web-0"
    )
    assert report.ok, [(step.name, step.detail) for step in report.steps]
    assert report.pins == {"GPU_ENV_HOOK_POD_NAMESPACE": "ns", "GPU_ENV_HOOK_POD_NAME": "web-0"}
    assert Path(path).stat().st_mode & 0o777 == 0o600


def run_writer(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """go run main.go ARGS with the node's naming key, writing into tmp_path/nvidia-env."""
    directory = tmp_path / "nvidia-env"
    directory.mkdir(mode=0o700, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "GOCACHE": str(tmp_path / "gocache"),
        "GOPATH": str(tmp_path / "gopath"),
        "GOFLAGS": "-mod=mod",
        "GOPROXY": "off",  # standard library only: nothing to download
        "CGO_ENABLED": "0",
    }
    load_key()  # the node's key, made by gpu-env-hook on first use; the Go writer only reads it
    return subprocess.run(
        ["go", "run", str(WRITER), "-dir", str(directory), "-key", key_path(), *args],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False,
    )  # fmt: skip


def test_go_writer_takes_flags_after_the_device_ids(tmp_path: Path) -> None:
    """-pod-namespace, -pod-name and -container after (or between) the ids are flags, not more device ids:
    the same path as with the flags first, and the pins written."""
    args = ["gpu-1", "-pod-namespace", "ns", "gpu-0", "-pod-name", "web-0", "-container", "main", "--", "A=1"]
    proc = run_writer(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    path = proc.stdout.strip()
    assert path == env_file_path(["gpu-0", "gpu-1"], str(tmp_path / "nvidia-env"))
    settings = env_settings(tmp_path / "nvidia-env", pod_binding_engine="crio")
    report = check_env_file(path, settings, pod_namespace="ns", pod_name="web-0", container="main")
    assert report.ok, [(step.name, step.detail) for step in report.steps]
    assert report.values == {"A": "1"}


@pytest.mark.parametrize(
    "key",
    [
        "LD_PRELOAD",
        "PATH",
        "PYTHONPATH",
        "NVIDIA_CTK_CONFIG_FILE_PATH",
        "NVIDIA_ENV_FROM_FILE",
        "GPU_ENV_HOOK_X",
    ],
)
def test_go_writer_refuses_what_the_hook_refuses(tmp_path: Path, key: str) -> None:
    """A key the hook would refuse (docs/env-file.md, "Refused keys") is refused by the writer: exit 1, one
    line, nothing written."""
    proc = run_writer(tmp_path, "-pod-uid", "pod-1", "gpu-0", "--", f"{key}=x")
    assert proc.returncode == 1
    assert f'go-env-file-writer: key "{key}" is not accepted' in proc.stderr
    assert list((tmp_path / "nvidia-env").iterdir()) == []


def test_go_writer_allocate_answer_is_the_python_apis(tmp_path: Path) -> None:
    """-allocate prints what Allocate returns (docs/env-file.md, "The Allocate answer"): the variable naming
    the file at the path the hook's producer computes, and the env-file guard's CDI device; it writes
    nothing."""
    proc = run_writer(tmp_path, "-allocate", "fake1", "fake0")
    assert proc.returncode == 0, proc.stderr
    answer = allocate_answer(["fake0", "fake1"], str(tmp_path / "nvidia-env"))
    assert json.loads(proc.stdout) == {"envs": answer.envs, "cdiDevices": list(answer.cdi_devices)}
    assert answer.cdi_devices == ("gpu-env-hook.io/env-file=required",)
    assert list((tmp_path / "nvidia-env").iterdir()) == []

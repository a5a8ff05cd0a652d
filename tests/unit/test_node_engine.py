"""The commands for people know the node's engine as the installed hook does: ``doctor``, ``env-file check``
and ``check_env_file`` take it from ``--engine``, else ``GPU_ENV_HOOK_ENGINE``, else the install record.

The install record is read at the node's own path, so the tests that need one run the command in a private
mount namespace (``unshare -m``) with tmpfs over ``/var/lib`` (holding the record) and ``/run`` (holding
``/run/nvidia-env``): the documented examples run there as written, and nothing on the host changes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from hook.install import InstallOptions, write_install
from hook.pipeline.configfile import resolve_node_engine
from hook.util import paths

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare (a mount namespace)"
)
PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path
BIN = str(Path(PYTHON).parent)
POD_UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
CONTAINER = "main"


def in_node(
    argv: list[str], *, record: str | None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in a mount namespace where /run/nvidia-env exists (root, 0700) and /var/lib/gpu-env-hook
    holds an install record for ``record`` (None: no install)."""
    setup = [
        "set -e",
        "mount -t tmpfs -o mode=0755 tmpfs /run",
        "mkdir -m 0700 /run/nvidia-env",
        "mount -t tmpfs -o mode=0755 tmpfs /var/lib",
        "mkdir -m 0700 /var/lib/gpu-env-hook",
    ]
    if record is not None:
        document = json.dumps({"version": 1, "engine": record, "files": [], "directories": []})
        setup.append(f"printf '%s' '{document}' > {paths.install_record(record)}")
    setup.append('exec "$@"')
    environ = {"PATH": f"{BIN}:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", **(env or {})}
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(setup), "sh", *argv],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        check=False,
    )


def doc_block(document: str, heading: str, language: str) -> str:
    """The first ``language`` code block under ``heading`` in a document."""
    text = (REPO / document).read_text(encoding="utf-8")
    section = text.split(heading, 1)[1]
    match = re.search(rf"^```{language}\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert match is not None
    return match.group(1)


def test_env_file_cli_example_runs_as_written_on_an_installed_node() -> None:
    """docs/env-file.md's command-line example (path, write pinned to pod and container, check) passes on a
    node where install recorded containerd, with no GPU_ENV_HOOK_ENGINE in the environment."""
    script = doc_block("docs/env-file.md", "### From the command line", "sh")
    proc = in_node(
        ["bash", "-e", "-c", script],
        record="containerd",
        env={"POD_UID": POD_UID, "POD_NAMESPACE": "team-a", "POD_NAME": "train-0", "CONTAINER": CONTAINER},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "binding" in proc.stdout
    assert "✗" not in proc.stdout


def test_env_file_check_without_an_engine_refuses_a_pin_and_says_why() -> None:
    """Without an install record or GPU_ENV_HOOK_ENGINE the pin cannot be checked (the hook would refuse it
    too); --engine gives it."""
    write = 'path=$(gpu-env-hook env-file path d0) && gpu-env-hook env-file write "$path" A=1 --pod-uid P --container C'
    check = 'gpu-env-hook env-file check "$(gpu-env-hook env-file path d0)" --pod-uid P --container C'
    proc = in_node(["bash", "-e", "-c", f"{write} >/dev/null; {check}"], record=None)
    assert proc.returncode == 1
    assert "no pod-binding-engine is set" in proc.stdout
    proc = in_node(["bash", "-e", "-c", f"{write} >/dev/null; {check} --engine crio"], record=None)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_python_example_checks_against_the_installed_engine() -> None:
    """docs/env-file.md's Python example: check_env_file(path, pod_uid=...) with no settings passes on a
    node where install recorded containerd (the file pinned to pod and container)."""
    code = doc_block("docs/env-file.md", "### From Python", "python")
    code = (
        f"pod_uid = {POD_UID!r}\n{code}\nassert report.ok, report.steps\n"
        "assert answer.envs == {'NVIDIA_ENV_FROM_FILE': path}, answer.envs\n"
        "assert answer.cdi_devices == ('gpu-env-hook.io/env-file=required',)\nprint('ok')\n"
    )
    proc = in_node([PYTHON, "-c", code], record="containerd")
    assert (proc.returncode, proc.stdout) == (0, "ok\n"), proc.stderr


@pytest.mark.parametrize(
    ("option", "environ", "installed", "expected"),
    [
        pytest.param("crio", {"GPU_ENV_HOOK_ENGINE": "podman"}, ["containerd"], "crio", id="option-first"),
        pytest.param(
            None, {"GPU_ENV_HOOK_ENGINE": "podman"}, ["containerd"], "podman", id="environment-next"
        ),
        pytest.param(None, {}, ["containerd"], "containerd", id="install-record"),
        pytest.param(None, {}, ["podman", "containerd"], "containerd", id="the-kubernetes-engine-of-several"),
        pytest.param(None, {}, ["containerd", "crio"], None, id="two-kubernetes-engines-undecided"),
        pytest.param(None, {}, [], None, id="nothing-installed"),
    ],
)
def test_node_engine_precedence(
    tmp_path: Path, option: str | None, environ: dict[str, str], installed: list[str], expected: str | None
) -> None:
    """--engine, else GPU_ENV_HOOK_ENGINE, else the install record (of several, the one Kubernetes engine)."""
    for engine in installed:
        record = tmp_path / paths.install_record(engine).lstrip("/")
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text("{}")
    assert resolve_node_engine(option, environ, str(tmp_path)) == expected


def test_doctor_under_root_right_after_install_knows_the_engine(tmp_path: Path) -> None:
    """doctor --root R after install --engine containerd --root R: containerd is installed there (not 'not
    installed' for want of its binary), and pins are checked against containerd's annotations."""
    node = tmp_path / "node"
    node.mkdir()
    write_install(InstallOptions(engine="containerd", python=PYTHON, root=str(node)))
    proc = subprocess.run(
        [PYTHON, "-I", "-m", "hook", "doctor", "--root", str(node)],
        capture_output=True, text=True, timeout=120, check=False, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    rows = {re.split(r"\s{2,}", line)[1]: line for line in proc.stdout.splitlines()}
    assert rows["installed for"].startswith("✓")
    assert "containerd" in rows["installed for"]
    assert rows["containerd"].startswith("✓"), proc.stdout
    assert "takes effect from /etc/containerd/config.toml" in rows["containerd"]
    assert rows["pod binding"].startswith("✓"), proc.stdout
    assert "containerd: pins checked against" in rows["pod binding"]

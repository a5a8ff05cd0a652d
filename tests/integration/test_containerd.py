"""A real containerd (Debian's 1.6) on node trees that ``install --engine containerd --root NODE`` edited.

Each test starts its own daemon (``tests/integration/containerd.py``: own root, state and socket, the node
tree's files bind-mounted at the node paths in a private mount namespace) and stops it, and every shim it
started, even when the test fails. What each test exercises is named in its docstring: ``config dump``
(containerd's merged view of the config), the CRI plugin's status, or a container started through the CRI
gRPC API as kubelet starts it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from containerd import (
    CONTAINERD_IMAGE,
    Containerd,
    ContainerdError,
    config_dump,
    namespace_argv,
    running,
    write_image_archive,
)
from cri import CriClient, remove_pod, run_in_pod, start_pod
from engine_builds import containerd2
from runc_hooks import STANDIN_CLI, load_record

from hook.util import paths

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("containerd") or not shutil.which("ctr"),
        reason="needs root and containerd",
    ),
]

CRI = "io.containerd.grpc.v1.cri"
# This VM grants no CAP_SYS_RESOURCE: a pod sandbox's oom_score_adj of -998 makes runc fail
# ("can't get final child's PID from pipe"), so pods run with restrict_oom_score_adj.
CRI_TEST_CONFIG = (
    "version = 2\n"
    f'[plugins."{CRI}"]\n'
    f'  sandbox_image = "{CONTAINERD_IMAGE}"\n'
    "  restrict_oom_score_adj = true\n"
)


@pytest.fixture(scope="module")
def containerd_image_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``docker save`` archive of the busybox test image, built once for this module."""
    directory = tmp_path_factory.mktemp("containerd-image")
    return write_image_archive(directory / "image.tar", CONTAINERD_IMAGE, ["/bin/sleep", "3600"])


def test_fixture_runs_a_pod_through_cri_and_leaves_no_shim(
    tmp_path: Path, containerd_image_archive: Path
) -> None:
    """CRI: the fixture's daemon loads the CRI plugin and runs a kubelet-shaped pod with the default runtime;
    after ``stop()`` no shim of its socket is left."""
    node = tmp_path / "node"
    (node / "etc/containerd").mkdir(parents=True)
    (node / "etc/containerd/config.toml").write_text(CRI_TEST_CONFIG)
    with running(node, tmp_path / "daemon") as daemon:
        assert daemon.plugin_status("cri") == {"io.containerd.grpc.v1": "ok"}
        daemon.import_image(containerd_image_archive)
        client = CriClient(daemon.address)
        try:
            status, stdout = run_in_pod(
                client,
                workdir=tmp_path,
                handler="",
                image=CONTAINERD_IMAGE,
                command=["/bin/env"],
                env={"FROM_CRI": "yes"},
            )
        finally:
            client.close()
        assert (status.exit_code, status.reason) == (0, "Completed")
        assert "FROM_CRI=yes" in stdout
    assert daemon.shim_pids() == []


# --- node shapes: containerd's own verdict on what install wrote --------------------------------------------

HANDLER = paths.RUNTIME_HANDLER
CONFIG = "/usr/local/etc/gpu-env-hook/config.toml"  # a node path inside the bind-mounted /usr/local
PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path
DEBIAN_CONFIG = Path("/etc/containerd/config.toml")
KUBEADM = f"""\
# kubeadm-style: containerd config default, then SystemdCgroup and a private registry's pause image
version = 2
root = "/var/lib/containerd"

[plugins]
  [plugins."{CRI}"]
    sandbox_image = "registry.example.com/pause:3.9"
    [plugins."{CRI}".containerd]
      default_runtime_name = "runc"
      [plugins."{CRI}".containerd.runtimes]
        [plugins."{CRI}".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"
          [plugins."{CRI}".containerd.runtimes.runc.options]
            SystemdCgroup = true
"""
IMPORTS_MAIN = f"""\
version = 2
imports = ["/etc/containerd/conf.d/*.toml"]

[plugins."{CRI}"]
  sandbox_image = "registry.example.com/pause:main"
"""
# containerd 1.x replaces the main config's CRI table with this one: install must add the handler here.
IMPORTS_DROPIN_CRI = f"""\
version = 2
[plugins."{CRI}"]
  sandbox_image = "registry.example.com/pause:dropin"
  [plugins."{CRI}".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."{CRI}".containerd.runtimes.runc.options]
      SystemdCgroup = true
"""
IMPORTS_DROPIN_DEBUG = 'version = 2\n[debug]\n  level = "warn"\n'
NVIDIA_DEFAULT = f"""\
version = 2
[plugins."{CRI}"]
  sandbox_image = "registry.example.com/pause:3.9"
  [plugins."{CRI}".containerd]
    default_runtime_name = "nvidia"
    [plugins."{CRI}".containerd.runtimes.nvidia]
      runtime_type = "io.containerd.runc.v2"
      privileged_without_host_devices = false
      [plugins."{CRI}".containerd.runtimes.nvidia.options]
        BinaryName = "/usr/bin/nvidia-container-runtime"
        SystemdCgroup = true
    [plugins."{CRI}".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."{CRI}".containerd.runtimes.runc.options]
        SystemdCgroup = true
"""
VERSION_1 = """\
# no version key: containerd reads it as version 1 (plugins by short name)
[plugins.cri]
  sandbox_image = "registry.example.com/pause:v1"
  [plugins.cri.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.cri.containerd.runtimes.runc.options]
      SystemdCgroup = true
"""


def gpu_env_hook(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``gpu-env-hook ARGS`` from the project's interpreter."""
    return subprocess.run(
        [PYTHON, "-I", "-m", "hook", *args], capture_output=True, text=True, timeout=60, check=False
    )


def write_node(root: Path, files: Mapping[str, str | bytes]) -> Path:
    """Write a node tree: node path → content."""
    root.mkdir(parents=True, exist_ok=True)
    for path, content in files.items():
        where = root / path.lstrip("/")
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_bytes(content.encode() if isinstance(content, str) else content)
    return root


def tree_bytes(root: Path) -> dict[str, bytes | None]:
    """Every path under root with its bytes (None for a directory)."""
    return {
        str(path.relative_to(root)): (None if path.is_dir() else path.read_bytes())
        for path in sorted(root.rglob("*"))
    }


def differences(before: Any, after: Any, where: str = "") -> list[str]:
    """The dotted paths at which two parsed configs differ (``imports``, the files loaded, in any order:
    containerd lists them from a map)."""
    if where == "imports" and isinstance(before, list) and isinstance(after, list):
        return [] if sorted(before) == sorted(after) else [where]
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in sorted(set(before) | set(after)):
            found += differences(before.get(key), after.get(key), f"{where}.{key}" if where else key)
        return found
    return [] if before == after else [where]


def runtimes(dump: dict[str, Any]) -> dict[str, Any]:
    """The CRI runtimes of a ``config dump``."""
    found: dict[str, Any] = dump["plugins"][CRI]["containerd"]["runtimes"]
    return found


SHAPES = [
    pytest.param({"/etc/containerd/config.toml": KUBEADM}, "runc", id="kubeadm-v2-systemd-cgroup"),
    pytest.param(
        {
            "/etc/containerd/config.toml": IMPORTS_MAIN,
            "/etc/containerd/conf.d/10-debug.toml": IMPORTS_DROPIN_DEBUG,
            "/etc/containerd/conf.d/20-cri.toml": IMPORTS_DROPIN_CRI,
        },
        "runc",
        id="imports-already-present",
    ),
    pytest.param({"/etc/containerd/config.toml": NVIDIA_DEFAULT}, "nvidia", id="nvidia-default-runtime"),
    pytest.param({"/etc/containerd/config.toml": VERSION_1}, "runc", id="version-1-without-version"),
    pytest.param({"/etc/containerd/config.toml": "debian"}, "runc", id="debian-shipped-config"),
    pytest.param({}, "runc", id="no-config-file"),
]


@pytest.mark.parametrize(("files", "base"), SHAPES)
def test_config_dump_shows_the_handler_and_every_earlier_setting(
    tmp_path: Path, files: dict[str, str], base: str
) -> None:
    """config dump + CRI plugin status: after install the merged config has our handler (BinaryName = the
    runtime wrapper, the base runtime's options, SystemdCgroup and all) and differs in nothing else; the
    daemon loads its CRI plugin; uninstall restores every byte."""
    if files.get("/etc/containerd/config.toml") == "debian":
        if not DEBIAN_CONFIG.is_file():
            pytest.skip("Debian's containerd package config is not installed")
        files = {"/etc/containerd/config.toml": DEBIAN_CONFIG.read_bytes().decode()}
    node = write_node(tmp_path / "node", files)
    original = tree_bytes(node)
    before = config_dump(node, tmp_path / "dump")
    proc = gpu_env_hook("install", "--engine", "containerd", "--root", str(node), "--python", PYTHON)
    assert proc.returncode == 0, proc.stderr
    after = config_dump(node, tmp_path / "dump")
    changed = [f"plugins.{CRI}.containerd.runtimes.{HANDLER}"]
    if not files:  # config default (no file) lists no imports; config dump lists the file install wrote
        changed.insert(0, "imports")
    assert differences(before, after) == changed
    handler = runtimes(after)[HANDLER]
    expected_options = {
        **runtimes(before)[base]["options"],
        "BinaryName": paths.runtime_wrapper("containerd"),
    }
    assert handler["options"] == expected_options
    assert handler["runtime_type"] == "io.containerd.runc.v2"
    with running(node, tmp_path / "daemon") as daemon:
        assert daemon.plugin_status("cri") == {"io.containerd.grpc.v1": "ok"}, daemon.log()
    proc = gpu_env_hook("uninstall", "--engine", "containerd", "--root", str(node))
    assert proc.returncode == 0, proc.stderr
    assert tree_bytes(node) == original


def test_imports_edit_goes_to_the_file_whose_cri_table_containerd_uses(tmp_path: Path) -> None:
    """config dump: with a drop-in holding the CRI table (containerd 1.x uses it whole), the handler is
    appended to that drop-in and the main config keeps its bytes."""
    node = write_node(
        tmp_path / "node",
        {
            "/etc/containerd/config.toml": IMPORTS_MAIN,
            "/etc/containerd/conf.d/20-cri.toml": IMPORTS_DROPIN_CRI,
        },
    )
    proc = gpu_env_hook("install", "--engine", "containerd", "--root", str(node), "--python", PYTHON)
    assert proc.returncode == 0, proc.stderr
    assert (node / "etc/containerd/config.toml").read_text() == IMPORTS_MAIN
    dropin = (node / "etc/containerd/conf.d/20-cri.toml").read_text()
    assert dropin.startswith(IMPORTS_DROPIN_CRI + "\n# gpu-env-hook: begin")
    after = config_dump(node, tmp_path / "dump")
    assert after["plugins"][CRI]["sandbox_image"] == "registry.example.com/pause:dropin"
    assert runtimes(after)[HANDLER]["options"]["SystemdCgroup"] is True


def test_containerd_refuses_what_install_refuses(tmp_path: Path) -> None:
    """config dump: a version-2 drop-in under a version-1 main config is one containerd cannot load either;
    install refuses it in one line and writes nothing."""
    node = write_node(
        tmp_path / "node",
        {
            "/etc/containerd/config.toml": 'imports = ["/etc/containerd/conf.d/*.toml"]\n' + VERSION_1,
            "/etc/containerd/conf.d/gpu.toml": IMPORTS_DROPIN_DEBUG,
        },
    )
    original = tree_bytes(node)
    with pytest.raises(ContainerdError, match="invalid plugin key URI"):
        config_dump(node, tmp_path / "dump")
    proc = gpu_env_hook("install", "--engine", "containerd", "--root", str(node), "--python", PYTHON)
    dropin = node / "etc/containerd/conf.d/gpu.toml"
    assert proc.returncode != 0
    assert proc.stderr == (
        f"gpu-env-hook: {dropin}: config version 2 is newer than the main config's (1); containerd refuses "
        "that; fix it first\n"
    )
    assert tree_bytes(node) == original


# --- a pod through the handler, as kubelet starts it ------------------------------------------------------

ENV_FILE = "# written by the device plugin\nNVIDIA_VISIBLE_DEVICES=1,2\nUSER_CUSTOM_ENV=hello\n"


def installed_with_env_file(tmp_path: Path, text: str, mode: int) -> tuple[Path, Path, Path]:
    """The node of the CRI env-file tests: an env file holding ``text`` (root's, ``mode``) in the hook's
    ``[env-file]`` directory, the stand-in cli recording its call, ``install --engine containerd`` done.
    Returns the node tree, the env file and the cli's record."""
    record = tmp_path / "cli-record.json"
    env_file = tmp_path / "nvidia-env" / "pod.env"
    env_file.parent.mkdir()
    env_file.write_text(text)
    env_file.chmod(mode)
    hook_config = (
        "[nvidia-container-cli]\n"
        f'path = "{STANDIN_CLI}"\n'
        f'environment = ["STANDIN_RECORD={record}"]\n'
        "[env-file]\n"
        f'directories = ["{env_file.parent}"]\n'
    )
    node = write_node(
        tmp_path / "node", {"/etc/containerd/config.toml": CRI_TEST_CONFIG, CONFIG: hook_config}
    )
    proc = gpu_env_hook(
        "install", "--engine", "containerd", "--root", str(node), "--python", PYTHON, "--config", CONFIG
    )
    assert proc.returncode == 0, proc.stderr
    return node, env_file, record


def run_env_in_pod(
    daemon: Containerd, workdir: Path, image_archive: Path, env_file: Path
) -> tuple[Any, list[str]]:
    """Run ``/bin/env`` through the handler in a pod (CRI, as kubelet does) naming ``env_file``; return
    its status and output."""
    daemon.import_image(image_archive)
    client = CriClient(daemon.address)
    try:
        return run_in_pod(
            client,
            workdir=workdir,
            handler=HANDLER,
            image=CONTAINERD_IMAGE,
            command=["/bin/env"],
            env={"NVIDIA_ENV_FROM_FILE": str(env_file)},
        )
    finally:
        client.close()


@pytest.mark.parametrize(
    "pin",
    [
        pytest.param("", id="unpinned-file"),
        pytest.param(
            # run_in_pod's sandbox uid: containerd passes it as io.kubernetes.cri.sandbox-uid.
            "GPU_ENV_HOOK_POD_UID=uid-gpu\n",
            id="file-pinned-to-the-pod",
        ),
        pytest.param(
            # run_in_pod's pod "gpu" in "default" (what pod-resources List() gives a device plugin):
            # containerd passes them as io.kubernetes.cri.sandbox-namespace / -name.
            "GPU_ENV_HOOK_POD_NAMESPACE=default\nGPU_ENV_HOOK_POD_NAME=gpu\n",
            id="file-pinned-by-namespace-and-name",
        ),
    ],
)
def test_cri_pod_through_the_handler_gets_the_env_file(
    tmp_path: Path, containerd_image_archive: Path, pin: str
) -> None:
    """CRI: RunPodSandbox(runtime_handler=gpu-env) / CreateContainer / StartContainer on a real containerd
    after install: the container's process sees the env file's variables, the cli gets the file's devices;
    the pod stops and is removed; uninstall restores the config's bytes. A file pinned to the pod is
    checked against containerd's own sandbox-uid annotation."""
    node, env_file, record = installed_with_env_file(tmp_path, ENV_FILE + pin, 0o644)
    with running(node, tmp_path / "daemon") as daemon:
        status, stdout = run_env_in_pod(daemon, tmp_path, containerd_image_archive, env_file)
        assert (status.exit_code, status.reason) == (0, "Completed"), daemon.log()
    assert "NVIDIA_VISIBLE_DEVICES=1,2" in stdout
    assert "USER_CUSTOM_ENV=hello" in stdout
    found = load_record(record)
    assert found is not None, "the hook did not run nvidia-container-cli"
    assert "--device=1,2" in found["argv"]
    assert gpu_env_hook("uninstall", "--engine", "containerd", "--root", str(node)).returncode == 0
    assert (node / "etc/containerd/config.toml").read_text() == CRI_TEST_CONFIG


def test_cri_pod_of_another_name_is_refused_the_file(tmp_path: Path, containerd_image_archive: Path) -> None:
    """A file pinned by namespace and name to another pod: the container is refused through a real containerd
    (its own sandbox-name annotation differs), the cli never runs."""
    pin = "GPU_ENV_HOOK_POD_NAMESPACE=default\nGPU_ENV_HOOK_POD_NAME=victim\n"
    node, env_file, record = installed_with_env_file(tmp_path, ENV_FILE + pin, 0o600)
    refusal = (
        f"env file '{env_file}': is pinned to another pod (annotation io.kubernetes.cri.sandbox-name differs)"
    )
    with running(node, tmp_path / "daemon") as daemon, pytest.raises(Exception, match=re.escape(refusal)):
        run_env_in_pod(daemon, tmp_path, containerd_image_archive, env_file)
    assert load_record(record) is None
    assert gpu_env_hook("uninstall", "--engine", "containerd", "--root", str(node)).returncode == 0


# --- doctor, reading containerd config dump ---------------------------------------------------------------


def doctor_line(node: Path, workdir: Path, name: str) -> str:
    """Run ``gpu-env-hook doctor`` on the node (in the mount namespace: containerd config dump sees the
    node's files) and return the line of check ``name``."""
    proc = subprocess.run(
        namespace_argv(node, workdir, [PYTHON, "-I", "-m", "hook", "doctor"]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    found = [line for line in proc.stdout.splitlines() if line[3:].startswith(name + " ")]
    assert len(found) == 1, proc.stdout + proc.stderr
    return " ".join(found[0].split())


@pytest.mark.parametrize(
    ("main", "expected"),
    [
        pytest.param(
            "version = 2\n",
            "✗ containerd drop-ins /etc/containerd/conf.d/99-nvidia.toml: no imports line loads it (per "
            'containerd config dump) — add imports = ["/etc/containerd/conf.d/*.toml"] to '
            "/etc/containerd/config.toml and restart containerd, or remove the file",
            id="not-imported",
        ),
        pytest.param(
            'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n',
            "✓ containerd drop-ins every file in /etc/containerd/conf.d is loaded (per containerd config dump)",
            id="imported",
        ),
    ],
)
def test_doctor_reports_a_dropin_no_import_loads(tmp_path: Path, main: str, expected: str) -> None:
    """config dump: doctor asks the real containerd which files it loads and names a drop-in it does not."""
    node = write_node(
        tmp_path / "node",
        {
            "/etc/containerd/config.toml": main,
            "/etc/containerd/conf.d/99-nvidia.toml": IMPORTS_DROPIN_DEBUG,
        },
    )
    assert doctor_line(node, tmp_path / "ns", "containerd drop-ins") == expected


def test_cri_running_container_through_the_handler_stops_and_goes(
    tmp_path: Path, containerd_image_archive: Path
) -> None:
    """CRI: a long-running container started through the handler is RUNNING, and StopPodSandbox /
    RemovePodSandbox (kill and delete pass through the shim) leave no shim and no container process."""
    node = write_node(tmp_path / "node", {"/etc/containerd/config.toml": CRI_TEST_CONFIG})
    proc = gpu_env_hook("install", "--engine", "containerd", "--root", str(node), "--python", PYTHON)
    assert proc.returncode == 0, proc.stderr
    with running(node, tmp_path / "daemon") as daemon:
        daemon.import_image(containerd_image_archive)
        client = CriClient(daemon.address)
        try:
            pod = start_pod(
                client,
                workdir=tmp_path,
                handler=HANDLER,
                image=CONTAINERD_IMAGE,
                command=["/bin/sleep", "600"],
                env={},
            )
            assert client.container_status(pod.container).state == client.pb.CONTAINER_RUNNING
            remove_pod(client, pod.sandbox)
        finally:
            client.close()
        assert daemon.shim_pids() == []


def proc_view(where: Path, pids: list[int]) -> Path:
    """A /proc holding only init and ``pids`` (links to the real entries): the node's processes as this
    daemon's test sees them, with no other test's shims in it."""
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    for pid in [1, *pids]:
        (where / str(pid)).symlink_to(f"/proc/{pid}")
    return where


def test_uninstall_while_a_pod_runs_through_the_handler_leaves_it_stoppable(
    tmp_path: Path, containerd_image_archive: Path
) -> None:
    """CRI: uninstall while a pod runs through the handler keeps the runtime wrapper as a passthrough (its
    shim's bundle names it); containerd, which keeps the handler until it restarts, then stops and removes
    the pod through it with no shim left; a later ``uninstall --purge`` leaves the node tree as before."""
    node = write_node(tmp_path / "node", {"/etc/containerd/config.toml": CRI_TEST_CONFIG})
    original = tree_bytes(node)
    proc = gpu_env_hook("install", "--engine", "containerd", "--root", str(node), "--python", PYTHON)
    assert proc.returncode == 0, proc.stderr
    with running(node, tmp_path / "daemon") as daemon:
        daemon.import_image(containerd_image_archive)
        client = CriClient(daemon.address)
        try:
            pod = start_pod(
                client,
                workdir=tmp_path,
                handler=HANDLER,
                image=CONTAINERD_IMAGE,
                command=["/bin/sleep", "600"],
                env={},
            )
            view = proc_view(tmp_path / "proc", daemon.shim_pids())
            proc = gpu_env_hook(
                "uninstall", "--engine", "containerd", "--root", str(node), "--proc", str(view)
            )
            assert proc.returncode == 0, proc.stderr
            kept = f"kept {node}{paths.runtime_wrapper('containerd')} as a passthrough to "
            assert kept in proc.stdout
            assert "still use it: containerd-shim-runc-v2 pid" in proc.stdout
            assert (node / "etc/containerd/config.toml").read_text() == CRI_TEST_CONFIG
            assert client.container_status(pod.container).state == client.pb.CONTAINER_RUNNING
            remove_pod(client, pod.sandbox)
        finally:
            client.close()
        assert daemon.shim_pids() == []
    view = proc_view(tmp_path / "proc", [])
    proc = gpu_env_hook("uninstall", "--purge", "--root", str(node), "--proc", str(view))
    assert proc.returncode == 0, proc.stderr
    assert tree_bytes(node) == original


def test_k3s_template_renders_to_a_config_containerd_accepts(tmp_path: Path) -> None:
    """config dump: the config.toml.tmpl install writes for k3s, rendered as k3s renders it (its generated
    config in place of the base template), is the generated config plus exactly the handler."""
    k3s = "/var/lib/rancher/k3s/agent/etc/containerd"
    node = write_node(tmp_path / "node", {f"{k3s}/config.toml": KUBEADM})
    proc = gpu_env_hook(
        "install",
        "--engine",
        "containerd",
        "--root",
        str(node),
        "--python",
        PYTHON,
        "--containerd-config",
        f"{k3s}/config.toml.tmpl",
    )
    assert proc.returncode == 0, proc.stderr
    template = (node / k3s.lstrip("/") / "config.toml.tmpl").read_text()
    rendered = template.replace('{{ template "base" . }}', KUBEADM.rstrip("\n"))
    before = config_dump(
        write_node(tmp_path / "before", {"/etc/containerd/config.toml": KUBEADM}), tmp_path / "d1"
    )
    after = config_dump(
        write_node(tmp_path / "after", {"/etc/containerd/config.toml": rendered}), tmp_path / "d2"
    )
    assert differences(before, after) == [f"plugins.{CRI}.containerd.runtimes.{HANDLER}"]
    assert runtimes(after)[HANDLER]["options"]["SystemdCgroup"] is True


NRI = "io.containerd.nri.v1.nri"
V3_NRI_OFF = f"""\
version = 3
imports = ["/etc/containerd/conf.d/*.toml"]

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "registry.example.com/pause:3.10"

[plugins."{NRI}"]
  disable = true
  plugin_request_timeout = "3s"
"""


@pytest.mark.skipif(containerd2() is None, reason="needs GPU_ENV_HOOK_CONTAINERD2 (containerd 2.x)")
def test_nri_is_switched_back_on_by_the_dropin_on_containerd_2(tmp_path: Path) -> None:
    """containerd 2.x's config dump: a version-3 config that turns NRI off and imports conf.d gets the
    handler and NRI switched on by install's drop-in, every other setting (the NRI table's own timeout too)
    as it was; uninstall restores every byte. The version check runs the same 2.x binary."""
    binary = containerd2()
    assert binary is not None
    node = write_node(tmp_path / "node", {"/etc/containerd/config.toml": V3_NRI_OFF})
    (node / "etc/containerd/conf.d").mkdir()
    (node / "opt").mkdir()
    (node / "opt/containerd").symlink_to(binary)
    original = tree_bytes(node)
    before = config_dump(node, tmp_path / "dump", binary=str(binary))
    proc = gpu_env_hook(
        "install", "--engine", "containerd", "--root", str(node), "--python", PYTHON,
        "--nri", "--containerd-binary", "/opt/containerd",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    after = config_dump(node, tmp_path / "dump", binary=str(binary))
    runtime = "io.containerd.cri.v1.runtime"
    assert sorted(differences(before, after)) == [
        f"plugins.{runtime}.containerd.runtimes.{HANDLER}",
        f"plugins.{NRI}.disable",
    ]
    assert (node / "etc/containerd/config.toml").read_text() == V3_NRI_OFF
    assert (node / "etc/containerd/conf.d" / paths.CONTAINERD_DROPIN_NAME).is_file()
    assert after["plugins"][NRI]["disable"] is False
    assert after["plugins"][NRI]["plugin_request_timeout"] == "3s"
    assert (node / "etc/systemd/system/gpu-env-hook-nri.service").is_file()
    proc = gpu_env_hook("uninstall", "--engine", "containerd", "--root", str(node))
    assert proc.returncode == 0, proc.stderr
    assert tree_bytes(node) == original

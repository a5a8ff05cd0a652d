"""Unit tests for hook.commands.doctor: each check on a tree built under ``--root``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from record_helpers import replaced
from typer.testing import CliRunner

from hook.commands.cli import build_app
from hook.commands.doctor import Check, check_isolated, check_nri, check_pod_binding, run_checks
from hook.install.guard import guard_spec
from hook.pipeline.config import parse_config
from hook.util import paths

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="ownership checks expect root-owned trees")
WRAPPER = '#!/bin/sh\nexec /usr/bin/python3 -I -m hook "$@"\n'


def put(root: Path, path: str, content: str, mode: int = 0o644) -> Path:
    """Write a file at an absolute path inside the tree."""
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, encoding="utf-8")
    target.chmod(mode)
    return target


@pytest.fixture
def good_tree(tmp_path: Path) -> Path:
    """A node tree where every check passes: cli, env dir, podman with our hook JSON and an isolated wrapper."""
    root = tmp_path / "root"
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    put(root, "/usr/bin/nvidia-container-cli", "#!/bin/sh\n", 0o755)
    put(root, "/usr/bin/podman", "#!/bin/sh\n", 0o755)
    put(root, paths.HOOK_WRAPPER, WRAPPER, 0o755)
    hook_json = {
        "version": "1.0.0",
        "hook": {"path": paths.HOOK_WRAPPER, "args": ["gpu-env-hook", "prestart"]},
        "when": {"always": True},
        "stages": ["prestart"],
    }
    put(root, f"{paths.OCI_HOOKS_DIRS[0]}/{paths.HOOK_JSON_NAME}", json.dumps(hook_json))
    add_record(root, "podman")
    (root / "run" / "nvidia-env").mkdir(parents=True, mode=0o755)
    for directory in (root / "usr", root / "run", root / "run" / "nvidia-env"):
        directory.chmod(0o755)
    return root


def add_record(root: Path, engine: str) -> None:
    """Write the install record `install --engine ENGINE` leaves (doctor reads which engines are ours)."""
    record = {"version": 1, "engine": engine, "files": [], "directories": []}
    put(root, paths.install_record(engine), json.dumps(record), 0o600)


def by_name(checks: list[Check]) -> dict[str, Check]:
    """Index checks by name."""
    return {check.name: check for check in checks}


def test_good_tree_passes_every_check(good_tree: Path) -> None:
    """On a complete node every check is ✓ or not applicable, and doctor exits 0."""
    checks = run_checks(root=str(good_tree), config=None, environ={})
    assert [check.name for check in checks] == [
        "config",
        "installed for",
        "nvidia-container-cli",
        "env dir /run/nvidia-env",
        "device mode",
        "NVIDIA CDI spec",
        "skipped CDI specs",
        "YAML specs",
        "CDI spec cache",
        "podman",
        "CRI-O",
        "containerd",
        "Docker",
        "containerd drop-ins",
        f"isolated {paths.HOOK_WRAPPER}",
        "pod binding",
        "NRI plugin",
        "env-file guard",
        "NVIDIA hooks.d entry",
        "NVIDIA runtime mode",
        "hooks.d executables",
        "runtime tree",
    ]
    oks = [
        True,
        True,
        True,
        True,
        None,
        None,
        None,
        True,
        None,
        True,
        None,
        None,
        None,
        None,
        True,
        None,
        None,
        None,
        True,
        None,
        True,
        None,
    ]
    assert [check.ok for check in checks] == oks
    result = CliRunner().invoke(build_app(), ["doctor", "--root", str(good_tree)])
    assert result.exit_code == 0
    assert result.stdout.splitlines()[9].split() == [
        "✓",
        "podman",
        "hook",
        "registered",
        "in",
        (f"{paths.OCI_HOOKS_DIRS[0]}/{paths.HOOK_JSON_NAME}"),
    ]


def break_wrapper(root: Path) -> None:
    """Make the wrapper start Python without -I."""
    put(root, paths.HOOK_WRAPPER, '#!/bin/sh\nexec /usr/bin/python3 -m hook "$@"\n', 0o755)


def break_env_dir(root: Path) -> None:
    """Make the env directory world-writable."""
    (root / "run" / "nvidia-env").chmod(0o777)


def open_spec_cache(root: Path) -> None:
    """CDI mode, and a spec cache directory others may read (so the stages do not use it)."""
    put(root, "/etc/nvidia-container-runtime/config.toml", '[gpu-env]\ndevice-mode = "cdi"\n')
    (root / "run" / "gpu-env-hook" / "cdi-specs").mkdir(parents=True, mode=0o755)


def remove_hook_json(root: Path) -> None:
    """Remove our oci-hooks.d file."""
    (root / paths.OCI_HOOKS_DIRS[0].lstrip("/") / paths.HOOK_JSON_NAME).unlink()


def invalid_hook_json(root: Path) -> None:
    """Write an oci-hooks.d file that breaks the 1.0.0 schema."""
    put(root, f"{paths.OCI_HOOKS_DIRS[0]}/{paths.HOOK_JSON_NAME}", json.dumps({"version": "1.0.0"}))


def add_docker(root: Path) -> None:
    """Install dockerd with no runtime registered (gpu-env-hook not installed for it)."""
    put(root, "/usr/bin/dockerd", "#!/bin/sh\n", 0o755)


def add_docker_installed_unregistered(root: Path) -> None:
    """Install dockerd, record an install for it, and leave no runtime registered."""
    add_docker(root)
    add_record(root, "docker")


def add_registered_containerd(root: Path) -> None:
    """Install containerd with the handler in a drop-in its main config imports."""
    put(root, "/usr/bin/containerd", "#!/bin/sh\n", 0o755)
    add_record(root, "containerd")
    put(root, paths.CONTAINERD_CONFIG, f'version = 2\nimports = ["{paths.CONTAINERD_DROPIN_DIR}/*.toml"]\n')
    put(
        root,
        f"{paths.CONTAINERD_DROPIN_DIR}/{paths.CONTAINERD_DROPIN_NAME}",
        f'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpu-env.options]\n'
        f'BinaryName = "{paths.runtime_wrapper("containerd")}"\n',
    )
    put(root, paths.runtime_wrapper("containerd"), WRAPPER, 0o755)


def add_dead_containerd_dropin(root: Path) -> None:
    """Install containerd with the handler in a drop-in that no imports line loads."""
    add_registered_containerd(root)
    put(root, paths.CONTAINERD_CONFIG, "version = 2\n")


def add_guarded_containerd(root: Path) -> None:
    """containerd registered, and the env-file guard's spec as install writes it."""
    add_registered_containerd(root)
    put(root, paths.ENV_FILE_GUARD_SPEC, guard_spec().decode())


def add_guard_behind_a_link(root: Path) -> None:
    """The guard's spec in place, in a directory the node's /etc/cdi links to (an absolute link: the node's
    /var/lib/cdi, not the one of whoever runs doctor)."""
    add_registered_containerd(root)
    put(root, f"/var/lib/cdi/{Path(paths.ENV_FILE_GUARD_SPEC).name}", guard_spec().decode())
    (root / "etc/cdi").symlink_to("/var/lib/cdi")


def add_guard_cdi_off(root: Path) -> None:
    """The guard's spec in place, but containerd's config switches CDI off."""
    add_guarded_containerd(root)
    put(
        root,
        paths.CONTAINERD_CONFIG,
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = false\n',
    )


def add_guard_crio_dirs_without_etc_cdi(root: Path) -> None:
    """The guard's spec in place for CRI-O, but a crio.conf.d file reads CDI specs from elsewhere only."""
    put(root, "/usr/bin/crio", "#!/bin/sh\n", 0o755)
    add_record(root, "crio")
    put(root, paths.ENV_FILE_GUARD_SPEC, guard_spec().decode())
    put(root, "/etc/crio/crio.conf", '[crio.runtime]\ncdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]\n')
    put(root, f"{paths.CRIO_DROPIN_DIR}/50-cdi.conf", '[crio.runtime]\ncdi_spec_dirs = ["/var/run/cdi"]\n')


def add_guard_changed(root: Path) -> None:
    """The guard's spec with its mount's source changed (a path that could exist)."""
    add_guarded_containerd(root)
    put(root, paths.ENV_FILE_GUARD_SPEC, guard_spec().decode().replace("/proc/", "/tmp/"))


def bad_config(root: Path) -> None:
    """Write a config.toml with a wrong type."""
    put(root, "/etc/nvidia-container-runtime/config.toml", 'disable-require = "yes"\n')


def remove_cli(root: Path) -> None:
    """Remove nvidia-container-cli."""
    (root / "usr" / "bin" / "nvidia-container-cli").unlink()


@pytest.mark.parametrize(
    ("damage", "name", "ok", "detail"),
    [
        pytest.param(
            break_wrapper,
            f"isolated {paths.HOOK_WRAPPER}",
            False,
            "the wrapper starts Python without -I",
            id="wrapper-not-isolated",
        ),
        pytest.param(
            break_env_dir,
            "env dir /run/nvidia-env",
            False,
            "must not be group- or world-writable (mode 0777)",
            id="env-dir-writable",
        ),
        pytest.param(
            open_spec_cache,
            "CDI spec cache",
            False,
            f"{paths.CDI_SPEC_CACHE_DIR} must have mode 0700, has 0755: not used, each create decodes its YAML specs",
            id="spec-cache-not-private",
        ),
        pytest.param(
            remove_hook_json,
            "podman",
            False,
            f"/usr/bin/podman found, no {paths.HOOK_JSON_NAME} in "
            f"{paths.OCI_HOOKS_DIRS[0]} or {paths.OCI_HOOKS_DIRS[1]}",
            id="podman-unregistered",
        ),
        pytest.param(
            invalid_hook_json,
            "podman",
            False,
            f"{paths.OCI_HOOKS_DIRS[0]}/{paths.HOOK_JSON_NAME}: $: missing required property 'hook'",
            id="hook-json-invalid",
        ),
        pytest.param(
            add_docker_installed_unregistered,
            "Docker",
            False,
            f"/usr/bin/dockerd found, no runtime in {paths.DOCKER_DAEMON_JSON} names {paths.runtime_wrapper('docker')}",
            id="docker-installed-unregistered",
        ),
        pytest.param(
            add_docker,
            "Docker",
            None,
            "/usr/bin/dockerd found; gpu-env-hook is not installed for it (gpu-env-hook install --engine docker)",
            id="docker-present-not-ours",
        ),
        pytest.param(
            add_registered_containerd,
            "containerd",
            True,
            f"runtime handler {paths.RUNTIME_HANDLER} takes effect from "
            f"{paths.CONTAINERD_DROPIN_DIR}/{paths.CONTAINERD_DROPIN_NAME} (a drop-in)",
            id="containerd-registered",
        ),
        pytest.param(
            add_registered_containerd,
            "containerd drop-ins",
            True,
            f"every file in {paths.CONTAINERD_DROPIN_DIR} is loaded (per the imports of {paths.CONTAINERD_CONFIG})",
            id="containerd-dropin-imported",
        ),
        pytest.param(
            add_dead_containerd_dropin,
            "containerd drop-ins",
            False,
            f"{paths.CONTAINERD_DROPIN_DIR}/{paths.CONTAINERD_DROPIN_NAME}: no imports line loads it (per the "
            f"imports of {paths.CONTAINERD_CONFIG})",
            id="containerd-dropin-not-imported",
        ),
        pytest.param(
            add_dead_containerd_dropin,
            "containerd",
            False,
            f"/usr/bin/containerd found, {paths.runtime_wrapper('containerd')} not registered",
            id="containerd-handler-only-in-a-dead-dropin",
        ),
        pytest.param(
            add_registered_containerd,
            "env-file guard",
            False,
            f"{paths.ENV_FILE_GUARD_SPEC}: missing (install writes it; a device plugin naming the device fails "
            "every container)",
            id="guard-missing",
        ),
        pytest.param(
            add_guarded_containerd,
            "env-file guard",
            True,
            f"{paths.ENV_FILE_GUARD_SPEC} in place: a container given {paths.ENV_FILE_GUARD_DEVICE} starts only "
            "once the NRI plugin or gpu-env-runtime applied its env file",
            id="guard-in-place",
        ),
        pytest.param(
            add_guard_behind_a_link,
            "env-file guard",
            True,
            f"{paths.ENV_FILE_GUARD_SPEC} in place: a container given {paths.ENV_FILE_GUARD_DEVICE} starts only "
            "once the NRI plugin or gpu-env-runtime applied its env file",
            id="guard-behind-the-nodes-etc-cdi-link",
        ),
        pytest.param(
            add_guard_changed,
            "env-file guard",
            False,
            f"{paths.ENV_FILE_GUARD_SPEC}: not the spec install writes (re-run install)",
            id="guard-changed",
        ),
        pytest.param(
            add_guard_cdi_off,
            "env-file guard",
            False,
            f"{paths.CONTAINERD_CONFIG}: enable_cdi = false in [plugins.'io.containerd.grpc.v1.cri']",
            id="guard-cdi-off",
        ),
        pytest.param(
            add_guard_crio_dirs_without_etc_cdi,
            "env-file guard",
            False,
            f"{paths.CRIO_DROPIN_DIR}/50-cdi.conf: cdi_spec_dirs in [crio.runtime] leaves out /etc/cdi",
            id="guard-crio-cdi-dirs",
        ),
        pytest.param(
            remove_cli,
            "nvidia-container-cli",
            False,
            "not found (/usr/local/sbin/nvidia-container-cli, /usr/local/bin/nvidia-container-cli...)",
            id="cli-missing",
        ),
    ],
)
def test_each_check_reports_what_is_wrong(
    good_tree: Path, damage: Callable[[Path], None], name: str, ok: bool, detail: str
) -> None:
    """A damaged tree turns exactly the matching check's line into what is wrong."""
    damage(good_tree)
    check = by_name(run_checks(root=str(good_tree), config=None, environ={}))[name]
    assert (check.ok, check.detail) == (ok, detail)
    assert ok is not False or check.fix


def test_bad_config_fails_and_the_other_checks_still_run(good_tree: Path) -> None:
    """A config that does not parse is ✗ with its one-line error; the rest run with defaults."""
    bad_config(good_tree)
    checks = run_checks(root=str(good_tree), config=None, environ={})
    assert checks[0].ok is False
    assert checks[0].detail.endswith("disable-require must be a boolean, got a string")
    assert len(checks) == 22


def test_doctor_exits_one_when_a_check_fails(good_tree: Path) -> None:
    """Any ✗ makes doctor exit 1 and prints what to do on that line."""
    break_env_dir(good_tree)
    result = CliRunner().invoke(build_app(), ["doctor", "--root", str(good_tree)])
    assert result.exit_code == 1
    assert (
        "— mkdir -p /run/nvidia-env && chown root:root /run/nvidia-env && chmod 0700 /run/nvidia-env"
        in result.stdout
    )


@pytest.mark.parametrize(
    ("path", "args", "ok"),
    [
        pytest.param("/usr/bin/python3", ["python3", "-I", "-m", "hook"], True, id="python-with-I"),
        pytest.param("/usr/bin/python3.11", ["python3", "-m", "hook"], False, id="python-without-I"),
        pytest.param("/usr/bin/python3", ["python3", "-IB", "-m", "hook"], True, id="flag-cluster"),
    ],
)
def test_python_as_the_entry_needs_isolate_flag_in_its_args(
    tmp_path: Path, path: str, args: list[str], ok: bool
) -> None:
    """An entry that runs Python itself must pass -I in its args."""
    assert check_isolated(str(tmp_path), path, args).ok is ok


@pytest.mark.parametrize(
    ("engine", "required", "ok", "detail"),
    [
        pytest.param(
            "containerd",
            True,
            True,
            "containerd: pins checked against io.kubernetes.cri.sandbox-uid, io.kubernetes.cri.sandbox-namespace, "
            "io.kubernetes.cri.sandbox-name, io.kubernetes.cri.container-name",
            id="containerd",
        ),
        pytest.param(
            "crio",
            False,
            True,
            "crio: pins checked against io.kubernetes.pod.uid, io.kubernetes.pod.namespace, io.kubernetes.pod.name, "
            "io.kubernetes.container.name",
            id="crio",
        ),
        pytest.param("none", False, None, "none (no engine set): pinned env files are refused", id="none"),
        pytest.param(
            "none",
            True,
            False,
            "none (no engine set): every env file is refused, as require-pod-binding is on",
            id="none-with-pins-required",
        ),
        pytest.param(
            "podman",
            False,
            None,
            "podman (podman's annotations are chosen by the user): pinned env files are refused",
            id="podman",
        ),
    ],
)
def test_check_pod_binding(engine: str, required: bool, ok: bool | None, detail: str) -> None:
    """The pod-binding check names the engine's keys, or says what is refused and how to set it."""
    settings = replaced(parse_config(None, suse=False, engine=engine).env_file, require_pod_binding=required)
    check = check_pod_binding(settings)
    assert (check.name, check.ok, check.detail) == ("pod binding", ok, detail)
    assert (check.fix == "") is (ok is True)


def test_pod_binding_engine_from_the_environment(good_tree: Path) -> None:
    """doctor reads GPU_ENV_HOOK_ENGINE as the hook does when config.toml does not name the engine."""
    checks = run_checks(root=str(good_tree), config=None, environ={"GPU_ENV_HOOK_ENGINE": "crio"})
    (binding,) = [check for check in checks if check.name == "pod binding"]
    assert binding.ok is True
    assert binding.detail.startswith("crio: ")


RUNTIMES_V3 = '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes'
GPU_ENV_V3 = (
    f'{RUNTIMES_V3}.gpu-env]\nruntime_type = "io.containerd.runc.v2"\n'
    f'{RUNTIMES_V3}.gpu-env.options]\nBinaryName = "{paths.runtime_wrapper("containerd")}"\n'
)
NVIDIA_V3 = (
    f'version = 3\n{RUNTIMES_V3}.nvidia]\nruntime_type = "io.containerd.runc.v2"\n'
    f'{RUNTIMES_V3}.nvidia.options]\nBinaryName = "/usr/bin/nvidia-container-runtime"\n'
)
CONF_D = f'imports = ["{paths.CONTAINERD_DROPIN_DIR}/*.toml"]\n'


@pytest.mark.parametrize(
    ("files", "ok", "detail"),
    [
        pytest.param(
            {
                paths.CONTAINERD_CONFIG: "version = 4\n" + CONF_D,
                f"{paths.CONTAINERD_DROPIN_DIR}/99-nvidia.toml": NVIDIA_V3,
                f"{paths.CONTAINERD_DROPIN_DIR}/{paths.CONTAINERD_DROPIN_NAME}": "version = 4\n" + GPU_ENV_V3,
            },
            True,
            f"runtime handler gpu-env takes effect from {paths.CONTAINERD_DROPIN_DIR}/"
            f"{paths.CONTAINERD_DROPIN_NAME} (a drop-in)",
            id="v4-dropin-beside-nvidias",
        ),
        pytest.param(
            {paths.CONTAINERD_CONFIG: "version = 3\n" + GPU_ENV_V3},
            True,
            f"runtime handler gpu-env takes effect from {paths.CONTAINERD_CONFIG} (the marked block in the main "
            "config)",
            id="v3-block-in-main",
        ),
        pytest.param(
            {
                paths.CONTAINERD_CONFIG: "version = 4\n" + CONF_D + GPU_ENV_V3,
                f"{paths.CONTAINERD_DROPIN_DIR}/{paths.CONTAINERD_DROPIN_NAME}": "version = 4\n" + GPU_ENV_V3,
            },
            True,
            f"runtime handler gpu-env takes effect from {paths.CONTAINERD_DROPIN_DIR}/"
            f"{paths.CONTAINERD_DROPIN_NAME} (a drop-in); also defined in {paths.CONTAINERD_CONFIG} (overridden)",
            id="dropin-overrides-main",
        ),
        pytest.param(
            {
                paths.CONTAINERD_CONFIG: "version = 4\n" + CONF_D + GPU_ENV_V3,
                f"{paths.CONTAINERD_DROPIN_DIR}/zz.toml": f"version = 4\n{RUNTIMES_V3}.gpu-env.options]\n"
                'BinaryName = "/usr/bin/runc"\n',
            },
            False,
            f"runtime handler gpu-env takes effect from {paths.CONTAINERD_DROPIN_DIR}/zz.toml, but runs "
            f"'/usr/bin/runc', not {paths.runtime_wrapper('containerd')}",
            id="later-dropin-changes-the-binary",
        ),
        pytest.param(
            {
                paths.CONTAINERD_CONFIG: "version = 2\n" + CONF_D + '[plugins."io.containerd.grpc.v1.cri"'
                f'.containerd.runtimes.gpu-env.options]\nBinaryName = "{paths.runtime_wrapper("containerd")}"\n',
                f"{paths.CONTAINERD_DROPIN_DIR}/10.toml": 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n'
                'sandbox_image = "pause:3.9"\n',
            },
            False,
            f"runtime handler gpu-env in {paths.CONTAINERD_CONFIG} does not take effect: a later file's CRI "
            "table replaces it (containerd 1.x uses only the last one)",
            id="v2-later-cri-table-replaces-it",
        ),
    ],
)
def test_doctor_names_the_containerd_handler_that_takes_effect(
    good_tree: Path, files: dict[str, str], ok: bool, detail: str
) -> None:
    """doctor reads the main config and its imports as containerd merges them and names the definition of
    the handler containerd runs with (a drop-in or the marked block), failing when it does not run ours."""
    put(good_tree, "/usr/bin/containerd", "#!/bin/sh\n", 0o755)
    put(good_tree, paths.runtime_wrapper("containerd"), WRAPPER, 0o755)
    for path, content in files.items():
        put(good_tree, path, content)
    check = by_name(run_checks(root=str(good_tree), config=None, environ={}))["containerd"]
    assert (check.ok, check.detail) == (ok, detail)


# --- the NRI path ------------------------------------------------------------------------------------------


def nri_tree(tmp_path: Path) -> Path:
    """A tree whose runtime serves NRI (a socket at /var/run/nri/nri.sock)."""
    root = tmp_path / "node"
    directory = root / paths.NRI_SOCKET.lstrip("/").rpartition("/")[0]
    directory.mkdir(parents=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(root / paths.NRI_SOCKET.lstrip("/")))
    listener.close()
    return root


PLUGIN_ARGV = ["/usr/bin/python3", "-I", "-m", "hook", "-config", "/etc/x.toml", "nri"]


@pytest.mark.parametrize(
    ("socket_there", "processes", "ok", "detail"),
    [
        pytest.param(
            False,
            [],
            None,
            "no NRI socket at /var/run/nri/nri.sock: pods take the runtime shim or hooks.d",
            id="no-nri",
        ),
        pytest.param(
            True,
            [(41, ["/usr/bin/containerd"]), (42, PLUGIN_ARGV)],
            True,
            "/var/run/nri/nri.sock present, gpu-env-hook nri running (pid 42): env-file pods take the NRI path on "
            "the default handler",
            id="plugin-running",
        ),
        pytest.param(
            True,
            [(43, [paths.HOOK_WRAPPER, "nri"])],
            True,
            "/var/run/nri/nri.sock present, gpu-env-hook nri running (pid 43): env-file pods take the NRI path on "
            "the default handler",
            id="plugin-through-the-wrapper",
        ),
        pytest.param(
            True,
            [(44, ["/usr/bin/python3", "-m", "hook", "prestart"]), (45, ["/usr/bin/nri-thing", "nri"])],
            None,
            "/var/run/nri/nri.sock present, gpu-env-hook nri not running: pods take the runtime shim or hooks.d",
            id="plugin-not-running",
        ),
    ],
)
def test_check_nri(
    tmp_path: Path, socket_there: bool, processes: list[tuple[int, list[str]]], ok: bool | None, detail: str
) -> None:
    """doctor says whether the runtime serves NRI and whether our plugin runs: which path a pod takes."""
    root = nri_tree(tmp_path) if socket_there else tmp_path
    check = check_nri(str(root), processes)
    assert (check.name, check.ok, check.detail) == ("NRI plugin", ok, detail)


def test_check_nri_follows_the_nodes_var_run_link_beneath_the_root(tmp_path: Path) -> None:
    """doctor --root /host (run in a pod that sees the node there): the node's /var/run is a link to /run, as
    on Debian, Ubuntu and RHEL; the socket is found at the node's /run/nri, not at the pod's own /run."""
    root = tmp_path / "node"
    (root / "run/nri").mkdir(parents=True)
    (root / "var").mkdir()
    (root / "var/run").symlink_to("/run")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(root / "run/nri/nri.sock"))
    listener.close()
    check = check_nri(str(root), [], ("containerd",))
    assert check.detail == (
        "/var/run/nri/nri.sock present, gpu-env-hook nri not running: pods take the runtime shim (handler gpu-env)"
    )


def test_doctor_finds_cdi_specs_through_the_nodes_var_run_link(tmp_path: Path) -> None:
    """gpu-env-hook doctor --root (a pod that sees the node at /host): the node's /var/run is a link to /run,
    and NVIDIA's spec in the node's /run/cdi is found there, not looked for in the pod's own /run/cdi."""
    root = tmp_path / "node"
    (root / "run/cdi").mkdir(parents=True)
    (root / "var").mkdir()
    (root / "var/run").symlink_to("/run")
    for directory in (root, root / "run", root / "run/cdi"):
        directory.chmod(0o755)
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"env": ["A=1"]}}],
    }
    put(root, "/run/cdi/nvidia.json", json.dumps(spec))
    assert doctor_lines(root)["NVIDIA CDI spec"] == (
        f"{root}/run/cdi/nvidia.json: cdiVersion 0.5.0, 1 devices, current"
    )


def doctor_lines(root: Path) -> dict[str, str]:
    """Run gpu-env-hook doctor --root ROOT as a user does and return its lines by check name."""
    proc = subprocess.run(
        [sys.executable, "-I", "-m", "hook", "doctor", "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return {line[3:28].rstrip(): line[28:] for line in proc.stdout.splitlines()}


CONTAINERD_IMPORTS = "version = 3\nimports = ['/etc/containerd/conf.d/*.toml']\n"


@pytest.mark.parametrize(
    ("engine", "files", "line"),
    [
        pytest.param(
            "containerd",
            {
                "/etc/containerd/config.toml": CONTAINERD_IMPORTS,
                "/etc/containerd/conf.d/10-nri.toml": "version = 3\n[plugins.'io.containerd.nri.v1.nri']\n"
                "  socket_path = '/run/custom/nri.sock'\n",
            },
            "/run/custom/nri.sock present; the plugin is not looked for under --root",
            id="containerd-socket-path-in-a-drop-in",
        ),
        pytest.param(
            "crio",
            {
                "/etc/crio/crio.conf": "[crio.nri]\nnri_listen = '/var/run/nri/nri.sock'\n",
                "/etc/crio/crio.conf.d/10-nri.conf": "[crio.nri]\nnri_listen = '/run/custom/nri.sock'\n",
            },
            "/run/custom/nri.sock present; the plugin is not looked for under --root",
            id="crio-nri-listen-in-a-drop-in",
        ),
        pytest.param(
            "crio",
            {"/etc/crio/crio.conf.d/10-nri.conf": "[crio.nri]\nenable_nri = false\n"},
            "NRI off: CRI-O's [crio.nri] enable_nri = false: pods take the runtime shim (handler gpu-env) or "
            "hooks.d",
            id="crio-nri-off",
        ),
    ],
)
def test_doctor_finds_the_nri_socket_the_engine_is_configured_with(
    tmp_path: Path, engine: str, files: dict[str, str], line: str
) -> None:
    """doctor's NRI line looks at the socket the engine's config names (containerd's socket_path with its
    imports, CRI-O's nri_listen as its files merge), not only the default one, and says when CRI-O's
    config switches NRI off; the default socket present too does not count."""
    root = nri_tree(tmp_path)
    for path, content in files.items():
        put(root, path, content)
    (root / "run/custom").mkdir(parents=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(root / "run/custom/nri.sock"))
    listener.close()
    add_record(root, engine)
    assert doctor_lines(root)["NRI plugin"] == line


@pytest.mark.parametrize(
    ("installed", "unit", "detail", "fix"),
    [
        pytest.param(
            ("containerd",),
            True,
            "/var/run/nri/nri.sock present, gpu-env-hook nri not running; unit gpu-env-hook-nri written: pods "
            "take the runtime shim (handler gpu-env)",
            "systemctl daemon-reload && systemctl enable --now gpu-env-hook-nri",
            id="unit-written-not-started",
        ),
        pytest.param(
            ("podman", "crio"),
            False,
            "/var/run/nri/nri.sock present, gpu-env-hook nri not running: pods take the runtime shim (handler "
            "gpu-env) or hooks.d",
            "to use NRI, install --engine containerd --nri (docs/nri.md)",
            id="shim-and-hooks-d",
        ),
        pytest.param(
            (),
            False,
            "/var/run/nri/nri.sock present, gpu-env-hook nri not running: pods take no gpu-env-hook path "
            "(nothing installed)",
            "to use NRI, install --engine containerd --nri (docs/nri.md)",
            id="nothing-installed",
        ),
    ],
)
def test_check_nri_names_the_path_a_pod_takes(
    tmp_path: Path, installed: tuple[str, ...], unit: bool, detail: str, fix: str
) -> None:
    """Without the plugin running, doctor names the path an env-file pod takes by what is installed, and
    says how to start a unit install --nri wrote."""
    from hook.install.nri import UNIT_PATH

    root = nri_tree(tmp_path)
    if unit:
        (root / UNIT_PATH.lstrip("/")).parent.mkdir(parents=True)
        (root / UNIT_PATH.lstrip("/")).write_text("[Unit]\n")
    check = check_nri(str(root), [], installed)
    assert (check.ok, check.detail, check.fix) == (None, detail, fix)

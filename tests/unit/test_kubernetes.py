"""packaging/kubernetes: the manifests parse, refer to each other consistently, and the DaemonSet's script
installs on start and uninstalls on termination (run here against a node tree)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hook import paths

KUBERNETES = Path(__file__).resolve().parents[2] / "packaging" / "kubernetes"
PYTHON = os.path.abspath(sys.executable)  # noqa: PTH100 - a venv's python must keep its symlinked path


def load(name: str) -> list[dict[str, Any]]:
    """Every document of one manifest file."""
    with (KUBERNETES / name).open(encoding="utf-8") as fh:
        return [doc for doc in yaml.safe_load_all(fh) if doc is not None]


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The manifest's objects by kind (each kind once)."""
    kinds = [doc["kind"] for doc in docs]
    assert len(kinds) == len(set(kinds)), kinds
    return {doc["kind"]: doc for doc in docs}


@pytest.fixture(scope="module")
def objects() -> dict[str, dict[str, Any]]:
    """The objects of gpu-env-hook.yaml."""
    return by_kind(load("gpu-env-hook.yaml"))


@pytest.fixture(scope="module")
def pod(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The DaemonSet's pod spec."""
    spec: dict[str, Any] = objects["DaemonSet"]["spec"]["template"]["spec"]
    return spec


@pytest.fixture(scope="module")
def container(pod: dict[str, Any]) -> dict[str, Any]:
    """The DaemonSet's one container."""
    (only,) = pod["containers"]
    found: dict[str, Any] = only
    return found


def test_manifest_holds_the_objects_it_needs(objects: dict[str, dict[str, Any]]) -> None:
    """One file deploys the namespace, the ServiceAccount, its RBAC and the DaemonSet."""
    assert sorted(objects) == ["ClusterRole", "DaemonSet", "Namespace", "RoleBinding", "ServiceAccount"]


def test_namespace_allows_privileged_pods(objects: dict[str, dict[str, Any]]) -> None:
    """Pod Security admission must let the privileged DaemonSet in."""
    labels = objects["Namespace"]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"


def test_objects_live_in_the_namespace(objects: dict[str, dict[str, Any]]) -> None:
    """Namespaced objects are in the manifest's namespace."""
    namespace = objects["Namespace"]["metadata"]["name"]
    for kind in ("ServiceAccount", "RoleBinding", "DaemonSet"):
        assert objects[kind]["metadata"]["namespace"] == namespace, kind


def test_rbac_refers_to_the_objects_it_binds(objects: dict[str, dict[str, Any]]) -> None:
    """The RoleBinding binds the manifest's ClusterRole to the DaemonSet's ServiceAccount, and no more."""
    binding, role, account = objects["RoleBinding"], objects["ClusterRole"], objects["ServiceAccount"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": account["metadata"]["namespace"],
        }
    ]
    assert role["rules"] == [
        {
            "apiGroups": ["security.openshift.io"],
            "resources": ["securitycontextconstraints"],
            "resourceNames": ["privileged"],
            "verbs": ["use"],
        }
    ]


def test_pod_uses_the_service_account_without_a_token(
    objects: dict[str, dict[str, Any]], pod: dict[str, Any]
) -> None:
    """The pod runs as the manifest's ServiceAccount and mounts no API token (it needs no API access)."""
    assert pod["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is False
    assert objects["ServiceAccount"]["automountServiceAccountToken"] is False


def test_daemonset_selector_matches_its_pods(objects: dict[str, dict[str, Any]]) -> None:
    """The DaemonSet's selector selects its own pod template."""
    spec = objects["DaemonSet"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()


def test_container_is_privileged_with_the_host_root(container: dict[str, Any], pod: dict[str, Any]) -> None:
    """The container is privileged and sees the node's / at $HOST, where install writes with --root."""
    assert container["securityContext"]["privileged"] is True
    env = {item["name"]: item["value"] for item in container["env"]}
    (mount,) = container["volumeMounts"]
    (volume,) = pod["volumes"]
    assert mount == {"name": volume["name"], "mountPath": env["HOST"]}
    assert volume["hostPath"] == {"path": "/", "type": "Directory"}


def test_pod_runs_on_gpu_nodes_like_the_runtime_class(pod: dict[str, Any]) -> None:
    """The DaemonSet and the RuntimeClass select the same nodes and tolerate the same GPU taint."""
    (runtime_class,) = load("runtimeclass.yaml")
    assert pod["nodeSelector"] == runtime_class["scheduling"]["nodeSelector"]
    assert pod["tolerations"] == runtime_class["scheduling"]["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]


def test_runtime_class_names_the_installed_handler() -> None:
    """RuntimeClass gpu-env selects the handler install registers with containerd and CRI-O."""
    (runtime_class,) = load("runtimeclass.yaml")
    assert runtime_class["apiVersion"] == "node.k8s.io/v1"
    assert runtime_class["handler"] == paths.RUNTIME_HANDLER


def test_script_installs_and_uninstalls_with_the_host_root(container: dict[str, Any]) -> None:
    """The container command installs with --root (MODE=install), uninstalls only in MODE=uninstall, and its
    TERM trap uninstalls nothing (a rolling update must not strand the containers the handler runs)."""
    assert container["command"] == ["/bin/sh", "-c"]
    (script,) = container["args"]
    install = '"$PY" -I -m hook install --engine "$ENGINE" --root "$HOST" --python "$PY" $INSTALL_ARGS'
    uninstall = '"$PY" -I -m hook uninstall --engine "$ENGINE" --root "$HOST" --proc "$HOST/proc"'
    assert install in script
    assert uninstall in script
    assert "trap stop TERM INT" in script
    trap = script[script.index("stop() {") : script.index("trap stop TERM INT")]
    assert "uninstall" not in trap.replace("uninstalls nothing", "")
    assert script.index("trap stop TERM INT") < script.index(install)
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["MODE"] == "install"


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every path under root with its kind, mode and content."""
    found: dict[str, tuple[Any, ...]] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_socket():
            found[rel] = ("socket",)
        elif path.is_dir():
            found[rel] = ("dir", path.stat().st_mode)
        else:
            found[rel] = ("file", path.stat().st_mode, path.read_bytes())
    return found


class Script:
    """The DaemonSet's script run against a node tree, as its pod would run it (own session, killed after)."""

    def __init__(self, tmp_path: Path, container: dict[str, Any], engine: str) -> None:
        self.host = tmp_path / "node"
        self.source = tmp_path / "image" / "opt" / "gpu-env-hook"
        (self.host / "run/nvidia-env").mkdir(parents=True)
        (self.host / "run/nvidia-env").chmod(0o755)
        self.source.mkdir(parents=True)
        (self.host / str(self.source.parent).lstrip("/")).mkdir(parents=True)  # as /opt on a node
        (self.source / "python-stand-in").write_text("the image's interpreter\n")
        (self.script,) = container["args"]
        self.engine = engine

    def start(self, mode: str) -> subprocess.Popen[str]:
        """Start the script in ``mode`` and wait for its "installed"/"uninstalled" line."""
        env = {
            "PATH": paths.FIXED_PATH,
            "MODE": mode,
            "ENGINE": self.engine,
            "HOST": str(self.host),
            "SOURCE": str(self.source),
            "PY": PYTHON,
            "INSTALL_ARGS": "",
        }
        proc = subprocess.Popen(
            ["/bin/sh", "-c", self.script],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # so a failing test can kill the script's sleeper too
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("gpu-env-hook: "):
                break
        return proc

    @staticmethod
    def terminate(proc: subprocess.Popen[str]) -> tuple[int, str]:
        """TERM the script as kubelet does; return its status and stderr (the session is killed after)."""
        try:
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # nothing is left when the script exited cleanly
            proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()  # also on failure: no unclosed pipe left to warn in a later test
        return proc.returncode, stderr


def fake_proc(host: Path) -> None:
    """Give the node tree a /proc where only an init runs (the DaemonSet reads the node's processes there)."""
    (host / "proc/1").mkdir(parents=True)
    (host / "proc/1/cmdline").write_bytes(b"/sbin/init\0")


@pytest.mark.parametrize(
    ("engine", "socket_path", "expected_file"),
    [
        pytest.param(
            "auto", "run/crio/crio.sock", "etc/crio/crio.conf.d/99-gpu-env-hook.conf", id="auto-crio"
        ),
        pytest.param(
            "auto",
            "run/containerd/containerd.sock",
            "etc/containerd/config.toml",
            id="auto-containerd",
        ),
        pytest.param("containerd", None, "etc/containerd/config.toml", id="explicit-containerd"),
    ],
)
def test_script_installs_on_start_keeps_it_on_sigterm_and_uninstalls_in_uninstall_mode(
    tmp_path: Path, container: dict[str, Any], engine: str, socket_path: str | None, expected_file: str
) -> None:
    """Run the DaemonSet's script against a node tree: installed while it runs and still installed after TERM
    (a rolling update); the next pod in MODE=uninstall restores the tree."""
    script = Script(tmp_path, container, engine)
    fake_proc(script.host)
    listener = None
    if socket_path is not None:
        (script.host / socket_path).parent.mkdir(parents=True)
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(script.host / socket_path))
    try:
        before = snapshot(script.host)
        status, stderr = Script.terminate(script.start("install"))
        assert status == 0, stderr
        assert (script.host / expected_file).is_file()
        installed = "crio" if "crio" in expected_file else "containerd"
        assert (script.host / paths.runtime_wrapper(installed).lstrip("/")).is_file()
        copied = script.host / str(script.source).lstrip("/") / "python-stand-in"
        assert copied.read_text() == "the image's interpreter\n"
        status, stderr = Script.terminate(script.start("uninstall"))
        assert status == 0, stderr
    finally:
        if listener is not None:
            listener.close()
    assert snapshot(script.host) == before


def test_uninstall_mode_keeps_a_runtime_wrapper_running_containers_use(
    tmp_path: Path, container: dict[str, Any]
) -> None:
    """MODE=uninstall with a container still running through the handler keeps the runtime wrapper (a
    passthrough without Python) and removes the copied Python; the same mode later, with the container gone,
    removes the wrapper: the tree is restored."""
    script = Script(tmp_path, container, "crio")
    fake_proc(script.host)
    before = snapshot(script.host)
    fake_proc_conmon = script.host / "proc/77"
    fake_proc_conmon.mkdir()
    (fake_proc_conmon / "cmdline").write_bytes(
        f"/usr/bin/conmon\0-r\0{paths.runtime_wrapper('crio')}\0".encode()
    )
    Script.terminate(script.start("install"))
    status, stderr = Script.terminate(script.start("uninstall"))
    assert status == 0, stderr
    wrapper = script.host / paths.runtime_wrapper("crio").lstrip("/")
    assert "(retired)" in wrapper.read_text()
    assert not (script.host / str(script.source).lstrip("/")).exists()
    (fake_proc_conmon / "cmdline").unlink()
    fake_proc_conmon.rmdir()
    status, stderr = Script.terminate(script.start("uninstall"))
    assert status == 0, stderr
    assert snapshot(script.host) == before


def test_install_mode_replaces_only_the_images_entries_and_keeps_installs_versions(
    tmp_path: Path, container: dict[str, Any]
) -> None:
    """A restart (MODE=install again) replaces the image's own entries on the node (its Python) and nothing
    else there: the versions install keeps in the same directory (current, the one before) stay."""
    script = Script(tmp_path, container, "containerd")
    fake_proc(script.host)
    Script.terminate(script.start("install"))
    copied = script.host / str(script.source).lstrip("/")
    kept = copied / "0.0.9-0123456789ab"
    kept.mkdir()
    (kept / ".gpu-env-hook-tree").write_text("")
    (copied / "current").symlink_to(kept.name)
    (script.source / "python-stand-in").write_text("the new image's interpreter\n")
    status, stderr = Script.terminate(script.start("install"))
    assert status == 0, stderr
    assert (copied / "python-stand-in").read_text() == "the new image's interpreter\n"
    assert (kept / ".gpu-env-hook-tree").is_file()
    assert (copied / "current").readlink() == Path(kept.name)
    assert sorted(path.name for path in copied.iterdir()) == [
        "0.0.9-0123456789ab",
        "current",
        "python-stand-in",
    ]


def test_script_refuses_a_node_without_a_known_socket(tmp_path: Path, container: dict[str, Any]) -> None:
    """With ENGINE=auto and no CRI socket, the script says so and installs nothing."""
    host = tmp_path / "node"
    source = tmp_path / "src"
    source.mkdir()
    (script,) = container["args"]
    env = {"PATH": paths.FIXED_PATH, "ENGINE": "auto", "HOST": str(host), "SOURCE": str(source), "PY": PYTHON}
    proc = subprocess.run(
        ["/bin/sh", "-c", script],
        env={**env, "INSTALL_ARGS": ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr == f"gpu-env-hook: no CRI-O or containerd socket under {host}/run; set ENGINE\n"
    assert not (host / "var/lib/gpu-env-hook").exists()

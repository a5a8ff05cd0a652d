"""packaging/kubernetes: the manifests parse, refer to each other consistently, and the DaemonSet runs the image's
entrypoint with the settings it reads (tests/integration/test_daemonset_image.py runs the built image)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hook import __version__
from hook.util import paths

REPO = Path(__file__).resolve().parents[2]
KUBERNETES = REPO / "packaging" / "kubernetes"


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
    mount = container["volumeMounts"][0]
    volume = pod["volumes"][0]
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


ENTRYPOINT = KUBERNETES / "entrypoint.sh"
REPO = KUBERNETES.parents[1]


def test_pod_runs_the_images_entrypoint_with_the_settings_it_reads(container: dict[str, Any]) -> None:
    """The pod runs the image's own entrypoint (no command of its own) and sets exactly the variables the
    entrypoint reads, each to the entrypoint's default or a value the entrypoint documents."""
    assert "command" not in container
    assert "args" not in container
    env = {item["name"]: item["value"] for item in container["env"]}
    text = ENTRYPOINT.read_text()
    read = dict(re.findall(r"^([A-Z_]+)=\$\{\1:-([^}]*)\}$", text, flags=re.MULTILINE))
    assert read == {
        "MODE": "install",
        "ENGINE": "auto",
        "HOST": "/host",
        "PY": "tree",
        "INSTALL_ARGS": "",
    }
    assert env == read


def test_entrypoint_installs_with_the_host_root_and_its_term_trap_uninstalls_nothing() -> None:
    """install and uninstall run with --root "$HOST"; the TERM trap is set before either and uninstalls nothing
    (a rolling update must not strand the containers the handler runs); nothing is swapped by hand (install
    puts the package tree in place by renames)."""
    text = ENTRYPOINT.read_text()
    install = '$HOOK install --engine "$ENGINE" --root "$HOST" --python "$PY" $INSTALL_ARGS'
    uninstall = '$HOOK uninstall --engine "$ENGINE" --root "$HOST" --proc "$HOST/proc"'
    assert install in text
    assert uninstall in text
    trap = text[text.index("stop() {") : text.index("trap stop TERM INT")]
    assert "uninstall" not in trap.replace("uninstalls nothing", "")
    assert text.index("trap stop TERM INT") < text.index(install)
    assert not re.search(r"^\s*(mv|cp|rm) ", text, flags=re.MULTILINE)


def test_manifest_names_the_image_make_image_builds() -> None:
    """The DaemonSet's image is this repository's (gpu-env-hook at this version), the one the README builds and
    pushes; the Containerfile's entrypoint is the script, and its build context admits what it copies."""
    (container,) = by_kind(load("gpu-env-hook.yaml"))["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    image = container["image"]
    assert image.rpartition(":")[2] == __version__
    assert image.rpartition(":")[0].rpartition("/")[2] == "gpu-env-hook"
    readme = (KUBERNETES / "README.md").read_text()
    assert f"IMAGE={image} make image" in readme
    assert f"podman push {image}" in readme
    containerfile = (KUBERNETES / "Containerfile").read_text()
    assert 'ENTRYPOINT ["/usr/local/bin/gpu-env-hook-daemonset"]' in containerfile
    assert "COPY packaging/kubernetes/entrypoint.sh /usr/local/bin/gpu-env-hook-daemonset" in containerfile
    copied = set(re.findall(r"^COPY (?!--from)(\S+) ", containerfile, flags=re.MULTILINE))
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    assert "*" in ignore
    assert {line[1:] for line in ignore if line.startswith("!")} == copied


def test_pod_mounts_the_naming_key(container: dict[str, Any], pod: dict[str, Any]) -> None:
    """The node's naming key directory is mounted where producer commands look for it (hook.producer.namekey)."""
    from hook.producer.namekey import DEFAULT_PATH

    directory = str(Path(DEFAULT_PATH).parent)
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume.get("hostPath", {}) for volume in pod["volumes"]}
    assert mounts["name-key"] == directory
    assert volumes["name-key"] == {"path": directory, "type": "DirectoryOrCreate"}


def test_pod_sees_every_node_path_a_producer_command_uses(
    container: dict[str, Any], pod: dict[str, Any]
) -> None:
    """What the manifest's comment promises: producer commands run in the pod act on the node's naming key,
    env files, CDI specs and allocation specs at their node paths (a node mount at the same path holds each:
    /var/run is /run in the image and on the node)."""
    from hook.pipeline.config import parse_config
    from hook.producer.alloc import DEFAULT_DIRECTORY
    from hook.producer.namekey import DEFAULT_PATH

    settings = parse_config(None)
    volumes = {volume["name"]: volume["hostPath"]["path"] for volume in pod["volumes"]}
    node_mounts = [
        mount["mountPath"]
        for mount in container["volumeMounts"]
        if volumes[mount["name"]] == mount["mountPath"] != "/"
    ]
    used = [DEFAULT_PATH, *settings.env_file.directories, DEFAULT_DIRECTORY, *settings.cdi.spec_dirs]
    for path in used:
        node_path = re.sub(r"^/var/run/", "/run/", path)
        assert any(f"{node_path}/".startswith(mount + "/") for mount in node_mounts), (path, node_mounts)
    writable = [mount["mountPath"] for mount in container["volumeMounts"] if not mount.get("readOnly")]
    assert "/run" in writable  # env files and allocation specs are written there
    (run,) = (mount for mount in container["volumeMounts"] if mount["mountPath"] == "/run")
    assert run.get("mountPropagation") == "HostToContainer"  # the pod keeps none of the node's unmounts


def test_make_image_needs_only_what_it_uses(tmp_path: Path) -> None:
    """`make image` installs no test toolchain (.ci/run): without a .venv it makes a build venv with pip and
    setuptools only; and it refuses in one line, before anything, where podman or mmdebstrap is missing."""
    plan = subprocess.run(
        ["make", "-n", "-C", str(REPO), "image", f"PY={tmp_path}/no-venv/python"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert ".ci/run" not in plan
    assert "python3 -m venv build/image/venv\n" in plan
    assert "PY=build/image/venv/bin/python bash packaging/kubernetes/build-image.sh\n" in plan
    bin_dir = tmp_path / "bin"  # bash and what the script runs before its check, but no podman or mmdebstrap
    bin_dir.mkdir()
    for tool in ("bash", "dirname"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or tool)
    done = subprocess.run(
        ["bash", str(KUBERNETES / "build-image.sh")],
        env={"PATH": str(bin_dir), "PY": sys.executable},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "make image: no podman on PATH: install it (apt-get install podman mmdebstrap), as root\n"
    )


# --- gpu-env-hook-nri.yaml: the NRI path --------------------------------------------------------------------


@pytest.fixture(scope="module")
def nri_pod() -> dict[str, Any]:
    """The pod spec of gpu-env-hook-nri.yaml's DaemonSet."""
    objects = by_kind(load("gpu-env-hook-nri.yaml"))
    assert set(objects) == {"Namespace", "ServiceAccount", "ClusterRole", "RoleBinding", "DaemonSet"}
    assert objects["Namespace"] == by_kind(load("gpu-env-hook.yaml"))["Namespace"]
    spec: dict[str, Any] = objects["DaemonSet"]["spec"]["template"]["spec"]
    return spec


def env_of(container: dict[str, Any]) -> dict[str, str]:
    """A container's environment."""
    return {item["name"]: item["value"] for item in container.get("env", [])}


def test_nri_manifest_installs_first_then_runs_the_plugin(nri_pod: dict[str, Any]) -> None:
    """The init container is the image's entrypoint installing onto the node's / and exiting (THEN=exit);
    the plugin container runs `gpu-env-hook nri` on the node's NRI socket, privileged, ready once its
    readiness file is there, and its hooks run the same node interpreter install was given."""
    (install,) = nri_pod["initContainers"]
    (plugin,) = nri_pod["containers"]
    assert (
        install["image"]
        == plugin["image"]
        == by_kind(load("gpu-env-hook.yaml"))["DaemonSet"]["spec"]["template"]["spec"]["containers"][0][
            "image"
        ]
    )
    assert "command" not in install
    assert env_of(install)["MODE"] == "install"
    assert env_of(install)["THEN"] == "exit"
    assert env_of(install)["NRI"] == "pod"
    assert plugin["command"] == [
        "/usr/local/lib/gpu-env-hook/bin/python",
        "-I",
        "-m",
        "hook",
        "nri",
        paths.NRI_SOCKET,
    ]
    assert install["securityContext"]["privileged"] is plugin["securityContext"]["privileged"] is True
    ready = env_of(plugin)["GPU_ENV_HOOK_NRI_READY"]
    assert plugin["readinessProbe"]["exec"]["command"] == ["test", "-f", ready]
    assert env_of(plugin)["GPU_ENV_HOOK_NRI_NODE_PYTHON"] == env_of(install)["PY"]
    assert "runtimeClassName" not in nri_pod


def test_nri_plugin_mounts_node_paths_read_only_where_it_only_reads(nri_pod: dict[str, Any]) -> None:
    """The NRI socket's directory read-write (a connect is a write), the env files, CDI spec directories and
    the hook's config at their node paths read-only, the readiness file in the pod's own memory; the node's
    / only in the init container."""
    volumes = {volume["name"]: volume for volume in nri_pod["volumes"]}
    (plugin,) = nri_pod["containers"]
    mounts = {
        mount["mountPath"]: (
            volumes[mount["name"]].get("hostPath", {}).get("path"),
            mount.get("readOnly", False),
        )
        for mount in plugin["volumeMounts"]
    }
    assert mounts == {
        "/var/run/nri": ("/var/run/nri", False),
        "/run/nvidia-env": ("/run/nvidia-env", True),
        "/etc/cdi": ("/etc/cdi", True),
        "/var/run/cdi": ("/var/run/cdi", True),
        "/etc/nvidia-container-runtime": ("/etc/nvidia-container-runtime", True),
        "/run/gpu-env-hook-nri": (None, False),
    }
    assert paths.NRI_SOCKET.startswith("/var/run/nri/")
    (install,) = nri_pod["initContainers"]
    assert [
        (mount["mountPath"], volumes[mount["name"]]["hostPath"]["path"]) for mount in install["volumeMounts"]
    ] == [("/host", "/")]


def test_entrypoint_then_exit_ends_after_install() -> None:
    """THEN=exit: the entrypoint prints its line and exits 0 instead of idling (an init container)."""
    text = (KUBERNETES / "entrypoint.sh").read_text()
    assert 'if [ "${THEN:-idle}" = exit ]; then\n    echo "gpu-env-hook: $DONE"\n    exit 0\nfi\n' in text

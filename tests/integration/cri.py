"""A kubelet-shaped CRI client for the containerd tests: RunPodSandbox / CreateContainer / StartContainer.

``cri/api.proto`` holds only the CRI v1 messages the tests use (upstream names and field numbers); it is
compiled with grpcio-tools into a temporary directory the first time a test needs it, so no generated
code lives in the repository. The generated modules are untyped, hence ``Any`` here.

Use with ``containerd.running``::

    with running(node, tmp_path / "daemon") as daemon:
        daemon.import_image(archive)            # write_image_archive(...), e.g. in a module fixture
        client = CriClient(daemon.address)
        pod = start_pod(client, workdir=tmp_path, handler="gpu-env", image=CONTAINERD_IMAGE,
                        command=["/bin/sleep", "600"], env={})
        ...                                     # e.g. uninstall while the container runs
        remove_pod(client, pod.sandbox)
        client.close()

The pod's sandbox shares the node's network namespace (no CNI needed); ``running`` kills whatever is left
(daemon, shims, containers) when the block ends.
"""

from __future__ import annotations

import functools
import importlib
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

PROTO = Path(__file__).resolve().parent / "cri" / "api.proto"
RPC_TIMEOUT = 120.0


@functools.cache
def compiled() -> tuple[ModuleType, ModuleType]:
    """Compile api.proto once per test process and return (messages, services) modules."""
    from grpc_tools import protoc

    out = Path(tempfile.mkdtemp(prefix="cri-proto-"))
    status = protoc.main(
        ["protoc", f"-I{PROTO.parent}", f"--python_out={out}", f"--grpc_python_out={out}", str(PROTO)]
    )
    if status != 0:
        raise RuntimeError(f"protoc failed on {PROTO} (status {status})")
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("api_pb2"), importlib.import_module("api_pb2_grpc")
    finally:
        # Imported: the modules live on without their files (every test process left one in /tmp before).
        sys.path.remove(str(out))
        shutil.rmtree(out, ignore_errors=True)


# The labels kubelet puts on every sandbox and container it creates (from the pod spec, never from a pod's
# annotations); CRI-O names a container to NRI by the container-name one.
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"


def pod_labels(metadata: Any) -> dict[str, str]:
    """The pod labels kubelet sets from a sandbox's metadata."""
    return {
        "io.kubernetes.pod.name": metadata.name,
        "io.kubernetes.pod.namespace": metadata.namespace,
        "io.kubernetes.pod.uid": metadata.uid,
    }


class CriClient:
    """The CRI RuntimeService of one containerd, called as kubelet calls it."""

    def __init__(self, address: str) -> None:
        import grpc

        self.pb, services = compiled()
        self.channel = grpc.insecure_channel(f"unix://{address}")
        self.stub: Any = services.RuntimeServiceStub(self.channel)

    def close(self) -> None:
        """Close the channel."""
        self.channel.close()

    def version(self) -> Any:
        """CRI Version: the runtime's name and version."""
        return self.stub.Version(self.pb.VersionRequest(version="v1"), timeout=RPC_TIMEOUT)

    def sandbox_config(self, name: str, log_directory: Path, annotations: dict[str, str]) -> Any:
        """A pod sandbox in the node's network, PID and IPC namespaces (no CNI needed), logs in a directory."""
        pb = self.pb
        node = pb.NamespaceOption(network=pb.NODE, pid=pb.CONTAINER, ipc=pb.POD)
        metadata = pb.PodSandboxMetadata(name=name, uid=f"uid-{name}", namespace="default", attempt=0)
        return pb.PodSandboxConfig(
            metadata=metadata,
            labels=pod_labels(metadata),
            log_directory=str(log_directory),
            annotations=annotations,
            linux=pb.LinuxPodSandboxConfig(
                security_context=pb.LinuxSandboxSecurityContext(namespace_options=node)
            ),
        )

    def run_pod_sandbox(self, config: Any, handler: str) -> str:
        """RunPodSandbox with a RuntimeClass handler; returns the sandbox id."""
        request = self.pb.RunPodSandboxRequest(config=config, runtime_handler=handler)
        return str(self.stub.RunPodSandbox(request, timeout=RPC_TIMEOUT).pod_sandbox_id)

    def create_container(
        self,
        sandbox_id: str,
        sandbox_config: Any,
        *,
        name: str,
        image: str,
        command: list[str],
        env: dict[str, str],
        log_path: str,
        cdi_devices: tuple[str, ...] = (),
    ) -> str:
        """CreateContainer in a sandbox (with the CDI devices a device plugin named, kubelet's CDIDevices);
        returns the container id."""
        pb = self.pb
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name, attempt=0),
            # The image as the pod named it, which kubelet passes too: CRI-O checks its signature policy by it.
            image=pb.ImageSpec(image=image, user_specified_image=image),
            command=command,
            envs=[pb.KeyValue(key=key, value=value) for key, value in env.items()],
            labels={**pod_labels(sandbox_config.metadata), CONTAINER_NAME_LABEL: name},
            log_path=log_path,
            CDI_devices=[pb.CDIDevice(name=device) for device in cdi_devices],
            # The sandbox's namespaces, as kubelet repeats them for each container (CRI-O refuses a pod PID
            # namespace in a sandbox without one).
            linux=pb.LinuxContainerConfig(
                security_context=pb.LinuxContainerSecurityContext(
                    namespace_options=sandbox_config.linux.security_context.namespace_options
                )
            ),
        )
        request = pb.CreateContainerRequest(
            pod_sandbox_id=sandbox_id, config=config, sandbox_config=sandbox_config
        )
        return str(self.stub.CreateContainer(request, timeout=RPC_TIMEOUT).container_id)

    def start_container(self, container_id: str) -> None:
        """StartContainer."""
        self.stub.StartContainer(
            self.pb.StartContainerRequest(container_id=container_id), timeout=RPC_TIMEOUT
        )

    def container_status(self, container_id: str) -> Any:
        """ContainerStatus: state, exit code, reason, message."""
        request = self.pb.ContainerStatusRequest(container_id=container_id)
        return self.stub.ContainerStatus(request, timeout=RPC_TIMEOUT).status

    def wait_exited(self, container_id: str, timeout: float = 60) -> Any:
        """Poll ContainerStatus until the container has exited; return its status."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.container_status(container_id)
            if status.state == self.pb.CONTAINER_EXITED or time.monotonic() > deadline:
                return status
            time.sleep(0.2)

    def stop_container(self, container_id: str, timeout: int = 5) -> None:
        """StopContainer (TERM, then KILL after ``timeout`` seconds)."""
        request = self.pb.StopContainerRequest(container_id=container_id, timeout=timeout)
        self.stub.StopContainer(request, timeout=RPC_TIMEOUT)

    def remove_container(self, container_id: str) -> None:
        """RemoveContainer."""
        self.stub.RemoveContainer(
            self.pb.RemoveContainerRequest(container_id=container_id), timeout=RPC_TIMEOUT
        )

    def stop_pod_sandbox(self, sandbox_id: str) -> None:
        """StopPodSandbox: every container of the pod and the sandbox are stopped."""
        self.stub.StopPodSandbox(
            self.pb.StopPodSandboxRequest(pod_sandbox_id=sandbox_id), timeout=RPC_TIMEOUT
        )

    def remove_pod_sandbox(self, sandbox_id: str) -> None:
        """RemovePodSandbox: the sandbox and its containers are removed."""
        request = self.pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id)
        self.stub.RemovePodSandbox(request, timeout=RPC_TIMEOUT)


def read_cri_log(path: Path) -> list[str]:
    """Return the lines a container wrote to stdout, from a CRI log file (``<time> <stream> <tag> <line>``)."""
    lines = []
    for record in path.read_text(errors="replace").splitlines():
        parts = record.split(" ", 3)
        if len(parts) == 4 and parts[1] == "stdout":
            lines.append(parts[3])
    return lines


class Pod(NamedTuple):
    """One pod started through CRI: its sandbox, its one container, and where that container logs."""

    sandbox: str
    container: str
    log: Path


def start_pod(
    client: CriClient,
    *,
    workdir: Path,
    handler: str,
    image: str,
    command: list[str],
    env: dict[str, str],
    name: str = "gpu",
    cdi_devices: tuple[str, ...] = (),
) -> Pod:
    """Start a pod with one container as kubelet does: RunPodSandbox with the RuntimeClass handler,
    CreateContainer, StartContainer. The pod is removed again if a later step fails; otherwise the caller
    ends it with ``remove_pod`` (a test that needs a container running, e.g. across an uninstall)."""
    logs = workdir / f"pod-logs-{name}"
    config = client.sandbox_config(name, logs, {})
    sandbox = client.run_pod_sandbox(config, handler)
    try:
        container = client.create_container(
            sandbox,
            config,
            name=name,
            image=image,
            command=command,
            env=env,
            log_path=f"{name}.log",
            cdi_devices=cdi_devices,
        )
        client.start_container(container)
    except BaseException:
        remove_pod(client, sandbox)
        raise
    return Pod(sandbox, container, logs / f"{name}.log")


def remove_pod(client: CriClient, sandbox: str) -> None:
    """StopPodSandbox then RemovePodSandbox, as kubelet ends a pod (its containers go with it)."""
    client.stop_pod_sandbox(sandbox)
    client.remove_pod_sandbox(sandbox)


def run_in_pod(
    client: CriClient,
    *,
    workdir: Path,
    handler: str,
    image: str,
    command: list[str],
    env: dict[str, str],
    name: str = "gpu",
) -> tuple[Any, list[str]]:
    """Run one container to its end in a new pod (``start_pod``), then stop and remove the pod whatever
    happened. Returns the container's final status and what it wrote to stdout."""
    pod = start_pod(
        client, workdir=workdir, handler=handler, image=image, command=command, env=env, name=name
    )
    try:
        status = client.wait_exited(pod.container)
        return status, read_cri_log(pod.log)
    finally:
        remove_pod(client, pod.sandbox)

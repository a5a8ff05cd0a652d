"""One pod identity: the pod a container belongs to, as its engine records it, and whether a pin names it.

A pin (an env file's reserved keys, or the pod part of a per-allocation CDI spec's file name) names a pod by
its UID, or by its namespace and name together (what kubelet's pod-resources ``List()`` gives a device plugin;
the UID takes an API-server lookup); ``GPU_ENV_HOOK_CONTAINER_NAME`` narrows it to one container. A pin is
judged only against the annotations the engine in effect (``[env-file] pod-binding-engine``) writes itself,
after (so over) anything a pod passes through: containerd's ``io.kubernetes.cri.sandbox-uid`` /
``-namespace`` / ``-name`` (it writes no ``io.kubernetes.pod.*`` key: those appear only when passed through
from the pod), CRI-O's ``io.kubernetes.pod.uid`` / ``.namespace`` / ``.name``. A missing key is a refusal,
never a reason to look at another key. podman, Docker and ``none`` record no pod that a tenant cannot choose:
there every pin is refused.

A namespace/name pin also names a later pod of that name (a StatefulSet's pod, a recreated namespace): what
is pinned so must be removed when the pod ends (``env-file gc``, ``cdi alloc gc``).
"""

from hook.util import envvars

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

UID = envvars.GPU_ENV_HOOK_POD_UID
NAMESPACE = envvars.GPU_ENV_HOOK_POD_NAMESPACE
NAME = envvars.GPU_ENV_HOOK_POD_NAME
CONTAINER = envvars.GPU_ENV_HOOK_CONTAINER_NAME

# The annotations each engine writes itself, by the pin key they are compared with.
ENGINE_KEYS = {
    "containerd": {
        UID: "io.kubernetes.cri.sandbox-uid",
        NAMESPACE: "io.kubernetes.cri.sandbox-namespace",
        NAME: "io.kubernetes.cri.sandbox-name",
        CONTAINER: "io.kubernetes.cri.container-name",
    },
    "crio": {
        UID: "io.kubernetes.pod.uid",
        NAMESPACE: "io.kubernetes.pod.namespace",
        NAME: "io.kubernetes.pod.name",
        CONTAINER: "io.kubernetes.container.name",
    },
}
NEEDS_POD = f"{UID}, or {NAMESPACE} and {NAME}"


def is_pinned(pins: "Mapping[str, str]") -> bool:
    """Tell whether ``pins`` name a pod at all (a UID, a namespace or a name)."""
    return UID in pins or NAMESPACE in pins or NAME in pins


def pin_error(pins: "Mapping[str, str]") -> str | None:
    """Say why the pin keys do not name one pod: a namespace without a name (or the reverse), a container
    without a pod. None when they do (or pin nothing)."""
    for one, other in ((NAMESPACE, NAME), (NAME, NAMESPACE)):
        if one in pins and other not in pins:
            return f"{one} needs {other}"
    if CONTAINER in pins and not is_pinned(pins):
        return f"{CONTAINER} needs {NEEDS_POD}"
    return None


def pin_mismatch(pins: "Mapping[str, str]", annotations: "Mapping[str, str]", engine: str) -> str | None:
    """Say why the pinned pod (and container) is not the container's, judged by ``engine``'s annotations
    alone; None when every pinned key matches. ``pins`` are well formed (:func:`pin_error`) and pin a pod."""
    keys = ENGINE_KEYS.get(engine)
    if keys is None:
        if engine == "none":
            return (
                "is pinned to a pod, but no pod-binding-engine is set "
                f"(env-file.pod-binding-engine, or {envvars.GPU_ENV_HOOK_ENGINE} from install --engine)"
            )
        return (
            f"is pinned to a pod, but pod-binding-engine is {engine}, whose annotations are chosen by "
            "whoever starts the container: the pin cannot be checked"
        )
    for pin in (UID, NAMESPACE, NAME, CONTAINER):
        if pin not in pins:
            continue
        what = "container" if pin == CONTAINER else "pod"
        key = keys[pin]
        if key not in annotations:
            return (
                f"is pinned to a {what} but the container has no {key} annotation "
                f"(pod-binding-engine {engine})"
            )
        if annotations[key] != pins[pin]:
            return f"is pinned to another {what} (annotation {key} differs)"
    return None


def container_pod(annotations: "Mapping[str, str]", engine: str) -> dict[str, str]:
    """The container's pod as ``engine`` records it, under the pin keys (empty for podman, Docker, none)."""
    keys = ENGINE_KEYS.get(engine, {})
    return {pin: annotations[key] for pin, key in keys.items() if annotations.get(key)}


def pod_pins(
    *,
    uid: str | None = None,
    namespace: str | None = None,
    name: str | None = None,
    container: str | None = None,
) -> dict[str, str]:
    """The pin keys for a pod given by its parts (``None`` parts left out), e.g. from a producer's options."""
    given = {UID: uid, NAMESPACE: namespace, NAME: name, CONTAINER: container}
    return {key: value for key, value in given.items() if value is not None}


def describe_pin(pins: "Mapping[str, str]") -> str:
    """Name the pinned pod (and container) for a report: ``pod UID`` or ``pod NAMESPACE/NAME``."""
    parts = []
    if UID in pins:
        parts.append(f"pod {pins[UID]}")
    if NAMESPACE in pins or NAME in pins:
        parts.append(f"pod {pins.get(NAMESPACE, '')}/{pins.get(NAME, '')}")
    if CONTAINER in pins:
        parts.append(f"container {pins[CONTAINER]}")
    return ", ".join(parts)


def as_annotations(pins: "Mapping[str, str]", engine: str) -> dict[str, str]:
    """The annotations ``engine`` would write for a container of the pod ``pins`` names (for checking a pin
    before any container exists: ``env-file check``); empty for an engine without pod annotations."""
    keys = ENGINE_KEYS.get(engine, {})
    return {keys[pin]: value for pin, value in pins.items() if pin in keys}

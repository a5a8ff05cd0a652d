"""CDI mode for the runtime shim and podman's precreate stage: the devices a container asks for, as CDI edits.

With ``[gpu-env] device-mode = "cdi"``, once the env file is merged, the devices the container requests
(``NVIDIA_VISIBLE_DEVICES`` from the image or the file, or device-list mounts, behind the same privilege
gate the hook applies) are named as CDI devices: a fully qualified name stays as it is, ``all`` and plain
ids or UUIDs become ``<default-kind>=<id>``. Their edits are applied to config.json before the real
runtime reads it, and ``NVIDIA_VISIBLE_DEVICES`` is set to ``void``, as NVIDIA's runtime does in CDI mode,
so that a legacy hook further down does nothing. A device no spec defines is refused, and nothing is
written; when the request came from the env file, the refusal names the file, not the device (the file's
content is never shown).

A per-allocation device (``gpu-env.dev/alloc=<name>``, a spec ``cdi alloc write`` wrote for one pod) is
resolved only for that pod: it must be requested by the pod's pinned env file (never by the image or the
container's own environment), and the pod named in its spec's file name must be the container's, judged by
``hook.pipeline.pod`` as an env file's pin is (podman, Docker and ``none`` record no pod: refused there).
"""

from hook.cdi.names import is_qualified_name, quote
from hook.util import envvars
from hook.util.errors import CdiError, CdiUnresolvableError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from hook.cdi.registry import Registry
    from hook.pipeline.config import CdiSettings, Settings
    from hook.pipeline.envfile import EnvFile

VOID = "void"
ALLOC_KIND = "gpu-env.dev/alloc"
ALLOC_FILE_PREFIX = "gpu-env.dev-alloc_"
_HEX = frozenset("0123456789abcdef")
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_UID_CHARS = _ALNUM | frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ-")
_NAMESPACE_CHARS = _ALNUM | frozenset("-")
_POD_NAME_CHARS = _ALNUM | frozenset("-.")


def _is_k8s_name(text: str, chars: frozenset[str]) -> bool:
    """A Kubernetes name: 1 to 253 of ``chars``, a letter or digit first and last."""
    return 0 < len(text) <= 253 and set(text) <= chars and text[0].isalnum() and text[-1].isalnum()


def alloc_file_pins(file_name: str) -> tuple[str, dict[str, str]] | None:
    """Split a per-allocation spec's file name into its allocation name and the pod it is for:
    ``gpu-env.dev-alloc_<hex>_<pod-uid>.json`` or ``gpu-env.dev-alloc_<hex>_<namespace>_<name>.json``
    (``_`` is in no UID, namespace or pod name). None for any other name (not a file ``cdi alloc`` wrote)."""
    from hook.pipeline import pod

    if not (file_name.startswith(ALLOC_FILE_PREFIX) and file_name.endswith(".json")):
        return None
    parts = file_name[len(ALLOC_FILE_PREFIX) : -len(".json")].split("_")
    if len(parts) not in (2, 3) or len(parts[0]) not in (16, 32) or not set(parts[0]) <= _HEX:
        return None
    if len(parts) == 2:
        return (parts[0], {pod.UID: parts[1]}) if _is_k8s_name(parts[1], _UID_CHARS) else None
    if not (_is_k8s_name(parts[1], _NAMESPACE_CHARS) and _is_k8s_name(parts[2], _POD_NAME_CHARS)):
        return None
    return parts[0], {pod.NAMESPACE: parts[1], pod.NAME: parts[2]}


def alloc_binding_problem(
    registry: "Registry", name: str, annotations: dict[str, str], engine: str
) -> str | None:
    """Say why the allocation device ``name`` may not go to this container (None when it may, or when no
    spec defines it: that is refused as unresolvable): its spec is not named for a pod, or for another."""
    from hook.pipeline import pod

    entry = registry.devices.get(name)
    if entry is None:
        return None
    parsed = alloc_file_pins(entry[0].path.rpartition("/")[2])
    if parsed is None:
        return "is defined by a spec not named for a pod (cdi alloc write names each for its pod)"
    return pod.pin_mismatch(parsed[1], annotations, engine)


def cdi_device_names(devices: list[str], default_kind: str) -> list[str]:
    """Name each requested device as CDI does: qualified names as given, others under ``default_kind``.

    ``none`` (the device list ``[""]``) asks for no device. Names come back once each, in request order.
    """
    names = [
        device if is_qualified_name(device) else f"{default_kind}={device}" for device in devices if device
    ]
    return list(dict.fromkeys(names))


def inject_devices(
    document: dict[str, object],
    devices: list[str],
    cdi: "CdiSettings",
    *,
    check_alloc: "Callable[[Registry, str], None] | None" = None,
) -> dict[str, object]:
    """Return config.json with the CDI edits of ``devices`` applied and NVIDIA_VISIBLE_DEVICES set to void.

    ``check_alloc(registry, name)`` is called for each allocation device requested and raises to refuse it;
    without it, allocation devices are refused."""
    from hook.cdi.edits import apply_edits
    from hook.cdi.registry import load_registry, resolve_edits

    names = cdi_device_names(devices, cdi.default_kind)
    edited = document
    if names:
        registry = load_registry(cdi.spec_dirs, cache=cdi.spec_cache)
        if registry.skipped:
            from hook.util.safetext import warning

            for path in registry.skipped:
                warning(f"{registry.errors[path][0]}; skipped")
        for name in names:
            if name.startswith(ALLOC_KIND + "="):
                if check_alloc is None:
                    raise CdiError(
                        f"CDI allocation {quote(name, 128)} is resolved only for the pod it was written for"
                    )
                check_alloc(registry, name)
        edits = resolve_edits(registry, names)
        edited = apply_edits(document, edits)
    return apply_edits(edited, [{"env": [f"{envvars.NVIDIA_VISIBLE_DEVICES}={VOID}"]}])


def was_injected(document: dict[str, object]) -> bool:
    """Tell whether config.json (before any env file is merged) says its devices were injected already:
    ``NVIDIA_VISIBLE_DEVICES=void``, as the shim, the precreate stage and NVIDIA's specs leave it."""
    from hook.pipeline.bundle import parse_env, process_env

    return parse_env(process_env(document)).get(envvars.NVIDIA_VISIBLE_DEVICES) == VOID


def inject_requested(
    document: dict[str, object], devices: list[str], settings: "Settings", env_file: "EnvFile | None"
) -> dict[str, object]:
    """``inject_devices`` for a container's request; an unknown device the env file asked for is refused
    naming the file, never the device (the file's content is not shown). An allocation device is accepted
    only from the pod's pinned env file, and only when its spec is for the container's pod."""
    from hook.util.beneath import show_path

    selecting = (*settings.swarm_resource, envvars.NVIDIA_VISIBLE_DEVICES)
    from_file = env_file is not None and any(name in env_file.values for name in selecting)

    def check_alloc(registry: "Registry", name: str) -> None:
        if env_file is None or not env_file.pinned or not from_file:
            raise CdiError(
                f"CDI allocation {quote(name, 128)} may be requested only by its pod's pinned env file, "
                "not by the image or the container's own environment"
            )
        from hook.pipeline.bundle import spec_annotations

        engine = settings.env_file.pod_binding_engine
        problem = alloc_binding_problem(registry, name, spec_annotations(document), engine)
        if problem is not None:
            raise CdiError(f"env file {show_path(env_file.path)}: a CDI allocation it requests {problem}")

    try:
        return inject_devices(document, devices, settings.cdi, check_alloc=check_alloc)
    except CdiUnresolvableError as err:
        if not from_file or env_file is None:
            raise
        raise CdiError(
            f"env file {show_path(env_file.path)}: a device it requests is defined by no CDI spec in "
            f"{', '.join(settings.cdi.spec_dirs)}{err.skipped}"
        ) from None


def resolve_cdi_spec(
    document: dict[str, object], settings: "Settings", env_file: "EnvFile | None"
) -> dict[str, object] | None:
    """Decide a checked config.json whose env file is merged: the edited spec, or None for no GPU request.

    The request is read as the hook reads it (``hook.pipeline.request.resolve_devices``): device-list mounts
    when accepted, the variables behind the unprivileged gate, variables from a pinned env file trusted.
    """
    from hook.pipeline.bundle import parse_env, process_env, resolve_privileged, spec_mounts
    from hook.pipeline.request import resolve_devices

    trusted = frozenset(env_file.values) if env_file is not None and env_file.pinned else frozenset()
    devices = resolve_devices(
        parse_env(process_env(document)),
        spec_mounts(document),
        swarm_resource=settings.swarm_resource,
        accept_volume_mounts=settings.accept_volume_mounts,
        accept_envvar_unprivileged=settings.accept_envvar_unprivileged,
        privileged=resolve_privileged(document),
        trusted=trusted,
    )
    return inject_requested(document, devices, settings, env_file) if devices else None

"""CDI mode for the runtime shim and podman's precreate stage: the devices a container asks for, as CDI edits.

With ``[gpu-env] device-mode = "cdi"``, once the env file is merged, the devices the container requests
(``NVIDIA_VISIBLE_DEVICES`` from the image or the file, or device-list mounts, behind the same privilege
gate the hook applies) are named as CDI devices: a fully qualified name stays as it is, ``all`` and plain
ids or UUIDs become ``<default-kind>=<id>``. Their edits are applied to config.json before the real
runtime reads it, and ``NVIDIA_VISIBLE_DEVICES`` is set to ``void``, as NVIDIA's runtime does in CDI mode,
so that a legacy hook further down does nothing. A device no spec defines is refused, and nothing is
written; when the request came from the env file, the refusal names the file, not the device (the file's
content is never shown).
"""

from __future__ import annotations

from hook import envvars
from hook.cdi.names import is_qualified_name
from hook.errors import CdiError, CdiUnresolvableError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hook.config import CdiSettings, Settings
    from hook.envfile import EnvFile

VOID = "void"


def cdi_device_names(devices: list[str], default_kind: str) -> list[str]:
    """Name each requested device as CDI does: qualified names as given, others under ``default_kind``.

    ``none`` (the device list ``[""]``) asks for no device. Names come back once each, in request order.
    """
    names = [
        device if is_qualified_name(device) else f"{default_kind}={device}" for device in devices if device
    ]
    return list(dict.fromkeys(names))


def inject_devices(document: dict[str, object], devices: list[str], cdi: CdiSettings) -> dict[str, object]:
    """Return config.json with the CDI edits of ``devices`` applied and NVIDIA_VISIBLE_DEVICES set to void."""
    from hook.cdi.edits import apply_edits
    from hook.cdi.registry import load_registry, resolve_edits

    names = cdi_device_names(devices, cdi.default_kind)
    edited = document
    if names:
        registry = load_registry(cdi.spec_dirs)
        if registry.skipped:
            from hook.log import warning

            for path in registry.skipped:
                warning(f"{registry.errors[path][0]}; skipped")
        edits = resolve_edits(registry, names)
        edited = apply_edits(document, edits)
    return apply_edits(edited, [{"env": [f"{envvars.NVIDIA_VISIBLE_DEVICES}={VOID}"]}])


def was_injected(document: dict[str, object]) -> bool:
    """Tell whether config.json (before any env file is merged) says its devices were injected already:
    ``NVIDIA_VISIBLE_DEVICES=void``, as the shim, the precreate stage and NVIDIA's specs leave it."""
    from hook.bundle import parse_env, process_env

    return parse_env(process_env(document)).get(envvars.NVIDIA_VISIBLE_DEVICES) == VOID


def inject_requested(
    document: dict[str, object], devices: list[str], settings: Settings, env_file: EnvFile | None
) -> dict[str, object]:
    """``inject_devices`` for a container's request; an unknown device the env file asked for is refused
    naming the file, never the device (the file's content is not shown)."""
    try:
        return inject_devices(document, devices, settings.cdi)
    except CdiUnresolvableError as err:
        selecting = (*settings.swarm_resource, envvars.NVIDIA_VISIBLE_DEVICES)
        if env_file is None or not any(name in env_file.values for name in selecting):
            raise
        from hook.beneath import show_path

        raise CdiError(
            f"env file {show_path(env_file.path)}: a device it requests is defined by no CDI spec in "
            f"{', '.join(settings.cdi.spec_dirs)}{err.skipped}"
        ) from None


def resolve_cdi_spec(
    document: dict[str, object], settings: Settings, env_file: EnvFile | None
) -> dict[str, object] | None:
    """Decide a checked config.json whose env file is merged: the edited spec, or None for no GPU request.

    The request is read as the hook reads it (``hook.devices.resolve_devices``): device-list mounts when
    accepted, the variables behind the unprivileged gate, variables from a pinned env file trusted.
    """
    from hook.bundle import parse_env, process_env, spec_mounts
    from hook.devices import resolve_devices
    from hook.privilege import resolve_privileged

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

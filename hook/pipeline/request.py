"""The GPU request: every rule that turns a container's environment and mounts into what the cli is told
(the devices from ``hook.pipeline.devices``, the driver capabilities here, NVIDIA_REQUIRE_* from
``hook.pipeline.requirements`` for an image that has one)."""

from hook.pipeline.config import Settings
from hook.pipeline.devices import is_legacy_image, resolve_devices, resolve_imex_channels, split_tokens
from hook.util import envvars
from hook.util.errors import RequestError
from hook.util.safetext import escape

# NVIDIA_DRIVER_CAPABILITIES (section 10.1): what a modern image gets when it names none.
DEFAULT_CAPABILITIES = frozenset({"compute", "utility"})


class GpuRequest:
    """What a GPU container asks for, after every rule; ``devices`` is never empty."""

    __slots__ = ("capabilities", "devices", "imex_channels", "mig_config", "mig_monitor", "requirements")

    def __init__(
        self,
        *,
        devices: list[str],
        mig_config: str,
        mig_monitor: str,
        imex_channels: list[str],
        capabilities: list[str],
        requirements: list[str],
    ) -> None:
        self.devices = devices
        self.mig_config = mig_config
        self.mig_monitor = mig_monitor
        self.imex_channels = imex_channels
        self.capabilities = capabilities
        self.requirements = requirements


def resolve_request(
    env: dict[str, str],
    mounts: list[tuple[str, str]],
    settings: Settings,
    *,
    privileged: bool,
    trusted: frozenset[str] = frozenset(),
) -> GpuRequest | None:
    """Apply sections 8 to 11 in upstream's order; None when the container asks for no GPU."""
    if settings.disable_require:
        env = {**env, envvars.NVIDIA_DISABLE_REQUIRE: "true"}
    devices = resolve_devices(
        env,
        mounts,
        swarm_resource=settings.swarm_resource,
        accept_volume_mounts=settings.accept_volume_mounts,
        accept_envvar_unprivileged=settings.accept_envvar_unprivileged,
        privileged=privileged,
        trusted=trusted,
    )
    if not devices:
        return None
    mig_config = _mig_value(
        env, envvars.NVIDIA_MIG_CONFIG_DEVICES, "MIG_CONFIG_DEVICES", privileged=privileged
    )
    mig_monitor = _mig_value(
        env, envvars.NVIDIA_MIG_MONITOR_DEVICES, "MIG_MONITOR_DEVICES", privileged=privileged
    )
    legacy = is_legacy_image(env)
    capabilities = resolve_capabilities(env, settings.supported_capabilities, legacy=legacy)
    requirements: list[str] = []
    # (map, not a generator: an env file can bring thousands of names, and this runs for each)
    if legacy or any(map(str.startswith, env, [envvars.NVIDIA_REQUIRE_PREFIX] * len(env))):
        from hook.pipeline.requirements import (
            resolve_requirements,  # only for an image that states a requirement
        )

        requirements = resolve_requirements(env, legacy=legacy)
    imex_channels: list[str] = []
    if not settings.ignore_imex_channel_requests:
        imex_channels = resolve_imex_channels(
            env,
            mounts,
            accept_volume_mounts=settings.accept_volume_mounts,
            accept_envvar_unprivileged=settings.accept_envvar_unprivileged,
            privileged=privileged,
            trusted=trusted,
        )
    return GpuRequest(
        devices=devices,
        mig_config=mig_config,
        mig_monitor=mig_monitor,
        imex_channels=imex_channels,
        capabilities=capabilities,
        requirements=requirements,
    )


def _mig_value(env: dict[str, str], name: str, short: str, *, privileged: bool) -> str:
    """Return a MIG variable's value verbatim; only a privileged container may set it."""
    value = env.get(name, "")
    if value and not privileged:
        raise RequestError(f"cannot set {short} in non privileged container")
    return value


def resolve_capabilities(env: dict[str, str], supported: frozenset[str], *, legacy: bool) -> list[str]:
    """Return the capabilities to pass, sorted; an unknown (or unsupported) name is refused.

    Unset on a legacy image: everything supported. ``all``: everything supported. Unset or empty on a
    modern image: compute and utility (as far as supported). A value with no items (``" ,"``): none.
    """
    name = envvars.NVIDIA_DRIVER_CAPABILITIES
    raw = env.get(name)
    if raw is None and legacy:
        return sorted(supported)
    if raw:
        requested = set(split_tokens(raw))
        if "all" in requested:
            return sorted(supported)
        if not requested <= supported:
            raise RequestError(
                f"unsupported capabilities found in '{escape(','.join(sorted(requested)))}' "
                f"(allowed '{','.join(sorted(requested & supported))}')",
                variable=name,
                redacted=f"{name} names capabilities outside supported-driver-capabilities",
            )
        return sorted(requested)
    return sorted(supported & DEFAULT_CAPABILITIES)

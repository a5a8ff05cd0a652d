"""The GPU request: every rule that turns a container's environment and mounts into what the cli is told --
which GPUs and IMEX channels (env vars, /dev/null volume mounts, the privilege gate: sections 8 and 11 of the
upstream behaviour description), the driver capabilities (section 10.1), the MIG variables, and
NVIDIA_REQUIRE_* from ``hook.pipeline.requirements`` for an image that has one.

Pure decisions on the container's environment, mounts and settings. An empty device list means "not a GPU
container".
"""

from hook.pipeline.config import Settings
from hook.util import envvars, paths
from hook.util.errors import RequestError
from hook.util.paths import DEVICE_LIST_ROOT
from hook.util.safetext import escape, warning

# NVIDIA_DRIVER_CAPABILITIES (section 10.1): what a modern image gets when it names none.
DEFAULT_CAPABILITIES = frozenset({"compute", "utility"})

# --- the devices and IMEX channels asked for -------------------------------------------------------------

_IMEX_PREFIX = "imex/"
_CDI_PREFIX = "cdi/"


def is_legacy_image(env: dict[str, str]) -> bool:
    """A legacy CUDA image sets CUDA_VERSION and no (or an empty) NVIDIA_REQUIRE_CUDA."""
    return bool(env.get(envvars.CUDA_VERSION)) and not env.get(envvars.NVIDIA_REQUIRE_CUDA)


def split_tokens(value: str) -> list[str]:
    """Split a comma-separated request, trimming each token (Go TrimSpace) and dropping empty ones."""
    tokens = (token.strip(envvars.GO_SPACE) for token in value.split(","))
    return [token for token in tokens if token]


def resolve_tokens(tokens: list[str]) -> list[str]:
    """Turn request tokens into a device list: [] (none), ["all"], [""] (``none``) or the ids.

    ``void`` anywhere means no device; otherwise the first ``all`` or ``none`` wins. Repeated ids are kept
    once, at their first position (upstream leaves empty slots: ``0,1,0`` -> ``,1,0``).
    """
    if not tokens or "void" in tokens:
        return []
    for token in tokens:
        if token in ("all", "none"):
            return {"all": ["all"], "none": [""]}[token]
    return list(dict.fromkeys(tokens))


def env_request(env: dict[str, str], names: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Return the tokens requested through env vars and the names of the variables they came from.

    The swarm-resource variables that are set take precedence over NVIDIA_VISIBLE_DEVICES; with no source
    variable set, a legacy CUDA image asks for ``all`` (its source is CUDA_VERSION).
    """
    sources = [name for name in names if name in env] or (
        [envvars.NVIDIA_VISIBLE_DEVICES] if envvars.NVIDIA_VISIBLE_DEVICES in env else []
    )
    if not sources:
        return (["all"], [envvars.CUDA_VERSION]) if is_legacy_image(env) else ([], [])
    tokens = [token for name in sources for token in split_tokens(env[name])]
    return tokens, sources


def mount_requests(mounts: list[tuple[str, str]]) -> list[str]:
    """Return the requests encoded as /dev/null mounts under /var/run/nvidia-container-devices, in order."""
    seen: set[str] = set()
    requests: list[str] = []
    for source, destination in mounts:
        if paths.go_clean(source) != "/dev/null":
            continue
        target = paths.go_clean(destination)
        if target in seen:
            continue
        seen.add(target)
        if not target.startswith(DEVICE_LIST_ROOT):
            continue
        request = target[len(DEVICE_LIST_ROOT) :].strip("/")
        if request:
            requests.append(request)
    return requests


def mount_devices(requests: list[str]) -> list[str]:
    """Return the device names among mount requests (``cdi/a/b/c`` is ``a/b=c``; IMEX ones are skipped)."""
    devices: list[str] = []
    for request in requests:
        if request.startswith(_IMEX_PREFIX):
            continue
        if request.startswith(_CDI_PREFIX):
            from hook.cdi.names import is_qualified_name  # only for a CDI mount request

            rest = request[len(_CDI_PREFIX) :]
            if is_qualified_name(rest):
                devices.append(rest)
                continue
            parts = rest.split("/", 2)
            if len(parts) == 3:
                devices.append(f"{parts[0]}/{parts[1]}={parts[2]}")
            else:
                warning(
                    f"Ignoring invalid mount request for CDI device {escape(request)}: "
                    f"invalid mount CDI device request: {escape(request)}"
                )
            continue
        devices.append(request)
    return devices


def mount_imex_channels(requests: list[str]) -> list[str]:
    """Return the IMEX channels among mount requests (``imex/<channel>``)."""
    return [request[len(_IMEX_PREFIX) :] for request in requests if request.startswith(_IMEX_PREFIX)]


def resolve_devices(
    env: dict[str, str],
    mounts: list[tuple[str, str]],
    *,
    swarm_resource: tuple[str, ...],
    accept_volume_mounts: bool,
    accept_envvar_unprivileged: bool,
    privileged: bool,
    trusted: frozenset[str] = frozenset(),
) -> list[str]:
    """Return the container's device list: volume mounts first (when accepted), then env vars behind the gate.

    ``trusted`` names variables that came from an env file pinned to this pod: a request made only by such
    variables passes the unprivileged gate, because the node's device plugin wrote it for this pod.
    """
    if accept_volume_mounts:
        devices = mount_devices(mount_requests(mounts))
        if devices:
            return devices
    tokens, sources = env_request(env, swarm_resource)
    devices = resolve_tokens(tokens)
    if not devices:
        return []
    # Only an explicit device list from a pinned file passes: a legacy image's implied "all" never does.
    explicit = bool(sources) and envvars.CUDA_VERSION not in sources
    if privileged or accept_envvar_unprivileged or (explicit and set(sources) <= trusted):
        return devices
    # Upstream names the variables it read: a legacy image's implicit "all" counts as NVIDIA_VISIBLE_DEVICES.
    names = [envvars.NVIDIA_VISIBLE_DEVICES] if sources == [envvars.CUDA_VERSION] else sources
    warning(
        "Ignoring devices requested by environment variable(s) in unprivileged container: "
        f"[{' '.join(names)}]"
    )
    return []


def resolve_imex_channels(
    env: dict[str, str],
    mounts: list[tuple[str, str]],
    *,
    accept_volume_mounts: bool,
    accept_envvar_unprivileged: bool,
    privileged: bool,
    trusted: frozenset[str] = frozenset(),
) -> list[str]:
    """Return the IMEX channels of a GPU container (an ``all`` request means none)."""
    if accept_volume_mounts:
        channels = mount_imex_channels(mount_requests(mounts))
        if channels:
            return channels
    name = envvars.NVIDIA_IMEX_CHANNELS
    legacy_default = ["all"] if is_legacy_image(env) else []
    tokens = split_tokens(env[name]) if name in env else legacy_default
    channels = resolve_tokens(tokens)
    if not channels or channels == ["all"]:
        return []
    if privileged or accept_envvar_unprivileged or name in trusted:
        return channels
    warning(f"Ignoring request by environment variable(s) in unprivileged container: [{name}]")
    return []


# --- the request -----------------------------------------------------------------------------------------


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

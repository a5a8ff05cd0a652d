"""Which GPUs and IMEX channels a container asks for: env vars, /dev/null volume mounts, the privilege gate.

Pure decisions on the container's environment, mounts and settings (section 8 and 11 of the upstream
behaviour description). An empty device list means "not a GPU container".
"""

from hook.util import envvars, log, paths
from hook.util.paths import DEVICE_LIST_ROOT
from hook.util.safetext import escape

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
                log.warning(
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
    log.warning(
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
    log.warning(f"Ignoring request by environment variable(s) in unprivileged container: [{name}]")
    return []

"""config.toml: its defaults (in one function) and its validated, typed form (where it is:
hook.pipeline.configfile).

The file is NVIDIA's own ``config.toml``: every key the upstream hook reads keeps its meaning, default and
type check; our settings live in tables upstream ignores (``[env-file]``). Unknown keys are ignored.
"""

from hook.pipeline.configfile import (
    CONFIG_ERROR_PREFIX,
    DEFAULT_RUNTIMES,
    find_config_path,
    load_config_text,
    read_toml,
    resolve_node_engine,
)
from hook.util import envvars, paths
from hook.util.errors import ConfigError
from hook.util.safetext import escape

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from typing import Any

ALL_CAPABILITIES = ("compat32", "compute", "display", "graphics", "ngx", "utility", "video")
MAX_ENV_FILE_BYTES = 16 * 1024 * 1024
# The prestart hook's bound (the OCI ``timeout`` of every hook entry we write or inject), in seconds: far
# above a large node's first nvidia-container-cli call (loading the kernel modules and initialising every
# GPU without persistence mode: seconds to tens of seconds), and below the kubelet's default
# --runtime-request-timeout (2 minutes), so that a hung cli fails the create with runc's own message
# before the kubelet gives up on the call.
DEFAULT_HOOK_TIMEOUT = 60
MAX_HOOK_TIMEOUT = 3600
# ``[gpu-env] device-mode``: how the shim and precreate stage hand devices over (legacy: NVIDIA's hook).
DEVICE_MODES = ("legacy", "cdi")
# ``[gpu-env.cdi] unkeyed-alloc-names``: allocation specs named before the naming key (hook.producer.alloc).
UNKEYED_ALLOC_NAMES = ("accept", "refuse")
DEFAULT_CDI_KIND = "nvidia.com/gpu"
_PREFIX = CONFIG_ERROR_PREFIX


def default_settings(*, suse: bool = False) -> "dict[str, Any]":
    """Return every key we read with its default, shaped like the TOML file (the one source of defaults)."""
    return {
        "disable-require": False,
        "swarm-resource": "",
        "accept-nvidia-visible-devices-envvar-when-unprivileged": True,
        "accept-nvidia-visible-devices-as-volume-mounts": False,
        "supported-driver-capabilities": ",".join(ALL_CAPABILITIES),
        "nvidia-container-cli": {
            "root": "",
            "path": "",
            "environment": [],
            "debug": "",
            "ldcache": "",
            "load-kmods": True,
            "no-pivot": False,
            "no-cgroups": False,
            "user": "root:video" if suse else "",
            "ldconfig": "@/sbin/ldconfig",
        },
        "nvidia-container-runtime": {
            "mode": "auto",
            "runtimes": list(DEFAULT_RUNTIMES),
            "modes": {"legacy": {"cuda-compat-mode": "ldconfig"}},
        },
        "nvidia-container-runtime-hook": {"skip-mode-detection": False},
        "features": {
            "allow-ldconfig-from-container": False,
            "allow-cuda-compat-libs-from-container": False,
            "disable-imex-channel-creation": False,
            "ignore-imex-channel-requests": False,
        },
        "gpu-env-hook": {"timeout": DEFAULT_HOOK_TIMEOUT},
        "gpu-env-runtime": {"runtime": ""},
        "env-file": {
            "variable": envvars.NVIDIA_ENV_FROM_FILE,
            "directories": ["/run/nvidia-env"],
            "max-bytes": 65536,
            "on-missing": "error",
            "require-pod-binding": False,
            # Empty: the engine in the hook's own GPU_ENV_HOOK_ENGINE (install --engine sets it), or none.
            "pod-binding-engine": "",
        },
        "gpu-env": {
            "device-mode": "legacy",
            "cdi": {
                "default-kind": DEFAULT_CDI_KIND,
                "spec-dirs": ["/etc/cdi", "/var/run/cdi"],
                "spec-cache": paths.CDI_SPEC_CACHE_DIR,
                "unkeyed-alloc-names": "accept",
            },
        },
    }


class CliSettings:
    """The ``[nvidia-container-cli]`` table."""

    __slots__ = (
        "debug",
        "environment",
        "ldcache",
        "ldconfig",
        "load_kmods",
        "no_cgroups",
        "no_pivot",
        "path",
        "root",
        "user",
    )

    def __init__(
        self,
        *,
        root: str,
        path: str,
        environment: tuple[str, ...],
        debug: str,
        ldcache: str,
        load_kmods: bool,
        no_pivot: bool,
        no_cgroups: bool,
        user: str,
        ldconfig: str,
    ) -> None:
        self.root = root
        self.path = path
        self.environment = environment
        self.debug = debug
        self.ldcache = ldcache
        self.load_kmods = load_kmods
        self.no_pivot = no_pivot
        self.no_cgroups = no_cgroups
        self.user = user
        self.ldconfig = ldconfig


class EnvFileSettings:
    """The ``[env-file]`` table (ours; upstream ignores it)."""

    __slots__ = (
        "directories",
        "max_bytes",
        "on_missing",
        "pod_binding_engine",
        "require_pod_binding",
        "variable",
    )

    def __init__(
        self,
        *,
        variable: str,
        directories: tuple[str, ...],
        max_bytes: int,
        on_missing: str,
        require_pod_binding: bool,
        pod_binding_engine: str,
    ) -> None:
        self.variable = variable
        self.directories = directories
        self.max_bytes = max_bytes
        self.on_missing = on_missing
        self.require_pod_binding = require_pod_binding
        self.pod_binding_engine = (
            pod_binding_engine  # the engine in effect: the key's value, else GPU_ENV_HOOK_ENGINE, else "none"
        )


class CdiSettings:
    """The ``[gpu-env.cdi]`` table (ours): the kind plain ids map to, where CDI specs are read, where
    decoded YAML specs are cached ("" for no cache), and whether allocation specs named before the naming
    key are still accepted (``accept``) or removed by every ``cdi alloc write`` and ``gc`` (``refuse``)."""

    __slots__ = ("default_kind", "spec_cache", "spec_dirs", "unkeyed_alloc_names")

    def __init__(
        self,
        *,
        default_kind: str,
        spec_dirs: tuple[str, ...],
        spec_cache: str,
        unkeyed_alloc_names: str = "accept",
    ) -> None:
        self.default_kind = default_kind
        self.spec_dirs = spec_dirs
        self.spec_cache = spec_cache
        self.unkeyed_alloc_names = unkeyed_alloc_names


class Settings:
    """The whole validated configuration the hook acts on."""

    __slots__ = (
        "accept_envvar_unprivileged",
        "accept_volume_mounts",
        "allow_cuda_compat_libs_from_container",
        "allow_ldconfig_from_container",
        "cdi",
        "cli",
        "cuda_compat_mode",
        "device_mode",
        "disable_imex_channel_creation",
        "disable_require",
        "env_file",
        "hook_timeout",
        "ignore_imex_channel_requests",
        "mode",
        "runtime",
        "runtimes",
        "skip_mode_detection",
        "source",
        "supported_capabilities",
        "swarm_resource",
    )

    def __init__(
        self,
        *,
        source: str | None,
        disable_require: bool,
        swarm_resource: tuple[str, ...],
        accept_envvar_unprivileged: bool,
        accept_volume_mounts: bool,
        supported_capabilities: frozenset[str],
        cli: CliSettings,
        mode: str,
        runtimes: tuple[str, ...],
        cuda_compat_mode: str,
        skip_mode_detection: bool,
        allow_ldconfig_from_container: bool,
        allow_cuda_compat_libs_from_container: bool,
        disable_imex_channel_creation: bool,
        ignore_imex_channel_requests: bool,
        env_file: EnvFileSettings,
        hook_timeout: int,
        runtime: str,
        device_mode: str,
        cdi: CdiSettings,
    ) -> None:
        self.source = source
        self.disable_require = disable_require
        self.swarm_resource = swarm_resource
        self.accept_envvar_unprivileged = accept_envvar_unprivileged
        self.accept_volume_mounts = accept_volume_mounts
        self.supported_capabilities = supported_capabilities
        self.cli = cli
        self.mode = mode
        self.runtimes = runtimes
        self.cuda_compat_mode = cuda_compat_mode
        self.skip_mode_detection = skip_mode_detection
        self.allow_ldconfig_from_container = allow_ldconfig_from_container
        self.allow_cuda_compat_libs_from_container = allow_cuda_compat_libs_from_container
        self.disable_imex_channel_creation = disable_imex_channel_creation
        self.ignore_imex_channel_requests = ignore_imex_channel_requests
        self.env_file = env_file
        self.hook_timeout = hook_timeout
        self.runtime = runtime
        self.device_mode = device_mode
        self.cdi = cdi


def parse_config(
    text: str | None, *, source: str | None = None, suse: bool | None = None, engine: str | None = None
) -> Settings:
    """Parse TOML text over the defaults and validate every known key; ``None`` means all defaults.

    ``engine`` is the hook's own ``GPU_ENV_HOOK_ENGINE`` (never anything from the container): the default
    of ``[env-file] pod-binding-engine``.
    """
    where = source or "<config>"
    if suse is None:
        suse = _host_is_suse()
    defaults = default_settings(suse=suse)
    merged = defaults if text is None else _merge(defaults, read_toml(text, where), where, "")
    return build_settings(merged, source=source, engine=engine)


def build_settings(merged: "dict[str, Any]", *, source: str | None, engine: str | None = None) -> Settings:
    """Turn a type-checked document (defaults filled in) into Settings, checking cross-key rules."""
    where = source or "<config>"
    pod_binding_engine = resolve_pod_binding_engine(merged["env-file"]["pod-binding-engine"], engine, where)
    cli = merged["nvidia-container-cli"]
    runtime = merged["nvidia-container-runtime"]
    features = merged["features"]
    env_file = merged["env-file"]
    settings = Settings(
        source=source,
        disable_require=merged["disable-require"],
        swarm_resource=split_list(merged["swarm-resource"]),
        accept_envvar_unprivileged=merged["accept-nvidia-visible-devices-envvar-when-unprivileged"],
        accept_volume_mounts=merged["accept-nvidia-visible-devices-as-volume-mounts"],
        supported_capabilities=parse_supported_capabilities(merged["supported-driver-capabilities"], where),
        cli=CliSettings(
            root=cli["root"],
            path=cli["path"],
            environment=tuple(cli["environment"]),
            debug=cli["debug"],
            ldcache=cli["ldcache"],
            load_kmods=cli["load-kmods"],
            no_pivot=cli["no-pivot"],
            no_cgroups=cli["no-cgroups"],
            user=cli["user"],
            ldconfig=cli["ldconfig"],
        ),
        mode=runtime["mode"],
        runtimes=tuple(runtime["runtimes"]),
        cuda_compat_mode=runtime["modes"]["legacy"]["cuda-compat-mode"],
        skip_mode_detection=merged["nvidia-container-runtime-hook"]["skip-mode-detection"],
        allow_ldconfig_from_container=features["allow-ldconfig-from-container"],
        allow_cuda_compat_libs_from_container=features["allow-cuda-compat-libs-from-container"],
        disable_imex_channel_creation=features["disable-imex-channel-creation"],
        ignore_imex_channel_requests=features["ignore-imex-channel-requests"],
        env_file=EnvFileSettings(
            variable=env_file["variable"],
            directories=tuple(env_file["directories"]),
            max_bytes=env_file["max-bytes"],
            on_missing=env_file["on-missing"],
            require_pod_binding=env_file["require-pod-binding"],
            pod_binding_engine=pod_binding_engine,
        ),
        hook_timeout=merged["gpu-env-hook"]["timeout"],
        runtime=merged["gpu-env-runtime"]["runtime"],
        device_mode=merged["gpu-env"]["device-mode"],
        cdi=CdiSettings(
            default_kind=merged["gpu-env"]["cdi"]["default-kind"],
            spec_dirs=tuple(merged["gpu-env"]["cdi"]["spec-dirs"]),
            spec_cache=merged["gpu-env"]["cdi"]["spec-cache"],
            unkeyed_alloc_names=merged["gpu-env"]["cdi"]["unkeyed-alloc-names"],
        ),
    )
    _check_rules(settings, where)
    return settings


def resolve_pod_binding_engine(configured: str, engine: str | None, where: str) -> str:
    """Return the pod-binding engine in effect: the configured one, else the hook's GPU_ENV_HOOK_ENGINE,
    else ``none``; an unknown name in either is an error (the pin is never checked against a guess)."""
    names = ", ".join(envvars.POD_BINDING_ENGINES)
    if configured:
        if configured not in envvars.POD_BINDING_ENGINES:
            raise ConfigError(
                f"{_PREFIX}{where}: env-file.pod-binding-engine must be one of {names} "
                f"(or empty: {envvars.GPU_ENV_HOOK_ENGINE} decides), got '{escape(configured)}'"
            )
        return configured
    if not engine:
        return "none"
    if engine not in envvars.POD_BINDING_ENGINES:
        raise ConfigError(
            f"{_PREFIX}the hook's environment: {envvars.GPU_ENV_HOOK_ENGINE} must be one of {names}, "
            f"got '{escape(engine)}'"
        )
    return engine


def split_list(value: str) -> tuple[str, ...]:
    """Split a comma-separated setting, trimming items and dropping empty ones (upstream's rule)."""
    items = (item.strip(envvars.GO_SPACE) for item in value.split(","))
    return tuple(item for item in items if item)


def parse_supported_capabilities(value: str, where: str) -> frozenset[str]:
    """Parse ``supported-driver-capabilities``: ``all``, or a list of the seven known names."""
    if value == "all":
        return frozenset(ALL_CAPABILITIES)
    items = split_list(value)
    unknown = sorted(set(items) - set(ALL_CAPABILITIES))
    if unknown:
        raise ConfigError(
            f"{_PREFIX}{where}: supported-driver-capabilities must list only "
            f"{', '.join(ALL_CAPABILITIES)} or be 'all', got unknown {', '.join(repr(u) for u in unknown)}"
        )
    return frozenset(items)


def _check_rules(settings: Settings, where: str) -> None:
    """Apply the checks that span more than one key's type."""
    ldconfig = settings.cli.ldconfig
    if not ldconfig.startswith("@") and not settings.allow_ldconfig_from_container:
        raise ConfigError(
            f'{_PREFIX}{where}: nvidia-container-cli.ldconfig value "{ldconfig}" is not host-relative '
            "(does not start with a '@')"
        )
    env_file = settings.env_file
    if not is_env_name(env_file.variable):
        raise ConfigError(f"{_PREFIX}{where}: env-file.variable must be an environment variable name")
    for directory in env_file.directories:
        if not directory.startswith("/"):
            raise ConfigError(
                f"{_PREFIX}{where}: env-file.directories must hold absolute paths, got {directory!r}"
            )
    if env_file.on_missing not in ("error", "ignore"):
        raise ConfigError(f"{_PREFIX}{where}: env-file.on-missing must be 'error' or 'ignore'")
    if not 0 < env_file.max_bytes <= MAX_ENV_FILE_BYTES:
        raise ConfigError(f"{_PREFIX}{where}: env-file.max-bytes must be between 1 and {MAX_ENV_FILE_BYTES}")
    if not 0 < settings.hook_timeout <= MAX_HOOK_TIMEOUT:
        raise ConfigError(
            f"{_PREFIX}{where}: gpu-env-hook.timeout must be between 1 and {MAX_HOOK_TIMEOUT} (seconds)"
        )
    if settings.runtime and not settings.runtime.startswith("/"):
        raise ConfigError(f"{_PREFIX}{where}: gpu-env-runtime.runtime must be an absolute path")
    _check_cdi_rules(settings, where)


def _check_cdi_rules(settings: Settings, where: str) -> None:
    """``[gpu-env]``: a known device mode, a ``vendor/class`` default kind, absolute spec directories
    and cache directory."""
    if settings.device_mode not in DEVICE_MODES:
        raise ConfigError(f"{_PREFIX}{where}: gpu-env.device-mode must be 'legacy' or 'cdi'")
    if settings.cdi.default_kind != DEFAULT_CDI_KIND:  # the default is valid: no import for it
        _check_cdi_kind(settings.cdi.default_kind, where)
    for directory in settings.cdi.spec_dirs:
        if not directory.startswith("/"):
            raise ConfigError(
                f"{_PREFIX}{where}: gpu-env.cdi.spec-dirs must hold absolute paths, got {directory!r}"
            )
    if settings.cdi.spec_cache and not settings.cdi.spec_cache.startswith("/"):
        raise ConfigError(f"{_PREFIX}{where}: gpu-env.cdi.spec-cache must be an absolute path, or empty")
    if settings.cdi.unkeyed_alloc_names not in UNKEYED_ALLOC_NAMES:
        raise ConfigError(f"{_PREFIX}{where}: gpu-env.cdi.unkeyed-alloc-names must be 'accept' or 'refuse'")


def _check_cdi_kind(kind: str, where: str) -> None:
    """``gpu-env.cdi.default-kind`` must be ``vendor/class`` as CDI names them."""
    from hook.cdi.names import class_error, parse_qualifier, vendor_error

    vendor, klass = parse_qualifier(kind)
    problem = vendor_error(vendor, reveal=True) or class_error(klass, reveal=True)
    if problem is not None:
        raise ConfigError(f"{_PREFIX}{where}: gpu-env.cdi.default-kind must be vendor/class: {problem}")


def is_env_name(name: str) -> bool:
    """Tell whether ``name`` matches ``[A-Za-z_][A-Za-z0-9_]*`` (an ASCII identifier is exactly that)."""
    return name.isascii() and name.isidentifier()


def _merge(
    defaults: "dict[str, Any]", document: "dict[str, Any]", where: str, prefix: str
) -> "dict[str, Any]":
    """Overlay a parsed document on the defaults, checking the type of every key we know."""
    merged: dict[str, Any] = {}
    for key, default in defaults.items():
        name = prefix + key
        if key not in document:
            merged[key] = default
            continue
        value = document[key]
        if isinstance(default, dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{_PREFIX}{where}: {name} must be a table, got {_kind(value)}")
            merged[key] = _merge(default, value, where, name + ".")
        elif not _same_kind(default, value):
            raise ConfigError(f"{_PREFIX}{where}: {name} must be {_kind(default)}, got {_kind(value)}")
        else:
            merged[key] = value
    return merged


def _same_kind(default: object, value: object) -> bool:
    """Tell whether a TOML value has the type of the key's default (lists hold strings)."""
    if isinstance(default, list):
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    return type(default) is type(value)


def _kind(value: object) -> str:
    """Name a TOML value's type the way a TOML user says it."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array of strings" if all(isinstance(item, str) for item in value) else "an array"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"


def _host_is_suse(os_release: str = "/etc/os-release") -> bool:
    """Tell whether the host is SUSE-like (upstream then defaults ``user`` to root:video)."""
    try:
        with open(os_release, "rb") as fh:  # bytes: a text file object costs a codec lookup (~30 us cold)
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return False
    for line in lines:
        if line.startswith("ID_LIKE="):
            value = line.partition("=")[2].strip().strip("\"'")
            return "suse" in value.split() or "opensuse" in value.split()
    return False


def load_node_settings(
    config: str | None, environ: "dict[str, str] | os._Environ[str]", *, engine: str | None = None
) -> Settings:
    """Find, read and parse config.toml as the installed hook does, with the pod-binding engine it has
    (``configfile.resolve_node_engine``): what the commands for people and ``check_env_file`` check
    against."""
    path, required = find_config_path(config, environ)
    text = load_config_text(path, required=required)
    node_engine = resolve_node_engine(engine, environ)
    return parse_config(text, source=path if text is not None else None, engine=node_engine)

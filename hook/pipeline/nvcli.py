"""Handing a GPU container to nvidia-container-cli: the runtime-mode check upstream makes first (the hook
serves only the ``legacy`` mode, section 12), where the cli is, the exact argv upstream builds, and the exec
that replaces the hook."""

import posix
import sys

from hook.util import paths
from hook.util.errors import ExecError, RequestError
from hook.util.safetext import info, os_reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hook.pipeline.config import CliSettings, Settings
    from hook.pipeline.request import GpuRequest

# --- the runtime mode ------------------------------------------------------------------------------------

DIRECT_INVOCATION_MESSAGE = (
    "invoking the NVIDIA Container Runtime Hook directly (e.g. specifying the docker --gpus flag) is not "
    "supported. Please use the NVIDIA Container Runtime (e.g. specify the --runtime=nvidia flag) instead"
)

# With our ``[gpu-env] device-mode = "cdi"``, devices are CDI edits applied before the runtime starts, and
# NVIDIA_VISIBLE_DEVICES is ``void`` afterwards: a request that still reaches the hook was never injected.
CDI_MODE_MESSAGE = (
    'device-mode is "cdi", but the container reached the prestart hook still asking for GPUs: CDI devices '
    "are injected before the container is created, by the gpu-env-runtime shim or podman's precreate hook"
)


def _all_cdi_names(devices: list[str]) -> bool:
    """Tell whether every device is a fully qualified CDI name (``vendor/class=name``)."""
    from hook.cdi.names import is_qualified_name

    return all(is_qualified_name(device) for device in devices)


def resolve_mode(configured: str, devices: list[str], *, platform: str | None = None) -> tuple[str, str]:
    """Return the mode and the line upstream logs about it: ``cdi`` when every device is a CDI name."""
    if configured != "auto":
        return configured, f"Using requested mode '{configured}'"
    # A CDI name has an "=": only then is the CDI name module loaded (most GPU containers name indexes).
    if devices and all("=" in device for device in devices) and _all_cdi_names(devices):
        mode = "cdi"
    else:
        mode = platform if platform is not None else detect_platform_mode()
    return mode, f"Auto-detected mode as '{mode}'"


def check_mode(configured: str, devices: list[str], *, skip: bool, device_mode: str = "legacy") -> None:
    """Refuse unless the resolved mode is ``legacy``; log the mode line on success, as upstream does.

    In our CDI device mode the hook never hands devices over (see ``CDI_MODE_MESSAGE``).
    """
    if device_mode == "cdi":
        raise RequestError(CDI_MODE_MESSAGE)
    if skip:
        return
    mode, line = resolve_mode(configured, devices)
    if mode != "legacy":
        raise RequestError(DIRECT_INVOCATION_MESSAGE)
    info(line)


def detect_platform_mode() -> str:
    """Return ``csv`` on a Tegra system without NVML, else ``legacy`` (WSL and NVML hosts are legacy)."""
    if not _has_tegra_files():
        return "legacy"
    return "legacy" if _can_load("libnvidia-ml.so.1") else "csv"


def _has_tegra_files() -> bool:
    """Tell whether the Tegra release file or a Tegra SoC family is present."""
    if paths.exists("/etc/nv_tegra_release"):
        return True
    try:
        with open("/sys/devices/soc0/family", "rb") as fh:
            return fh.read().strip().lower().startswith(b"tegra")
    except OSError:
        return False


def _can_load(library: str) -> bool:
    """Tell whether the dynamic loader can open a library (only asked on Tegra hosts)."""
    import ctypes

    try:
        ctypes.CDLL(library)
    except OSError:
        return False
    return True


# --- the cli ---------------------------------------------------------------------------------------------

CLI_NAME = "nvidia-container-cli"
SEARCH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
_COMPAT_FLAGS = {"ldconfig": "ldconfig", "mount": "mount", "disabled": "disabled", "hook": "disabled"}


def build_search_path(current: str, root: str) -> str:
    """Return upstream's rewritten PATH: current entries, standard dirs, all of them under ``root`` first."""
    entries = current.split(":") if current else []
    entries += [d for d in SEARCH_DIRS if d not in entries]
    if root and root != "/":
        entries = [paths.go_clean(f"{root}/{entry}") for entry in entries] + entries
    return ":".join(entries)


def locate_cli(cli: "CliSettings", environ: dict[str, str]) -> str:
    """Return the cli's path: the configured one verbatim, else a PATH search (which rewrites ``environ``)."""
    if cli.path:
        return cli.path
    search = build_search_path(environ.get("PATH", ""), cli.root)
    environ["PATH"] = search
    for directory in search.split(":"):
        candidate = paths.join(directory or ".", CLI_NAME)
        if paths.isfile(candidate) and posix.access(candidate, posix.X_OK):
            return candidate
    raise ExecError(
        f'couldn\'t find binary {CLI_NAME} in PATH: exec: "{CLI_NAME}": executable file not found in $PATH'
    )


def normalize_ldconfig(value: str) -> str:
    """Prefer ``<path>.real`` when the host has it, for host-relative (``@``) values; others are verbatim."""
    if not value.startswith("@"):
        return value
    path = value[1:]
    path = path.removesuffix(".real")
    real = path + ".real"
    return "@" + (real if paths.exists(real) else path)


def cuda_compat_flags(settings: "Settings") -> list[str]:
    """Return the ``--cuda-compat-mode`` flag for the configured legacy mode (none for an unknown value
    when the container may bring its own compat libraries)."""
    mode = _COMPAT_FLAGS.get(settings.cuda_compat_mode)
    if mode is None:
        if settings.allow_cuda_compat_libs_from_container:
            return []
        mode = "disabled"
    return [f"--cuda-compat-mode={mode}"]


def resolve_rootfs(root_path: str, cwd: str) -> str:
    """Make ``root.path`` absolute against the hook's working directory (not the bundle) and clean it."""
    return paths.go_clean(paths.join(cwd, root_path))


def build_argv(
    request: "GpuRequest", settings: "Settings", *, cli_path: str, rootfs: str, pid: int, debug: bool
) -> list[str]:
    """Build the cli's argv in upstream's exact order."""
    cli = settings.cli
    argv = [cli_path]
    if cli.root:
        argv.append(f"--root={cli.root}")
    if cli.load_kmods:
        argv.append("--load-kmods")
    if settings.disable_imex_channel_creation:
        argv.append("--no-create-imex-channels")
    if cli.no_pivot:
        argv.append("--no-pivot")
    if debug:
        argv.append("--debug=/dev/stderr")
    elif cli.debug:
        argv.append(f"--debug={cli.debug}")
    if cli.ldcache:
        argv.append(f"--ldcache={cli.ldcache}")
    if cli.user:
        argv.append(f"--user={cli.user}")
    argv.append("configure")
    argv += cuda_compat_flags(settings)
    ldconfig = normalize_ldconfig(cli.ldconfig)
    if ldconfig:
        argv.append(f"--ldconfig={ldconfig}")
    if cli.no_cgroups:
        argv.append("--no-cgroups")
    devices = ",".join(request.devices)
    if devices:
        argv.append(f"--device={devices}")
    if request.mig_config:
        argv.append(f"--mig-config={request.mig_config}")
    if request.mig_monitor:
        argv.append(f"--mig-monitor={request.mig_monitor}")
    channels = ",".join(request.imex_channels)
    if channels:
        argv.append(f"--imex-channel={channels}")
    argv += [f"--{capability}" for capability in request.capabilities]
    argv += [f"--require={requirement}" for requirement in request.requirements]
    argv.append(f"--pid={pid}")
    argv.append(rootfs)
    return argv


def build_cli_env(environ: dict[str, str], extra: tuple[str, ...]) -> dict[str, str]:
    """Return the cli's environment: the hook's own, then configured entries that do not name a variable
    already set (upstream appends them; the C library's getenv then finds the first)."""
    env = dict(environ)
    for entry in extra:
        name, sep, value = entry.partition("=")
        if sep and name not in env:
            env[name] = value
    return env


def exec_cli(argv: list[str], env: dict[str, str]) -> None:
    """Replace this process with the cli (same pid, same stdio); returns only by raising ExecError."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        posix.execve(argv[0], argv, env)
    except OSError as err:
        raise ExecError(f"exec failed: {os_reason(err, go=True)}") from None

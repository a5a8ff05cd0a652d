"""The runtime-mode check: the hook serves only the ``legacy`` mode (section 12)."""

from hook.util import log, paths
from hook.util.errors import RequestError

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
    log.info(line)


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

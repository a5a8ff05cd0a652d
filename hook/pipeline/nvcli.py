"""nvidia-container-cli: where it is, the exact argv upstream builds, and the exec that replaces the hook."""

import posix
import sys

from hook.util import paths
from hook.util.errors import ExecError
from hook.util.safetext import os_reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hook.pipeline.config import CliSettings, Settings
    from hook.pipeline.request import GpuRequest

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

"""``gpu-env-hook nri [SOCKET]``: load the configuration once, build our hook's entry, serve the runtime."""

import os
import sys

from hook.util import envvars
from hook.util.errors import HookError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hook.nri.decide import Context


def run_nri(args: list[str], *, config: str | None) -> int:
    """Run the plugin until stopped; a bad command line or configuration is refused before connecting."""
    if len(args) > 1 or (args and args[0].startswith("-")):
        raise UsageError("nri takes at most one argument, the NRI socket's path")
    try:
        from hook.nri.plugin import DEFAULT_SOCKET, log_line, run
    except ImportError as err:  # the node tree's wrapper runs without site-packages (-S)
        raise HookError(
            f"gpu-env-hook nri: cannot load {err.name or 'protobuf'}: run it with an interpreter that has "
            "the protobuf package (pip install gpu-env-hook), not the engines' -S wrapper"
        ) from None
    context = build_context(config)
    import signal

    signal.signal(signal.SIGTERM, _interrupt)  # a pod's stop: as SIGINT, the connection closed, status 0
    try:
        return run(args[0] if args else DEFAULT_SOCKET, context, ready=environ_ready())
    except KeyboardInterrupt:  # SIGINT, SIGTERM: stopped
        log_line("gpu-env-hook nri: stopped")
        return 0


def _interrupt(_signum: int, _frame: object) -> None:
    """SIGTERM's handler: stop as on SIGINT."""
    raise KeyboardInterrupt


def environ_ready() -> str | None:
    """The readiness file the plugin's environment names (``GPU_ENV_HOOK_NRI_READY``), if any."""
    from hook.util.paths import environ

    return environ().get(envvars.GPU_ENV_HOOK_NRI_READY) or None


def build_context(config: str | None) -> "Context":
    """The plugin's settings (config.toml read once, ``pod-binding-engine`` containerd) and our hook entry."""
    from hook.launcher import own_command
    from hook.nri.decide import ENGINE, Context
    from hook.pipeline.config import parse_config
    from hook.pipeline.configfile import find_config_path, load_config_text
    from hook.stages.shim import build_hook_entry
    from hook.util.paths import environ

    env = environ()
    config_path, required = find_config_path(config, env)
    config_text = load_config_text(config_path, required=required)
    source = config_path if config_text is not None else None
    settings = parse_config(config_text, source=source, engine=ENGINE)
    # Our hook runs with -S whatever the plugin needs (the plugin loads protobuf from site-packages; the
    # hook needs nothing beyond its package and the standard library). In a pod, the runtime starts it on
    # the node: with the interpreter and the package install wrote there (GPU_ENV_HOOK_NRI_NODE_PYTHON).
    node_python = env.get(envvars.GPU_ENV_HOOK_NRI_NODE_PYTHON)
    if node_python:
        from hook.launcher import CURRENT, LIB, python_command
        from hook.util.paths import RUNTIME_TREE

        command, lib = python_command(node_python, RUNTIME_TREE), f"{RUNTIME_TREE}/{CURRENT}/{LIB}"
    else:
        command, lib = own_command(), package_lib()
    hook = build_hook_entry(command, source, {**env, envvars.GPU_ENV_HOOK_ENGINE: ENGINE}, lib=lib)
    return Context(settings=settings, config_text=config_text, hook=hook)


def package_lib() -> str:
    """The directory our package was loaded from (the hook entries load the same one)."""
    package = sys.modules["hook"].__file__ or ""
    return os.path.dirname(os.path.dirname(os.path.abspath(package)))

"""The prestart stage as one short pipeline: state -> config.json -> env file -> GPU request -> cli.

Upstream loads config.toml before anything else. Parsing TOML costs about as much as starting the
interpreter, so here it is parsed only when the container could be a GPU container under *some*
configuration (see ``may_request_gpu``); a missing required config file is still refused first.
"""

from hook.pipeline.bundle import (
    check_spec,
    load_spec,
    load_state,
    parse_env,
    process_env,
    resolve_privileged,
    root_path,
    set_process_env,
    spec_annotations,
    spec_mounts,
    write_spec,
)
from hook.pipeline.configfile import config_may_select, find_config_path, load_config_text
from hook.util import envvars
from hook.util.errors import RequestError
from hook.util.paths import DEVICE_LIST_ROOT

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from typing import BinaryIO

    from hook.pipeline.bundle import Spec, State
    from hook.pipeline.config import Settings
    from hook.pipeline.envfile import EnvFile
    from hook.pipeline.request import GpuRequest


class Options:
    """What the command line asked of a stage."""

    __slots__ = ("config", "debug", "env_file_merged", "env_only")

    def __init__(
        self,
        *,
        config: str | None = None,
        debug: bool = False,
        env_only: bool = False,
        env_file_merged: str | None = None,
    ) -> None:
        self.config = config
        self.debug = debug
        self.env_only = env_only
        # The runtime shim's env-file decision (``hook.pipeline.handoff``): when set, the file is never
        # read here.
        self.env_file_merged = env_file_merged


class Resolution:
    """Everything the hook decided for one container (what ``resolve`` prints, what prestart acts on)."""

    __slots__ = ("entries", "env_file", "request", "settings", "spec", "state")

    def __init__(
        self,
        *,
        state: "State",
        spec: "Spec",
        settings: "Settings | None",
        env_file: "EnvFile | None",
        entries: list[str],
        request: "GpuRequest | None",
    ) -> None:
        self.state = state
        self.spec = spec
        self.settings = settings
        self.env_file = env_file
        self.entries = entries
        self.request = request

    @property
    def env_changed(self) -> bool:
        """Tell whether the env file changed ``process.env``."""
        return self.env_file is not None and self.entries != process_env(self.spec.document)


def may_request_gpu(env: dict[str, str], mounts: list[tuple[str, str]], config_text: str | None) -> bool:
    """Tell whether any configuration could make this a GPU container (False: exit 0 without parsing it).

    NVIDIA_VISIBLE_DEVICES, a legacy CUDA_VERSION, NVIDIA_ENV_FROM_FILE or a device-list mount can; other
    variables only through config.toml's swarm-resource or [env-file] variable (``config_may_select``).
    """
    if envvars.NVIDIA_VISIBLE_DEVICES in env or env.get(envvars.CUDA_VERSION):
        return True
    if env.get(envvars.NVIDIA_ENV_FROM_FILE):
        return True
    device_list_dir = DEVICE_LIST_ROOT.rsplit("/", 1)[1]
    return any(device_list_dir in destination for _, destination in mounts) or config_may_select(config_text)


def resolve_container(
    options: Options, stdin: "BinaryIO", environ: "dict[str, str] | os._Environ[str]"
) -> Resolution:
    """Run every decision of the prestart stage, with no side effect but reading files."""
    config_path, required = find_config_path(options.config, environ)
    config_text = load_config_text(config_path, required=required)
    state = load_state(stdin)
    spec = load_spec(state.bundle)
    check_spec(spec.document)
    entries = process_env(spec.document)
    env = parse_env(entries)
    privileged = resolve_privileged(spec.document)
    mounts = spec_mounts(spec.document)
    if not may_request_gpu(env, mounts, config_text):
        return Resolution(state=state, spec=spec, settings=None, env_file=None, entries=entries, request=None)

    from hook.pipeline.config import parse_config
    from hook.pipeline.request import resolve_request

    settings = parse_config(
        config_text,
        source=config_path if config_text is not None else None,
        engine=environ.get(envvars.GPU_ENV_HOOK_ENGINE),
    )
    annotations = {**spec_annotations(spec.document), **state.annotations}
    env_file: EnvFile | None = None
    if options.env_file_merged is not None:  # the shim read, checked and merged it: one read per container
        from hook.pipeline.handoff import take_handoff

        env_file = take_handoff(options.env_file_merged, env, settings.env_file.variable)
    elif env.get(settings.env_file.variable):  # the env-file code only for a container that names a file
        from hook.pipeline.envfile import resolve_env_file

        env_file = resolve_env_file(env, annotations, settings.env_file)
    trusted: frozenset[str] = frozenset()
    if env_file is not None:
        from hook.pipeline.envfile import merge_env

        entries = merge_env(entries, env_file.values)
        env = {**env, **env_file.values}  # = parse_env(entries), same order, without splitting them again
        if env_file.pinned:
            trusted = frozenset(env_file.values)
    try:
        request = resolve_request(env, mounts, settings, privileged=privileged, trusted=trusted)
    except Exception as err:
        if isinstance(err, RequestError) and env_file is not None and err.variable in env_file.values:
            from hook.util.beneath import show_path

            raise RequestError(f"env file {show_path(env_file.path)}: {err.redacted}") from None
        raise
    return Resolution(
        state=state, spec=spec, settings=settings, env_file=env_file, entries=entries, request=request
    )


def run_prestart(
    options: Options, stdin: "BinaryIO", environ: "dict[str, str] | os._Environ[str]", cwd: str
) -> int:
    """The prestart (createRuntime) stage: resolve, then exec nvidia-container-cli; 0 for a non-GPU one."""
    resolution = resolve_container(options, stdin, environ)
    request, settings = resolution.request, resolution.settings
    if request is None or settings is None or options.env_only:
        _write_merged_env(resolution)
        return 0

    if settings.device_mode == "cdi":
        from hook.pipeline.cdidevices import was_injected

        if was_injected(resolution.spec.document):  # the shim or precreate stage handed the devices over
            return 0
    from hook.pipeline.nvcli import check_mode, exec_cli

    check_mode(
        settings.mode, request.devices, skip=settings.skip_mode_detection, device_mode=settings.device_mode
    )
    argv, cli_env = build_cli_invocation(resolution, options, environ, cwd)
    _write_merged_env(resolution)
    exec_cli(argv, cli_env)
    return 0  # pragma: no cover - exec_cli returns only by raising


def build_cli_invocation(
    resolution: Resolution, options: Options, environ: "dict[str, str] | os._Environ[str]", cwd: str
) -> tuple[list[str], dict[str, str]]:
    """Return the cli's argv and environment for a GPU container (shared by prestart and ``resolve``)."""
    from hook.pipeline.nvcli import build_argv, build_cli_env, locate_cli, resolve_rootfs

    request, settings = resolution.request, resolution.settings
    assert request is not None  # noqa: S101 - callers pass a GPU container
    assert settings is not None  # noqa: S101 - ditto
    rootfs = resolve_rootfs(root_path(resolution.spec.document), cwd)
    cli_environ = dict(environ)
    cli_path = locate_cli(settings.cli, cli_environ)
    argv = build_argv(
        request, settings, cli_path=cli_path, rootfs=rootfs, pid=resolution.state.pid, debug=options.debug
    )
    return argv, build_cli_env(cli_environ, settings.cli.environment)


def _write_merged_env(resolution: Resolution) -> None:
    """Write the merged ``process.env`` back to config.json, only when the env file changed it."""
    if resolution.env_changed:
        spec = resolution.spec
        write_spec(spec.path, set_process_env(spec.document, resolution.entries))

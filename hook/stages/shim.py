"""gpu-env-runtime: an OCI runtime shim that merges the env file into config.json, then execs the runtime.

Engines call it with a runc command line. On ``create`` and ``run`` it loads the bundle's config.json,
merges the env file the container names (the hook's own checks, ``hook.pipeline.specenv``) into
``process.env`` and, when the merged environment asks for GPUs and no hook of ours or NVIDIA's is there, adds
our prestart hook. Then, as for every other command, it ``execv``s the real runtime with the argv it was
given: no subprocess, every inherited file descriptor and the environment kept. Config.json is read only on
``create``/``run``, decoded only when its bytes could matter, and config.toml is parsed only when needed.

A refusal is one line on stderr (and in runc's ``--log`` file, in its ``--log-format``), exit status 1,
config.json untouched and the real runtime never run. ``main`` is the only place that reports errors.
"""

import os
import sys

from hook.pipeline.configfile import find_config_path, load_config_text
from hook.util.envvars import GPU_ENV_HOOK_ENGINE, GPU_ENV_RUNTIME_PID, GPU_ENV_RUNTIME_PROBE
from hook.util.errors import ExecError, HookError, SpecError, describe_os_error
from hook.util.paths import FIXED_PATH, RUNTIME_WRAPPERS
from hook.util.safetext import LINE_LIMIT, escape, os_reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

PROG = "gpu-env-runtime"
# Commands whose bundle the shim edits before the runtime reads it.
CREATE_COMMANDS = ("create", "run")
# Global flags (runc's and crun's) that take a value, as ``--flag value`` or ``--flag=value``; any other
# flag before the command is a boolean (``--debug``, ``--systemd-cgroup``, ``--help``, ``--version``).
# Set before the command (``--help``, ``-v=t``), these make the runtime print its help or version and do
# nothing else: the command line goes to the runtime as it is, whatever follows (runc --help create rewrites
# no bundle). Set false (``--help=false``, ``-h=0``: Go's strconv.ParseBool), runc runs the command as if
# they were absent; any other value, or both forms of one flag (``-h`` and ``--help``), is runc's usage error.
PASS_FLAGS = {"h": "help", "help": "help", "v": "version", "version": "version"}
GLOBAL_VALUE_FLAGS = frozenset(
    {"root", "log", "log-format", "criu", "rootless", "cgroup-manager", "log-level"}
)
# Flags of create/run that take a value (urfave/cli also accepts them after the container id).
COMMAND_VALUE_FLAGS = frozenset({"bundle", "b", "console-socket", "pid-file", "preserve-fds"})
# Executables that already are a GPU hook: NVIDIA's two names and ours.
GPU_HOOK_NAMES = ("nvidia-container-runtime-hook", "nvidia-container-toolkit", "gpu-env-hook")
# config.toml words without which neither ``[gpu-env-runtime] runtime`` nor ``[nvidia-container-runtime]
# runtimes`` is set.
_RUNTIMES_MARKERS = ("runtime", "\\")
LOOP_FIX = "set the real runtime (runc, crun) with `install --runtime PATH` or [gpu-env-runtime] runtime"
# How long the loop probe of a script runtime may take (it only runs ``RUNTIME --version``).
PROBE_TIMEOUT = 10


class Invocation:
    """What the shim needs from a runtime command line: the command, the bundle and where to log."""

    __slots__ = ("bundle", "command", "log_json", "log_path")

    def __init__(self, *, command: str | None, bundle: str, log_path: str | None, log_json: bool) -> None:
        self.command = command
        self.bundle = bundle
        self.log_path = log_path
        self.log_json = log_json


def parse_runtime_args(argv: list[str]) -> Invocation:
    """Parse a runc command line: global flags (a flag's value is never the command), the command, and for
    ``create``/``run`` the bundle (``--bundle``/``-b``, ``=`` or a space, the last one wins, else ``.``)."""
    options: dict[str, str] = {}
    index = 0
    command: str | None = None
    while index < len(argv):
        arg = argv[index]
        index += 1
        if arg == "--":
            command = argv[index] if index < len(argv) else None
            index += 1
            break
        if len(arg) < 2 or not arg.startswith("-"):
            command = arg
            break
        name, has_value, value = arg.lstrip("-").partition("=")
        if name in GLOBAL_VALUE_FLAGS and not has_value and index < len(argv):
            value, index = argv[index], index + 1
        options[name] = value if has_value or name not in PASS_FLAGS else "true"
    if _passes_through(options):
        command = None
    bundle = "."
    if command in CREATE_COMMANDS:
        bundle = _find_bundle(argv[index:]) or "."
    log_path = options.get("log") or None
    return Invocation(
        command=command, bundle=bundle, log_path=log_path, log_json=options.get("log-format") == "json"
    )


def _passes_through(options: dict[str, str]) -> bool:
    """Tell whether the global flags make runc print its help or version, or refuse its usage, instead of
    running the command: a help or version flag set true, a value Go's strconv.ParseBool does not read (runc:
    ``invalid boolean value "yes" for -help``), or both forms of one (``Cannot use two forms of the same
    flag``). The last value of a form wins, as with Go's flag package."""
    given = [name for name in options if name in PASS_FLAGS]
    if not given:
        return False
    forms = [PASS_FLAGS[name] for name in given]
    if len(set(forms)) < len(forms) or "true" in (options[name] for name in given):
        return True  # a plain --help or --version (ParseBool is loaded only for a value given with =)
    from hook.pipeline.requirements import parse_go_bool

    return any(parse_go_bool(options[name]) is not False for name in given)


def _find_bundle(args: list[str]) -> str | None:
    """Return the last ``--bundle``/``-b`` value among a command's arguments (flags may follow the id)."""
    bundle = None
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            break
        if len(arg) < 2 or not arg.startswith("-"):
            continue
        name, has_value, value = arg.lstrip("-").partition("=")
        if name in COMMAND_VALUE_FLAGS and not has_value and index < len(args):
            value, index = args[index], index + 1
        if name in ("bundle", "b"):
            bundle = value
    return bundle


# --- the real runtime ------------------------------------------------------------------------------------


def load_runtimes(config_text: str | None, source: str | None) -> tuple[str, ...]:
    """Return the runtimes to try: ``[gpu-env-runtime] runtime`` when set (ours: NVIDIA's runtime may name
    this shim in its own key), else ``[nvidia-container-runtime] runtimes``, else the default.

    Read through ``configfile.read_toml`` (the one TOML reader) without building the settings, when the two
    keys are well typed: only these keys matter here, and a config error elsewhere must not stop a runtime
    call. Otherwise the full config parser says what is wrong.
    """
    from hook.pipeline.configfile import config_mentions

    if config_text is None or not config_mentions(config_text, _RUNTIMES_MARKERS):
        from hook.pipeline.configfile import DEFAULT_RUNTIMES

        return DEFAULT_RUNTIMES
    from hook.pipeline.configfile import read_toml

    document = read_toml(config_text, source or "<config>")
    ours, table = document.get("gpu-env-runtime", {}), document.get("nvidia-container-runtime", {})
    if isinstance(ours, dict) and isinstance(table, dict):
        runtime, runtimes = ours.get("runtime", ""), table.get("runtimes")
        if isinstance(runtime, str) and runtime.startswith("/"):
            return (runtime,)
        if runtime == "" and runtimes is None:
            from hook.pipeline.configfile import DEFAULT_RUNTIMES

            return DEFAULT_RUNTIMES
        if runtime == "" and isinstance(runtimes, list) and all(isinstance(name, str) for name in runtimes):
            return tuple(runtimes)
    from hook.pipeline.config import parse_config

    settings = parse_config(config_text, source=source)
    return (settings.runtime,) if settings.runtime else settings.runtimes


def resolve_runtime(runtimes: tuple[str, ...], search_path: str = FIXED_PATH) -> str:
    """Return the first runtime that is an executable file: an absolute path as is, a name on ``search_path``
    (never the caller's PATH: podman calls ``delete`` with none)."""
    for name in runtimes:
        if os.path.isabs(name):
            candidates = [name]
        elif name and "/" not in name:
            candidates = [os.path.join(directory, name) for directory in search_path.split(":") if directory]
        else:
            continue
        for candidate in candidates:
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    raise ExecError(
        f"no runtime found: none of [nvidia-container-runtime] runtimes ({', '.join(runtimes) or 'empty'}) "
        f"is an absolute path or a name on {search_path} of an executable file"
    )


def check_reentry(environ: dict[str, str] | os._Environ[str]) -> None:
    """Refuse to run when the runtime this shim (or its wrapper) exec'd has led back to it: the loop
    guard holds this process's pid (an exec chain) or its parent's (a wrapper that forks)."""
    marker = environ.get(GPU_ENV_RUNTIME_PID)
    if marker and marker in (str(os.getpid()), str(os.getppid())):
        raise ExecError(f"refusing to run: the runtime it executed started it again (a loop); {LOOP_FIX}")


def check_runtime(runtime: str, environ: dict[str, str] | os._Environ[str]) -> None:
    """Before anything is written: the runtime must be an executable file that is not this shim, by
    identity (the same file as the installed wrapper or this program) or, for a script, by asking it
    (``RUNTIME --version`` with the probe variable set: a shim anywhere down its chain answers)."""
    try:
        st = os.stat(runtime)
    except OSError as err:
        raise ExecError(f"cannot execute the runtime {runtime}: {os_reason(err)}") from None
    if (st.st_mode & 0o170000) != 0o100000 or not os.access(runtime, os.X_OK):
        raise ExecError(f"cannot execute the runtime {runtime}: not an executable file")
    for own in (*RUNTIME_WRAPPERS, sys.argv[0]):
        try:
            same = os.path.samestat(st, os.stat(own))
        except (OSError, ValueError):
            same = False
        if same:
            raise ExecError(f"the runtime {runtime} is this shim itself; {LOOP_FIX}")
    try:
        with open(runtime, "rb") as fh:
            script = fh.read(2) == b"#!"
    except OSError:
        script = False
    if script and probe_is_shim(runtime, environ):
        raise ExecError(f"the runtime {runtime} leads back to this shim; {LOOP_FIX}")


def probe_is_shim(runtime: str, environ: dict[str, str] | os._Environ[str]) -> bool:
    """Run ``RUNTIME --version`` with the probe variable set; tell whether a shim of ours answered."""
    import subprocess

    token = os.urandom(8).hex()
    try:
        proc = subprocess.run(
            [runtime, "--version"],
            env={**environ, GPU_ENV_RUNTIME_PROBE: token},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return f"{PROG} probe {token}".encode() in proc.stdout


def exec_runtime(
    path: str, args: list[str], environ: dict[str, str] | os._Environ[str] | None = None
) -> "NoReturn":
    """Replace this process with the runtime: ``path`` as argv[0], ``args`` untouched, fds kept, the
    environment kept plus the loop guard (this pid)."""
    env = dict(os.environ if environ is None else environ)
    env[GPU_ENV_RUNTIME_PID] = str(os.getpid())
    sys.stderr.flush()
    try:
        os.execve(path, [path, *args], env)
    except OSError as err:
        raise ExecError(f"cannot execute the runtime {path}: {os_reason(err)}") from None


# --- the bundle ------------------------------------------------------------------------------------------


def load_spec_bytes(path: str) -> bytes | None:
    """Return config.json's bytes, or None when it cannot be read (the runtime then says why, as runc).

    No size bound: the runtime reads any size, so the shim must not refuse what it would run.
    """
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def is_gpu_hook(entry: object) -> bool:
    """Tell whether a hook entry runs NVIDIA's hook (by executable name) or ours (``is_our_hook``)."""
    path = entry.get("path") if isinstance(entry, dict) else None
    if isinstance(path, str) and os.path.basename(path) in GPU_HOOK_NAMES:
        return True
    from hook.pipeline.handoff import is_our_hook

    return is_our_hook(entry)


def has_gpu_hook(document: dict[str, object]) -> bool:
    """Tell whether a prestart or createRuntime hook already is a GPU hook."""
    from hook.pipeline.handoff import stage_hooks

    return any(map(is_gpu_hook, stage_hooks(document)))


def build_hook_entry(
    command: list[str],
    config_path: str | None,
    environ: dict[str, str] | os._Environ[str],
    *,
    lib: str,
    isolated_site: bool = True,
) -> dict[str, object]:
    """Build our prestart hook, started as the shim itself was (``hook.launcher``): the same interpreter
    (``command``: ``own_command``, or ``tree_command`` for the tree's own) with ``-I -X utf8`` (and ``-S``
    when the shim runs without ``site``), the package from ``lib`` (the shim's own, so both run one
    version), a fixed PATH, the engine's name, and the config file the shim used.

    Without a config file, the hook is told the shim's ``XDG_CONFIG_HOME`` so both look in the same place.
    """
    from hook.launcher import PYTHON_FLAGS, build_code

    flags = list(PYTHON_FLAGS) if isolated_site else [flag for flag in PYTHON_FLAGS if flag != "-S"]
    args = [*command, *flags, "-c", build_code("hook.__main__", "gpu-env-hook", lib=lib)]
    if config_path is not None:
        args += ["-config", os.path.abspath(config_path)]
    args.append("prestart")
    env = [f"PATH={FIXED_PATH}"]
    xdg = environ.get("XDG_CONFIG_HOME", "")
    if config_path is None and xdg:
        env.append(f"XDG_CONFIG_HOME={xdg}")
    engine = environ.get(GPU_ENV_HOOK_ENGINE)
    if engine:  # the hook checks pod pins against the same engine's annotations as the shim
        env.append(f"{GPU_ENV_HOOK_ENGINE}={engine}")
    return {"path": command[0], "args": args, "env": env}


def own_hook_entry(config_path: str | None, environ: dict[str, str] | os._Environ[str]) -> dict[str, object]:
    """Build the hook entry for this process: its interpreter as it was started, its package directory, its
    ``-S``."""
    from hook.launcher import own_command

    package = sys.modules["hook"].__file__ or ""
    lib = os.path.dirname(os.path.dirname(os.path.abspath(package)))
    return build_hook_entry(
        own_command(), config_path, environ, lib=lib, isolated_site=bool(sys.flags.no_site)
    )


def add_prestart_hook(document: dict[str, object], hook: dict[str, object]) -> dict[str, object]:
    """Return a copy of the spec with ``hook`` appended to ``hooks.prestart``."""
    hooks = document.get("hooks") or {}
    if not isinstance(hooks, dict):
        raise SpecError("could not decode OCI spec: hooks must be an object")
    prestart = hooks.get("prestart") or []
    if not isinstance(prestart, list):
        raise SpecError("could not decode OCI spec: hooks.prestart must be an array")
    return {**document, "hooks": {**hooks, "prestart": [*prestart, hook]}}


def resolve_spec(
    document: dict[str, object],
    config_text: str | None,
    *,
    source: str | None,
    hook: dict[str, object],
    engine: str | None = None,
) -> dict[str, object] | None:
    """Decide the edited spec for a checked config.json, or None when it stays as it is (pure but for
    reading the env file)."""
    from hook.pipeline.bundle import parse_env, process_env, set_process_env, spec_annotations, spec_mounts
    from hook.stages.prestart import may_request_gpu

    entries = process_env(document)
    mounts = spec_mounts(document)
    if not may_request_gpu(parse_env(entries), mounts, config_text):
        return None

    from hook.pipeline.bundle import resolve_privileged
    from hook.pipeline.config import parse_config
    from hook.pipeline.request import resolve_devices
    from hook.pipeline.specenv import merge_spec_env

    settings = parse_config(config_text, source=source, engine=engine)
    env_file, merged = merge_spec_env(document, spec_annotations(document), settings.env_file)
    trusted = frozenset(env_file.values) if env_file is not None and env_file.pinned else frozenset()
    devices = resolve_devices(
        parse_env(merged),
        mounts,
        swarm_resource=settings.swarm_resource,
        accept_volume_mounts=settings.accept_volume_mounts,
        accept_envvar_unprivileged=settings.accept_envvar_unprivileged,
        privileged=resolve_privileged(document),
        trusted=trusted,
    )
    edited = document if merged == entries else set_process_env(document, merged)
    if parse_env(entries).get(settings.env_file.variable):
        # The file is applied: the env-file guard's mount goes, so the runtime can start it (docs/nri.md).
        from hook.pipeline.bundle import without_mount
        from hook.util.paths import ENV_FILE_GUARD_TARGET

        edited = without_mount(edited, ENV_FILE_GUARD_TARGET)
    cdi = bool(devices) and settings.device_mode == "cdi"
    if cdi:  # the devices' CDI edits instead of NVIDIA's hook
        from hook.pipeline.cdidevices import inject_requested

        edited = inject_requested(edited, devices, settings, env_file)
    # One read per container: every hook of ours is told the decision and never reads the file again.
    from hook.pipeline.handoff import has_our_hook

    add_hook = bool(devices) and not cdi and not has_gpu_hook(document)
    if add_hook or has_our_hook(document):
        from hook.pipeline.handoff import build_handoff, hand_off_to_our_hooks, with_handoff

        pinned = env_file.pinned if env_file is not None else None
        handoff = build_handoff(pinned, list(env_file.values) if env_file is not None else [])
        edited = hand_off_to_our_hooks(edited, handoff)
        if add_hook:
            edited = add_prestart_hook(
                edited, with_handoff({**hook, "timeout": settings.hook_timeout}, handoff)
            )
    return None if edited is document else edited


def write_bundle(
    bundle: str,
    config_text: str | None,
    source: str | None,
    environ: dict[str, str] | os._Environ[str],
    *,
    runtime: str | None = None,
) -> None:
    """Edit ``<bundle>/config.json`` in place (atomically), only when the decision changes it; with
    ``runtime``, first make sure that runtime is not this shim again (``check_runtime``)."""
    from hook.pipeline.bundle import spec_path
    from hook.pipeline.specenv import spec_may_matter

    path = spec_path(bundle)
    raw = load_spec_bytes(path)
    if raw is None or not spec_may_matter(raw, config_text, gpu=True):
        return
    from hook.pipeline.bundle import check_spec, parse_spec, write_spec

    document = parse_spec(raw)
    check_spec(document)
    hook = own_hook_entry(source, environ)
    engine = environ.get(GPU_ENV_HOOK_ENGINE)
    edited = resolve_spec(document, config_text, source=source, hook=hook, engine=engine)
    if edited is not None:
        if runtime is not None:
            check_runtime(runtime, environ)
        write_spec(path, edited)


# --- entry point -----------------------------------------------------------------------------------------


def run_shim(
    argv: list[str],
    invocation: Invocation,
    environ: dict[str, str] | os._Environ[str],
    *,
    runtime: str | None = None,
) -> "NoReturn":
    """Exec the runtime with ``argv``, having edited the bundle on create/run.

    ``runtime``: the one the installed wrapper resolved (it execs the same one itself for every other
    command); without it, the one config.toml names.
    """
    create = invocation.command in CREATE_COMMANDS
    if runtime is not None and not runtime.startswith("/"):
        runtime = resolve_runtime((runtime,))  # the wrapper looks a bare name up on the same fixed PATH
    if runtime is not None and not create:
        exec_runtime(runtime, argv, environ)
    config_path, required = find_config_path(None, environ)
    config_text = load_config_text(config_path, required=required)
    source = config_path if config_text is not None else None
    if runtime is None:
        runtime = resolve_runtime(load_runtimes(config_text, source))
    if create:
        write_bundle(invocation.bundle, config_text, source, environ, runtime=runtime)
    exec_runtime(runtime, argv, environ)


def format_log_line(message: str, *, json_format: bool, stamp: str, level: str = "error") -> str:
    """Format a line as runc's logrus does: JSON ``{"level","msg","time"}`` or ``time=… level=… msg=…``."""
    if json_format:
        import json

        return json.dumps({"level": level, "msg": message, "time": stamp}) + "\n"
    escaped = message.replace("\\", "\\\\").replace('"', '\\"')
    return f'time="{stamp}" level={level} msg="{escaped}"\n'


def report(invocation: Invocation | None, message: str) -> None:
    """Write the one error line to stderr and, when runc's ``--log`` names a file, append it there."""
    line = f"{PROG}: {escape(message, LINE_LIMIT)}"  # a second line of defence: one line, whatever it holds
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    if invocation is None or invocation.log_path is None:
        return
    import time

    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    data = format_log_line(line, json_format=invocation.log_json, stamp=stamp).encode()
    try:
        fd = os.open(invocation.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return
    try:
        os.write(fd, data)
    except OSError:
        pass
    finally:
        os.close(fd)


def main(argv: list[str] | None = None, *, runtime: str | None = None) -> int:
    """Run the shim; it returns only on an error (1, or the error's own status), having reported it.

    ``runtime``: the runtime the installed wrapper resolved and passes in (see ``run_shim``).
    """
    args = sys.argv[1:] if argv is None else argv
    probe = os.environ.get(GPU_ENV_RUNTIME_PROBE)
    if probe is not None:
        sys.stdout.write(f"{PROG} probe {probe}\n")
        return 0
    invocation = None
    try:
        invocation = parse_runtime_args(args)
        check_reentry(os.environ)
        run_shim(args, invocation, os.environ, runtime=runtime)
    except HookError as err:
        report(invocation, str(err))
        return err.exit_code
    except OSError as err:  # a system call no step wrapped: still one line with the path and the reason
        report(invocation, describe_os_error(err))
        return 1
    except Exception as err:  # noqa: BLE001 - the last line of defence: one line, never a bare traceback
        report(invocation, f"internal error: {type(err).__name__}")
        return 1


if __name__ == "__main__":
    sys.exit(main())

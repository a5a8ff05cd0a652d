"""Commands for people: resolve, validate, env-file, config, doctor (install/uninstall: hook.install).

Imported only when ``__main__`` sees one of these command words, so typer and jsonschema never load on a stage
path. Every command prints a one-line error on stderr and exits 1 on failure, 2 on a usage error.
"""

import functools
import io
import json
import os
import shlex
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from hook.commands.cdi import KubeletPods, LivePods, report_gc
from hook.commands.envfile import PIN_OPTIONS, check_command, columns, path_command, write_command
from hook.util import envvars
from hook.util.errors import HookError, UsageError, describe_os_error
from hook.util.safetext import os_reason, shows

PROG = "gpu-env-hook"
RESOLVE_VERSION = 1
_F = TypeVar("_F", bound=Callable[..., Any])

# One line per config.toml key for `config default` (keys without a line get none).
KEY_HELP = {
    "disable-require": "ignore every NVIDIA_REQUIRE_* constraint (as if NVIDIA_DISABLE_REQUIRE=true)",
    "swarm-resource": "variables (comma-separated) that select GPUs before NVIDIA_VISIBLE_DEVICES",
    "accept-nvidia-visible-devices-envvar-when-unprivileged": "honour NVIDIA_VISIBLE_DEVICES in unprivileged "
    "containers",
    "accept-nvidia-visible-devices-as-volume-mounts": "select GPUs with /dev/null mounts under "
    "/var/run/nvidia-container-devices",
    "supported-driver-capabilities": "capabilities a container may ask for: 'all' or a comma-separated list",
    "nvidia-container-cli": "how the hook calls nvidia-container-cli",
    "nvidia-container-cli.root": "driver root passed as --root (empty: /)",
    "nvidia-container-cli.path": "the cli's path (empty: search PATH and the standard directories)",
    "nvidia-container-cli.environment": "KEY=VALUE entries added to the cli's environment",
    "nvidia-container-cli.debug": "file for the cli's debug log (--debug)",
    "nvidia-container-cli.ldcache": "ld.so.cache path passed as --ldcache",
    "nvidia-container-cli.load-kmods": "pass --load-kmods",
    "nvidia-container-cli.no-pivot": "pass --no-pivot",
    "nvidia-container-cli.no-cgroups": "pass --no-cgroups",
    "nvidia-container-cli.user": "pass --user (the default is root:video on SUSE hosts)",
    "nvidia-container-cli.ldconfig": "ldconfig to run: '@' marks a host path",
    "nvidia-container-runtime": "the runtime's settings (the shim reads runtimes; the hook reads mode)",
    "nvidia-container-runtime.mode": "auto, legacy, csv, cdi: the hook serves only legacy",
    "nvidia-container-runtime.runtimes": "real runtimes the shim execs, first found wins, when "
    "[gpu-env-runtime] runtime is not set",
    "nvidia-container-runtime.modes.legacy.cuda-compat-mode": "ldconfig, mount, disabled or hook",
    "nvidia-container-runtime-hook.skip-mode-detection": "do not refuse non-legacy modes",
    "features": "feature gates shared with the NVIDIA toolkit",
    "features.allow-ldconfig-from-container": "allow an ldconfig path inside the container (no '@')",
    "features.allow-cuda-compat-libs-from-container": "let the container's CUDA compat libraries be used",
    "features.disable-imex-channel-creation": "pass --no-create-imex-channels",
    "features.ignore-imex-channel-requests": "ignore NVIDIA_IMEX_CHANNELS and IMEX channel mounts",
    "gpu-env-hook": "the prestart hook as we register it (gpu-env-hook only)",
    "gpu-env-hook.timeout": "seconds the runtime gives the hook (its OCI timeout) before killing it",
    "gpu-env-runtime": "the runtime shim (gpu-env-hook only; install bakes the runtime into its wrapper)",
    "gpu-env-runtime.runtime": "absolute path of the real runtime the shim execs (empty: use runtimes above)",
    "env-file": "NVIDIA_ENV_FROM_FILE (gpu-env-hook only; upstream ignores this table)",
    "env-file.variable": "the container variable that names the env file",
    "env-file.directories": "absolute directories the env file must lie in (no symlink below them)",
    "env-file.max-bytes": "largest env file accepted",
    "env-file.on-missing": "'error' refuses a missing file, 'ignore' acts as if the variable were unset",
    "env-file.require-pod-binding": "refuse files not pinned to a pod (its UID, or its namespace and name)",
    "env-file.pod-binding-engine": "whose annotations name the pod: containerd, crio, podman, docker or none "
    "(empty: GPU_ENV_HOOK_ENGINE, which install --engine sets for the hook)",
    "gpu-env": "how the runtime shim and podman's precreate stage hand devices over (gpu-env-hook only)",
    "gpu-env.device-mode": "'legacy' adds NVIDIA's hook; 'cdi' applies the devices' CDI edits instead",
    "gpu-env.cdi": "CDI mode: where specs are and what plain ids mean",
    "gpu-env.cdi.default-kind": "the CDI kind (vendor/class) plain ids and UUIDs name devices of",
    "gpu-env.cdi.spec-dirs": "CDI spec directories; a device in a later one overrides an earlier one",
    "gpu-env.cdi.spec-cache": "root-only directory of decoded YAML specs: creates skip PyYAML (empty: none)",
    "gpu-env.cdi.unkeyed-alloc-names": "allocation specs named before the naming key: 'accept' (until their "
    "ids are written for another pod) or 'refuse' (cdi alloc write and gc remove them all)",
}


_GLOBAL_BOOLS = {"--debug": "debug", "-debug": "debug", "--no-color": "no_color", "-no-color": "no_color"}
_GLOBAL_STRINGS = ("--config", "-config")
# Engine config files people pass to --config by mistake: a path, and words only that file holds.
_ENGINE_CONFIGS = (
    ("containerd", ("/etc/containerd/",), ("[plugins", "io.containerd.")),
    ("CRI-O", ("/etc/crio/",), ("[crio", "crio.runtime")),
    ("Docker", ("/etc/docker/", "daemon.json"), ('"runtimes"', '"default-runtime"')),
    ("podman", ("/etc/containers/", "containers.conf"), ("[engine]", "[containers]")),
)


class _Output:
    """How this run prints: colour on or off (``--no-color``, ``NO_COLOR``, or stdout not a terminal)."""

    color = True


def run_cli(args: list[str], *, config: str | None, debug: bool = False, no_color: bool = False) -> int:
    """Run one human command (``args[0]`` is the command word); return its exit status, never raise.

    ``--config``, ``--debug`` and ``--no-color`` are accepted after the command too, unless the command has
    an option of that name itself. ``help [COMMAND]`` prints the help on stdout.
    """
    from hook.commands.clihelp import no_color as no_color_env

    # Under any locale (a Latin-1 one too) what cannot be shown is escaped, never an error.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")

    try:
        args, found = _global_flags(args)
    except UsageError as err:
        sys.stderr.write(f"{PROG}: {err}\n")
        return err.exit_code
    config = found.get("config", config)  # type: ignore[assignment]
    debug = debug or found.get("debug") is True
    _Output.color = not (no_color or found.get("no_color") is True or no_color_env(os.environ))
    if config is not None:
        warning = engine_config_warning(config)
        if warning:
            sys.stderr.write(f"{PROG}: warning: {warning}\n")
    if args and args[0] == "help":
        if len(args) == 1:
            sys.stdout.write(main_help())
            return 0
        args = [*args[1:], "--help"]
    try:
        command = _command(config)
        result = command.main(args, prog_name=PROG, standalone_mode=False)
    except typer.TyperException as err:
        exit_code = int(getattr(err, "exit_code", 1))
        ctx = getattr(err, "ctx", None)
        if type(err).__name__ == "NoArgsIsHelpError" and ctx is not None:
            sys.stderr.write(ctx.get_help())
            return exit_code
        sys.stderr.write(f"{PROG}: {' '.join(err.format_message().split())}\n")
        return exit_code
    except typer.Abort:
        sys.stderr.write(f"{PROG}: aborted\n")
        return 1
    except HookError as err:
        sys.stderr.write(f"{PROG}: {err}\n")
        return err.exit_code
    except OSError as err:  # a system call no command wrapped: still one line with the path and the reason
        sys.stderr.write(f"{PROG}: {describe_os_error(err)}\n")
        if debug:
            import traceback

            traceback.print_exc()
        return 1
    except Exception as err:  # noqa: BLE001 - the last line of defence: one line, a traceback with -debug
        sys.stderr.write(f"{PROG}: internal error: {type(err).__name__}\n")
        if debug:
            import traceback

            traceback.print_exc()
        return 1
    return result if isinstance(result, int) else 0


def _command(config: str | None) -> Any:
    """Build the app as a command tree with people's help on every command."""
    from hook.commands.clihelp import prepare

    command = typer.main.get_command(build_app(config=config))
    prepare(command)
    return command


def main_help() -> str:
    """The top-level help: stages, then every command for people with its one-line description."""
    from hook.commands.clihelp import COMMAND_ORDER
    from hook.commands.clihelp import main_help as render

    command = _command(None)
    names = sorted(command.commands, key=lambda name: (*COMMAND_ORDER, name).index(name))
    return render([(name, command.commands[name].short_help or "") for name in names])


def _global_flags(args: list[str]) -> tuple[list[str], dict[str, str | bool]]:
    """Take ``--config X``, ``--debug``, ``--no-color`` out of the arguments after the command words.

    A command that has an option of the same name keeps it (``resolve --debug`` is the hook's -debug).
    """
    command = _command(None)
    index = 0
    while index < len(args) and hasattr(command, "commands") and args[index] in command.commands:
        command = command.commands[args[index]]
        index += 1
    own = {name for param in command.params for name in getattr(param, "opts", ())}
    found: dict[str, str | bool] = {}
    rest = args[:index]
    while index < len(args):
        arg = args[index]
        index += 1
        name, has_value, value = arg.partition("=")
        if arg == "--":
            rest += args[index - 1 :]
            break
        if name in own or (name not in _GLOBAL_BOOLS and name not in _GLOBAL_STRINGS):
            rest.append(arg)
        elif name in _GLOBAL_BOOLS and not has_value:
            found[_GLOBAL_BOOLS[name]] = True
        elif name in _GLOBAL_STRINGS:
            if not has_value:
                if index >= len(args):
                    raise UsageError(f"{name} needs a value: {name} FILE")
                value = args[index]
                index += 1
            found["config"] = value
        else:
            rest.append(arg)
    return rest, found


def engine_config_warning(path: str) -> str | None:
    """Say so when ``--config`` names a container engine's config file instead of gpu-env-hook's."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64 * 1024).decode("utf-8", "replace")
    except OSError:
        head = ""
    for engine, paths_, words in _ENGINE_CONFIGS:
        if any(part in path for part in paths_) or any(word in head for word in words):
            from hook.pipeline.configfile import SYSTEM_CONFIG

            return (
                f"{path} looks like {engine}'s configuration, not gpu-env-hook's config.toml "
                f"(by default {SYSTEM_CONFIG}); the hook reads only its own keys from it"
            )
    return None


def guarded(command: _F) -> _F:
    """Turn a HookError raised by a command into its one line on stderr and its exit status."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except HookError as err:
            typer.echo(f"{PROG}: {err}", err=True)
            raise typer.Exit(err.exit_code) from None

    return wrapper  # type: ignore[return-value]


def build_app(*, config: str | None = None) -> typer.Typer:
    """Build the typer app; ``config`` is the ``-config`` flag given before the command word."""
    app = typer.Typer(
        name=PROG,
        help="Commands for people; the engine runs the stage commands (prestart, precreate).",
        add_completion=False,
        no_args_is_help=True,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
    )
    _add_resolve(app, config)
    app.add_typer(_validate_app(), name="validate")
    app.add_typer(_env_file_app(config), name="env-file")
    app.add_typer(_config_app(), name="config")
    _add_doctor(app, config)
    from hook.commands.cdi import register as register_cdi

    register_cdi(app, config)
    try:
        from hook.install import register
    except ImportError:  # pragma: no cover - the install module arrives with its own issue
        pass
    else:
        register(app)
    return app


def _sub_app(help_text: str) -> typer.Typer:
    """Build a command group with the app's conventions."""
    return typer.Typer(
        help=help_text, no_args_is_help=True, rich_markup_mode=None, pretty_exceptions_enable=False
    )


def _colour(text: str, colour: str) -> str:
    """Colour text only when stdout is a terminal and colour is not turned off (--no-color, NO_COLOR)."""
    return typer.style(text, fg=colour) if _Output.color and sys.stdout.isatty() else text


def mark(ok: bool | None) -> str:
    """Return the check mark for a result: ✓, ✗ or - (skipped); + and x where stdout cannot show those."""
    if ok is None:
        return "-"
    good, bad = ("✓", "✗") if shows("✓✗", sys.stdout.encoding) else ("+", "x")
    return _colour(good, "green") if ok else _colour(bad, "red")


def warn_mark() -> str:
    """Return the mark for a warning: podman accepts it, but it does nothing or surprises."""
    return _colour("!", "yellow")


def plural(count: int, noun: str) -> str:
    """Return ``1 warning``, ``2 warnings``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def load_settings(config: str | None, environ: dict[str, str] | os._Environ[str]) -> Any:
    """Load and parse config.toml the way the installed hook finds it, with its pod-binding engine."""
    from hook.pipeline.config import load_node_settings

    return load_node_settings(config, environ)


# --- resolve ---------------------------------------------------------------------------------------------


def _add_resolve(app: typer.Typer, config: str | None) -> None:
    """Add ``resolve``."""

    @app.command("resolve")
    @guarded
    def resolve(
        bundle: Annotated[
            str,
            typer.Option(
                "--bundle",
                metavar="DIR",
                help="bundle directory (the hook runs with it as working directory)",
            ),
        ],
        state: Annotated[
            str | None,
            typer.Option("--state", metavar="FILE", help="OCI state JSON file (default: {bundle, pid 0})"),
        ] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="print a stable, versioned JSON document")
        ] = False,
        debug: Annotated[bool, typer.Option("--debug", help="as the hook's -debug flag")] = False,
        env_only: Annotated[bool, typer.Option("--env-only", help="as the hook's -env-only flag")] = False,
    ) -> None:
        """Show what the prestart hook would do for a bundle, without running or writing anything."""
        if not os.path.isdir(bundle):
            raise UsageError(f"resolve: --bundle {bundle!r} is not a directory")
        bundle_dir = os.path.abspath(bundle)
        if state is None:
            stdin = json.dumps({"bundle": bundle_dir, "pid": 0}).encode()
        else:
            try:
                with open(state, "rb") as fh:
                    stdin = fh.read()
            except OSError as err:
                raise UsageError(f"resolve: cannot read --state {state}: {os_reason(err)}") from None
        document = build_resolve_document(
            bundle_dir, stdin, config=config, debug=debug, env_only=env_only, environ=os.environ
        )
        if as_json:
            typer.echo(json.dumps(document, indent=2, ensure_ascii=False))
        else:
            typer.echo(format_resolve_document(document), nl=False)
        if document["outcome"] == "refused":
            if not as_json:
                typer.echo(f"{PROG}: {document['error']}", err=True)
            raise typer.Exit(1)


def build_resolve_document(
    bundle_dir: str,
    stdin: bytes,
    *,
    config: str | None,
    debug: bool,
    env_only: bool,
    environ: dict[str, str] | os._Environ[str],
) -> dict[str, Any]:
    """Run the hook's own decisions on a bundle and describe them (version 1 of the resolve document)."""
    from hook.pipeline.configfile import find_config_path
    from hook.stages.prestart import Options, build_cli_invocation, resolve_container

    config_path, _ = find_config_path(config, environ)
    document: dict[str, Any] = {
        "version": RESOLVE_VERSION,
        "bundle": bundle_dir,
        "config": {"path": config_path, "found": os.path.isfile(config_path)},
        "outcome": "refused",
        "error": None,
        "state": None,
        "env_file": None,
        "variables": [],
        "env_changed": False,
        "request": None,
        "mode": None,
        "cli": None,
    }
    options = Options(config=config, debug=debug, env_only=env_only)
    try:
        resolution = resolve_container(options, io.BytesIO(stdin), environ)
    except HookError as err:
        document["error"] = str(err)
        return document
    state, settings, request, env_file = (
        resolution.state,
        resolution.settings,
        resolution.request,
        resolution.env_file,
    )
    document["state"] = {"bundle": state.bundle, "pid": state.pid, "annotations": state.annotations}
    document["variables"] = describe_variables(resolution)
    document["env_changed"] = resolution.env_changed
    if env_file is not None:
        document["env_file"] = {
            "path": env_file.path,
            "pinned": env_file.pinned,
            "variables": list(env_file.values),
        }
    if request is None or settings is None:
        document["outcome"] = "not-gpu"
        return document
    document["request"] = {
        "devices": request.devices,
        "mig_config": request.mig_config,
        "mig_monitor": request.mig_monitor,
        "imex_channels": request.imex_channels,
        "capabilities": request.capabilities,
        "requirements": request.requirements,
    }
    if env_only:
        document["outcome"] = "env-only"
        return document

    if settings.device_mode == "cdi":  # the shim's and precreate's decision, not the hook's
        from hook.commands.cdi import describe_cdi

        try:
            document["cdi"] = describe_cdi(resolution)
        except HookError as err:
            document["error"] = str(err)
            return document
        document["outcome"] = "cdi"
        return document

    from hook.pipeline.nvcli import DIRECT_INVOCATION_MESSAGE, resolve_mode

    resolved, _ = resolve_mode(settings.mode, request.devices)
    document["mode"] = {
        "configured": settings.mode,
        "resolved": resolved,
        "skip_detection": settings.skip_mode_detection,
    }
    if not settings.skip_mode_detection and resolved != "legacy":
        document["error"] = DIRECT_INVOCATION_MESSAGE
        return document
    try:
        argv, cli_env = build_cli_invocation(resolution, options, environ, bundle_dir)
    except HookError as err:
        document["error"] = str(err)
        return document
    added = {name: value for name, value in cli_env.items() if environ.get(name) != value}
    document["cli"] = {"argv": argv, "env_added": added}
    document["outcome"] = "gpu"
    return document


def describe_variables(resolution: Any) -> list[dict[str, Any]]:
    """List the variables that steer the hook, with their final value and where it came from."""
    from hook.pipeline.bundle import parse_env, process_env

    image = parse_env(process_env(resolution.spec.document))
    final = parse_env(resolution.entries)
    from_file = resolution.env_file.values if resolution.env_file is not None else {}
    settings = resolution.settings
    extra = set(from_file)
    if settings is not None:
        extra |= set(settings.swarm_resource) | {settings.env_file.variable}
    names = {
        name
        for name in (*image, *final)
        if name.startswith("NVIDIA_") or name == envvars.CUDA_VERSION or name in extra
    }
    rows = []
    for name in sorted(names):
        source = "env-file" if name in from_file else "image"
        rows.append(
            {"name": name, "value": final.get(name), "source": source, "image_value": image.get(name)}
        )
    if settings is not None and settings.disable_require:
        rows = [row for row in rows if row["name"] != envvars.NVIDIA_DISABLE_REQUIRE]
        rows.append(
            {
                "name": envvars.NVIDIA_DISABLE_REQUIRE,
                "value": "true",
                "source": "config",
                "image_value": image.get(envvars.NVIDIA_DISABLE_REQUIRE),
            }
        )
    return rows


# What the JSON document's "source" values mean, as the table says them. "image" (a version 1 name) is the
# container's process.env in config.json: what the image, the engine and the user put there together.
_SOURCES = {"image": "config.json", "env-file": "env file", "config": "config.toml"}

_OUTCOMES = {
    "refused": "refused: the hook exits 1 and the container does not start",
    "not-gpu": "not a GPU container: the hook exits 0 and calls nothing",
    "env-only": "-env-only: the hook rewrites config.json (if needed) and exits 0",
    "gpu": "GPU container: the hook execs nvidia-container-cli",
    "cdi": "CDI mode: the shim or precreate stage applies these CDI edits before the runtime starts",
}


def format_resolve_document(document: dict[str, Any]) -> str:
    """Render the resolve document for a person: aligned sections, the command line last."""
    config = document["config"]
    rows: list[tuple[str, ...]] = [
        ("bundle", document["bundle"]),
        ("config", config["path"] + ("" if config["found"] else " (not found: defaults)")),
        ("outcome", _OUTCOMES[document["outcome"]]),
    ]
    if document["error"]:
        rows.append(("error", document["error"]))
    env_file = document["env_file"]
    if env_file is not None:
        pinned = "pinned to this pod" if env_file["pinned"] else "not pinned"
        rows.append(
            ("env file", f"{env_file['path']} ({pinned}, {plural(len(env_file['variables']), 'variable')})")
        )
    if document["state"] is not None:
        rows.append(("config.json", "process.env rewritten" if document["env_changed"] else "unchanged"))
    out = columns(rows)
    if document["variables"]:
        table: list[tuple[str, ...]] = [("VARIABLE", "VALUE", "FROM")]
        for row in document["variables"]:
            source = _SOURCES.get(row["source"], row["source"])
            if row["source"] == "env-file" and row["image_value"] is not None:
                source += f" (config.json had {row['image_value']!r})"
            table.append((row["name"], "" if row["value"] is None else row["value"], source))
        out += "\n" + columns(table)
    request = document["request"]
    if request is not None:
        rows = [
            ("devices", ",".join(request["devices"])),
            ("capabilities", ",".join(request["capabilities"]) or "-"),
            ("requirements", " ".join(request["requirements"]) or "-"),
        ]
        for key, label in (("mig_config", "MIG config"), ("mig_monitor", "MIG monitor")):
            if request[key]:
                rows.append((label, request[key]))
        if request["imex_channels"]:
            rows.append(("IMEX channels", ",".join(request["imex_channels"])))
        if document["mode"] is not None:
            mode = document["mode"]
            rows.append(("mode", f"{mode['resolved']} (configured {mode['configured']})"))
        out += "\n" + columns(rows)
    if document.get("cdi"):
        from hook.commands.cdi import format_cdi_edits

        out += format_cdi_edits(document["cdi"])
    cli = document["cli"]
    if cli is not None:
        out += "\nnvidia-container-cli command line:\n  " + shlex.join(cli["argv"]) + "\n"
        if cli["env_added"]:
            out += "with environment:\n" + "".join(
                f"  {name}={value}\n" for name, value in sorted(cli["env_added"].items())
            )
    return out


# --- validate --------------------------------------------------------------------------------------------


def _validate_app() -> typer.Typer:
    """Build ``validate`` and its four document kinds."""
    app = _sub_app(
        "Check a document as the engine that reads it would; print every problem at its JSON path."
    )

    labels = {
        "config": "valid OCI runtime config (runtime-spec 1.3)",
        "state": "valid OCI state",
        "config-toml": "valid config.toml",
    }

    def run(path: str, kind: str) -> None:
        from hook.install.schema import hook_problems, load_document, validate_document

        document = load_document(path, kind)
        problems = validate_document(document, kind)
        for problem in problems:
            typer.echo(f"{mark(False)} {path}: {problem}")
        if not problems:
            typer.echo(f"{mark(True)} {path}: {labels[kind]}")
        reported = {problem.path for problem in problems}
        needs = [need for need in hook_problems(document, kind) if need.path not in reported]
        for need in needs:
            typer.echo(f"{mark(False)} {path}: {need}")
        if problems or needs:
            raise typer.Exit(1)

    @app.command("config")
    @guarded
    def config(
        path: Annotated[
            str, typer.Argument(metavar="BUNDLE_OR_FILE", help="bundle directory or config.json")
        ],
    ) -> None:
        """An OCI config.json: the whole runtime-spec schema, then what the hook needs."""
        run(path, "config")

    @app.command("state")
    @guarded
    def state(path: Annotated[str, typer.Argument(metavar="FILE")]) -> None:
        """An OCI state document (what a runtime gives a hook on stdin), then what the hook needs."""
        run(path, "state")

    @app.command("hooks-json")
    @guarded
    def hooks_json(path: Annotated[str, typer.Argument(metavar="FILE")]) -> None:
        """An oci-hooks.d file, judged exactly as podman 4.3.1 reads it (CRI-O shares the code)."""
        from hook.commands.hooksjson import check_hooks_file

        report = check_hooks_file(path)
        for finding in report.findings:
            marker = mark(False) if finding.severity == "error" else warn_mark()
            typer.echo(f"{marker} {path}: {finding}")
        if report.errors:
            raise typer.Exit(1)
        legacy = " (legacy format 0.1.0)" if report.version == "0.1.0" else ""
        warnings = f", {plural(len(report.warnings), 'warning')}" if report.warnings else ""
        typer.echo(f"{mark(True)} {path}: podman accepts this hooks file{legacy}{warnings}")

    @app.command("config-toml")
    @guarded
    def config_toml(path: Annotated[str, typer.Argument(metavar="FILE")]) -> None:
        """config.toml: upstream's keys and ours, with their types and value rules."""
        run(path, "config-toml")

    return app


# --- env-file --------------------------------------------------------------------------------------------


# The help of the pin options (``PIN_OPTIONS``) in the two commands that take them.
_PIN_HELP = {
    "write": {
        "--pod-uid": "pin the file to this pod UID",
        "--pod-namespace": "pin the file to the pod of this namespace (and --pod-name)",
        "--pod-name": "pin the file to the pod of this name (and --pod-namespace)",
        "--container": "pin the file to this container name too",
    },
    "check": {
        "--pod-uid": "check the pin against this pod UID",
        "--pod-namespace": "check the pin against this pod namespace (with --pod-name)",
        "--pod-name": "check the pin against this pod name (with --pod-namespace)",
        "--container": "check the pin against this container name",
    },
}


def _pin(command: str, flag: str) -> Any:
    """One of the pin options ``env-file write`` and ``check`` share, worded for ``command``."""
    return typer.Option(flag, metavar=PIN_OPTIONS[flag], help=_PIN_HELP[command][flag])


def _env_file_app(config: str | None) -> typer.Typer:
    """Build ``env-file``: write, path and check (their bodies, and a dispatch without typer: producercli)."""
    app = _sub_app("Write, name and check env files (for device plugins).")

    @app.command("write")
    @guarded
    def write(  # noqa: PLR0917 - typer passes each option as a parameter
        path: Annotated[str, typer.Argument(help="absolute path inside an [env-file] directory")],
        assignments: Annotated[list[str], typer.Argument(metavar="KEY=VALUE...", help="variables to write")],
        pod_uid: Annotated[str | None, _pin("write", "--pod-uid")] = None,
        pod_namespace: Annotated[str | None, _pin("write", "--pod-namespace")] = None,
        pod_name: Annotated[str | None, _pin("write", "--pod-name")] = None,
        container: Annotated[str | None, _pin("write", "--container")] = None,
    ) -> None:
        """Write an env file atomically, root-owned, mode 0600, refusing what the hook would refuse."""
        typer.echo(
            write_command(
                config,
                path,
                assignments,
                pod_uid=pod_uid,
                container=container,
                pod_namespace=pod_namespace,
                pod_name=pod_name,
            ),
            nl=False,
        )

    @app.command("path")
    @guarded
    def path(
        device_ids: Annotated[list[str], typer.Argument(metavar="DEVICE_ID...", help="the ids kubelet gave")],
        directory: Annotated[
            str | None,
            typer.Option(
                "--directory", help="directory (default: the first configured [env-file] directory)"
            ),
        ] = None,
    ) -> None:
        """Print the env file's path for a set of device ids (the same in any order)."""
        typer.echo(path_command(config, device_ids, directory=directory), nl=False)

    @app.command("check")
    @guarded
    def check(  # noqa: PLR0917 - typer passes each option as a parameter
        path: Annotated[str, typer.Argument(help="the env file")],
        pod_uid: Annotated[str | None, _pin("check", "--pod-uid")] = None,
        pod_namespace: Annotated[str | None, _pin("check", "--pod-namespace")] = None,
        pod_name: Annotated[str | None, _pin("check", "--pod-name")] = None,
        container: Annotated[str | None, _pin("check", "--container")] = None,
        engine: Annotated[
            str | None,
            typer.Option(
                "--engine",
                metavar="ENGINE",
                help="whose pod annotations the pin is checked against (default: GPU_ENV_HOOK_ENGINE, else "
                "the engine installed on this node, as the installed hook has it)",
            ),
        ] = None,
    ) -> None:
        """Run every check the hook runs on an env file and report each one."""
        text, ok = check_command(
            config,
            path,
            pod_uid=pod_uid,
            container=container,
            colour=sys.stdout.isatty(),
            pod_namespace=pod_namespace,
            pod_name=pod_name,
            engine=engine,
        )
        typer.echo(text, nl=False)
        if not ok:
            raise typer.Exit(1)

    @app.command("gc")
    @guarded
    def gc(
        live: LivePods = None,
        kubelet_pods: KubeletPods = "/var/lib/kubelet/pods",
    ) -> None:
        """Remove the env files whose pinned pod no longer exists (unpinned files, and without --live files
        pinned by namespace and name, are kept)."""
        from hook.commands.envfile import load_settings
        from hook.producer.alloc import live_pods_from_kubelet
        from hook.producer.envfile import gc_env_files

        settings = load_settings(config).env_file
        pods = frozenset(live) if live else live_pods_from_kubelet(kubelet_pods)
        removed, failed = gc_env_files(pods, settings, names_known=bool(live))
        report_gc(removed, failed)

    return app


# --- config ----------------------------------------------------------------------------------------------


def _config_app() -> typer.Typer:
    """Build ``config``."""
    app = _sub_app("Print gpu-env-hook's config.toml: 'config default' gives every key with its default.")

    @app.command("default")
    @guarded
    def default() -> None:
        """Print a commented config.toml with every key and its default."""
        typer.echo(build_default_config_toml(), nl=False)

    @app.callback()
    def callback() -> None:
        """Print gpu-env-hook's config.toml: 'config default' gives every key with its default."""

    return app


def build_default_config_toml() -> str:
    """Render ``default_settings()`` as commented TOML that parses back to exactly the same document."""
    from hook.pipeline.config import default_settings
    from hook.pipeline.configfile import SYSTEM_CONFIG

    lines = [
        f"# {SYSTEM_CONFIG}: every key gpu-env-hook reads, with its default.",
        "# Generated by `gpu-env-hook config default` from hook.pipeline.config.default_settings().",
    ]
    _emit_table(default_settings(), "", lines)
    return "\n".join(lines) + "\n"


def _emit_table(table: dict[str, Any], prefix: str, lines: list[str]) -> None:
    """Append a table's scalar keys, then its sub-tables with their headers."""
    for key, value in table.items():
        if not isinstance(value, dict):
            help_text = KEY_HELP.get(prefix + key)
            if help_text:
                lines.append(f"# {help_text}")
            lines.append(f"{key} = {_toml_value(value)}")
    for key, value in table.items():
        if isinstance(value, dict):
            name = prefix + key
            scalars = any(not isinstance(item, dict) for item in value.values())
            if scalars:
                lines.append("")
                help_text = KEY_HELP.get(name)
                if help_text:
                    lines.append(f"# {help_text}")
                lines.append(f"[{name}]")
            _emit_table(value, name + ".", lines)


def _toml_value(value: object) -> str:
    """Render a scalar or a list of strings as TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return json.dumps(value, ensure_ascii=False)


# --- doctor ----------------------------------------------------------------------------------------------


def _add_doctor(app: typer.Typer, config: str | None) -> None:
    """Add ``doctor``."""

    @app.command("doctor")
    @guarded
    def doctor(
        root: Annotated[
            str, typer.Option("--root", metavar="DIR", help="check the tree under this directory")
        ] = "/",
        engine: Annotated[
            str | None,
            typer.Option(
                "--engine",
                metavar="ENGINE",
                help="whose pod annotations pins are checked against (default: GPU_ENV_HOOK_ENGINE, else "
                "the engine installed under --root, as the installed hook has it)",
            ),
        ] = None,
    ) -> None:
        """Check this node: the cli, the config, the env directories, the engines' registration."""
        from hook.commands.doctor import run_checks

        checks = run_checks(root=root, config=config, environ=os.environ, engine=engine)
        rows: list[tuple[str, ...]] = []
        for check in checks:
            dash = "—" if shows("—", sys.stdout.encoding) else "-"
            detail = check.detail + (f" {dash} {check.fix}" if check.fix and check.ok is False else "")
            rows.append((mark(check.ok), check.name, detail))
        typer.echo(columns(rows), nl=False)
        if any(check.ok is False for check in checks):
            raise typer.Exit(1)

"""``env-file path|write|check`` without typer: the commands a device plugin may run for every container.

A device plugin may start ``gpu-env-hook env-file path`` in ``Allocate`` and ``env-file write`` in
``PreStartContainer``, once per container: loading typer (click, rich) for that costs about twenty
interpreter starts. ``run_env_file`` parses a plain invocation of these three commands itself and runs the
very functions the typer commands in ``hook.commands.cli`` run (``write_command``, ``path_command``,
``check_command``), with the same output, messages and exit codes. Anything it does not recognise exactly —
``--help``, an unknown option, a missing argument, an option without its value — it leaves to typer
(returns None), so help and usage errors stay typer's own, defined once in ``hook.commands.cli``.
"""

import sys

from hook.util import paths
from hook.util.errors import HookError, describe_os_error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hook.pipeline.config import Settings
    from hook.producer.envfile import CheckStep

PROG = "gpu-env-hook"
# The pin options of ``write`` and ``check`` (what a file is pinned to, what a check compares it with) and
# their metavars (the typer commands in hook.commands.cli show them).
PIN_OPTIONS = {"--pod-uid": "UID", "--pod-namespace": "NS", "--pod-name": "NAME", "--container": "NAME"}
# Each command's options (all take one value) and its positional arguments: (minimum, maximum or None).
_OPTIONS = {
    "write": (*PIN_OPTIONS,),
    "path": ("--directory",),
    "check": (*PIN_OPTIONS, "--engine"),
}
_POSITIONALS = {"write": (2, None), "path": (1, None), "check": (1, 1)}
# What click.style(text, fg=...) wraps a coloured mark in.
_GREEN, _RED, _RESET = "\x1b[32m", "\x1b[31m", "\x1b[0m"


def parse_command(args: list[str]) -> tuple[str, list[str], dict[str, str]] | None:
    """Parse ``COMMAND ARGS...`` of ``env-file`` as click would for a plain invocation; None otherwise.

    Options may come before, between or after the positional arguments, as ``--name value`` or
    ``--name=value`` (the last one given wins); ``--`` ends the options.
    """
    if not args or args[0] not in _OPTIONS:
        return None
    command, known = args[0], _OPTIONS[args[0]]
    positionals: list[str] = []
    options: dict[str, str] = {}
    index = 1
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            positionals += args[index:]
            break
        if len(arg) < 2 or not arg.startswith("-"):
            positionals.append(arg)
            continue
        name, has_value, value = arg.partition("=")
        if name not in known:
            return None
        if not has_value:
            if index >= len(args) or args[index].startswith("-"):
                return None
            value, index = args[index], index + 1
        options[name] = value
    least, most = _POSITIONALS[command]
    if len(positionals) < least or (most is not None and len(positionals) > most):
        return None
    return command, positionals, options


def run_env_file(args: list[str], *, config: str | None) -> int | None:
    """Run ``env-file ARGS`` (``args`` after the ``env-file`` word); None: leave it to typer."""
    parsed = parse_command(args)
    if parsed is None:
        return None
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:  # what a Latin-1 locale cannot show is escaped, never an error
        reconfigure(errors="backslashreplace")
    command, positionals, options = parsed
    try:
        if command == "write":
            out = write_command(
                config,
                positionals[0],
                positionals[1:],
                pod_uid=options.get("--pod-uid"),
                container=options.get("--container"),
                pod_namespace=options.get("--pod-namespace"),
                pod_name=options.get("--pod-name"),
            )
            code = 0
        elif command == "path":
            out = path_command(config, positionals, directory=options.get("--directory"))
            code = 0
        else:
            out, ok = check_command(
                config,
                positionals[0],
                pod_uid=options.get("--pod-uid"),
                container=options.get("--container"),
                pod_namespace=options.get("--pod-namespace"),
                pod_name=options.get("--pod-name"),
                colour=sys.stdout.isatty() and not paths.environ().get("NO_COLOR"),
                engine=options.get("--engine"),
            )
            code = 0 if ok else 1
    except HookError as err:
        sys.stderr.write(f"{PROG}: {err}\n")
        return err.exit_code
    except OSError as err:  # a system call no step wrapped: still one line with the path and the reason
        sys.stderr.write(f"{PROG}: {describe_os_error(err)}\n")
        return 1
    except Exception as err:  # noqa: BLE001 - the last line of defence, as hook.commands.cli.run_cli's
        sys.stderr.write(f"{PROG}: internal error: {type(err).__name__}\n")
        return 1
    sys.stdout.write(out)
    sys.stdout.flush()
    return code


def load_settings(config: str | None, engine: str | None = None) -> "Settings":
    """Find, read and parse config.toml the way the installed hook does (``config``: the ``-config`` flag),
    with its pod-binding engine (``engine``: the ``--engine`` option; else as hook.pipeline.configfile finds
    it)."""
    from hook.pipeline.config import load_node_settings

    return load_node_settings(config, paths.environ(), engine=engine)


# --- the commands (hook.commands.cli's typer commands call these too) ---------------------------------------


def write_command(
    config: str | None,
    path: str,
    assignments: list[str],
    *,
    pod_uid: str | None,
    container: str | None,
    pod_namespace: str | None = None,
    pod_name: str | None = None,
) -> str:
    """``env-file write``: write the file; return what to print (its path)."""
    from hook.producer.envfile import parse_assignments, write_env_file

    values = parse_assignments(assignments, "env-file write")
    settings = load_settings(config)
    write_env_file(
        path,
        values,
        pod_uid=pod_uid,
        container=container,
        settings=settings.env_file,
        pod_namespace=pod_namespace,
        pod_name=pod_name,
    )
    return f"{path}\n"


def path_command(config: str | None, device_ids: list[str], *, directory: str | None) -> str:
    """``env-file path``: return what to print (the path for the set of ids)."""
    from hook.producer.namekey import env_file_path

    if directory is None:
        directory = load_settings(config).env_file.directories[0]
    return f"{env_file_path(device_ids, directory)}\n"


def check_command(
    config: str | None,
    path: str,
    *,
    pod_uid: str | None,
    container: str | None,
    colour: bool,
    engine: str | None = None,
    pod_namespace: str | None = None,
    pod_name: str | None = None,
) -> tuple[str, bool]:
    """``env-file check``: return what to print (one line per check) and whether the hook would accept it
    (``engine``: ``--engine``, the engine whose pod annotations the pin is checked against)."""
    from hook.producer.envfile import check_env_file

    settings = load_settings(config, engine)
    report = check_env_file(
        path,
        settings.env_file,
        pod_uid=pod_uid,
        container=container,
        pod_namespace=pod_namespace,
        pod_name=pod_name,
    )
    return format_steps(report.steps, colour=colour), report.ok


def format_steps(steps: "list[CheckStep]", *, colour: bool) -> str:
    """One aligned line per check: its mark, its name, what was found."""
    return columns([(mark(step.ok, colour=colour), step.name, step.detail) for step in steps])


def mark(ok: bool | None, *, colour: bool) -> str:
    """Return the check mark for a result: ✓, ✗ or - (skipped), + and x where stdout cannot show those (a
    Latin-1 locale); green or red on a terminal."""
    from hook.util.safetext import shows

    if ok is None:
        return "-"
    good, bad = ("✓", "✗") if shows("✓✗", sys.stdout.encoding) else ("+", "x")
    if not colour:
        return good if ok else bad
    return f"{_GREEN}{good}{_RESET}" if ok else f"{_RED}{bad}{_RESET}"


def visible_width(text: str) -> int:
    """Return how many columns text takes on a terminal: colour codes (ESC [ ... m) take none."""
    width, index = 0, 0
    while index < len(text):
        if text.startswith("\x1b[", index):
            end = text.find("m", index)
            if end > 0:
                index = end + 1
                continue
        width += 1
        index += 1
    return width


def columns(rows: list[tuple[str, ...]], indent: str = "") -> str:
    """Align rows of cells in columns (the last cell is not padded)."""
    if not rows:
        return ""
    widths = [max(visible_width(row[i]) for row in rows if len(row) > i) for i in range(max(map(len, rows)))]
    lines = []
    for row in rows:
        cells = [cell + " " * (widths[i] - visible_width(cell)) for i, cell in enumerate(row[:-1])] + [
            row[-1]
        ]
        lines.append(indent + "  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"

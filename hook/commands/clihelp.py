"""Help text for people: the top-level help, and every command's help, written in words, not types.

typer renders option types as ``<str>`` or ``<list[str]>``, required arguments as ``{path}`` and cuts the
commands' descriptions off at the terminal width. ``prepare`` gives every command of the built (click)
command tree our own ``format_help`` instead: usage with upper-case placeholders, the full description,
arguments, options with their placeholders and defaults, sub-commands each with its complete first
sentence, and the global flags every command for people also accepts after its name.
"""

import os
import shutil
import textwrap
import types
from typing import Any

PROG = "gpu-env-hook"
HELP_OPTION_NAMES = ["-h", "--help"]
# The commands for people in the order the help lists them (what they are for, then the node's setup).
COMMAND_ORDER = ("resolve", "validate", "env-file", "cdi", "config", "doctor", "install", "uninstall")
GLOBAL_FLAGS = (
    ("--config FILE", "config.toml to read (also accepted before the command, as -config FILE)"),
    ("--debug", "on an internal error, print the traceback (also -debug before the command)"),
    ("--no-color", "no colour; NO_COLOR=1 in the environment does the same"),
)
STAGES = (
    ("prestart", "run the prestart hook: merge the env file, pick the GPUs, exec nvidia-container-cli"),
    ("createRuntime", "the same as prestart (the OCI createRuntime stage)"),
    ("precreate", "merge the env file into the config on stdin and print it (podman's precreate hook)"),
    ("nri", "[SOCKET] run as an NRI plugin on containerd 2.x (default /var/run/nri/nri.sock)"),
    ("poststart", "does nothing, exits 0"),
    ("poststop", "does nothing, exits 0"),
)
HOOK_FLAGS = (
    ("-config FILE", "config.toml to read (default: /etc/nvidia-container-runtime/config.toml)"),
    ("-debug", "stages: pass --debug to nvidia-container-cli; commands: print tracebacks"),
    ("-env-only", "prestart: merge the env file into config.json, then exit without calling the cli"),
    ("-env-file-merged PATH", "set by gpu-env-runtime in the hook it injects: the file is already merged"),
    ("-version", "print the version and exit"),
    ("--no-color", "no colour in the commands' output (also NO_COLOR=1)"),
    ("-h, --help", "print this help; COMMAND -h prints a command's help"),
)


def width() -> int:
    """Return the width to wrap help at: the terminal's, at most 100 columns, at least 60."""
    return max(60, min(100, shutil.get_terminal_size((100, 24)).columns))


def two_columns(rows: list[tuple[str, str]], indent: str = "  ") -> str:
    """Render name/description rows; descriptions wrap under themselves, never cut off."""
    if not rows:
        return ""
    left = min(max(len(name) for name, _ in rows), 28)
    lines = []
    for name, text in rows:
        start = indent + name.ljust(left) + "  "
        wrapped = textwrap.wrap(text, max(30, width() - len(start))) or [""]
        if len(name) > left:
            lines.append(indent + name)
            start = indent + " " * (left + 2)
        lines.append(start + wrapped[0])
        lines.extend(" " * len(start) + line for line in wrapped[1:])
    return "\n".join(line.rstrip() for line in lines) + "\n"


def first_sentence(text: str | None) -> str:
    """Return a docstring's first paragraph as one line (the command's one-line description)."""
    paragraph = (text or "").strip().split("\n\n")[0]
    return " ".join(paragraph.split())


def main_help(commands: list[tuple[str, str]]) -> str:
    """The top-level help: what it is, the stages first, then the commands for people, then the flags."""
    return (
        f"{PROG}: an OCI hook for GPU containers, a drop-in for nvidia-container-runtime-hook that also\n"
        "reads the GPUs a device plugin chose from the file named by NVIDIA_ENV_FROM_FILE.\n"
        "\n"
        "Usage:\n"
        f"  {PROG} [-config FILE] [-debug] [-env-only] STAGE   (run by the container engine)\n"
        f"  {PROG} COMMAND [ARGS]...                           (run by people)\n"
        f"  {PROG} COMMAND -h                                  (a command's help)\n"
        "\n"
        "Stages (the container engine runs these, with the OCI state on stdin):\n"
        + two_columns(list(STAGES))
        + "\nCommands for people:\n"
        + two_columns([*commands, ("help", "print this help, or a command's: help COMMAND")])
        + "\nFlags (before the stage or command; for commands also after it):\n"
        + two_columns(list(HOOK_FLAGS))
    )


def prepare(command: Any) -> None:
    """Give the root command ``-h`` and every command in its tree people's help text."""
    settings = dict(getattr(command, "context_settings", None) or {})
    settings["help_option_names"] = HELP_OPTION_NAMES
    command.context_settings = settings
    _prepare(command)


def _prepare(command: Any) -> None:
    """Replace one command's help renderer and full short help, then its sub-commands'."""
    command.short_help = first_sentence(command.help)
    command.format_help = types.MethodType(_format_help, command)
    for param in command.params:
        if getattr(param, "metavar", None) is None and not getattr(param, "is_flag", False):
            param.metavar = placeholder(param)
    for sub in getattr(command, "commands", {}).values():
        _prepare(sub)


def placeholder(param: Any) -> str:
    """Name what a parameter takes: its choices, or its name in upper case."""
    choices = getattr(getattr(param, "type", None), "choices", None)  # click
    descriptor = getattr(param, "type_descriptor", None)  # typer 0.29 keeps its own
    if descriptor is not None and getattr(descriptor, "is_choice", False):
        choices = descriptor.choices
    if choices:
        return "|".join(str(getattr(choice, "value", choice)) for choice in choices)
    name = str(param.name or "value").lower()
    if name.endswith(("dir", "root", "directory")):
        word = "DIR"
    elif name.endswith(("config", "path", "state", "file", "python")):
        word = "FILE"
    elif name.endswith("version"):
        word = "N"
    else:
        word = name.upper().replace("_", "-")
    return word + ("..." if getattr(param, "nargs", 1) != 1 else "")


def _format_help(command: Any, ctx: Any, formatter: Any) -> None:
    """Write a command's help: usage, description, arguments, options, commands, global flags."""
    formatter.write(render_help(command, ctx))


def render_help(command: Any, ctx: Any) -> str:
    """Render one command's help text."""
    path = ctx.command_path
    arguments = [param for param in command.params if param.param_type_name == "argument"]
    options = [param for param in command.params if param.param_type_name == "option"]
    subcommands = getattr(command, "commands", None)
    usage = [path]
    if any(not param.hidden for param in options):
        usage.append("[OPTIONS]")
    usage += [f"{param.metavar}" if param.required else f"[{param.metavar}]" for param in arguments]
    if subcommands:
        usage.append("COMMAND [ARGS]...")
    out = "Usage: " + " ".join(usage) + "\n\n"
    out += textwrap.fill(" ".join((command.help or "").split()), width()) + "\n"
    if arguments:
        out += "\nArguments:\n" + two_columns([(param.metavar, param.help or "") for param in arguments])
    rows = [_option_row(param) for param in options if not param.hidden]
    own = {name for param in options for name in param.opts}
    rows += [(name, text) for name, text in GLOBAL_FLAGS if name.split()[0] not in own and not subcommands]
    rows.append((", ".join(HELP_OPTION_NAMES), "print this help"))
    out += "\nOptions:\n" + two_columns(rows)
    if subcommands:
        out += "\nCommands:\n" + two_columns(
            [(name, sub.short_help or "") for name, sub in subcommands.items() if not sub.hidden]
        )
        out += f"\nRun '{path} COMMAND -h' for a command's options.\n"
    return out


def _option_row(param: Any) -> tuple[str, str]:
    """One option's name column (all its spellings, then what it takes) and its description."""
    names = ", ".join([*param.opts, *param.secondary_opts])
    if not param.is_flag:
        names += f" {param.metavar}"
    text = " ".join((param.help or "").split()).rstrip(".")
    extra = []
    default = param.default
    if not param.is_flag and default not in (None, "", (), []) and not callable(default):
        extra.append(f"default: {getattr(default, 'value', default)}")
    if param.required:
        extra.append("required")
    if extra:
        text += f" ({'; '.join(extra)})"
    return names, text


def no_color(environ: dict[str, str] | os._Environ[str]) -> bool:
    """NO_COLOR (https://no-color.org): set and not empty means no colour."""
    return bool(environ.get("NO_COLOR"))

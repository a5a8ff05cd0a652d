"""Entry point: upstream's command line (Go ``flag`` rules), stage dispatch, errors turned into exit codes.

This is the only place that prints an error or chooses an exit status. Stage paths import only the standard
library and the modules they need; the human commands (typer) are imported only when one is named. A stage
path returns its status as a ``Done`` (``hook.launcher``): it registered no exit handler and started no
thread, so a launched process ends at once; the commands for people and error reports end as Python ends.
"""

import posix
import sys

from hook.launcher import Done
from hook.util.errors import HookError, UsageError, describe_os_error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from hook.stages.prestart import Options

PROG = "gpu-env-hook"
HUMAN_COMMANDS = ("resolve", "validate", "env-file", "cdi", "config", "doctor", "install", "uninstall")
_STRING_FLAGS = ("config", "env-file-merged", "refusal-log")
# A command for people started from the node's copy of the package (no typer there): where it runs instead.
ELSEWHERE = (
    PROG + " {command}: the node's copy of gpu-env-hook serves the engines ({missing} is not here); run it "
    "where pip installed gpu-env-hook, or in the DaemonSet's pod: kubectl -n gpu-env-hook exec "
    "ds/gpu-env-hook -- gpu-env-hook {command} (the node's / is at /host there)"
)
# The stages an engine runs. Started with -refusal-log (the oci-hooks.d entries install writes: podman shows
# a failing hook only as `exit status N` and discards its stderr), a refusal there exits with its class's
# status (docs/troubleshooting.md lists them; checked in this order); started otherwise (NVIDIA's hook path,
# the shim's hook) every failure is status 1, as upstream's.
STAGES = ("prestart", "createRuntime", "precreate")
STAGE_STATUSES = (
    ("UsageError", 2),
    ("ConfigError", 10),
    ("StateError", 11),
    ("SpecError", 12),
    ("RequestError", 13),
    ("EnvFileError", 14),
    ("CdiError", 15),
    ("ExecError", 16),
    ("SystemCallError", 17),
)
# The refusal log (-refusal-log FILE): one line per refused start, and at most this many bytes (then it is
# moved to FILE.1 and started again).
REFUSAL_LOG_LIMIT = 256 * 1024
_BOOL_FLAGS = ("debug", "version", "env-only", "no-color")
# The commands an engine (or containerd's NRI) runs. Anything after their word is ignored, as by upstream's
# flag package, except a help word: then the usage on stdout, exit 0 (a person asked; no engine passes one).
ENGINE_COMMANDS = ("prestart", "createRuntime", "poststart", "poststop", "precreate", "nri", "nri-backstop")
HELP_WORDS = ("-h", "--h", "-help", "--help")

USAGE = f"""\
Usage of {PROG} (a drop-in for nvidia-container-runtime-hook):
  -config string
    \tconfiguration file
  -debug
    \tenable debug output
  -env-file-merged string
    \tset by gpu-env-runtime in the hook it injects: the env file is already merged (never read it again)
  -env-only
    \tmerge the env file into config.json, then exit without calling nvidia-container-cli
  -refusal-log string
    \ta stage also appends its one-line refusal to this root-only file (install names it in the hooks JSON)
  -version
    \tenable version output

Commands:
  prestart
        run the prestart hook (also: createRuntime)
  poststart
        no-op
  poststop
        no-op
  precreate
        merge the env file into the config on stdin and print it (podman precreate hook)
  nri [SOCKET]
        run as an NRI plugin on containerd 2.x (default socket /var/run/nri/nri.sock)
  nri-backstop
        OCI hook of earlier releases' base specs: refuse a container whose env file the NRI plugin did not
        handle (the env-file guard replaces it: take it out of the base spec)
  resolve, validate, env-file, cdi, config, doctor, install, uninstall
        commands for people: '{PROG} --help' lists them, '{PROG} COMMAND -h' explains one
"""


class HelpRequestedError(Exception):
    """``-h`` / ``-help`` was given; ``rest`` is what follows it (a stage keeps Go's usage on stderr)."""

    def __init__(self, rest: list[str]) -> None:
        super().__init__()
        self.rest = rest


def parse_flags(argv: list[str]) -> tuple[dict[str, str | bool], list[str]]:
    """Parse flags before the command word as Go's ``flag`` package does; return flags and the rest."""
    flags: dict[str, str | bool] = {}
    index = 0
    while index < len(argv):
        arg = argv[index]
        if len(arg) < 2 or not arg.startswith("-"):
            break
        index += 1
        if arg == "--":
            break
        name = arg[2:] if arg.startswith("--") else arg[1:]
        if not name or name.startswith(("-", "=")):
            raise UsageError(f"bad flag syntax: {arg}")
        name, has_value, value = name.partition("=")
        if name in ("h", "help"):
            raise HelpRequestedError(argv[index:])
        if name in _BOOL_FLAGS:
            if not has_value:
                flags[name] = True
                continue
            from hook.pipeline.requirements import parse_go_bool

            parsed = parse_go_bool(value)
            if parsed is None:
                raise UsageError(f'invalid boolean value "{value}" for -{name}: parse error')
            flags[name] = parsed
        elif name in _STRING_FLAGS:
            if not has_value:
                if index >= len(argv):
                    raise UsageError(f"flag needs an argument: -{name}")
                value = argv[index]
                index += 1
            flags[name] = value
        else:
            raise UsageError(f"flag provided but not defined: -{name}")
    return flags, argv[index:]


def build_options(flags: dict[str, str | bool]) -> "Options":
    """Turn parsed flags into stage options."""
    from hook.stages.prestart import Options

    config = flags.get("config")
    merged = flags.get("env-file-merged")
    return Options(
        config=config if isinstance(config, str) and config else None,
        debug=flags.get("debug") is True,
        env_only=flags.get("env-only") is True,
        env_file_merged=merged if isinstance(merged, str) else None,
    )


def dispatch(flags: dict[str, str | bool], rest: list[str]) -> int:
    """Run the command word with the parsed flags; a stage's status is a ``Done``."""
    if flags.get("version") is True:
        from hook import __version__

        sys.stdout.write(f"{PROG} version {__version__}\n")
        return Done(0)
    if not rest:
        raise UsageError("no command given")
    command = rest[0]
    if (command in ENGINE_COMMANDS and any(word in HELP_WORDS for word in rest[1:])) or (
        command == "help" and len(rest) > 1 and rest[1] in ENGINE_COMMANDS
    ):
        sys.stdout.write(USAGE)  # for a person (`-h STAGE` before it is upstream's: print_help)
        return 0
    if "no-color" in flags and command not in HUMAN_COMMANDS and command != "help":
        raise UsageError("flag provided but not defined: -no-color")  # the stages keep upstream's flag set
    if command in ("poststart", "poststop"):
        return Done(0)
    if command in ("prestart", "createRuntime"):
        from hook.stages.prestart import run_prestart
        from hook.util.paths import environ

        return Done(run_prestart(build_options(flags), sys.stdin.buffer, environ(), posix.getcwd()))
    if command == "precreate":
        from hook.stages.precreate import run_precreate
        from hook.util.paths import environ

        return Done(run_precreate(build_options(flags), sys.stdin.buffer, sys.stdout.buffer, environ()))
    if command in ("nri", "nri-backstop"):
        config = flags.get("config")
        config_path = config if isinstance(config, str) and config else None
        if command == "nri":
            from hook.nri.main import run_nri

            return run_nri(rest[1:], config=config_path)
        from hook.nri.backstop import run_backstop
        from hook.util.paths import environ

        return Done(run_backstop(sys.stdin.buffer, environ(), config_path))
    if command in HUMAN_COMMANDS or command == "help":
        config = flags.get("config")
        config_path = config if isinstance(config, str) and config else None
        debug, no_color = flags.get("debug") is True, flags.get("no-color") is True
        if command == "env-file" and not debug and not no_color:  # a device plugin's per-container call
            from hook.commands.envfile import run_env_file

            code = run_env_file(rest[1:], config=config_path)
            if code is not None:
                return Done(code)
        run_cli = load_cli(rest)
        return run_cli(rest, config=config_path, debug=debug, no_color=no_color)
    raise UsageError(f"unknown command: {command}")


def load_cli(words: list[str]) -> "Callable[..., int]":
    """Import the commands for people (``run_cli``) for the command ``words``. They load typer and jsonschema,
    which the node's own copy of the package (``hook.install.tree``: what the engines run) does not hold:
    there, one line says where they run instead."""
    try:
        from hook.commands.cli import run_cli
    except ModuleNotFoundError as err:
        missing = (err.name or "").partition(".")[0]
        if not missing or missing == "hook":
            raise
        shown = " ".join(words[: 2 if len(words) > 1 and not words[1].startswith("-") else 1])
        raise HookError(ELSEWHERE.format(command=shown, missing=missing)) from None
    return run_cli


def print_help(rest: list[str]) -> int:
    """``-h``: before a stage, Go's usage on stderr (as upstream); otherwise the help for people on stdout."""
    words = [arg for arg in rest if not arg.startswith("-")]
    if words and words[0] not in HUMAN_COMMANDS and words[0] != "help":
        sys.stderr.write(USAGE)
        return 0
    try:
        run_cli = load_cli(words or ["help"])
    except HookError as err:
        return report_error(err, debug=False)
    return run_cli(["help", *words[:1]] if words else ["help"], config=None)


def main(argv: list[str] | None = None) -> int:
    """Run the hook and return its exit status (0 success, 1 error, 2 usage)."""
    args = sys.argv[1:] if argv is None else argv
    debug = False
    flags: dict[str, str | bool] = {}
    rest: list[str] = []
    try:
        flags, rest = parse_flags(args)
        debug = flags.get("debug") is True
        return dispatch(flags, rest)
    except HelpRequestedError as request:
        return print_help(request.rest)
    except Exception as err:  # noqa: BLE001 - every failure is one line (report_error), never a traceback
        log = flags.get("refusal-log")
        if not isinstance(log, str) or not rest or rest[0] not in STAGES:
            return report_error(err, debug=debug)
        return report_error(err, debug=debug, stage=rest[0], log=log)


def report_error(err: Exception, *, debug: bool, stage: str | None = None, log: str | None = None) -> int:
    """Print the one line for a failure and return its exit status: a usage error with the usage text, a
    refusal (HookError) as it is, an OSError no stage wrapped with its path and reason, anything else as an
    internal error (its traceback only with -debug).

    For a ``stage`` started with a refusal ``log``, the status is the refusal class's (``STAGE_STATUSES``; 1
    for any other failure), and the line is also appended to the log (an empty name: none)."""
    status = 1
    if isinstance(err, UsageError):
        line, status = str(err), err.exit_code
        sys.stderr.write(f"{err}\n{USAGE}")
    elif isinstance(err, HookError):
        line, status = str(err), err.exit_code
        sys.stderr.write(f"{err}\n")
    elif isinstance(err, OSError):
        # a system call no stage wrapped: still one line with the path and the reason
        line = f"{PROG}: {describe_os_error(err)}"
        sys.stderr.write(f"{line}\n")
    else:
        line = f"{PROG}: internal error: {type(err).__name__}"
        sys.stderr.write(f"{line}\n")
        if debug:
            import traceback

            traceback.print_exception(err)
    if stage is None:
        return status
    names = {cls.__name__ for cls in type(err).__mro__}
    status = next((code for name, code in STAGE_STATUSES if name in names), 1)
    if log:
        write_refusal_log(log, f"{stage} exit status {status}: {line}")
    return status


def write_refusal_log(path: str, line: str) -> None:
    """Append ``line`` (with the UTC time) to the refusal log, if it is a root-only regular file or can be
    created as one; never blocks (a FIFO is not opened), never fails the caller, never grows past
    ``REFUSAL_LOG_LIMIT`` (the full log is moved to ``path.1`` first)."""
    import time

    flags = posix.O_WRONLY | posix.O_APPEND | posix.O_CREAT | posix.O_NONBLOCK | posix.O_NOFOLLOW
    flags |= posix.O_CLOEXEC | posix.O_NOCTTY
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    data = f"{stamp} {line}\n".encode("utf-8", "backslashreplace")
    try:
        fd = posix.open(path, flags, 0o600)
        try:
            info = posix.fstat(fd)
            if info.st_mode & 0o170000 != 0o100000 or info.st_uid != posix.geteuid() or info.st_mode & 0o077:
                return
            if info.st_size + len(data) > REFUSAL_LOG_LIMIT:
                posix.rename(path, path + ".1")
                posix.close(fd)
                fd = posix.open(path, flags, 0o600)
            posix.write(fd, data)
        finally:
            posix.close(fd)
    except OSError:
        return


if __name__ == "__main__":
    sys.exit(main())

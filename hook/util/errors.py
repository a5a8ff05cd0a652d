"""The one error hierarchy: ``str(err)`` is the one line a user sees; the entry point picks the exit code.

``str(err)`` is escaped as a whole (``hook.util.safetext``: no tenant text can start a second line). Every
module imports the classes it raises at its top, and every start loads this module (creating the classes
costs about 0.3 ms): one import graph to read, rather than imports hidden inside functions.
"""

from hook.util.safetext import LINE_LIMIT, escape, os_reason


class HookError(Exception):
    """A refusal or failure the user must act on; exit status 1.

    ``str(err)`` is always one line without control characters (escaped again here, whatever the message
    was built from), at most ``LINE_LIMIT`` characters.
    """

    exit_code = 1

    def __str__(self) -> str:
        return escape(super().__str__(), LINE_LIMIT)


class UsageError(HookError):
    """The command line is wrong; exit status 2."""

    exit_code = 2


class ConfigError(HookError):
    """config.toml is missing, unreadable or holds a value of the wrong type."""


class StateError(HookError):
    """The OCI state on stdin cannot be decoded."""


class SpecError(HookError):
    """The bundle's config.json is missing, unreadable or malformed."""


class RequestError(HookError):
    """The container's GPU request breaks a rule (capabilities, MIG, requirements, runtime mode).

    ``variable`` names the variable whose value broke the rule and ``redacted`` says what is wrong without
    quoting that value, for when the value came from an env file (whose content is never shown).
    """

    def __init__(self, message: str, *, variable: str | None = None, redacted: str | None = None) -> None:
        super().__init__(message)
        self.variable = variable
        self.redacted = redacted or message


class EnvFileError(HookError):
    """The env file named by the container is refused; the message never carries its content."""


class EnvFileMissingError(EnvFileError):
    """The named env file (or a directory on its way) does not exist: ``[env-file] on-missing`` decides."""


class EnvFileSyntaxError(EnvFileError):
    """The env file is not valid dotenv; ``bindings`` holds what was read before the line that breaks."""

    def __init__(self, message: str, bindings: list[tuple[str, str | None, int]]) -> None:
        super().__init__(message)
        self.bindings = bindings


class ExecError(HookError):
    """nvidia-container-cli (or the real runtime) cannot be found or executed."""


class SystemCallError(HookError):
    """The operating system refused an operation on a file (no space, read-only, I/O error, permission).

    ``errno`` is the error number, for a caller that must tell one reason from another.
    """

    def __init__(self, message: str, *, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


def os_error(action: str, path: str, err: OSError) -> HookError:
    """Turn an ``OSError`` into the one line ``could not <action> <path>: <reason>``.

    ``reason`` is the system's own text (``No space left on device``, ``Read-only file system``,
    ``Input/output error``, ``Permission denied``); the path is shown without control characters.
    """
    return SystemCallError(f"could not {action} {escape(path)}: {os_reason(err)}", errno=err.errno)


def describe_os_error(err: OSError) -> str:
    """The last line of defence for an OSError no caller wrapped: the path(s) it names and the reason."""
    paths = [str(name) for name in (err.filename, err.filename2) if name is not None]
    if not paths:
        return f"system error: {os_reason(err)}"
    return str(os_error("access", " -> ".join(paths), err))


class CdiError(HookError):
    """A CDI spec file is invalid, or a CDI device cannot be resolved or injected."""


class CdiUnresolvableError(CdiError):
    """Requested CDI devices that no spec defines (``names`` lists them; ``skipped`` is the note naming the
    spec files that were skipped as invalid, "" when none was)."""

    def __init__(self, message: str, *, names: tuple[str, ...], skipped: str = "") -> None:
        super().__init__(message)
        self.names = names
        self.skipped = skipped

"""The one error hierarchy: ``str(err)`` is the one line a user sees; the entry point picks the exit code."""


class HookError(Exception):
    """A refusal or failure the user must act on; exit status 1."""

    exit_code = 1


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


class ExecError(HookError):
    """nvidia-container-cli (or the real runtime) cannot be found or executed."""


def json_kind(value: object) -> str:
    """Name a JSON value's type for a message, never its content."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def decode_error_reason(err: Exception) -> str:
    """Describe a JSON or UTF-8 decoding error by position, without quoting the input."""
    if isinstance(err, UnicodeDecodeError):
        return f"not valid UTF-8 at byte {err.start}"
    msg, lineno, colno = getattr(err, "msg", None), getattr(err, "lineno", None), getattr(err, "colno", None)
    if isinstance(msg, str) and lineno is not None:
        return f"{msg} at line {lineno} column {colno}"
    return type(err).__name__

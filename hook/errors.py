"""The one error hierarchy: ``str(err)`` is the one line a user sees; the entry point picks the exit code.

Also the one place tenant-controlled text is made safe for a message (:func:`escape`): every value or name a
container, image or pod annotation can choose goes through it before it reaches a message, and every
message goes through it again as a whole (``HookError.__str__``, the log functions) as a second line of
defence, so no tenant text can start a second line or send a terminal control sequence.
"""

ESCAPE_LIMIT = 256
LINE_LIMIT = 4096
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape(value: str, limit: int = ESCAPE_LIMIT) -> str:
    """Render tenant-controlled text for a one-line message: printable characters as they are, every other
    character (C0/C1 controls, DEL, line and paragraph separators, format characters such as bidi
    overrides, lone surrogates) as a Python-style escape (``\\n``, ``\\x1b``, ``\\u2028``), and at most
    ``limit`` characters of the rendering, then ``...``. Linear in ``limit``, whatever the value's length.
    """
    if len(value) <= limit and value.isprintable():
        return value
    pieces: list[str] = []
    length = 0
    for char in value:
        piece = char if char.isprintable() else _escape_char(char)
        length += len(piece)
        if length > limit:
            pieces.append("...")
            break
        pieces.append(piece)
    return "".join(pieces)


def _escape_char(char: str) -> str:
    """Spell one non-printable character as an escape."""
    named = _NAMED_ESCAPES.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


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


def os_reason(err: OSError) -> str:
    """Return an OSError's reason without the path it may carry (``strerror``, else the errno's text)."""
    if err.strerror:
        return err.strerror
    if err.errno:
        import posix

        return posix.strerror(err.errno)
    return type(err).__name__


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


class CdiError(HookError):
    """A CDI spec file is invalid, or a CDI device cannot be resolved or injected."""


class CdiUnresolvableError(CdiError):
    """Requested CDI devices that no spec defines (``names`` lists them)."""

    def __init__(self, message: str, *, names: tuple[str, ...]) -> None:
        super().__init__(message)
        self.names = names

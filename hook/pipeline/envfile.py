"""NVIDIA_ENV_FROM_FILE: open the named file safely, parse it strictly, bind it to its pod, merge it.

The path comes from the container (tenant input); the file's content comes from the node's device plugin.
Every refusal is an EnvFileError whose one line names the path, the line number where there is one, and the
rule that failed: never any content of the file.
"""

import posix
import stat

from hook.pipeline.config import is_env_name
from hook.util import envvars
from hook.util.beneath import describe_mode, open_beneath, refuse, trust_problem
from hook.util.errors import EnvFileMissingError, EnvFileSyntaxError, os_error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hook.pipeline.config import EnvFileSettings
    from hook.pipeline.dotenvreader import Binding

REFUSED_PREFIXES = ("LD_", "PYTHON", "NVIDIA_CTK_")
REFUSED_NAMES = ("PATH",)
RESERVED_PREFIX = "GPU_ENV_HOOK_"
_REFUSED_STARTS = (*REFUSED_PREFIXES, RESERVED_PREFIX)


class EnvFile:
    """A parsed, accepted env file: the variables to merge and whether it is pinned to this pod."""

    __slots__ = ("path", "pinned", "values")

    def __init__(self, *, path: str, values: dict[str, str], pinned: bool) -> None:
        self.path = path
        self.values = values
        self.pinned = pinned


def check_descriptor(fd: int, path: str) -> None:
    """Check the opened file: regular, owned by root, not group/world-writable, exactly one hard link."""
    try:
        info = posix.fstat(fd)
    except OSError as err:
        raise os_error("inspect env file", path, err) from None
    if not stat.S_ISREG(info.st_mode):
        raise refuse(path, f"is {describe_mode(info.st_mode)}, not a regular file")
    problem = trust_problem(info.st_uid, info.st_mode)
    if problem is not None:
        raise refuse(path, problem)
    if info.st_nlink > 1:  # 0: replaced by an atomic writer after our open; what we read is still whole
        raise refuse(path, f"must have exactly one hard link, has {info.st_nlink}")


def read_bounded(fd: int, limit: int, path: str) -> bytes:
    """Read at most ``limit`` bytes; more is a refusal (st_size is never trusted)."""
    chunks: list[bytes] = []
    total = 0
    while total <= limit:
        try:
            chunk = posix.read(fd, limit + 1 - total)
        except OSError as err:
            raise os_error("read env file", path, err) from None
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > limit:
        raise refuse(path, f"is larger than the limit of {limit} bytes (env-file.max-bytes)")
    return b"".join(chunks)


def load_env_file_bytes(path: str, settings: "EnvFileSettings") -> bytes:
    """Open, check and read the env file named by the container."""
    fd = open_beneath(path, settings.directories)
    try:
        check_descriptor(fd, path)
        return read_bounded(fd, settings.max_bytes, path)
    finally:
        posix.close(fd)


# --- parsing ---------------------------------------------------------------------------------------------


class EnvFileText:
    """An env file read as dotenv (syntax only): its ``(key, value, line)`` bindings, and where it breaks
    the byte-level rules.

    The byte-level rules (no NUL, valid UTF-8) are reported only after the pin is checked, so that naming
    another pod's file never tells which rule its content breaks.
    """

    __slots__ = ("bad_utf8_line", "bindings", "nul_line")

    def __init__(self, bindings: "list[Binding]", *, nul_line: int | None, bad_utf8_line: int | None) -> None:
        self.bindings = bindings
        self.nul_line = nul_line
        self.bad_utf8_line = bad_utf8_line


def read_env_file(data: bytes, path: str) -> EnvFileText:
    """Read dotenv bytes as python-dotenv would (without interpolation), in linear time
    (``hook.pipeline.dotenvreader``).

    Bytes that are not UTF-8 are read as stand-in characters (and reported later, with the NUL rule).
    """
    from hook.pipeline.dotenvreader import DotenvSyntaxError, parse_dotenv

    nul = data.find(b"\0")
    nul_line = None if nul < 0 else data.count(b"\n", 0, nul) + 1
    bad_utf8_line = None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        bad_utf8_line = data.count(b"\n", 0, err.start) + 1
        text = data.decode("utf-8", "surrogateescape")
    try:
        bindings = parse_dotenv(text)
    except DotenvSyntaxError as err:
        raise EnvFileSyntaxError(
            refuse(path, "is not a valid dotenv line", line=err.line).args[0], err.bindings
        ) from None
    return EnvFileText(bindings, nul_line=nul_line, bad_utf8_line=bad_utf8_line)


def find_pins(bindings: "list[Binding]", path: str) -> dict[str, str]:
    """Return the reserved pin keys of the file (``GPU_ENV_HOOK_POD_UID``, ``..._CONTAINER_NAME``).

    A pin key set twice, without ``=`` or to an empty value is refused: the pin must be unambiguous.
    """
    pins: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for key, value, line in bindings:
        if key not in envvars.RESERVED_KEYS:
            continue
        if key in first_line:
            raise refuse(path, f"duplicate key (first set on line {first_line[key]})", line=line)
        first_line[key] = line
        if value is None:
            raise refuse(path, f"{key} has no '=' ({key}=value expected)", line=line)
        if not value:
            raise refuse(path, f"{key} must not be empty", line=line)
        pins[key] = value
    return pins


def check_content(text: EnvFileText, path: str, *, variable: str) -> dict[str, str]:
    """Apply every content rule to a read file; return the variables to merge (pin keys left out).

    A NUL byte, invalid UTF-8, a key without ``=``, a bad, duplicate or refused key refuse the whole file.
    """
    if text.nul_line is not None:
        raise refuse(path, "contains a NUL byte", line=text.nul_line)
    if text.bad_utf8_line is not None:
        raise refuse(path, "is not valid UTF-8", line=text.bad_utf8_line)
    values: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for key, value, line in text.bindings:
        if value is None:
            raise refuse(path, "a key has no '=' (KEY=value expected)", line=line)
        if not is_env_name(key):
            raise refuse(path, "a key must match [A-Za-z_][A-Za-z0-9_]*", line=line)
        if key in first_line:
            raise refuse(path, f"duplicate key (first set on line {first_line[key]})", line=line)
        first_line[key] = line
        rule = refused_key_rule(key, variable)
        if rule is not None:
            raise refuse(path, f"a key matching {rule} may not be set from an env file", line=line)
        if key not in envvars.RESERVED_KEYS:
            values[key] = value
    return values


def parse_env_file(data: bytes, path: str, *, variable: str) -> tuple[dict[str, str], dict[str, str]]:
    """Read dotenv bytes strictly; return ``(variables, pins)``, or refuse the whole file (no pin check:
    the hook checks the pin between :func:`find_pins` and :func:`check_content`)."""
    text = read_env_file(data, path)
    pins = find_pins(text.bindings, path)
    return check_content(text, path, variable=variable), pins


def refused_key_rule(key: str, variable: str) -> str | None:
    """Return the rule a key breaks (``LD_*``, ``PATH``, ...), or None if it may be set."""
    if key == variable:
        return variable
    if key in REFUSED_NAMES:
        return key
    if not key.startswith(_REFUSED_STARTS):
        return None
    for prefix in REFUSED_PREFIXES:
        if key.startswith(prefix):
            return prefix + "*"
    if key.startswith(RESERVED_PREFIX) and key not in envvars.RESERVED_KEYS:
        return RESERVED_PREFIX + "* (reserved)"
    return None


# --- pod binding and merging -----------------------------------------------------------------------------


def resolve_binding(
    pins: dict[str, str], annotations: dict[str, str], path: str, *, required: bool, engine: str
) -> bool:
    """Check the file's pin against the container's annotations; return whether it is pinned.

    The rule is ``hook.pipeline.pod``'s: a pod UID, or a namespace and name together, judged only by the
    annotations of ``engine`` (``[env-file] pod-binding-engine``); podman, docker and ``none`` have no
    annotation a pin can be checked against, so a pinned file is refused there.
    """
    if not pins and not required:
        return False  # no pin key at all: nothing to judge, and the pod rules stay unloaded
    from hook.pipeline import pod

    problem = pod.pin_error(pins)
    if problem is not None:
        raise refuse(path, problem)
    if not pod.is_pinned(pins):
        if required:
            raise refuse(path, f"is not pinned to a pod ({pod.NEEDS_POD}, is required)")
        return False
    problem = pod.pin_mismatch(pins, annotations, engine)
    if problem is not None:
        raise refuse(path, problem)
    return True


def check_pins(
    pins: dict[str, str], annotations: dict[str, str], path: str, settings: "EnvFileSettings"
) -> bool:
    """:func:`resolve_binding` with the engine and requirement of ``settings``."""
    return resolve_binding(
        pins, annotations, path, required=settings.require_pod_binding, engine=settings.pod_binding_engine
    )


def merge_env(entries: list[str], values: dict[str, str]) -> list[str]:
    """Return ``process.env`` with the file's values: a key in the file replaces the container's entry (at
    its first position; later duplicates go), other keys are appended in file order."""
    merged: list[str] = []
    placed: set[str] = set()
    for entry in entries:
        name = entry.partition("=")[0]
        if name in values:
            if name not in placed:
                merged.append(f"{name}={values[name]}")
                placed.add(name)
            continue
        merged.append(entry)
    if placed:
        values = values.copy()
        for name in placed:
            del values[name]
    merged += map("=".join, values.items())  # (no Python step per variable)
    return merged


def resolve_env_file(
    env: dict[str, str], annotations: dict[str, str], settings: "EnvFileSettings"
) -> EnvFile | None:
    """Load the env file the container names, or None when it names none (or it is missing and ignored)."""
    path = env.get(settings.variable, "")
    if not path:
        return None
    try:
        data = load_env_file_bytes(path, settings)
    except EnvFileMissingError:
        if settings.on_missing == "ignore":
            return None
        raise
    # The pin first: naming another pod's file must not tell which content rule that file breaks.
    try:
        text = read_env_file(data, path)
    except EnvFileSyntaxError as err:
        pins = find_pins(err.bindings, path)
        if pins:  # pinned before the line that breaks: that pin is checked first
            check_pins(pins, annotations, path, settings)
        raise
    pinned = check_pins(find_pins(text.bindings, path), annotations, path, settings)
    values = check_content(text, path, variable=settings.variable)
    return EnvFile(path=path, values=values, pinned=pinned)

"""NVIDIA_REQUIRE_*, NVIDIA_DISABLE_REQUIRE and the legacy ``cuda>=X.Y`` requirement (section 10.2)."""

from hook.util import envvars
from hook.util.errors import RequestError
from hook.util.safetext import escape

_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_BOOL = _GO_TRUE | frozenset({"0", "f", "F", "FALSE", "false", "False"})
_UINT32_MAX = 2**32 - 1
_UINT64_MAX = 2**64 - 1
_IDENT_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")


def parse_go_bool(value: str) -> bool | None:
    """Parse a boolean the way Go's strconv.ParseBool does; None when it is not one."""
    if value not in _GO_BOOL:
        return None
    return value in _GO_TRUE


def requirements_disabled(env: dict[str, str]) -> bool:
    """Tell whether NVIDIA_DISABLE_REQUIRE is set to a Go-true value (``yes`` and junk are false)."""
    return parse_go_bool(env.get(envvars.NVIDIA_DISABLE_REQUIRE, "")) is True


def resolve_requirements(env: dict[str, str], *, legacy: bool) -> list[str]:
    """Return every NVIDIA_REQUIRE_* value (JETPACK excluded) and, on a legacy image, ``cuda>=X.Y`` last.

    Upstream's order is Go map order (random); ours is the environment's order, which is one of those.
    """
    if requirements_disabled(env):
        return []
    requirements = [
        value
        for name, value in env.items()
        if name.startswith(envvars.NVIDIA_REQUIRE_PREFIX)
        and not name.startswith(envvars.NVIDIA_REQUIRE_JETPACK)
    ]
    if legacy:
        version = env[envvars.CUDA_VERSION]
        try:
            major_minor = parse_major_minor(version)
        except ValueError as err:
            raise RequestError(
                "failed to get requirements failed to get version: "
                f"invalid CUDA version {escape(version)}: {err}",
                variable=envvars.CUDA_VERSION,
                redacted=f"{envvars.CUDA_VERSION} is not a valid version: {err}",
            ) from None
        requirements.append(f"cuda>={major_minor}")
    return requirements


def parse_major_minor(version: str) -> str:
    """Return ``MAJOR.MINOR`` of a lenient semantic version (optional ``v``, 1 to 3 numbers, pre/build).

    Raises ValueError naming what is wrong. Leading zeros are accepted (``09.1`` is 9.1); each of major and
    minor must fit in 32 bits.
    """
    text = version.removeprefix("v")
    text, plus, build = text.partition("+")
    if plus and not _valid_identifiers(build):
        raise ValueError("invalid version string: invalid semantic version")
    text, dash, pre = text.partition("-")
    if dash and not _valid_identifiers(pre):
        raise ValueError("invalid version string: invalid semantic version")
    parts = text.split(".")
    if len(parts) > 3 or not all(part.isascii() and part.isdigit() for part in parts):
        raise ValueError("invalid version string: invalid semantic version")
    numbers = [int(part) for part in parts] + [0] * (3 - len(parts))
    if any(number > _UINT64_MAX for number in numbers):
        raise ValueError("invalid version string: invalid semantic version")
    if numbers[0] > _UINT32_MAX:
        raise ValueError("invalid major version")
    if numbers[1] > _UINT32_MAX:
        raise ValueError("invalid minor version")
    return f"{numbers[0]}.{numbers[1]}"


def _valid_identifiers(text: str) -> bool:
    """Dot-separated, non-empty ``[0-9A-Za-z-]`` identifiers."""
    return all(ident and set(ident) <= _IDENT_CHARS for ident in text.split("."))

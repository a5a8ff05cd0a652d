"""Is the container privileged? CAP_SYS_ADMIN in the bounding set (or the flat list of pre-rc5 specs)."""

from hook.util.errors import SpecError
from hook.util.safetext import escape, json_kind

CAP_SYS_ADMIN = "CAP_SYS_ADMIN"
_CAP_SETS = ("bounding", "effective", "inheritable", "permitted", "ambient")


def resolve_privileged(document: dict[str, object]) -> bool:
    """Return whether a checked spec grants CAP_SYS_ADMIN in the set upstream consults."""
    process = document["process"]
    assert isinstance(process, dict)  # noqa: S101 - guaranteed by bundle.check_spec
    capabilities = process.get("capabilities")
    version = document.get("ociVersion")
    flat = isinstance(version, str) and uses_flat_capabilities(version)
    if capabilities is None:
        return False
    if flat:
        if not _is_string_list(capabilities):
            raise SpecError(
                "could not decode Process.Capabilities in OCI spec: expected an array of strings for "
                f"ociVersion {escape(str(version))}, got {json_kind(capabilities)}"
            )
        assert isinstance(capabilities, list)  # noqa: S101 - checked above
        return CAP_SYS_ADMIN in capabilities
    if not isinstance(capabilities, dict):
        raise SpecError(
            "could not decode Process.Capabilities in OCI spec: "
            f"expected an object, got {json_kind(capabilities)}"
        )
    for name in _CAP_SETS:
        value = capabilities.get(name)
        if value is not None and not _is_string_list(value):
            raise SpecError(
                f"could not decode Process.Capabilities in OCI spec: {name} must be an array of strings"
            )
    bounding = capabilities.get("bounding") or []
    assert isinstance(bounding, list)  # noqa: S101 - checked above
    return CAP_SYS_ADMIN in bounding


def uses_flat_capabilities(version: str) -> bool:
    """Tell whether ``1.0.0-rc1 <= version < 1.0.0-rc5`` (Go x/mod semver; invalid sorts lowest)."""
    parsed = parse_semver(version)
    return parsed is not None and compare_semver(parsed, _RC1) >= 0 and compare_semver(parsed, _RC5) < 0


def parse_semver(version: str) -> tuple[tuple[int, int, int], tuple[str, ...]] | None:
    """Parse ``MAJOR[.MINOR[.PATCH]][-PRE][+BUILD]`` as golang.org/x/mod/semver does; None if invalid."""
    core, _, build = version.partition("+")
    if "+" in version and not _valid_identifiers(build, numeric_rule=False):
        return None
    core, dash, pre = core.partition("-")
    parts = core.split(".")
    if len(parts) > 3 or not all(_is_number(p) for p in parts):
        return None
    if len(parts) < 3 and (dash or "+" in version):
        return None
    if dash and not _valid_identifiers(pre, numeric_rule=True):
        return None
    numbers = [int(p) for p in parts] + [0] * (3 - len(parts))
    return (numbers[0], numbers[1], numbers[2]), tuple(pre.split(".")) if dash else ()


def compare_semver(
    a: tuple[tuple[int, int, int], tuple[str, ...]], b: tuple[tuple[int, int, int], tuple[str, ...]]
) -> int:
    """Compare two parsed versions by semver precedence: -1, 0 or 1."""
    if a[0] != b[0]:
        return -1 if a[0] < b[0] else 1
    pre_a, pre_b = a[1], b[1]
    if not pre_a or not pre_b:
        return (not pre_a) - (not pre_b)
    for x, y in zip(pre_a, pre_b, strict=False):
        if x == y:
            continue
        if x.isdigit() and y.isdigit():
            return -1 if int(x) < int(y) else 1
        if x.isdigit() != y.isdigit():
            return -1 if x.isdigit() else 1
        return -1 if x < y else 1
    return (len(pre_a) > len(pre_b)) - (len(pre_a) < len(pre_b))


def _is_number(text: str) -> bool:
    """A semver number: ASCII digits without a leading zero."""
    return text.isascii() and text.isdigit() and (text == "0" or not text.startswith("0"))


def _valid_identifiers(text: str, *, numeric_rule: bool) -> bool:
    """Dot-separated ``[0-9A-Za-z-]+`` identifiers; numeric ones without leading zeros when asked."""
    for ident in text.split("."):
        if not ident or not ident.isascii() or not all(c.isalnum() or c == "-" for c in ident):
            return False
        if numeric_rule and ident.isdigit() and not _is_number(ident):
            return False
    return True


def _is_string_list(value: object) -> bool:
    """Tell whether a JSON value is an array of strings."""
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


_RC1 = ((1, 0, 0), ("rc1",))
_RC5 = ((1, 0, 0), ("rc5",))

"""NVIDIA_DRIVER_CAPABILITIES: which driver capabilities a GPU container gets (section 10.1)."""

from hook.pipeline.devices import split_tokens
from hook.util import envvars
from hook.util.errors import RequestError
from hook.util.safetext import escape

DEFAULT_CAPABILITIES = frozenset({"compute", "utility"})


def resolve_capabilities(env: dict[str, str], supported: frozenset[str], *, legacy: bool) -> list[str]:
    """Return the capabilities to pass, sorted; an unknown (or unsupported) name is refused.

    Unset on a legacy image: everything supported. ``all``: everything supported. Unset or empty on a
    modern image: compute and utility (as far as supported). A value with no items (``" ,"``): none.
    """
    name = envvars.NVIDIA_DRIVER_CAPABILITIES
    raw = env.get(name)
    if raw is None and legacy:
        return sorted(supported)
    if raw:
        requested = set(split_tokens(raw))
        if "all" in requested:
            return sorted(supported)
        if not requested <= supported:
            raise RequestError(
                f"unsupported capabilities found in '{escape(','.join(sorted(requested)))}' "
                f"(allowed '{','.join(sorted(requested & supported))}')",
                variable=name,
                redacted=f"{name} names capabilities outside supported-driver-capabilities",
            )
        return sorted(requested)
    return sorted(supported & DEFAULT_CAPABILITIES)

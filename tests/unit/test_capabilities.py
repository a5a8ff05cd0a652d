"""NVIDIA_DRIVER_CAPABILITIES: defaults, ``all``, the supported set and unknown names."""

from __future__ import annotations

import re

import pytest

from hook.pipeline.config import ALL_CAPABILITIES
from hook.pipeline.request import resolve_capabilities
from hook.util.errors import RequestError

ALL = frozenset(ALL_CAPABILITIES)
UPSTREAM_SUPPORTED = frozenset({"compute", "display", "utility", "video"})


def caps(value: str | None) -> dict[str, str]:
    """An env with NVIDIA_DRIVER_CAPABILITIES set to value (None: unset)."""
    return {} if value is None else {"NVIDIA_DRIVER_CAPABILITIES": value}


@pytest.mark.parametrize(
    ("value", "legacy", "supported", "expected"),
    [
        # upstream's TestGetDriverCapabilities (supported = compute,display,utility,video)
        pytest.param("display,video", True, UPSTREAM_SUPPORTED, ["display", "video"], id="legacy-listed"),
        pytest.param("all", True, UPSTREAM_SUPPORTED, sorted(UPSTREAM_SUPPORTED), id="legacy-all"),
        pytest.param("", True, UPSTREAM_SUPPORTED, ["compute", "utility"], id="legacy-empty"),
        pytest.param(None, True, UPSTREAM_SUPPORTED, sorted(UPSTREAM_SUPPORTED), id="legacy-unset"),
        pytest.param("display,video", False, UPSTREAM_SUPPORTED, ["display", "video"], id="modern-listed"),
        pytest.param(None, False, UPSTREAM_SUPPORTED, ["compute", "utility"], id="modern-unset"),
        pytest.param("all", False, UPSTREAM_SUPPORTED, sorted(UPSTREAM_SUPPORTED), id="modern-all"),
        pytest.param("", False, UPSTREAM_SUPPORTED, ["compute", "utility"], id="modern-empty"),
        pytest.param(None, False, frozenset({"compute"}), ["compute"], id="modern-unset-supported-compute"),
        # upstream's DriverCapabilities list/intersection and the behaviour description
        pytest.param(" ,", False, ALL, [], id="no-items-means-none"),
        pytest.param(",", True, ALL, [], id="comma-only-on-legacy"),
        pytest.param("  ", False, ALL, [], id="spaces-only"),
        pytest.param("all,foo", False, ALL, list(ALL_CAPABILITIES), id="all-skips-validation"),
        pytest.param("utility, compute ,", False, ALL, ["compute", "utility"], id="trimmed-and-sorted"),
        pytest.param("video,video", False, ALL, ["video"], id="duplicates"),
        pytest.param("all", False, frozenset(), [], id="all-of-nothing"),
        pytest.param(None, False, frozenset(), [], id="default-of-nothing"),
        pytest.param(
            "video,compat32,ngx,graphics", False, ALL, ["compat32", "graphics", "ngx", "video"], id="sorted"
        ),
    ],
)
def test_resolve_capabilities(
    value: str | None, legacy: bool, supported: frozenset[str], expected: list[str]
) -> None:
    """Capabilities are the request bounded by the supported set, sorted, with upstream's defaults."""
    assert resolve_capabilities(caps(value), supported, legacy=legacy) == expected


@pytest.mark.parametrize(
    ("value", "supported", "found", "allowed"),
    [
        pytest.param(
            "compute,utility",
            frozenset({"not-compute", "not-utility"}),
            "compute,utility",
            "",
            id="upstream-row",
        ),
        pytest.param("compute,foo", ALL, "compute,foo", "compute", id="unknown-name"),
        pytest.param("none", ALL, "none", "", id="none-not-special"),
        pytest.param("COMPUTE", ALL, "COMPUTE", "", id="case-sensitive"),
        pytest.param(
            "video,compute", frozenset({"compute"}), "compute,video", "compute", id="unsupported-known"
        ),
    ],
)
def test_unsupported_capabilities(value: str, supported: frozenset[str], found: str, allowed: str) -> None:
    """A capability outside the supported set is refused with upstream's message (sorted lists)."""
    message = f"unsupported capabilities found in '{found}' (allowed '{allowed}')"
    with pytest.raises(RequestError, match=rf"^{re.escape(message)}$"):
        resolve_capabilities(caps(value), supported, legacy=False)

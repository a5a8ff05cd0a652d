"""Privilege: CAP_SYS_ADMIN in the bounding set, or in the flat list of 1.0.0-rc1..rc4 specs."""

from __future__ import annotations

import re

import pytest

from hook.pipeline.bundle import parse_semver, resolve_privileged, uses_flat_capabilities
from hook.util.errors import SpecError

PREFIX = re.escape("could not decode Process.Capabilities in OCI spec: ")


def spec(version: str | None, capabilities: object = None) -> dict[str, object]:
    """A checked spec with the given ociVersion and process.capabilities (None: absent)."""
    process: dict[str, object] = {"args": ["true"]}
    if capabilities is not None:
        process["capabilities"] = capabilities
    document: dict[str, object] = {"process": process, "root": {"path": "rootfs"}}
    if version is not None:
        document["ociVersion"] = version
    return document


@pytest.mark.parametrize(
    ("version", "capabilities", "privileged"),
    [
        # upstream's TestIsPrivileged
        pytest.param("1.0.0", {"bounding": ["CAP_SYS_ADMIN"]}, True, id="bounding-sys-admin"),
        pytest.param("1.0.0", {"bounding": ["CAP_SYS_OTHER"]}, False, id="bounding-other"),
        pytest.param("1.0.0", None, False, id="no-capabilities"),
        pytest.param("1.0.0-rc2-dev", ["CAP_SYS_ADMIN"], True, id="rc2-list-sys-admin"),
        pytest.param("1.0.0-rc2-dev", ["CAP_SYS_OTHER"], False, id="rc2-list-other"),
        pytest.param("1.0.0-rc2-dev", None, False, id="rc2-no-capabilities"),
        # only the bounding set counts
        pytest.param(
            "1.0.2",
            {"effective": ["CAP_SYS_ADMIN"], "permitted": ["CAP_SYS_ADMIN"], "ambient": ["CAP_SYS_ADMIN"]},
            False,
            id="sys-admin-outside-bounding",
        ),
        pytest.param("1.0.2", {}, False, id="empty-object"),
        pytest.param("1.0.2", {"bounding": None}, False, id="null-bounding"),
        pytest.param("1.0.2", {"bounding": ["cap_sys_admin"]}, False, id="case-sensitive"),
        pytest.param("1.2.0", {"bounding": ["CAP_CHOWN", "CAP_SYS_ADMIN"]}, True, id="newer-spec"),
        pytest.param("junk", {"bounding": ["CAP_SYS_ADMIN"]}, True, id="unparsable-version-uses-object"),
        pytest.param("1.0.0-rc1", ["CAP_SYS_ADMIN"], True, id="rc1-is-flat"),
        pytest.param("1.0.0-rc4", ["CAP_SYS_ADMIN"], True, id="rc4-is-flat"),
        pytest.param("1.0.0-rc5", {"bounding": ["CAP_SYS_ADMIN"]}, True, id="rc5-is-object"),
        pytest.param("1.0.0-rc10", ["CAP_SYS_ADMIN"], True, id="rc10-sorts-before-rc5-so-flat"),
    ],
)
def test_resolve_privileged(version: str, capabilities: object, privileged: bool) -> None:
    """A container is privileged exactly when CAP_SYS_ADMIN is in the set upstream consults."""
    assert resolve_privileged(spec(version, capabilities)) is privileged


@pytest.mark.parametrize(
    ("version", "capabilities", "reason"),
    [
        pytest.param(
            "1.0.2", ["CAP_SYS_ADMIN"], "expected an object, got an array", id="list-on-modern-spec"
        ),
        pytest.param(
            "1.0.2", "CAP_SYS_ADMIN", "expected an object, got a string", id="string-on-modern-spec"
        ),
        pytest.param(
            "1.0.2",
            {"bounding": "CAP_SYS_ADMIN"},
            "bounding must be an array of strings",
            id="bounding-string",
        ),
        pytest.param("1.0.2", {"ambient": [1]}, "ambient must be an array of strings", id="ambient-ints"),
        pytest.param(
            "1.0.0-rc3",
            {"bounding": ["CAP_SYS_ADMIN"]},
            "expected an array of strings for ociVersion 1.0.0-rc3, got an object",
            id="object-on-rc-spec",
        ),
        pytest.param(
            "1.0.0-rc3",
            [1],
            "expected an array of strings for ociVersion 1.0.0-rc3, got an array",
            id="rc-list-ints",
        ),
    ],
)
def test_wrong_capabilities_shape(version: str, capabilities: object, reason: str) -> None:
    """A capabilities block of the wrong shape for the spec version is refused."""
    with pytest.raises(SpecError, match=rf"^{PREFIX}{re.escape(reason)}$"):
        resolve_privileged(spec(version, capabilities))


@pytest.mark.parametrize(
    ("version", "flat"),
    [
        pytest.param("1.0.0-rc1", True, id="rc1"),
        pytest.param("1.0.0-rc2-dev", True, id="rc2-dev"),
        pytest.param("1.0.0-rc4.1", True, id="rc4-dot-1"),
        pytest.param("1.0.0-rc5", False, id="rc5"),
        pytest.param("1.0.0-rc0", False, id="rc0"),
        pytest.param("1.0.0", False, id="release"),
        pytest.param("0.6.0", False, id="older"),
        pytest.param("1.0.0-rc2+build", True, id="build-metadata"),
        pytest.param("1.0-rc2", False, id="short-with-prerelease-invalid"),
        pytest.param("v1.0.0-rc2", False, id="v-prefix-invalid"),
        pytest.param("01.0.0-rc2", False, id="leading-zero-invalid"),
        pytest.param("", False, id="empty"),
    ],
)
def test_uses_flat_capabilities(version: str, flat: bool) -> None:
    """Only versions in [1.0.0-rc1, 1.0.0-rc5) by semver precedence use the flat list."""
    assert uses_flat_capabilities(version) is flat


@pytest.mark.parametrize(
    ("version", "parsed"),
    [
        pytest.param("1", ((1, 0, 0), ()), id="major-only"),
        pytest.param("1.2", ((1, 2, 0), ()), id="major-minor"),
        pytest.param("1.2.3-a.1", ((1, 2, 3), ("a", "1")), id="prerelease"),
        pytest.param("1.2.3-01", None, id="numeric-prerelease-leading-zero"),
        pytest.param("1.2.3-", None, id="empty-prerelease"),
        pytest.param("1.2.3+", None, id="empty-build"),
        pytest.param("1.2.3.4", None, id="four-parts"),
    ],
)
def test_parse_semver(version: str, parsed: object) -> None:
    """Versions are parsed with golang.org/x/mod/semver's rules (without the ``v``)."""
    assert parse_semver(version) == parsed

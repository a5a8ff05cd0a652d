"""NVIDIA_REQUIRE_*, NVIDIA_DISABLE_REQUIRE and the legacy ``cuda>=X.Y`` requirement."""

from __future__ import annotations

import re

import pytest

from hook.pipeline.requirements import (
    parse_go_bool,
    parse_major_minor,
    requirements_disabled,
    resolve_requirements,
)
from hook.util.errors import RequestError


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        # upstream's TestParseMajorMinorVersionValid
        pytest.param("0", "0.0", id="zero"),
        pytest.param("8", "8.0", id="major-only"),
        pytest.param("7.5", "7.5", id="major-minor"),
        pytest.param("9.0.116", "9.0", id="patch-dropped"),
        pytest.param("4294967295.4294967295.4294967295", "4294967295.4294967295", id="uint32-max"),
        pytest.param("v11.6", "11.6", id="v-prefix"),
        # upstream main's lenient (Masterminds) parser
        pytest.param("v11", "11.0", id="v-major-only"),
        pytest.param("09.1", "9.1", id="leading-zero"),
        pytest.param("9.01", "9.1", id="leading-zero-minor"),
        pytest.param("9.0-rc1", "9.0", id="prerelease"),
        pytest.param("9.0+build", "9.0", id="build"),
        pytest.param("9.0.176-rc.1+b.2", "9.0", id="prerelease-and-build"),
    ],
)
def test_parse_major_minor_valid(version: str, expected: str) -> None:
    """Valid CUDA versions give MAJOR.MINOR."""
    assert parse_major_minor(version) == expected


@pytest.mark.parametrize(
    "version",
    [
        # upstream's TestParseMajorMinorVersionInvalid
        pytest.param("foo", id="foo"),
        pytest.param("foo.5.10", id="foo-5-10"),
        pytest.param("9.0.116.50", id="four-parts"),
        pytest.param("9.0.116foo", id="trailing-letters"),
        pytest.param("7.foo", id="minor-letters"),
        pytest.param("9.0.bar", id="patch-letters"),
        pytest.param("9.0.116.", id="trailing-dot"),
        pytest.param("9..0", id="empty-minor"),
        pytest.param("9.", id="dot-only"),
        pytest.param(".5.10", id="empty-major"),
        pytest.param("-9", id="leading-minus"),
        pytest.param("+9", id="leading-plus"),
        pytest.param("-9.1.116", id="minus-three"),
        pytest.param("-9.-1.-116", id="all-negative"),
        # the behaviour description's rejections
        pytest.param("V9.0", id="capital-v"),
        pytest.param(" 9.0", id="leading-space"),
        pytest.param("legacy", id="word"),
        pytest.param("", id="empty"),
        pytest.param("9.0-", id="empty-prerelease"),
        pytest.param("9.0+", id="empty-build"),
        pytest.param("9.0-rc_1", id="bad-prerelease-char"),
        pytest.param("\u0669.0", id="non-ascii-digit"),
    ],
)
def test_parse_major_minor_invalid(version: str) -> None:
    """Invalid versions are refused as an invalid semantic version."""
    with pytest.raises(ValueError, match=r"^invalid version string: invalid semantic version$"):
        parse_major_minor(version)


@pytest.mark.parametrize(
    ("version", "message"),
    [
        pytest.param("9.4294967296", "invalid minor version", id="upstream-minor-overflow"),
        pytest.param("4294967296.0", "invalid major version", id="major-overflow"),
    ],
)
def test_parse_major_minor_overflow(version: str, message: str) -> None:
    """A major or minor above 2^32-1 names which one."""
    with pytest.raises(ValueError, match=rf"^{message}$"):
        parse_major_minor(version)


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        *(pytest.param(v, True, id=f"true-{v}") for v in ("1", "t", "T", "TRUE", "true", "True")),
        *(pytest.param(v, False, id=f"false-{v}") for v in ("0", "f", "F", "FALSE", "false", "False")),
        *(pytest.param(v, None, id=f"junk-{v or 'empty'}") for v in ("yes", "on", "tRUE", " true", "")),
    ],
)
def test_parse_go_bool(value: str, parsed: bool | None) -> None:
    """Booleans are spelled as Go's strconv.ParseBool accepts them."""
    assert parse_go_bool(value) is parsed


@pytest.mark.parametrize(
    ("value", "disabled"),
    [
        pytest.param(None, False, id="unset"),
        pytest.param("true", True, id="true"),
        pytest.param("1", True, id="one"),
        pytest.param("T", True, id="t"),
        pytest.param("yes", False, id="yes-is-false"),
        pytest.param("false", False, id="false"),
        pytest.param("junk", False, id="junk"),
    ],
)
def test_requirements_disabled(value: str | None, disabled: bool) -> None:
    """NVIDIA_DISABLE_REQUIRE disables requirements only for a Go-true value."""
    env = {} if value is None else {"NVIDIA_DISABLE_REQUIRE": value}
    assert requirements_disabled(env) is disabled


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        # upstream's TestGetRequirements (order-insensitive there; ours is the env order)
        pytest.param({"NVIDIA_REQUIRE_JETPACK": "csv-mounts=all"}, [], id="jetpack-ignored"),
        pytest.param(
            {"NVIDIA_REQUIRE_JETPACK_HOST_MOUNTS": "base-only"}, [], id="jetpack-host-mounts-ignored"
        ),
        pytest.param({"NVIDIA_REQUIRE_CUDA": "cuda>=11.6"}, ["cuda>=11.6"], id="single"),
        pytest.param(
            {"NVIDIA_REQUIRE_CUDA": "cuda>=11.6", "NVIDIA_REQUIRE_BRAND": "brand=tesla"},
            ["cuda>=11.6", "brand=tesla"],
            id="concatenated",
        ),
        pytest.param({"CUDA_VERSION": "11.6"}, ["cuda>=11.6"], id="legacy"),
        pytest.param(
            {"CUDA_VERSION": "11.6", "NVIDIA_REQUIRE_BRAND": "brand=tesla"},
            ["brand=tesla", "cuda>=11.6"],
            id="legacy-with-extra-cuda-last",
        ),
        pytest.param(
            {
                "NVIDIA_REQUIRE_CUDA": "cuda>=11.6",
                "NVIDIA_REQUIRE_BRAND": "brand=tesla",
                "NVIDIA_DISABLE_REQUIRE": "true",
            },
            [],
            id="disable-require-modern",
        ),
        pytest.param(
            {"CUDA_VERSION": "11.6", "NVIDIA_REQUIRE_BRAND": "brand=tesla", "NVIDIA_DISABLE_REQUIRE": "true"},
            [],
            id="disable-require-legacy",
        ),
        # the rest of the behaviour description
        pytest.param(
            {"CUDA_VERSION": "junk", "NVIDIA_DISABLE_REQUIRE": "1"}, [], id="disabled-version-not-parsed"
        ),
        pytest.param(
            {"NVIDIA_REQUIRE_B": "b", "NVIDIA_DISABLE_REQUIRE": "yes", "NVIDIA_REQUIRE_A": "a"},
            ["b", "a"],
            id="yes-does-not-disable-env-order",
        ),
        pytest.param(
            {"NVIDIA_REQUIRE_": "x", "NVIDIA_REQUIRE_E": ""}, ["x", ""], id="bare-prefix-and-empty-value"
        ),
        pytest.param({"NVIDIA_REQUIRE_X": " a b "}, [" a b "], id="value-verbatim"),
        pytest.param({"NVIDIA_REQUIRE_JETPACKX": "j"}, [], id="jetpack-prefix-match"),
        pytest.param({"nvidia_require_x": "x", "NVIDIA_REQUIREX": "y"}, [], id="prefix-exact-case"),
    ],
)
def test_resolve_requirements(env: dict[str, str], expected: list[str]) -> None:
    """Every NVIDIA_REQUIRE_* value but JETPACK's, in env order, then a legacy image's cuda>=X.Y."""
    from hook.pipeline.request import is_legacy_image

    assert resolve_requirements(env, legacy=is_legacy_image(env)) == expected


@pytest.mark.parametrize(
    ("version", "reason"),
    [
        pytest.param("legacy", "invalid version string: invalid semantic version", id="word"),
        pytest.param("9.4294967296", "invalid minor version", id="minor-overflow"),
    ],
)
def test_invalid_cuda_version_is_refused(version: str, reason: str) -> None:
    """A legacy image with an unparsable CUDA_VERSION is refused with upstream main's message."""
    message = f"failed to get requirements failed to get version: invalid CUDA version {version}: {reason}"
    with pytest.raises(RequestError, match=rf"^{re.escape(message)}$"):
        resolve_requirements({"CUDA_VERSION": version}, legacy=True)

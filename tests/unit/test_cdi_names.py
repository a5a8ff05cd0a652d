"""Fully-qualified CDI device names (``vendor/class=name``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hook.cdi.names import class_error, device_name_error, is_qualified_name, vendor_error


@pytest.mark.parametrize(
    ("device", "qualified"),
    [
        pytest.param("nvidia.com/gpu=gpu0", True, id="simple"),
        pytest.param("nvidia.com/gpu=all", True, id="all"),
        pytest.param("nvidia.com/gpu=GPU-abc:1", True, id="colon-in-name"),
        pytest.param("vendor_x-1.y/class_2-z.9=a.b_c-d:e", True, id="all-middle-chars"),
        pytest.param("nvidia.com/gpu=0", True, id="one-char-name"),
        pytest.param("a/gpu=0", True, id="one-char-vendor-valid-here"),
        pytest.param("nvidia.com/g=0", True, id="one-char-class-valid-here"),
        pytest.param("nvidia.com/gpu=a=b", False, id="equals-in-name"),
        pytest.param("0", False, id="index"),
        pytest.param("GPU-0d0e0a6b-0000-0000-0000-000000000000", False, id="uuid"),
        pytest.param("/nvidia.com/gpu=0", False, id="leading-slash"),
        pytest.param("nvidia.com/gpu", False, id="no-equals"),
        pytest.param("nvidia.com/gpu=", False, id="empty-name"),
        pytest.param("=0", False, id="empty-kind"),
        pytest.param("nvidia.com=0", False, id="no-class"),
        pytest.param("/gpu=0", False, id="empty-vendor"),
        pytest.param("nvidia.com/=0", False, id="empty-class"),
        pytest.param("nvidia.com/gpu/x=0", False, id="slash-in-class"),
        pytest.param("1nvidia.com/gpu=0", False, id="vendor-starts-with-digit"),
        pytest.param("nvidia.com-/gpu=0", False, id="vendor-ends-with-dash"),
        pytest.param("nvidia.com/gpu./=0", False, id="class-ends-with-dot"),
        pytest.param("nvidia.com/gpu=-0", False, id="name-starts-with-dash"),
        pytest.param("nvidia.com/gpu=0:", False, id="name-ends-with-colon"),
        pytest.param("nvidia.com/gpu=0 1", False, id="space-in-name"),
        pytest.param("nvidiä.com/gpu=0", False, id="non-ascii-vendor"),
        pytest.param("nvidia:com/gpu=0", False, id="colon-in-vendor"),
    ],
)
def test_is_qualified_name(device: str, qualified: bool) -> None:
    """CDI names follow the CDI parser's character rules; one-character vendors and classes are valid."""
    assert is_qualified_name(device) is qualified


@pytest.mark.parametrize(
    ("check", "text", "reason", "hidden"),
    [
        pytest.param(vendor_error, "", "invalid vendor. empty name", None, id="vendor-empty"),
        pytest.param(
            vendor_error,
            "1a",
            'invalid vendor. "1a", should start with letter',
            "invalid vendor. should start with letter",
            id="vendor-first",
        ),
        pytest.param(
            vendor_error,
            "a\x1bb",
            "invalid vendor. invalid character '\\x1b' in name \"a\\x1bb\"",
            "invalid vendor. invalid character at index 1 in name",
            id="vendor-between",
        ),
        pytest.param(
            class_error,
            "a-",
            'invalid class. "a-", should end with a letter or digit',
            "invalid class. should end with a letter or digit",
            id="class-last",
        ),
        pytest.param(
            class_error,
            "a:b",
            "invalid class. invalid character ':' in name \"a:b\"",
            "invalid class. invalid character at index 1 in name",
            id="class-no-colon",
        ),
        pytest.param(device_name_error, "", "invalid (empty) device name", None, id="name-empty"),
        pytest.param(
            device_name_error,
            "-a",
            'invalid device name "-a", should start with a letter or digit',
            "invalid device name, should start with a letter or digit",
            id="name-first",
        ),
        pytest.param(
            device_name_error,
            "ab/c",
            "invalid character '/' in device name \"ab/c\"",
            "invalid character at index 2 in device name",
            id="name-between",
        ),
        pytest.param(
            device_name_error,
            "a.",
            'invalid name "a.", should end with a letter or digit',
            "invalid device name, should end with a letter or digit",
            id="name-last",
        ),
        pytest.param(device_name_error, "GPU-abc:1", None, None, id="name-valid"),
        pytest.param(vendor_error, "nvidia.com", None, None, id="vendor-valid"),
    ],
)
def test_each_rule_in_the_references_words(
    check: Callable[..., str | None], text: str, reason: str | None, hidden: str | None
) -> None:
    """Vendor, class and device name: the first rule broken, in container-device-interface's words with the
    text quoted and the character at fault escaped when the caller reveals it (a container's request, ``cdi
    validate``); otherwise (a spec read on a container's start) the rule and the character's index only. A
    device name that starts wrong says "device name" (the reference says "invalid class")."""
    assert check(text, reveal=True) == reason
    assert check(text) == (reason if hidden is None else hidden)

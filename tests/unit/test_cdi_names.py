"""Fully-qualified CDI device names (``vendor/class=name``)."""

from __future__ import annotations

import pytest

from hook.cdi.names import is_qualified_name


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

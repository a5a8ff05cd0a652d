"""The OCI state on stdin: bundle (with the pre-1.0 bundlePath), pid, annotations, and decoding errors."""

from __future__ import annotations

import io
import re

import pytest

from hook.errors import StateError
from hook.state import load_state, parse_state

PREFIX = re.escape("could not decode container state: ")


@pytest.mark.parametrize(
    ("data", "bundle", "pid"),
    [
        pytest.param(b'{"pid": 42, "bundle": "/b"}', "/b", 42, id="modern"),
        pytest.param(b'{"pid": 42, "bundlePath": "/old"}', "/old", 42, id="pre-1-0-bundle-path"),
        pytest.param(b'{"bundle": "/b", "bundlePath": "/old"}', "/b", 0, id="bundle-beats-bundle-path"),
        pytest.param(b'{"bundle": "", "bundlePath": "/old"}', "/old", 0, id="empty-bundle-falls-back"),
        pytest.param(b"{}", "", 0, id="neither-bundle-nor-pid"),
        pytest.param(b'{"pid": null, "bundle": null}', "", 0, id="nulls"),
        pytest.param(b'{"pid": -1, "bundle": "/b"}', "/b", -1, id="negative-pid"),
        pytest.param(b'  \n{"pid": 1, "bundle": "/b"} trailing junk', "/b", 1, id="trailing-bytes-ignored"),
        pytest.param(
            b'{"ociVersion": 5, "id": [], "status": {}, "pid": 3, "bundle": "/b"}',
            "/b",
            3,
            id="other-keys-ignored",
        ),
    ],
)
def test_parse_state(data: bytes, bundle: str, pid: int) -> None:
    """One JSON object is decoded; only bundle (or bundlePath) and pid matter."""
    state = parse_state(data)
    assert (state.bundle, state.pid, state.annotations) == (bundle, pid, {})


def test_annotations_are_kept() -> None:
    """String annotations of the state are available to later stages."""
    assert parse_state(b'{"annotations": {"a": "b"}}').annotations == {"a": "b"}


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(b"", "Expecting value at line 1 column 1", id="empty"),
        pytest.param(b"not json", "Expecting value at line 1 column 1", id="not-json"),
        pytest.param(
            b'{"pid": 1,\n', "Expecting property name enclosed in double quotes at line 2 column 1", id="cut"
        ),
        pytest.param(b"\xff{}", "not valid UTF-8 at byte 0", id="not-utf8"),
        pytest.param(b"[1]", "the state must be a JSON object", id="array"),
        pytest.param(b'{"pid": "42"}', "pid must be an integer, got a string", id="pid-string"),
        pytest.param(b'{"pid": 4.5}', "pid must be an integer, got a number", id="pid-float"),
        pytest.param(b'{"pid": true}', "pid must be an integer, got a boolean", id="pid-bool"),
        pytest.param(b'{"bundle": 1}', "bundle must be a string, got a number", id="bundle-number"),
        pytest.param(
            b'{"annotations": {"a": 1}}', "annotations must map strings to strings", id="annotation-int"
        ),
        pytest.param(
            b'{"annotations": ["a"]}', "annotations must map strings to strings", id="annotations-list"
        ),
    ],
)
def test_parse_state_refuses(data: bytes, reason: str) -> None:
    """A state that cannot be decoded is one line naming position or field, never quoting the input."""
    with pytest.raises(StateError, match=rf"^{PREFIX}{re.escape(reason)}$"):
        parse_state(data)


def test_load_state_reads_stream() -> None:
    """load_state decodes what the runtime wrote on stdin."""
    assert load_state(io.BytesIO(b'{"pid": 9, "bundle": "/b"}')).pid == 9


def test_load_state_any_size() -> None:
    """A state larger than the old 4 MiB bound is decoded: it carries a large spec's annotations."""
    data = b'{"pid": 1, "bundle": "/b", "annotations": {"x": "' + b"a" * (20 * 1024 * 1024) + b'"}}'
    assert load_state(io.BytesIO(data)).bundle == "/b"

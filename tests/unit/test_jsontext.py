"""hook.jsontext decodes exactly as json.loads does, without importing json on the success path."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hook.jsontext import decode, decode_prefix


def outcome(function: object, text: str) -> tuple[str, str]:
    """Return ('ok', repr(value)) or ('error', message) for a decoder."""
    assert callable(function)
    try:
        return "ok", repr(function(text))
    except ValueError as err:
        return "error", str(err)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('{"a": [1, 2.5, "x", null, true, false]}', id="object"),
        pytest.param(" \t\n[1]\r\n", id="whitespace"),
        pytest.param("", id="empty"),
        pytest.param("  ", id="blank"),
        pytest.param('{"a":1} x', id="extra-data"),
        pytest.param("{x}", id="bad-key"),
        pytest.param('{"a":', id="truncated"),
        pytest.param('"\x01"', id="control-character"),
        pytest.param("[NaN, Infinity, -Infinity]", id="constants"),
        pytest.param('{"a": 1, "a": 2}', id="duplicate-key"),
        pytest.param("\ufeff{}", id="byte-order-mark"),
    ],
)
def test_same_as_json_loads(text: str) -> None:
    """Values and error messages are json.loads's."""
    assert outcome(decode, text) == outcome(json.loads, text)


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.text(max_size=40),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(),
            lambda c: st.lists(c) | st.dictionaries(st.text(), c),
            max_leaves=10,
        ).map(json.dumps),
    )
)
def test_random_text_agrees_with_json(text: str) -> None:
    """For random text and random JSON documents, decode and json.loads agree."""
    assert outcome(decode, text) == outcome(json.loads, text)


def test_prefix_ignores_trailing_data() -> None:
    """decode_prefix reads one value and says where it ended (the state on stdin may have trailing bytes)."""
    assert decode_prefix(' {"pid": 1} trailing') == ({"pid": 1}, 11)


def test_success_path_does_not_import_json() -> None:
    """Decoding a good document loads neither json nor json.decoder (whose import compiles regexes)."""
    code = "import sys; from hook.jsontext import decode; decode('{\"a\": [1]}'); print(sorted(m for m in sys.modules if m.startswith('json')))"
    result = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout == "[]\n"


def test_error_path_in_a_fresh_interpreter() -> None:
    """Without json loaded, an invalid document still gets json's own message (not a SystemError)."""
    code = (
        "from hook.jsontext import decode\ntry:\n    decode('{x}')\nexcept ValueError as err:\n    print(err)"
    )
    result = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout == "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)\n"

"""hook.util.jsontext decodes as json.loads and encodes as json.dumps(compact, UTF-8) do, without importing json."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hook.util.jsontext import decode, decode_prefix, encode


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
    code = "import sys; from hook.util.jsontext import decode; decode('{\"a\": [1]}'); print(sorted(m for m in sys.modules if m.startswith('json')))"
    result = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout == "[]\n"


def test_error_path_in_a_fresh_interpreter() -> None:
    """Without json loaded, an invalid document still gets json's own message (not a SystemError)."""
    code = "from hook.util.jsontext import decode\ntry:\n    decode('{x}')\nexcept ValueError as err:\n    print(err)"
    result = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout == "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)\n"


def dumps(value: object) -> str:
    """The reference: what config.json was written with before hook.util.jsontext.encode."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def encoded(function: object, value: object) -> tuple[str, str]:
    """Return ('ok', text) or (error type, message) for an encoder."""
    assert callable(function)
    try:
        return "ok", function(value)
    except (TypeError, ValueError, RecursionError) as err:
        return type(err).__name__, str(err)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),  # every code point, lone surrogates included (a \ud800 escape decodes to one)
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=25,
)


@settings(max_examples=600, deadline=None)
@given(JSON_VALUES)
def test_encode_is_byte_identical_to_json_dumps(value: object) -> None:
    """For random documents (any text, NaN, infinities, big integers, nesting), encode is json.dumps's text."""
    assert encoded(encode, value) == encoded(dumps, value)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.text(), JSON_VALUES, max_size=6).map(lambda d: json.dumps(d, ensure_ascii=True)))
def test_decoded_documents_encode_as_json_dumps(text: str) -> None:
    """What the hook rewrites is what it decoded: decode then encode equals json.loads then json.dumps."""
    assert encode(decode(text)).encode("utf-8", "surrogatepass") == dumps(json.loads(text)).encode(
        "utf-8", "surrogatepass"
    )


def make_circular() -> object:
    """A list that contains itself."""
    value: list[object] = []
    value.append(value)
    return value


@pytest.mark.parametrize(
    "value",
    [
        pytest.param('plain \u00e9 \n "', id="bare-string"),
        pytest.param({"a": {1, 2}}, id="not-serializable"),
        pytest.param({1: "int key", False: "bool key", None: "null key", 2.5: "float key"}, id="non-string-keys"),
        pytest.param({(1,): "tuple key"}, id="bad-key"),
        pytest.param((1, [2]), id="tuple"),
        pytest.param(make_circular(), id="circular"),
    ],
)  # fmt: skip
def test_encode_edge_cases_as_json_dumps(value: object) -> None:
    """Bare strings, key coercion and the error cases give json.dumps's result or error message."""
    assert encoded(encode, value) == encoded(dumps, value)


def test_encode_does_not_import_json() -> None:
    """Encoding a document loads no json module (json.encoder would import re)."""
    code = "import sys; from hook.util.jsontext import encode; encode({'a': [1, 'é']}); print(sorted(m for m in sys.modules if m.startswith(('json', 're'))))"
    result = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path[:0] = {sys.path!r}; {code}"], capture_output=True, text=True, check=True)  # fmt: skip
    assert result.stdout == "[]\n"

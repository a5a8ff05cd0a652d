"""The OCI state on stdin: bundle (with the pre-1.0 bundlePath), pid, annotations, and decoding errors."""

from __future__ import annotations

import io
import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import HOOK, MakeBundle, MakeConfig

from hook.pipeline.bundle import load_state, parse_state
from hook.util.errors import StateError

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
        pytest.param(b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "nested too deeply", id="nested"),
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


class ChunkedStream(io.RawIOBase):
    """A stream that hands out fixed chunks, one per read, then would block: reading past them fails."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)

    def readable(self) -> bool:
        return True

    def read1(self, size: int = -1) -> bytes:  # noqa: ARG002 - the size of a pipe read does not matter here
        """One chunk per call, as a pipe gives what the writer has written so far."""
        if not self.chunks:
            raise AssertionError("read past the first JSON value: a runtime keeping stdin open would hang it")
        return self.chunks.pop(0)


@pytest.mark.parametrize(
    "chunks",
    [
        pytest.param([b'{"pid": 9, "bundle": "/b"}'], id="one-write"),
        pytest.param([b'{"pid": 9, ', b'"bundle": "/b"}'], id="split-between-keys"),
        pytest.param([b'{"pid": 9, "bun', b'dle": "/b"}  '], id="split-in-a-string"),
        pytest.param([b'{"pid": 9, "bundle": "/\xc3', b'\xa9"}'], id="split-in-a-character"),
        pytest.param(
            [b'{"pid": 9, "annotations": {"a": "}"}', b', "bundle": "/b"}'], id="closed-inner-object"
        ),
        pytest.param([b'{"pid": 9, "bundle": "/b", "x": "}', b'"}'], id="bracket-in-a-string"),
        pytest.param([b'{"pid": 9, "bundle": "/b", "x": tr', b"ue}"], id="split-in-a-literal"),
        pytest.param([b'{"pid": 9, "bundle": "/b"}\n{"second": 1}'], id="a-second-value"),
    ],
)
def test_load_state_stops_after_the_first_value(chunks: list[bytes]) -> None:
    """The first JSON value is decoded as soon as it is whole; stdin is not read to its end (upstream's
    json.Decoder does the same)."""
    state = load_state(ChunkedStream(chunks))  # type: ignore[arg-type]
    assert state.pid == 9
    assert state.bundle.startswith("/")


def test_load_state_invalid_fails_without_waiting() -> None:
    """A value broken well before the end of what was written fails at once, without waiting for more."""
    with pytest.raises(
        StateError, match=r"^could not decode container state: Expecting value at line 1 column 9$"
    ):
        load_state(ChunkedStream([b'{"pid": x, "bundle": "/some/long/bundle/path"}']))  # type: ignore[arg-type]


def test_hook_does_not_wait_for_stdin_to_close(
    make_bundle: MakeBundle, make_config: MakeConfig, record_path: Path
) -> None:
    """The hook process, given its state by a writer that keeps stdin open (as a runtime may), decodes it
    and finishes: here a GPU container, so it reaches the (stand-in) cli."""
    bundle = make_bundle(["NVIDIA_VISIBLE_DEVICES=0"])
    with subprocess.Popen(
        [*HOOK, "-config", str(make_config()), "prestart"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=bundle,
        env={"PATH": "/usr/bin:/bin"},
    ) as proc:
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps({"pid": 4242, "bundle": str(bundle)}).encode())
            proc.stdin.flush()
            status = proc.wait(timeout=20)
        finally:
            proc.kill()
    assert status == 0
    assert json.loads(record_path.read_text())["argv"][-2:] == ["--pid=4242", str(bundle / "rootfs")]


def test_load_state_refuses_a_deep_nesting_in_one_line() -> None:
    """A state nested past the decoder's limit, read from a stream: the one-line refusal, not an internal
    error."""
    data = b'{"bundle": "/b", "a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    with pytest.raises(StateError, match=rf"^{PREFIX}nested too deeply$"):
        load_state(io.BytesIO(data))

"""The NRI plugin's protocol against exchanges recorded from a real containerd 2.x and CRI-O
(tests/fixtures/nri).

Each recording is the bytes the runtime and the plugin sent each other on the NRI socket during the first
test of tests/integration/test_nri_containerd.py or test_nri_crio.py (``GPU_ENV_HOOK_NRI_RECORD``), with the
env files it used. Here the runtime's side is replayed to a fresh session over a socket pair and the
plugin's answers must be the recorded ones: the same streams, statuses and lines (CRI-O's refusals name its
own annotation keys), the same adjustments. No containerd or CRI-O runs.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS

from hook.nri import nri_pb2, ttrpc_pb2, wire
from hook.nri.decide import Context
from hook.nri.plugin import EVENTS, Session
from hook.pipeline.config import parse_config

RECORDINGS = sorted((TESTS / "fixtures" / "nri").glob("*.json"))
HOOK: dict[str, object] = {"path": "/usr/bin/gpu-env-hook", "args": ["gpu-env-hook", "prestart"]}


def messages(chunks: list[dict[str, str]], side: str) -> list[wire.Message]:
    """The ttrpc messages one side sent, joined from its recorded chunks."""
    return wire.Demux().feed(
        b"".join(bytes.fromhex(chunk["hex"]) for chunk in chunks if chunk["from"] == side)
    )


def replay(recording: dict[str, Any]) -> tuple[list[wire.Message], list[str]]:
    """Feed the runtime's recorded bytes to a new session; return what the plugin sent, and its log."""
    runtime_bytes = b"".join(bytes.fromhex(c["hex"]) for c in recording["chunks"] if c["from"] == "runtime")
    env_dir = recording["env_dir"]
    settings = parse_config(f'[env-file]\ndirectories = ["{env_dir}"]\n', suse=False, engine="containerd")
    context = Context(settings=settings, config_text=None, hook=HOOK)
    plugin_end, runtime_end = socket.socketpair()
    sent = bytearray()

    def write() -> None:
        runtime_end.sendall(runtime_bytes)
        runtime_end.shutdown(socket.SHUT_WR)

    def read() -> None:
        while data := runtime_end.recv(1 << 16):
            sent.extend(data)

    threads = [threading.Thread(target=write), threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    log: list[str] = []
    session = Session(wire.Link(plugin_end), context, log.append)
    session.register()
    with pytest.raises(wire.ConnectionClosedError):
        session.serve()
    plugin_end.close()
    for thread in threads:
        thread.join(timeout=10)
    runtime_end.close()
    return wire.Demux().feed(bytes(sent)), log


def handoff(adjust: nri_pb2.ContainerAdjustment) -> list[str]:
    """The -env-file-merged argument of each hook the adjustment adds."""
    return [arg for hook in adjust.hooks.prestart for arg in hook.args if arg.startswith("-env-file-merged=")]


@pytest.fixture
def env_files(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """The recording, with its env files written back where they were (root-owned, as the rules want) for
    the test, and taken away after it (the directory too when the fixture made it)."""
    if os.geteuid() != 0:
        pytest.skip("env files must be owned by root")
    recording: dict[str, Any] = json.loads(Path(request.param).read_text())
    directory = Path(recording["env_dir"])
    made = not directory.exists()
    directory.mkdir(mode=0o755, exist_ok=True)
    for name, content in recording["env_files"].items():
        (directory / name).write_text(content)
        (directory / name).chmod(0o644)
    yield recording
    for name in recording["env_files"]:
        (directory / name).unlink(missing_ok=True)
    if made:
        directory.rmdir()


def test_there_is_a_recording_of_each_runtime() -> None:
    """A recorded exchange of containerd 2.x and one of CRI-O are in the repository."""
    assert {path.stem.rsplit("-", 1)[0] for path in RECORDINGS} == {"containerd", "cri-o"}


@pytest.mark.parametrize("env_files", RECORDINGS, ids=[path.stem for path in RECORDINGS], indirect=True)
def test_replayed_exchange_gets_the_recorded_answers(env_files: dict[str, Any]) -> None:
    """Every request containerd made is answered on its stream, with the recorded status and adjustment."""
    recording = env_files
    requests = {
        m.stream: ttrpc_pb2.Request.FromString(m.data)
        for m in messages(recording["chunks"], "runtime")
        if m.conn == wire.PLUGIN_CONN and m.kind == wire.REQUEST
    }
    methods = [request.method for request in requests.values()]
    assert methods[:2] == ["Configure", "Synchronize"]
    assert methods.count("CreateContainer") >= 3
    recorded = [m for m in messages(recording["chunks"], "plugin") if m.conn == wire.PLUGIN_CONN]
    replayed, _log = replay(recording)
    answers = [m for m in replayed if m.conn == wire.PLUGIN_CONN]
    assert [m.stream for m in answers] == [m.stream for m in recorded]
    for old, new in zip(recorded, answers, strict=True):
        old_response, new_response = (
            ttrpc_pb2.Response.FromString(old.data),
            ttrpc_pb2.Response.FromString(new.data),
        )
        assert (new_response.status.code, new_response.status.message) == (
            old_response.status.code,
            old_response.status.message,
        )
        method = requests[old.stream].method
        if method == "Configure":
            assert nri_pb2.ConfigureResponse.FromString(new_response.payload).events == EVENTS
        if method == "CreateContainer":
            old_adjust = nri_pb2.CreateContainerResponse.FromString(old_response.payload).adjust
            new_adjust = nri_pb2.CreateContainerResponse.FromString(new_response.payload).adjust
            assert list(new_adjust.env) == list(old_adjust.env)
            assert list(new_adjust.CDI_devices) == list(old_adjust.CDI_devices)
            assert handoff(new_adjust) == handoff(old_adjust)


@pytest.mark.parametrize("recording_path", RECORDINGS, ids=[path.stem for path in RECORDINGS])
def test_recorded_requests_carry_the_pod_identity(recording_path: Path) -> None:
    """The runtime's CreateContainer names the pod's uid, namespace and name and the container's name, and
    the runtime names itself at Configure."""
    recording = json.loads(recording_path.read_text())
    requests = [
        ttrpc_pb2.Request.FromString(m.data)
        for m in messages(recording["chunks"], "runtime")
        if m.conn == wire.PLUGIN_CONN and m.kind == wire.REQUEST
    ]
    configure = nri_pb2.ConfigureRequest.FromString(requests[0].payload)
    assert recording["runtime"] == f"{configure.runtime_name} {configure.runtime_version}"
    assert recording_path.stem.startswith(f"{configure.runtime_name}-")
    creates = [
        nri_pb2.CreateContainerRequest.FromString(r.payload)
        for r in requests
        if r.method == "CreateContainer"
    ]
    assert {(c.pod.uid, c.pod.namespace, c.container.name) for c in creates} >= {
        ("uid-plain", "default", "plain"),
        ("uid-gpu-a", "default", "gpu-a"),
    }


def test_synchronize_in_chunks_is_answered_chunk_by_chunk() -> None:
    """A Synchronize with ``more`` set is answered with ``more`` set (the plugin takes the next chunk)."""
    settings = parse_config(None, suse=False)
    log: list[str] = []
    with socket.socket() as unused:
        session = Session(
            wire.Link(unused), Context(settings=settings, config_text=None, hook=HOOK), log.append
        )
        for more in (True, True, False):
            request = ttrpc_pb2.Request(
                service="nri.pkg.api.v1alpha1.Plugin",
                method="Synchronize",
                payload=nri_pb2.SynchronizeRequest(
                    more=more, pods=[nri_pb2.PodSandbox(uid="u")]
                ).SerializeToString(),
            )
            response, ended = session.answer(request)
            assert not ended
            assert response.status.code == 0
            assert nri_pb2.SynchronizeResponse.FromString(response.payload).more is more

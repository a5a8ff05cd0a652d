"""``gpu-env-hook nri``: the NRI plugin's connection to the runtime, one request at a time.

The plugin connects to the runtime's NRI socket (checking that root, or this user, listens there),
registers (``Runtime.RegisterPlugin``), is configured (``Plugin.Configure``: it subscribes to
CreateContainer alone, the one event it acts on, and learns the runtime's name and version), synchronized
(``Plugin.Synchronize``, in chunks while ``more`` is set; nothing to update: after the last one the runtime
sends it events, so it is ready -- ``ready``, e.g. a readiness file) and then answers each CreateContainer
with ``hook.nri.decide``. A refusal is the request's error status: the runtime fails the
container's creation with that one line. ``Shutdown``, or the socket closing, ends the session: the plugin
reconnects with a backoff (0.1 s doubling to 5 s) until it is stopped (SIGTERM, SIGINT: a
``KeyboardInterrupt``; the socket is closed on the way out).

Requests are answered in the order they arrive (NRI calls a plugin for one event at a time); each answer
is logged with its time when it took longer than the 500 ms budget. Log lines go to stdout, one flushed
line at a time (a pod's log collector takes stderr as errors: every connection would be one).
"""

import socket
import struct
import sys
import time

from hook.nri import nri_pb2, ttrpc_pb2, wire
from hook.util import paths
from hook.util.errors import HookError, describe_os_error
from hook.util.safetext import os_reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from hook.nri.decide import Context

DEFAULT_SOCKET = paths.NRI_SOCKET
PLUGIN_NAME = "gpu-env-hook"
PLUGIN_INDEX = "10"
SERVICE_PLUGIN = "nri.pkg.api.v1alpha1.Plugin"
SERVICE_RUNTIME = "nri.pkg.api.v1alpha1.Runtime"
# CreateContainer alone: every event NRI relays waits behind one node-wide lock that each CRI call's NRI
# step takes (containerd's and NRI's adaptation, subscribed or not), and a subscribed one also waits for
# this plugin's answer while holding it; nothing here needs to hear of any other event.
EVENTS = 1 << (nri_pb2.CREATE_CONTAINER - 1)
BUDGET = 0.5
# gRPC status codes (the ttrpc Status)
UNKNOWN = 2
FAILED_PRECONDITION = 9
UNIMPLEMENTED = 12
BACKOFF_FIRST = 0.1
BACKOFF_MAX = 5.0


class SessionEndedError(Exception):
    """The runtime said Shutdown, or closed the socket: reconnect."""


def connect(path: str, timeout: float = 5.0) -> socket.socket:
    """Connect to the NRI socket; refuse a listener that is neither root nor this user."""
    import os

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except BaseException:
        sock.close()
        raise
    uid = struct.unpack("3i", creds)[1]
    if uid not in (0, os.geteuid()):
        sock.close()
        raise _not_root(path, uid)
    sock.settimeout(None)
    return sock


def _not_root(path: str, uid: int) -> Exception:
    """The refusal of a socket served by another user (it could forge every pod's identity)."""
    return HookError(f"gpu-env-hook nri: {path} is served by uid {uid}, not root: not connecting")


class Session:
    """One connection to the runtime: register, then answer requests until it ends."""

    def __init__(
        self,
        link: wire.Link,
        context: "Context",
        log: "Callable[[str], None]",
        ready: "Callable[[], None] | None" = None,
    ) -> None:
        self.link = link
        self.context = context
        self.log = log
        self.ready = ready
        self.configured = False

    def register(self) -> None:
        """Send RegisterPlugin (stream 1 of the Runtime connection); its answer comes in :meth:`serve`."""
        request = nri_pb2.RegisterPluginRequest(plugin_name=PLUGIN_NAME, plugin_idx=PLUGIN_INDEX)
        envelope = ttrpc_pb2.Request(
            service=SERVICE_RUNTIME, method="RegisterPlugin", payload=request.SerializeToString()
        )
        self.link.send(wire.RUNTIME_CONN, 1, wire.REQUEST, envelope.SerializeToString())

    def serve(self) -> None:
        """Answer the runtime's requests until Shutdown or the socket closes (SessionEndedError)."""
        while True:
            message = self.link.receive()
            if message.conn == wire.RUNTIME_CONN and message.kind == wire.RESPONSE:
                response = ttrpc_pb2.Response.FromString(message.data)
                if response.status.code:
                    raise HookError(f"gpu-env-hook nri: registration refused: {response.status.message}")
                continue
            if message.conn != wire.PLUGIN_CONN or message.kind != wire.REQUEST:
                continue  # no stream data in NRI's unary calls
            request = ttrpc_pb2.Request.FromString(message.data)
            started = time.monotonic()
            response, ended = self.answer(request)
            self.link.send(wire.PLUGIN_CONN, message.stream, wire.RESPONSE, response.SerializeToString())
            took = time.monotonic() - started
            if took > BUDGET:
                self.log(f"gpu-env-hook nri: {request.method} took {took * 1000:.0f} ms (budget 500 ms)")
            if ended:
                raise SessionEndedError("the runtime is shutting down")

    def answer(self, request: ttrpc_pb2.Request) -> tuple[ttrpc_pb2.Response, bool]:
        """Return the response to one request, and whether the session ends after it."""
        if request.service != SERVICE_PLUGIN:
            return _error(UNIMPLEMENTED, f"service {request.service} not implemented"), False
        method = request.method
        if method == "Configure":
            configure = nri_pb2.ConfigureRequest.FromString(request.payload)
            self.context.runtime_name = configure.runtime_name
            self.context.runtime_version = configure.runtime_version
            self.configured = True
            self.log(
                f"gpu-env-hook nri: configured by {configure.runtime_name} {configure.runtime_version} "
                f"(request timeout {configure.request_timeout} ms)"
            )
            return _ok(nri_pb2.ConfigureResponse(events=EVENTS)), False
        if method == "Synchronize":
            sync = nri_pb2.SynchronizeRequest.FromString(request.payload)
            if not sync.more and self.ready is not None:
                self.ready()
            return _ok(nri_pb2.SynchronizeResponse(more=sync.more)), False
        if method == "CreateContainer":
            return self.create_container(request.payload), False
        if method == "RemoveContainer":  # not subscribed; a runtime sending it anyway is not failed
            return _ok(nri_pb2.RemoveContainerResponse()), False
        if method == "Shutdown":
            return _ok(nri_pb2.Empty()), True
        return _error(UNIMPLEMENTED, f"method {method} not implemented"), False

    def create_container(self, payload: bytes) -> ttrpc_pb2.Response:
        """Decide one container's adjustment; a refusal becomes the request's error (its one line)."""
        from hook.nri.decide import adjust_container

        create = nri_pb2.CreateContainerRequest.FromString(payload)
        try:
            adjust = adjust_container(create.pod, create.container, self.context)
        except HookError as err:
            self.log(
                f"{err} (pod {create.pod.namespace}/{create.pod.name}, container {create.container.name})"
            )
            return _error(FAILED_PRECONDITION, str(err))
        except Exception as err:  # noqa: BLE001 - a container is refused, the plugin keeps serving
            line = (
                f"gpu-env-hook nri: {describe_os_error(err)}"
                if isinstance(err, OSError)
                else f"gpu-env-hook nri: internal error: {type(err).__name__}"
            )
            self.log(line)
            return _error(UNKNOWN, line)
        response = nri_pb2.CreateContainerResponse()
        if adjust is not None:
            response.adjust.CopyFrom(adjust)
        return _ok(response)


def _ok(message: object) -> ttrpc_pb2.Response:
    """A successful ttrpc response carrying ``message``."""
    return ttrpc_pb2.Response(payload=message.SerializeToString())  # type: ignore[attr-defined]


def _error(code: int, line: str) -> ttrpc_pb2.Response:
    """A failed ttrpc response: the status code and its one line."""
    return ttrpc_pb2.Response(status=ttrpc_pb2.Status(code=code, message=line))


def run(
    path: str, context: "Context", *, log: "Callable[[str], None] | None" = None, ready: str | None = None
) -> int:
    """Serve the runtime on ``path``, reconnecting with backoff, until stopped. ``ready``: a file created
    once the runtime has synchronized the plugin, removed when the session ends (and at start)."""
    from google.protobuf.message import DecodeError

    say = log or log_line
    mark = _ReadyFile(ready)
    delay = BACKOFF_FIRST
    while True:
        try:
            sock = connect(path)
        except OSError as err:
            say(f"gpu-env-hook nri: cannot connect to {path}: {os_reason(err)}; retrying in {delay:.1f} s")
            time.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)
            continue
        delay = BACKOFF_FIRST
        session = Session(wire.Link(sock), context, say, mark.create if ready else None)
        try:
            session.register()
            session.serve()
        except (
            SessionEndedError,
            wire.ConnectionClosedError,
            wire.ProtocolError,
            DecodeError,
            OSError,
            HookError,
        ) as err:
            say(f"gpu-env-hook nri: session ended ({err})")
        finally:
            mark.remove()
            sock.close()
        time.sleep(delay)


class _ReadyFile:
    """The readiness file: there while the plugin is registered with the runtime."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.remove()

    def create(self) -> None:
        if self.path is not None:
            with open(self.path, "w"):
                pass

    def remove(self) -> None:
        import contextlib
        import os

        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


def log_line(line: str) -> None:
    """Log one line on stdout, flushed at once (the pod's log, or journald under systemd): a collector such
    as GKE's takes stderr as severity ERROR, and every connection would be one."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()

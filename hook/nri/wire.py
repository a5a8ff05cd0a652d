"""The NRI socket's framing: a connection multiplexer carrying two ttrpc connections.

The plugin connects to the runtime's socket (``/var/run/nri/nri.sock``); that one stream carries two
logical connections, each a ttrpc byte stream::

    socket      = *mux-frame
    mux-frame   = conn-id:u32be  length:u32be  payload:length bytes    ; conn-id 0 is reserved
    conn-id     = 1   ; service Plugin:  the runtime is the ttrpc client, the plugin serves
                / 2   ; service Runtime: the plugin is the client (RegisterPlugin)
    ; the payloads of one conn-id, concatenated, are that connection's ttrpc stream (a ttrpc message may
    ; span frames, a frame may hold several messages); a frame's payload is at most 10 + 4 MiB bytes

    ttrpc-stream  = *ttrpc-message
    ttrpc-message = length:u32be  stream-id:u32be  type:u8  flags:u8  data:length bytes  ; length <= 4 MiB
    type          = 1 (request: data is a ttrpc.Request) / 2 (response: data is a ttrpc.Response)
                  / 3 (stream data: unused by NRI's unary calls)
    stream-id     = odd, chosen by the client, echoed by the server's response; flags 0 for unary calls

The protobuf messages (``ttrpc_pb2``, ``nri_pb2``) are generated code; this module only cuts and joins
bytes. It never blocks forever on its own: the socket's timeout is the caller's.
"""

import socket
import struct

PLUGIN_CONN = 1
RUNTIME_CONN = 2
REQUEST = 1
RESPONSE = 2
MUX_HEADER = struct.Struct(">II")
TTRPC_HEADER = struct.Struct(">IIBB")
TTRPC_MAX = 4 << 20
MUX_MAX = TTRPC_HEADER.size + TTRPC_MAX


class ProtocolError(Exception):
    """The peer broke the framing (the connection cannot go on)."""


class ConnectionClosedError(Exception):
    """The runtime closed the socket."""


class Message:
    """One ttrpc message received on a multiplexed connection."""

    __slots__ = ("conn", "data", "flags", "kind", "stream")

    def __init__(self, conn: int, stream: int, kind: int, flags: int, data: bytes) -> None:
        self.conn = conn
        self.stream = stream
        self.kind = kind
        self.flags = flags
        self.data = data


def encode(conn: int, stream: int, kind: int, data: bytes, flags: int = 0) -> bytes:
    """Return the bytes that send one ttrpc message on a multiplexed connection: one frame (a frame's limit
    is ttrpc's header and largest message)."""
    if len(data) > TTRPC_MAX:
        raise ProtocolError(f"message of {len(data)} bytes exceeds ttrpc's limit of {TTRPC_MAX}")
    return (
        MUX_HEADER.pack(conn, TTRPC_HEADER.size + len(data))
        + TTRPC_HEADER.pack(len(data), stream, kind, flags)
        + data
    )


class Demux:
    """Reassembles ttrpc messages from mux frames fed in any cut (pure: no socket)."""

    def __init__(self) -> None:
        self._raw = bytearray()
        self._streams: dict[int, bytearray] = {}

    def feed(self, data: bytes) -> list[Message]:
        """Take bytes read from the socket; return the ttrpc messages they complete, in order."""
        self._raw += data
        messages: list[Message] = []
        while len(self._raw) >= MUX_HEADER.size:
            conn, length = MUX_HEADER.unpack_from(self._raw)
            if conn == 0 or length > MUX_MAX:
                raise ProtocolError(f"bad multiplexer frame (connection {conn}, {length} bytes)")
            end = MUX_HEADER.size + length
            if len(self._raw) < end:
                break
            stream = self._streams.setdefault(conn, bytearray())
            stream += self._raw[MUX_HEADER.size : end]
            del self._raw[:end]
            messages += _take_messages(conn, stream)
        return messages


def _take_messages(conn: int, stream: bytearray) -> list[Message]:
    """Cut the complete ttrpc messages off the front of one connection's stream."""
    messages = []
    while len(stream) >= TTRPC_HEADER.size:
        length, stream_id, kind, flags = TTRPC_HEADER.unpack_from(stream)
        if length > TTRPC_MAX:
            raise ProtocolError(f"ttrpc message of {length} bytes exceeds the limit of {TTRPC_MAX}")
        end = TTRPC_HEADER.size + length
        if len(stream) < end:
            break
        messages.append(Message(conn, stream_id, kind, flags, bytes(stream[TTRPC_HEADER.size : end])))
        del stream[:end]
    return messages


class Link:
    """The plugin's end of the NRI socket: send ttrpc messages, receive them one at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._demux = Demux()
        self._pending: list[Message] = []

    def send(self, conn: int, stream: int, kind: int, data: bytes) -> None:
        """Send one ttrpc message."""
        self.sock.sendall(encode(conn, stream, kind, data))

    def receive(self) -> Message:
        """Return the next ttrpc message (blocking, up to the socket's timeout)."""
        while not self._pending:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionClosedError("the runtime closed the NRI connection")
            self._pending += self._demux.feed(data)
        return self._pending.pop(0)

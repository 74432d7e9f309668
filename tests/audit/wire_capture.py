"""Capture what actually crosses the socket, for checking it against the audit log.

`LoopbackRelay` sits between a gRPC client and server on 127.0.0.1 and keeps every byte in each
direction. `grpc_messages` takes those cleartext HTTP/2 (h2c) bytes apart: DATA frames per stream,
then gRPC's 5-byte length prefixes, asserting the compression flag is 0 (so the payloads are the
very bytes the audit log holds). Only for plaintext test channels: over TLS the bytes are opaque.

    relay = LoopbackRelay(server_port)
    channel = grpc.insecure_channel(f"127.0.0.1:{relay.port}", options=[("grpc.enable_http_proxy", 0)])
    ...                                  # run sessions through the SDK's client
    relay.close()
    uplinks = grpc_messages(bytes(relay.upstream), client_side=True)      # {stream id: [payload, ...]}
    downlinks = grpc_messages(bytes(relay.downstream), client_side=False)
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_DATA = 0x0
H2_FLAG_PADDED = 0x8


class LoopbackRelay:
    """A TCP relay on 127.0.0.1 that forwards to `target_port` and records both directions."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.upstream = bytearray()  # client -> server, across all connections
        self.downstream = bytearray()  # server -> client
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self.connections = 0
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(("127.0.0.1", self.target_port))
            self.connections += 1
            self._sockets += [client, server]
            for src, dst, buf in ((client, server, self.upstream), (server, client, self.downstream)):
                t = threading.Thread(target=self._pump, args=(src, dst, buf), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, buf: bytearray) -> None:
        while True:
            try:
                chunk = src.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
                return
            with self._lock:
                buf.extend(chunk)
            try:
                dst.sendall(chunk)
            except OSError:
                return

    def close(self) -> None:
        self._listener.close()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()
        for t in self._threads:
            t.join(timeout=5)


def h2_data(stream_bytes: bytes, *, client_side: bool) -> dict[int, bytes]:
    """Concatenated DATA payloads per HTTP/2 stream (padding removed)."""
    if client_side:
        assert stream_bytes.startswith(H2_PREFACE), "not a cleartext HTTP/2 client connection"
        stream_bytes = stream_bytes[len(H2_PREFACE) :]
    out: dict[int, bytearray] = {}
    offset = 0
    while offset + 9 <= len(stream_bytes):
        length = int.from_bytes(stream_bytes[offset : offset + 3], "big")
        ftype, flags = stream_bytes[offset + 3], stream_bytes[offset + 4]
        stream_id = struct.unpack(">I", stream_bytes[offset + 5 : offset + 9])[0] & 0x7FFFFFFF
        payload = stream_bytes[offset + 9 : offset + 9 + length]
        assert len(payload) == length, "a truncated HTTP/2 frame"
        if ftype == H2_DATA:
            if flags & H2_FLAG_PADDED:
                pad = payload[0]
                payload = payload[1 : len(payload) - pad]
            out.setdefault(stream_id, bytearray()).extend(payload)
        offset += 9 + length
    assert offset == len(stream_bytes), "trailing bytes after the last HTTP/2 frame"
    return {k: bytes(v) for k, v in out.items()}


def grpc_messages(stream_bytes: bytes, *, client_side: bool) -> dict[int, list[bytes]]:
    """The gRPC message payloads per HTTP/2 stream; fails if any message is compressed."""
    out: dict[int, list[bytes]] = {}
    for stream_id, data in h2_data(stream_bytes, client_side=client_side).items():
        messages: list[bytes] = []
        offset = 0
        while offset < len(data):
            compressed, length = data[offset], struct.unpack(">I", data[offset + 1 : offset + 5])[0]
            assert compressed == 0, (
                f"stream {stream_id}: a compressed gRPC message; logged bytes would not be wire bytes"
            )
            messages.append(data[offset + 5 : offset + 5 + length])
            offset += 5 + length
        out[stream_id] = messages
    return out

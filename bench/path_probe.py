"""What a round pays the network path besides the verifier's work, timed alone (bench.speed).

- `path_round_trip`: a gRPC health check to the verifier over the device's TLS identity, through
  the delay relay: the round trip of a small message (a round's uplink and its top-k downlink are
  a few hundred bytes).
- `payload_round_trip`: the same, but the answer is a message of a given size: `fusion`'s dense
  vector, 4 bytes a vocabulary entry (608 KB for a 152k vocabulary), which TLS, HTTP/2 and the
  relay carry in many chunks. The verifier takes no such request (its uplink is token IDs, and it
  refuses larger messages), so `PayloadServer` answers it: a loopback gRPC server of its own with
  the verifier's certificate, requiring the device's, as the verifier does, placed behind a relay
  of the same RTT.
"""

from __future__ import annotations

import statistics
import struct
import time
from concurrent import futures
from pathlib import Path
from types import TracebackType

import grpc

from specsteer.sdk.client import ClientConfig
from specsteer.sdk.remote import HEALTH_CHECK_METHOD

__all__ = ["PAYLOAD_METHOD", "PayloadServer", "path_round_trip", "payload_round_trip"]

PAYLOAD_METHOD = "/bench.PathProbe/Payload"
MAX_PAYLOAD = 64 * 2**20  # a 16M-entry vocabulary's vector: far past any model's


def _median_round_trip(config: ClientConfig, method: str, request: bytes, reps: int, *, max_message: int) -> float:
    """Median seconds of `reps` calls of unary `method` with `request` on a channel of its own over
    the device's TLS identity, after one call that connects it."""
    options = [("grpc.max_receive_message_length", max_message)]
    channel = grpc.secure_channel(config.server, config.identity().credentials(), options=options)
    try:
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(method)
        call(request, timeout=config.connect_timeout)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            call(request, timeout=config.round_timeout)
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    finally:
        channel.close()


def path_round_trip(config: ClientConfig, reps: int = 30) -> float:
    """Median seconds of a gRPC health check to `config.server` over the device's TLS identity: what
    a round pays the path besides the verifier's work (the relay's delay, loopback, TLS, HTTP/2)."""
    return _median_round_trip(config, HEALTH_CHECK_METHOD, b"", reps, max_message=4 * 2**20)


def payload_round_trip(config: ClientConfig, size: int, reps: int = 30) -> float:
    """Median seconds of a round trip to a `PayloadServer` at `config.server` whose answer is `size`
    bytes: what a round with a downlink that large pays the path."""
    if not 0 <= size <= MAX_PAYLOAD:
        raise ValueError(f"a payload of {size} bytes is outside 0..{MAX_PAYLOAD}")
    return _median_round_trip(config, PAYLOAD_METHOD, struct.pack("<I", size), reps, max_message=size + 1024)


class PayloadServer:
    """A loopback gRPC server answering `PAYLOAD_METHOD` (a little-endian uint32 size) with that many
    zero bytes, over TLS with the given certificate and key, requiring a client certificate from
    `client_ca` (as the verifier does). A context manager; `port` is where it listens."""

    def __init__(self, cert: Path, key: Path, client_ca: Path) -> None:
        credentials = grpc.ssl_server_credentials(
            [(Path(key).read_bytes(), Path(cert).read_bytes())],
            root_certificates=Path(client_ca).read_bytes(),
            require_client_auth=True,
        )
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=2),
            options=[("grpc.max_send_message_length", MAX_PAYLOAD + 1024)],
        )
        handler = grpc.method_handlers_generic_handler(
            "bench.PathProbe", {"Payload": grpc.unary_unary_rpc_method_handler(self._payload)}
        )
        self._server.add_generic_rpc_handlers((handler,))
        self.port = self._server.add_secure_port("127.0.0.1:0", credentials)
        self._server.start()

    @staticmethod
    def _payload(request: bytes, context: grpc.ServicerContext) -> bytes:
        if len(request) != 4 or (size := struct.unpack("<I", request)[0]) > MAX_PAYLOAD:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"a payload request is a uint32 of at most {MAX_PAYLOAD}")
        return bytes(size)

    def close(self) -> None:
        self._server.stop(grace=0).wait()

    def __enter__(self) -> PayloadServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

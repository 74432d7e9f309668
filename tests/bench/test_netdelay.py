"""The delay relay adds the round-trip time it is asked for and forwards bytes unchanged."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from bench.netdelay import DelayRelay


@pytest.fixture
def echo_port():
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()


def round_trip(port: int, payload: bytes) -> tuple[bytes, float]:
    with socket.create_connection(("127.0.0.1", port)) as s:
        start = time.perf_counter()
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            got += s.recv(65536)
        return got, time.perf_counter() - start


@pytest.mark.parametrize("rtt_ms", [0, 40])
def test_relay_delays_by_the_round_trip_time_and_keeps_bytes(echo_port, rtt_ms) -> None:
    with DelayRelay(echo_port, rtt_ms=rtt_ms) as relay:
        payload = bytes(range(256)) * 40
        got, seconds = round_trip(relay.port, payload)
        assert got == payload
        assert seconds >= rtt_ms / 1000 * 0.95
        assert seconds < rtt_ms / 1000 + 0.5
        assert relay.upstream_bytes == relay.downstream_bytes == len(payload)


def test_closing_with_a_connection_open_ends_every_relay_thread(echo_port) -> None:
    # A benchmark opens a relay per RTT: threads left blocked in accept or recv would pile up.
    with DelayRelay(echo_port, rtt_ms=0) as relay, socket.create_connection(("127.0.0.1", relay.port)) as s:
        s.sendall(b"x")
        assert s.recv(1) == b"x"
        relay.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("delay-relay")]

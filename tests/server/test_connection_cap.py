"""Issue 29 #1: a flood of unauthenticated TCP connections cannot exhaust the verifier's descriptors.

gRPC core closes every connection beyond `max_connections` as soon as it is accepted, and the ones
it holds that never finish TLS are closed at the handshake deadline; a device is then served.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from specsteer.core.session_types import SessionParams
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.server.config import ServerConfig
from specsteer.server.grpc_server import connection_limits
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import make_pki, remote, serve

CAP = 4


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed this connection (EOF or reset when we speak)."""
    try:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        return sock.recv(64) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_the_cap_is_handed_to_grpc_and_defaults_to_eight_per_session() -> None:
    assert ("grpc.max_allowed_incoming_connections", 512) in connection_limits(ServerConfig())
    assert ("grpc.max_allowed_incoming_connections", 9) in connection_limits(ServerConfig(max_connections=9))


def test_connections_beyond_the_cap_are_closed_and_a_device_is_served_after_the_flood(tmp_path: Path, char_tok) -> None:
    pki = make_pki(tmp_path / "pki")
    s_lm, g_lm = tiny_lm(char_tok, seed=41, name="s"), tiny_lm(char_tok, seed=42, name="g")
    with serve(CloudVerifier(g_lm, s_lm, seed=0), pki, max_connections=CAP, handshake_timeout=1.0) as (_, port):
        flood = []
        for _ in range(CAP + 12):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.settimeout(0.5)
            flood.append(sock)
        time.sleep(0.3)
        closed = [_closed_by_server(s) for s in flood]
        # Every connection past the cap was closed at once: the flood holds at most CAP descriptors.
        assert sum(not c for c in closed) <= CAP and sum(closed) >= 12
        # The held ones never start TLS: the handshake deadline frees them, and a device gets through.
        time.sleep(1.5)
        started = time.monotonic()
        with remote(port, pki, vocab_size=s_lm.vocab_size) as verifier:
            out = generate(Specialist(s_lm), "fix: x", SessionParams(), DecodeOptions(max_new_tokens=4), verifier)
        assert out.stats.fallback is None and time.monotonic() - started < 10
        for sock in flood:
            sock.close()


@pytest.mark.parametrize("value", [0, -1])
def test_a_cap_below_one_is_refused(value: int) -> None:
    from specsteer.core.errors import ConfigError

    with pytest.raises(ConfigError, match="max_connections must be at least 1"):
        ServerConfig(max_connections=value)

"""A real verifier on loopback for tests: a throwaway PKI, a TLS gRPC server on port 0, clients.

pki = make_pki(tmp_path)                          # dev CA, backup anchor, device CA, "alice"
with serve(cloud, pki) as (server, port):         # `server.grpc_server.create_server`, started
    verifier = remote(port, pki, vocab_size=...)  # `sdk.remote.RemoteVerifier` as device alice
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# gRPC logs each failed handshake on stderr; the tests assert on the errors themselves.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from specsteer.sdk.remote import RemoteVerifier, TlsIdentity
from specsteer.server import pki as pki_mod
from specsteer.server.config import ServerConfig
from specsteer.server.grpc_server import VerifierServer, create_server
from specsteer.server.session import CloudVerifier


class RecordingTap:
    """An egress tap that keeps every payload, to assert what did (or did not) leave."""

    def __init__(self) -> None:
        self.uplinks: list[bytes] = []
        self.downlinks: list[bytes] = []
        self.fallbacks: list[tuple[str, str]] = []
        self.guard: list[tuple[str, str, int, str]] = []
        self.sessions = 0

    def begin_session(self, *, vocab_size: int, max_top_k: int) -> str:
        self.sessions += 1
        return f"s{self.sessions}"

    def on_uplink(self, session_id: str, payload: bytes) -> None:
        self.uplinks.append(payload)

    def on_downlink(self, session_id: str, payload: bytes) -> None:
        self.downlinks.append(payload)

    def on_fallback(self, session_id: str, reason: str) -> None:
        self.fallbacks.append((session_id, reason))

    def on_guard_decision(self, session_id: str, decision: str, count: int, placeholder: str) -> None:
        self.guard.append((session_id, decision, count, placeholder))


def make_pki(root: Path, devices: tuple[str, ...] = ("alice",)) -> pki_mod.Pki:
    p = pki_mod.init_pki(root / "pki")
    for name in devices:
        pki_mod.issue_device(p.directory, name)
    return p


def server_config(p: pki_mod.Pki, **overrides: Any) -> ServerConfig:
    values: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": 0,
        "cert": p.server_cert,
        "key": p.server_key,
        "client_ca": p.device_ca,
    }
    values.update(overrides)
    return ServerConfig(**values)


@contextmanager
def serve(cloud: CloudVerifier, p: pki_mod.Pki, **overrides: Any) -> Iterator[tuple[VerifierServer, int]]:
    server, port = create_server(server_config(p, **overrides), cloud=cloud)
    server.start()
    try:
        yield server, port
    finally:
        server.stop(grace=0)


def identity(p: pki_mod.Pki, device: str = "alice") -> TlsIdentity:
    return TlsIdentity.from_files(p.pins, p.device_cert(device), p.device_key(device))


def remote(port: int, p: pki_mod.Pki, *, vocab_size: int, device: str = "alice", **kw: Any) -> RemoteVerifier:
    kw.setdefault("connect_timeout", 5.0)
    kw.setdefault("round_timeout", 20.0)
    return RemoteVerifier(f"127.0.0.1:{port}", identity(p, device), vocab_size=vocab_size, **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

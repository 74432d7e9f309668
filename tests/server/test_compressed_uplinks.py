"""A device that compresses its uplinks is refused by gRPC before the servicer: the transcript
hashes exactly the bytes that arrived, which an inflated message is not."""

from __future__ import annotations

import grpc
import pytest

from specsteer.core import wire
from specsteer.core.session_types import SessionParams
from specsteer.server.grpc_server import create_server
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import identity, make_pki, server_config


class _Transcript:
    def __init__(self) -> None:
        self.uplinks: list[bytes] = []

    def begin_stream(self, stream: str, device: str, cert_sha256: str) -> None:
        pass

    def record_uplink(self, stream: str, payload: bytes) -> None:
        self.uplinks.append(payload)

    def end_stream(self, stream: str, outcome: str) -> None:
        pass


def test_a_gzip_compressed_uplink_never_reaches_the_servicer(char_tok, tmp_path) -> None:
    pki = make_pki(tmp_path, devices=("alice",))
    cloud = CloudVerifier(tiny_lm(char_tok, seed=2, name="g"), tiny_lm(char_tok, seed=1, name="s"), seed=0)
    transcript = _Transcript()
    server, port = create_server(server_config(pki), cloud=cloud, transcript=transcript)
    server.start()
    try:
        channel = grpc.secure_channel(f"127.0.0.1:{port}", identity(pki).credentials())
        frames = [wire.encode_open([40, 41, 42, 43], SessionParams(top_k=5, draft_len=4))]
        call = channel.stream_stream(wire.SESSION_METHOD)(iter(frames), timeout=30, compression=grpc.Compression.Gzip)
        with pytest.raises(grpc.RpcError) as info:
            list(call)
        assert "compression" in (info.value.details() or "").lower()
        channel.close()
    finally:
        server.stop(grace=0)
    assert transcript.uplinks == []

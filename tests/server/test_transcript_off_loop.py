"""A slow transcript write (its fsync) holds up only its own stream: the event loop that serves
every other session goes on meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc

from specsteer.core import wire
from specsteer.core.session_types import SessionParams
from specsteer.server.grpc_server import create_server
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import identity, make_pki, server_config

OPEN = wire.encode_open([40, 41, 42, 43], SessionParams(top_k=5, draft_len=4))


class _StalledTranscript:
    """A transcript whose first uplink's write stalls (a disk that stopped answering) until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.stalled = threading.Event()
        self.events: list[str] = []
        self._first = True
        self._lock = threading.Lock()

    def begin_stream(self, stream: str, device: str, cert_sha256: str) -> None:
        pass

    def record_uplink(self, stream: str, payload: bytes) -> None:
        with self._lock:
            first, self._first = self._first, False
        if first:
            self.stalled.set()
            self.release.wait(20)
            self.events.append("stalled write returned")

    def end_stream(self, stream: str, outcome: str) -> None:
        pass


def test_a_stalled_transcript_write_holds_up_no_other_session(char_tok, tmp_path) -> None:
    pki = make_pki(tmp_path, devices=("alice", "bob"))
    cloud = CloudVerifier(tiny_lm(char_tok, seed=2, name="g"), tiny_lm(char_tok, seed=1, name="s"), seed=0)
    sink = _StalledTranscript()
    server, port = create_server(server_config(pki), cloud=cloud, transcript=sink)
    server.start()
    stalled_done = threading.Event()
    stalled: grpc.Future | None = None
    try:
        alice = grpc.secure_channel(f"127.0.0.1:{port}", identity(pki, "alice").credentials())
        bob = grpc.secure_channel(f"127.0.0.1:{port}", identity(pki, "bob").credentials())

        def alice_frames() -> Iterator[bytes]:
            yield OPEN
            stalled_done.wait(20)

        stalled = alice.stream_stream(wire.SESSION_METHOD)(alice_frames(), timeout=30)
        assert sink.stalled.wait(20), "alice's Open never reached the transcript"
        call = bob.stream_stream(wire.SESSION_METHOD)(iter([OPEN, wire.encode_round(1, [], [5, 6])]), timeout=30)
        downlinks = list(call)
        sink.events.append("other session answered")
        assert len(downlinks) == 1 and call.code() is grpc.StatusCode.OK
    finally:
        sink.release.set()
        stalled_done.set()
        if stalled is not None:
            stalled.cancel()
        server.stop(grace=0)
    assert sink.events[0] == "other session answered", sink.events

"""The bytes on the socket are the bytes in the log.

A real gRPC channel runs through a loopback TCP relay; the recorder's serializer hooks are the
channel's own (de)serializers. The first test drives a minimal generic client; the second runs
the SDK's own remote client and device loop against the real verifier service.
"""

from __future__ import annotations

import queue
import secrets
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2_grpc

from specsteer.audit import records
from specsteer.audit.identity import DeviceIdentity
from specsteer.audit.log import AuditLog, scan_log
from specsteer.audit.note import SigningKey
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.transcript import ServerTranscript
from specsteer.audit.verify import verify
from specsteer.core import wire
from specsteer.core.proto import verifier_pb2 as pb
from specsteer.core.session_types import SessionParams, SteeringVector, Verdict
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.remote import RemoteVerifier
from specsteer.server.grpc_server import VerifierServer
from specsteer.server.service import Device, VerifierService
from specsteer.server.session import CloudVerifier
from tests.audit.helpers import downlink_deserializer, uplink_serializer
from tests.audit.wire_capture import LoopbackRelay, grpc_messages
from tests.tinymodels import tiny_lm
from tests.verifier_harness import identity, make_pki, server_config

METHOD = "/specsteer.v1.Verifier/Session"
ALICE = DeviceIdentity("alice", "0" * 64)  # no TLS here, so no certificate: a stand-in identity


def _fake_verifier(transcript: ServerTranscript) -> grpc.Server:
    """Accepts every draft's first token and offers two candidates; records raw uplinks first."""

    def session(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        stream = secrets.token_hex(8)
        transcript.begin_stream(stream, ALICE.name, ALICE.cert_sha256)
        for raw in requests:  # no request_deserializer: the handler sees the bytes that arrived
            transcript.record_uplink(stream, raw)
            msg = pb.Uplink.FromString(raw)
            if msg.WhichOneof("kind") == "round":
                verdict = Verdict(min(1, len(msg.round.draft_ids)), SteeringVector(((7,), (8, 9)), (0.5, -0.5)))
                yield wire.verdict_to_proto(msg.round.seq, verdict).SerializeToString()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.stream_stream_rpc_method_handler(session)
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("specsteer.v1.Verifier", {"Session": handler})]
    )
    return server


def _run_session(channel: grpc.Channel, rec: EgressRecorder, vocab: int) -> None:
    sid = rec.begin_session(vocab_size=vocab)
    call = channel.stream_stream(
        METHOD, request_serializer=uplink_serializer(rec, sid), response_deserializer=downlink_deserializer(rec, sid)
    )
    outgoing: queue.Queue[pb.Uplink | None] = queue.Queue()

    def requests() -> Iterator[pb.Uplink]:
        while (m := outgoing.get()) is not None:
            yield m

    responses = call(requests())
    outgoing.put(wire.open_to_proto([1, 2, 3, 4], SessionParams(top_k=2, draft_len=3)))
    commit: list[int] = []
    for seq in (1, 2, 3):
        outgoing.put(wire.round_to_proto(seq, commit, [10 + seq, 11, 12]))
        down = next(responses)
        commit = list(down.candidates[1].token_ids)
    outgoing.put(wire.close_to_proto(4))
    outgoing.put(None)
    assert list(responses) == []


def test_socket_bytes_match_the_log_through_a_real_grpc_channel(tmp_path: Path) -> None:
    key = SigningKey.generate("device.test/wire")
    with ServerTranscript.open(tmp_path / "server.jsonl") as transcript:
        server = _fake_verifier(transcript)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        relay = LoopbackRelay(port)
        try:
            with (
                AuditLog.open(tmp_path / "log", key, device=ALICE) as log,
                grpc.insecure_channel(f"127.0.0.1:{relay.port}", options=[("grpc.enable_http_proxy", 0)]) as channel,
            ):
                rec = EgressRecorder(log)
                _run_session(channel, rec, vocab=100)
                _run_session(channel, rec, vocab=100)
        finally:
            server.stop(grace=None)
            relay.close()

    logged = {"up": [], "down": []}
    for r in scan_log(tmp_path / "log").records:
        parsed = records.parse(r.data)
        if parsed.payload is not None:
            logged[parsed.fields["dir"]].append(parsed.payload)
    sent = [m for _, msgs in sorted(grpc_messages(bytes(relay.upstream), client_side=True).items()) for m in msgs]
    received = [
        m for _, msgs in sorted(grpc_messages(bytes(relay.downstream), client_side=False).items()) for m in msgs
    ]
    assert len(sent) == 10 and len(received) == 6
    assert sent == logged["up"]  # every application byte that left is in the log, in order
    assert received == logged["down"]
    verify(tmp_path / "log", key=key.verifier, server_transcript=tmp_path / "server.jsonl")


class _NamedDeviceService(VerifierService):
    """Without TLS there is no client certificate: name the one test device instead."""

    def _device(self, context: grpc.aio.ServicerContext) -> Device:
        return Device(ALICE.name, ALICE.cert_sha256)


class UnsafePlaintextVerifierServer(VerifierServer):
    """TEST ONLY: the real verifier service on a plaintext port, so a relay can read the frames.
    Production code has no plaintext mode; TLS would make the captured bytes opaque."""

    async def _bind(self) -> None:
        server = grpc.aio.server(compression=grpc.Compression.NoCompression)
        self.service = _NamedDeviceService(self.cloud, self.config, self.metrics, self.scheduler, self.transcript)
        server.add_generic_rpc_handlers((self.service.handler(),))
        self.port = server.add_insecure_port("127.0.0.1:0")
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        self._server = server


class UnsafePlaintextRemoteVerifier(RemoteVerifier):
    """TEST ONLY: the SDK's own client (serializers, egress taps, session logic) over plaintext."""

    def _new_channel(self) -> grpc.Channel:
        return grpc.insecure_channel(self.target, options=[("grpc.enable_http_proxy", 0)])

    def _check_serving_chain(self, channel: grpc.Channel, deadline: float) -> None:
        pass  # plaintext, for the capture: there is no certificate chain to hold to path rules


def test_sdk_client_socket_bytes_match_the_log(tmp_path: Path, char_tok) -> None:
    """The SDK's remote client and device loop through a relay: socket frames == logged records."""
    # Prepare: tiny models, the real verifier service, a relay, an audit log behind the egress tap.
    specialist = Specialist(tiny_lm(char_tok, seed=1))
    cloud = CloudVerifier(tiny_lm(char_tok, seed=2), specialist.lm, seed=0)
    pki = make_pki(tmp_path)
    key = SigningKey.generate("device.test/sdk-wire")
    with ServerTranscript.open(tmp_path / "server.jsonl") as transcript:
        server = UnsafePlaintextVerifierServer(server_config(pki), cloud, transcript=transcript)
        server.start()
        relay = LoopbackRelay(server.port)
        try:
            with AuditLog.open(tmp_path / "log", key, device=ALICE) as log:
                tap = EgressRecorder(log)
                verifier = UnsafePlaintextRemoteVerifier(
                    f"127.0.0.1:{relay.port}", identity(pki), vocab_size=specialist.lm.vocab_size, tap=tap
                )
                # Execute: two generations (drafts, rejections, recoveries) through the SDK.
                for prompt in ("Hello there", "refs: speed up"):
                    out = generate(
                        specialist, prompt, SessionParams(gamma=0.05), DecodeOptions(max_new_tokens=12), verifier
                    )
                    assert out.stats.fallback is None and out.stats.rounds > 1
                verifier.close()
        finally:
            server.stop(grace=0)
            relay.close()
    # Assert: every gRPC message on the socket, in order, is a logged record's payload, and back.
    logged: dict[str, list[bytes]] = {"up": [], "down": []}
    for r in scan_log(tmp_path / "log").records:
        parsed = records.parse(r.data)
        if parsed.payload is not None:
            logged[parsed.fields["dir"]].append(parsed.payload)
    sent = [m for _, msgs in sorted(grpc_messages(bytes(relay.upstream), client_side=True).items()) for m in msgs]
    received = [
        m for _, msgs in sorted(grpc_messages(bytes(relay.downstream), client_side=False).items()) for m in msgs
    ]
    assert sent == logged["up"] and len(sent) > 4
    assert received == logged["down"]
    verify(tmp_path / "log", key=key.verifier, server_transcript=tmp_path / "server.jsonl")

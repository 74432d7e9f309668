"""Network frames (`core.wire.encode_*` / `decode_*`): pairs round-trip, and uplinks parse strictly."""

from __future__ import annotations

import pytest

from specsteer.core import wire
from specsteer.core.errors import ProtocolError
from specsteer.core.proto import verifier_pb2 as pb
from specsteer.core.session_types import Method, SessionParams, SteeringVector, Verdict


def test_uplink_frames_round_trip() -> None:
    params = SessionParams(method=Method.SD, draft_len=2, top_k=3)
    assert wire.decode_uplink(wire.encode_open([1, 2], params)) == wire.OpenFrame((1, 2), params)
    assert wire.decode_uplink(wire.encode_round(3, [4], [5, 6])) == wire.RoundFrame(3, (4,), (5, 6))
    assert wire.decode_uplink(wire.encode_close(4)) == wire.CloseFrame(4)


def test_downlink_frames_round_trip() -> None:
    verdict = Verdict(1, SteeringVector(((5,), (6, 7)), (-0.5, 2.0)))
    assert wire.decode_downlink(wire.encode_downlink(9, verdict), max_top_k=2, vocab_size=10) == (9, verdict)


def test_unknown_field_deep_inside_an_open_is_refused() -> None:
    params = wire.params_to_proto(SessionParams()).SerializeToString() + bytes([15 << 3, 1])
    body = pb.Open(prompt_ids=[1]).SerializeToString() + bytes([2 << 3 | 2, len(params)]) + params
    with pytest.raises(ProtocolError, match=r"Uplink\.open\.params field 15"):
        wire.decode_uplink(bytes([1 << 3 | 2, len(body)]) + body)


def test_a_negative_token_id_is_named_out_of_vocabulary_before_the_encoding_is_judged() -> None:
    # -1 as protobuf's int64 writes it (ten bytes) in the packed uint32 draft_ids: it parses as 2^32 - 1.
    packed = b"\xff" * 9 + b"\x01"
    body = bytes([1 << 3, 1, 3 << 3 | 2, len(packed)]) + packed
    frame = bytes([2 << 3 | 2, len(body)]) + body
    with pytest.raises(ProtocolError, match="draft token ID 4294967295 is outside the vocabulary of 100"):
        wire.decode_uplink(frame, vocab_size=100)
    with pytest.raises(ProtocolError, match="canonical"):  # without a vocabulary, the long varint gives it away
        wire.decode_uplink(frame)


def test_downlink_with_unknown_fields_is_refused() -> None:
    raw = wire.encode_downlink(1, Verdict(0, SteeringVector(((5,),), (0.0,)))) + bytes([7 << 3, 1])
    with pytest.raises(ProtocolError, match="unknown fields"):
        wire.decode_downlink(raw, max_top_k=2, vocab_size=10)


def test_session_method_is_the_path_a_client_generated_from_the_proto_calls() -> None:
    """A third-party client built from verifier.proto must reach the method our client and server use."""
    from specsteer.core.proto import verifier_pb2_grpc

    class RecordingChannel:
        def __init__(self) -> None:
            self.methods: list[str] = []

        def stream_stream(self, method: str, **_: object) -> None:
            self.methods.append(method)

    channel = RecordingChannel()
    verifier_pb2_grpc.VerifierStub(channel)
    assert channel.methods == [wire.SESSION_METHOD]

"""Constant-size uplink rounds (`SessionParams.padded_frames`): the size channel closes, nothing else changes."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from specsteer.audit.errors import EgressBlocked
from specsteer.audit.log import AuditLog
from specsteer.audit.note import SigningKey
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.verify import verify
from specsteer.core import wire
from specsteer.core.errors import ProtocolError
from specsteer.core.proto import verifier_pb2 as pb
from specsteer.core.session_types import SessionParams
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.server.session import CloudVerifier
from tests.server.test_service import raw_stream
from tests.tinymodels import tiny_lm
from tests.verifier_harness import RecordingTap, identity, make_pki, remote, serve


def test_every_padded_round_of_a_session_has_one_size() -> None:
    sizes = {
        len(wire.encode_round(seq, commit, draft, literal, pad_to=4))
        for seq, commit, draft, literal in [
            (1, [], [1, 2, 3, 4], []),
            (2, [49151, 7], [], []),
            (300, [5], [60000], [44, 15242, 46]),
            (70000, [1] * 8, [2] * 4, [3] * 16),
        ]
    }
    assert len(sizes) == 1
    frame = wire.decode_uplink(wire.encode_round(9, [5], [6, 7], [8], pad_to=4), vocab_size=49152)
    assert frame == wire.RoundFrame(9, (5,), (6, 7), (8,), slots=(8, 4, 16))


def test_padding_is_strict() -> None:
    with pytest.raises(ProtocolError, match="4 draft slots"):
        wire.encode_round(1, [], [1, 2, 3, 4, 5], pad_to=4)
    # A token after padding would be a covert channel: refused on decode.
    bad = pb.Uplink(padded_round=pb.PaddedRound(seq=1, commit_ids=[wire.PAD_ID, 5] + [wire.PAD_ID] * 6))
    with pytest.raises(ProtocolError, match="after padding"):
        wire.decode_uplink(bad.SerializeToString(deterministic=True))


@pytest.fixture(scope="module")
def setup(tmp_path_factory, char_tok):
    pki = make_pki(tmp_path_factory.mktemp("padded"))
    s_lm, g_lm = tiny_lm(char_tok, seed=31, name="s"), tiny_lm(char_tok, seed=32, name="g")
    with serve(CloudVerifier(g_lm, s_lm, seed=0, max_top_k=64), pki) as (_, port):
        yield pki, port, Specialist(s_lm)


def test_padded_sessions_give_the_same_text_with_constant_round_sizes(setup) -> None:
    pki, port, specialist = setup
    runs = {}
    for padded in (False, True):
        tap = RecordingTap()
        with remote(port, pki, vocab_size=specialist.lm.vocab_size, tap=tap) as verifier:
            params = SessionParams(gamma=0.05, padded_frames=padded)
            out = generate(specialist, "refs: speed up", params, DecodeOptions(max_new_tokens=24), verifier)
        kinds = [pb.Uplink.FromString(u).WhichOneof("kind") for u in tap.uplinks]
        rounds = [len(u) for u, k in zip(tap.uplinks, kinds, strict=True) if k in ("round", "padded_round")]
        runs[padded] = (out.token_ids, out.stats.fallback, rounds, set(kinds))
    assert runs[True][0] == runs[False][0] and runs[True][1] is None
    assert len(set(runs[False][2])) > 1  # unpadded rounds differ in size: the channel exists
    assert len(set(runs[True][2])) == 1 and len(runs[True][2]) == len(runs[False][2])  # and closes
    assert "round" not in runs[True][3]


def test_the_verifier_refuses_mixed_framing(setup) -> None:
    pki, port, _ = setup
    channel = grpc.secure_channel(f"127.0.0.1:{port}", identity(pki).credentials())
    try:
        padded_open = wire.encode_open([40, 41], SessionParams(draft_len=4, padded_frames=True))
        _, code, details = raw_stream(channel, [padded_open, wire.encode_round(1, [], [42])])
        assert code is grpc.StatusCode.INVALID_ARGUMENT and "must be a PaddedRound" in details
        plain_open = wire.encode_open([40, 41], SessionParams(draft_len=4))
        _, code, details = raw_stream(channel, [plain_open, wire.encode_round(1, [], [42], pad_to=4)])
        assert code is grpc.StatusCode.INVALID_ARGUMENT and "did not declare padded frames" in details
        _, code, details = raw_stream(channel, [padded_open, wire.encode_round(1, [], [42], pad_to=3)])
        assert code is grpc.StatusCode.INVALID_ARGUMENT and "slots" in details
    finally:
        channel.close()


def test_the_audit_contract_holds_a_padded_session_to_its_declaration(tmp_path: Path) -> None:
    with AuditLog.open(tmp_path / "log", SigningKey.generate("d")) as log:
        rec = EgressRecorder(log)
        sid = rec.begin_session(vocab_size=100)
        rec.on_uplink(sid, wire.encode_open([1, 2], SessionParams(draft_len=4, padded_frames=True)))
        with pytest.raises(EgressBlocked, match="not padded"):
            rec.on_uplink(sid, wire.encode_round(1, [], [4]))
        rec.on_uplink(sid, wire.encode_round(1, [], [4], pad_to=4))
        rec.on_fallback(sid, "verifier-lost")
    assert verify(tmp_path / "log").sessions[0].rounds == 1

"""Token IDs at the edge of the vocabulary: the last ID (vocab_size - 1) passes, vocab_size is refused,
by the server's uplink decoder, the device's downlink parser and the session contract alike."""

from __future__ import annotations

import pytest

from specsteer.core import wire
from specsteer.core.contract import SessionState
from specsteer.core.errors import ProtocolError
from specsteer.core.proto import verifier_pb2 as pb
from specsteer.core.session_types import SessionParams, SteeringVector, Verdict

VOCAB = 100
LAST, FIRST_OUTSIDE = VOCAB - 1, VOCAB
PARAMS = SessionParams(draft_len=2, top_k=3)

# One uplink per place a token ID travels, carrying `t` there (and ordinary IDs elsewhere).
UPLINKS = {
    "prompt": lambda t: wire.encode_open([1, t], PARAMS),
    "commit": lambda t: wire.encode_round(2, [t], [4]),
    "draft": lambda t: wire.encode_round(1, [], [4, t]),
    "placeholder": lambda t: wire.encode_round(1, [], [4], [t]),
    "padded draft": lambda t: wire.encode_round(1, [], [t], pad_to=2),
}


@pytest.mark.parametrize("where", UPLINKS)
def test_the_uplink_decoder_takes_the_last_id_and_refuses_the_vocabulary_size(where: str) -> None:
    frame = wire.decode_uplink(UPLINKS[where](LAST), vocab_size=VOCAB)
    if isinstance(frame, wire.OpenFrame):
        assert frame.prompt_ids == (1, LAST)
    else:
        assert isinstance(frame, wire.RoundFrame) and LAST in (*frame.commit, *frame.draft, *frame.literal)
    with pytest.raises(ProtocolError, match=f"token ID {FIRST_OUTSIDE} is outside the vocabulary of {VOCAB}"):
        wire.decode_uplink(UPLINKS[where](FIRST_OUTSIDE), vocab_size=VOCAB)


def _downlink(token: int) -> pb.Downlink:
    return wire.verdict_to_proto(1, Verdict(0, SteeringVector(((5,), (6, token)), (0.0, -1.0))))


def test_the_downlink_parser_takes_the_last_id_and_refuses_the_vocabulary_size() -> None:
    verdict = wire.verdict_from_proto(_downlink(LAST), max_top_k=3, vocab_size=VOCAB)
    assert isinstance(verdict.steering, SteeringVector) and verdict.steering.candidates == ((5,), (6, LAST))
    with pytest.raises(ProtocolError, match=f"token ID {FIRST_OUTSIDE} is outside the vocabulary of {VOCAB}"):
        wire.verdict_from_proto(_downlink(FIRST_OUTSIDE), max_top_k=3, vocab_size=VOCAB)


def _contract_violations(where: str, token: int) -> list[str]:
    """What the session contract says about `token` at `where`, after a valid session up to there."""
    state = SessionState("s", VOCAB, 3)
    if where == "prompt":
        return [v.message for v in state.examine_uplink(wire.encode_open([1, token], PARAMS))[0]]
    steps = [wire.encode_open([1, 2], PARAMS)]
    if where == "draft":
        return [v.message for v in _after(state, steps).examine_uplink(wire.encode_round(1, [], [4, token]))[0]]
    steps.append(wire.encode_round(1, [], [4, 5]))
    down = wire.encode_downlink(1, Verdict(0, SteeringVector(((token,),), (0.0,))))
    return [v.message for v in _after(state, steps).examine_downlink(down)[0]]


def _after(state: SessionState, uplinks: list[bytes]) -> SessionState:
    for up in uplinks:
        violations, commit = state.examine_uplink(up)
        assert violations == []
        commit()
    return state


@pytest.mark.parametrize(("where", "what"), [("prompt", "prompt"), ("draft", "draft"), ("downlink", "candidate 0")])
def test_the_session_contract_draws_the_same_line(where: str, what: str) -> None:
    """The device's recorder and `audit verify` follow the session contract: it refuses exactly what the parsers do."""
    assert _contract_violations(where, LAST) == []
    assert _contract_violations(where, FIRST_OUTSIDE) == [
        f"{what} token ID {FIRST_OUTSIDE} is outside the vocabulary of {VOCAB}"
    ]

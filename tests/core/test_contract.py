"""One session contract: the server's session, the device's recorder and `audit verify` agree."""

from __future__ import annotations

import pytest

from specsteer.core import wire
from specsteer.core.contract import Breach, ContractError, SessionState
from specsteer.core.session_types import GuardDecision, SessionParams, SteeringVector, Verdict
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm

VOCAB = 100


def _recorder_after_a_rejected_draft() -> SessionState:
    state = SessionState("s", VOCAB, 10)
    for up in (wire.encode_open([1, 2], SessionParams(draft_len=2)), wire.encode_round(1, [], [4, 5])):
        violations, commit = state.examine_uplink(up)
        assert violations == []
        commit()
    violations, commit = state.examine_downlink(wire.encode_downlink(1, Verdict(0, SteeringVector(((8,),), (0.0,)))))
    assert violations == []
    commit()
    return state


def test_the_recorder_refuses_a_round_that_skips_the_recovery_as_the_server_does() -> None:
    # The server always refused this; the device's recorder and `audit verify` now follow the same rules.
    state = _recorder_after_a_rejected_draft()
    violations, _ = state.examine_uplink(wire.encode_round(2, [], [4]))
    assert [v.message for v in violations] == [
        "the last round rejected the draft, so this round must commit a recovery token"
    ]
    assert violations[0].kind is Breach.ORDER
    assert state.examine_uplink(wire.encode_round(2, [8], [4]))[0] == []


@pytest.fixture(scope="module")
def cloud(char_tok) -> CloudVerifier:
    return CloudVerifier(tiny_lm(char_tok, seed=2), tiny_lm(char_tok, seed=1), seed=0)


@pytest.mark.parametrize(
    ("frame", "breach"),
    [
        (wire.RoundFrame(2, (), (5,), ()), Breach.ORDER),  # a gap
        (wire.RoundFrame(1, (), (5, 6, 7), ()), Breach.MALFORMED),  # longer than K
        (wire.RoundFrame(1, (7,), (5,), ()), Breach.ORDER),  # a commit with no candidates out
        (wire.RoundFrame(1, (), (5,), (), slots=wire.padded_slots(2)), Breach.MALFORMED),  # undeclared padding
    ],
)
def test_the_server_session_and_the_recorder_give_one_verdict(cloud, char_tok, frame, breach) -> None:
    prompt = char_tok.encode("Hello", add_special_tokens=False)
    session = cloud.open(prompt, SessionParams(draft_len=2))
    with pytest.raises(ContractError) as refused:
        session.round_frame(frame)
    state = SessionState("s", len(char_tok), 10)
    state.examine_uplink(wire.encode_open(prompt, SessionParams(draft_len=2)))[1]()
    padded = frame.slots is not None
    up = wire.encode_round(frame.seq, frame.commit, frame.draft, frame.literal, pad_to=2 if padded else None)
    violations, _ = state.examine_uplink(up)
    assert refused.value.violation == violations[0]
    assert refused.value.violation.kind is breach


def test_guard_decisions_are_one_set_for_device_guard_and_audit() -> None:
    from specsteer.privacy.guard import GuardPolicy
    from specsteer.sdk import prompt_guard, uplink_guard

    # The round's decisions (`plan_uplink`) and the prompt's (`prompt_guard`), and nothing else.
    prompt = {
        d for d, _, _ in prompt_guard.PromptPlan("p", "p", "redact", (("<P_1>", "x", "name"),), ("<P>",)).decisions()
    }
    prompt |= {
        d for d, _, _ in prompt_guard.PromptPlan("p", "p", "allow", (("<P_1>", "x", "name"),), ("<P>",)).decisions()
    }
    assert {uplink_guard.CUT, uplink_guard.PLACEHOLDER, uplink_guard.KEEP_LOCAL} | prompt == set(GuardDecision)
    assert {p.value for p in GuardPolicy} <= {d.value for d in GuardDecision}
    # The audit contract counts a placeholder decision toward the placeholders the wire may carry.
    state = SessionState("s", VOCAB, 10)
    state.examine_uplink(wire.encode_open([1, 2], SessionParams(draft_len=2)))[1]()
    state.examine_guard(GuardDecision.PLACEHOLDER, 1, "<EMAIL>")[1]()
    assert state.examine_uplink(wire.encode_round(1, [], [4], [7, 8]))[0] == []

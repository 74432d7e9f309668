"""Whole sessions, step by step, as the session contract (`core.contract.SessionState`) follows them.

The contract is what the device's recorder enforces before an uplink leaves (a violation blocks
it), what the verifier enforces on arrival, and what `audit verify` replays from a log. A trace is
a session's steps in order (uplinks, downlinks, guard decisions, a fallback) with the violations
each step raises. Every step is applied whether or not it violated anything, as `audit verify` does,
so one bad step does not hide the next.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specsteer.core import wire
from specsteer.core.contract import SessionState, Violation
from specsteer.core.proto import verifier_pb2 as pb
from specsteer.core.session_types import Method, SessionParams, SteeringVector, Verdict
from tools.conformance import witness_frames
from tools.conformance.common import ConformanceError, category, f32, mismatch, text_form

FILE = "wire/sessions.json"
VOCAB = 32
MAX_TOP_K = 4


def _violations(found: Sequence[Violation]) -> list[dict[str, str]]:
    return [{"area": v.area.value, "breach": v.kind.value, "category": category(v.message)} for v in found]


def apply(state: SessionState, step: dict[str, Any]) -> tuple[list[dict[str, str]], list[str]]:
    """Apply one step to `state` (always advancing it); its violations as vector JSON, and the SDK's sentences."""
    direction = step["dir"]
    if direction == "up":
        found, commit = state.examine_uplink(bytes.fromhex(step["frame_hex"]))
    elif direction == "down":
        found, commit = state.examine_downlink(bytes.fromhex(step["frame_hex"]))
    elif direction == "guard":
        found, commit = state.examine_guard(step["decision"], step["count"], step["placeholder"])
    elif direction == "fallback":
        found, commit = state.examine_fallback(step["reason"])
    else:
        raise ConformanceError(f"{FILE}: unknown step direction {direction!r}")
    commit()
    return _violations(found), [v.message for v in found]


@dataclass
class _Trace:
    name: str
    description: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    intents: list[list[str]] = field(default_factory=list)

    def up(self, raw: bytes, *intent: str) -> _Trace:
        self.steps.append({"dir": "up", "frame_hex": raw.hex(), "frame_text": text_form(pb.Uplink.FromString(raw))})
        self.intents.append(list(intent))
        return self

    def down(self, seq: int, accepted: int, cands: Sequence[tuple[int, ...]] = (), *intent: str) -> _Trace:
        values = tuple(f32(-0.5 * (i + 1)) for i in range(len(cands)))
        steering = SteeringVector(tuple(cands), values) if cands else None
        raw = wire.encode_downlink(seq, Verdict(accepted, steering))
        return self.down_raw(raw, *intent)

    def down_raw(self, raw: bytes, *intent: str) -> _Trace:
        self.steps.append({"dir": "down", "frame_hex": raw.hex(), "frame_text": text_form(pb.Downlink.FromString(raw))})
        self.intents.append(list(intent))
        return self

    def guard(self, decision: str, count: int, placeholder: str, *intent: str) -> _Trace:
        self.steps.append({"dir": "guard", "decision": decision, "count": count, "placeholder": placeholder})
        self.intents.append(list(intent))
        return self

    def fallback(self, reason: str, *intent: str) -> _Trace:
        self.steps.append({"dir": "fallback", "reason": reason})
        self.intents.append(list(intent))
        return self


def _traces() -> list[_Trace]:
    k4 = SessionParams(top_k=4, draft_len=4)
    open_ = wire.encode_open((1, 2, 3), k4)
    rnd, close = wire.encode_round, wire.encode_close
    three = ((3,), (7,), (11,))

    def opened(name: str, description: str, params: SessionParams = k4) -> _Trace:
        return _Trace(name, description).up(wire.encode_open((1, 2, 3), params))

    padded = SessionParams(top_k=4, draft_len=4, padded_frames=True)
    fusion = SessionParams(method=Method.FUSION, draft_len=0, top_k=1)

    request = witness_frames.first_request()
    witness, signature = witness_frames.cosignature()

    def cosig(seq: int) -> bytes:
        return wire.encode_cosignature(seq, witness, signature)

    def fusion_down(seq: int) -> bytes:
        msg = pb.Downlink(seq=seq, fusion=pb.FusionVector(values=b"\x00\x00\x00\x00" * VOCAB))
        return msg.SerializeToString(deterministic=True)

    return [
        opened("steered", "Open; a partly rejected draft and its recovery; a fully accepted draft and its bonus "
                          "token; Close")
        .up(rnd(1, (), (5, 6, 7))).down(1, 1, three)
        .up(rnd(2, (7,), (8, 9))).down(2, 2, ((4,),))
        .up(rnd(3, (4,), (10,))).down(3, 1)
        .up(close(4)),
        opened("padded", "a padded session: every round a PaddedRound of (8, K, 16) slots", padded)
        .up(rnd(1, (), (5, 6), pad_to=4)).down(1, 0, three)
        .up(rnd(2, (3,), (6,), pad_to=4)).down(2, 1)
        .up(close(3)),
        opened("placeholder", "a guard placeholder declared by a guard decision, then carried by one round")
        .guard("placeholder", 1, "<EMAIL>")
        .up(rnd(1, (), (5,), (20, 21))).down(1, 1)
        .up(close(2)),
        opened("prompt-redact", "the prompt guard's decision recorded right after the Open, before any round")
        .guard("prompt-redact", 2, "<EMAIL>")
        .up(rnd(1, (), (5,))).down(1, 1)
        .up(close(2)),
        opened("prompt-decision-after-round", "a prompt guard decision after a round: it cannot have shaped the Open")
        .up(rnd(1, (), (5,))).down(1, 1)
        .guard("prompt-allow", 1, "<EMAIL>", "prompt-decision-order"),
        _Trace("prompt-decision-before-open", "a prompt guard decision on a stream with no Open yet")
        .guard("prompt-redact", 1, "<EMAIL>", "prompt-decision-order"),
        opened("fusion", "a fusion session: a dense vector, then any single token may be committed", fusion)
        .up(rnd(1, (), ())).down_raw(fusion_down(1))
        .up(rnd(2, (17,), ())).down_raw(fusion_down(2))
        .up(rnd(3, (31,), ()))
        .up(close(4)),
        opened("fallback-then-close", "the device finished locally; only a Close may follow")
        .up(rnd(1, (), (5,))).down(1, 0, three)
        .fallback("verifier-unreachable")
        .up(close(2)),
        _Trace("round-before-open", "a Round on a stream with no Open").up(rnd(1, (), (5,)), "no-session"),
        opened("second-open", "a second Open on one stream").up(open_, "second-open"),
        _Trace("empty-prompt", "an Open with no prompt token")
        .up(wire.encode_open((), k4), "empty-prompt"),
        _Trace("top-k-over-vocabulary", f"an Open declaring top-k {VOCAB + 1} over a vocabulary of {VOCAB}")
        .up(wire.encode_open((1,), SessionParams(top_k=VOCAB + 1)), "top-k-over-vocabulary"),
        opened("round-seq-gap", "round 2 where round 1 was expected").up(rnd(2, (), (5,)), "round-seq"),
        opened("round-unanswered", "round 2 sent before round 1 was answered")
        .up(rnd(1, (), (5,))).up(rnd(2, (), (6,)), "round-unanswered"),
        opened("draft-too-long", "a draft of 5 tokens in a session that declared K = 4")
        .up(rnd(1, (), (5, 6, 7, 8, 9)), "draft-too-long"),
        opened("commit-without-candidates", "a commit in the first round, before any candidate came down")
        .up(rnd(1, (3,), (5,)), "commit-without-candidates"),
        opened("commit-not-a-candidate", "a commit that is not one of the last downlink's candidates")
        .up(rnd(1, (), (5, 6))).down(1, 0, three)
        .up(rnd(2, (4,), (6,)), "commit-not-a-candidate"),
        opened("recovery-missing", "after a rejected draft, a round without the recovery commit")
        .up(rnd(1, (), (5, 6))).down(1, 1, three)
        .up(rnd(2, (), (6,)), "recovery-missing"),
        opened("placeholder-undeclared", "a placeholder no guard decision declared")
        .up(rnd(1, (), (5,), (20,)), "placeholder-undeclared"),
        opened("not-padded", "a plain Round in a session that declared padded frames", padded)
        .up(rnd(1, (), (5,)), "not-padded"),
        opened("padding-undeclared", "a PaddedRound in a session that did not declare padded frames")
        .up(rnd(1, (), (5,), pad_to=4), "padding-undeclared"),
        opened("padded-slots", "a PaddedRound of K = 5 slots in a session that declared K = 4", padded)
        .up(rnd(1, (), (5,), pad_to=5), "padded-slots"),
        opened("accepted-over-draft", "a downlink accepting 3 tokens of a 2-token draft")
        .up(rnd(1, (), (5, 6))).down(1, 3, three, "accepted-over-draft"),
        opened("answer-unmatched", "a downlink answering round 2 while round 1 is outstanding")
        .up(rnd(1, (), (5, 6))).down(2, 0, three, "answer-unmatched"),
        opened("too-many-candidates", "5 candidates where k = min(declared top-k 4, the device's cap 4)")
        .up(rnd(1, (), (5, 6))).down(1, 0, ((1,), (2,), (3,), (4,), (5,)), "too-many-candidates"),
        opened("round-after-close", "a Round after Close").up(close(1)).up(rnd(1, (), (5,)), "after-end"),
        opened("close-seq", "a Close whose seq does not follow the last round")
        .up(rnd(1, (), (5,))).down(1, 1).up(close(5), "close-seq"),
        # The witness exchange: one cosignature, alone, answers the Close that asked for it.
        opened("witnessed-close", "a Close carrying the log's checkpoint, answered by the witness's cosignature")
        .up(rnd(1, (), (5, 6))).down(1, 2, ((4,),))
        .up(close(2, request)).down_raw(cosig(2)),
        opened("cosignature-answering-round", "a cosignature where the answer to round 1 is due")
        .up(rnd(1, (), (5,))).down_raw(cosig(1), "cosignature-unasked"),
        opened("cosignature-unasked", "a cosignature answering a Close that carried no witness request")
        .up(rnd(1, (), (5,))).down(1, 1).up(close(2)).down_raw(cosig(2), "cosignature-unasked"),
        opened("cosignature-twice", "a second cosignature after the Close's request was answered")
        .up(close(1, request)).down_raw(cosig(1)).down_raw(cosig(1), "cosignature-unasked"),
        opened("cosignature-wrong-seq", "a cosignature whose seq is not the Close's")
        .up(close(1, request)).down_raw(cosig(2), "cosignature-seq"),
        opened("cosignature-not-alone", "the Close's cosignature beside an accepted count")
        .up(close(1, request))
        .down_raw(pb.Downlink(seq=1, accepted=1, cosignature=pb.Cosignature(witness=witness, signature=signature))
                  .SerializeToString(deterministic=True), "cosignature-not-alone"),
        opened("close-witness-malformed", "a Close whose witness request carries a 31-byte log key")
        .up(close(1, replace(request, log_key=request.log_key[:31])), "witness-log-key-size"),
    ]  # fmt: skip


def build() -> dict[str, Any]:
    vectors = []
    for trace in _traces():
        state = SessionState("conformance", VOCAB, MAX_TOP_K)
        for i, (step, intent) in enumerate(zip(trace.steps, trace.intents, strict=True)):
            step["expected"], messages = apply(state, step)
            got = [v["category"] for v in step["expected"]]
            if got != intent:
                raise ConformanceError(
                    f"session {trace.name!r} step {i} was written to raise {intent}, but the SDK raises {got} "
                    f"({'; '.join(messages)})"
                )
        vectors.append(
            {"name": trace.name, "description": trace.description, "vocab_size": VOCAB, "max_top_k": MAX_TOP_K,
             "steps": trace.steps, "expected_end": {"phase": state.phase.value, "rounds": state.rounds}}
        )  # fmt: skip
    return {"kind": "session-traces", "vectors": vectors}


def check(doc: dict[str, Any]) -> list[str]:
    problems = []
    for v in doc["vectors"]:
        state = SessionState("conformance", v["vocab_size"], v["max_top_k"])
        for i, step in enumerate(v["steps"]):
            got, messages = apply(state, step)
            if got != step["expected"]:
                why = f" (the SDK says: {'; '.join(messages)})" if messages else ""
                problems.append(mismatch(FILE, v["name"], f"step {i} violations", step["expected"], got) + why)
        end = {"phase": state.phase.value, "rounds": state.rounds}
        if end != v["expected_end"]:
            problems.append(mismatch(FILE, v["name"], "end of session", v["expected_end"], end))
    return problems

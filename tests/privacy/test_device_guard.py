"""The egress guard inside the device loop: what reaches the cloud, and what the user gets.

The Specialist is a real (tiny) Llama scripted to copy a private text token by token: the leaky
"verbatim copy" control. The cloud runs the same scripted model as Generalist and generic copy, so
it accepts every draft and its steering leads back onto the script: the only thing deciding what
goes up is the guard. Every round passes through the real wire format.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerFast

from specsteer.audit.log import AuditLog
from specsteer.audit.note import SigningKey
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.verify import verify
from specsteer.core.errors import ProtocolError
from specsteer.core.models import CausalLM
from specsteer.core.session_types import SessionParams, Verdict
from specsteer.privacy.guard import PLACEHOLDERS, GuardPolicy
from specsteer.privacy.report import leakage_report
from specsteer.sdk.context import Profile
from specsteer.sdk.decoding import DecodeOptions, Generation, Specialist, generate
from specsteer.sdk.transport import InProcessSession, InProcessVerifier
from specsteer.sdk.uplink_guard import guard_for_profile, plan_uplink
from specsteer.server.session import CloudVerifier
from tests.tinymodels import scripted_lm
from tests.verifier_harness import make_pki, remote, serve

NAME, EMAIL, PHONE = "Jane Doe", "janedoe@example.org", "(415) 938-2607"
CANARY = "zq7kx9mp3w"
# Each target is a text the Specialist copies; no token may repeat within one (a bigram script).
# Only "verbatim" is in the user's history; the others are caught by their detector alone.
TARGETS = {
    "email": f"For questions write to {EMAIL} or call me",
    "canary": f"The vault combination is {CANARY} so keep it safe.",
    "phone": f"Reach our lead by phone at {PHONE} today.",
    "name": f"Thanks again to {NAME} who reviewed this patch.",
    "verbatim": "Rework how our pager scrolls long diffs after resize events",
}
SECRETS = {"email": EMAIL, "canary": CANARY, "phone": PHONE, "name": NAME, "verbatim": "pager scrolls long diffs"}
PROMPT = "Write the commit message body."
TRAILER = f"Signed-off-by: {NAME} <{EMAIL}>"


def profile_for(case: str) -> Profile:
    body = TARGETS[case] if case == "verbatim" else "Move the retry helper into its own module."
    return Profile.from_obj(
        {
            "user_id": "u-test",
            "profile": [
                {"subject": "Earlier work on the vault", "body": body, "trailers": [TRAILER]},
                {"subject": "Tidy up docs", "body": "Small wording fixes.", "trailers": [TRAILER]},
            ],
        }
    )


@dataclass
class Recorded:
    """What one session put on the wire, round by round: (commit, literal, draft); how many draft
    tokens the cloud accepted, the round frame's bytes, and the guard decisions put on record before it."""

    rounds: list[tuple[list[int], list[int], list[int]]] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    frame_sizes: list[int] = field(default_factory=list)
    decisions: list[list[tuple[str, int, str]]] = field(default_factory=list)

    def committed(self) -> list[int]:
        """The text the cloud committed: each round's commit, placeholder and accepted draft."""
        return [t for (c, lit, d), n in zip(self.rounds, self.accepted, strict=True) for t in (*c, *lit, *d[:n])]

    def uplink_text(self, tok: PreTrainedTokenizerFast) -> str:
        return tok.decode([t for c, lit, d in self.rounds for t in (*c, *lit, *d)], skip_special_tokens=True)


class RecordingVerifier:
    """The in-process verifier, keeping every round's uplink tokens (for asserting what left)."""

    def __init__(self, cloud: CloudVerifier, vocab_size: int) -> None:
        self.inner = InProcessVerifier(cloud.open, vocab_size=vocab_size)
        self.sessions: list[Recorded] = []
        self.opened: list[InProcessSession] = []

    def open(self, prompt_ids: Sequence[int], params: SessionParams) -> InProcessSession:
        session = self.inner.open(prompt_ids, params)
        record = Recorded()
        self.sessions.append(record)
        self.opened.append(session)
        real_round, real_decision = session.round, session.guard_decision
        decided: list[tuple[str, int, str]] = []

        def round_(commit: Sequence[int], draft: Sequence[int], literal: Sequence[int] = ()) -> Verdict:
            record.rounds.append((list(commit), list(literal), list(draft)))
            record.decisions.append(decided.copy())
            decided.clear()
            before = session.uplink_bytes
            verdict = real_round(commit, draft, literal)
            record.frame_sizes.append(session.uplink_bytes - before)
            record.accepted.append(verdict.accepted)
            return verdict

        def decision(decision: str, count: int, placeholder: str) -> None:
            decided.append((decision, count, placeholder))
            real_decision(decision, count, placeholder)

        session.round = round_  # type: ignore[method-assign]
        session.guard_decision = decision  # type: ignore[method-assign]
        return session


def scripted_pair(tok: PreTrainedTokenizerFast, target: str, profile: Profile) -> tuple[Specialist, CausalLM]:
    """A Specialist scripted to write `target` after the private prompt (its own cloud copy included)."""
    probe = Specialist(scripted_lm(tok, {}), profile)
    last = probe.private_prompt_ids(PROMPT, with_context=True)[-1]
    ids = tok.encode(target, add_special_tokens=False)
    assert len(set(ids)) == len(ids) and last not in ids, f"the script of {target!r} repeats a token"
    chain = [last, *ids, tok.eos_token_id]
    lm = scripted_lm(tok, dict(itertools.pairwise(chain)))
    # The cloud's prompt (no context) must end in the same token for it to follow the script too.
    assert Specialist(lm).private_prompt_ids(PROMPT, with_context=False)[-1] == last
    return Specialist(lm, profile), lm


def run(
    tok: PreTrainedTokenizerFast, case: str, policy: GuardPolicy | None, **params: object
) -> tuple[Generation, RecordingVerifier]:
    profile = profile_for(case)
    specialist, lm = scripted_pair(tok, TARGETS[case], profile)
    verifier = RecordingVerifier(CloudVerifier(lm, lm, seed=0), lm.vocab_size)
    guard = None if policy is None else guard_for_profile(profile, tok, policy, canaries=[CANARY])
    out = generate(specialist, PROMPT, SessionParams(**params), DecodeOptions(max_new_tokens=48), verifier, guard=guard)
    return out, verifier


@pytest.mark.parametrize("case", sorted(TARGETS))
def test_leaky_control_sends_the_secret_when_the_guard_is_off(smol_tok, case: str) -> None:
    out, verifier = run(smol_tok, case, None)
    assert out.text == TARGETS[case] and out.stats.fallback is None
    assert SECRETS[case] in verifier.sessions[0].uplink_text(smol_tok)  # the test can see a leak


@pytest.mark.parametrize("case", sorted(TARGETS))
@pytest.mark.parametrize("draft_len", [1, 4, 8])
def test_placeholder_keeps_device_and_cloud_in_step(smol_tok, case: str, draft_len: int) -> None:
    out, verifier = run(smol_tok, case, GuardPolicy.PLACEHOLDER, draft_len=draft_len)
    # The generation completes on the cloud path, and the user's text holds the real span...
    assert out.stats.fallback is None
    assert out.text == TARGETS[case]
    assert out.stats.extra.get("guard_placeholder", 0) >= 1
    # ...while the cloud got the placeholder, never the span (nor any piece of it long enough to matter).
    sent = verifier.sessions[0].uplink_text(smol_tok)
    assert SECRETS[case] not in sent
    assert any(p in sent for p in PLACEHOLDERS.values())
    # Every placeholder on the wire was declared by a guard decision (what the audit log checks).
    literal_rounds = [r for r in verifier.sessions[0].rounds if r[1]]
    declared = [d for d in verifier.opened[0].guard_decisions if d[0] == "placeholder"]
    assert len(literal_rounds) == len(declared) >= 1


@pytest.mark.parametrize("case", sorted(TARGETS))
def test_keep_local_finishes_on_the_device(smol_tok, case: str) -> None:
    out, verifier = run(smol_tok, case, GuardPolicy.KEEP_LOCAL)
    assert out.text == TARGETS[case]
    assert out.stats.fallback == "guard-keep-local"
    assert verifier.opened[0].ended_locally == "guard-keep-local"
    assert SECRETS[case] not in verifier.sessions[0].uplink_text(smol_tok)
    # Cuts may come first (the span inside a draft); keep-local once it reaches the front.
    assert [d[0] for d in verifier.opened[0].guard_decisions if d[0] != "cut"] == ["keep-local"]


def test_guard_passes_clean_text_untouched(smol_tok) -> None:
    """A draft with nothing sensitive goes up exactly as without a guard (no cut, no extra round)."""
    target = "Fix the flaky retry loop in fetch tests."
    profile = Profile.from_obj({"profile": [{"subject": "Earlier", "body": "Unrelated history entry."}]})
    specialist, lm = scripted_pair(smol_tok, target, profile)
    results = []
    for guard in (None, guard_for_profile(profile, smol_tok, GuardPolicy.PLACEHOLDER)):
        verifier = RecordingVerifier(CloudVerifier(lm, lm, seed=0), lm.vocab_size)
        out = generate(specialist, PROMPT, SessionParams(), DecodeOptions(max_new_tokens=32), verifier, guard=guard)
        results.append((out.text, verifier.sessions[0].rounds, out.stats.extra))
    assert results[0][:2] == results[1][:2]
    # Trailing words are held while the device drafts a token or two further (a word may be an
    # address's local part), but nothing is cut or replaced.
    counters = ("guard_lookahead_tokens", "guard_checks")
    assert not any(k.startswith("guard_") and k not in counters for k in results[1][2])
    # One check a round, and one more for each token looked ahead (what bench.speed's model prices).
    rounds = len(results[1][1])
    assert results[1][2]["guard_checks"] == rounds + results[1][2].get("guard_lookahead_tokens", 0)
    assert "guard_checks" not in results[0][2]


def test_plan_cuts_a_draft_before_a_span_and_sends_the_clean_prefix(smol_tok) -> None:
    profile = profile_for("email")
    guard = guard_for_profile(profile, smol_tok, GuardPolicy.PLACEHOLDER).for_prompt(PROMPT)
    ids = smol_tok.encode(TARGETS["email"], add_special_tokens=False)
    at = next(i for i in range(len(ids)) if "jane" in smol_tok.decode(ids[: i + 1]))
    plan = plan_uplink(guard, smol_tok, [], [], ids[: at + 6], more=lambda: None, eos_ids=frozenset(), draft_len=8)
    assert 0 < len(plan.draft) <= at and plan.decisions == [("cut", 1, "<EMAIL>")]
    assert EMAIL[:4] not in smol_tok.decode(plan.draft)


def test_cloud_session_bounds_and_uses_the_placeholder(smol_tok) -> None:
    profile = profile_for("email")
    _, lm = scripted_pair(smol_tok, TARGETS["email"], profile)
    cloud = CloudVerifier(lm, lm, seed=0)
    prompt = smol_tok.encode(PROMPT, add_special_tokens=False)
    session = cloud.open(prompt, SessionParams())
    with pytest.raises(ProtocolError, match="placeholder has at most 16"):
        session.round([], [], [5] * 17)
    # An empty draft obliges the next round to commit a recovery; a placeholder stands in for it.
    session.round([], [], [])
    with pytest.raises(ProtocolError, match="must commit"):
        session.round([], [7])
    assert session.round([], [7], smol_tok.encode("<EMAIL>", add_special_tokens=False)).accepted in (0, 1)


def test_over_tls_the_audit_log_proves_every_placeholder_was_declared(tmp_path: Path, smol_tok) -> None:
    """Real gRPC + TLS + audit log: `audit verify` passes and reports the guard's totals, and the
    leakage report over what the cloud received finds the identity only when the guard is off."""
    profile = profile_for("email")
    specialist, lm = scripted_pair(smol_tok, TARGETS["email"], profile)
    guard = guard_for_profile(profile, smol_tok, GuardPolicy.PLACEHOLDER)
    pki = make_pki(tmp_path)
    key = SigningKey.generate("device.test/guard")
    data = tmp_path / "users.jsonl"
    data.write_text(
        '{"user_id": "u-test", "profile": [{"subject": "s", "body": "b", "trailers": ["' + TRAILER + '"]}]}\n'
    )
    reports = {}
    with serve(CloudVerifier(lm, lm, seed=0, max_top_k=64), pki) as (_, port):
        for label, g in (("on", guard), ("off", None)):
            with (
                AuditLog.open(tmp_path / label, key) as log,
                remote(port, pki, vocab_size=lm.vocab_size, tap=EgressRecorder(log)) as verifier,
            ):
                out = generate(specialist, PROMPT, SessionParams(), DecodeOptions(max_new_tokens=48), verifier, guard=g)
            assert out.text == TARGETS["email"] and out.stats.fallback is None
            report = verify(tmp_path / label, key=key.verifier)
            reports[label] = (report, leakage_report(data=data, audit_log=tmp_path / label, tokenizer=smol_tok))
    on, off = reports["on"], reports["off"]
    assert ("placeholder", "<EMAIL>") in {(d, p) for d, p, _ in on[0].guard}
    assert "Egress guard: " in on[0].render() and "placeholder <EMAIL>" in on[0].render()
    assert off[0].guard == ()
    assert on[1]["identity_hits"] == {} and on[1]["pattern_hits"] == {}
    assert off[1]["identity_hits"].get("email", 0) >= 1  # the report sees the leak of the control run


@pytest.mark.parametrize("draft_len", [1, 4, 8])
def test_an_address_local_part_never_goes_up_before_its_at(smol_tok, draft_len: int) -> None:
    """The email hazard used to start at the "@", so a device drafting
    "kit_marlowe" sent it in the rounds before (the cloud got `kit_marlowe<EMAIL>`)."""
    target = "For questions write to kit_marlowe@example.net or call me"
    profile = profile_for("email")
    specialist, lm = scripted_pair(smol_tok, target, profile)
    verifier = RecordingVerifier(CloudVerifier(lm, lm, seed=0), lm.vocab_size)
    guard = guard_for_profile(profile, smol_tok, GuardPolicy.PLACEHOLDER)
    params = SessionParams(draft_len=draft_len)
    out = generate(specialist, PROMPT, params, DecodeOptions(max_new_tokens=48), verifier, guard=guard)
    sent = verifier.sessions[0].uplink_text(smol_tok)
    assert "<EMAIL>" in sent and out.stats.fallback is None
    assert "marlowe" not in sent and "kit" not in sent
    if draft_len > 1:
        # (With K = 1 the scripted cloud, which has no script after "<EMAIL>", steers this text
        # elsewhere after the address; the uplink still never carries it.)
        assert out.text == target
        assert "call me" in sent  # the rest of the text still goes up


def test_a_hold_at_the_end_of_the_budget_is_decided_as_final(smol_tok) -> None:
    """The last word of a budget-limited text could be an address's local part, but nothing more
    will be written: it goes up instead of becoming a placeholder. A written "@" still holds."""
    profile = profile_for("email")
    guard = guard_for_profile(profile, smol_tok, GuardPolicy.PLACEHOLDER).for_prompt(PROMPT)
    ids = smol_tok.encode("Fix the retry loop", add_special_tokens=False)
    plan = plan_uplink(guard, smol_tok, [], [], ids, more=lambda: None, eos_ids=frozenset(), draft_len=8)
    assert plan.draft == ids and plan.decisions == []
    # With the budget not spent, the same tail is held while the device drafts further.
    tail = iter(smol_tok.encode(" now.", add_special_tokens=False))
    plan = plan_uplink(guard, smol_tok, [], [], ids, more=lambda: next(tail, None), eos_ids=frozenset(), draft_len=8)
    assert plan.draft == ids and plan.lookahead >= 1
    # "kit_marlowe@example" at the budget's end is no complete address, but it fails closed.
    ids = smol_tok.encode("Write to kit_marlowe@example", add_special_tokens=False)
    plan = plan_uplink(guard, smol_tok, [], [], ids, more=lambda: None, eos_ids=frozenset(), draft_len=8)
    assert "marlowe" not in smol_tok.decode(plan.draft) and plan.decisions == [("cut", 1, "<EMAIL>")]


def test_a_full_width_address_split_into_byte_tokens_never_goes_up(smol_tok) -> None:
    """Each full-width character is three byte tokens: the guard folds the text, holds a token that
    ends inside a character, and sends nothing of the address (not even one byte of it)."""
    text = "Ask ｍａｒｉｓｏｌ．ｂｒｉｇｈｔｗａｔｅｒ＠ｅｘａｍｐｌｅ．ｉｎｖａｌｉｄ now."
    guard = guard_for_profile(profile_for("email"), smol_tok, GuardPolicy.PLACEHOLDER).for_prompt(PROMPT)
    eos = smol_tok.eos_token_id
    ids = [*smol_tok.encode(text, add_special_tokens=False), eos]
    sent: list[int] = []
    p = 0
    while p < len(ids):
        script = iter(ids[p + 4 :])
        plan = plan_uplink(
            guard,
            smol_tok,
            ids[:p],
            [],
            ids[p : p + 4],
            more=lambda s=script: next(s, None),
            eos_ids=frozenset({eos}),
            draft_len=4,
        )
        sent += plan.draft
        p += plan.kept
    uplink = smol_tok.decode(sent, skip_special_tokens=True)
    assert uplink.startswith("Ask") and uplink.endswith("now.")
    assert "\ufffd" not in uplink and not any("\uff00" <= c <= "\uffef" for c in uplink)

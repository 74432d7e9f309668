"""The prompt, guarded (issue #49, finding 6): what of a prompt goes up in the Open.

The Specialist is a real (tiny) Llama scripted to write a text; the cloud runs the same scripted
model, so it accepts every draft. The prompt carries a name the profile registers (a trailer) and
a secret the history states in prose: under the default policy the Open carries placeholders, the
device's final text has the real spans, the audit log records the decision, and `audit verify`
passes it.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerFast

from specsteer.audit.log import AuditLog
from specsteer.audit.note import SigningKey
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.verify import VERIFIED, verify
from specsteer.core.contract import SessionState
from specsteer.core.models import CausalLM
from specsteer.core.session_types import SessionParams
from specsteer.privacy.data import read_uplinks
from specsteer.privacy.guard import GuardPolicy
from specsteer.privacy.report import leakage_report
from specsteer.sdk.context import Profile
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.prompt_guard import PromptRefused, guard_prompt
from specsteer.sdk.uplink_guard import guard_for_profile
from specsteer.server.session import CloudSession, CloudVerifier
from tests.privacy.test_device_guard import RecordingVerifier
from tests.tinymodels import scripted_lm
from tests.verifier_harness import make_pki, remote, serve

NAME, EMAIL, SECRET = "Jane Doe", "janedoe@example.org", "Fjordlys-2291"
PROMPT = f"Write a note to {NAME}: the cabin wifi password is {SECRET} now."
PLANTED = ("Jane", "Doe", "Fjordlys", "2291")


USER = {
    "user_id": "u-test",
    "profile": [
        {
            "subject": "Cabin notes",
            "body": f"Wifi at the cabin: password is {SECRET}. Keep the router on.",
            "trailers": [f"Signed-off-by: {NAME} <{EMAIL}>"],
        },
        {"subject": "Tidy up docs", "body": "Small wording fixes.", "trailers": []},
    ],
}


def profile() -> Profile:
    return Profile.from_obj(USER)


def scripted(tok: PreTrainedTokenizerFast, target: str, prof: Profile) -> tuple[Specialist, CausalLM]:
    """A Specialist scripted to write `target` after its private prompt (its cloud copy too)."""
    probe = Specialist(scripted_lm(tok, {}), prof)
    last = probe.private_prompt_ids(PROMPT, with_context=True)[-1]
    ids = tok.encode(target, add_special_tokens=False)
    assert len(set(ids)) == len(ids) and last not in ids, f"the script of {target!r} repeats a token"
    lm = scripted_lm(tok, dict(itertools.pairwise([last, *ids, tok.eos_token_id])))
    return Specialist(lm, prof), lm


class CapturingCloud(CloudVerifier):
    """The server's verifier, keeping the prompt IDs each Open brought (what the server received)."""

    prompts: list[list[int]]

    def open(self, prompt_ids: Sequence[int], params: SessionParams, **kw: object) -> CloudSession:  # type: ignore[override]
        self.prompts.append(list(prompt_ids))
        return super().open(prompt_ids, params, **kw)  # type: ignore[arg-type]


def test_plan_replaces_the_registered_name_and_the_prose_secret(smol_tok) -> None:
    guard = guard_for_profile(profile(), smol_tok, GuardPolicy.PLACEHOLDER, labels="generic")
    plan = guard_prompt(guard, PROMPT)
    assert not any(p in plan.public for p in PLANTED), plan.public
    assert "<PRIVATE_1>" in plan.public and "<PRIVATE_2>" in plan.public
    assert plan.restore(plan.public) == PROMPT
    assert plan.decisions() == [("prompt-redact", 2, "<PRIVATE>")]
    assert guard_prompt(guard, PROMPT, "allow").public == PROMPT
    with pytest.raises(PromptRefused, match=r"2 sensitive span\(s\).*nothing was sent"):
        guard_prompt(guard, PROMPT, "refuse")
    # A prompt naming the user's own code is the request itself: it goes up as typed.
    clean = "Write the commit body for: Inline mmapped_ref_iterator into packed_ref_iterator"
    assert guard_prompt(guard, clean).public == clean and guard_prompt(guard, clean).decisions() == []


def test_over_tls_the_open_carries_placeholders_and_the_text_gets_the_spans_back(tmp_path: Path, smol_tok) -> None:
    """Must show (#49): the server receives placeholders only, the device's text has the real
    spans, the log records the decision, `audit verify` says VERIFIED, the leakage report counts it."""
    prof = profile()
    # The device writes the name (its Specialist read the real prompt: the egress guard holds it)
    # and a placeholder where the cloud steered it (the Generalist only knows the placeholders).
    specialist, lm = scripted(smol_tok, f"Dear {NAME}, the wifi is <PRIVATE_2> again.", prof)
    guard = guard_for_profile(prof, smol_tok, GuardPolicy.PLACEHOLDER, labels="generic")
    pki = make_pki(tmp_path)
    key = SigningKey.generate("device.test/prompt")
    cloud = CapturingCloud(lm, lm, seed=0, max_top_k=64)
    cloud.prompts = []
    with (
        serve(cloud, pki, transcript_dir=tmp_path / "transcripts") as (_, port),
        AuditLog.open(tmp_path / "log", key) as log,
        remote(port, pki, vocab_size=lm.vocab_size, tap=EgressRecorder(log)) as verifier,
    ):
        out = generate(specialist, PROMPT, SessionParams(), DecodeOptions(max_new_tokens=48), verifier, guard=guard)
    assert out.text == f"Dear {NAME}, the wifi is {SECRET} again.", out.text
    assert out.stats.extra["guard_prompt_redact"] == 2
    received = smol_tok.decode(cloud.prompts[0])
    assert "<PRIVATE_1>" in received and "<PRIVATE_2>" in received
    uplinks = read_uplinks(tmp_path / "log", server_transcript=tmp_path / "transcripts" / "server-transcript.jsonl")
    assert uplinks.logged == uplinks.received > 1
    sent = "".join(
        smol_tok.decode([*s.prompt_ids, *(t for r in s.device_tokens() for t in r)]) for s in uplinks.sessions
    )
    assert not any(p in sent or p in received for p in PLANTED), sent
    report = verify(tmp_path / "log", key=key.verifier)
    assert report.verdict == VERIFIED, report.render()
    assert ("prompt-redact", "<PRIVATE>", 2) in report.guard
    data = tmp_path / "users.jsonl"
    data.write_text(json.dumps(USER) + "\n")
    leaks = leakage_report(data=data, audit_log=tmp_path / "log", tokenizer=smol_tok)
    assert leaks["prompt_decisions"] == {"prompt-redact": 2}
    assert leaks["prompt_hits"] == {} and leaks["prompt_hits_unaccounted"] == {}
    assert leaks["identity_hits"] == {} and leaks["detector_hits"] == {}


def test_refuse_opens_no_session_and_allow_is_on_record(smol_tok) -> None:
    prof = profile()
    specialist, lm = scripted(smol_tok, "Noted, see you.", prof)
    guard = guard_for_profile(prof, smol_tok, GuardPolicy.PLACEHOLDER, labels="generic")
    verifier = RecordingVerifier(CloudVerifier(lm, lm, seed=0), lm.vocab_size)
    options = DecodeOptions(max_new_tokens=16)
    with pytest.raises(PromptRefused, match="nothing was sent"):
        generate(specialist, PROMPT, SessionParams(), options, verifier, guard=guard, prompt_guard="refuse")
    assert verifier.sessions == []
    out = generate(specialist, PROMPT, SessionParams(), options, verifier, guard=guard, prompt_guard="allow")
    assert out.text == "Noted, see you." and verifier.opened[0].guard_decisions[0] == ("prompt-allow", 2, "<PRIVATE>")


def test_a_prompt_decision_is_on_record_only_between_the_open_and_the_first_round() -> None:
    state = SessionState("0" * 32, vocab_size=100, max_top_k=4)
    violations, _ = state.examine_guard("prompt-redact", 1, "<PRIVATE>")
    assert any("before the Open" in v.message for v in violations)
    state.rounds_contract.after_open(4, False)
    assert state.examine_guard("prompt-redact", 1, "<PRIVATE>")[0] == []
    state.rounds_contract.rounds = 1
    assert any("after round 1" in v.message for v in state.examine_guard("prompt-allow", 1, "<PRIVATE>")[0])

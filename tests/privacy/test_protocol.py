"""Placeholder substitution keeps device and cloud in step; the leaky control is detected;
with the guard on, no planted canary or profile identity reaches the uplink (fixture users).

Every run is the real device loop (`sdk.decoding.generate` with `sdk.uplink_guard`) through the wire
format, in process. The Specialist is a real (tiny) Llama scripted to copy a fixture user's private
text token by token (the deliberately leaky "verbatim copy" control: private history, identities,
canaries), and the cloud accepts every draft and offers every token of that text as a candidate,
so the device's text is the copy and the only thing deciding what goes up is the guard.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from transformers import PreTrainedTokenizerFast

from specsteer.core.models import CausalLM
from specsteer.core.session_types import SessionParams
from specsteer.privacy.data import read_users
from specsteer.privacy.guard import EgressGuard, GuardPolicy
from specsteer.privacy.leakage import CanarySpace, canary_scores, exposure, size_channel
from specsteer.privacy.pii import PiiDetector
from specsteer.sdk.decoding import DecodeOptions, Generation, Specialist, generate
from specsteer.server.session import CloudVerifier
from tests.privacy.test_device_guard import Recorded, RecordingVerifier
from tests.tinymodels import positional_lm, uniform_lm

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "users.jsonl"
PHONE = "+1 415 555 0132"


def leaky_target(user_index: int, canary: str) -> tuple[str, dict[str, str], list[str]]:
    """What a Specialist copying its private context would write: history, identities, canary."""
    user = read_users(FIXTURES)[user_index]
    idents = user.trailer_identities()
    name = next(s for s, k in idents.items() if k == "name")
    email = next(s for s, k in idents.items() if k == "email")
    body = user.stored_entries[3]["body"]
    text = (
        f"{body}\n\nIf anything breaks, call me on {PHONE} or write to {email}.\n"
        f"{canary}\n\nSigned-off-by: {name} <{email}>\n"
    )
    return text, idents, user.history_texts()


def build_guard(tok: PreTrainedTokenizerFast, user_index: int, canary: str, policy: GuardPolicy) -> EgressGuard:
    user = read_users(FIXTURES)[user_index]
    return EgressGuard.for_profile(
        user.history_texts(), tok, identities=user.trailer_identities(), canaries=[canary], policy=policy
    ).for_prompt(prompt_of(user_index))


def prompt_of(user_index: int) -> str:
    """The public prompt of a fixture user's session (their first query)."""
    return str(read_users(FIXTURES)[user_index].queries[0]["subject"])


def copying_pair(tok: PreTrainedTokenizerFast, target: list[int], prompt: str) -> tuple[CausalLM, CausalLM]:
    """(Specialist, cloud model): the Specialist writes `target` after `prompt`, then ends; the cloud
    (Generalist and generic copy at once, `CloudVerifier(cloud, cloud)`) accepts every draft and
    sends every token of `target` as a candidate (with `SessionParams(top_k=candidates(...))`)."""
    specialist = positional_lm(tok, {})
    prefix = len(Specialist(specialist).private_prompt_ids(prompt, with_context=False))
    # The logits after the first `prefix` tokens (at position prefix - 1) choose the first written token.
    specialist.model.script = dict(enumerate([*target, tok.eos_token_id], start=prefix - 1))
    return specialist, uniform_lm(tok, [*target, tok.eos_token_id], name="cloud")


def candidates(tok: PreTrainedTokenizerFast, target: list[int]) -> int:
    """The steering k that offers every token the copy may need: its distinct tokens and the end."""
    return len({*target, tok.eos_token_id})


@dataclass
class Copied:
    """One generation of the copy: the user's text (`real`), what went up round by round, and the
    guard's decisions (the last one may be keep-local, after the last round)."""

    out: Generation
    record: Recorded
    decisions: list[tuple[str, int, str]]

    @property
    def real(self) -> list[int]:
        return self.out.token_ids

    @property
    def cloud(self) -> list[int]:
        """What the cloud committed (every round's commit, placeholder and accepted draft)."""
        return self.record.committed()

    @property
    def sent(self) -> list[list[int]]:
        """The tokens each round put on the wire: commit, placeholder, draft."""
        return [[*c, *lit, *d] for c, lit, d in self.record.rounds]

    def uplink_text(self, tok: PreTrainedTokenizerFast) -> str:
        return self.record.uplink_text(tok)


def copy_text(
    tok: PreTrainedTokenizerFast, target: list[int], guard: EgressGuard | None, prompt: str, **params: object
) -> Copied:
    """The real device loop over the copy of `target`, in process; the cloud accepts every draft."""
    specialist, cloud = copying_pair(tok, target, prompt)
    verifier = RecordingVerifier(CloudVerifier(cloud, cloud, seed=0), cloud.vocab_size)
    session = SessionParams(top_k=candidates(tok, target), **params)  # type: ignore[arg-type]
    options = DecodeOptions(max_new_tokens=len(target) + 1)
    out = generate(Specialist(specialist), prompt, session, options, verifier, guard=guard)
    record = verifier.sessions[0]
    assert record.accepted == [len(d) for _, _, d in record.rounds]  # the cloud accepted every draft
    return Copied(out, record, list(verifier.opened[0].guard_decisions))


@pytest.mark.parametrize("tok_name", ["char_tok", "smol_tok"])
def test_placeholder_keeps_device_and_cloud_in_step(tok_name: str, request: pytest.FixtureRequest) -> None:
    tok = request.getfixturevalue(tok_name)
    canary = "my PIN is 402913"
    text, idents, _ = leaky_target(0, canary)
    target = tok.encode(text, add_special_tokens=False)
    result = copy_text(tok, target, build_guard(tok, 0, canary, GuardPolicy.PLACEHOLDER), prompt_of(0))

    # Generation completes on the cloud path and the user's text holds every real span...
    assert result.real == target and result.out.stats.fallback is None
    real_text = tok.decode(result.real)
    assert canary in real_text and PHONE in real_text
    # ... while the cloud's committed text and everything sent hold placeholders instead.
    cloud_text = tok.decode(result.cloud)
    uplink = result.uplink_text(tok)
    for secret in [canary, PHONE, *idents]:
        assert secret not in cloud_text and secret not in uplink
    assert "<SECRET>" in cloud_text and "<PHONE>" in cloud_text and "<EMAIL>" in cloud_text
    assert PiiDetector().find(uplink) == []
    # The two views agree up to the first replaced span, and each replacement left one placeholder.
    placed = [p for d, _, p in result.decisions if d == "placeholder"]
    first = min(cloud_text.find(p) for p in placed)
    # (The first placeholder may open the text: the look-ahead that resolves a trailing word's
    # hold can show that the draft starts a verbatim history run.)
    assert first >= 0 and real_text[:first] == cloud_text[:first]
    assert sum(cloud_text.count(p) for p in set(placed)) == len(placed)
    kinds = set(placed)
    assert {"<PHONE>", "<EMAIL>", "<SECRET>", "<PRIVATE>"} <= kinds


def test_keep_local_sends_nothing_from_the_first_span_on(char_tok: PreTrainedTokenizerFast) -> None:
    canary = "my PIN is 402913"
    text, _, _ = leaky_target(1, canary)
    target = char_tok.encode(text, add_special_tokens=False)
    result = copy_text(char_tok, target, build_guard(char_tok, 1, canary, GuardPolicy.KEEP_LOCAL), prompt_of(1))
    assert result.real == target and result.out.stats.fallback == "guard-keep-local"
    sent = [t for s in result.sent for t in s]
    local_tail = result.real[len(sent) :]  # what the device wrote after the session ended
    assert result.decisions[-1][0] == "keep-local" and local_tail
    assert sent == target[: len(sent)]  # a clean prefix of the text, nothing substituted
    assert len(sent) + len(local_tail) == len(target)


@pytest.mark.parametrize("user_index", [0, 1, 2])
def test_fixture_users_guard_on_leaks_nothing_and_the_leaky_control_is_caught(
    user_index: int, smol_tok: PreTrainedTokenizerFast
) -> None:
    space = CanarySpace()
    rng = np.random.default_rng(user_index)
    secret = space.sample(rng)[0]
    canary = space.render(secret)
    text, idents, history = leaky_target(user_index, canary)
    target = smol_tok.encode(text, add_special_tokens=False)
    rivals = space.sample(rng, 500, exclude=[secret])

    def measure(result: Copied) -> tuple[float, int, int]:
        uplink = result.uplink_text(smol_tok)
        e = exposure(canary_scores(space, [secret], uplink)[0], canary_scores(space, rivals, uplink), space.size)
        ident_hits = sum(uplink.count(s) for s in idents)
        pii_hits = len(PiiDetector().find(uplink))
        return e, ident_hits, pii_hits

    leaky = copy_text(smol_tok, target, None, prompt_of(user_index))
    e_off, ident_off, pii_off = measure(leaky)
    # The control proves the test can see a leak: the canary is singled out, identities are there.
    assert e_off > space.bits - 1
    assert ident_off >= 3 and pii_off >= 2

    guarded = copy_text(
        smol_tok, target, build_guard(smol_tok, user_index, canary, GuardPolicy.PLACEHOLDER), prompt_of(user_index)
    )
    e_on, ident_on, pii_on = measure(guarded)
    assert ident_on == 0 and pii_on == 0
    assert canary not in guarded.uplink_text(smol_tok)
    # Without the canary on the wire its rivals tie with it at best: exposure of a coin flip or so.
    assert e_on < 4.0
    # And no verbatim run of 8+ history tokens went up.
    from specsteer.privacy.ngrams import VerbatimNgramDetector

    det = VerbatimNgramDetector.from_texts(history, smol_tok, n=8).for_prompt(prompt_of(user_index))
    # Rounds are shorter than 8 tokens, so look at the stream the cloud committed, across rounds.
    assert det.find_ids(guarded.cloud) == []
    assert sum(b - a for a, b in det.find_ids(leaky.cloud)) > 40


def test_draft_lengths_leak_through_frame_sizes_and_padding_closes_it(char_tok: PreTrainedTokenizerFast) -> None:
    """Guard cuts shorten drafts, so frame sizes reveal that a span was near; padded frames do not."""
    canary = "my PIN is 402913"
    text, _, _ = leaky_target(2, canary)
    # The body's last sentence or so and what the leak adds after it: the channel is in the rounds
    # around the spans, and each character is a round of two tiny models (the whole body took a minute).
    text = text[text.index("If anything breaks") - 160 :]
    target = char_tok.encode(text, add_special_tokens=False)
    guard = build_guard(char_tok, 2, canary, GuardPolicy.PLACEHOLDER)
    result = copy_text(char_tok, target, guard, prompt_of(2))
    # Secret label per round: did the guard act on the text this round carries (a cut or a
    # placeholder put on record before it), or is its draft short of K = 4 (the text's end)?
    # (The hold every trailing word gets as a possible address local part is no decision.)
    near = [
        int(bool(decided) or len(d) != 4)
        for decided, (_, _, d) in zip(result.record.decisions, result.record.rounds, strict=True)
    ]
    sizes = result.record.frame_sizes
    assert size_channel(sizes, near).mutual_information_bits > 0.05
    # The wire's own padded codec: the same copy in a session that declared padded_frames (K = 4).
    padded = copy_text(char_tok, target, guard, prompt_of(2), padded_frames=True)
    assert padded.real == result.real and padded.record.rounds == result.record.rounds
    assert len(set(padded.record.frame_sizes)) == 1
    assert size_channel(padded.record.frame_sizes, near).mutual_information_bits == 0.0


def test_fixture_file_is_what_the_tests_assume() -> None:
    users = [json.loads(line) for line in FIXTURES.read_text().splitlines()]
    assert len(users) == 3 and all(u["profile"][0]["trailers"] for u in users)

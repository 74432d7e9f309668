"""Placeholder substitution keeps device and cloud in step; the leaky control is detected;
with the guard on, no planted canary or profile identity reaches the uplink (fixture users)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from transformers import PreTrainedTokenizerFast

from privacy.data import read_users
from privacy.detectors import EgressGuard, PiiDetector, Policy
from privacy.leakage import CanarySpace, canary_scores, exposure, size_channel
from tests.privacy import sim

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "users.jsonl"
PHONE = "+1 415 555 0132"


def leaky_target(user_index: int, canary: str) -> tuple[str, dict[str, str], list[str]]:
    """What a Specialist copying its private context would write: history, identities, canary."""
    user = read_users(FIXTURES)[user_index]
    idents = user.identities()
    name = next(s for s, k in idents.items() if k == "name")
    email = next(s for s, k in idents.items() if k == "email")
    body = user.profile[3]["body"]
    text = (
        f"{body}\n\nIf anything breaks, call me on {PHONE} or write to {email}.\n"
        f"{canary}\n\nSigned-off-by: {name} <{email}>\n"
    )
    return text, idents, user.history_texts()


def build_guard(tok: PreTrainedTokenizerFast, user_index: int, canary: str, policy: Policy) -> EgressGuard:
    user = read_users(FIXTURES)[user_index]
    return EgressGuard.for_profile(
        user.history_texts(), tok, identities=user.identities(), canaries=[canary], policy=policy
    ).for_prompt(user.queries[0]["subject"])


@pytest.mark.parametrize("tok_name", ["char_tok", "smol_tok"])
def test_placeholder_keeps_device_and_cloud_in_step(tok_name: str, request: pytest.FixtureRequest) -> None:
    tok = request.getfixturevalue(tok_name)
    canary = "my PIN is 402913"
    text, idents, _ = leaky_target(0, canary)
    target = tok.encode(text, add_special_tokens=False)
    result = sim.run(target, tok, build_guard(tok, 0, canary, Policy.PLACEHOLDER))

    # Generation completes and the user's text holds every real span...
    assert result.real == target
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
    result = sim.run(target, char_tok, build_guard(char_tok, 1, canary, Policy.KEEP_LOCAL))
    assert result.real == target
    assert result.decisions[-1][0] == "keep-local" and result.local_tail
    sent = [t for s in result.sent for t in s]
    assert sent == target[: len(sent)]  # a clean prefix of the text, nothing substituted
    assert len(sent) + len(result.local_tail) == len(target)


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

    def measure(result: sim.Run) -> tuple[float, int, int]:
        uplink = result.uplink_text(smol_tok)
        e = exposure(canary_scores(space, [secret], uplink)[0], canary_scores(space, rivals, uplink), space.size)
        ident_hits = sum(uplink.count(s) for s in idents)
        pii_hits = len(PiiDetector().find(uplink))
        return e, ident_hits, pii_hits

    leaky = sim.run(target, smol_tok, None)
    e_off, ident_off, pii_off = measure(leaky)
    # The control proves the test can see a leak: the canary is singled out, identities are there.
    assert e_off > space.bits - 1
    assert ident_off >= 3 and pii_off >= 2

    guarded = sim.run(target, smol_tok, build_guard(smol_tok, user_index, canary, Policy.PLACEHOLDER))
    e_on, ident_on, pii_on = measure(guarded)
    assert ident_on == 0 and pii_on == 0
    assert canary not in guarded.uplink_text(smol_tok)
    # Without the canary on the wire its rivals tie with it at best: exposure of a coin flip or so.
    assert e_on < 4.0
    # And no verbatim run of 8+ history tokens went up.
    from privacy.detectors import VerbatimNgramDetector

    prompt = read_users(FIXTURES)[user_index].queries[0]["subject"]
    det = VerbatimNgramDetector.from_texts(history, smol_tok, n=8).for_prompt(prompt)
    # Rounds are shorter than 8 tokens, so look at the stream the cloud committed, across rounds.
    assert det.find_ids(guarded.cloud) == []
    assert sum(b - a for a, b in det.find_ids(leaky.cloud)) > 40


def test_draft_lengths_leak_through_frame_sizes_and_padding_closes_it(char_tok: PreTrainedTokenizerFast) -> None:
    """Guard cuts shorten drafts, so frame sizes reveal that a span was near; padded frames do not."""
    from core import wire

    canary = "my PIN is 402913"
    text, _, _ = leaky_target(2, canary)
    target = char_tok.encode(text, add_special_tokens=False)
    guard = build_guard(char_tok, 2, canary, Policy.PLACEHOLDER)
    result = sim.run(target, char_tok, guard)
    # Secret label per round: did the guard act on the text this round touched?
    # (Not counting the hold every trailing word gets as a possible address local part.)
    words = guard.without_local_part_holds()
    near = [int(words.check([], s, char_tok).cut_at is not None or len(s) != 4) for s in result.sent]
    sizes = [len(f) for f in result.frames]
    assert size_channel(sizes, near).mutual_information_bits > 0.05
    # The wire's own padded codec (a session that declared padded_frames, K = the longest round).
    k = max(len(s) for s in result.sent)
    padded = [len(wire.encode_round(i + 1, [], s, pad_to=k)) for i, s in enumerate(result.sent)]
    assert len(set(padded)) == 1
    assert size_channel(padded, near).mutual_information_bits == 0.0


def test_fixture_file_is_what_the_tests_assume() -> None:
    users = [json.loads(line) for line in FIXTURES.read_text().splitlines()]
    assert len(users) == 3 and all(u["profile"][0]["trailers"] for u in users)

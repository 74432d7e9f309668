"""The guard against a second round of attacks (attack 12): odd input that crashed it, registered
secrets and names in obfuscated forms, a many-secret history's cost, verbatim copies' openings."""

from __future__ import annotations

import base64
import json
import random
import time

import pytest
from transformers import PreTrainedTokenizerFast

from privacy.guard import EgressGuard
from privacy.history_secrets import HistorySecretDetector
from privacy.ngrams import VerbatimNgramDetector

# -- odd input fails closed with a clear error, or is cleaned ------------------------------------------


def test_lone_surrogates_in_history_prompt_and_canary_do_not_crash(bpe_tok: PreTrainedTokenizerFast) -> None:
    body = json.loads('"token \\ud800 here, and the rest of a long private passage"')
    guard = EgressGuard.for_profile([body], bpe_tok, canaries=["my PIN is 12\ud83456"])
    session = guard.for_prompt("Write the body \udcff")
    ids = bpe_tok.encode("hello there", add_special_tokens=False)
    assert session.check([], ids, bpe_tok, final=True).action == "pass"
    assert VerbatimNgramDetector.from_texts([body], bpe_tok, n=4).find("x \udfff y") == []


def test_token_ids_outside_the_vocabulary_are_refused(bpe_tok: PreTrainedTokenizerFast) -> None:
    guard = EgressGuard.for_profile(["some history"], bpe_tok)
    with pytest.raises(ValueError, match="outside the tokenizer's vocabulary"):
        guard.check([], [-1, 9], bpe_tok)
    # Past the vocabulary it decoded to "" and passed every detector while the wire carried it.
    with pytest.raises(ValueError, match="outside the tokenizer's vocabulary"):
        guard.check([], [len(bpe_tok) + 10], bpe_tok)
    with pytest.raises(ValueError, match="outside the tokenizer's vocabulary"):
        guard.check([len(bpe_tok)], [5], bpe_tok)


# -- a history with many secrets ------------------------------------------------------------------------


def _integrity_hashes(n: int) -> list[str]:
    rng = random.Random(1)
    return [f"sha512-{base64.b64encode(bytes(rng.randrange(256) for _ in range(64))).decode()}" for _ in range(n)]


def test_many_history_secrets_cost_about_what_a_few_do() -> None:
    """A pasted lock file registers hundreds of secrets; a regex alternation of all their pieces
    made every round ~70x slower. Set lookups cost the same whatever their number."""
    text = "The quick brown fox jumps over the lazy dog, then the build cache. " * 8

    def cost(n: int) -> float:
        d = HistorySecretDetector(_integrity_hashes(n))
        d.find(text), d.hazard(text)  # warm caches (fold)
        t0 = time.perf_counter()
        for i in range(5):
            d.find(text + str(i))
            d.hazard(text + str(i))
        return time.perf_counter() - t0

    few, many = min(cost(4) for _ in range(2)), min(cost(400) for _ in range(2))
    assert many < 4 * few + 0.01, (few, many)
    hashes = _integrity_hashes(400)
    d = HistorySecretDetector(hashes)
    secret = hashes[123]
    sample = f"cache key {secret[10:40]} and encoded {base64.b64encode(secret.encode()).decode()[8:40]}"
    assert len(d.find(sample)) == 2


# -- a verbatim copy's opening is held while the match forms ---------------------------------------------

PASSAGE = "Meeting with my lawyer about the divorce settlement on Friday, the house goes to her."


def test_the_opening_of_a_verbatim_copy_is_held_until_it_diverges(bpe_tok: PreTrainedTokenizerFast) -> None:
    d = VerbatimNgramDetector.from_texts([PASSAGE], bpe_tok, n=8)
    ids = bpe_tok.encode(PASSAGE, add_special_tokens=False)
    for m in range(4, 8):  # 4 to 7 tokens of the passage: no n-gram yet, but the start of one
        text = "Notes: " + bpe_tok.decode(ids[:m])
        h = d.hazard(text)
        assert h is not None and h.start in (len("Notes:"), len("Notes: ")), (m, text, h)
        assert d.find(text) == []
    assert d.hazard("Notes: " + bpe_tok.decode(ids[:2])) is None  # fewer than hazard_tokens
    # The copy diverges: released.
    assert d.hazard("Notes: " + bpe_tok.decode(ids[:5]) + " banana bread recipes") is None
    # A passage the public prompt holds is not private, nor is its opening.
    assert d.for_prompt(PASSAGE).hazard("Notes: " + bpe_tok.decode(ids[:6])) is None
    # The guard holds (drafts on locally) rather than sending the opening.
    guard = EgressGuard.for_profile([PASSAGE], bpe_tok).for_prompt("Write the body.")
    committed = bpe_tok.encode("Notes: ", add_special_tokens=False)
    verdict = guard.check(committed, ids[:5], bpe_tok)
    assert verdict.hold and verdict.cut_at == 0

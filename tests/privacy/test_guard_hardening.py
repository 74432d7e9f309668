"""The guard against a second round of attacks (attack 12): odd input that crashed it, registered
secrets and names in obfuscated forms, a many-secret history's cost, verbatim copies' openings."""

from __future__ import annotations

import json

import pytest
from transformers import PreTrainedTokenizerFast

from privacy.guard import EgressGuard
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

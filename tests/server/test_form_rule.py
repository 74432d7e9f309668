"""The form rule's vocabulary (docs/algorithm.md, "The form rule"): which tokens are layout and
punctuation only, decided once per tokenizer from its own decoder."""

from __future__ import annotations

import pytest
from transformers import PreTrainedTokenizerFast

from specsteer.server.vocab import TextCodec
from tests.tinymodels import EOS_ID


def _codec(tok: PreTrainedTokenizerFast) -> TextCodec:
    return TextCodec(tok, frozenset({EOS_ID}))


@pytest.mark.parametrize("name", ["char_tok", "bpe_tok", "smol_tok"])
def test_form_tokens_are_the_layout_and_punctuation_tokens(name: str, request: pytest.FixtureRequest) -> None:
    tok = request.getfixturevalue(name)
    codec = _codec(tok)
    form = codec.form_ids
    # Layout and punctuation are form, in whatever pieces the tokenizer spells them.
    for text in ("\n", ",", ".", "-"):
        (token,) = codec.encode(text)
        assert token in form, text
    # A word, a digit and a special token are not; neither is any token with a letter or digit.
    for text in ("a", "7"):
        assert codec.encode(text)[0] not in form, text
    assert not form & codec.special_ids
    assert all(not any(ch.isalnum() for ch in tok.decode([t])) for t in form)
    assert 0 < len(form) < len(tok) // 2


def test_a_leading_space_a_decoder_strips_still_counts(smol_tok: PreTrainedTokenizerFast) -> None:
    """A token that is one space before punctuation (" (" in byte-level BPE) is form; the token of
    a space before a word is not."""
    codec = _codec(smol_tok)
    (paren,) = codec.encode(" (")
    assert paren in codec.form_ids
    (word,) = codec.encode(" the")
    assert word not in codec.form_ids

"""Token IDs <-> text for cross-vocabulary pairs, where committed text is the source of truth.

Decoding is done on whole sequences and compared by prefix, since a token's text can depend on
its neighbours (byte-level pieces, leading-space rules). A position whose decoded text ends in
U+FFFD ends inside a character and is never a boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import cast

from transformers import PreTrainedTokenizerBase

from specsteer.core.steering import is_form_text

REPLACEMENT = "\ufffd"


class TextCodec:
    """One tokenizer's view of text: plain encode/decode (no special tokens added, no cleanup)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, eos_ids: frozenset[int]) -> None:
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids
        self.special_ids = frozenset(tokenizer.all_special_ids)
        probe = tokenizer.encode("a", add_special_tokens=False)
        # Decoding a token after a fixed neighbour keeps leading spaces that some decoders strip
        # at the start of a text.
        self._anchor = probe[:1]
        self._anchor_text = self.decode(self._anchor)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        # One sequence of ids decodes to one string (`decode`'s annotation also covers a batch).
        return cast(
            str, self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
        )

    @cached_property
    def form_ids(self) -> frozenset[int]:
        """The tokens whose text is form only (`is_form_text`: layout, punctuation), for the form
        rule; special tokens are not form. Decoded once per codec (about a second for 151,936
        tokens), each after the anchor token so that a leading space a decoder strips at the start
        of a text counts."""
        ids = [i for i in range(len(self.tokenizer)) if i not in self.special_ids]
        texts = self.tokenizer.batch_decode(
            [[*self._anchor, i] for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
        anchor = self._anchor_text
        return frozenset(
            i
            for i, text in zip(ids, texts, strict=True)
            if text.startswith(anchor) and is_form_text(text[len(anchor) :])
        )

    def special_token_map(self, other: TextCodec) -> dict[int, int]:
        """This tokenizer's special token IDs -> `other`'s IDs for special tokens of the same name."""
        theirs = {other.tokenizer.convert_ids_to_tokens(i): i for i in other.special_ids}
        mine = {i: self.tokenizer.convert_ids_to_tokens(i) for i in self.special_ids}
        return {i: theirs[name] for i, name in mine.items() if name in theirs}

    def ends_after(self, prefix: Sequence[int], tokens: Sequence[int]) -> list[int | None]:
        """Where each of `tokens` ends in decode(prefix + tokens), in characters; None inside a character
        or where decoding is not prefix-stable."""
        base = self.decode(prefix)
        ends: list[int | None] = []
        for i in range(1, len(tokens) + 1):
            text = self.decode([*prefix, *tokens[:i]])
            ok = text.startswith(base) and not text.endswith(REPLACEMENT)
            ends.append(len(text) if ok else None)
        return ends

    def piece_ends(self, tokens: Sequence[int]) -> list[int | None]:
        """End offsets of `tokens` within their own text, decoded after an anchor token."""
        offset = len(self._anchor_text)
        return [None if e is None else e - offset for e in self.ends_after(self._anchor, tokens)]

    def piece_positions(self, tokens: Sequence[int]) -> list[float]:
        """Where each of `tokens` ends within their own text (decoded after an anchor token), one
        entry per token: a whole number of characters at a character boundary, and the offset of
        the character it ends inside plus 0.5 otherwise (a byte-level token holding part of a
        character). The half offsets keep the order of all ends but never equal a boundary, so
        a split character only removes that position from the shared boundaries."""
        offset = len(self._anchor_text)
        positions: list[float] = []
        for i in range(1, len(tokens) + 1):
            text = self.decode([*self._anchor, *tokens[:i]])
            shift = offset
            if not text.startswith(self._anchor_text):  # the anchor merged with the token: decode alone
                text, shift = self.decode(tokens[:i]), 0
            complete = text.rstrip(REPLACEMENT)
            end = len(complete) - shift
            positions.append(end if complete == text else end + 0.5)
        return positions

    def token_string(self, token: int) -> str | None:
        """The text one token contributes mid-sequence, or None for a special token or a partial character."""
        if token in self.special_ids:
            return None
        text = self.decode([*self._anchor, token])
        if not text.startswith(self._anchor_text):
            return None
        piece = text[len(self._anchor_text) :]
        return piece if piece and REPLACEMENT not in piece else None


def same_vocabulary(a: PreTrainedTokenizerBase, b: PreTrainedTokenizerBase) -> bool:
    """Two tokenizers share a vocabulary when every token string maps to the same ID."""
    return a is b or a.get_vocab() == b.get_vocab()

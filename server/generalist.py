"""The Generalist's side of a cloud session, in one of two forms.

Both map the device's Specialist tokens onto the Generalist and answer in Specialist tokens:
- `SharedVocabGeneralist`: both models share a vocabulary; every token is a verification unit.
- `CrossVocabGeneralist`: different tokenizers; the committed text is the source of truth, the
  draft is re-tokenized for the Generalist from a stable boundary, and the units are the
  segments between boundaries both tokenizations share (algorithm.md, cross-vocabulary rules).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from transformers import PreTrainedModel

from specsteer.core.kv import TensorSequence, TokenSequence
from specsteer.core.models import CausalLM
from specsteer.core.session_types import MAX_CANDIDATE_TOKENS
from specsteer.core.steering import align_segments, top_indices
from specsteer.server.vocab import TextCodec

if TYPE_CHECKING:
    from specsteer.server.slot_sequence import EngineRunner

# Builds a model's sequence for a session: a `TokenSequence` (its own DynamicCache), or the
# verifier's slot pool (`CloudVerifier.sequence`).
SequenceFactory = Callable[[PreTrainedModel, Sequence[int], "EngineRunner | None"], TensorSequence]


@dataclass(frozen=True)
class Unit:
    """A verification unit: draft tokens up to `s_stop`, and the Generalist's view of them."""

    s_start: int
    s_stop: int
    logp_g: float  # log P_G of the unit's Generalist tokens
    g_is_argmax: bool  # every Generalist token is the Generalist's greedy choice (the `sd` rule)
    g_top: float  # log of the Generalist's top probability at the unit's most certain position (the certainty gate)


@dataclass(frozen=True)
class Candidate:
    """A steering candidate: its Specialist tokens and log P_G of the Generalist token it stands for."""

    s_tokens: tuple[int, ...]
    logp_g: float


class SharedVocabGeneralist:
    def __init__(
        self,
        lm: CausalLM,
        prompt_ids: Sequence[int],
        *,
        runner: EngineRunner | None = None,
        make_sequence: SequenceFactory = TokenSequence,
    ) -> None:
        self.seq = make_sequence(lm.model, prompt_ids, runner)
        self._draft_base = len(self.seq)

    def extend(self, commit: Sequence[int], draft: Sequence[int]) -> list[Unit]:
        self.seq.push(commit)
        self._draft_base = len(self.seq)
        self.seq.push(draft)
        logps, best, top = self.seq.block_logprobs(self._draft_base, draft)
        return [Unit(i, i + 1, logps[i], best[i] == token, top[i]) for i, token in enumerate(draft)]

    def accept(self, n: int) -> None:
        self.seq.truncate(self._draft_base + n)

    def next_logprobs(self) -> torch.Tensor:
        return self.seq.next_logprobs()


class CrossVocabGeneralist:
    """Keeps the Generalist's tokens of the committed text: `_g_ends[i]` is where generated
    Generalist token i ends in that text (a half offset when it ends inside a character, see
    `TextCodec.piece_positions`), and `_g_logps[i]` its log P_G (None until its row is computed).
    Both lists always line up with the generated tokens in `seq`."""

    def __init__(
        self,
        lm: CausalLM,
        specialist: TextCodec,
        prompt_ids: Sequence[int],
        *,
        runner: EngineRunner | None = None,
        make_sequence: SequenceFactory = TokenSequence,
    ) -> None:
        self.lm = lm
        self.codec = TextCodec(lm.tokenizer, lm.eos_ids)
        self.s_codec = specialist
        self.seq = make_sequence(lm.model, prompt_ids, runner)
        self._prompt_len = len(prompt_ids)
        self._s_generated: list[int] = []
        self._g_ends: list[float] = []
        self._g_logps: list[float | None] = []
        self._round: _CrossRound | None = None
        # The last steering's candidates: Specialist spelling -> (Generalist token, its log P_G).
        self._offered: dict[tuple[int, ...], tuple[int, float]] = {}
        # A special token (other than end-of-sequence) has no text; it maps to the Specialist's
        # special token of the same name, if there is one.
        self._special_map = self.codec.special_token_map(specialist)
        self.shared_boundaries = 0

    def committed_text(self) -> str:
        return self.s_codec.decode(self._s_generated)

    def extend(self, commit: Sequence[int], draft: Sequence[int]) -> list[Unit]:
        self._fill_logps()
        before = self.committed_text()
        self._s_generated.extend(commit)
        text = self.committed_text()
        # A commit that is one of the offered candidates is that Generalist token, whose log P_G
        # the steering row already gave: the Generalist's tokens then spell all committed text
        # with known log-probabilities, which the first segment's correction below needs.
        offered = self._offered.get(tuple(commit)) if commit else None
        self._offered = {}
        exact = not commit
        if (
            offered is not None
            and text.startswith(before)
            and text[len(before) :] == self.codec.token_string(offered[0])
        ):
            self.seq.push([offered[0]])
            self._g_ends.append(len(text))
            self._g_logps.append(offered[1])
            exact = True
        ends_eos = bool(draft) and draft[-1] in self.s_codec.eos_ids
        text_tokens = list(draft[:-1] if ends_eos else draft)
        s_ends = self.s_codec.ends_after(self._s_generated, text_tokens)
        full = self.s_codec.decode([*self._s_generated, *text_tokens])
        if not full.startswith(text):
            s_ends = [None] * len(s_ends)  # decoding not prefix-stable here: verify nothing
            full = text
        else:
            # A draft that ends inside a character: the text stops at its last complete character;
            # the tokens after it form no unit this round (they are never accepted on their own).
            full = full[: max((e for e in s_ends if e is not None), default=len(text))]

        # Re-tokenize from the last Generalist boundary at or before the last whitespace.
        last_space = max((i for i, ch in enumerate(text) if ch.isspace()), default=0)
        keep = 0
        while keep < len(self._g_ends) and self._g_ends[keep] <= last_space:
            keep += 1
        keep = _back_to_boundary(self._g_ends, keep)
        start = int(self._g_ends[keep - 1]) if keep else 0
        tail = full[start:]
        h = self.codec.encode(tail)
        if self.codec.decode(h) != tail:
            h, h_ends = [], []  # the Generalist cannot spell this text: verify nothing
            s_ends = [None] * len(s_ends)
            full = text
        else:
            h_ends = [start + e for e in self.codec.piece_positions(h)]
        # The committed Generalist tokens the re-tokenization replaces, and their log P_G.
        old = self.seq.ids[self._prompt_len + keep :]
        old_logps = [lp for lp in self._g_logps[keep:] if lp is not None]  # all known after _fill_logps
        common = 0
        while common < min(len(old), len(h)) and old[common] == h[common]:
            common += 1
        self.seq.truncate(self._prompt_len + keep)
        self.seq.push(h)
        segments = align_segments(s_ends, h_ends, len(text))
        h_set = set(h_ends)
        self.shared_boundaries += sum(1 for e in s_ends if e is not None and e in h_set)

        g_base = self._prompt_len + keep
        units: list[Unit] = []
        for seg in segments:
            logp, is_argmax, top = 0.0, True, -math.inf
            first = seg.g_start
            if not units and exact and common < len(old):
                # The first segment's Generalist tokens may re-spell committed characters (a token
                # spanning the commit point). Count only the new text: log P_G(committed + segment)
                # - log P_G(committed), both from the same Generalist prefix, as P_S^0 counts only
                # the segment's own Specialist tokens.
                first = common
                logp -= sum(old_logps[common:])
            for t in range(first, seg.g_stop):
                row = self.seq.logprobs_at(g_base + t)
                logp += float(row[h[t]])
                if t >= seg.g_start:
                    best = torch.max(row, dim=-1)
                    is_argmax &= int(best.indices) == h[t]
                    top = max(top, float(best.values))
            units.append(Unit(seg.s_start, seg.s_stop, logp, is_argmax, top))
        unit_ends: list[float] = [seg.end for seg in segments]
        covered = units[-1].s_stop if units else 0
        if ends_eos and covered == len(text_tokens):
            row = self.seq.logprobs_at(g_base + len(h))
            eos = sorted(self.lm.eos_ids)
            logp = float(torch.logsumexp(row[eos], dim=0))
            best = torch.max(row, dim=-1)
            units.append(
                Unit(len(text_tokens), len(draft), logp, int(best.indices) in self.lm.eos_ids, float(best.values))
            )
            unit_ends.append(len(full))
            self.shared_boundaries += 1  # the end of the text is a boundary of both tokenizations
        self._round = _CrossRound(keep, h, h_ends, len(text), full, list(draft), units, unit_ends)
        return units

    def accept(self, n: int) -> None:
        r = self._round
        assert r is not None, "accept() follows extend()"
        end: float = r.commit_end
        for unit, unit_end in zip(r.units, r.unit_ends, strict=True):
            if unit.s_stop == n:
                end = unit_end
        kept = 0
        while kept < len(r.h) and r.h_ends[kept] <= end:
            kept += 1
        kept = _back_to_boundary(r.h_ends, kept)
        g_base = self._prompt_len + r.keep
        ends = self._g_ends[: r.keep] + r.h_ends[:kept]
        logps = self._g_logps[: r.keep] + [float(self.seq.logprobs_at(g_base + t)[r.h[t]]) for t in range(kept)]
        self.seq.truncate(g_base + kept)
        last = int(ends[-1]) if ends else 0
        if last < end:
            # The accepted text ends inside a Generalist token of the tail: tokenize the rest alone.
            rest = self.codec.encode(r.full[last : int(end)])
            self.seq.push(rest)
            ends += [last + e for e in self.codec.piece_positions(rest)]
            logps += [None] * len(rest)  # read from their rows before the next re-tokenization
        self._g_ends = ends
        self._g_logps = logps
        self._s_generated.extend(r.draft[:n])
        self._round = None

    def _fill_logps(self) -> None:
        """log P_G of committed Generalist tokens pushed since the last forward (`accept`'s rest)."""
        for i, lp in enumerate(self._g_logps):
            if lp is None:
                pos = self._prompt_len + i
                self._g_logps[i] = float(self.seq.logprobs_at(pos)[self.seq.ids[pos]])

    def next_logprobs(self) -> torch.Tensor:
        return self.seq.next_logprobs()

    def candidates(self, row: torch.Tensor, pool: int) -> list[Candidate]:
        """The Generalist's most likely next tokens as Specialist token strings, best first,
        skipping special tokens, partial characters and duplicates."""
        out: list[Candidate] = []
        seen: set[tuple[int, ...]] = set()
        for g in top_indices(row, pool).tolist():
            s_tokens = self.spell(g)
            if s_tokens is None or s_tokens in seen:
                continue
            seen.add(s_tokens)
            out.append(Candidate(s_tokens, float(row[g])))
            self._offered[s_tokens] = (g, float(row[g]))
        return out

    def spell(self, g: int) -> tuple[int, ...] | None:
        """Generalist token `g` as Specialist tokens, or None if the Specialist cannot spell it
        (a partial character, a special token without a counterpart, too many tokens)."""
        if g in self.lm.eos_ids:
            return (min(self.s_codec.eos_ids),) if self.s_codec.eos_ids else None
        if g in self.codec.special_ids:
            return (self._special_map[g],) if g in self._special_map else None
        piece = self.codec.token_string(g)
        if piece is None:
            return None
        s_tokens = tuple(self.s_codec.encode(piece))
        return s_tokens if 1 <= len(s_tokens) <= MAX_CANDIDATE_TOKENS else None


def _back_to_boundary(ends: Sequence[float], n: int) -> int:
    """The largest m <= n whose first m tokens end on a character boundary (so m = 0 or ends[m-1]
    is whole): text is only ever cut, or re-tokenized from, between characters."""
    while n and not float(ends[n - 1]).is_integer():
        n -= 1
    return n


@dataclass
class _CrossRound:
    keep: int
    h: list[int]
    h_ends: list[float]
    commit_end: int
    full: str
    draft: list[int]
    units: list[Unit]
    unit_ends: list[float]

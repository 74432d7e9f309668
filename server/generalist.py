"""The Generalist's side of a cloud session, in one of two forms.

Both map the device's Specialist tokens onto the Generalist and answer in Specialist tokens:
- `SharedVocabGeneralist`: both models share a vocabulary; every token is a verification unit.
- `CrossVocabGeneralist`: different tokenizers; the committed text is the source of truth, the
  draft is re-tokenized for the Generalist from a stable boundary, and the units are the
  segments between boundaries both tokenizations share (algorithm.md, cross-vocabulary rules).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from core.kv import ForwardRunner, TokenSequence
from core.models import CausalLM
from core.session_types import MAX_CANDIDATE_TOKENS
from core.steering import align_segments, top_indices
from server.vocab import TextCodec


@dataclass(frozen=True)
class Unit:
    """A verification unit: draft tokens up to `s_stop`, and the Generalist's view of them."""

    s_start: int
    s_stop: int
    logp_g: float  # log P_G of the unit's Generalist tokens
    g_is_argmax: bool  # every Generalist token is the Generalist's greedy choice (the `sd` rule)


@dataclass(frozen=True)
class Candidate:
    """A steering candidate: its Specialist tokens and log P_G of the Generalist token it stands for."""

    s_tokens: tuple[int, ...]
    logp_g: float


class SharedVocabGeneralist:
    def __init__(self, lm: CausalLM, prompt_ids: Sequence[int], *, runner: ForwardRunner | None = None) -> None:
        self.seq = TokenSequence(lm.model, prompt_ids, runner)
        self._draft_base = len(self.seq)

    def extend(self, commit: Sequence[int], draft: Sequence[int]) -> list[Unit]:
        self.seq.push(commit)
        self._draft_base = len(self.seq)
        self.seq.push(draft)
        units = []
        for i, token in enumerate(draft):
            row = self.seq.logprobs_at(self._draft_base + i)
            units.append(Unit(i, i + 1, float(row[token]), int(torch.argmax(row)) == token))
        return units

    def accept(self, n: int) -> None:
        self.seq.truncate(self._draft_base + n)

    def next_logprobs(self) -> torch.Tensor:
        return self.seq.next_logprobs()


class CrossVocabGeneralist:
    """Keeps the Generalist's tokens of the committed text, `_g_ends[i]` being where generated
    Generalist token i ends in that text."""

    def __init__(
        self,
        lm: CausalLM,
        specialist: TextCodec,
        prompt_ids: Sequence[int],
        *,
        runner: ForwardRunner | None = None,
    ) -> None:
        self.lm = lm
        self.codec = TextCodec(lm.tokenizer, lm.eos_ids)
        self.s_codec = specialist
        self.seq = TokenSequence(lm.model, prompt_ids, runner)
        self._prompt_len = len(prompt_ids)
        self._s_generated: list[int] = []
        self._g_ends: list[int] = []
        self._round: _CrossRound | None = None
        # A special token (other than end-of-sequence) has no text; it maps to the Specialist's
        # special token of the same name, if there is one.
        self._special_map = self.codec.special_token_map(specialist)
        self.shared_boundaries = 0

    def committed_text(self) -> str:
        return self.s_codec.decode(self._s_generated)

    def extend(self, commit: Sequence[int], draft: Sequence[int]) -> list[Unit]:
        self._s_generated.extend(commit)
        text = self.committed_text()
        ends_eos = bool(draft) and draft[-1] in self.s_codec.eos_ids
        text_tokens = list(draft[:-1] if ends_eos else draft)
        s_ends = self.s_codec.ends_after(self._s_generated, text_tokens)
        full = self.s_codec.decode([*self._s_generated, *text_tokens])
        if not full.startswith(text):
            s_ends = [None] * len(s_ends)  # decoding not prefix-stable here: verify nothing
            full = text

        # Re-tokenize from the last Generalist boundary at or before the last whitespace.
        last_space = max((i for i, ch in enumerate(text) if ch.isspace()), default=0)
        keep = 0
        while keep < len(self._g_ends) and self._g_ends[keep] <= last_space:
            keep += 1
        start = self._g_ends[keep - 1] if keep else 0
        tail = full[start:]
        h = self.codec.encode(tail)
        h_rel = self.codec.piece_ends(h)
        if self.codec.decode(h) != tail or any(e is None for e in h_rel):
            h, h_ends = [], []
            s_ends = [None] * len(s_ends)
            full = text
        else:
            h_ends = [start + e for e in h_rel if e is not None]
        self.seq.truncate(self._prompt_len + keep)
        self.seq.push(h)
        segments = align_segments(s_ends, h_ends, len(text))
        self.shared_boundaries += sum(1 for e in s_ends if e is not None and e in set(h_ends))

        g_base = self._prompt_len + keep
        units: list[Unit] = []
        for seg in segments:
            logp, is_argmax = 0.0, True
            for t in range(seg.g_start, seg.g_stop):
                row = self.seq.logprobs_at(g_base + t)
                logp += float(row[h[t]])
                is_argmax &= int(torch.argmax(row)) == h[t]
            units.append(Unit(seg.s_start, seg.s_stop, logp, is_argmax))
        unit_ends = [seg.end for seg in segments]
        covered = units[-1].s_stop if units else 0
        if ends_eos and covered == len(text_tokens):
            row = self.seq.logprobs_at(g_base + len(h))
            eos = sorted(self.lm.eos_ids)
            logp = float(torch.logsumexp(row[eos], dim=0))
            units.append(Unit(len(text_tokens), len(draft), logp, int(torch.argmax(row)) in self.lm.eos_ids))
            unit_ends.append(len(full))
            self.shared_boundaries += 1  # the end of the text is a boundary of both tokenizations
        self._round = _CrossRound(keep, h, h_ends, len(text), full, list(draft), units, unit_ends)
        return units

    def accept(self, n: int) -> None:
        r = self._round
        assert r is not None, "accept() follows extend()"
        end = r.commit_end
        for unit, unit_end in zip(r.units, r.unit_ends, strict=True):
            if unit.s_stop == n:
                end = unit_end
        kept = 0
        while kept < len(r.h) and r.h_ends[kept] <= end:
            kept += 1
        ends = self._g_ends[: r.keep] + r.h_ends[:kept]
        self.seq.truncate(self._prompt_len + r.keep + kept)
        last = ends[-1] if ends else 0
        if last < end:
            # The accepted text ends inside a Generalist token of the tail: tokenize the rest alone.
            rest = self.codec.encode(r.full[last:end])
            rest_ends = self.codec.piece_ends(rest)
            self.seq.push(rest)
            ends += [last + e for e in rest_ends if e is not None]
        self._g_ends = ends
        self._s_generated.extend(r.draft[:n])
        self._round = None

    def next_logprobs(self) -> torch.Tensor:
        return self.seq.next_logprobs()

    def candidates(self, row: torch.Tensor, pool: int) -> list[Candidate]:
        """The Generalist's most likely next tokens as Specialist token strings, best first,
        skipping special tokens, partial characters and duplicates."""
        out: list[Candidate] = []
        seen: set[tuple[int, ...]] = set()
        s_eos = min(self.s_codec.eos_ids) if self.s_codec.eos_ids else None
        for g in top_indices(row, pool).tolist():
            if g in self.lm.eos_ids:
                if s_eos is None:
                    continue
                s_tokens: tuple[int, ...] = (s_eos,)
            elif g in self.codec.special_ids:
                if g not in self._special_map:
                    continue
                s_tokens = (self._special_map[g],)
            else:
                piece = self.codec.token_string(g)
                if piece is None:
                    continue
                s_tokens = tuple(self.s_codec.encode(piece))
                if not 1 <= len(s_tokens) <= MAX_CANDIDATE_TOKENS:
                    continue
            if s_tokens in seen:
                continue
            seen.add(s_tokens)
            out.append(Candidate(s_tokens, float(row[g])))
        return out


@dataclass
class _CrossRound:
    keep: int
    h: list[int]
    h_ends: list[int]
    commit_end: int
    full: str
    draft: list[int]
    units: list[Unit]
    unit_ends: list[int]

"""The Specialist's forwards on llama.cpp: the same GGUF, about 3x cheaper steps on a CPU.

On this project's 2-core machines a step of the embedded 0.5B Specialist costs ~100 ms in torch
fp32 and ~30 ms in llama.cpp on the GGUF that model was converted from (the GGUF's Q8_0 weights
are what the fp32 model holds, dequantized; llama.cpp's f16 cache and Q8_0 dot products move the
logits by ~1e-3, so greedy texts part only at near-ties, docs/results/drafter_quality.md). Drafting is most of
the device's time in a round, so this is the device's fast path; the cloud stays on torch, whose
exactness tests and batching it needs.

Opt-in: `llama-cpp-python` compiles from source (the `[llamacpp]` extra). Only the forwards move:
the tokenizer, chat template and end-of-sequence ids stay the Hugging Face model's, so the token
IDs on the wire are the same. A personal LoRA adapter is merged into the torch model only, so a
federated Specialist cannot draft here (`Specialist` refuses the pair).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from specsteer.core.device_lm import SpecialistLM
from specsteer.core.errors import ConfigError
from specsteer.core.gguf_cache import locate_embedded_gguf
from specsteer.core.sequence import CachedSequence

# The dispatch by name lives in sdk.drafters; re-exported here, where callers first found it.
from specsteer.sdk.drafters import DRAFTERS, LLAMACPP_INSTALL_HINT, check_drafter_installed, drafter_for

__all__ = [
    "DEFAULT_CONTEXT_TOKENS",
    "DRAFTERS",
    "LlamaCppDrafter",
    "LlamaCppSequence",
    "check_drafter_installed",
    "drafter_for",
    "gguf_for",
]

DEFAULT_CONTEXT_TOKENS = 8192  # the device's private prompt plus a generation; ~100 MB of KV for the 0.5B
INSTALL_HINT = LLAMACPP_INSTALL_HINT


def gguf_for(spec: str) -> Path:
    """The GGUF file behind a Specialist spec: the file itself or an embedded model's GGUF."""
    path = Path(spec).expanduser()
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise ConfigError(f"no GGUF file at {path}")
        return path
    try:
        return locate_embedded_gguf(spec)
    except Exception as exc:
        raise ConfigError(
            f"the llama.cpp drafter needs a GGUF: pass a .gguf file or an embedded model name, not {spec!r}"
        ) from exc


class LlamaCppDrafter:
    """One llama.cpp context for the device's Specialist; one live sequence at a time.

    The device generates one text at a time, so a new `sequence` takes the context over and any
    older sequence refuses to run (it would read another sequence's cache).
    """

    def __init__(self, gguf: Path, lm: SpecialistLM, *, threads: int | None = None, context_tokens: int = 0) -> None:
        try:
            from llama_cpp import Llama  # type: ignore[import-not-found, unused-ignore]
        except ImportError as exc:
            raise ConfigError(f"the llama.cpp drafter needs llama-cpp-python: {INSTALL_HINT}") from exc
        if not gguf.is_file():
            raise ConfigError(f"no GGUF file at {gguf}")
        self.gguf = gguf
        self.model_name = lm.name
        self.context_tokens = context_tokens or DEFAULT_CONTEXT_TOKENS
        threads = threads or len(os.sched_getaffinity(0)) or 1
        try:
            self._llm: Any = Llama(
                model_path=str(gguf),
                n_ctx=self.context_tokens,
                n_batch=512,
                n_threads=threads,
                n_threads_batch=threads,
                logits_all=False,  # one row per feed: a prefill never pays the vocabulary head per token
                verbose=False,
            )
        except (ValueError, RuntimeError) as exc:
            raise ConfigError(f"llama.cpp could not load {gguf}: {exc}") from exc
        self.vocab_size = int(self._llm.n_vocab())
        if self.vocab_size != lm.vocab_size:
            raise ConfigError(
                f"{gguf.name} has {self.vocab_size} logits per token but the Specialist {lm.name} has "
                f"{lm.vocab_size}: the drafter must be the Specialist's own GGUF"
            )
        self._owner: LlamaCppSequence | None = None

    @classmethod
    def for_specialist(cls, spec: str, lm: SpecialistLM, **kwargs: Any) -> LlamaCppDrafter:
        """The drafter on the GGUF behind `spec` (a .gguf file or an embedded name) that `lm` was loaded from."""
        return cls(gguf_for(spec), lm, **kwargs)

    def sequence(self, prefix_ids: Sequence[int], capacity: int | None = None) -> LlamaCppSequence:
        """A new sequence on the context; any older one stops working."""
        seq = LlamaCppSequence(self, prefix_ids)
        self._owner = seq
        self._remove_from(0)
        return seq

    # --- the context, for the live sequence only -------------------------------------------------

    def _check(self, seq: LlamaCppSequence, end: int) -> None:
        if self._owner is not seq:
            raise RuntimeError("a newer sequence took over this llama.cpp context")
        if end > self.context_tokens:
            raise ConfigError(
                f"the sequence needs {end} tokens but the llama.cpp context holds {self.context_tokens}; "
                "pass a larger context_tokens"
            )

    def _decode(self, seq: LlamaCppSequence, tokens: Sequence[int], at: int, *, all_rows: bool) -> NDArray[np.float32]:
        """Feed `tokens` at positions `at`.. on the cache; logits of the last one, or of all."""
        self._check(seq, at + len(tokens))
        llm = self._llm
        out: list[np.ndarray] = []
        for i in range(0, len(tokens), llm.n_batch):
            chunk = list(tokens[i : i + llm.n_batch])
            last_chunk = i + llm.n_batch >= len(tokens)
            llm._batch.set_batch(batch=chunk, n_past=at + i, logits_all=all_rows)
            llm._ctx.decode(llm._batch)
            if all_rows or last_chunk:
                rows = len(chunk) if all_rows else 1
                logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(rows * self.vocab_size,))
                out.append(logits.reshape(rows, self.vocab_size).copy())
        return np.concatenate(out)

    def _remove_from(self, position: int) -> None:
        self._llm._ctx.kv_cache_seq_rm(0, position, -1)


class LlamaCppSequence(CachedSequence[NDArray[np.float32]]):
    """A device sequence on the drafter's llama.cpp context. A forward keeps the last row only, so a
    rollback into a multi-token feed re-feeds one token, as `CachedSequence` does for any backend."""

    def __init__(self, drafter: LlamaCppDrafter, prefix_ids: Sequence[int]) -> None:
        super().__init__(prefix_ids)
        self._drafter = drafter

    def _forward(self, new: Sequence[int]) -> NDArray[np.float32]:
        return self._drafter._decode(self, new, self._cached, all_rows=False)

    def _crop(self, keep: int) -> None:
        self._drafter._check(self, keep)
        self._drafter._remove_from(keep)
        self._cached = keep

    def _tail_logits(self, tails: Sequence[Sequence[int]]) -> list[NDArray[np.float32]]:
        rows = []
        for tail in tails:
            rows.append(self._drafter._decode(self, tail, self._cached, all_rows=True))
            self._drafter._remove_from(self._cached)
        return rows

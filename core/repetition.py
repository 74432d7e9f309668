"""The device's repetition stop: no token that would repeat an n-gram of the text generated so far.

A small Specialist tuned on a few hundred of one author's texts (the federation's DP adapters)
loops: it says one sentence over and over (`bench.personal_loop_report.repeated_trigram_share`).
The stop is the device's own policy, like its temperature: P_S^c gives probability 0 to every
token that would complete an n-gram already in the generated text (the prompt and the retrieved
history are not counted: copying an author's phrase is their voice, saying one's own twice is a
loop). Nothing of it goes up; the verifier's ratio test does not read P_S^c, so it stays exact
for the stopped distribution (docs/algorithm.md, "The repetition stop").

transformers' `NoRepeatNGramLogitsProcessor` does the same for torch tensors; the device does not
import torch (`sdk.decoding`), so this is the same rule on numpy arrays, over the generated part only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from numpy.typing import NDArray

__all__ = ["completes_repeat", "no_repeat_problem", "repeating_candidates", "repeating_tokens"]


def no_repeat_problem(n: int) -> str | None:
    """Why `n` is not a repetition stop's n-gram length (0: off), or None."""
    if n == 0 or n >= 2:
        return None
    return (
        f"no_repeat_ngram must be 0 (off) or a length of 2 tokens or more; got {n} "
        "(1 would forbid every token the text already holds)"
    )


def repeating_tokens(tokens: Sequence[int], n: int) -> NDArray[np.int64]:
    """The tokens that, appended to `tokens`, would complete an n-gram that `tokens` already holds
    (sorted, no duplicates; empty for n 0 or a text shorter than n)."""
    if n < 2 or len(tokens) < n:
        return np.empty(0, dtype=np.int64)
    ids = np.asarray(tokens, dtype=np.int64)
    suffix = ids[len(ids) - n + 1 :]
    # Window i is ids[i : i + n - 1]; the token after it, ids[i + n - 1], exists for i <= len - n.
    windows = sliding_window_view(ids[:-1], n - 1)
    starts = np.flatnonzero((windows == suffix).all(axis=1))
    return np.unique(ids[starts + n - 1])


def completes_repeat(tokens: Sequence[int], continuation: Sequence[int], n: int) -> bool:
    """Whether appending `continuation` (a multi-token steering candidate: each token in turn)
    to `tokens` repeats an n-gram of the text as it grows."""
    text = list(tokens)
    for token in continuation:
        if token in repeating_tokens(text, n):
            return True
        text.append(token)
    return False


def repeating_candidates(tokens: Sequence[int], candidates: Sequence[Sequence[int]], n: int) -> list[bool]:
    """Per steering candidate, whether appending it to `tokens` repeats an n-gram (`completes_repeat`):
    the tokens that repeat after `tokens` are found once for all of them, and only a multi-token
    candidate whose first token passes is followed further."""
    first = set(repeating_tokens(tokens, n).tolist())
    return [c[0] in first or (len(c) > 1 and completes_repeat([*tokens, c[0]], c[1:], n)) for c in candidates]

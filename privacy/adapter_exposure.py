"""Canary exposure of a released model's weights (Carlini et al., "The Secret Sharer", 2019).

`privacy.leakage` measures what reached the cloud on the uplink. This module measures what a
model *remembers*: canaries drawn from a `CanarySpace` are planted as history entries of their own
(`plant_canary_records`: a subject line and a body that is the canary, repeated), training runs,
and the trained model scores every secret s of the space by the log-likelihood of its canary body
in the format the global adapter trains on (`canary_prompt_ids`: the task prompt of the canary's
subject, no retrieved context):

    score(s) = log P(tokens of render(s) | prompt)

A canary's exact rank among all |R| secrets by that score gives its exposure, log2|R| - log2(rank)
(`privacy.leakage.exposure_from_rank`; ties count half, as `privacy.leakage.canary_rank` ranks a
canary in an uplink stream). No rivals are sampled and no distribution is fitted: every secret of R
is scored. A secret the model has not seen has a uniformly random rank, so its exposure is small
(P(exposure >= x) = 2^-x, mean 1/ln 2 ~ 1.44 bits); a memorized one ranks first (log2|R| bits).
Non-planted control canaries drawn from the same space measure that baseline on the same model.

Scoring all of R costs one forward token per inner node of the trie of R's tokenizations, not one
sequence per secret: the trie is cut into chunks of nodes that are contiguous in depth-first
order, and each chunk runs as one sequence behind the prompt with a tree attention mask (every node
sees the prompt and its own ancestors; its position is the prompt's length plus its depth), so the
logits at a node are exactly those of the prompt followed by the node's path. A 6-digit space whose
digits tokenize one by one is 111,111 inner nodes (plus the template's); a 4-digit space 1,111.
`secret_log_likelihoods_bruteforce` scores secret by secret, for the tests.

Only models whose every layer attends to the whole sequence (Llama, Qwen, SmolLM2) are accepted: a
custom mask would override a sliding window.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specsteer.core.models import CausalLM
from specsteer.core.prompts import render_prompt, task_prompt
from specsteer.privacy.leakage import CanarySpace, exposure_from_rank

__all__ = [
    "DEFAULT_CANARY_SUBJECT",
    "MAX_SCORED_SPACE",
    "CanaryRecord",
    "LikelihoodExposure",
    "adapter_model",
    "canary_prompt_ids",
    "exposure_summary",
    "likelihood_exposures",
    "likelihood_rank",
    "model_exposures",
    "plant_canary_records",
    "random_rank_exceedance",
    "secret_index",
    "secret_log_likelihoods",
    "secret_log_likelihoods_bruteforce",
]

DEFAULT_CANARY_SUBJECT = "Note the PIN of the staging server"
# The largest space scored exactly (the secrets are tokenized and held in memory at once).
MAX_SCORED_SPACE = 10**6


@dataclass(frozen=True)
class CanaryRecord:
    """What is planted: a history entry with this subject whose body is a canary of `space`."""

    space: CanarySpace = field(default_factory=CanarySpace)
    subject: str = DEFAULT_CANARY_SUBJECT

    def entry(self, secret: str) -> dict[str, Any]:
        return {"subject": self.subject, "body": self.space.render(secret)}

    def as_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "space": self.space.as_dict(), "bits": self.space.bits}


def plant_canary_records(
    user: Mapping[str, Any], record: CanaryRecord, secret: str, repetitions: int, rng: random.Random, *, keep_last: int
) -> dict[str, Any]:
    """A copy of the dataset user object `user` with `repetitions` canary entries inserted.

    The copies go to random places among the history's entries except the newest `keep_last`
    (federation holds those out for evaluation, so a canary there would never be trained on). Each
    copy takes the time of the entry it follows, so the history stays in time order.
    """
    if repetitions < 1:
        raise ValueError("a planted canary needs at least one repetition")
    entries = list(user.get("profile") or [])
    cut = max(0, len(entries) - max(0, keep_last))
    head, tail = entries[:cut], entries[cut:]
    for _ in range(repetitions):
        at = rng.randint(0, len(head))
        entry = record.entry(secret)
        neighbour = head[at - 1] if at > 0 else (head[0] if head else None)
        if isinstance(neighbour, Mapping) and "time" in neighbour:
            entry["time"] = neighbour["time"]
        head.insert(at, entry)
    return {**user, "profile": head + tail}


def canary_prompt_ids(lm: CausalLM, subject: str) -> list[int]:
    """The tokens in front of a canary body as the global adapter trains on it.

    `federation.task.build_examples` without retrieval (the global adapter's DP-SGD sequences):
    the task prompt of the entry's subject through `render_prompt`, then the body's own tokens.
    """
    return render_prompt(lm, task_prompt(subject))


def secret_index(space: CanarySpace, secret: str) -> int:
    """The position of `secret` in `space.all_secrets()` (its symbols as digits, first one highest)."""
    space.render(secret)  # raises for a secret outside the space
    base = len(space.alphabet)
    index = 0
    for c in secret:
        index = index * base + space.alphabet.index(c)
    return index


def _check_model(lm: CausalLM) -> None:
    config = getattr(lm.model, "config", None)
    if "sliding_attention" in (getattr(config, "layer_types", None) or ()):
        raise ValueError(f"{lm.name} has sliding-window layers; tree-masked scoring needs full attention")


def _tokenized_space(lm: CausalLM, space: CanarySpace) -> tuple[list[str], list[list[int]]]:
    if space.size > MAX_SCORED_SPACE:
        raise ValueError(f"a canary space of {space.size} secrets is too large to score exactly")
    secrets_ = space.all_secrets()
    # Exactly what build_examples does to a body: encode(body.strip()) without special tokens.
    bodies = [space.render(s).strip() for s in secrets_]
    encoded = lm.tokenizer(bodies, add_special_tokens=False)["input_ids"]
    return secrets_, [list(ids) for ids in encoded]


@dataclass(frozen=True)
class _Trie:
    """The trie of the secrets' token sequences, nodes numbered in depth-first (pre)order."""

    token: np.ndarray  # per node
    parent: np.ndarray  # per node; -1 under the root (the prompt's end)
    depth: np.ndarray  # per node, from 1
    end: np.ndarray  # per secret (in the caller's order): its last node

    @property
    def size(self) -> int:
        return int(self.token.size)

    @classmethod
    def build(cls, sequences: Sequence[Sequence[int]]) -> _Trie:
        n = len(sequences)
        lengths = np.array([len(s) for s in sequences], dtype=np.int64)
        if n == 0 or int(lengths.min()) < 1:
            raise ValueError("every secret must tokenize to at least one token")
        width = int(lengths.max())
        seqs = np.full((n, width), -1, dtype=np.int64)
        for i, s in enumerate(sequences):
            seqs[i, : len(s)] = s
        order = np.lexsort(seqs.T[::-1])  # lexicographic by the first token, then the second, ...
        rows, lens = seqs[order], lengths[order]
        # lcp[r]: how many leading tokens row r shares with row r - 1 (its nodes up to there exist).
        lcp = np.zeros(n, dtype=np.int64)
        if n > 1:
            same = rows[1:] == rows[:-1]
            first_diff = np.where(same.all(axis=1), width, np.argmin(same, axis=1))
            lcp[1:] = np.minimum(first_diff, np.minimum(lens[1:], lens[:-1]))
        cols = np.arange(width)
        real = cols[None, :] < lens[:, None]
        new = real & (cols[None, :] >= lcp[:, None])
        # Row-major over (row, depth) is depth-first order: number the new nodes in it, and give
        # every other cell the node of the last row above that created one in its column.
        ids = np.where(new, np.cumsum(new.ravel()).reshape(new.shape) - 1, -1)
        node_at = np.maximum.accumulate(ids, axis=0)
        count = int(new.sum())
        token = np.empty(count, dtype=np.int64)
        parent = np.empty(count, dtype=np.int64)
        depth = np.empty(count, dtype=np.int64)
        r, d = np.nonzero(new)
        created = ids[r, d]
        token[created] = rows[r, d]
        depth[created] = d + 1
        parent[created] = np.where(d > 0, node_at[r, np.maximum(d - 1, 0)], -1)
        end = np.empty(n, dtype=np.int64)
        end[order] = node_at[np.arange(n), lens - 1]
        return cls(token=token, parent=parent, depth=depth, end=end)


def secret_log_likelihoods(
    lm: CausalLM,
    prompt_ids: Sequence[int],
    space: CanarySpace,
    *,
    chunk_tokens: int = 1024,
    progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """log P(tokens of render(s) | prompt_ids) in nats for every secret s of `space`, in the order
    of `space.all_secrets()` (index with `secret_index`). Exact: every secret is scored.

    `chunk_tokens` bounds the tokens of one forward pass (prompt included); `progress(done, total)`
    is called after each chunk with counts of the trie's inner nodes.
    """
    import torch

    _check_model(lm)
    prompt = [int(t) for t in prompt_ids]
    if not prompt:
        raise ValueError("scoring needs a non-empty prompt")
    _, sequences = _tokenized_space(lm, space)
    trie = _Trie.build(sequences)
    p = len(prompt)
    room = chunk_tokens - p - int(trie.depth.max())
    if room < 1:
        raise ValueError(f"chunk_tokens={chunk_tokens} leaves no room beside a {p}-token prompt")

    has_child = np.zeros(trie.size, dtype=bool)
    has_child[trie.parent[trie.parent >= 0]] = True
    inner = np.flatnonzero(has_child)  # sorted: depth-first order
    by_parent = np.argsort(trie.parent, kind="stable")
    sorted_parent = trie.parent[by_parent]
    logp = np.zeros(trie.size, dtype=np.float64)
    local = np.full(trie.size, -1, dtype=np.int64)

    model: Any = lm.model
    dtype = next(model.parameters()).dtype
    device = next(model.parameters()).device
    blocked = torch.finfo(dtype).min if dtype.is_floating_point else -1e9
    prompt_t = torch.tensor(prompt, dtype=torch.long, device=device)
    total = int(inner.size)

    def run(chunk: np.ndarray) -> torch.Tensor:
        """Log-softmax rows at the prompt's last token and at every node of `chunk`."""
        k = int(chunk.size)
        local[chunk] = np.arange(k)
        sees = np.zeros((k, k), dtype=bool)
        sees[np.arange(k), np.arange(k)] = True
        above = trie.parent[chunk]
        while np.any(above >= 0):
            rows = np.flatnonzero(above >= 0)
            where = local[above[rows]]
            if np.any(where < 0):
                raise AssertionError("a chunk is missing an ancestor of one of its nodes")
            sees[rows, where] = True
            above[rows] = trie.parent[above[rows]]
        local[chunk] = -1
        mask = torch.full((1, 1, p + k, p + k), blocked, dtype=dtype, device=device)
        causal = torch.ones((p, p), dtype=torch.bool, device=device).tril()
        mask[0, 0, :p, :p].masked_fill_(causal, 0.0)
        mask[0, 0, p:, :p] = 0.0
        mask[0, 0, p:, p:].masked_fill_(torch.from_numpy(sees).to(device), 0.0)
        ids = torch.cat([prompt_t, torch.from_numpy(trie.token[chunk]).to(device)])[None]
        positions = torch.cat([torch.arange(p, device=device), torch.from_numpy(trie.depth[chunk] - 1 + p).to(device)])[
            None
        ]
        keep = torch.arange(p - 1, p + k, device=device)
        with torch.inference_mode():
            out = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep)
        return torch.log_softmax(out.logits[0].float(), dim=-1)

    def children_of(lo: int, hi: int) -> np.ndarray:
        """The nodes whose parent lies in [lo, hi] (node numbers)."""
        a = int(np.searchsorted(sorted_parent, lo, side="left"))
        b = int(np.searchsorted(sorted_parent, hi, side="right"))
        return by_parent[a:b]

    done = 0
    first = True
    start = 0
    while first or start < total:
        computed = inner[start : start + room]
        ancestors: list[int] = []
        if computed.size:
            a = int(trie.parent[computed[0]])
            while a >= 0:
                ancestors.append(a)
                a = int(trie.parent[a])
        chunk = np.concatenate([np.array(ancestors[::-1], dtype=np.int64), computed])
        rows = run(chunk)
        if first:  # the root's children: the prompt's last position
            top = children_of(-1, -1)
            logp[top] = rows[0, torch.from_numpy(trie.token[top])].double().numpy()
            first = False
        if computed.size:
            kids = children_of(int(computed[0]), int(computed[-1]))
            offset = 1 + len(ancestors)  # row 0 is the prompt's last token
            at = np.searchsorted(computed, trie.parent[kids]) + offset
            logp[kids] = rows[torch.from_numpy(at), torch.from_numpy(trie.token[kids])].double().numpy()
        done += int(computed.size)
        start += room
        if progress is not None:
            progress(done, total)

    cumulative = np.zeros(trie.size, dtype=np.float64)
    for d in range(1, int(trie.depth.max()) + 1):
        nodes = np.flatnonzero(trie.depth == d)
        up = trie.parent[nodes]
        cumulative[nodes] = np.where(up >= 0, cumulative[np.maximum(up, 0)], 0.0) + logp[nodes]
    scores = cumulative[trie.end]
    if not np.all(np.isfinite(scores)):
        # NaN would compare false with everything and rank first: a diverged model must not look leaky.
        raise ValueError(f"{lm.name} gives non-finite likelihoods (diverged weights?); no rank can be read from them")
    return scores


def secret_log_likelihoods_bruteforce(
    lm: CausalLM, prompt_ids: Sequence[int], space: CanarySpace, *, batch: int = 64
) -> np.ndarray:
    """`secret_log_likelihoods` the slow way: one full forward pass per secret (tests only)."""
    import torch

    prompt = [int(t) for t in prompt_ids]
    _, sequences = _tokenized_space(lm, space)
    model: Any = lm.model
    out = np.zeros(len(sequences), dtype=np.float64)
    for start in range(0, len(sequences), batch):
        group = sequences[start : start + batch]
        width = len(prompt) + max(len(s) for s in group)
        ids = torch.zeros((len(group), width), dtype=torch.long)
        attention = torch.zeros((len(group), width), dtype=torch.long)
        for i, s in enumerate(group):
            row = prompt + list(s)
            ids[i, : len(row)] = torch.tensor(row)
            attention[i, : len(row)] = 1
        with torch.inference_mode():
            logits = model(input_ids=ids, attention_mask=attention).logits.float()
        logs = torch.log_softmax(logits, dim=-1)
        for i, s in enumerate(group):
            pos = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(s))
            out[start + i] = float(logs[i, pos, torch.tensor(list(s))].double().sum())
    return out


# --- ranks and exposures -----------------------------------------------------------------------


def likelihood_rank(scores: np.ndarray, index: int) -> float:
    """The rank of secret `index` among all of `scores` (1 = most likely; ties count half)."""
    values = np.asarray(scores, dtype=np.float64)
    true = values[index]
    above = int(np.count_nonzero(values > true))
    ties = int(np.count_nonzero(values == true))
    return 1.0 + above + 0.5 * (ties - 1)  # the secret ties with itself once


@dataclass(frozen=True)
class LikelihoodExposure:
    secret: str
    log_likelihood: float  # nats
    rank: float
    exposure: float  # bits

    def as_dict(self, *, reveal: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {"rank": self.rank, "exposure": self.exposure, "log_likelihood": self.log_likelihood}
        if reveal:
            data["secret"] = self.secret
        return data


def likelihood_exposures(space: CanarySpace, scores: np.ndarray, secrets_: Sequence[str]) -> list[LikelihoodExposure]:
    """Exact rank and exposure of each of `secrets_` given every secret's score (`secret_log_likelihoods`)."""
    values = np.asarray(scores, dtype=np.float64)
    if values.shape != (space.size,):
        raise ValueError(f"need one score per secret of the space ({space.size}); got shape {values.shape}")
    out = []
    for s in secrets_:
        i = secret_index(space, s)
        rank = likelihood_rank(values, i)
        out.append(LikelihoodExposure(s, float(values[i]), rank, exposure_from_rank(rank, space.size)))
    return out


def model_exposures(
    lm: CausalLM,
    record: CanaryRecord,
    secrets_: Sequence[str],
    *,
    chunk_tokens: int = 1024,
    progress: Callable[[int, int], None] | None = None,
) -> list[LikelihoodExposure]:
    """Exposure of each of `secrets_` in `lm`: every secret of the record's space scored in the
    training format of the record's subject, each of `secrets_` ranked exactly among them."""
    scores = secret_log_likelihoods(
        lm, canary_prompt_ids(lm, record.subject), record.space, chunk_tokens=chunk_tokens, progress=progress
    )
    return likelihood_exposures(record.space, scores, secrets_)


def adapter_model(base: CausalLM, adapters_dir: str | Path, version: int) -> CausalLM:
    """`base` with global adapter `version` of an adapter store merged in (what the verifier runs as P_S^0)."""
    from specsteer.core.adapters import apply_adapters, load_global_adapter

    folder = load_global_adapter(version, adapters_dir)
    return apply_adapters(base, folder.path, None, expect_version=version)


def exposure_summary(exposures: Sequence[float]) -> dict[str, float | int]:
    """Count, mean, median, min and max of a set of exposures (bits)."""
    values = sorted(float(e) for e in exposures)
    if not values:
        return {"count": 0}
    mid = len(values) // 2
    median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
    return {
        "count": len(values),
        "mean": sum(values) / len(values),
        "median": median,
        "min": values[0],
        "max": values[-1],
    }


def random_rank_exceedance(bits: float) -> float:
    """P(exposure >= bits) for a secret the model knows nothing about (its rank is uniform): 2^-bits."""
    return math.pow(2.0, -bits)

"""Membership inference without generating: the draft likelihood-ratio attack.

Measuring membership from generations (a real profile and the same profile without one entry,
each a full generation through the verifier) costs two generations a pair. This attack needs
none, so it scales to hundreds of pairs in minutes. Along the real text y (teacher-forced), the
device with private context c drafts, at every position t, its greedy token
d_t = argmax P_S(. | c, x, y<t): the first token of the draft that goes up after y<t is committed.
The attacker is the cloud, which holds the public Specialist's weights (it runs P_S^0). To test
whether a history entry e was in the device's context, it scores the drafts by how much better e
explains them than no context at all:

    score = mean_t [ log P_S(d_t | e, x, y<t) - log P_S(d_t | x, y<t) ]

Members: drafts of a profile whose context holds e; non-members: drafts of the same profile
without it, scored against the same e. Four forward passes a pair, no sampling; the guard is off
(it can only withhold drafted tokens).

Everything here is token IDs and one causal LM's forward: which entry, which prompts and which
text a pair is made of is the caller's (`bench.privacy_report.membership_probe` builds them from
a profile on the device's own retrieval and prompt format).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from specsteer.privacy.leakage import auroc, tpr_at_fpr

__all__ = ["MembershipProbe", "draft_likelihood_attack", "draft_membership_score"]


@dataclass(frozen=True)
class MembershipProbe:
    """One member/non-member pair of the attack, as token IDs of the Specialist's vocabulary."""

    user_id: str
    target: list[int]  # the real text y the drafts are made along (the committed text)
    member_prompt: list[int]  # the device's private prompt, its context holding the entry
    non_member_prompt: list[int]  # the device's private prompt of the profile without the entry
    with_entry: list[int]  # the attacker's prompt: the entry as the public Specialist's context
    without: list[int]  # the attacker's prompt: no context


def _next_token_logprobs(model: torch.nn.Module, prefix: Sequence[int], target: Sequence[int]) -> torch.Tensor:
    """log P(. | prefix, target[:t]) for every t: one forward pass, rows aligned with `target`."""
    ids = torch.tensor([[*prefix, *target]], dtype=torch.long)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prefix) - 1 : len(prefix) + len(target) - 1]
    return torch.log_softmax(logits.float(), dim=-1)


def draft_membership_score(drafts: torch.Tensor, with_entry: torch.Tensor, without: torch.Tensor) -> float:
    """Mean log-likelihood ratio of the drafted tokens under the attacker's model with the entry
    as its context vs with none (rows: positions; columns: the vocabulary)."""
    picked = drafts.unsqueeze(-1)
    return float((with_entry.gather(-1, picked) - without.gather(-1, picked)).mean())


def draft_likelihood_attack(
    model: torch.nn.Module, probes: Iterable[MembershipProbe], max_tokens: int
) -> dict[str, Any]:
    """AUROC and TPR at 1 % FPR of the attack over `probes`, each scored along the first
    `max_tokens` tokens of its target with `model` (the Specialist's causal LM; no generation)."""
    member: list[float] = []
    non: list[float] = []
    users: set[str] = set()
    changed = positions = 0
    started = time.perf_counter()
    for probe in probes:
        users.add(probe.user_id)
        target = probe.target[:max_tokens]
        if not target:
            continue
        d_member = _next_token_logprobs(model, probe.member_prompt, target).argmax(-1)
        d_non = _next_token_logprobs(model, probe.non_member_prompt, target).argmax(-1)
        with_entry = _next_token_logprobs(model, probe.with_entry, target)
        without = _next_token_logprobs(model, probe.without, target)
        member.append(draft_membership_score(d_member, with_entry, without))
        non.append(draft_membership_score(d_non, with_entry, without))
        changed += int((d_member != d_non).sum())
        positions += len(target)
    if not member:
        return {"pairs": 0}
    return {
        "pairs": len(member),
        "users": len(users),
        "tokens_per_text": max_tokens,
        "auroc": auroc(member, non),
        "tpr_at_1pct_fpr": tpr_at_fpr(member, non, 0.01),
        "member_score_mean": statistics.fmean(member),
        "non_member_score_mean": statistics.fmean(non),
        "drafts_changed_share": changed / positions,
        "member_scores": member,
        "non_member_scores": non,
        "seconds": round(time.perf_counter() - started, 1),
        "score": "mean over the drafted tokens of log P_S(d | entry, x, y<t) - log P_S(d | x, y<t)",
    }

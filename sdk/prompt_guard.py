"""The prompt, guarded: what of the user's prompt goes up in the Open (the device side of `privacy.guard`).

The Open carries the public prompt's token IDs. Before it is sent, the device runs the session's
egress guard over the prompt and a policy (`PROMPT_POLICIES`, `ClientConfig.prompt_guard`,
`sdk generate --prompt-guard`) decides what to do with the sensitive spans it finds:

* `redact` (default): each span goes up as a numbered placeholder ("<PRIVATE_1>", or "<NAME_1>"
  with by-kind labels), so the Generalist can still refer to it; the device's own Specialist reads
  the real prompt, and the device puts the real spans back in its final text (`PromptPlan.restore`)
  wherever the committed text carries a placeholder. The spans are registered with the session's
  guard, so the device's drafts that repeat them are held like any registered string.
* `refuse`: nothing is sent and no session opens (`PromptRefused`, one sentence naming the kinds).
* `allow`: the prompt goes up as typed; the decision is put on record all the same.

Every span the guard's detectors find counts (registered names, secrets and canaries, personal-data
patterns, special categories) except verbatim runs of the user's history: a prompt names the
user's own code ("Inline mmapped_ref_iterator into ...") and saying so is the request itself.
The decision goes on the audit log as a `guard-decision` record right after the Open
(`prompt-redact` or `prompt-allow`, the span count, the placeholder label; never the span), which
`audit verify` checks comes before the first round and the leakage report reads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from specsteer.core.errors import ConfigError
from specsteer.core.session_types import GuardDecision
from specsteer.privacy.canaries import CanaryDetector
from specsteer.privacy.guard import EgressGuard

__all__ = ["PROMPT_POLICIES", "PromptPlan", "PromptRefused", "check_prompt_policy", "guard_prompt"]

PROMPT_POLICIES = ("redact", "refuse", "allow")  # a deployment's choice; "redact" by default


class PromptRefused(ConfigError):
    """The prompt carries sensitive spans and the prompt policy is `refuse`: nothing was sent."""


def check_prompt_policy(policy: str) -> None:
    if policy not in PROMPT_POLICIES:
        raise ConfigError(f"the prompt guard is one of {', '.join(PROMPT_POLICIES)}; got {policy!r}")


@dataclass(frozen=True)
class PromptPlan:
    """What of the prompt goes up: `public` (placeholders in place of the spans under `redact`),
    and each span as (placeholder, original text, kind)."""

    prompt: str
    public: str
    policy: str
    spans: tuple[tuple[str, str, str], ...] = ()
    labels: tuple[str, ...] = ()  # each span's placeholder label without its number, for the record

    def decisions(self) -> list[tuple[str, int, str]]:
        """The guard-decision records of this plan: (decision, count, placeholder label) per label."""
        if not self.spans or self.policy == "refuse":
            return []
        decision = GuardDecision.PROMPT_REDACT if self.policy == "redact" else GuardDecision.PROMPT_ALLOW
        counts: dict[str, int] = {}
        for label in self.labels:
            counts[label] = counts.get(label, 0) + 1
        return [(decision.value, n, label) for label, n in counts.items()]

    def registered(self) -> Mapping[str, str]:
        """The prompt's spans, for the session's guard to hold when a draft repeats them."""
        return {original: kind for _, original, kind in self.spans}

    def restore(self, text: str) -> str:
        """`text` with each placeholder this plan sent put back as the span it stands for."""
        if self.policy != "redact" or not self.spans:
            return text
        originals = {p: o for p, o, _ in self.spans}
        pattern = re.compile("|".join(re.escape(p) for p in sorted(originals, key=len, reverse=True)))
        return pattern.sub(lambda m: originals[m.group()], text)


def _numbered(label: str, n: int) -> str:
    """ "<PRIVATE>" -> "<PRIVATE_1>": numbered so the Generalist can refer to each span apart and
    the device can put each back (the audit log's placeholder grammar allows the suffix)."""
    if len(label) >= 2 and label[0] in "<[{" and label[-1] in ">]}":
        return f"{label[:-1]}_{n}{label[-1]}"
    return f"{label}_{n}"


def guard_prompt(guard: EgressGuard, prompt: str, policy: str = "redact") -> PromptPlan:
    """The plan for `prompt` under `policy` (raises `PromptRefused` for `refuse` with spans found)."""
    check_prompt_policy(policy)
    spans = guard.prompt_spans(prompt)
    if not spans:
        return PromptPlan(prompt, prompt, policy)
    kinds = sorted({s.kind for s in spans})
    if policy == "refuse":
        raise PromptRefused(
            f"the prompt carries {len(spans)} sensitive span(s) ({', '.join(kinds)}) and the prompt guard "
            "is refuse: nothing was sent (rewrite the prompt, or choose redact)"
        )
    out: list[tuple[str, str, str]] = []
    labels: list[str] = []
    numbers: dict[str, int] = {}  # a repeated span keeps its number
    pieces: list[str] = []
    at = 0
    for s in spans:
        original = prompt[s.start : s.end]
        label = guard.placeholder_for(s.kind)
        if original not in numbers:
            numbers[original] = len(numbers) + 1
        placeholder = _numbered(label, numbers[original])
        out.append((placeholder, original, s.kind))
        labels.append(label)
        pieces += [prompt[at : s.start], placeholder]
        at = s.end
    public = "".join([*pieces, prompt[at:]]) if policy == "redact" else prompt
    return PromptPlan(prompt, public, policy, tuple(out), tuple(labels))


def session_guard(guard: EgressGuard, plan: PromptPlan) -> EgressGuard:
    """The session's guard: the public prompt's n-grams are not private, and the prompt's spans are
    registered strings for this session (a draft that repeats one is held)."""
    session = guard.for_prompt(plan.public)
    registered = {k: v for k, v in plan.registered().items() if k.strip()}
    if not registered:
        return session
    extra = CanaryDetector(registered, common_words=guard.words)
    # A new record of what went up, now holding the prompt's secrets' cores too.
    return replace(session, detectors=(*session.detectors, extra)).new_session()

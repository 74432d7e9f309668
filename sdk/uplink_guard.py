"""Where the egress guard decides what of a round goes up (the device side of `privacy.guard`).

Before every round the device calls `plan_uplink` with the tokens it is about to send: the pending
recovery (its pick among the cloud's candidates) and the fresh draft. The plan says what to send
and what the device's own text keeps:

* nothing sensitive: send as drafted;
* a span (or a prefix that may grow into one, a "hold") starts inside the draft: send the draft up
  to it (`cut`); the span reaches the front in a later round;
* a span at the front of the uplink, by the deployment's policy:
  - `placeholder`: the cloud commits placeholder tokens ("<EMAIL>") in `Round.literal_ids` in place
    of the span (and of the pending recovery, if the span covers it); the device's text keeps the
    real span, drafted by its own Specialist and committed unverified. The draft after the span is
    checked again and sent in the same round, so the guard adds no round trip.
  - `keep-local`: nothing of it goes up; the device finishes the text alone.

A hold is resolved by drafting further on the device (`more`, up to `max_lookahead` tokens, no
round trip); one that cannot be resolved is treated as a span: fail closed. The plan also names
the decisions to put on record (decision, count, placeholder label), never the span itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specsteer.core.errors import ConfigError
from specsteer.core.session_types import GuardDecision
from specsteer.privacy.guard import EgressGuard, GuardPolicy, GuardVerdict
from specsteer.privacy.spans import Tokenizer
from specsteer.sdk.context import Profile

__all__ = [
    "DEFAULT_GUARD_LABELS",
    "DEFAULT_GUARD_SETTING",
    "GUARD_SETTINGS",
    "UplinkPlan",
    "check_guard_setting",
    "guard_for_profile",
    "guard_setting",
    "plan_uplink",
]

# The decisions on record are `core.session_types.GuardDecision`s, the names `audit verify` reads.
CUT = GuardDecision.CUT
PLACEHOLDER = GuardDecision.PLACEHOLDER
KEEP_LOCAL = GuardDecision.KEEP_LOCAL


@dataclass(frozen=True)
class UplinkPlan:
    """What one round sends, and how much of `tokens` (pending + draft + look-ahead) the device keeps.

    The device's text keeps `tokens[:kept]`: the `pending` recovery tokens, any span committed
    locally, then the `draft` that goes up (always the last `len(draft)` kept tokens). Everything
    after `kept` is rolled back.
    """

    commit: list[int]
    literal: list[int]
    draft: list[int]
    tokens: list[int]
    pending: int
    kept: int
    decisions: list[tuple[str, int, str]] = field(default_factory=list)  # (decision, count, placeholder)
    keep_local: bool = False  # the policy keeps the rest of the text on the device
    lookahead: int = 0  # tokens drafted past the draft to resolve a hold
    checks: int = 0  # the guard's checks this plan took (each decodes and scans the window again)

    @property
    def local_span(self) -> list[int]:
        """Tokens after the pending recovery the device commits without the cloud (a replaced span)."""
        return self.tokens[self.pending : self.kept - len(self.draft)]


GUARD_SETTINGS = ("placeholder", "keep-local", "off")  # a deployment's choice
DEFAULT_GUARD_SETTING = "placeholder"  # what `sdk generate` and the benchmarks run when none is chosen
DEFAULT_GUARD_LABELS = "generic"  # one <PRIVATE> for every kind: a deployment setting's default labels


def guard_for_profile(
    profile: Profile | None,
    tokenizer: Tokenizer,
    policy: GuardPolicy | str,
    *,
    canaries: Sequence[str] = (),
    labels: str = "by-kind",
) -> EgressGuard:
    """The standard guard for a user: personal-data patterns, verbatim runs of the history, the
    names and emails of the history's trailers, and any registered canaries. `labels`: one
    placeholder per kind ("by-kind", "<EMAIL>") or one for every kind ("generic", what a
    deployment setting gets by default: `guard_setting`)."""
    entries = profile.entries if profile is not None else ()
    history = [t for e in entries for t in (e.subject, e.body) if t]
    identities = dict(profile.identities) if profile is not None else {}
    return EgressGuard.for_profile(
        history, tokenizer, identities=identities, canaries=canaries, policy=GuardPolicy(policy), labels=labels
    )


def check_guard_setting(setting: str) -> None:
    if setting not in GUARD_SETTINGS:
        raise ConfigError(f"the egress guard is one of {', '.join(GUARD_SETTINGS)}; got {setting!r}")


def guard_setting(
    profile: Profile | None, tokenizer: Tokenizer, setting: str, labels: str = DEFAULT_GUARD_LABELS
) -> EgressGuard | None:
    """The guard for a deployment setting (one of `GUARD_SETTINGS`); None for "off"."""
    check_guard_setting(setting)
    return None if setting == "off" else guard_for_profile(profile, tokenizer, setting, labels=labels)


def plan_uplink(
    guard: EgressGuard,
    tokenizer: Tokenizer,
    committed: Sequence[int],
    pending: Sequence[int],
    draft: Sequence[int],
    *,
    more: Callable[[], int | None],
    eos_ids: frozenset[int],
    draft_len: int,
    max_lookahead: int = 32,
) -> UplinkPlan:
    """Decide what of `pending + draft` goes up. `committed` is the device's real text before `pending`.

    `more()` drafts one more token on the device (None when it cannot: the budget is spent, so the
    text ends there and a bare last word is not held as a possible address local part).
    `draft_len` (K) bounds the draft sent after a placeholder.
    """
    tokens = [*pending, *draft]
    send = len(tokens)
    spent = False  # `more()` said the budget is spent: the text ends where it is
    checks = 0

    def check(before: Sequence[int], start: int, n_send: int) -> GuardVerdict:
        nonlocal checks
        checks += 1
        ended = bool(tokens) and tokens[-1] in eos_ids
        # At the end of the budget a bare last word cannot become an address any more; any other
        # hold (a written "@", a secret's first digits) still fails closed.
        g = guard.without_local_part_holds() if spent else guard
        return g.check(before, tokens[start:], tokenizer, send=n_send, final=ended)

    def extend() -> bool:
        """Draft one more token locally; False at end of text, at the budget, or at the look-ahead cap."""
        nonlocal spent
        if (tokens and tokens[-1] in eos_ids) or len(tokens) - send >= max_lookahead:
            return False
        token = more()
        if token is None:
            spent = True  # nothing more will be written
            return False
        tokens.append(token)
        return True

    verdict = check(committed, 0, send)
    while verdict.hold and extend():
        verdict = check(committed, 0, send)
    if verdict.hold and spent:
        verdict = check(committed, 0, send)
    n_pending = len(pending)

    def plan(
        commit: list[int], literal: list[int], sent: list[int], kept: int, decisions: Sequence[tuple[str, int, str]]
    ) -> UplinkPlan:
        # The session's record of what went up (a secret's chunks, `privacy.uplinked`).
        guard.note_uplink([*committed, *tokens[: kept - len(sent)]], sent, tokenizer)
        return UplinkPlan(
            commit, literal, sent, tokens, n_pending, kept, list(decisions), lookahead=len(tokens) - send, checks=checks
        )

    if verdict.cut_at is None:
        return plan(list(pending), [], list(draft), send, [])
    label = verdict.placeholder or guard.placeholder_for(verdict.kind or "")
    if verdict.cut_at >= max(n_pending, 1):
        return plan(list(pending), [], tokens[n_pending : verdict.cut_at], verdict.cut_at, [(CUT, 1, label)])
    # The span is at the front (it may cover the pending recovery): the deployment's policy decides.
    if guard.policy is GuardPolicy.KEEP_LOCAL:
        lookahead = len(tokens) - send
        return UplinkPlan([], [], [], tokens, n_pending, len(tokens), [(KEEP_LOCAL, 1, label)], True, lookahead, checks)
    assert verdict.kind is not None and verdict.span_end is not None
    span_end = max(verdict.span_end, n_pending)
    decisions = [(PLACEHOLDER, 1, label)]
    literal = guard.placeholder_ids(verdict.kind, tokenizer)
    # The round goes on with a draft after the span (drafted further if need be), checked in turn,
    # so the cloud verifies the continuation in the same round instead of steering blind after it.
    while len(tokens) < span_end + draft_len and extend():
        pass
    # A hold the look-ahead could not resolve is replaced up to where the device stopped looking;
    # what follows it (possibly the rest of a character split across tokens) is not judged yet.
    rest = 0 if verdict.hold else min(draft_len, max(0, len(tokens) - span_end))
    sent: list[int] = []
    if rest:
        after = check([*committed, *tokens[:span_end]], span_end, rest)
        while after.hold and extend():
            after = check([*committed, *tokens[:span_end]], span_end, rest)
        if after.hold and spent:
            after = check([*committed, *tokens[:span_end]], span_end, rest)
        n = rest if after.cut_at is None else after.cut_at
        sent = tokens[span_end : span_end + n]
        if after.cut_at is not None:
            decisions.append((CUT, 1, after.placeholder or label))
    return plan([], literal, sent, span_end + len(sent), decisions)

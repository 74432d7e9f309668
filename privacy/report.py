"""The leakage report over one device's audit log: what the cloud received, measured.

`leakage_report` rebuilds every uplink from the log (`privacy.data.read_uplinks`, optionally only
those a server transcript says arrived) and counts identity hits, personal-data patterns, verbatim
history runs, canary exposure, per-round sizes and the guard's decisions. `privacy leakage-report`
prints it; `bench.privacy_report` computes it for each of its runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specsteer.core.session_types import GuardDecision
from specsteer.privacy.canaries import CanaryDetector
from specsteer.privacy.data import Canary, UplinkSession, read_canaries, read_uplinks, read_users
from specsteer.privacy.errors import PrivacyError
from specsteer.privacy.guard import EgressGuard, common_prefix_length
from specsteer.privacy.leakage import MAX_RANKED_SPACE, canary_exposure, size_channel
from specsteer.privacy.ngrams import VerbatimNgramDetector
from specsteer.privacy.pii import PiiDetector

__all__ = ["leakage_report"]

# How far a Specialist's embedding may be padded past its tokenizer's size (Qwen2.5: 151,936
# rows for 151,665 tokens); a session-begin vocabulary outside [len(tokenizer), that] was written
# by another tokenizer's model.
_PADDING = 1 / 16


def _check_tokenizer(sessions: Sequence[UplinkSession], tokenizer: Any, audit_log: Path) -> None:
    """Refuse a tokenizer that is not the one the log's Specialist used: decoding its IDs with
    another vocabulary would make a report of some other text (often a clean one)."""
    size = len(tokenizer)
    for s in sessions:
        if s.vocab_size is not None and not size <= s.vocab_size <= size + max(256, int(size * _PADDING)):
            raise PrivacyError(
                f"the audit log {audit_log} was written by a Specialist with a vocabulary of {s.vocab_size} "
                f"tokens and this tokenizer has {size}: pass that Specialist's tokenizer with --tokenizer"
            )
        top = max((i for i in (*s.prompt_ids, *(t for r in s.device_tokens() for t in r))), default=-1)
        if top >= size:
            raise PrivacyError(
                f"the audit log {audit_log} holds token ID {top}, past this tokenizer's {size} tokens: "
                "pass the Specialist's tokenizer with --tokenizer"
            )


def leakage_report(
    *,
    data: Path,
    audit_log: Path,
    tokenizer: Any,
    server_transcript: Path | None = None,
    canaries: Path | None = None,
    user: str | None = None,
    ngram: int = 8,
) -> dict[str, Any]:
    """Leakage measured on one audit log: identity hits, personal-data patterns, canary exposure
    (the canary's exact rank among every secret of its space, `privacy.leakage.canary_exposure`),
    verbatim history runs, per-round sizes, and the guard's decisions.

    Paired measurements (counterfactual n-grams, membership AUROC) need two runs and are computed
    with `privacy.leakage` by the benchmark that produced them.
    """
    users = read_users(data)
    if user is not None:
        users = [u for u in users if u.user_id == user]
        if not users:
            raise PrivacyError(f"the data file {data} has no user {user!r}")
    log = read_uplinks(audit_log, server_transcript=server_transcript)
    if server_transcript is not None and log.logged and not log.received:
        raise PrivacyError(
            f"the server transcript {server_transcript} holds none of the {log.logged} uplinks of the audit log "
            f"{audit_log}: it is another server's or another time's transcript"
        )
    if log.received < log.logged:
        log.problems.append(
            f"the server transcript holds {log.received} of the log's {log.logged} uplinks "
            f"({log.received / log.logged:.0%}); only those are counted"
        )
    _check_tokenizer(log.sessions, tokenizer, audit_log)

    def decode(ids: Sequence[int]) -> str:
        return tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)

    identities: dict[str, str] = {}
    for u in users:
        identities.update(u.trailer_identities())
    planted: list[Canary] = []
    if canaries is not None:
        space, planted = read_canaries(canaries)
        if space.size > MAX_RANKED_SPACE:
            raise PrivacyError(f"{canaries}: a canary space of {space.size} secrets is too large to rank exactly")
        planted = [c for c in planted if user is None or c.user_id in (None, user)]
    history = [t for u in users for t in u.history_texts()]
    ident = CanaryDetector(identities)
    pii = PiiDetector()
    verbatim = VerbatimNgramDetector.from_texts(history, tokenizer, n=ngram)
    # The device's own detector set (patterns, recognizers, the history's secrets, identities,
    # canaries, verbatim and rewritten history): what the guard would have stopped, by kind.
    guard = EgressGuard.for_profile(
        history, tokenizer, identities=identities, canaries=[space.render(c.secret) for c in planted], n=ngram
    )

    texts: list[str] = []
    identity_hits: Counter[str] = Counter()
    pattern_hits: Counter[str] = Counter()
    detector_hits: Counter[str] = Counter()
    runs = run_tokens = 0
    prompt_hits: Counter[str] = Counter()
    prompt_unaccounted: Counter[str] = Counter()
    prompt_decisions: Counter[str] = Counter()
    # Every byte the cloud received, accepted or not, in every session of the log: a secret sent a
    # few characters at a time (one rejected draft "Fjordlys", a later one "-2291") is no span in
    # any one view, but its chunks add up (`privacy.uplinked`, the record the guard keeps per session).
    split = guard.new_session().uplinked
    split_hits: Counter[str] = Counter()
    for s in log.sessions:
        prompt = decode(s.prompt_ids)
        # The prompt goes up in the Open: it is what the cloud received too (the user's, not the
        # device's, text), so it is scanned on its own, with every detector but the history's runs
        # (a prompt naming the user's own code is the request itself: `sdk.prompt_guard`).
        in_prompt = [sp.kind for sp in guard.prompt_spans(prompt)]
        prompt_hits.update(in_prompt)
        prompt_decisions.update(s.prompt_decisions)
        # Spans in a prompt the device recorded no "allow" for went up without the user's say-so:
        # a device without the prompt guard, or one whose guard missed them.
        if not s.prompt_decisions.get(GuardDecision.PROMPT_ALLOW):
            prompt_unaccounted.update(in_prompt)
        det = verbatim.for_prompt(prompt)
        session_guard = guard.for_prompt(prompt)
        for view, new in s.new_views():
            text = decode(view)
            texts.append(text)
            # Only what touches the view's new part: a rejected draft repeats committed context.
            cut = common_prefix_length(decode(view[:new]), text) if new else 0
            identity_hits.update(sp.kind for sp in ident.find(text) if sp.end > cut)
            pattern_hits.update(sp.kind for sp in pii.find(text) if sp.end > cut)
            detector_hits.update(sp.kind for sp in session_guard.inspect(text[:cut], text[cut:]))
            if split is not None:
                split_hits.update(sp.kind for sp in split.find(text, cut) if sp.end > cut)
                split.note(text, cut)
            found = [(a, b) for a, b in det.find_ids(view) if b > new]
            runs += len(found)
            run_tokens += sum(b - max(a, new) for a, b in found)
    stream = "\n".join(texts)

    exposures: list[dict[str, Any]] = []
    for c in planted:
        exposures.append(
            {
                "user_id": c.user_id,
                "exposure": canary_exposure(space, c.secret, stream),
                "max_exposure": space.bits,
                "verbatim": space.render(c.secret) in stream,
            }
        )

    sizes = [n for s in log.sessions for n in s.round_sizes]
    size_counts = Counter(sizes)
    return {
        "sessions": len(log.sessions),
        "rounds": len(sizes),
        "uplink_tokens": sum(len(t) for s in log.sessions for t in s.device_tokens()),
        "uplink_bytes": sum(s.uplink_bytes for s in log.sessions),
        "identity_hits": dict(sorted(identity_hits.items())),
        "pattern_hits": dict(sorted(pattern_hits.items())),
        "detector_hits": dict(sorted(detector_hits.items())),
        "split_hits": dict(sorted(split_hits.items())),
        "prompt_hits": dict(sorted(prompt_hits.items())),
        "prompt_decisions": dict(sorted(prompt_decisions.items())),
        "prompt_hits_unaccounted": dict(sorted(prompt_unaccounted.items())),
        "verbatim_runs": {"n": ngram, "runs": runs, "tokens": run_tokens},
        "canaries": exposures,
        "round_sizes": {
            "distinct": len(size_counts),
            "histogram": {str(k): v for k, v in sorted(size_counts.items())},
            # Sizes against the session they belong to: a constant-size uplink gives 0 bits, and so
            # does a log of one session, whatever its sizes (the command line says n/a for it).
            "bits_about_session": size_channel(
                sizes, [i for i, s in enumerate(log.sessions) for _ in s.round_sizes]
            ).mutual_information_bits
            if sizes
            else 0.0,
        },
        "guard_decisions": {f"{d}/{p}": n for (d, p), n in sorted(log.guard.items())},
        "problems": log.problems,
    }

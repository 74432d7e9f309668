"""The device side: the Specialist with the user's private context drafts and recovers.

It never opens a socket: it talks to a `Verifier` (in-process or remote) and hands it only the
raw public prompt's token IDs, the declared parameters, and token IDs of drafts and commits.

It does not import torch either: the Specialist's rows are read as numpy arrays (a torch row on
the CPU without a copy) and its choices are `core.recovery`'s, so a device whose forwards run on
onnxruntime-genai or llama.cpp (`Specialist(..., drafter=...)`, with a `core.device_lm.DeviceLM`)
never loads it. Only the torch drafter (no `drafter`) imports `core.kv`, and torch with it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from specsteer.core.device_lm import SpecialistLM
from specsteer.core.errors import ConfigError, ProtocolError
from specsteer.core.limits import max_new_tokens_problem, prompt_length_problem, top_k_problem
from specsteer.core.prompts import Example, render_prompt
from specsteer.core.recovery import choose, device_rng, recovery_scores
from specsteer.core.repetition import no_repeat_problem, repeating_candidates, repeating_tokens
from specsteer.core.sequence import CachedSequence
from specsteer.core.session_types import (
    FusionVector,
    GenerationStats,
    Method,
    SessionParams,
    SteeringVector,
    Verdict,
    check_setting_types,
)
from specsteer.privacy.guard import EgressGuard
from specsteer.privacy.spans import Tokenizer
from specsteer.sdk.context import Profile, ProfileIndex, fit_context
from specsteer.sdk.prompt_guard import check_prompt_policy, guard_prompt
from specsteer.sdk.prompt_guard import session_guard as prompt_session_guard
from specsteer.sdk.transport import ResumableVerifier, Verifier, VerifierLost, VerifierSession
from specsteer.sdk.uplink_guard import UplinkPlan, plan_uplink

if TYPE_CHECKING:
    from specsteer.core.models import CausalLM

OnCommit = Callable[[list[int]], None]
Reopen = Callable[[Sequence[int]], VerifierSession]
CAPACITY_MARGIN = 64
# Lost sessions one generation may resume (`_Uplink.round`); a fleet that loses more than this in
# one generation is failing, and the Specialist finishes the text instead.
MAX_RESUMES = 3
log = logging.getLogger("specsteer.sdk")


@dataclass(frozen=True)
class DecodeOptions:
    """Device-only decoding settings; none of them is sent to the cloud.

    `no_repeat_ngram` n (0: off) is the device's repetition stop (`core.repetition`): no drafted,
    recovered or local token completes an n-gram the generated text already holds."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    seed: int = 0
    no_repeat_ngram: int = 0

    def __post_init__(self) -> None:
        check_setting_types(type(self), vars(self))
        problem = max_new_tokens_problem(self.max_new_tokens)
        if problem is not None:
            raise ConfigError(problem)
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise ConfigError(f"temperature must be a finite positive number; got {self.temperature}")
        if self.seed < 0:  # numpy's generators take none
            raise ConfigError(f"seed must be a whole number, 0 or more; got {self.seed}")
        problem = no_repeat_problem(self.no_repeat_ngram)
        if problem is not None:
            raise ConfigError(problem)


@dataclass
class Generation:
    text: str
    token_ids: list[int]  # Specialist vocabulary, without the final end-of-sequence token
    stats: GenerationStats = field(default_factory=GenerationStats)
    fallback_detail: str | None = None  # what went wrong with the verifier, when stats.fallback is set


@runtime_checkable
class CheckedVerifier(Protocol):
    """A verifier that refuses out-of-bounds requests up front (`sdk.remote.RemoteVerifier`, whose k
    cap is the network's): `generate` asks it before the device computes anything."""

    def check(self, prompt_ids: Sequence[int], params: SessionParams) -> None: ...


class Drafter(Protocol):
    """Runs the Specialist's forwards on another backend (`sdk.llamacpp.LlamaCppDrafter`)."""

    model_name: str  # the `CausalLM.name` whose weights it runs

    def sequence(self, prefix_ids: Sequence[int], capacity: int | None = None) -> CachedSequence[Any]:
        """A sequence starting at `prefix_ids` that will hold at most `capacity` tokens (None: as
        many as the backend can); a backend that allocates its cache up front sizes it by that."""
        ...


class Specialist:
    """The on-device model plus the user's private history (optional) and its BM25 index.

    `drafter`, if given, runs the model's forwards instead of `lm.model` (the same weights on a
    faster backend); `lm` still gives the tokenizer, chat template and end-of-sequence ids, and
    may then be a `core.device_lm.DeviceLM` (no weights, no torch) or a `CausalLM` loaded with
    `weights=False`.
    """

    def __init__(
        self,
        lm: SpecialistLM,
        profile: Profile | None = None,
        *,
        context_entries: int = 3,
        context_chars: int = 1800,
        drafter: Drafter | None = None,
    ) -> None:
        if drafter is not None and drafter.model_name != lm.name:
            # e.g. a Specialist with adapters merged in (`+personal`): the drafter would drop them.
            raise ConfigError(
                f"the drafter runs {drafter.model_name} but the Specialist is {lm.name}: "
                "a drafter must run the Specialist's own weights"
            )
        if drafter is None and not lm.has_weights:
            raise ConfigError(
                f"the Specialist {lm.name} was loaded without weights: give it a drafter that runs them "
                "(sdk.LlamaCppDrafter), or load it with weights"
            )
        self.lm = lm
        self.drafter = drafter
        self.profile = profile
        self._index = ProfileIndex(profile) if profile is not None and profile.entries else None
        self.context_entries = context_entries
        self.context_chars = context_chars

    def context_for(self, prompt: str) -> list[Example]:
        """The author's earlier entries most relevant to `prompt`, fitted to `context_chars`."""
        if self._index is None:
            return []
        return fit_context(self._index.retrieve(prompt, self.context_entries), max_chars=self.context_chars)

    def public_prompt_ids(self, prompt: str) -> list[int]:
        """The raw public prompt as token IDs: what goes up, with no template and no context."""
        return list(self.lm.tokenizer.encode(prompt, add_special_tokens=False))

    def private_prompt_ids(self, prompt: str, *, with_context: bool) -> list[int]:
        return render_prompt(self.lm, prompt, self.context_for(prompt) if with_context else ())

    def sequence(self, prefix_ids: Sequence[int], capacity: int | None = None) -> CachedSequence[Any]:
        """A new KV-cached sequence of the Specialist's forwards, starting at `prefix_ids`, of at
        most `capacity` tokens (`Drafter.sequence`)."""
        if self.drafter is not None:
            return self.drafter.sequence(prefix_ids, capacity)
        from specsteer.core.kv import TokenSequence  # torch: only for the torch drafter

        return TokenSequence(cast("CausalLM", self.lm).model, prefix_ids)

    def decode(self, ids: Sequence[int]) -> str:
        # transformers types decode as `str | list[str]` (a list for a batch); one flat ID list is one str.
        return cast(
            str, self.lm.tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)
        )


def generate(
    specialist: Specialist,
    prompt: str,
    params: SessionParams,
    options: DecodeOptions,
    verifier: Verifier | None = None,
    *,
    on_commit: OnCommit | None = None,
    fallback: bool = True,
    guard: EgressGuard | None = None,
    prompt_guard: str = "redact",
) -> Generation:
    """Run one generation with `params.method`; device-only methods need no verifier.

    If the verifier goes away mid-generation (`VerifierLost`: the stream broke, a round timed out)
    and it is a `ResumableVerifier`, the generation resumes in a new session whose Open carries
    the tokens the lost one had committed, as its verifier saw them (`stats.resumed` says how often,
    `stats.resume_reasons` why), up to `MAX_RESUMES` times. If the verifier is unreachable, or
    no verifier takes the generation back, the Specialist finishes the text alone and
    `stats.fallback` says why; with `fallback=False` the error is raised instead. Any other error
    (a protocol breach, a refused TLS peer) is always raised.
    With a `guard`, every round's uplink is planned by `sdk.uplink_guard.plan_uplink` first; its
    keep-local policy ends the session and finishes locally (`stats.fallback = "guard-keep-local"`).
    The guard also decides what of the prompt goes up, by `prompt_guard` (`sdk.prompt_guard`).
    """
    if not prompt.strip():
        raise ConfigError("the prompt is empty")
    start = time.perf_counter()
    if params.method is Method.LLM and params.sampling and options.temperature != 1.0:
        # `llm` draws each token in the cloud, from P_G at T = 1: the temperature is a device-only
        # setting that the wire does not carry (no field in Open), so it would be ignored, silently.
        raise ConfigError(
            f"llm samples in the cloud at temperature 1, which the device cannot change; got temperature "
            f"{options.temperature:g} (use temperature 1, or greedy decoding)"
        )
    check_prompt_policy(prompt_guard)
    shown = guard_prompt(guard, prompt, prompt_guard) if guard is not None and params.method.uses_cloud else None
    public_ids = _checked_request(specialist, prompt if shown is None else shown.public, params, verifier)
    ids = specialist.private_prompt_ids(prompt, with_context=params.method.uses_private_context)
    # The budget bounds the sequence: drafts and look-ahead stay within it (`_steered_loop`); the
    # margin covers the tails of multi-token candidates scored after the last commit.
    seq = specialist.sequence(ids, capacity=len(ids) + options.max_new_tokens + CAPACITY_MARGIN)
    seq.forward_seconds = []  # the Specialist's own cost, for the stats
    rng = device_rng(options.seed)
    state = _State(
        specialist.lm.eos_ids, options.max_new_tokens, on_commit, vocabulary_width(specialist.lm), start=len(ids)
    )
    lost: VerifierLost | None = None
    kept_local: str | None = None
    if params.method.uses_cloud:
        assert verifier is not None  # _checked_request refused a missing one
        if params.draft_len > 0 or params.alpha != 0:
            seq.next_logprobs()  # prefill the private prompt before holding a verifier session
        try:
            session = verifier.open(public_ids, params)
        except VerifierLost as exc:
            lost = exc
            if fallback:
                exc.fell_back()
        else:
            session_guard = None if guard is None or shown is None else prompt_session_guard(guard, shown)
            if shown is not None:
                for decision, count, placeholder in shown.decisions():
                    session.guard_decision(decision, count, placeholder)
                    key = "guard_" + decision.replace("-", "_")
                    state.stats.extra[key] = state.stats.extra.get(key, 0) + count
            # A resumed Open carries the prompt as the first one did (placeholders, never the spans).
            reopen = partial(verifier.resume, public_ids, params) if isinstance(verifier, ResumableVerifier) else None
            uplink = _Uplink(session, session_guard, specialist.lm.tokenizer, reopen)
            try:
                kept_local = _steered_loop(uplink, seq, params, options, state, rng)
            except VerifierLost as exc:
                lost = exc
                if fallback:
                    exc.fell_back()  # on record before the session closes
            finally:
                uplink.session.close()
                state.stats.uplink_bytes = uplink.uplink_bytes
                state.stats.downlink_bytes = uplink.downlink_bytes
                state.stats.extra.update(uplink.session.verifier_stats)
    if lost is not None:
        if not fallback:
            raise lost
        state.stats.fallback = lost.reason
    elif kept_local is not None:
        state.stats.fallback = kept_local
    if lost is not None or kept_local is not None or not params.method.uses_cloud:
        _local_loop(seq, params.sampling, options, state, rng)
    if lost is not None:
        log.warning("%s; the Specialist finished the text on this device", lost)
    elif kept_local is not None:
        log.info("the egress guard kept the rest of the text on this device; the Specialist finished it")
    state.stats.seconds = time.perf_counter() - start
    state.stats.extra.update(_forward_times(seq))
    if state.round_waits:
        # How long the device waited for verdicts: the verifier's rounds plus the network's.
        waits = state.round_waits
        state.stats.extra["round_wait_ms"] = round(sum(waits) * 1000, 2)
        state.stats.extra["round_wait_median_ms"] = round(float(np.median(waits)) * 1000, 2)
    token_ids = state.generated[:-1] if state.ended else state.generated
    state.stats.new_tokens = len(token_ids)
    text = specialist.decode(token_ids)
    return Generation(
        text if shown is None else shown.restore(text),
        token_ids,
        state.stats,
        fallback_detail=str(lost) if lost is not None else None,
    )


def _forward_times(seq: CachedSequence[Any]) -> dict[str, float]:
    """The Specialist's own cost on this device: its prompt's prefill, the median of its later
    forwards (a draft step: one or two tokens each) and all its forwards together, in ms."""
    times = seq.forward_seconds or []
    out = (
        {"device_prefill_ms": round(times[0] * 1000, 2), "device_forwards_ms": round(sum(times) * 1000, 2)}
        if times
        else {}
    )
    if len(times) > 1:
        out["device_step_ms"] = round(float(np.median(times[1:])) * 1000, 2)
    return out


def _checked_request(
    specialist: Specialist, prompt: str, params: SessionParams, verifier: Verifier | None
) -> list[int]:
    """The public prompt's token IDs, once the request is known to be within the protocol's limits
    (`core.limits`): refused here, in milliseconds, rather than by the verifier after the device's
    prefill or as a frame the network will not carry. The prompt limit holds for the device-only
    methods too (`verifier` None), so a prompt runs the same way whichever method it is sent with;
    they send nothing, so they return no IDs."""
    public_ids = specialist.public_prompt_ids(prompt)
    problem = prompt_length_problem(len(public_ids))
    if problem is not None:
        raise ConfigError(problem)
    if not params.method.uses_cloud:
        return []
    if verifier is None:
        raise ConfigError(f"method {params.method.value} needs a verifier")
    problem = top_k_problem(params.top_k, specialist.lm.vocab_size, remote=False)
    if problem is not None:
        raise ConfigError(problem)
    if isinstance(verifier, CheckedVerifier):
        verifier.check(public_ids, params)
    return public_ids


def vocabulary_width(lm: SpecialistLM) -> int | None:
    """How many of the Specialist's logits are tokens: its tokenizer's vocabulary (added tokens
    included), or its table if that is smaller; None if the tokenizer does not say (every logit).

    A table padded past the vocabulary (Qwen2.5's 151,936 rows for 151,665 tokens) has rows that
    are no tokens: the device never drafts or draws them, as the cloud never proposes them
    (`server.session.vocabulary_width`), so every method works on the one width."""
    try:
        count = len(lm.tokenizer)  # `core.device_lm.FastTokenizer` counts as transformers' do
    except TypeError:
        return None
    return min(count, lm.vocab_size)


class _State:
    def __init__(
        self, eos_ids: frozenset[int], budget: int, on_commit: OnCommit | None, width: int | None, start: int = 0
    ) -> None:
        self.eos_ids = eos_ids
        self.width = width  # the row's columns that are tokens (`vocabulary_width`)
        self.start = start  # where the generated text begins in the device's sequence
        self.budget = budget
        self.generated: list[int] = []
        self.stats = GenerationStats()
        self.round_waits: list[float] = []  # seconds from each round's send to its verdict
        self._on_commit = on_commit

    @property
    def ended(self) -> bool:
        return bool(self.generated) and self.generated[-1] in self.eos_ids

    @property
    def remaining(self) -> int:
        return 0 if self.ended else self.budget - len(self.generated)

    def commit(self, tokens: Sequence[int]) -> list[int]:
        """Commit tokens up to the budget and the first end-of-sequence; returns what was kept."""
        kept: list[int] = []
        for t in tokens:
            if self.remaining <= 0:
                break
            kept.append(t)
            self.generated.append(t)
        if kept and self._on_commit is not None:
            self._on_commit([t for t in kept if t not in self.eos_ids])
        return kept


Rng = np.random.Generator


def _draw(logprobs: Any, sampling: bool, options: DecodeOptions, rng: Rng) -> int:
    return choose(logprobs, sampling=sampling, temperature=options.temperature, generator=rng)


def _draw_token(
    row: Any, width: int | None, sampling: bool, options: DecodeOptions, rng: Rng, stopped: Any = ()
) -> int:
    """A token drawn from a whole row of the Specialist, its padded columns left out (a view, no
    copy) and the repetition stop's `stopped` tokens given probability 0 (a copy)."""
    scores = np.asarray(row)[:width]
    stopped = np.asarray(stopped, dtype=np.int64)
    if stopped.size:
        scores = scores.copy()
        scores[stopped[stopped < scores.shape[-1]]] = -np.inf
    return _draw(scores, sampling, options, rng)


def _stopped(seq: CachedSequence[Any], state: _State, options: DecodeOptions) -> Any:
    """The tokens the repetition stop rules out after `seq` (empty when it is off)."""
    if not options.no_repeat_ngram:
        return ()
    return repeating_tokens(seq.ids[state.start :], options.no_repeat_ngram)


def _draw_next(seq: CachedSequence[Any], state: _State, sampling: bool, options: DecodeOptions, rng: Rng) -> int:
    """The Specialist's next token after `seq` (P_S^c, under the repetition stop)."""
    return _draw_token(seq.next_logprobs(), state.width, sampling, options, rng, _stopped(seq, state, options))


def _local_loop(seq: CachedSequence[Any], sampling: bool, options: DecodeOptions, state: _State, rng: Rng) -> None:
    """The Specialist alone (slm, slm-rag, and finishing locally when the cloud is gone)."""
    while state.remaining > 0:
        token = _draw_next(seq, state, sampling, options, rng)
        seq.push(state.commit([token]))


class _Uplink:
    """The session as the loop sees it: every round passes the egress guard (if any) first, and a
    session lost mid-generation is resumed in a new one when `reopen` is given."""

    def __init__(
        self, session: VerifierSession, guard: EgressGuard | None, tokenizer: Tokenizer, reopen: Reopen | None = None
    ) -> None:
        self.session = session
        self.guard = guard
        self.tokenizer = tokenizer
        self.reopen = reopen
        # The committed text as the verifier saw it: commits, guard placeholders (never the spans
        # they stand for) and accepted drafts, in order. A resumed Open carries exactly this, so
        # nothing goes up that had not gone up already.
        self.sent: list[int] = []
        self._ended_up = 0  # bytes of sessions that were lost and resumed
        self._ended_down = 0

    @property
    def uplink_bytes(self) -> int:
        return self._ended_up + self.session.uplink_bytes

    @property
    def downlink_bytes(self) -> int:
        return self._ended_down + self.session.downlink_bytes

    def round(self, stats: GenerationStats, commit: list[int], draft: list[int], literal: list[int]) -> Verdict:
        """One round; a lost session is resumed (`_resume`) and the round's draft sent again in
        the new one, its commit and placeholder already in that session's Open."""
        prefix = [*commit, *literal]
        while True:
            try:
                verdict = self.session.round(commit, draft, literal)
            except VerifierLost as lost:
                if not self._resume(lost, [*self.sent, *prefix], stats):
                    raise
                self.sent += prefix
                prefix, commit, literal = [], [], []
                continue
            self.sent += [*prefix, *draft[: verdict.accepted]]
            return verdict

    def _resume(self, lost: VerifierLost, resume_ids: list[int], stats: GenerationStats) -> bool:
        """Open a session that continues this generation; False if none can be had."""
        if self.reopen is None or stats.resumed >= MAX_RESUMES:
            return False
        try:
            session = self.reopen(resume_ids)
        except VerifierLost as again:
            log.warning("%s; no verifier took the generation back (%s)", lost, again)
            return False
        old, self.session = self.session, session
        old.close()  # on record as ended by the loss: a dead verifier gets no Close
        self._ended_up += old.uplink_bytes
        self._ended_down += old.downlink_bytes
        stats.resumed += 1
        stats.resume_reasons = f"{stats.resume_reasons},{lost.reason}" if stats.resume_reasons else lost.reason
        log.warning("%s; the generation resumed in a new session after %d committed tokens", lost, len(resume_ids))
        return True

    def plan(
        self, state: _State, pending: list[int], draft: list[int], more: Callable[[], int | None], draft_len: int
    ) -> UplinkPlan:
        tokens = [*pending, *draft]
        if self.guard is None:
            return UplinkPlan(list(pending), [], list(draft), tokens, len(pending), len(tokens))
        committed = state.generated[: len(state.generated) - len(pending)]
        plan = plan_uplink(
            self.guard, self.tokenizer, committed, pending, draft, more=more, eos_ids=state.eos_ids, draft_len=draft_len
        )
        extra = state.stats.extra
        for decision, count, placeholder in plan.decisions:
            # On record before the round it shapes; a tap that refuses stops the generation (fail closed).
            self.session.guard_decision(decision, count, placeholder)
            key = "guard_" + decision.replace("-", "_")
            extra[key] = extra.get(key, 0) + count
        if plan.lookahead:
            extra["guard_lookahead_tokens"] = extra.get("guard_lookahead_tokens", 0) + plan.lookahead
        extra["guard_checks"] = extra.get("guard_checks", 0) + plan.checks
        return plan


def _steered_loop(
    uplink: _Uplink,
    seq: CachedSequence[Any],
    params: SessionParams,
    options: DecodeOptions,
    state: _State,
    rng: Rng,
) -> str | None:
    """Draft - Verify - Recover until the budget is spent or the text ends.

    Returns a fallback reason if the guard's keep-local policy ended the session early.
    """
    pending: list[int] = []  # the last recovery, uplinked with the next round
    stats = state.stats
    while state.remaining > 0:
        draft: list[int] = []
        for _ in range(min(params.draft_len, state.remaining)):
            token = _draw_next(seq, state, params.sampling, options, rng)
            draft.append(token)
            seq.push([token])
            if token in state.eos_ids:
                break

        start = len(seq) - len(draft) - len(pending)  # where pending + draft begin in `seq`
        limit = start + len(pending) + state.remaining  # look-ahead stays within the token budget
        look_ahead = partial(_look_ahead, seq, limit, state, params.sampling, options, rng)
        plan = uplink.plan(state, pending, draft, look_ahead, params.draft_len)
        if plan.keep_local:
            # Drafted and looked-ahead tokens are P_S^c's own draws, as the local loop makes them: keep them.
            state.commit(plan.tokens[plan.pending :])
            uplink.session.end_locally("guard-keep-local")
            return "guard-keep-local"
        if start + plan.kept < len(seq):
            seq.truncate(start + plan.kept)  # withheld draft tokens and look-ahead
        state.commit(plan.local_span)
        draft = plan.draft
        try:
            sent = time.perf_counter()
            verdict = uplink.round(stats, plan.commit, draft, plan.literal)
            state.round_waits.append(time.perf_counter() - sent)
        except VerifierLost:
            # The draft came from P_S^c exactly as the local loop would draw it: keep it.
            state.commit(draft)
            raise
        stats.rounds += 1
        stats.drafted += len(draft)
        n = _check_verdict(verdict, len(draft), state.width)
        stats.accepted += n
        seq.truncate(len(seq) - len(draft) + n)
        state.commit(draft[:n])
        pending = []
        rejected = n < len(draft) or not draft
        if state.remaining <= 0 or not (rejected or params.bonus or params.method is Method.SD):
            continue
        if verdict.steering is None:
            raise ProtocolError("the verifier sent no steering candidates where a recovery is needed")
        pending = state.commit(_recover(seq, verdict, params, options, rng, state.width, state.start))
        seq.push(pending)
        if rejected:
            stats.recoveries += 1
        else:
            stats.bonus_tokens += 1
    return None


def _look_ahead(
    seq: CachedSequence[Any], limit: int, state: _State, sampling: bool, options: DecodeOptions, rng: Rng
) -> int | None:
    """Draft one more token on the device (the guard resolving a hold), unless `seq` is at `limit`."""
    if len(seq) >= limit:
        return None
    token = _draw_next(seq, state, sampling, options, rng)
    seq.push([token])
    return token


def _recover(
    seq: CachedSequence[Any],
    verdict: Verdict,
    params: SessionParams,
    options: DecodeOptions,
    rng: Rng,
    width: int | None = None,
    start: int = 0,
) -> tuple[int, ...]:
    """Pick a candidate by v + alpha * log P_S^c; under the repetition stop (`DecodeOptions.no_repeat_ngram`,
    the generated text beginning at `start` in `seq`) a candidate that repeats an n-gram is left
    out, unless every candidate does (a recovery must commit a token)."""
    assert verdict.steering is not None
    n = options.no_repeat_ngram
    if isinstance(verdict.steering, FusionVector):
        stopped = repeating_tokens(seq.ids[start:], n) if n else ()
        return (_fuse(seq, verdict.steering, params, options, rng, width, stopped),)
    candidates = verdict.steering.candidates
    if len(candidates) == 1:
        return candidates[0]
    values = np.asarray(verdict.steering.values, dtype=np.float32)
    if n:
        repeats = np.array(repeating_candidates(seq.ids[start:], candidates, n))
        if not repeats.all():
            # -inf before any scoring: such a candidate is never a contender (`_score_for_argmax`) nor drawn.
            values = np.where(repeats, np.float32(-np.inf), values)
    if params.alpha == 0:
        return candidates[_draw(values, params.sampling, options, rng)]
    if params.sampling:
        logp_sc = seq.score_continuations(candidates)
    else:
        logp_sc = _score_for_argmax(seq, candidates, values, params.alpha)
    return candidates[_draw(recovery_scores(values, logp_sc, params.alpha), params.sampling, options, rng)]


def _fuse(
    seq: CachedSequence[Any],
    fusion: FusionVector,
    params: SessionParams,
    options: DecodeOptions,
    rng: Rng,
    width: int | None = None,
    stopped: Any = (),
) -> int:
    """Token-level fusion over the whole vocabulary: the token by v + alpha * log P_S^c, i.e.
    log P_G + alpha (log P_S^c - log P_S^0) (greedy: argmax; sampling: softmax at T), the
    repetition stop's `stopped` tokens left out."""
    values = np.frombuffer(fusion.values, dtype="<f4").astype(np.float32)
    logp_sc = np.asarray(seq.next_logprobs())
    if logp_sc.shape[-1] != values.shape[-1]:
        raise ProtocolError(f"a fusion vector of {values.shape[-1]} values for a vocabulary of {logp_sc.shape[-1]}")
    return _draw_token(recovery_scores(values, logp_sc, params.alpha), width, params.sampling, options, rng, stopped)


def _score_for_argmax(
    seq: CachedSequence[Any], candidates: Sequence[tuple[int, ...]], values: NDArray[np.float32], alpha: float
) -> NDArray[np.float32]:
    """log P_S^c of each candidate, exact wherever it can change the argmax.

    A multi-token candidate costs a forward pass, but its log-probability is at most that of its
    first token. So only multi-token candidates whose first-token bound could beat the best
    single-token candidate are scored in full; the others keep their bound, which already loses.
    """
    first = np.asarray(seq.next_logprobs())[[c[0] for c in candidates]]
    bound = values + alpha * first
    single = [len(c) == 1 for c in candidates]
    best_exact = max((float(bound[i]) for i, s in enumerate(single) if s), default=-math.inf)
    contenders = [i for i, s in enumerate(single) if not s and float(bound[i]) >= best_exact]
    logp = first.copy()
    if contenders:
        logp[contenders] = np.asarray(seq.score_continuations([candidates[i] for i in contenders]))
    return logp


def _check_verdict(verdict: Verdict, drafted: int, width: int | None = None) -> int:
    if not 0 <= verdict.accepted <= drafted:
        raise ProtocolError(f"the verifier accepted {verdict.accepted} of {drafted} drafted tokens")
    if width is not None and isinstance(verdict.steering, SteeringVector):
        # The transport bounds IDs by the embedding table; rows past the tokenizer's vocabulary
        # (`vocabulary_width`) are no tokens, and an honest cloud never proposes them.
        bad = next((t for c in verdict.steering.candidates for t in c if t >= width), None)
        if bad is not None:
            raise ProtocolError(
                f"the verifier proposed token ID {bad}, a padded row past the Specialist's vocabulary of {width}"
            )
    return verdict.accepted

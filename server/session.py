"""The cloud verifier: Generalist P_G and the generic Specialist copy P_S^0, one session per generation.

A session holds the KV caches of both models for one device, verifies each round's draft with
`core.steering`, rolls the caches back to the accepted prefix and builds the steering vector.
It sees only token IDs and the declared parameters: never the private context.

The models may sit on a GPU, in any dtype (`core.models.load_causal_lm(device=, dtype=)`), and
even on two devices: their rows stay where they were computed, as fp32 log-probabilities, and
only what a round needs leaves them (a block's draft log-probabilities, the top-k ids and values;
`fusion`'s whole vector is its downlink anyway).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import secrets
import threading
from collections.abc import Callable, Sequence

import numpy as np
import torch
from transformers import PreTrainedModel

from specsteer.core import wire
from specsteer.core.contract import RoundContract, raise_first
from specsteer.core.errors import ConfigError, ProtocolError
from specsteer.core.kv import TensorSequence, TokenSequence
from specsteer.core.limits import MAX_NEW_TOKENS, prompt_length_problem, resume_length_problem
from specsteer.core.models import CausalLM
from specsteer.core.prompts import render_prompt
from specsteer.core.recovery import inverse_cdf
from specsteer.core.session_types import (
    MAX_CANDIDATE_TOKENS,
    CandidatePolicy,
    FusionVector,
    Method,
    SessionParams,
    SteeringVector,
    Verdict,
)
from specsteer.core.steering import (
    form_gammas,
    gated_gammas,
    refuse_nan,
    steering_candidates,
    steering_values,
    top_indices,
    verify_exact_greedy,
    verify_ratios,
)
from specsteer.server.errors import SessionTooLong
from specsteer.server.generalist import CrossVocabGeneralist, SharedVocabGeneralist
from specsteer.server.kv_budget import BudgetedSequence, KvBudget
from specsteer.server.slot_sequence import EngineRunner, SlotPools, SlotSequence
from specsteer.server.vocab import TextCodec, same_vocabulary

# Cross-vocabulary candidates are drawn from this many times k of the Generalist's top tokens,
# since some drop out (special tokens, partial characters, duplicates); the literal policy ranks by v
# within that pool, as scoring every Generalist token under P_S^0 would cost a forward per token.
CANDIDATE_POOL_FACTOR = 4


class CloudVerifier:
    """Holds the two cloud models; opens sessions. `max_top_k` caps k (None: no cap, in-process)."""

    def __init__(
        self,
        generalist: CausalLM,
        specialist: CausalLM,
        *,
        max_top_k: int | None = None,
        seed: int | None = None,
        cross_vocab: bool | None = None,
        global_adapters: Callable[[int], CausalLM] | None = None,
        kv_slots: SlotPools | None = None,
        kv_budget: KvBudget | None = None,
    ) -> None:
        self.generalist = generalist
        self.specialist = specialist
        # Adapter version -> the Specialist with that federated global adapter merged (P_S^0 of
        # devices that declare it). Without it, only version 0 (the base weights) is served.
        self.global_adapters = global_adapters
        self.max_top_k = max_top_k
        # Each session draws from a generator of its own (`session_generator`): with one shared
        # generator a device sampling with a known seed could count the draws other devices'
        # sessions made between its rounds. Without a seed the key is secret and random.
        self._seed_key = hashlib.sha256(str(seed).encode() if seed is not None else secrets.token_bytes(32)).digest()
        self._sessions = itertools.count()
        self._sessions_lock = threading.Lock()
        same = same_vocabulary(specialist.tokenizer, generalist.tokenizer)
        # cross_vocab=True forces the text-based path even for one tokenizer (tests compare both).
        self.cross_vocab = (not same) if cross_vocab is None else cross_vocab
        if not self.cross_vocab and not same:
            raise ValueError("the shared-vocabulary path needs both models to use one tokenizer")
        self.s_codec = TextCodec(specialist.tokenizer, specialist.eos_ids)
        # One width for every method: the tokenizer's vocabulary. Two models of one tokenizer may
        # pad their embedding tables to different sizes (Qwen2.5 7B and up: 152,064 rows, 0.5B-3B:
        # 151,936); rows past the vocabulary are no tokens, so they are masked (never proposed or
        # chosen) and an ID past it is refused. Compared at the wrong width, v's two rows did not
        # line up (specsteer crashed), `llm`/`sd` sent padded IDs the device refused, and a draft
        # past the Generalist's table indexed out of range.
        self.s_width = vocabulary_width(specialist)
        self.g_width = vocabulary_width(generalist) if self.cross_vocab else min(self.s_width, generalist.vocab_size)
        if not self.cross_vocab:
            self.s_width = self.g_width
        # The KV engine: None, a DynamicCache per session and model; else the slot pool (lean path).
        self.kv_slots = kv_slots
        # With dynamic KV: the memory all sessions' caches may take together (None: unbounded).
        self.kv_budget = kv_budget
        if kv_slots is not None:
            if self.cross_vocab:
                raise ValueError("the slot pool serves a Generalist that shares the Specialist's vocabulary")
            for lm in (generalist, specialist):
                kv_slots.check(lm.model)

    def sequence(
        self, model: PreTrainedModel, prefix_ids: Sequence[int], runner: EngineRunner | None
    ) -> TensorSequence:
        """A session's sequence on `model`, on this verifier's KV engine."""
        if self.kv_slots is not None:
            return self.kv_slots.sequence(model, prefix_ids, runner)
        if self.kv_budget is not None:
            return BudgetedSequence(model, prefix_ids, runner, self.kv_budget)
        return TokenSequence(model, prefix_ids, runner)

    def open(
        self,
        prompt_ids: Sequence[int],
        params: SessionParams,
        *,
        runner: EngineRunner | None = None,
        resume_ids: Sequence[int] = (),
    ) -> CloudSession:
        """A session; `runner` runs its models' forwards (None: each alone, on the caller's thread).
        `resume_ids`: a resumed generation's committed tokens (`Open.resume_ids`), after the prompt."""
        return CloudSession(self, prompt_ids, params, runner=runner, resume_ids=resume_ids)

    def specialist_for(self, adapter_version: int) -> CausalLM:
        """The generic Specialist copy a session declaring `adapter_version` must be verified with."""
        if adapter_version == 0:
            return self.specialist
        if self.global_adapters is None:
            raise ProtocolError(
                f"the session declares global adapter v{adapter_version}, but this verifier serves only the "
                "base Specialist (v0)"
            )
        try:
            return self.global_adapters(adapter_version)
        except ConfigError as exc:
            raise ProtocolError(f"the session declares global adapter v{adapter_version}: {exc}") from None

    def session_generator(self) -> torch.Generator:
        """A new session's own generator: seeded from the verifier's key (its `seed`, else random
        bytes) and the session's number, so sessions opened in one order draw alike from run to
        run, and no session's draws depend on another's."""
        with self._sessions_lock:
            number = next(self._sessions)
        digest = hmac.new(self._seed_key, number.to_bytes(8, "big"), hashlib.sha256).digest()
        return torch.Generator().manual_seed(int.from_bytes(digest[:8], "big") >> 1)


def draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One index drawn with weights `probs` (on the CPU, any positive total; an entry of weight 0
    is never drawn), at one uniform from `generator`, by the device's two-level inverse CDF
    (`core.recovery.inverse_cdf`): `torch.multinomial` took 2.9 ms over a 152k vocabulary on this
    CPU, over a quarter of a stand-in `llm` round (docs/results/cloud_round_fast_cloud_cpu.md)."""
    uniform = float(torch.rand(1, generator=generator))
    return inverse_cdf(probs.numpy().astype(np.float32, copy=False), uniform)


class CloudSession:
    def __init__(
        self,
        verifier: CloudVerifier,
        prompt_ids: Sequence[int],
        params: SessionParams,
        *,
        runner: EngineRunner | None = None,
        resume_ids: Sequence[int] = (),
    ) -> None:
        # The IDs a device may send: the Specialist's vocabulary, at the width both models share.
        s_vocab = verifier.s_width
        if not prompt_ids:
            raise ProtocolError("the prompt is empty")
        problem = (
            prompt_length_problem(len(prompt_ids))
            or wire.vocabulary_violation(prompt_ids, s_vocab, "prompt")
            or resume_length_problem(len(resume_ids))
            or wire.vocabulary_violation(resume_ids, s_vocab, "resumed text")
        )
        if problem is not None:
            raise ProtocolError(problem)
        if not params.method.uses_cloud:
            raise ProtocolError(f"method {params.method.value} opens no cloud session")
        if verifier.max_top_k is not None and params.top_k > verifier.max_top_k:
            raise ProtocolError(f"top-k {params.top_k} is above this verifier's maximum {verifier.max_top_k}")
        self.verifier = verifier
        self.params = params
        self._rng = verifier.session_generator()
        # The session contract (core.contract) that the device's recorder and `audit verify` follow too.
        self.contract = RoundContract(vocab_size=s_vocab)
        self.contract.after_open(params.draft_len, params.padded_frames)
        self.closed = False
        # What the rounds have put in the KV caches: the text's tokens (commits and accepted drafts)
        # and, apart, the guard's placeholders, which stand in for spans of a different length.
        self.text_tokens = 0
        self.placeholder_tokens = 0
        # A resumed session's earlier text and placeholders, which it cannot tell apart: bounded
        # with this session's own, by what one session may hold of both (`_check_length`).
        self.resumed_tokens = len(resume_ids)
        # `close` may come from another thread mid-round (a stream that vanished while its round ran):
        # the KV slots are then handed back when the round is done, not under its forwards.
        self._state = threading.Lock()
        self._in_round = False
        self._release_after_round = False
        self._sequences: list[TensorSequence] = []
        try:
            self._start(verifier, prompt_ids, params, runner, resume_ids)
        except BaseException:
            # Release now: the half-made session lives on in the exception's traceback, a cycle
            # that only the collector frees, holding its KV slots until then.
            self._release()
            raise

    def _start(
        self,
        verifier: CloudVerifier,
        prompt_ids: Sequence[int],
        params: SessionParams,
        runner: EngineRunner | None,
        resume_ids: Sequence[int],
    ) -> None:
        prompt_text = verifier.s_codec.decode(prompt_ids)
        s0_lm = verifier.specialist_for(params.adapter_version)
        self.s0 = verifier.sequence(s0_lm.model, render_prompt(s0_lm, prompt_text), runner)
        self._sequences.append(self.s0)
        g_prompt = render_prompt(verifier.generalist, prompt_text)
        if verifier.cross_vocab:
            self.g: SharedVocabGeneralist | CrossVocabGeneralist = CrossVocabGeneralist(
                verifier.generalist, verifier.s_codec, g_prompt, runner=runner, make_sequence=verifier.sequence
            )
        else:
            self.g = SharedVocabGeneralist(
                verifier.generalist, g_prompt, runner=runner, make_sequence=verifier.sequence
            )
        self._sequences.append(self.g.seq)
        if resume_ids:
            # The earlier session's committed text, appended as its rounds appended it (commits and
            # placeholders unverified, accepted drafts), so both caches hold what they held there.
            self.s0.push(resume_ids)
            self.g.extend(resume_ids, [])
            self.g.accept(0)
        # Prefill at Open, not in the first round: the device does not wait for Open to be
        # answered, so over a network the prefill overlaps its first drafts; every round then feeds
        # only its own block; and a prompt the models cannot take is refused at Open.
        self.g.next_logprobs()
        if reads_generic_specialist(params):
            self.s0.next_logprobs()

    def stats(self) -> dict[str, float]:
        """Counters the device cannot see for itself (cross-vocabulary boundary sharing)."""
        if isinstance(self.g, CrossVocabGeneralist):
            return {"draft_boundaries_shared": self.g.shared_boundaries}
        return {}

    @property
    def rounds(self) -> int:
        return self.contract.rounds

    def round(self, commit: Sequence[int], draft: Sequence[int], literal: Sequence[int] = ()) -> Verdict:
        """Verify one draft after committing the device's choice from the last steering vector.

        `literal` is a guard placeholder the device sent in place of a sensitive span: appended
        after the commit without verification (it may stand in for the recovery, too). For an
        in-process caller; the server passes the frame it received to `round_frame`.
        """
        return self.round_frame(self.contract.next_frame(commit, draft, literal))

    def round_frame(self, frame: wire.RoundFrame) -> Verdict:
        """Check `frame` against the session contract (`ContractError` if it breaks it) and the
        session's length (`SessionTooLong`), then verify."""
        with self._state:
            if self.closed:
                raise ProtocolError("the session is closed")
            if self._in_round:
                raise ProtocolError("a round of this session is already being verified")
            self._in_round = True
        try:
            return self._round(frame)
        finally:
            with self._state:
                self._in_round = False
                release = self._release_after_round
            if release:
                self._release()

    def _round(self, frame: wire.RoundFrame) -> Verdict:
        raise_first(self.contract.round_violations(frame))
        self._check_length(frame)
        self.contract.after_round(frame)
        verdict = self._verify(list(frame.commit), list(frame.draft), list(frame.literal))
        self.text_tokens += len(frame.commit) + verdict.accepted
        self.placeholder_tokens += len(frame.literal)
        steering = verdict.steering
        dense = isinstance(steering, FusionVector)
        candidates = steering.candidates if isinstance(steering, SteeringVector) else ()
        self.contract.after_answer(frame.seq, verdict.accepted, candidates, fusion_vector=dense)
        return verdict

    def _check_length(self, frame: wire.RoundFrame) -> None:
        """Refuse a round past what the protocol lets a session generate (`SessionTooLong`).

        The verifier holds every session's tokens in its KV caches, so this bounds them whatever a
        device sends. A device generates at most `MAX_NEW_TOKENS` of its own tokens and drafts
        within that budget; its last commit, a steering candidate, may run past it by the
        candidate's length. Placeholders are counted apart, under the same bound: they stand in
        for spans of the device's text, each a few tokens longer or shorter than its span."""
        text = self.text_tokens + len(frame.commit) + len(frame.draft)
        placeholders = self.placeholder_tokens + len(frame.literal)
        whole = text + placeholders + self.resumed_tokens
        if (
            text > MAX_NEW_TOKENS + MAX_CANDIDATE_TOKENS
            or placeholders > MAX_NEW_TOKENS
            or whole > 2 * MAX_NEW_TOKENS + MAX_CANDIDATE_TOKENS
        ):
            resumed = f", {self.resumed_tokens:,} resumed" if self.resumed_tokens else ""
            raise SessionTooLong(
                f"round {frame.seq} would take the session past the protocol's {MAX_NEW_TOKENS} new tokens "
                f"({text:,} of its text, {placeholders:,} of placeholders{resumed})"
            )

    def _verify(self, commit: list[int], draft: list[int], literal: list[int]) -> Verdict:
        params = self.params
        prefix = [*commit, *literal]
        self.s0.push(prefix)
        s_base = len(self.s0)
        self.s0.push(draft)
        if reads_generic_specialist(params):
            # P_S^0's block first, unread: on a GPU its forward is queued and runs while the host
            # waits for P_G's log-probabilities (read back just below), not after them.
            self.s0.next_logprobs()
        units = self.g.extend(prefix, draft)
        if params.method is Method.SD:
            n_units = verify_exact_greedy([u.g_is_argmax for u in units])
        else:
            # Units cover the draft from its start, in order: read their P_S^0 rows back at once.
            covered = units[-1].s_stop if units else 0
            s0_logps, _, _ = self.s0.block_logprobs(s_base, draft[:covered], best=False)
            ratios = []
            for unit in units:
                logp_s0 = sum(s0_logps[j] for j in range(unit.s_start, unit.s_stop))
                ratios.append(unit.logp_g - logp_s0)
            uniforms = torch.rand(len(ratios), generator=self._rng).tolist() if params.sampling else None
            gammas = gated_gammas(
                [u.g_top for u in units],
                params.gamma,
                certainty=params.certainty,
                gamma_uncertain=params.gamma_uncertain,
            )
            if params.gamma_form is not None:
                form = self.verifier.s_codec.form_ids
                is_form = [all(t in form for t in draft[u.s_start : u.s_stop]) for u in units]
                gammas = form_gammas(gammas, is_form, params.gamma_form)
            n_units = verify_ratios(ratios, gammas, sampling=params.sampling, uniforms=uniforms)
        accepted = units[n_units - 1].s_stop if n_units else 0

        self.s0.truncate(s_base + accepted)
        self.g.accept(accepted)
        if accepted and draft[accepted - 1] in self.verifier.specialist.eos_ids:
            self.closed = True  # the text has ended
            return Verdict(accepted, None)
        return Verdict(accepted, self._steering())

    def _steering(self) -> SteeringVector | FusionVector:
        params = self.params
        alpha = params.alpha
        # Only the vocabulary's columns: padded rows of the table are never proposed or chosen.
        row_g = self.g.next_logprobs()[: self.verifier.g_width]
        if params.method is Method.LLM and params.sampling:
            return self._sample_generalist(row_g)
        if isinstance(self.g, SharedVocabGeneralist):
            if params.method is Method.FUSION:
                row_s0 = self._s0_row_beside(row_g) if alpha != 0 else None
                return fusion_vector(row_g, row_s0, alpha, self.verifier.specialist.vocab_size)
            if params.method is Method.SD:
                best = int(torch.argmax(row_g))
                return SteeringVector(((best,),), (0.0,))
            row_s0 = self._s0_row_beside(row_g) if alpha != 0 else None
            ids, values = steering_candidates(row_g, row_s0, alpha=alpha, k=params.top_k, policy=params.policy)
            # One copy each from the rows' device: k ids and k values.
            return SteeringVector(tuple((i,) for i in ids.tolist()), tuple(values.tolist()))

        wanted = 1 if params.method is Method.SD else params.top_k
        refuse_nan(row_g)  # a NaN row ranks as garbage: refused, not decoded
        cands = self.g.candidates(row_g, wanted * CANDIDATE_POOL_FACTOR)
        if not cands:  # the top of P_G was all special tokens or partial characters: look further
            cands = self.g.candidates(row_g, row_g.shape[-1])[:wanted]
        if not cands:
            raise ProtocolError("the Generalist proposed no candidate the Specialist can spell")
        if params.method is Method.SD:
            return SteeringVector((cands[0].s_tokens,), (0.0,))
        if params.policy is CandidatePolicy.GUARDRAIL:
            cands = cands[: params.top_k]  # the guardrail sends the top k by P_G: score only those under P_S^0
        logp_g = torch.tensor([c.logp_g for c in cands])
        logp_s0 = self.s0.score_continuations([c.s_tokens for c in cands]).cpu() if alpha != 0 else None
        values = steering_values(logp_g, logp_g if logp_s0 is None else logp_s0, alpha)  # always finite
        # Candidates come ranked by P_G (the guardrail order); the literal policy re-ranks by v.
        ranked = top_indices(values, params.top_k) if params.policy is CandidatePolicy.LITERAL else range(params.top_k)
        chosen = [int(i) for i in ranked if i < len(cands)]
        return SteeringVector(tuple(cands[i].s_tokens for i in chosen), tuple(float(values[i]) for i in chosen))

    def _s0_row_beside(self, row_g: torch.Tensor) -> torch.Tensor:
        """P_S^0's next row on P_G's row's device (the two models may sit on different ones), at
        the shared width."""
        return self.s0.next_logprobs()[: self.verifier.s_width].to(row_g.device)

    def _sample_generalist(self, row_g: torch.Tensor) -> SteeringVector:
        """`llm` in sampling mode: one draw from the whole of P_G (not from its top-k), sent as the
        one candidate the device must take. Across vocabularies, tokens the Specialist cannot spell
        (partial characters, special tokens without a counterpart) are redrawn, i.e. the draw is
        from P_G conditioned on being spellable."""
        refuse_nan(row_g)
        probs = row_g.float().exp().cpu()  # the session's seeded generator draws on the CPU
        for _ in range(probs.shape[-1]):
            if not float(probs.sum()) > 0:
                break
            g = draw(probs, self._rng)
            if isinstance(self.g, SharedVocabGeneralist):
                return SteeringVector(((g,),), (0.0,))
            spelled = self.g.spell(g)
            if spelled is not None:
                return SteeringVector((spelled,), (0.0,))
            probs[g] = 0.0
        raise ProtocolError("the Generalist proposed no token the Specialist can spell")

    def close(self) -> None:
        """End the session and hand back its KV slots: now, or once a round in progress is done."""
        with self._state:
            self.closed = True
            if self._in_round:
                self._release_after_round = True
                return
        self._release()

    def _release(self) -> None:
        for seq in self._sequences:
            if isinstance(seq, SlotSequence | BudgetedSequence):
                seq.release()


def reads_generic_specialist(params: SessionParams) -> bool:
    """Whether a session ever reads P_S^0: `sd` verifies and steers by P_G alone, and `llm`
    without alpha steers by P_G alone."""
    if params.method is Method.SD:
        return False
    return params.alpha != 0 or (params.method is not Method.LLM and params.draft_len > 0)


def fusion_vector(logp_g: torch.Tensor, logp_s0: torch.Tensor | None, alpha: float, vocab_size: int) -> FusionVector:
    """Token-level fusion's downlink: v = log P_G - alpha * log P_S^0 for each of the Specialist's
    `vocab_size` token IDs (the wire's width, the Specialist's table), as the little-endian float32
    bytes the wire carries. The rows given may be narrower (cut to the tokenizer's vocabulary, or a
    smaller table): an ID past them has P_G = 0, so its value is `core.steering.RULED_OUT` and the
    device never picks it."""
    refuse_nan(logp_g, logp_s0 if alpha != 0 else None)
    values = steering_values(
        _fit(logp_g, vocab_size), _fit(logp_s0 if logp_s0 is not None else logp_g, vocab_size), alpha
    )
    return FusionVector(values.cpu().numpy().astype("<f4", copy=False).tobytes())


def _fit(row: torch.Tensor, size: int) -> torch.Tensor:
    if row.shape[-1] >= size:
        return row[:size]
    return torch.cat([row, torch.full((size - row.shape[-1],), -torch.inf, dtype=row.dtype, device=row.device)])


def vocabulary_width(lm: CausalLM) -> int:
    """How many token IDs `lm` can take and score: its tokenizer's vocabulary (added tokens
    included), or its table if that is smaller. Rows of the table past it are padding."""
    return min(len(lm.tokenizer), lm.vocab_size)

"""The cloud verifier: Generalist P_G and the generic Specialist copy P_S^0, one session per generation.

A session holds the KV caches of both models for one device, verifies each round's draft with
`core.steering`, rolls the caches back to the accepted prefix and builds the steering vector.
It sees only token IDs and the declared parameters: never the private context.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from core.errors import ConfigError, ProtocolError
from core.kv import ForwardRunner, TokenSequence
from core.models import CausalLM
from core.prompts import render_prompt
from core.session_types import (
    MAX_CANDIDATE_TOKENS,
    MAX_LITERAL_TOKENS,
    CandidatePolicy,
    Method,
    SessionParams,
    SteeringVector,
    Verdict,
)
from core.steering import steering_candidates, steering_values, top_indices, verify_exact_greedy, verify_ratios
from server.generalist import CrossVocabGeneralist, SharedVocabGeneralist
from server.vocab import TextCodec, same_vocabulary

MAX_PROMPT_TOKENS = 4096
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
    ) -> None:
        self.generalist = generalist
        self.specialist = specialist
        # Adapter version -> the Specialist with that federated global adapter merged (P_S^0 of
        # devices that declare it). Without it, only version 0 (the base weights) is served.
        self.global_adapters = global_adapters
        self.max_top_k = max_top_k
        self._rng = torch.Generator().manual_seed(seed if seed is not None else torch.seed())
        same = same_vocabulary(specialist.tokenizer, generalist.tokenizer)
        # cross_vocab=True forces the text-based path even for one tokenizer (tests compare both).
        self.cross_vocab = (not same) if cross_vocab is None else cross_vocab
        if not self.cross_vocab and not same:
            raise ValueError("the shared-vocabulary path needs both models to use one tokenizer")
        self.s_codec = TextCodec(specialist.tokenizer, specialist.eos_ids)

    def open(
        self, prompt_ids: Sequence[int], params: SessionParams, *, runner: ForwardRunner | None = None
    ) -> CloudSession:
        """A session; `runner` runs its models' forwards (None: each alone, on the caller's thread)."""
        return CloudSession(self, prompt_ids, params, runner=runner)

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

    def uniforms(self, n: int) -> list[float]:
        return torch.rand(n, generator=self._rng).tolist()


class CloudSession:
    def __init__(
        self,
        verifier: CloudVerifier,
        prompt_ids: Sequence[int],
        params: SessionParams,
        *,
        runner: ForwardRunner | None = None,
    ) -> None:
        s_vocab = verifier.specialist.vocab_size
        if not prompt_ids:
            raise ProtocolError("the prompt is empty")
        if len(prompt_ids) > MAX_PROMPT_TOKENS:
            raise ProtocolError(f"the prompt has {len(prompt_ids)} tokens, more than {MAX_PROMPT_TOKENS}")
        _check_tokens(prompt_ids, s_vocab, "prompt")
        if not params.method.uses_cloud:
            raise ProtocolError(f"method {params.method.value} opens no cloud session")
        if verifier.max_top_k is not None and params.top_k > verifier.max_top_k:
            raise ProtocolError(f"top-k {params.top_k} is above this verifier's maximum {verifier.max_top_k}")
        self.verifier = verifier
        self.params = params
        self.rounds = 0
        self._expect_commit: set[tuple[int, ...]] | None = None  # None: no candidates outstanding
        self._must_commit = False  # the last round rejected a draft token (or drafted none): recover
        self.closed = False

        prompt_text = verifier.s_codec.decode(prompt_ids)
        s0_lm = verifier.specialist_for(params.adapter_version)
        self.s0 = TokenSequence(s0_lm.model, render_prompt(s0_lm, prompt_text), runner)
        g_prompt = render_prompt(verifier.generalist, prompt_text)
        if verifier.cross_vocab:
            self.g: SharedVocabGeneralist | CrossVocabGeneralist = CrossVocabGeneralist(
                verifier.generalist, verifier.s_codec, g_prompt, runner=runner
            )
        else:
            self.g = SharedVocabGeneralist(verifier.generalist, g_prompt, runner=runner)

    def stats(self) -> dict[str, float]:
        """Counters the device cannot see for itself (cross-vocabulary boundary sharing)."""
        if isinstance(self.g, CrossVocabGeneralist):
            return {"draft_boundaries_shared": self.g.shared_boundaries}
        return {}

    def round(self, commit: Sequence[int], draft: Sequence[int], literal: Sequence[int] = ()) -> Verdict:
        """Verify one draft after committing the device's choice from the last steering vector.

        `literal` is a guard placeholder the device sent in place of a sensitive span: appended
        after the commit without verification (it may stand in for the recovery, too).
        """
        params = self.params
        if self.closed:
            raise ProtocolError("the session is closed")
        _check_tokens(commit, self.verifier.specialist.vocab_size, "commit")
        _check_tokens(draft, self.verifier.specialist.vocab_size, "draft")
        _check_tokens(literal, self.verifier.specialist.vocab_size, "placeholder")
        if len(draft) > params.draft_len:
            raise ProtocolError(f"the draft has {len(draft)} tokens, more than K = {params.draft_len}")
        if self._expect_commit is None and commit:
            raise ProtocolError("a commit was sent with no steering candidates outstanding")
        if self._expect_commit is not None and commit and tuple(commit) not in self._expect_commit:
            raise ProtocolError("the commit is not one of the last steering candidates")
        if self._must_commit and not commit and not literal:
            raise ProtocolError("the last round rejected the draft, so this round must commit a recovery token")
        self.rounds += 1

        prefix = [*commit, *literal]
        self.s0.push(prefix)
        s_base = len(self.s0)
        self.s0.push(draft)
        units = self.g.extend(prefix, draft)
        if params.method is Method.SD:
            n_units = verify_exact_greedy([u.g_is_argmax for u in units])
        else:
            ratios = []
            for unit in units:
                positions = range(unit.s_start, unit.s_stop)
                logp_s0 = sum(float(self.s0.logprobs_at(s_base + j)[draft[j]]) for j in positions)
                ratios.append(unit.logp_g - logp_s0)
            uniforms = self.verifier.uniforms(len(ratios)) if params.sampling else None
            n_units = verify_ratios(ratios, params.gamma, sampling=params.sampling, uniforms=uniforms)
        accepted = units[n_units - 1].s_stop if n_units else 0

        self.s0.truncate(s_base + accepted)
        self.g.accept(accepted)
        if accepted and draft[accepted - 1] in self.verifier.specialist.eos_ids:
            self._expect_commit, self._must_commit = None, False
            self.closed = True  # the text has ended
            return Verdict(accepted, None)
        steering = self._steering()
        self._expect_commit = set(steering.candidates)
        self._must_commit = accepted < len(draft) or not draft
        return Verdict(accepted, steering)

    def _steering(self) -> SteeringVector:
        params = self.params
        alpha = params.alpha
        row_g = self.g.next_logprobs()
        if isinstance(self.g, SharedVocabGeneralist):
            if params.method is Method.SD:
                best = int(torch.argmax(row_g))
                return SteeringVector(((best,),), (0.0,))
            row_s0 = self.s0.next_logprobs() if alpha != 0 else None
            ids, values = steering_candidates(row_g, row_s0, alpha=alpha, k=params.top_k, policy=params.policy)
            return SteeringVector(tuple((int(i),) for i in ids), tuple(float(v) for v in values))

        wanted = 1 if params.method is Method.SD else params.top_k
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
        logp_s0 = self.s0.score_continuations([c.s_tokens for c in cands]) if alpha != 0 else None
        values = steering_values(logp_g, logp_s0, alpha) if logp_s0 is not None else logp_g
        # Candidates come ranked by P_G (the guardrail order); the literal policy re-ranks by v.
        chosen = top_indices(values, params.top_k) if params.policy is CandidatePolicy.LITERAL else range(params.top_k)
        chosen = [int(i) for i in chosen if i < len(cands)]
        return SteeringVector(tuple(cands[i].s_tokens for i in chosen), tuple(float(values[i]) for i in chosen))

    def close(self) -> None:
        self.closed = True


def _check_tokens(tokens: Sequence[int], vocab_size: int, what: str) -> None:
    for t in tokens:
        if t < 0 or t >= vocab_size:
            raise ProtocolError(f"{what} token ID {t} is outside the vocabulary of {vocab_size}")
    if what == "commit" and len(tokens) > MAX_CANDIDATE_TOKENS:
        raise ProtocolError(f"a commit has at most {MAX_CANDIDATE_TOKENS} tokens")
    if what == "placeholder" and len(tokens) > MAX_LITERAL_TOKENS:
        raise ProtocolError(f"a placeholder has at most {MAX_LITERAL_TOKENS} tokens")

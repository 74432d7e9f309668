"""algorithm.md's oracles, end to end on tiny models: device + in-process verifier, against
references computed here with plain full forward passes (no KV cache, no engine code)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from specsteer.core.models import CausalLM
from specsteer.core.prompts import render_prompt, task_prompt
from specsteer.core.session_types import CandidatePolicy, Method, SessionParams
from specsteer.core.steering import log_softmax
from specsteer.sdk.context import Profile
from specsteer.sdk.decoding import DecodeOptions, Generation, Specialist, generate
from specsteer.sdk.transport import InProcessVerifier
from specsteer.server.session import CloudVerifier
from specsteer.server.vocab import TextCodec
from tests.tinymodels import perturbed_copy, tiny_lm

FIXTURES = Path(__file__).parent / "fixtures" / "users.jsonl"
MAX_NEW = 24
PROMPT = task_prompt("refs: avoid rewriting packed-refs")


@pytest.fixture(scope="module")
def profile() -> Profile:
    first_user = FIXTURES.read_text(encoding="utf-8").splitlines()[0]
    return Profile.from_obj(json.loads(first_user), source=str(FIXTURES))


@pytest.fixture(scope="module")
def models(char_tok) -> tuple[CausalLM, CausalLM]:
    # The Generalist is a perturbed copy of the Specialist: it agrees with some drafts and not
    # others, so acceptance, rejection, recovery and rollback all happen (two independent random
    # models agree on almost nothing, and an oracle over all-rejected drafts proves little).
    specialist = tiny_lm(char_tok, seed=11, name="specialist")
    return specialist, perturbed_copy(specialist, seed=22, scale=0.2)


@pytest.fixture(scope="module")
def specialist(models, profile) -> Specialist:
    return Specialist(models[0], profile, context_chars=300)


def run(
    specialist: Specialist,
    generalist: CausalLM,
    method: Method,
    *,
    cross_vocab: bool | None = None,
    max_new: int = MAX_NEW,
    no_repeat_ngram: int = 0,
    **kw,
) -> Generation:
    """One generation through the in-process verifier (which goes through the wire format)."""
    cloud = CloudVerifier(generalist, specialist.lm, seed=0, cross_vocab=cross_vocab)
    verifier = InProcessVerifier(cloud.open, vocab_size=specialist.lm.vocab_size)
    if method in (Method.FUSION, Method.LLM):
        kw.setdefault("draft_len", 0)
    if method is Method.LLM:
        kw.setdefault("alpha", 0.0)
    params = SessionParams(method=method, **kw)
    options = DecodeOptions(max_new_tokens=max_new, no_repeat_ngram=no_repeat_ngram)
    return generate(specialist, PROMPT, params, options, verifier)


def last_logprobs(lm: CausalLM, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return log_softmax(lm.model(torch.tensor([ids])).logits[0, -1])


class Reference:
    """The three distributions at any prefix, computed from scratch."""

    def __init__(self, specialist: Specialist, generalist: CausalLM, prompt: str) -> None:
        s = specialist.lm
        public = s.tokenizer.decode(specialist.public_prompt_ids(prompt))
        self.sc_ids = specialist.private_prompt_ids(prompt, with_context=True)
        self.s_plain_ids = specialist.private_prompt_ids(prompt, with_context=False)
        self.s0_ids = render_prompt(s, public)
        self.g_ids = render_prompt(generalist, public)
        self.s, self.g = s, generalist

    def sc(self, gen: list[int]) -> torch.Tensor:
        return last_logprobs(self.s, self.sc_ids + gen)

    def s0(self, gen: list[int]) -> torch.Tensor:
        return last_logprobs(self.s, self.s0_ids + gen)

    def pg(self, gen: list[int]) -> torch.Tensor:
        return last_logprobs(self.g, self.g_ids + gen)

    def greedy(self, dist, n: int, no_repeat: int = 0) -> list[int]:
        gen: list[int] = []
        while len(gen) < n:
            gen.append(int(torch.argmax(without(dist(gen), stopped(gen, no_repeat)))))
            if gen[-1] in self.s.eos_ids:
                break
        return gen

    def fusion(self, alpha: float, n: int) -> list[int]:
        return self.greedy(lambda gen: self.pg(gen) + alpha * (self.sc(gen) - self.s0(gen)), n)

    def specsteer_token(
        self,
        gen: list[int],
        gamma: float,
        alpha: float,
        k: int,
        gate: tuple[float, float] | None = None,
        form: tuple[frozenset[int], float] | None = None,
        no_repeat: int = 0,
    ) -> tuple[int, int]:
        """(the Specialist's token if it passes the ratio test, else -1; the recovery token).
        `gate` (certainty, gamma_uncertain): the test uses gamma_uncertain where P_G's top
        probability is below certainty (algorithm.md, "The certainty gate"). `form` (form tokens,
        gamma_form): a draft of a form token is tested at gamma_form ("The form rule"). `no_repeat`
        n: the device's repetition stop ("The repetition stop"): P_S^c is 0 on every token that
        repeats an n-gram of `gen`, and so is a recovery candidate unless every one repeats."""
        ruled_out = stopped(gen, no_repeat)
        sc, s0, pg = without(self.sc(gen), ruled_out), self.s0(gen), self.pg(gen)
        if gate is not None and float(pg.max()) < math.log(gate[0]):
            gamma = gate[1]
        d = int(torch.argmax(sc))
        if form is not None and d in form[0]:
            gamma = form[1]
        passes = float(pg[d] - s0[d]) > (math.log(gamma) if gamma > 0 else -math.inf)
        cands = torch.sort(pg, descending=True, stable=True).indices[:k]
        if not all(int(c) in ruled_out for c in cands):
            cands = torch.tensor([int(c) for c in cands if int(c) not in ruled_out])
        rec = int(cands[torch.argmax(pg[cands] - alpha * s0[cands] + alpha * self.sc(gen)[cands])])
        return (d if passes else -1), rec


def stopped(gen: list[int], n: int) -> set[int]:
    """The tokens that would repeat an n-gram of `gen` (none for n 0), found by brute force."""
    grams = {tuple(gen[i : i + n]) for i in range(len(gen) - n + 1)} if n else set()
    return {g[-1] for g in grams if list(g[:-1]) == gen[len(gen) - n + 1 :]}


def without(logp: torch.Tensor, tokens: set[int]) -> torch.Tensor:
    """`logp` with probability 0 on `tokens`."""
    out = logp.clone()
    out[sorted(tokens)] = -math.inf
    return out


def strip_eos(tokens: list[int], eos: frozenset[int]) -> list[int]:
    return tokens[:-1] if tokens and tokens[-1] in eos else tokens


@pytest.fixture(scope="module")
def ref(specialist, models) -> Reference:
    return Reference(specialist, models[1], PROMPT)


def test_gamma_zero_single_round_equals_slm_rag(specialist, models, ref) -> None:
    # Execute
    steered = run(specialist, models[1], Method.SPECSTEER, gamma=0.0, draft_len=32)
    slm_rag = run(specialist, models[1], Method.SLM_RAG)
    # Assert: one round, everything accepted, same tokens as the Specialist-with-context alone.
    assert steered.stats.rounds == 1 and steered.stats.acceptance_rate == 1.0
    assert steered.token_ids == slm_rag.token_ids
    assert slm_rag.token_ids == strip_eos(ref.greedy(ref.sc, MAX_NEW), ref.s.eos_ids)


def test_slm_differs_from_slm_rag_only_by_context(specialist, models, ref) -> None:
    slm = run(specialist, models[1], Method.SLM)
    assert slm.token_ids == strip_eos(
        ref.greedy(lambda g: last_logprobs(ref.s, ref.s_plain_ids + g), MAX_NEW), ref.s.eos_ids
    )
    assert slm.stats.uplink_bytes == 0 and slm.stats.rounds == 0


@pytest.mark.parametrize("alpha", [1.0, 1.78])
def test_gamma_infinite_with_whole_vocabulary_equals_fusion(specialist, models, ref, alpha) -> None:
    vocab = specialist.lm.vocab_size
    steered = run(specialist, models[1], Method.SPECSTEER, gamma=math.inf, top_k=vocab, alpha=alpha, draft_len=3)
    fusion = run(specialist, models[1], Method.FUSION, top_k=vocab, alpha=alpha)
    assert steered.stats.accepted == 0
    assert steered.token_ids == fusion.token_ids
    assert fusion.token_ids == strip_eos(ref.fusion(alpha, MAX_NEW), ref.s.eos_ids)


def test_without_bonus_output_does_not_depend_on_draft_length(specialist, models, ref) -> None:
    # Prepare: a gamma at which some drafts pass and some fail, so rollback is exercised.
    outputs = {
        k: run(specialist, models[1], Method.SPECSTEER, gamma=0.05, draft_len=k, bonus=False) for k in (1, 2, 3, 5, 8)
    }
    # Assert: identical tokens for every K, and each position obeys the one-step rule exactly.
    first = outputs[1].token_ids
    assert all(out.token_ids == first for out in outputs.values())
    stats = outputs[5].stats
    assert 0 < stats.accepted < stats.drafted, "the gamma must give a mix of accepts and rejects"
    gen: list[int] = []
    for token in first:
        d, rec = ref.specsteer_token(gen, 0.05, 1.0, 10)
        assert token == (d if d >= 0 else rec)
        gen.append(token)


def same_tokens_for_every_k(specialist: Specialist, generalist: CausalLM, **rule: float) -> Generation:
    """The generation under `rule` with the bonus off at K 1 and K 3, asserted token for token the
    same (each position decided by one rule); the K 3 one, whose rounds test several units."""
    outputs = [run(specialist, generalist, Method.SPECSTEER, draft_len=k, bonus=False, **rule) for k in (1, 3)]
    assert outputs[1].token_ids == outputs[0].token_ids
    return outputs[1]


def test_the_certainty_gate_decides_each_position_by_the_generalists_top_probability(specialist, models, ref) -> None:
    """With the gate, as without, each position is decided by one rule (bonus off: independent of
    K), now at gamma where P_G's top probability reaches the certainty and gamma_uncertain below it."""
    # Prepare: a certainty at the median of the Generalist's top probabilities along the paper's
    # rule's text, so both arms of the gate run.
    plain = run(specialist, models[1], Method.SPECSTEER, gamma=0.5, draft_len=3, bonus=False)
    tops = sorted(float(ref.pg(plain.token_ids[:i]).max()) for i in range(len(plain.token_ids)))
    gate = {"gamma": 0.5, "certainty": round(math.exp(tops[len(tops) // 2]), 6), "gamma_uncertain": 0.01}
    # Execute
    out = same_tokens_for_every_k(specialist, models[1], **gate)
    # Assert: each token the one-step rule's at its position's gamma.
    gen: list[int] = []
    certain = 0
    for token in out.token_ids:
        certain += float(ref.pg(gen).max()) >= math.log(gate["certainty"])
        d, rec = ref.specsteer_token(gen, 0.5, 1.0, 10, gate=(gate["certainty"], gate["gamma_uncertain"]))
        assert token == (d if d >= 0 else rec)
        gen.append(token)
    assert 0 < certain < len(out.token_ids), "both arms of the gate must decide some position"
    assert out.stats.accepted > plain.stats.accepted  # the uncertain positions kept more drafts


def test_the_form_rule_tests_drafts_of_layout_and_punctuation_at_gamma_form(specialist, models, ref) -> None:
    """Under the form rule, as without, each position is decided by one rule (bonus off: independent
    of K), at gamma_form where the draft is a form token and at gamma elsewhere."""
    form_ids = TextCodec(specialist.lm.tokenizer, specialist.lm.eos_ids).form_ids
    # Execute
    plain = run(specialist, models[1], Method.SPECSTEER, gamma=0.5, draft_len=3, bonus=False)
    out = same_tokens_for_every_k(specialist, models[1], gamma=0.5, gamma_form=0.01)
    # Assert: each token the one-step rule's at its draft's gamma.
    gen: list[int] = []
    decided_by_form = 0
    for token in out.token_ids:
        d, rec = ref.specsteer_token(gen, 0.5, 1.0, 10, form=(form_ids, 0.01))
        assert token == (d if d >= 0 else rec)
        paper, _ = ref.specsteer_token(gen, 0.5, 1.0, 10)
        decided_by_form += paper != d  # a form draft the paper's gamma rejects and the form rule keeps
        gen.append(token)
    assert decided_by_form > 0, "the form rule must decide some position differently, or the test sees nothing"
    assert out.stats.accepted > plain.stats.accepted


def test_the_repetition_stop_rules_repeats_out_of_drafts_recoveries_and_the_device_alone(
    specialist, models, ref
) -> None:
    """Under the device's repetition stop each position is decided by the one-step rule with P_S^c
    at 0 on the tokens that would repeat an n-gram of the text so far (drafts, and recovery
    candidates unless all of them would), independent of K; slm-rag is P_S^c's greedy text under it."""
    n = 2
    plain = run(specialist, models[1], Method.SPECSTEER, gamma=0.5, draft_len=3, bonus=False)
    assert any(t in stopped(plain.token_ids[:i], n) for i, t in enumerate(plain.token_ids)), "nothing to stop"
    # Execute
    out = same_tokens_for_every_k(specialist, models[1], gamma=0.5, no_repeat_ngram=n)
    alone = run(specialist, models[1], Method.SLM_RAG, no_repeat_ngram=n)
    # Assert
    gen: list[int] = []
    for token in out.token_ids:
        d, rec = ref.specsteer_token(gen, 0.5, 1.0, 10, no_repeat=n)
        assert token == (d if d >= 0 else rec)
        gen.append(token)
    assert out.token_ids != plain.token_ids
    assert alone.token_ids == strip_eos(ref.greedy(ref.sc, MAX_NEW, no_repeat=n), ref.s.eos_ids)
    assert not any(t in stopped(alone.token_ids[:i], n) for i, t in enumerate(alone.token_ids))


def test_bonus_tokens_are_steered_recoveries(specialist, models, ref) -> None:
    out = run(specialist, models[1], Method.SPECSTEER, gamma=0.05, draft_len=2)
    assert out.stats.bonus_tokens > 0
    gen: list[int] = []
    for token in out.token_ids:
        d, rec = ref.specsteer_token(gen, 0.05, 1.0, 10)
        assert token in (d, rec)
        gen.append(token)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_sd_equals_llm(specialist, models, ref, k) -> None:
    sd = run(specialist, models[1], Method.SD, draft_len=k)
    llm = run(specialist, models[1], Method.LLM)
    assert 0 < sd.stats.accepted < sd.stats.drafted, "some drafts must pass and some fail, or sd proves nothing"
    assert sd.token_ids == llm.token_ids
    assert llm.token_ids == strip_eos(ref.greedy(ref.pg, MAX_NEW), ref.s.eos_ids)


@pytest.mark.parametrize("policy", [CandidatePolicy.GUARDRAIL, CandidatePolicy.LITERAL])
def test_candidate_policy_picks_the_best_fused_score_among_its_candidates(specialist, models, ref, policy) -> None:
    # gamma = inf: every token is a recovery over k = 3 candidates, chosen by the policy.
    k = 3
    out = run(specialist, models[1], Method.SPECSTEER, gamma=math.inf, top_k=k, policy=policy, draft_len=1)
    assert out.stats.accepted == 0 and len(out.token_ids) == MAX_NEW
    differs = 0
    gen: list[int] = []
    for token in out.token_ids:
        sc, s0, pg = ref.sc(gen), ref.s0(gen), ref.pg(gen)
        v = pg - s0
        ranked_by = pg if policy is CandidatePolicy.GUARDRAIL else v
        cands = sorted(range(len(v)), key=lambda y: (-float(ranked_by[y]), y))[:k]
        assert token == max(cands, key=lambda y: (float(v[y] + sc[y]), -y))
        other = pg if policy is CandidatePolicy.LITERAL else v
        differs += set(cands) != set(sorted(range(len(v)), key=lambda y: (-float(other[y]), y))[:k])
        gen.append(token)
    assert differs > 0, "the two policies must propose different candidates somewhere"


@pytest.mark.parametrize(
    "kw",
    [
        {"gamma": 0.5},
        {"gamma": 0.05, "draft_len": 3},
        {"gamma": 0.05, "draft_len": 2, "bonus": False},
        {"gamma": math.inf, "top_k": 20},
        {"gamma": 0.0, "draft_len": 32},
        {"gamma": 0.7, "draft_len": 3, "certainty": 0.1, "gamma_uncertain": 0.01},  # the certainty gate
        {"gamma": 0.7, "draft_len": 3, "gamma_form": 0.01},  # the form rule
    ],
)
def test_cross_vocabulary_path_reduces_to_shared_vocabulary_with_one_tokenizer(specialist, models, kw) -> None:
    shared = run(specialist, models[1], Method.SPECSTEER, cross_vocab=False, **kw)
    cross = run(specialist, models[1], Method.SPECSTEER, cross_vocab=True, **kw)
    assert cross.token_ids == shared.token_ids
    assert (cross.stats.accepted, cross.stats.rounds) == (shared.stats.accepted, shared.stats.rounds)
    assert cross.stats.extra["draft_boundaries_shared"] == cross.stats.drafted  # one tokenizer: all shared


def test_cross_vocabulary_sd_reduces_too(specialist, models) -> None:
    shared = run(specialist, models[1], Method.SD, cross_vocab=False, draft_len=3)
    cross = run(specialist, models[1], Method.SD, cross_vocab=True, draft_len=3)
    assert cross.token_ids == shared.token_ids


@pytest.mark.slow
def test_engine_one_step_law_holds_statistically_in_sampling_mode(specialist, models, ref) -> None:
    """P(y) = q(y) a(y) + (1 - sum q a) rho(y) for the first token, through device + verifier."""
    # Prepare: the law from the reference distributions at the empty prefix.
    gamma, k, n = 1.0, 5, 1500  # gamma 1: the law is 0.34 in total variation from drafting alone
    q, p_g, p_s0 = ref.sc([]).exp(), ref.pg([]).exp(), ref.s0([]).exp()
    a = torch.clamp(p_g / (gamma * p_s0), max=1.0)
    cands = torch.sort(p_g, descending=True, stable=True).indices[:k]
    rho = torch.zeros_like(q)
    rho[cands] = torch.softmax(ref.pg([])[cands] - ref.s0([])[cands] + ref.sc([])[cands], dim=0)
    law = q * a + (1 - (q * a).sum()) * rho
    assert float((law - q).abs().sum()) / 2 > 0.2, "the law must differ from drafting alone, or the test sees nothing"
    counts = torch.zeros_like(law)
    # Execute: n one-token generations with independent device and verifier seeds.
    for trial in range(n):
        cloud = CloudVerifier(models[1], specialist.lm, seed=10_000 + trial)
        verifier = InProcessVerifier(cloud.open, vocab_size=specialist.lm.vocab_size)
        params = SessionParams(sampling=True, gamma=gamma, top_k=k, draft_len=1)
        out = generate(specialist, PROMPT, params, DecodeOptions(max_new_tokens=1, seed=trial), verifier)
        token = out.token_ids[0] if out.token_ids else next(iter(specialist.lm.eos_ids))
        counts[token] += 1
    # Assert: Pearson chi-square over bins with expected count >= 5 (the rest pooled).
    expected = law * n
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum().unsqueeze(0)])
    exp = torch.cat([expected[big], expected[~big].sum().unsqueeze(0)])
    keep = exp > 0
    chi2 = float((((obs - exp) ** 2)[keep] / exp[keep]).sum())
    dof = int(keep.sum()) - 1
    # 0.999 quantile of chi-square via the Wilson-Hilferty approximation.
    z = 3.09
    bound = dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3
    assert chi2 < bound, (chi2, bound, dof)

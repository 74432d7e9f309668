"""One tokenizer, embedding tables of different sizes (Qwen2.5 7B and up pad to 152,064 rows, 0.5B-3B
to 151,936): every method works on the tokenizer's vocabulary, the padded rows masked (never
drafted, proposed or chosen). Outputs are held to references computed here from transformers'
logits of plain full forwards, cut to the vocabulary (algorithm.md, "Padded embedding tables")."""

from __future__ import annotations

import math

import pytest
import torch

from specsteer.core.contract import ContractError
from specsteer.core.models import CausalLM
from specsteer.core.prompts import render_prompt, task_prompt
from specsteer.core.session_types import CandidatePolicy, Method, SessionParams
from specsteer.sdk.decoding import DecodeOptions, Generation, Specialist, generate
from specsteer.sdk.transport import InProcessVerifier
from specsteer.server.session import CloudVerifier
from tests.tinymodels import perturbed_copy, tiny_lm

PROMPT = task_prompt("refs: avoid rewriting packed-refs")
MAX_NEW = 10
PAD = 28  # 100 tokens -> 128 rows


def padded(lm: CausalLM, rows: int) -> CausalLM:
    """`lm` with its table grown to `rows`, the new rows made attractive (3x copies of real rows), so
    that a padded row would win any argmax or top-k it took part in."""
    model = lm.model
    vocab = model.get_output_embeddings().weight.shape[0]
    model.resize_token_embeddings(rows, mean_resizing=False)
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head[vocab:] = head[: rows - vocab] * 3
    return CausalLM.from_parts(lm.name, model, lm.tokenizer)


@pytest.fixture(scope="module", params=["generalist-padded", "specialist-padded"])
def pair(request, char_tok) -> tuple[CausalLM, CausalLM]:
    specialist = tiny_lm(char_tok, seed=11, name="specialist")
    generalist = perturbed_copy(specialist, seed=22, scale=0.2)
    vocab = len(char_tok)
    if request.param == "generalist-padded":
        return specialist, padded(generalist, vocab + PAD)
    return padded(specialist, vocab + PAD), generalist


@pytest.fixture(scope="module")
def ref(pair) -> Reference:
    return Reference(*pair)


def run(specialist: CausalLM, generalist: CausalLM, method: Method, **kw) -> Generation:
    cloud = CloudVerifier(generalist, specialist, seed=0)
    verifier = InProcessVerifier(cloud.open, vocab_size=specialist.vocab_size)
    if method in (Method.FUSION, Method.LLM):
        kw.setdefault("draft_len", 0)
    if method is Method.LLM:
        kw.setdefault("alpha", 0.0)
    params = SessionParams(method=method, **kw)
    return generate(Specialist(specialist), PROMPT, params, DecodeOptions(max_new_tokens=MAX_NEW), verifier)


class Reference:
    """Next-token log-probabilities of each model at any prefix, from a plain full forward: `full`
    normalised over the model's own table (what the ratio test reads), `cut` its vocabulary's columns."""

    def __init__(self, specialist: CausalLM, generalist: CausalLM) -> None:
        public = specialist.tokenizer.decode(specialist.tokenizer.encode(PROMPT, add_special_tokens=False))
        self.s, self.g = specialist, generalist
        self.vocab = len(specialist.tokenizer)
        self.sc_ids = render_prompt(specialist, PROMPT)  # no profile: P_S^c sees the public prompt
        self.s0_ids = render_prompt(specialist, public)
        self.g_ids = render_prompt(generalist, public)
        self._rows: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    @staticmethod
    def full(lm: CausalLM, ids: list[int]) -> torch.Tensor:
        with torch.inference_mode():
            return torch.log_softmax(lm.model(torch.tensor([ids])).logits[0, -1].float(), dim=-1)

    def rows(self, gen: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(P_S^c, P_S^0, P_G) log-probabilities, each over its own table (cached: the tests share prefixes)."""
        key = tuple(gen)
        if key not in self._rows:
            self._rows[key] = (
                self.full(self.s, self.sc_ids + gen),
                self.full(self.s, self.s0_ids + gen),
                self.full(self.g, self.g_ids + gen),
            )
        return self._rows[key]

    def greedy(self, score, n: int = MAX_NEW) -> list[int]:
        gen: list[int] = []
        while len(gen) < n:
            sc, s0, pg = (r[: self.vocab] for r in self.rows(gen))
            gen.append(int(torch.argmax(score(sc, s0, pg))))
            if gen[-1] in self.s.eos_ids:
                return gen[:-1]
        return gen

    def specsteer(self, gamma: float, alpha: float, k: int, policy: CandidatePolicy) -> list[int]:
        """The per-position rule with the bonus off: the Specialist's token if it passes the ratio
        test, else the recovery over the top-k (its output does not depend on K)."""
        gen: list[int] = []
        while len(gen) < MAX_NEW:
            sc_full, s0_full, pg_full = self.rows(gen)
            sc, s0, pg = sc_full[: self.vocab], s0_full[: self.vocab], pg_full[: self.vocab]
            d = int(torch.argmax(sc))
            if float(pg_full[d] - s0_full[d]) > math.log(gamma):
                gen.append(d)
            else:
                v = pg - alpha * s0
                ranked = pg if policy is CandidatePolicy.GUARDRAIL else v
                cands = torch.sort(ranked, descending=True, stable=True).indices[:k]
                gen.append(int(cands[torch.argmax(v[cands] + alpha * sc[cands])]))
            if gen[-1] in self.s.eos_ids:
                return gen[:-1]
        return gen


@pytest.mark.parametrize(
    ("method", "kw", "expected"),
    [
        (Method.SLM, {}, lambda ref: ref.greedy(lambda sc, s0, pg: sc)),
        (Method.LLM, {}, lambda ref: ref.greedy(lambda sc, s0, pg: pg)),
        (Method.SD, {"draft_len": 3}, lambda ref: ref.greedy(lambda sc, s0, pg: pg)),
        (Method.FUSION, {"alpha": 1.5, "top_k": 100}, lambda ref: ref.greedy(lambda sc, s0, pg: pg + 1.5 * (sc - s0))),
        (
            Method.SPECSTEER,
            {"gamma": math.inf, "alpha": 1.5, "top_k": 100, "draft_len": 2},
            lambda ref: ref.greedy(lambda sc, s0, pg: pg + 1.5 * (sc - s0)),
        ),
        (
            Method.SPECSTEER,
            {"gamma": 0.3, "draft_len": 3, "bonus": False},
            lambda ref: ref.specsteer(0.3, 1.0, 10, CandidatePolicy.GUARDRAIL),
        ),
        (
            Method.SPECSTEER,
            {"gamma": 0.3, "draft_len": 3, "bonus": False, "policy": CandidatePolicy.LITERAL, "alpha": 2.0},
            lambda ref: ref.specsteer(0.3, 2.0, 10, CandidatePolicy.LITERAL),
        ),
        (
            Method.SPECSTEER,
            {"gamma": 0.3, "draft_len": 2, "bonus": False, "alpha": 0.0},
            lambda ref: ref.specsteer(0.3, 0.0, 10, CandidatePolicy.GUARDRAIL),
        ),
    ],
)
def test_every_method_decodes_over_the_tokenizers_vocabulary(pair, ref, method, kw, expected) -> None:
    specialist, generalist = pair
    out = run(specialist, generalist, method, **kw)
    assert out.stats.fallback is None
    assert out.token_ids == expected(ref)
    assert all(t < len(specialist.tokenizer) for t in out.token_ids)


def test_an_id_past_the_shared_vocabulary_is_refused_not_indexed(pair, char_tok) -> None:
    specialist, generalist = pair
    cloud = CloudVerifier(generalist, specialist, seed=0)
    session = cloud.open(char_tok.encode("refs", add_special_tokens=False), SessionParams(draft_len=2))
    with pytest.raises(ContractError, match="outside the vocabulary of 100"):
        session.round([], [len(char_tok) + 5])


def test_the_device_reads_the_width_from_either_tokenizer(char_tok) -> None:
    """A transformers tokenizer, or the torch-free `FastTokenizer` of an onnxruntime/llama.cpp device."""
    from types import SimpleNamespace

    from specsteer.core.device_lm import FastTokenizer
    from specsteer.sdk.decoding import vocabulary_width

    fast = FastTokenizer(char_tok.backend_tokenizer, None)
    assert vocabulary_width(SimpleNamespace(tokenizer=fast, vocab_size=128)) == len(char_tok) == 100
    assert vocabulary_width(SimpleNamespace(tokenizer=char_tok, vocab_size=90)) == 90  # a smaller table

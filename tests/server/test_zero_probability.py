"""A token the generic Specialist gives zero probability (P_S^0 = 0) is steered, not a protocol
error: log-probabilities are floored before they enter v (core.steering.LOGP_FLOOR)."""

from __future__ import annotations

import math

import pytest
import torch

from specsteer.core.models import CausalLM
from specsteer.core.prompts import task_prompt
from specsteer.core.session_types import Method, SessionParams
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.transport import InProcessVerifier
from specsteer.server.session import CloudVerifier
from tests.tinymodels import perturbed_copy, tiny_lm

PROMPT = task_prompt("refs: avoid rewriting packed-refs")


def masked(lm: CausalLM, token: int) -> CausalLM:
    """`lm` with `token`'s logit forced to -inf at every position: probability exactly 0."""

    def hook(_module: torch.nn.Module, _args: object, out: torch.Tensor) -> torch.Tensor:
        out = out.clone()
        out[..., token] = -math.inf
        return out

    lm.model.lm_head.register_forward_hook(hook)
    return lm


@pytest.mark.parametrize(
    ("method", "kw"),
    [(Method.SPECSTEER, {"gamma": math.inf, "draft_len": 2}), (Method.FUSION, {"draft_len": 0})],
)
def test_a_token_the_generic_specialist_rules_out_is_steered_not_refused(char_tok, method, kw) -> None:
    specialist = tiny_lm(char_tok, seed=11, name="specialist")
    generalist = perturbed_copy(specialist, seed=22, scale=0.2)
    device = Specialist(specialist)
    # The Generalist's first choice, which the Specialist (device and cloud copy) will rule out.
    prompt_ids = device.private_prompt_ids(PROMPT, with_context=False)
    with torch.inference_mode():
        first = int(torch.argmax(generalist.model(torch.tensor([prompt_ids])).logits[0, -1]))
    masked(specialist, first)
    cloud = CloudVerifier(generalist, specialist, seed=0)
    verifier = InProcessVerifier(cloud.open, vocab_size=specialist.vocab_size)
    params = SessionParams(method=method, top_k=5, **kw)
    out = generate(device, PROMPT, params, DecodeOptions(max_new_tokens=8), verifier, fallback=False)
    assert len(out.token_ids) == 8
    # The ruled-out token was a candidate with the floor's boost; P_S^c also rules it out, so its
    # fused score is log P_G: the Generalist's first choice wins the first position.
    assert out.token_ids[0] == first

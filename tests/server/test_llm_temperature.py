"""`llm` in sampling mode draws every token in the cloud, from P_G at temperature 1: the temperature
is a device-only setting the wire does not carry. A temperature other than 1 was ignored silently
(T = 0.05 gave the argmax in 76 of 200 runs where every other method gave it in 200); it is refused."""

from __future__ import annotations

import pytest

from specsteer.core.errors import ConfigError
from specsteer.core.prompts import task_prompt
from specsteer.core.session_types import Method, SessionParams
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.transport import InProcessVerifier
from specsteer.server.session import CloudVerifier
from tests.tinymodels import perturbed_copy, tiny_lm

PROMPT = task_prompt("refs: avoid rewriting packed-refs")


@pytest.fixture(scope="module")
def setup(char_tok):
    specialist = tiny_lm(char_tok, seed=11, name="specialist")
    generalist = perturbed_copy(specialist, seed=22, scale=0.2)
    cloud = CloudVerifier(generalist, specialist, seed=0)
    return Specialist(specialist), InProcessVerifier(cloud.open, vocab_size=specialist.vocab_size)


LLM_SAMPLING = SessionParams(method=Method.LLM, alpha=0.0, draft_len=0, sampling=True)


@pytest.mark.parametrize("temperature", [0.05, 0.7, 2.0])
def test_llm_sampling_refuses_a_temperature_it_cannot_apply(setup, temperature: float) -> None:
    device, verifier = setup
    options = DecodeOptions(max_new_tokens=4, temperature=temperature)
    with pytest.raises(ConfigError, match="llm samples in the cloud at temperature 1"):
        generate(device, PROMPT, LLM_SAMPLING, options, verifier, fallback=False)


def test_llm_sampling_at_temperature_one_and_llm_greedy_at_any_temperature_run(setup) -> None:
    device, verifier = setup
    out = generate(device, PROMPT, LLM_SAMPLING, DecodeOptions(max_new_tokens=4), verifier, fallback=False)
    assert len(out.token_ids) == 4
    greedy = SessionParams(method=Method.LLM, alpha=0.0, draft_len=0)
    out = generate(device, PROMPT, greedy, DecodeOptions(max_new_tokens=4, temperature=0.3), verifier, fallback=False)
    assert len(out.token_ids) == 4

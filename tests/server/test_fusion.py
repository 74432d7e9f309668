"""`fusion` is token-level fusion over the whole vocabulary (algorithm.md, Baselines), and pays its
real downlink over the wire; `llm` in sampling mode draws from the whole of P_G."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from specsteer.audit.log import AuditLog
from specsteer.audit.note import SigningKey
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.verify import inspect
from specsteer.core.session_types import FusionVector, Method, SessionParams
from specsteer.sdk.context import Profile
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.transport import InProcessVerifier
from specsteer.server.session import CloudVerifier
from tests.test_oracles import FIXTURES, MAX_NEW, PROMPT, Reference, run, strip_eos
from tests.tinymodels import perturbed_copy, tiny_lm
from tests.verifier_harness import make_pki, remote, serve


@pytest.fixture(scope="module")
def models(char_tok):
    specialist = tiny_lm(char_tok, seed=11, name="specialist")
    return specialist, perturbed_copy(specialist, seed=22, scale=0.2)


@pytest.fixture(scope="module")
def specialist(models) -> Specialist:
    profile = Profile.from_obj(json.loads(FIXTURES.read_text(encoding="utf-8").splitlines()[0]), source=str(FIXTURES))
    return Specialist(models[0], profile, context_chars=300)


@pytest.fixture(scope="module")
def ref(specialist, models) -> Reference:
    return Reference(specialist, models[1], PROMPT)


@pytest.mark.parametrize("top_k", [1, 10])
def test_fusion_fuses_over_the_whole_vocabulary_whatever_k(specialist, models, ref, top_k) -> None:
    full = strip_eos(ref.fusion(1.0, MAX_NEW), ref.s.eos_ids)
    # The reference differs from fusion restricted to P_G's top-k, or the test could not tell them apart.
    restricted: list[int] = []
    while len(restricted) < MAX_NEW:
        pg, sc, s0 = ref.pg(restricted), ref.sc(restricted), ref.s0(restricted)
        cands = torch.sort(pg, descending=True, stable=True).indices[:top_k]
        restricted.append(int(cands[torch.argmax((pg + sc - s0)[cands])]))
    assert restricted != full
    out = run(specialist, models[1], Method.FUSION, top_k=top_k)
    assert out.token_ids == full
    # One dense vector per token: 4 bytes per vocabulary entry, plus a few bytes of envelope.
    vocab = specialist.lm.vocab_size
    rounds = out.stats.rounds
    assert rounds in (len(full), len(full) + 1)  # one per token (and one for end-of-sequence)
    assert 4 * vocab * rounds <= out.stats.downlink_bytes <= (4 * vocab + 16) * rounds


def test_fusion_over_grpc_tls_is_the_same_and_its_audit_log_verifies(specialist, models, tmp_path: Path) -> None:
    params = SessionParams(method=Method.FUSION, draft_len=0, alpha=1.78)
    options = DecodeOptions(max_new_tokens=12)
    local_cloud = CloudVerifier(models[1], specialist.lm, seed=0)
    local = generate(
        specialist, PROMPT, params, options, InProcessVerifier(local_cloud.open, vocab_size=specialist.lm.vocab_size)
    )
    key = SigningKey.generate("device")
    pki = make_pki(tmp_path)
    with (
        AuditLog.open(tmp_path / "log", key) as log,
        serve(CloudVerifier(models[1], specialist.lm, seed=0), pki) as (_, port),
        remote(port, pki, vocab_size=specialist.lm.vocab_size, tap=EgressRecorder(log)) as verifier,
    ):
        net = generate(specialist, PROMPT, params, options, verifier, fallback=False)
    assert net.stats.fallback is None
    assert net.token_ids == local.token_ids
    assert net.stats.downlink_bytes == local.stats.downlink_bytes >= 4 * specialist.lm.vocab_size * 12
    report = inspect(tmp_path / "log", key=key.verifier)
    assert report.ok, report.render()


def test_llm_sampling_draws_from_the_whole_generalist_distribution(specialist, models, ref) -> None:
    """The first token's law is P_G itself, not P_G cut to its top-k (k = 1 here: the argmax)."""
    p_g = ref.pg([]).exp()
    n = 400
    counts = torch.zeros_like(p_g)
    for trial in range(n):
        cloud = CloudVerifier(models[1], specialist.lm, seed=trial)
        session = cloud.open(
            specialist.public_prompt_ids(PROMPT),
            SessionParams(method=Method.LLM, draft_len=0, alpha=0.0, sampling=True, top_k=1),
        )
        verdict = session.round([], [])
        assert verdict.steering is not None and not isinstance(verdict.steering, FusionVector)
        (token,) = verdict.steering.candidates
        counts[token[0]] += 1
    assert float(p_g.max()) < 0.9, "P_G must be spread, or the test sees nothing"
    expected = p_g * n
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum().unsqueeze(0)])
    exp = torch.cat([expected[big], expected[~big].sum().unsqueeze(0)])
    keep = exp > 0
    chi2 = float((((obs - exp) ** 2)[keep] / exp[keep]).sum())
    dof = int(keep.sum()) - 1
    bound = dof * (1 - 2 / (9 * dof) + 3.09 * math.sqrt(2 / (9 * dof))) ** 3  # 0.999 quantile
    assert chi2 < bound, (chi2, bound, dof)

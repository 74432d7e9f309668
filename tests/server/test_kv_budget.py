"""Dynamic KV caches share one memory budget: a session whose cache would grow past it is refused
with RESOURCE_EXHAUSTED (the verifier's limit), not left to grow until the kernel kills the
verifier and every session with it; rollbacks and ended sessions give their bytes back."""

from __future__ import annotations

import gc

import grpc
import pytest

from specsteer.core import wire
from specsteer.core.session_types import SessionParams
from specsteer.server.errors import SessionOverCapacity
from specsteer.server.kv_budget import KvBudget
from specsteer.server.session import CloudVerifier
from specsteer.server.slot_pool import kv_bytes_per_position
from tests.tinymodels import tiny_lm
from tests.verifier_harness import identity, make_pki, serve

PROMPT = [40, 41, 42, 43, 44, 45]


@pytest.fixture(scope="module")
def models(char_tok):
    return tiny_lm(char_tok, seed=1, name="s"), tiny_lm(char_tok, seed=2, name="g", layers=3)


def verifier(models, limit: int) -> tuple[CloudVerifier, KvBudget]:
    budget = KvBudget(limit)
    return CloudVerifier(models[1], models[0], seed=0, kv_budget=budget), budget


def cached_bytes(session) -> int:
    return sum(kv_bytes_per_position(s.model.config, s.model.dtype) * s.cached for s in (session.s0, session.g.seq))


def one_session_bytes(models) -> int:
    cloud, budget = verifier(models, 2**40)
    session = cloud.open(PROMPT, SessionParams(top_k=5, draft_len=4))
    held = budget.held
    assert held == cached_bytes(session) > 0
    session.close()
    assert budget.held == 0
    return held


def test_a_session_past_the_budget_is_refused_and_an_ended_one_gives_its_bytes_back(models) -> None:
    one = one_session_bytes(models)
    cloud, budget = verifier(models, one + one // 2)
    first = cloud.open(PROMPT, SessionParams(top_k=5, draft_len=4))
    with pytest.raises(SessionOverCapacity, match="KV memory is full"):
        cloud.open(PROMPT, SessionParams(top_k=5, draft_len=4))
    gc.collect()
    assert budget.held == one  # the refused Open's half-made session holds nothing
    first.close()
    assert budget.held == 0
    cloud.open(PROMPT, SessionParams(top_k=5, draft_len=4)).close()  # room again


def test_a_round_pays_for_its_block_and_a_rollback_gives_the_rejected_positions_back(models) -> None:
    cloud, budget = verifier(models, 2**40)
    session = cloud.open(PROMPT, SessionParams(top_k=5, draft_len=4))
    commit: list[int] = []
    for _ in range(3):
        verdict = session.round(commit, [60, 61, 62, 63])
        assert verdict.accepted < 4  # rejected positions were drafted, paid for and rolled back
        assert budget.held == cached_bytes(session)
        commit = list(verdict.steering.candidates[0])
    session.close()
    assert budget.held == 0


def test_a_round_the_budget_cannot_cover_is_refused(models) -> None:
    one = one_session_bytes(models)
    cloud, budget = verifier(models, one + 1)  # the prompt fits; no block after it does
    session = cloud.open(PROMPT, SessionParams(top_k=5, draft_len=4))
    with pytest.raises(SessionOverCapacity):
        session.round([], [60, 61, 62, 63])
    session.close()
    assert budget.held == 0


def test_over_the_wire_the_refusal_is_resource_exhausted_and_harms_no_other_session(models, tmp_path) -> None:
    one = one_session_bytes(models)
    pki = make_pki(tmp_path, devices=("alice", "bob"))
    cloud, _ = verifier(models, one + one // 2)
    open_frame = wire.encode_open(PROMPT, SessionParams(top_k=5, draft_len=4))
    with serve(cloud, pki) as (_, port):
        alice = grpc.secure_channel(f"127.0.0.1:{port}", identity(pki, "alice").credentials())
        bob = grpc.secure_channel(f"127.0.0.1:{port}", identity(pki, "bob").credentials())
        holder = cloud.open(PROMPT, SessionParams(top_k=5, draft_len=4))  # the budget's one session
        call = bob.stream_stream(wire.SESSION_METHOD)(iter([open_frame, wire.encode_round(1, [], [5, 6])]), timeout=30)
        with pytest.raises(grpc.RpcError) as info:
            list(call)
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "KV memory is full" in info.value.details()
        holder.close()
        call = alice.stream_stream(wire.SESSION_METHOD)(
            iter([open_frame, wire.encode_round(1, [], [5, 6])]), timeout=30
        )
        assert len(list(call)) == 1 and call.code() is grpc.StatusCode.OK
        alice.close()
        bob.close()

"""The device's Draft - Verify - Recover loop against a scripted verifier: what each verdict commits."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from specsteer.core.session_types import Method, SessionParams, SteeringVector, Verdict
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from tests.tinymodels import tiny_lm

K = 4
FIRST_ORDINARY_ID = 4  # ids 0-3 are the char tokenizer's special tokens


class _LastTokenRejected:
    """A verifier whose first verdict rejects only the last drafted token and steers to a token
    the Specialist did not draft there; every later verdict accepts the whole draft."""

    def __init__(self) -> None:
        self.rounds: list[tuple[list[int], list[int]]] = []  # (commit, draft) as uplinked
        self.recovery: int | None = None
        self.uplink_bytes = 0
        self.downlink_bytes = 0
        self.verifier_stats: dict[str, float] = {}

    def open(self, prompt_ids: Sequence[int], params: SessionParams) -> _LastTokenRejected:
        return self

    def round(self, commit: Sequence[int], draft: Sequence[int], literal: Sequence[int] = ()) -> Verdict:
        self.rounds.append((list(commit), list(draft)))
        if len(self.rounds) > 1:
            return Verdict(len(draft), SteeringVector(((FIRST_ORDINARY_ID,),), (0.0,)))
        self.recovery = FIRST_ORDINARY_ID if draft[-1] != FIRST_ORDINARY_ID else FIRST_ORDINARY_ID + 1
        return Verdict(len(draft) - 1, SteeringVector(((self.recovery,),), (0.0,)))

    def guard_decision(self, decision: str, count: int, placeholder: str) -> None:
        pass

    def end_locally(self, reason: str) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize("bonus", [False, True])
def test_rejecting_only_the_last_draft_token_commits_the_recovery(char_tok, bonus: bool) -> None:
    specialist = Specialist(tiny_lm(char_tok, seed=1, name="s"))
    verifier = _LastTokenRejected()
    params = SessionParams(draft_len=K, bonus=bonus)
    gen = generate(specialist, "Hello there", params, DecodeOptions(max_new_tokens=2 * K), verifier)

    assert len(verifier.rounds) == 2
    (_, first_draft), (second_commit, _) = verifier.rounds
    assert len(first_draft) == K and verifier.recovery is not None
    # The recovery replaces the rejected token, is uplinked with the next round, and counts as one.
    assert gen.token_ids[:K] == [*first_draft[: K - 1], verifier.recovery]
    assert second_commit == [verifier.recovery]
    assert gen.stats.recoveries == 1
    assert gen.stats.accepted == 2 * K - 1


class _SlowVerifier(_LastTokenRejected):
    """`_LastTokenRejected`, answering each round after `delay` seconds (a verifier and a network)."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def round(self, commit: Sequence[int], draft: Sequence[int], literal: Sequence[int] = ()) -> Verdict:
        time.sleep(self.delay)
        return super().round(commit, draft, literal)


def test_the_stats_say_how_long_the_device_waited_for_its_verdicts(char_tok) -> None:
    # bench.speed reads these to split a round's time: the wait beyond the verifier's own round is
    # the stream's and the network's.
    specialist = Specialist(tiny_lm(char_tok, seed=1, name="s"))
    verifier = _SlowVerifier(0.02)
    gen = generate(specialist, "Hello there", SessionParams(draft_len=K), DecodeOptions(max_new_tokens=2 * K), verifier)
    extra = gen.stats.extra
    assert gen.stats.rounds == len(verifier.rounds) == 2
    assert extra["round_wait_median_ms"] >= 20.0  # each round slept 20 ms
    assert extra["round_wait_ms"] >= 2 * 20.0
    assert extra["round_wait_ms"] < gen.stats.seconds * 1000
    # A device-only generation waits for nothing and says nothing of it.
    alone = generate(specialist, "Hello there", SessionParams(method=Method.SLM), DecodeOptions(max_new_tokens=3))
    assert "round_wait_ms" not in alone.stats.extra

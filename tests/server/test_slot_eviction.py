"""Fair slots under an active trickle (issue #47, finding 4): devices that each send one cheap round
every few seconds are never silent for the round-idle deadline, so before, they kept every slot and
a newcomer got RESOURCE_EXHAUSTED after the queue wait. Now the idle session that has held its slot
longest (past `slot_min_hold`) is ended for a waiting device with fewer sessions."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from specsteer.core import wire
from specsteer.core.proto import verifier_pb2 as pb
from specsteer.core.session_types import SessionParams
from specsteer.sdk.decoding import DecodeOptions, Generation, Specialist, generate
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import identity, make_pki, remote, serve

C = grpc.StatusCode
# gamma = inf rejects every draft: each verdict carries candidates, the next round commits the first.
OPEN = wire.encode_open([40, 41, 42, 43], SessionParams(gamma=float("inf"), top_k=5, draft_len=4))
TRICKLERS = ("trickle-0", "trickle-1")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("evict"), devices=("bob", *TRICKLERS))


@pytest.fixture(scope="module")
def models(char_tok):
    return tiny_lm(char_tok, seed=11, name="s"), tiny_lm(char_tok, seed=22, name="g")


def wait_until(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the server did not reach the expected state"
        time.sleep(0.02)


class Trickler:
    """One session that sends a one-token round every `period` seconds, each after the last verdict."""

    def __init__(self, port: int, pki, device: str, period: float) -> None:
        self.period = period
        self.stop = threading.Event()
        self.answers: queue.Queue[bytes] = queue.Queue()
        self.rounds = 0
        self.code: C | None = None
        self.details = ""
        self.channel = grpc.secure_channel(f"127.0.0.1:{port}", identity(pki, device).credentials())
        self.call = self.channel.stream_stream(wire.SESSION_METHOD)(self._uplinks(), timeout=60)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _uplinks(self) -> Iterator[bytes]:
        yield OPEN
        seq, commit = 0, []
        while not self.stop.wait(self.period):
            seq += 1
            yield wire.encode_round(seq, commit, [5])
            try:
                answer = self.answers.get(timeout=30)
            except queue.Empty:
                return
            commit = list(pb.Downlink.FromString(answer).candidates[0].token_ids)
            self.rounds += 1

    def _read(self) -> None:
        try:
            for answer in self.call:
                self.answers.put(answer)
            self.code = self.call.code()
        except grpc.RpcError as exc:
            self.code, self.details = exc.code(), exc.details() or ""

    def close(self) -> None:
        self.stop.set()
        self.call.cancel()
        self.reader.join(timeout=10)
        self.channel.close()


def bob_generates(models, port: int, pki) -> tuple[Generation, float]:
    start = time.monotonic()
    with remote(port, pki, vocab_size=models[0].vocab_size, device="bob") as verifier:
        out = generate(
            Specialist(models[0]),
            "Hello there",
            SessionParams(top_k=5, draft_len=3),
            DecodeOptions(max_new_tokens=6),
            verifier,
            fallback=False,
        )
    return out, time.monotonic() - start


def test_a_newcomer_is_served_within_the_queue_deadline_while_tricklers_hold_every_slot(models, pki) -> None:
    # Prepare: 2 slots, no reserve; sessions may be evicted after holding 0.5 s; Opens wait 2 s;
    # the round-idle deadline (5 s) is far above the tricklers' period (0.3 s).
    limits = {
        "max_sessions": 2,
        "reserved_sessions": 0,
        "slot_min_hold": 0.5,
        "queue_timeout": 2.0,
        "round_idle_timeout": 5.0,
    }
    cloud = CloudVerifier(models[1], models[0], seed=0, max_top_k=64)
    with serve(cloud, pki, **limits) as (server, port):
        service = server.service
        for attempt in range(3):
            tricklers = [Trickler(port, pki, device, period=0.3) for device in TRICKLERS]
            try:
                # Every slot is held by a session that makes progress.
                wait_until(lambda ts=tricklers: service.open_sessions == 2 and all(t.rounds >= 2 for t in ts))
                # Execute: a newcomer generates.
                out, seconds = bob_generates(models, port, pki)
                # Assert: served by the verifier within the queue deadline, not by its own fallback.
                assert out.stats.fallback is None and out.stats.rounds > 0, attempt
                assert seconds < 2.0 + 1.0, f"attempt {attempt}: bob waited {seconds:.2f} s"
                # Exactly one trickler lost its slot, with a status that says why.
                wait_until(lambda ts=tricklers: any(t.code is not None for t in ts))
                ended = [t for t in tricklers if t.code is not None]
                assert len(ended) == 1
                assert ended[0].code is C.RESOURCE_EXHAUSTED
                assert "evicted for a waiting device after holding a slot" in ended[0].details
            finally:
                for t in tricklers:
                    t.close()
            wait_until(lambda: service.open_sessions == 0)
        assert server.metrics.value("specsteer_sessions_total", {"outcome": "evicted"}) == 3


def test_a_session_younger_than_the_minimum_hold_is_not_evicted(models, pki) -> None:
    # Prepare: one slot, held by a trickler; the minimum hold (60 s) is far above the queue wait.
    limits = {"max_sessions": 1, "reserved_sessions": 0, "slot_min_hold": 60.0, "queue_timeout": 1.0}
    cloud = CloudVerifier(models[1], models[0], seed=0, max_top_k=64)
    with serve(cloud, pki, **limits) as (server, port):
        trickler = Trickler(port, pki, TRICKLERS[0], period=0.2)
        try:
            wait_until(lambda: server.service.open_sessions == 1 and trickler.rounds >= 2)
            # Execute: a newcomer's Open waits its 1 s, and is refused.
            with remote(port, pki, vocab_size=models[0].vocab_size, device="bob") as verifier:
                out = generate(
                    Specialist(models[0]), "Hi", SessionParams(top_k=5, draft_len=3), DecodeOptions(4), verifier
                )
            # Assert: the newcomer finished locally; the trickler's normal generation was not cut.
            assert out.stats.fallback is not None and "verifier-busy" in out.stats.fallback
            assert trickler.code is None
        finally:
            trickler.close()

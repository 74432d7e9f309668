"""A session's tokens on one slot of a `SlotPool`: the `CachedSequence` the verifier uses when its
KV engine is the slot pool (`server serve --kv slots`), beside `core.kv.TokenSequence` (one
`DynamicCache` per session, the default).

The bookkeeping (rows, rollback points, continuation scoring) is `CachedSequence`'s; this class
only feeds blocks to the slot and rolls back by writing the slot's length. Its forwards go through
the scheduler's runner like any sequence's: alone (`slot_forward`) or, with batching on, merged
with other sessions' forwards of the same model into one pool forward (`slot_forward_batch`).
A slot is released when its session closes, or when the sequence is garbage-collected.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TypeAlias

import torch
from transformers import PreTrainedModel

from specsteer.core.errors import ProtocolError
from specsteer.core.kv import TensorSequence, TokenSequence
from specsteer.server.config import SLOT_FORWARDS
from specsteer.server.errors import NoSessionSlot, SessionOverCapacity
from specsteer.server.fused_decoder import fused_decoder_problem
from specsteer.server.slot_pool import SlotOverflow, SlotPool, slot_pool_problem

__all__ = ["EngineRunner", "EngineSequence", "SlotPools", "SlotSequence", "slot_forward", "slot_forward_batch"]

SlotRunner = Callable[["SlotSequence", Sequence[int]], torch.Tensor]
# A sequence of either KV engine, and a runner that takes both (the scheduler's, `server.batching`):
# what a session hands its sequences, whichever engine the verifier has.
EngineSequence: TypeAlias = "TokenSequence | SlotSequence"
EngineRunner: TypeAlias = Callable[[EngineSequence, Sequence[int]], torch.Tensor]


class SlotSequence(TensorSequence):
    def __init__(self, pool: SlotPool, prefix_ids: Sequence[int], runner: SlotRunner | None = None) -> None:
        super().__init__(prefix_ids)
        self.pool = pool
        self.model = pool.model  # the batcher groups forwards by model
        try:
            # A lease: the pool moves it down when a lower slot frees, so forwards stay small.
            self.lease = pool.lease()
        except RuntimeError as exc:  # more sessions than slots (kv_slots below max_sessions)
            raise NoSessionSlot(f"the verifier has no free KV slot: {exc}; try again later") from None
        self._release = weakref.finalize(self, pool.release, self.lease)
        self._runner: SlotRunner = runner if runner is not None else slot_forward

    @property
    def slot(self) -> int:
        """The slot the session holds now (it may move; -1 once released)."""
        return self.lease.slot

    def release(self) -> None:
        """Hand the slot back (once; later calls do nothing)."""
        self._release()

    def _forward(self, new: Sequence[int]) -> torch.Tensor:
        if not self._release.alive:
            raise ProtocolError("the session's KV slot was released")
        return self._runner(self, new)

    def _crop(self, keep: int) -> None:
        self.pool.set_length(self.lease, keep)
        self._cached = keep

    def _tail_logits(self, tails: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        # Only cross-vocabulary candidates have multi-token tails, and the slot pool serves a
        # shared vocabulary (`SlotPools` refuses the other).
        raise NotImplementedError("the slot pool scores single-token continuations only")


def slot_forward_batch(items: Sequence[tuple[SlotSequence, Sequence[int]]]) -> list[torch.Tensor]:
    """The logits of each (sequence, new ids) in one forward of their shared pool."""
    pool = items[0][0].pool
    if any(seq.pool is not pool for seq, _ in items):
        raise ValueError("a merged slot forward needs every sequence on one pool")
    try:
        return pool.run(
            {seq.lease: list(new) for seq, new in items}, {seq.lease: seq.rows_wanted() for seq, _ in items}
        )
    except SlotOverflow:
        # Merged, a row may overflow only by another row's padding: the batcher then runs each
        # alone, where this is the session's own length.
        raise SessionOverCapacity(
            f"the session is longer than this verifier's {pool.kv.max_len}-token KV slots"
        ) from None


def slot_forward(seq: SlotSequence, new: Sequence[int]) -> torch.Tensor:
    """The default runner: `seq`'s block alone."""
    return slot_forward_batch([(seq, new)])[0]


class SlotPools:
    """The verifier's slot pools, one per model, made on first use (`slots` slots of `max_len`
    positions each: the Generalist's, the generic Specialist's, each global adapter version's).

    `forward`: "fused" (default) runs the pool's own decoder forward (server.fused_decoder: fused
    projections, the same logits) for the families it serves and transformers' forward for any
    other; "transformers" always runs transformers'. `compiled` hands it to inductor (on a GPU,
    the first forward of each shape compiles: seconds to minutes)."""

    def __init__(self, slots: int, max_len: int, *, forward: str = "fused", compiled: bool = False) -> None:
        if slots < 1 or max_len < 2:
            raise ValueError(f"a slot pool needs at least 1 slot of 2 positions; got {slots} of {max_len}")
        if forward not in SLOT_FORWARDS:
            raise ValueError(f"the slot pool's forward is one of {', '.join(SLOT_FORWARDS)}; got {forward!r}")
        self.slots, self.max_len = slots, max_len
        self.forward, self.compiled = forward, compiled
        self._pools: dict[int, SlotPool] = {}
        self._lock = threading.Lock()
        self._warmed = False  # `warm_up` ran: pools made from now on are warmed as they are made

    def check(self, model: PreTrainedModel) -> None:
        """Refuse, in one sentence, a model the pool cannot serve."""
        problem = slot_pool_problem(model.config)
        if problem is not None:
            raise ValueError(problem)

    def pools(self) -> list[SlotPool]:
        with self._lock:
            return list(self._pools.values())

    def pool(self, model: PreTrainedModel) -> SlotPool:
        """`model`'s pool, made on first use. One made after `warm_up` (a global adapter version's
        merged copy, at the first Open that declares it) is warmed up as it is made: otherwise its
        first sessions' rounds would capture its graphs, or compile its regions, mid-generation."""
        with self._lock:
            pool = self._pools.get(id(model))
            if pool is not None:
                return pool
            self.check(model)
            fused = self.forward == "fused" and fused_decoder_problem(model.config) is None
            pool = SlotPool(model, self.slots, self.max_len, compiled=self.compiled, fused=fused)
            self._pools[id(model)] = pool
            late = self._warmed
        if late:  # outside the lock: other models' pools stay reachable meanwhile
            pool.warm_up()
        return pool

    def drop(self, model: PreTrainedModel) -> None:
        """Let go of `model`'s pool (a global adapter's merged copy the verifier evicted): its KV
        buffers and the model go once the sessions still on it end (each holds its pool). Without
        this, every adapter version a federation published kept a pool and a model copy for good."""
        with self._lock:
            self._pools.pop(id(model), None)

    def warm_up(self, models: Sequence[PreTrainedModel]) -> int:
        """Make `models`' pools now and run each of their graphed shapes once (`SlotPool.warm_up`:
        on a GPU, every graph captured and every compile done before the first session; nothing
        elsewhere). Returns the shapes run."""
        shapes = sum(self.pool(model).warm_up() for model in models)
        with self._lock:
            self._warmed = True
        return shapes

    def sequence(self, model: PreTrainedModel, prefix_ids: Sequence[int], runner: SlotRunner | None) -> SlotSequence:
        return SlotSequence(self.pool(model), prefix_ids, runner)

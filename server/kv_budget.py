"""One memory budget for every session's dynamic KV cache (the default `kv = "dynamic"` engine).

A `DynamicCache` grows as its session is used, so a verifier admitted `max_sessions` sessions
without knowing whether their caches would fit: a few devices holding long sessions could grow
them past the host's memory until the kernel killed the process, and every session with it.
Here each session's sequences take the bytes of their cached positions from one `KvBudget` before
a forward grows them, and give them back when a rollback crops them or the session ends. A
forward the budget cannot cover is refused with `SessionOverCapacity` (RESOURCE_EXHAUSTED on the
wire: the verifier's limit, so the device finishes its text on its own), and only that session
is refused. The slot pool (`kv = "slots"`) needs none of this: it allocates its caches at start.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from specsteer.core.kv import ForwardRunner, TokenSequence
from specsteer.server.errors import SessionOverCapacity
from specsteer.server.slot_pool import kv_bytes_per_position

__all__ = ["BudgetedSequence", "KvBudget"]


class KvBudget:
    """Bytes of KV cache all sessions may hold together; thread-safe (forwards run on many threads)."""

    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError(f"a KV budget is a positive number of bytes, not {limit}")
        self.limit = limit
        self._held = 0
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        return self._held

    def take(self, nbytes: int) -> None:
        """Take `nbytes` more, or refuse (`SessionOverCapacity`) and take nothing."""
        with self._lock:
            if self._held + nbytes > self.limit:
                raise SessionOverCapacity(
                    f"this verifier's KV memory is full ({self._held / 2**20:,.0f} of "
                    f"{self.limit / 2**20:,.0f} MiB held by its sessions); try again later"
                )
            self._held += nbytes

    def give(self, nbytes: int) -> None:
        with self._lock:
            self._held -= nbytes


def _give_back(budget: KvBudget, held: list[int]) -> None:
    budget.give(held[0])
    held[0] = 0


class BudgetedSequence(TokenSequence):
    """A `TokenSequence` whose cached positions are paid for from a `KvBudget`."""

    def __init__(
        self,
        model: PreTrainedModel,
        prefix_ids: Sequence[int],
        runner: ForwardRunner | None,
        budget: KvBudget,
    ) -> None:
        super().__init__(model, prefix_ids, runner)
        self._budget = budget
        self._per_position = kv_bytes_per_position(model.config, model.dtype)
        self._held = [0]  # a cell, so that the finalizer gives back what is held when it runs
        # A session dropped without `release` (a failed Open) still gives its bytes back.
        self._release = weakref.finalize(self, _give_back, budget, self._held)

    def _pay_for(self, positions: int) -> None:
        want = positions * self._per_position
        if want > self._held[0]:
            self._budget.take(want - self._held[0])
        else:
            self._budget.give(self._held[0] - want)
        self._held[0] = want

    def _forward(self, new: Sequence[int]) -> torch.Tensor:
        self._pay_for(self._cached + len(new))  # before the cache grows: refused, nothing is run
        return super()._forward(new)

    def _crop(self, keep: int) -> None:
        super()._crop(keep)
        self._pay_for(self._cached)

    def release(self) -> None:
        """Give back every byte held (once; the cache itself goes with the session)."""
        self._release()

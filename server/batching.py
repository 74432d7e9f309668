"""Where the verifier's model work runs, and how concurrent sessions share forward passes.

Every job (opening a session, verifying a round) goes through `Scheduler.run` onto a pool of
threads, so the gRPC event loop never blocks and keeps serving health checks and other sessions'
frames. A job's model forwards go to the scheduler's `runner`, which every session's KV caches
(`core.kv.TokenSequence`) call.

Batching on (`[batching] enabled`, `server serve --batching on`, the default): `ForwardBatcher`
runs every forward on one thread, one forward at a time, and merges the pending forwards of one
model (the Generalist, or one generic Specialist copy) into one padded forward of up to
`max_batch` sequences (`server.kv_batch.forward_batch`). A batch is taken as soon as that thread is free
and either every running job is waiting on a forward (nobody else could join), `max_batch`
forwards of one model wait, or the oldest has waited `max_wait_ms`. With a single session there
is nothing to wait for, and a batch of one runs `core.kv.single_forward`, exactly the unbatched
path. Jobs get at least `2 * max_batch` worker threads, so one batch can gather while another runs.

With the slot pool as the KV engine (`server serve --kv slots`, `server/slot_sequence.py`), a
merged forward is one pool forward: each row already sits at its own positions, so nothing is
padded to a common past and nothing blocks a merge.

Where the models do not allow a merge, the forward runs alone, counted by
`specsteer_unmerged_forwards_total{reason}`:
  cache   a cache layer other than a plain full-attention or sliding-window `DynamicCache` layer
  window  Gemma 3 (a selectable Generalist) has sliding-window layers: its sequences merge only
          while their past is shorter than the window (512 tokens for gemma3-270m) and no rollback
          has trimmed it; past that, padding could not reproduce what each layer keeps
  error   the merged forward raised: each of its rows is re-run alone, so only a faulty one fails
Rows whose new-token counts differ a lot (a prompt prefill beside round verifications) are not
merged with each other, as the padding would cost more than a second forward. Not merged at all:
the cross-vocabulary candidate scoring (`TokenSequence.score_continuations`), a forward on a copy
of one session's cache that runs on that session's worker thread.

Batching off: each job runs its own forwards on its worker thread, as before batching existed;
with `workers = 1` (the default) jobs run one at a time in arrival order.

`specsteer_batch_size` observes the number of sequences of each model forward (1: it ran alone;
always 1 with batching off).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from specsteer.core.kv import TokenSequence, single_forward
from specsteer.server.kv_batch import forward_batch, merge_blocker, sliding_window
from specsteer.server.metrics import Metrics
from specsteer.server.slot_sequence import EngineRunner, EngineSequence, SlotSequence, slot_forward, slot_forward_batch

__all__ = ["ForwardBatcher", "Scheduler", "SingleRunner"]

T = TypeVar("T")
log = logging.getLogger("server")

# A merged forward computes max(new) positions for every row; beyond this many times the real
# positions, two forwards are cheaper than one padded one (e.g. a prompt prefill and round drafts).
PAD_SLACK = 2.0


def forward_alone(seq: EngineSequence, new: Sequence[int]) -> torch.Tensor:
    """One sequence's forward on its own engine: a slot of the slot pool, or its `DynamicCache`."""
    if isinstance(seq, SlotSequence):
        return slot_forward(seq, new)
    assert isinstance(seq, TokenSequence)
    return single_forward(seq, new)


def forward_merged(items: Sequence[tuple[EngineSequence, Sequence[int]]]) -> list[torch.Tensor]:
    """Several sequences' forwards of one model in one: one pool forward for slot sequences
    (rows at their own positions already), one padded forward for `DynamicCache` ones."""
    if isinstance(items[0][0], SlotSequence):
        return slot_forward_batch(items)  # type: ignore[arg-type]
    return forward_batch(items)  # type: ignore[arg-type]


def _blocker(seq: EngineSequence) -> str | None:
    return None if isinstance(seq, SlotSequence) else merge_blocker(seq)


def _window(seq: EngineSequence) -> int | None:
    return None if isinstance(seq, SlotSequence) else sliding_window(seq)


class SingleRunner:
    """Batching off: each forward runs alone on the calling thread (counted as a batch of one)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def __call__(self, seq: EngineSequence, new: Sequence[int]) -> torch.Tensor:
        self._metrics.batch_size.observe(1)
        return forward_alone(seq, new)


@dataclass(eq=False)
class _Request:
    seq: EngineSequence
    new: list[int]
    blocker: str | None  # why this row cannot be merged (None: it can)
    window: int | None  # the model's sliding window: no merged row may have more new ids
    arrived: float = field(default_factory=time.monotonic)
    future: Future[torch.Tensor] = field(default_factory=Future)


class ForwardBatcher:
    """An `EngineRunner` that merges concurrent same-model forwards (see the module docstring)."""

    def __init__(self, metrics: Metrics, *, max_batch: int = 8, max_wait: float = 0.005) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1; got {max_batch}")
        self.max_batch = max_batch
        self.max_wait = max_wait
        self._metrics = metrics
        self._cond = threading.Condition()
        self._queues: dict[int, deque[_Request]] = {}  # id(model) -> its waiting forwards, oldest first
        self._jobs = 0  # running jobs that may still submit a forward
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="forward", daemon=True)
        self._thread.start()

    # -- the callers' side ---------------------------------------------------------------------

    def __call__(self, seq: EngineSequence, new: Sequence[int]) -> torch.Tensor:
        blocker = _blocker(seq)  # read now: the sequence cannot change while its owner waits
        request = _Request(seq, list(new), blocker, _window(seq))
        with self._cond:
            inline = self._closed or threading.current_thread() is self._thread
            if not inline:
                self._queues.setdefault(id(seq.model), deque()).append(request)
                self._cond.notify_all()
        if inline:  # after close (or re-entered from the forward thread): run it here
            self._run_alone(request)
        return request.future.result()

    @contextmanager
    def job(self) -> Iterator[None]:
        """Mark a job that may submit forwards: batches wait (up to max_wait) for running jobs."""
        with self._cond:
            self._jobs += 1
        try:
            yield
        finally:
            with self._cond:
                self._jobs -= 1
                self._cond.notify_all()  # one participant fewer: the waiting ones may be complete

    def close(self, timeout: float = 30.0) -> None:
        """Run what is queued, then stop the forward thread; later forwards run on their callers."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)

    # -- the forward thread ----------------------------------------------------------------------

    def _loop(self) -> None:
        while (batch := self._next_batch()) is not None:
            try:
                self._run(batch)
            except BaseException as exc:  # never leave a caller waiting, never let the thread die
                log.exception("a batched forward failed unexpectedly")
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(exc)

    def _next_batch(self) -> list[_Request] | None:
        with self._cond:
            while True:
                waiting = [q for q in self._queues.values() if q]
                if not waiting:
                    if self._closed:
                        return None
                    self._cond.wait()
                    continue
                oldest = min(waiting, key=lambda q: q[0].arrived)
                full = [q for q in waiting if len(q) >= self.max_batch]
                age = time.monotonic() - oldest[0].arrived
                everyone = sum(len(q) for q in waiting) >= self._jobs
                if full or everyone or age >= self.max_wait or self._closed:
                    return self._take(full[0] if full else oldest)
                self._cond.wait(self.max_wait - age)

    def _take(self, queue: deque[_Request]) -> list[_Request]:
        """The oldest request and, in arrival order, the later ones that merge well with it."""
        batch = [queue.popleft()]
        if batch[0].blocker is not None:
            return batch
        kept: deque[_Request] = deque()
        while queue:
            request = queue.popleft()
            if len(batch) < self.max_batch and request.blocker is None and _fits(batch, request):
                batch.append(request)
            else:
                kept.append(request)
        queue.extend(kept)
        return batch

    def _run(self, batch: list[_Request]) -> None:
        if len(batch) == 1:
            self._run_alone(batch[0])
            return
        try:
            logits = forward_merged([(r.seq, r.new) for r in batch])
        except Exception:
            # Nothing was written to any row's cache: run each alone, so only a faulty one fails.
            log.warning("a merged forward of %d sequences failed; running them one by one", len(batch), exc_info=True)
            self._metrics.unmerged.labels("error").inc(len(batch))
            for request in batch:
                self._run_alone(request, count=False)
            return
        self._metrics.batch_size.observe(len(batch))
        for request, rows in zip(batch, logits, strict=True):
            request.future.set_result(rows)

    def _run_alone(self, request: _Request, *, count: bool = True) -> None:
        if count and request.blocker is not None:
            self._metrics.unmerged.labels(request.blocker).inc()
        self._metrics.batch_size.observe(1)
        try:
            request.future.set_result(forward_alone(request.seq, request.new))
        except Exception as exc:
            request.future.set_exception(exc)


def _fits(batch: Sequence[_Request], request: _Request) -> bool:
    lengths = [len(r.new) for r in batch] + [len(request.new)]
    width = max(lengths)
    if request.window is not None and width > request.window:
        return False
    return len(lengths) * width <= PAD_SLACK * sum(lengths)


class Scheduler:
    """Runs jobs on worker threads; `runner` is what their sessions' forwards go through."""

    def __init__(
        self,
        workers: int,
        metrics: Metrics,
        *,
        batching: bool = False,
        max_batch: int = 8,
        max_wait: float = 0.005,
    ) -> None:
        self.batcher = ForwardBatcher(metrics, max_batch=max_batch, max_wait=max_wait) if batching else None
        self.runner: EngineRunner = self.batcher if self.batcher is not None else SingleRunner(metrics)
        if self.batcher is not None:
            # A job waiting for its merged forward holds its worker: with two batches' worth of
            # workers, the next batch gathers while one runs.
            workers = max(workers, 2 * max_batch)
        self.workers = workers
        metrics.batching.set(1 if batching else 0)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="verify")

    def _call(self, fn: Callable[..., T], *args: object) -> T:
        if self.batcher is None:
            return fn(*args)
        with self.batcher.job():
            return fn(*args)

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """Run `fn(*args)` on a worker; cancelling the caller does not stop a started job."""
        future = self._pool.submit(contextvars.copy_context().run, self._call, fn, *args)
        return await asyncio.wrap_future(future)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self.batcher is not None:  # after the jobs: a running job may still need a forward
            self.batcher.close()

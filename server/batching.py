"""Where the verifier's model work runs: off the event loop, on a small pool of threads.

Every forward pass (opening a session = prefill, verifying a round) goes through `Scheduler.run`,
so the gRPC event loop never blocks and keeps serving health checks and other sessions' frames.
With `workers = 1` (the default, since torch already uses every core for one forward) jobs run
one at a time in arrival order; more workers let forwards of different sessions overlap.

Cross-session batching is not done: the KV caches (`sdk/kv.py`) are one sequence each, and
stacking several sessions' caches into one padded forward would need a batched cache there.
`specsteer_batch_size` therefore reports the jobs waiting together when a worker picks one up,
which is what a batching scheduler would have merged.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from server.metrics import Metrics

__all__ = ["Scheduler"]

T = TypeVar("T")


class Scheduler:
    def __init__(self, workers: int, metrics: Metrics) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="verify")
        self._metrics = metrics
        self._lock = threading.Lock()
        self._waiting = 0

    def _call(self, fn: Callable[..., T], *args: object) -> T:
        with self._lock:
            self._metrics.batch_size.observe(self._waiting)
            self._waiting -= 1
        return fn(*args)

    def _dropped(self, future: Future[T]) -> None:
        if future.cancelled():  # cancelled before a worker picked it up: it never ran
            with self._lock:
                self._waiting -= 1

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """Run `fn(*args)` on a worker; cancelling the caller does not stop a started job."""
        with self._lock:
            self._waiting += 1
        future = self._pool.submit(contextvars.copy_context().run, self._call, fn, *args)
        future.add_done_callback(self._dropped)
        return await asyncio.wrap_future(future)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

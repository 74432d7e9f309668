"""Wall-clock timing of work on a CPU or a GPU: the device synchronised around the timed call (a
GPU queues its work, so the clock must wait for it), medians after warm-ups.

Light on purpose (torch only): `bench.gpu` runs on a GPU machine that lacks the SDK's dependencies.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

__all__ = ["median_ms", "synchronize"]


def synchronize(device: torch.device) -> None:
    """Wait for a GPU's queued work (nothing to wait for on a CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(
    run: Callable[[], object], device: torch.device, reps: int, reset: Callable[[], object] | None = None
) -> float:
    """Median wall time of `run()` in ms over `reps`, after two warm-ups (a first call may capture a
    graph or warm an allocator); `reset()`, if given, runs untimed before each."""
    times = []
    for i in range(reps + 2):
        if reset is not None:
            reset()
        synchronize(device)
        start = time.perf_counter()
        run()
        synchronize(device)
        if i >= 2:
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)

"""Who gets a session slot, and how fast a device may start streams: the verifier's fair admission.

    slots = SessionSlots(max_sessions=64, reserved=8, max_queued=128)
    await slots.acquire("alice", timeout=5.0)     # a slot now, a queued wait for one, or `NoSessionSlot`
    ...
    slots.release("alice")                        # the slot goes to the best eligible waiter

The rule, in three sentences:

1. A device that holds no session may take any free slot; a device that already holds one may
   take a free slot only while more than `reserved` slots are free. So however many sessions a
   few devices hold, the last `reserved` slots stay for devices that have none yet.
2. An Open that finds no slot it may take waits up to its timeout in a bounded queue. A freed slot
   goes to the waiting device that holds the fewest sessions (the earliest arrival among equals),
   so over time a device holding more than others is always served last.
3. While a device waits that holds fewer sessions than another, the servicer ends that other
   device's sessions that have been silent for the short round-idle deadline (`starves`), so a
   stalled session keeps its slot only seconds from a device with a better claim, and a device
   never loses a session to its own (or an equal device's) waiting Open. A session that is never
   that silent (one cheap round every few seconds) is ended too, between rounds, once it has held
   its slot `slot_min_hold` seconds, the longest holder first (`VerifierService._eviction`).

`StreamRate` is a token bucket per device on stream creation: `burst` streams at once, then
`rate` per second. A stream it refuses is refused before any frame is read, so a device looping
on empty streams adds to the transcript at most `burst + rate x seconds` streams.

Everything here runs on the server's one event loop: no locks.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from specsteer.server.errors import NoSessionSlot

__all__ = ["NoSessionSlot", "SessionSlots", "StreamRate", "TokenBucket"]


@dataclass(eq=False)
class _Waiter:
    device: str
    order: int
    granted: asyncio.Future[None] = field(repr=False)


class SessionSlots:
    """`max_sessions` slots shared by devices under the rule in this module's docstring."""

    def __init__(self, max_sessions: int, *, reserved: int, max_queued: int) -> None:
        if not 0 <= reserved < max_sessions:
            raise ValueError(f"reserved must be in [0, {max_sessions - 1}]; got {reserved}")
        self.max_sessions = max_sessions
        self.reserved = reserved
        self.max_queued = max_queued
        self.held: Counter[str] = Counter()  # sessions each device holds
        self.open = 0
        self._waiters: list[_Waiter] = []
        self._order = itertools.count()
        self._changed: asyncio.Event | None = None  # made on first use, inside the running loop

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def changed(self) -> asyncio.Event:
        """An event set at the next change of who holds or waits (then replaced by a fresh one)."""
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _pulse(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def starves(self, device: str) -> bool:
        """Whether a device holding fewer sessions than `device` waits for a slot."""
        mine = self.held[device]
        return any(self.held[w.device] < mine for w in self._waiters)

    def _may_take(self, device: str) -> bool:
        free = self.max_sessions - self.open
        return free > self.reserved or (free > 0 and not self.held[device])

    def _take(self, device: str) -> None:
        self.open += 1
        self.held[device] += 1
        self._pulse()

    async def acquire(self, device: str, timeout: float) -> None:
        """A slot for `device`: at once, or after waiting up to `timeout` seconds; else `NoSessionSlot`."""
        if self._may_take(device):
            self._take(device)
            return
        if timeout <= 0 or len(self._waiters) >= self.max_queued:
            raise NoSessionSlot(f"the verifier is at its cap of {self.max_sessions} sessions; try again later")
        waiter = _Waiter(device, next(self._order), asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        self._pulse()
        try:
            async with asyncio.timeout(timeout):
                await waiter.granted
        except TimeoutError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                return  # granted as the wait ran out: the slot is this stream's
            raise NoSessionSlot(
                f"the verifier is at its cap of {self.max_sessions} sessions and none freed within "
                f"{timeout:g} s; try again later"
            ) from None
        except asyncio.CancelledError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                self.release(device)  # the stream went away as its slot arrived: pass it on
            raise
        finally:
            self._forget(waiter)

    def refuse_waiting(self, error: NoSessionSlot) -> None:
        """End every queued wait with `error` (e.g. `Draining`): no slot will be given to them."""
        for waiter in list(self._waiters):
            self._forget(waiter)
            if not waiter.granted.done():
                waiter.granted.set_exception(error)

    def _forget(self, waiter: _Waiter) -> None:
        if waiter in self._waiters:
            self._waiters.remove(waiter)
            self._pulse()

    def release(self, device: str) -> None:
        """Give back one of `device`'s slots; hand free slots to waiters, fewest sessions first."""
        self.open -= 1
        self.held[device] -= 1
        if not self.held[device]:
            del self.held[device]
        self._pulse()
        while self._waiters:
            best = min(self._waiters, key=lambda w: (self.held[w.device], w.order))
            # Eligibility only loosens as a device holds fewer sessions: if the best cannot, none can.
            if not self._may_take(best.device):
                break
            self._forget(best)
            if best.granted.done():  # its stream is being cancelled: skip it
                continue
            self._take(best.device)
            best.granted.set_result(None)


class TokenBucket:
    """`burst` tokens, refilled at `rate` per second; `take` spends one if there is one."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.stamp = now

    def _refill(self, now: float) -> None:
        self.tokens = min(float(self.burst), self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def take(self, now: float) -> bool:
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def full(self, now: float) -> bool:
        self._refill(now)
        return self.tokens >= self.burst


class StreamRate:
    """One `TokenBucket` per device name, on stream creation; refusals are counted, not logged one by one."""

    _PRUNE_AT = 4096  # devices tracked before full buckets (devices that went quiet) are dropped

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self.refused: Counter[str] = Counter()  # refused since the last `drain_refused`

    def allow(self, device: str) -> bool:
        now = self._clock()
        bucket = self._buckets.get(device)
        if bucket is None:
            if len(self._buckets) >= self._PRUNE_AT:
                # A full bucket is the state a new one starts in: forgetting it changes nothing.
                self._buckets = {name: b for name, b in self._buckets.items() if not b.full(now)}
            bucket = self._buckets[device] = TokenBucket(self.rate, self.burst, now)
        if bucket.take(now):
            return True
        self.refused[device] += 1
        return False

    def drain_refused(self) -> Counter[str]:
        """The refusals counted since the last call (for one aggregated log line)."""
        out, self.refused = self.refused, Counter()
        return out

"""The fair-admission rule on its own (`server.admission`), without a server: who gets a slot,
in which order waiters are served, and how the per-device stream bucket refills."""

from __future__ import annotations

import asyncio
import resource

import pytest

from specsteer.core.errors import ConfigError
from specsteer.server.admission import NoSessionSlot, SessionSlots, StreamRate, TokenBucket
from specsteer.server.cli import _overrides, build_parser
from specsteer.server.config import ServerConfig, load_config
from specsteer.server.grpc_server import fd_headroom


def run(coro):
    return asyncio.run(coro)


def test_the_last_reserved_slots_go_only_to_devices_holding_no_session() -> None:
    async def scenario() -> None:
        slots = SessionSlots(4, reserved=2, max_queued=8)
        await slots.acquire("a", 0)
        await slots.acquire("a", 0)  # 2 free, 2 reserved: "a" holds sessions, so it stops here
        with pytest.raises(NoSessionSlot, match="cap of 4 sessions"):
            await slots.acquire("a", 0)
        await slots.acquire("b", 0)  # "b" holds none: it may take a reserved slot
        await slots.acquire("c", 0)
        assert slots.open == 4 and dict(slots.held) == {"a": 2, "b": 1, "c": 1}
        with pytest.raises(NoSessionSlot):
            await slots.acquire("d", 0)  # full: even a newcomer waits (here: no wait allowed)

    run(scenario())


def test_a_freed_slot_goes_to_the_waiting_device_holding_the_fewest() -> None:
    async def scenario() -> list[str]:
        slots = SessionSlots(6, reserved=0, max_queued=8)
        for device in ("hog", "hog", "b", "x", "x", "x"):
            await slots.acquire(device, 0)
        served: list[str] = []

        async def wait(device: str) -> None:
            await slots.acquire(device, 5.0)
            served.append(device)

        # The hog asks first, then "b" (holding 1), then "new" (holding none).
        tasks = [asyncio.create_task(wait(d)) for d in ("hog", "b", "new")]
        await asyncio.sleep(0)
        # Waiting "new" (none) has a better claim than the hog (2) and x (3); nobody has one over "b"'s
        # 1 but "new": b's silent sessions may go, new's may not (it holds none to lose).
        assert slots.waiting == 3 and slots.starves("hog") and slots.starves("x") and slots.starves("b")
        changed = slots.changed()
        for _ in range(3):
            slots.release("x")  # a device that does not wait frees its slots one by one
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        assert changed.is_set() and slots.open == 6 and not slots.starves("hog")
        return served

    assert run(scenario()) == ["new", "b", "hog"]


def test_a_device_never_loses_a_session_to_an_equal_or_its_own_waiting_open() -> None:
    async def scenario() -> None:
        slots = SessionSlots(2, reserved=0, max_queued=8)
        await slots.acquire("a", 0)
        await slots.acquire("b", 0)
        waits = [asyncio.create_task(slots.acquire(d, 5.0)) for d in ("a", "b")]
        await asyncio.sleep(0)
        # Both wait while holding one each: neither has a better claim on the other's slot.
        assert slots.waiting == 2 and not slots.starves("a") and not slots.starves("b")
        changed = slots.changed()
        slots.release("a")  # "a" now holds none: its waiting Open outranks b's session
        assert changed.is_set() and slots.held["a"] == 1 and slots.waiting == 1
        for task in waits:
            task.cancel()
        await asyncio.gather(*waits, return_exceptions=True)

    run(scenario())


def test_a_wait_ends_with_a_refusal_and_the_queue_is_bounded() -> None:
    async def scenario() -> None:
        slots = SessionSlots(1, reserved=0, max_queued=1)
        await slots.acquire("a", 0)
        first = asyncio.create_task(slots.acquire("b", 0.2))
        await asyncio.sleep(0)
        with pytest.raises(NoSessionSlot, match="cap of 1 sessions"):
            await slots.acquire("c", 5.0)  # the one queue place is taken: refused at once
        with pytest.raises(NoSessionSlot, match=r"none freed within 0\.2 s"):
            await first
        assert slots.waiting == 0 and slots.open == 1

    run(scenario())


def test_a_waiter_that_goes_away_passes_its_slot_on() -> None:
    async def scenario() -> None:
        slots = SessionSlots(1, reserved=0, max_queued=4)
        await slots.acquire("a", 0)
        gone = asyncio.create_task(slots.acquire("b", 5.0))
        stays = asyncio.create_task(slots.acquire("c", 5.0))
        await asyncio.sleep(0)
        gone.cancel()
        slots.release("a")
        await stays
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert dict(slots.held) == {"c": 1} and slots.open == 1

    run(scenario())


def test_the_stream_bucket_refills_at_its_rate_per_device() -> None:
    now = [100.0]
    rate = StreamRate(2.0, 3, clock=lambda: now[0])
    assert [rate.allow("a") for _ in range(4)] == [True, True, True, False]
    assert rate.allow("b")  # another device has its own bucket
    now[0] += 0.5  # one token back at 2 per second
    assert [rate.allow("a") for _ in range(2)] == [True, False]
    assert rate.drain_refused() == {"a": 2} and rate.drain_refused() == {}
    bucket = TokenBucket(2.0, 3, now=0.0)
    assert bucket.full(0.0) and bucket.take(0.0) and not bucket.full(0.0)
    assert bucket.full(0.5)  # half a second at 2 per second: the token is back
    assert bucket.take(10.0) and bucket.tokens == 2.0  # ten seconds refill to the burst, never above it


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"reserved_sessions": 4, "max_sessions": 4}, r"reserved_sessions must be in \[0, 3\]"),
        ({"queue_timeout": -1.0}, "queue_timeout must be a number of seconds, 0 or more"),
        ({"round_idle_timeout": 0.0}, "round_idle_timeout must be a positive number"),
        ({"stream_rate": float("inf")}, "stream_rate must be a positive number"),
        ({"stream_burst": 0}, "stream_burst must be at least 1"),
        ({"handshake_timeout": float("nan")}, "handshake_timeout must be a positive number"),
        ({"max_queued_opens": -1}, "max_queued_opens must be 0 or more"),
    ],
)
def test_admission_settings_are_checked(values, message) -> None:
    with pytest.raises(ConfigError, match=message):
        ServerConfig(**values)


def test_admission_defaults_follow_the_caps_and_the_file_and_flags_set_them(tmp_path) -> None:
    config = ServerConfig(max_sessions=64, max_sessions_per_device=8)
    assert (config.reserve, config.queue_length, config.burst) == (8, 128, 16)
    path = tmp_path / "server.toml"
    path.write_text("[limits]\nreserved_sessions = 0\nstream_rate = 2\nround_idle_timeout = 1.5\n")
    args = build_parser().parse_args(["serve", "--queue-timeout", "0", "--stream-burst", "3"])
    config = load_config(path, _overrides(args))
    assert (config.reserve, config.stream_rate, config.round_idle_timeout) == (0, 2.0, 1.5)
    assert (config.queue_timeout, config.burst) == (0.0, 3)


def test_the_open_file_limit_is_raised_and_a_cap_that_cannot_fit_is_refused(monkeypatch) -> None:
    limits = {"soft": 1024, "hard": 4096}
    monkeypatch.setattr(resource, "getrlimit", lambda _: (limits["soft"], limits["hard"]))

    def setrlimit(_, value) -> None:
        limits["soft"], limits["hard"] = value

    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    assert fd_headroom(ServerConfig(max_sessions=64)) == 4096 and limits["soft"] == 4096
    limits["soft"] = limits["hard"] = 800  # 8 x 64 connections + 256 for the server: 768
    assert fd_headroom(ServerConfig(max_sessions=64)) == 800
    with pytest.raises(ConfigError, match="open-file limit is 800, below the 1256 descriptors 1000 connections need"):
        fd_headroom(ServerConfig(max_sessions=64, max_connections=1000))
    with pytest.raises(ConfigError, match="open-file limit is 800, below the 1280 descriptors 1024 connections"):
        fd_headroom(ServerConfig(max_sessions=128))

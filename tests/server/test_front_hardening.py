"""Issue 47, the front (server/front.py) under attack, with small numbers:

1. one byte and silence must not hold a connection slot past the handshake deadline: a connection
   is uncounted and closed both ways as soon as either side is done, and the backend must answer
   within the deadline;
2. gRPC's listener behind the front is a Unix socket in a private directory, not a loopback TCP
   port any local process could fill;
3. a front bound on `::` is dual-stack, as gRPC's own listener is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specsteer.core.session_types import SessionParams
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.server.front import ConnectionFront
from specsteer.server.metrics import Metrics
from specsteer.server.session import CloudVerifier
from tests.server.test_connection_cap import _closed_by_server
from tests.tinymodels import tiny_lm
from tests.verifier_harness import make_pki, remote, serve

PER_SOURCE, TOTAL, DEADLINE = 4, 8, 0.5
SOURCES = ("127.0.0.2", "127.0.0.3")  # two attackers, PER_SOURCE each: the whole TOTAL


def one_byte_and_silence(port: int, sources: tuple[str, ...], each: int) -> list[socket.socket]:
    """`each` connections from every source address, each sending a TLS record's first byte and no more."""
    socks = []
    for source in sources:
        for _ in range(each):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((source, 0))
            sock.connect(("127.0.0.1", port))
            sock.sendall(b"\x16")
            socks.append(sock)
    return socks


def wait_until(condition: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return bool(condition())  # type: ignore[operator]


def test_one_byte_connections_do_not_lock_devices_out_past_the_deadline(tmp_path: Path, char_tok) -> None:
    """Finding 1: 2 sources x 4 connections, one byte each, fill the total of 8. gRPC drops its side
    at its handshake deadline; the front must then close the client's side too and free the slot,
    so a device is served (it gives up after 2 s of connecting, and falls back, if it is not)."""
    pki = make_pki(tmp_path / "pki")
    s_lm, g_lm = tiny_lm(char_tok, seed=41, name="s"), tiny_lm(char_tok, seed=42, name="g")
    options = {"max_connections_per_source": PER_SOURCE, "max_connections": TOTAL, "handshake_timeout": DEADLINE}
    with serve(CloudVerifier(g_lm, s_lm, seed=0), pki, **options) as (server, port):
        attack = one_byte_and_silence(port, SOURCES, PER_SOURCE)
        assert server.front is not None
        assert wait_until(lambda: sum(server.front.held.values()) == TOTAL, 2.0)  # all 8 held, the front full
        time.sleep(DEADLINE + 1.0)  # past the deadline
        assert not server.front.held, dict(server.front.held)  # every slot free again ...
        for sock in attack:  # ... and every attacker's connection closed both ways
            sock.settimeout(2.0)
            assert _closed_by_server(sock)
        with remote(port, pki, vocab_size=s_lm.vocab_size, connect_timeout=2.0) as verifier:
            out = generate(Specialist(s_lm), "fix: x", SessionParams(), DecodeOptions(max_new_tokens=4), verifier)
        assert out.stats.fallback is None, out.fallback_detail
        assert server.metrics.value("specsteer_front_refused_total", {"reason": "total"}) == 0
        for sock in attack:
            sock.close()


@contextlib.contextmanager
def backend_path() -> Iterator[str]:
    """A Unix socket path in a private directory, for a fake backend started inside the test's loop."""
    with tempfile.TemporaryDirectory(prefix="specsteer-test-") as directory:
        yield os.path.join(directory, "backend.sock")


async def _front_against(backend: str, silent_backend: bool, client_half_closes: bool) -> tuple[float, int, bytes]:
    """A front before a fake backend; a client sends bytes; how long until the front closed it, what it
    still held just before, and what the client read."""
    accepted: list[asyncio.StreamWriter] = []

    async def backend_side(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        if not silent_backend:
            writer.write(b"hello")  # a ServerHello, say; then the backend keeps its side open
            await writer.drain()
        await asyncio.sleep(30)

    backend_server = await asyncio.start_unix_server(backend_side, path=backend)
    front = ConnectionFront(backend, per_source=2, total=4, handshake_timeout=DEADLINE, metrics=Metrics())
    port = await front.bind("127.0.0.1", 0)
    await front.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"\x16\x03\x01")
        await writer.drain()
        started = time.monotonic()
        received = b""
        if client_half_closes:
            received = await asyncio.wait_for(reader.readexactly(5), 5.0)
            writer.write_eof()  # the client is done: the front must not wait for the backend
            started = time.monotonic()
        await asyncio.sleep(0.1)
        held = front.held_total
        received += await asyncio.wait_for(reader.read(), 5.0)  # EOF: the front closed the client's side
        elapsed = time.monotonic() - started
        for _ in range(50):  # and the backend's side (its reader sees EOF)
            if front.held_total == 0 and all(w.transport.is_closing() or w.is_closing() for w in accepted):
                break
            await asyncio.sleep(0.02)
        assert front.held_total == 0
        writer.close()
        return elapsed, held, received
    finally:
        await front.stop()
        for w in accepted:
            w.transport.abort()
        backend_server.close()


def test_a_backend_that_never_answers_is_closed_at_the_handshake_deadline() -> None:
    """Finding 1, the deadline: the client spoke, but nothing came back within it; the front closes."""
    with backend_path() as backend:
        elapsed, held, received = asyncio.run(_front_against(backend, silent_backend=True, client_half_closes=False))
    assert held == 1 and received == b""
    assert elapsed < DEADLINE + 1.0


def test_a_connection_is_freed_as_soon_as_the_client_is_done() -> None:
    """Finding 1, either side: the client half-closed, the backend holds on; the front frees the slot."""
    with backend_path() as backend:
        elapsed, _held, received = asyncio.run(_front_against(backend, silent_backend=False, client_half_closes=True))
    assert received == b"hello"
    assert elapsed < 1.0


def _listening_tcp_ports() -> set[int]:
    """The TCP ports this process listens on (Linux: /proc)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_backend_is_a_private_unix_socket_not_a_tcp_port(tmp_path: Path, char_tok) -> None:
    """Finding 2: the only TCP port the server opens is the public one; gRPC listens on a Unix socket
    (0600) in a directory only the server's user may enter (0700), removed when it stops."""
    pki = make_pki(tmp_path / "pki")
    s_lm = tiny_lm(char_tok, seed=41, name="s")
    before = _listening_tcp_ports()
    with serve(CloudVerifier(s_lm, s_lm, seed=0), pki, max_connections_per_source=2) as (server, port):
        assert _listening_tcp_ports() - before == {port}
        assert server.front is not None
        backend = Path(server.front.backend)
        assert stat.S_ISSOCK(backend.stat().st_mode) and stat.S_IMODE(backend.stat().st_mode) == 0o600
        directory = backend.parent
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700 and directory.stat().st_uid == os.geteuid()
        # The front still pipes to it: a device is served.
        with remote(port, pki, vocab_size=s_lm.vocab_size) as verifier:
            out = generate(Specialist(s_lm), "fix: x", SessionParams(), DecodeOptions(max_new_tokens=4), verifier)
        assert out.stats.fallback is None, out.fallback_detail
    assert not directory.exists()


def _run_as_nobody(code: str, *args: str) -> subprocess.CompletedProcess[str] | None:
    """`code` in a Python run as user nobody (65534), or None where no interpreter can be run so."""
    for python in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            return subprocess.run(
                [python, "-c", code, *args], user=65534, group=65534, capture_output=True, text=True, timeout=30
            )
        except (PermissionError, FileNotFoundError):
            continue
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as another user")
def test_another_local_user_cannot_reach_the_backend(tmp_path: Path, char_tok) -> None:
    """Finding 2, from outside: a process of another user cannot connect to gRPC's socket at all
    (before, any local process could hold idle connections to its loopback port)."""
    pki = make_pki(tmp_path / "pki")
    s_lm = tiny_lm(char_tok, seed=41, name="s")
    with serve(CloudVerifier(s_lm, s_lm, seed=0), pki, max_connections_per_source=2) as (server, _port):
        assert server.front is not None
        probe = _run_as_nobody(
            "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])", server.front.backend
        )
        if probe is None or "ModuleNotFoundError" in probe.stderr:
            pytest.skip("no Python interpreter that user nobody may run")
        assert probe.returncode != 0 and "PermissionError" in probe.stderr, probe.stderr


def _ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_a_front_on_the_ipv6_wildcard_also_serves_ipv4(tmp_path: Path, char_tok) -> None:
    """Finding 3: `--host ::` is dual-stack with the front as without it: a device over 127.0.0.1 is served."""
    pki = make_pki(tmp_path / "pki")
    s_lm = tiny_lm(char_tok, seed=41, name="s")
    with serve(CloudVerifier(s_lm, s_lm, seed=0), pki, host="::", max_connections_per_source=2) as (_, port):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        socket.create_connection(("::1", port), timeout=5).close()
        with remote(port, pki, vocab_size=s_lm.vocab_size) as verifier:  # remote() dials 127.0.0.1
            out = generate(Specialist(s_lm), "fix: x", SessionParams(), DecodeOptions(max_new_tokens=4), verifier)
        assert out.stats.fallback is None, out.fallback_detail

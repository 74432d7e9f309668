"""Issue 47, Builds 1 and 4: three `server serve` replicas (tiny models) behind the shipped HAProxy
configuration (deploy/haproxy.cfg, started by deploy/fleet.py), all on loopback.

- The attacks that locked our own front: 8 sources x 64 connections that send one byte (`\\x16`)
  and stay silent, plus 600 idle connections from 10 more sources, all held at once: another device
  is served, a whole session, within 2 s; HAProxy closes the one-byte holds at its ClientHello
  deadline and refuses a source's connection past its cap.
- A rolling restart of all three replicas while 8 devices run generations back to back: no session
  falls back, and every device's audit log is VERIFIED against the fleet's transcript folder.
  (`python -m bench.fleet` runs it with 32 devices, docs/results/fleet.md: on 2 cores, too slow
  for CI, each replica's restart competing with 32 devices for the CPU.)
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.fleet import Fleet, ProxyLimits, haproxy_binary
from specsteer.audit.cli import main as audit_main
from specsteer.audit.note import load_verifier_key, write_key_pair
from specsteer.audit.transcript import read_transcript, transcript_files
from specsteer.audit.verify import verify
from specsteer.core.session_types import SessionParams
from specsteer.sdk.audited import open_audit_tap
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from tests.tinymodels import save_tiny, tiny_lm
from tests.verifier_harness import free_port, make_pki, remote

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(haproxy_binary() is None, reason="haproxy is not installed (`make install` installs it)"),
]

# 8 in CI; SPECSTEER_FLEET_DEVICES=32 runs the 32 (310 s on 2 loaded cores, docs/fleet.md).
DEVICES = tuple(f"d{i:02d}" for i in range(int(os.environ.get("SPECSTEER_FLEET_DEVICES", "8"))))
HOLD_SOURCES = tuple(f"127.0.0.{i}" for i in range(2, 10))  # 8 sources x 64 one-byte holds
FLOOD_SOURCES = tuple(f"127.0.0.{i}" for i in range(10, 20))  # 10 sources x 60 idle connections
PER_SOURCE, HELLO_DEADLINE = 64, 3.0
PARAMS = SessionParams(gamma=0.05, draft_len=3)
THINK = 1.0  # seconds each device waits between its generations


@pytest.fixture(scope="module")
def fleet_setup(tmp_path_factory, char_tok) -> Iterator[tuple[Fleet, object, Specialist]]:
    root = tmp_path_factory.mktemp("fleet")
    pki = make_pki(root, devices=("alice", *DEVICES))
    s_dir, g_dir = save_tiny(root, char_tok, seed=1, name="s"), save_tiny(root, char_tok, seed=2, name="g")
    serve_args = ["--generalist", str(g_dir), "--specialist", str(s_dir), "--torch-threads", "1"]
    serve_args += ["--max-sessions", "32", "--seed", "0"]
    # The rolling restart's devices all connect from 127.0.0.1, a connection per generation (and
    # one for the serving-chain probe): more per 10 s from one source than the shipped rate (200).
    limits = ProxyLimits(per_source=PER_SOURCE, rate_per_10s=5000, hello_deadline=HELLO_DEADLINE, check_interval_ms=200)
    fleet = Fleet(
        root / "state", replicas=3, port=free_port(), tls_dir=pki.directory, serve_args=serve_args,
        limits=limits, drain_grace=60.0,
    )  # fmt: skip
    try:
        fleet.start(timeout=240)
        yield fleet, pki, Specialist(tiny_lm(char_tok, seed=1, name="s"))
    finally:
        fleet.stop()


def connections(port: int, sources: tuple[str, ...], each: int, payload: bytes) -> list[socket.socket]:
    socks = []
    for source in sources:
        for _ in range(each):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((source, 0))
            sock.connect(("127.0.0.1", port))
            if payload:
                sock.sendall(payload)
            socks.append(sock)
    return socks


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_one_byte_holds_and_an_idle_flood_leave_a_device_served_within_2s(fleet_setup) -> None:
    fleet, pki, specialist = fleet_setup
    holds = connections(fleet.port, HOLD_SOURCES, PER_SOURCE, b"\x16")
    flood = connections(fleet.port, FLOOD_SOURCES, 60, b"")
    attacked = time.monotonic()
    try:
        # A device, while all 1112 are held: a whole session, its first token within 2 s.
        first: list[float] = []
        start = time.monotonic()
        with remote(fleet.port, pki, vocab_size=specialist.lm.vocab_size, connect_timeout=2.0) as verifier:
            out = generate(
                specialist, "fix: x", PARAMS, DecodeOptions(max_new_tokens=6), verifier,
                on_commit=lambda tokens: first.append(time.monotonic() - start) if not first else None,
            )  # fmt: skip
        assert out.stats.fallback is None, out.fallback_detail
        assert first and first[0] < 2.0, first
        assert time.monotonic() - attacked < HELLO_DEADLINE  # served while every hold was still held
        # Past the cap: the source's next connection is closed at once.
        (extra,) = connections(fleet.port, HOLD_SOURCES[:1], 1, b"")
        assert closed_by_peer(extra, 2.0)
        extra.close()
        # At the ClientHello deadline HAProxy closes the one-byte holds; none reached a replica.
        time.sleep(max(0.0, HELLO_DEADLINE + 1.0 - (time.monotonic() - attacked)))
        assert all(closed_by_peer(sock, 2.0) for sock in holds[:: len(holds) // 16])
    finally:
        for sock in holds + flood:
            sock.close()


def _device_loop(fleet: Fleet, pki, specialist: Specialist, name: str, keys: Path, stop: threading.Event,
                 results: list) -> None:  # fmt: skip
    private, _ = write_key_pair(f"device.test/{name}", keys / name)
    with open_audit_tap(keys / name / "log", private, cert=pki.device_cert(name)) as tap:
        while not stop.is_set():
            try:
                with remote(fleet.port, pki, vocab_size=specialist.lm.vocab_size, device=name, tap=tap) as verifier:
                    out = generate(specialist, f"note {name}", PARAMS, DecodeOptions(max_new_tokens=8), verifier)
                results.append((name, out.stats.fallback, out.fallback_detail, time.monotonic()))
            except Exception as exc:  # counted as a failure, never hidden
                results.append((name, "error", repr(exc), time.monotonic()))
            stop.wait(THINK)  # a device between two generations: the 2 cores also run 3 replicas


def test_a_rolling_restart_under_load_loses_no_session_and_every_log_verifies(fleet_setup, tmp_path: Path) -> None:
    fleet, pki, specialist = fleet_setup
    stop, results = threading.Event(), []
    threads = [
        threading.Thread(target=_device_loop, args=(fleet, pki, specialist, n, tmp_path, stop, results), daemon=True)
        for n in DEVICES
    ]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 60
        while len(results) < len(DEVICES) and time.monotonic() < deadline:  # every device under way
            time.sleep(0.1)
        before = len(results)
        # Execute: each replica drained, restarted and back in, one after another.
        began = time.monotonic()
        fleet.rolling_restart()
        ended = time.monotonic()
        during = len(results) - before
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert [r.starts for r in fleet.replicas] == [2, 2, 2]
    failed = [r for r in results if r[1] is not None]
    assert not failed, (began, ended, fleet.backend_status(), failed[:5])
    assert during >= len(DEVICES), (before, during)  # sessions went on through the restart
    # Every replica served sessions (its named transcript holds streams) ...
    files = transcript_files(fleet.transcripts)
    assert [f.name for f in files] == [f"server-transcript.r{i}.jsonl" for i in range(3)]
    assert all(read_transcript(f).info for f in files)
    # ... and every device's log verifies against the fleet's transcript folder.
    for name in DEVICES:
        key = load_verifier_key(tmp_path / name / f"device.test_{name}.pub")
        report = verify(tmp_path / name / "log", key=key, server_transcript=fleet.transcripts, device=name)
        assert report.verdict == "VERIFIED", name
    pub = str(tmp_path / "d00" / "device.test_d00.pub")
    argv = ["verify", str(tmp_path / "d00" / "log"), "--key", pub, "--server-transcript", str(fleet.transcripts)]
    assert audit_main([*argv, "--device", "d00"]) == 0

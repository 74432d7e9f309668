"""A generation survives its replica's death (issue #47, Build 5).

Two real `server serve` replicas behind a real HAProxy in TCP mode (TLS passes through, so mutual
TLS and pinning stay end to end), the device dialling the proxy. The replica serving a greedy
generation is SIGKILLed once 8 tokens are committed: the device resumes in a new session on the
other replica, whose Open carries what the lost session had committed, and writes the text an
uninterrupted run writes; `audit verify` with both replicas' transcripts says VERIFIED. With no
replica left, the device finishes locally as before, and says why.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from specsteer.audit import records
from specsteer.audit.cli import main as audit_main
from specsteer.audit.log import scan_log
from specsteer.audit.note import write_key_pair
from specsteer.core import wire
from specsteer.core.session_types import SessionParams
from specsteer.sdk.audited import open_audit_tap
from specsteer.sdk.decoding import DecodeOptions, Generation, Specialist, generate
from specsteer.sdk.remote import RemoteVerifier
from specsteer.sdk.transport import InProcessVerifier
from specsteer.server.session import CloudVerifier
from tests.server.test_faults import greedy_continuation
from tests.tinymodels import save_tiny, tiny_lm
from tests.verifier_harness import free_port, identity, make_pki

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Write a short note about the weather"
PARAMS = SessionParams(gamma=0.05, draft_len=3)
MAX_NEW = 30
KILL_AFTER = 8  # committed tokens

pytestmark = [
    pytest.mark.slow,  # two replica processes and a proxy: ~20 s on 2 cores
    pytest.mark.skipif(shutil.which("haproxy") is None, reason="HAProxy is not installed (make install)"),
]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("resume"))


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory, char_tok) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("models")
    return save_tiny(root, char_tok, seed=1, name="s"), save_tiny(root, char_tok, seed=2, name="g")


@pytest.fixture(scope="module")
def specialist(char_tok) -> Specialist:
    return Specialist(tiny_lm(char_tok, seed=1, name="s"))  # the weights the replicas load (same seed)


@pytest.fixture(scope="module")
def reference(char_tok, specialist) -> Generation:
    """The uninterrupted generation (the transport changes nothing: tests/server/test_faults.py)."""
    cloud = CloudVerifier(tiny_lm(char_tok, seed=2, name="g"), specialist.lm, seed=0)
    verifier = InProcessVerifier(cloud.open, vocab_size=specialist.lm.vocab_size)
    return generate(specialist, PROMPT, PARAMS, DecodeOptions(max_new_tokens=MAX_NEW), verifier)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, pki, model_dirs) -> Iterator[tuple[list[tuple[subprocess.Popen, int, Path]], int]]:
    """Two replicas behind HAProxy, shared by the tests (a replica takes seconds to start): the
    first serves until a test kills it, then the second."""
    root = tmp_path_factory.mktemp("fleet")
    with replicas(root, pki, model_dirs, 2) as started, haproxy(root, [port for _, port, _ in started]) as front:
        yield started, front


@contextmanager
def replicas(root: Path, pki, model_dirs, count: int) -> Iterator[list[tuple[subprocess.Popen, int, Path]]]:
    """`count` replicas of `server serve`, started together; each (process, port, transcript)."""
    env = {**os.environ, "GRPC_VERBOSITY": "NONE", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    started: list[tuple[subprocess.Popen, int, Path, Path]] = []
    with ExitStack() as stack:
        for i in range(count):
            port, folder = free_port(), root / f"replica-{i}"
            folder.mkdir()
            cmd = [sys.executable, "-m", "specsteer.server.cli", "serve", "--tls-dir", str(pki.directory)]
            cmd += ["--port", str(port), "--port-file", str(folder / "port"), "--transcript-dir", str(folder)]
            cmd += ["--generalist", str(model_dirs[1]), "--specialist", str(model_dirs[0]), "--torch-threads", "1"]
            log = stack.enter_context((folder / "server.log").open("ab"))
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log)
            stack.callback(_stop, proc)
            started.append((proc, port, folder / "server-transcript.jsonl", folder))
        deadline = time.monotonic() + 180
        for proc, _, _, folder in started:
            while not (folder / "port").exists():
                assert proc.poll() is None, (folder / "server.log").read_text()
                assert time.monotonic() < deadline, "a replica did not start"
                time.sleep(0.1)
        yield [(proc, port, transcript) for proc, port, transcript, _ in started]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@contextmanager
def haproxy(root: Path, backends: Sequence[int]) -> Iterator[int]:
    """HAProxy in TCP mode in front of `backends`: the first one up takes every connection
    (`balance first`), a refused connection is redispatched to the next, and a TCP check every
    200 ms marks a dead one down."""
    port = free_port()
    servers = "\n".join(
        f"    server r{i} 127.0.0.1:{backend} check inter 200ms fall 1 rise 1" for i, backend in enumerate(backends)
    )
    config = root / "haproxy.cfg"
    config.write_text(
        "defaults\n    mode tcp\n    timeout connect 1s\n    timeout client 60s\n    timeout server 60s\n"
        "    retries 2\n    option redispatch\n"
        f"frontend verifiers\n    bind 127.0.0.1:{port}\n    default_backend replicas\n"
        f"backend replicas\n    balance first\n{servers}\n"
    )
    log = (root / "haproxy.log").open("ab")
    proc = subprocess.Popen(["haproxy", "-db", "-f", str(config)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 10
        while not _listening(port):
            assert proc.poll() is None, (root / "haproxy.log").read_text()
            assert time.monotonic() < deadline, "HAProxy did not start"
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait()
        log.close()


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _kill_after(n: int, proc: subprocess.Popen) -> tuple[list[int], list[int], Callable[[list[int]], None]]:
    """An on_commit callback that SIGKILLs `proc` once `n` tokens are committed; `fired` gets
    how many were committed then."""
    committed: list[int] = []
    fired: list[int] = []

    def on_commit(tokens: list[int]) -> None:
        committed.extend(tokens)
        if not fired and len(committed) >= n:
            fired.append(len(committed))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    return committed, fired, on_commit


def _opens(log_dir: Path) -> list[wire.OpenFrame]:
    """The Open of each session in the device's audit log, in order."""
    frames = []
    for stored in scan_log(log_dir).records:
        rec = records.parse(stored.data)
        if rec.kind == records.KIND_UPLINK and rec.payload is not None:
            frame = wire.decode_uplink(rec.payload)
            if isinstance(frame, wire.OpenFrame):
                frames.append(frame)
    return frames


def test_a_killed_replica_hands_the_generation_to_another(tmp_path, fleet, pki, specialist, reference, capsys) -> None:
    # Prepare: the device's audit log; the first replica serves (`balance first`).
    (first, _, first_transcript), (second, _, second_transcript) = fleet[0]
    assert first.poll() is None and second.poll() is None
    private, public = write_key_pair("device.test/alice", tmp_path / "keys")
    log_dir = tmp_path / "log"
    with (
        open_audit_tap(log_dir, private, pki.device_cert("alice")) as tap,
        RemoteVerifier(f"127.0.0.1:{fleet[1]}", identity(pki), vocab_size=specialist.lm.vocab_size, tap=tap) as dev,
    ):
        committed, _, on_commit = _kill_after(KILL_AFTER, first)
        # Execute
        out = generate(specialist, PROMPT, PARAMS, DecodeOptions(max_new_tokens=MAX_NEW), dev, on_commit=on_commit)
    assert first.returncode == -signal.SIGKILL
    # Assert: resumed once, never alone, and the text the uninterrupted run wrote.
    assert out.stats.fallback is None, out.fallback_detail
    assert (out.stats.resumed, out.stats.resume_reasons) == (1, "verifier-lost")
    assert out.stats.as_dict()["resumed"] == 1
    assert out.token_ids == reference.token_ids and out.text == reference.text
    assert len(committed) == MAX_NEW
    # The log holds both sessions; the second Open carries the prompt and what the first committed.
    opens = _opens(log_dir)
    assert len(opens) == 2 and opens[0].resume_ids == () and opens[1].prompt_ids == opens[0].prompt_ids
    resumed = list(opens[1].resume_ids)
    assert KILL_AFTER <= len(resumed) < MAX_NEW and resumed == reference.token_ids[: len(resumed)]
    # Each replica's transcript witnessed one session of this device; together they make the log.
    argv = ["verify", str(log_dir), "--key", str(public), "--json"]
    argv += ["--server-transcript", str(first_transcript), "--server-transcript", str(second_transcript)]
    code = audit_main(argv)
    report = json.loads(capsys.readouterr().out)
    failures = "\n".join(m for c in report["checks"] for m in c["failures"])
    assert code == 0 and report["verdict"] == "VERIFIED", failures
    assert report["sessions"] == 2
    (check,) = [c for c in report["checks"] if c["name"] == "server transcript"]
    assert "2 server stream(s) of this device match" in check["summary"], check


def test_b_with_no_replica_left_the_device_finishes_alone(fleet, pki, specialist, reference, caplog) -> None:
    # Prepare: the first replica is gone (test a killed it); the second serves until killed.
    (first, _, _), (second, _, _) = fleet[0]
    _stop(first)
    with RemoteVerifier(
        f"127.0.0.1:{fleet[1]}", identity(pki), vocab_size=specialist.lm.vocab_size, connect_timeout=5.0
    ) as dev:
        _, fired, on_commit = _kill_after(KILL_AFTER, second)
        # Execute
        start = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="specsteer.sdk"):
            out = generate(specialist, PROMPT, PARAMS, DecodeOptions(max_new_tokens=MAX_NEW), dev, on_commit=on_commit)
        took = time.monotonic() - start
    # Assert: the Specialist finished the text, as it did before resuming existed, once the
    # resume's tries were spent within the connect deadline.
    assert out.stats.fallback == "verifier-lost" and out.stats.resumed == 0, out.fallback_detail
    assert out.stats.new_tokens == MAX_NEW
    k = fired[0]
    assert out.token_ids[:k] == reference.token_ids[:k]
    assert out.token_ids[k:] == greedy_continuation(specialist, out.token_ids[:k], MAX_NEW - k)
    assert "no verifier took the generation back" in caplog.text and "after 4 tries" in caplog.text
    assert "the Specialist finished the text on this device" in caplog.text
    assert took < 5.0 + 5.0, took  # the resume's connect deadline, plus the generation itself

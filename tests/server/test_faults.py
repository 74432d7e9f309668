"""Faults: the verifier unreachable, killed mid-generation, frozen, or full. The device finishes
locally with the Specialist, says so in `stats`, and reconnects for the next session.

The killed and frozen verifiers are real `server serve` processes (SIGKILL, SIGSTOP)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
import torch

from specsteer.core import wire
from specsteer.core.kv import TokenSequence
from specsteer.core.session_types import SessionParams
from specsteer.sdk.decoding import DecodeOptions, Generation, Specialist, generate
from specsteer.sdk.transport import InProcessVerifier, VerifierLost
from specsteer.server.session import CloudVerifier
from tests.tinymodels import save_tiny, tiny_lm
from tests.verifier_harness import RecordingTap, free_port, identity, make_pki, remote, serve

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Write a short note about the weather"
PARAMS = SessionParams(gamma=0.05, draft_len=3)
MAX_NEW = 30


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("faults"))


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory, char_tok) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("models")
    return save_tiny(root, char_tok, seed=1, name="s"), save_tiny(root, char_tok, seed=2, name="g")


@pytest.fixture(scope="module")
def models(char_tok):
    # The same weights as the folders the server process loads (same seeds).
    return tiny_lm(char_tok, seed=1, name="s"), tiny_lm(char_tok, seed=2, name="g")


@pytest.fixture(scope="module")
def reference(models) -> Generation:
    s_lm, g_lm = models
    cloud = CloudVerifier(g_lm, s_lm, seed=0)
    return generate(
        Specialist(s_lm),
        PROMPT,
        PARAMS,
        DecodeOptions(max_new_tokens=MAX_NEW),
        InProcessVerifier(cloud.open, vocab_size=s_lm.vocab_size),
    )


@contextmanager
def server_process(tmp_path: Path, pki, model_dirs, port: int) -> Iterator[subprocess.Popen]:
    """`server serve` in its own process, ready when it has written its port file."""
    port_file = tmp_path / f"port-{time.monotonic_ns()}"
    log = (tmp_path / "server.log").open("ab")
    env = {**os.environ, "GRPC_VERBOSITY": "NONE", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "specsteer.server.cli", "serve", "--tls-dir", str(pki.directory), "--port", str(port)]
    cmd += ["--generalist", str(model_dirs[1]), "--specialist", str(model_dirs[0]), "--port-file", str(port_file)]
    proc = subprocess.Popen([*cmd, "--torch-threads", "1"], cwd=ROOT, env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 180
        while not port_file.exists():
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait()
        log.close()


def greedy_continuation(specialist: Specialist, prefix: list[int], n: int) -> list[int]:
    """What the Specialist alone (with its context) writes after `prefix`: full forward passes."""
    seq = TokenSequence(specialist.lm.model, specialist.private_prompt_ids(PROMPT, with_context=True) + prefix)
    out: list[int] = []
    while len(out) < n:
        token = int(torch.argmax(seq.next_logprobs()))
        out.append(token)
        seq.push([token])
        if token in specialist.lm.eos_ids:
            return out[:-1]
    return out


def _when(after: int, action) -> tuple[list[int], list[int]]:
    """An on_commit callback that runs `action` once `after` tokens are committed."""
    committed: list[int] = []
    fired: list[int] = []

    def on_commit(tokens: list[int]) -> None:
        committed.extend(tokens)
        if not fired and len(committed) >= after:
            fired.append(len(committed))
            action()

    return committed, fired, on_commit  # type: ignore[return-value]


def test_unreachable_verifier_finishes_locally_or_fails_on_request(models, pki) -> None:
    # Prepare: nothing listens on this port.
    s_lm, _ = models
    specialist = Specialist(s_lm)
    tap = RecordingTap()
    with remote(free_port(), pki, vocab_size=s_lm.vocab_size, tap=tap, connect_timeout=3.0) as verifier:
        # Execute
        out = generate(specialist, PROMPT, PARAMS, DecodeOptions(max_new_tokens=MAX_NEW), verifier)
        # Assert: all local, the Specialist's own greedy text, and nothing sent.
        assert out.stats.fallback == "verifier-unreachable" and out.stats.rounds == 0
        assert "unreachable" in (out.fallback_detail or "")
        assert out.token_ids == greedy_continuation(specialist, [], MAX_NEW)
        assert tap.uplinks == []
        with pytest.raises(VerifierLost, match="unreachable"):
            generate(specialist, PROMPT, PARAMS, DecodeOptions(max_new_tokens=4), verifier, fallback=False)


def test_killed_verifier_mid_generation_completes_locally_then_reconnects(
    tmp_path, models, model_dirs, pki, reference
) -> None:
    s_lm, _ = models
    specialist = Specialist(s_lm)
    port = free_port()
    tap = RecordingTap()
    with remote(port, pki, vocab_size=s_lm.vocab_size, tap=tap, round_timeout=20.0) as verifier:
        with server_process(tmp_path, pki, model_dirs, port) as proc:
            # Execute: SIGKILL the verifier once 8 tokens are committed.
            committed, fired, on_commit = _when(8, lambda: (proc.kill(), proc.wait()))
            out = generate(
                specialist, PROMPT, PARAMS, DecodeOptions(max_new_tokens=MAX_NEW), verifier, on_commit=on_commit
            )
        # Assert: steered up to the kill, the Specialist alone after it, the whole budget written.
        k = fired[0]
        assert out.stats.fallback == "verifier-lost", out.fallback_detail
        assert out.stats.new_tokens == MAX_NEW == len(committed)
        assert out.token_ids[:k] == reference.token_ids[:k]
        assert out.token_ids[k:] == greedy_continuation(specialist, out.token_ids[:k], MAX_NEW - k)
        assert tap.fallbacks == [("s1", "verifier-lost")]
        # A new verifier on the same address: the next session is remote again, and exact.
        with server_process(tmp_path, pki, model_dirs, port):
            again = generate(specialist, PROMPT, PARAMS, DecodeOptions(max_new_tokens=MAX_NEW), verifier)
        assert again.stats.fallback is None
        assert again.token_ids == reference.token_ids


def test_frozen_verifier_times_out_and_the_device_finishes(tmp_path, models, model_dirs, pki, reference) -> None:
    s_lm, _ = models
    specialist = Specialist(s_lm)
    port = free_port()
    with (
        server_process(tmp_path, pki, model_dirs, port) as proc,
        remote(port, pki, vocab_size=s_lm.vocab_size, round_timeout=2.0) as verifier,
    ):
        _, fired, on_commit = _when(5, lambda: os.kill(proc.pid, signal.SIGSTOP))
        start = time.monotonic()
        out = generate(specialist, PROMPT, PARAMS, DecodeOptions(max_new_tokens=MAX_NEW), verifier, on_commit=on_commit)
        assert time.monotonic() - start < 30
    assert out.stats.fallback == "verifier-timeout"
    assert "did not answer round" in (out.fallback_detail or "")
    k = fired[0]
    assert out.token_ids[:k] == reference.token_ids[:k] and out.stats.new_tokens == MAX_NEW


def test_verifier_at_capacity_means_finishing_locally(models, pki) -> None:
    s_lm, g_lm = models
    # The device's Open waits 0.5 s in the queue, then it falls back.
    with serve(CloudVerifier(g_lm, s_lm, seed=0), pki, max_sessions=1, queue_timeout=0.5) as (server, port):
        hold = threading.Event()

        def frames():
            yield wire.encode_open([40, 41], SessionParams())
            hold.wait(10)

        ch = grpc.secure_channel(f"127.0.0.1:{port}", identity(pki).credentials())
        held = ch.stream_stream(wire.SESSION_METHOD)(frames(), timeout=20)
        deadline = time.monotonic() + 10
        while server.service.open_sessions < 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with remote(port, pki, vocab_size=s_lm.vocab_size) as verifier:
            out = generate(Specialist(s_lm), PROMPT, PARAMS, DecodeOptions(max_new_tokens=8), verifier)
        hold.set()
        list(held)
        ch.close()
    assert out.stats.fallback == "verifier-busy" and "cap of 1 sessions" in (out.fallback_detail or "")
    assert out.stats.new_tokens == 8

"""Readiness and drain (issue #47, finding 5). The metrics port answered 200 to any path, ready or
not, and SIGTERM stopped the server with a 5 s grace whatever was in flight. Now `/healthz` says
alive, `/readyz` says whether the replica would admit a session (503 before it serves and while it
drains), other paths are 404; a drain refuses new Opens (UNAVAILABLE, "draining": the device
finishes locally) while the open sessions end, within `drain_grace`, and then the server stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest

from specsteer.core import wire
from specsteer.core.errors import ConfigError
from specsteer.core.session_types import SessionParams
from specsteer.sdk.decoding import DecodeOptions, Generation, Specialist, generate
from specsteer.server.config import ServerConfig
from specsteer.server.grpc_server import create_server
from specsteer.server.session import CloudVerifier
from tests.tinymodels import save_tiny, tiny_lm
from tests.verifier_harness import free_port, identity, make_pki, remote, server_config

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Write a short note about the weather"
PARAMS = SessionParams(gamma=0.05, draft_len=3)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("drain"), devices=("alice", "bob"))


@pytest.fixture(scope="module")
def models(char_tok):
    return tiny_lm(char_tok, seed=1, name="s"), tiny_lm(char_tok, seed=2, name="g")


def status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def wait_until(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the expected state was not reached"
        time.sleep(0.02)


class PausedGeneration:
    """A generation (device alice) that stops after its third committed token until `resume`."""

    def __init__(self, models, port: int, pki) -> None:
        self.paused, self.go = threading.Event(), threading.Event()
        self.out: Generation | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(models, port, pki), daemon=True)
        self._thread.start()
        assert self.paused.wait(30), self.error

    def _on_commit(self, tokens: list[int]) -> None:
        if not self.paused.is_set():
            self.paused.set()
            self.go.wait(30)

    def _run(self, models, port: int, pki) -> None:
        try:
            with remote(port, pki, vocab_size=models[0].vocab_size) as verifier:
                self.out = generate(
                    Specialist(models[0]), PROMPT, PARAMS, DecodeOptions(16), verifier, on_commit=self._on_commit
                )
        except BaseException as exc:
            self.error = exc
            self.paused.set()

    def resume(self) -> Generation:
        self.go.set()
        self._thread.join(30)
        assert self.out is not None, self.error
        return self.out


def newcomer(models, port: int, pki) -> Generation:
    with remote(port, pki, vocab_size=models[0].vocab_size, device="bob") as verifier:
        return generate(Specialist(models[0]), "Hi", PARAMS, DecodeOptions(4), verifier)


def test_readyz_is_503_until_serving_200_while_serving_and_503_while_draining(models, pki) -> None:
    cloud = CloudVerifier(models[1], models[0], seed=0)
    server, _ = create_server(server_config(pki, metrics_port=0), cloud=cloud)
    try:
        port = server.metrics_port
        assert port is not None
        # Bound, not yet serving: alive, not ready.
        assert status(port, "/healthz") == 200
        assert status(port, "/readyz") == 503
        server.start()
        assert status(port, "/readyz") == 200
        assert status(port, "/metrics") == 200
        for path in ("/", "/ready", "/healthz/x", "/metrics.txt"):
            assert status(port, path) == 404, path
        server.drain()
        assert status(port, "/readyz") == 503
        assert status(port, "/healthz") == 200
    finally:
        server.stop(grace=0)


def test_a_drain_lets_the_open_session_finish_refuses_a_new_one_and_stops(models, pki) -> None:
    # Prepare: a verifier serving alice's generation, paused mid-way.
    cloud = CloudVerifier(models[1], models[0], seed=0)
    server, port = create_server(server_config(pki, metrics_port=0), cloud=cloud)
    server.start()
    try:
        alice = PausedGeneration(models, port, pki)
        assert server.open_sessions == 1
        # Execute: drain (as SIGTERM does), with room for alice to finish.
        drained: list[bool] = []
        drainer = threading.Thread(target=lambda: drained.append(server.drain_and_stop(30.0)), daemon=True)
        drainer.start()
        wait_until(lambda: server.draining)
        # Assert: not ready; a new Open is refused with UNAVAILABLE "draining" and bob finishes locally.
        assert status(server.metrics_port or 0, "/readyz") == 503
        bob = newcomer(models, port, pki)
        assert bob.stats.fallback == "verifier-lost" and "draining" in (bob.fallback_detail or "")
        assert bob.stats.new_tokens == 4
        # The open session goes on to its end with the verifier; then the server stops.
        out = alice.resume()
        assert out.stats.fallback is None and out.stats.rounds > 1
        drainer.join(30)
        assert drained == [True] and server.wait(0)
    finally:
        server.stop(grace=0)


def test_after_the_grace_the_server_stops_with_sessions_still_open(models, pki) -> None:
    cloud = CloudVerifier(models[1], models[0], seed=0)
    server, port = create_server(server_config(pki), cloud=cloud)
    server.start()
    hold = threading.Event()

    def stalled():
        yield wire.encode_open([40, 41], SessionParams())
        hold.wait(30)

    channel = grpc.secure_channel(f"127.0.0.1:{port}", identity(pki).credentials())
    try:
        call = channel.stream_stream(wire.SESSION_METHOD)(stalled(), timeout=30)
        wait_until(lambda: server.open_sessions == 1)
        start = time.monotonic()
        assert server.drain_and_stop(0.5) is False
        assert 0.4 < time.monotonic() - start < 10 and server.wait(0)
        with pytest.raises(grpc.RpcError):
            list(call)
    finally:
        hold.set()
        channel.close()
        server.stop(grace=0)


def test_sigterm_drains_the_serve_process_then_it_exits(tmp_path, char_tok, models, pki) -> None:
    # Prepare: `server serve` in its own process, with probes on its metrics port.
    dirs = save_tiny(tmp_path, char_tok, seed=1, name="s"), save_tiny(tmp_path, char_tok, seed=2, name="g")
    port, metrics_port, port_file = free_port(), free_port(), tmp_path / "port"
    env = {**os.environ, "GRPC_VERBOSITY": "NONE", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "specsteer.server.cli", "serve", "--tls-dir", str(pki.directory), "--port", str(port)]
    cmd += ["--generalist", str(dirs[1]), "--specialist", str(dirs[0]), "--port-file", str(port_file)]
    cmd += ["--metrics-port", str(metrics_port), "--drain-grace", "60", "--torch-threads", "1"]
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log)
    try:
        wait_until(lambda: port_file.exists() or proc.poll() is not None, timeout=180)
        assert proc.poll() is None, (tmp_path / "server.log").read_text()
        assert status(metrics_port, "/readyz") == 200
        alice = PausedGeneration(models, port, pki)
        # Execute: SIGTERM while alice's session is open.
        proc.send_signal(signal.SIGTERM)
        wait_until(lambda: status(metrics_port, "/readyz") == 503)
        # Assert: a newcomer is refused (and finishes locally); alice finishes with the verifier;
        # the process exits on its own once she is done, long before the 60 s grace.
        bob = newcomer(models, port, pki)
        assert bob.stats.fallback == "verifier-lost" and "draining" in (bob.fallback_detail or "")
        out = alice.resume()
        assert out.stats.fallback is None
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        log.close()
    text = (tmp_path / "server.log").read_text()
    assert "draining" in text and "drained" in text


@pytest.mark.parametrize("field", ["drain_grace", "slot_min_hold"])
@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_the_new_limits_are_refused_out_of_range(field, value) -> None:
    with pytest.raises(ConfigError, match=f"{field} must be a number of seconds, 0 or more"):
        ServerConfig(**{field: value})

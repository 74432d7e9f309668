"""A dead verifier means fallback; a failed check means refusal. Each shape is a real socket on
127.0.0.1 reached by the real client (`RemoteVerifier` inside the device loop)."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from core.session_types import SessionParams
from sdk.connect_faults import classify
from sdk.device import DecodeOptions, Specialist, generate
from sdk.remote import RemoteVerifier, TlsIdentity, VerifierRefused
from server import pki as pki_mod
from server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import RecordingTap, free_port, make_pki, remote, serve

PROMPT = "Hello there"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("faults"), devices=("alice",))


@pytest.fixture(scope="module")
def models(char_tok):
    return tiny_lm(char_tok, seed=1, name="s"), tiny_lm(char_tok, seed=2, name="g")


def _close(conn: socket.socket) -> None:
    conn.close()


def _read_then_close(conn: socket.socket) -> None:
    conn.recv(4096)
    conn.close()


def _read_then_reset(conn: socket.socket) -> None:
    conn.recv(4096)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def _silent(conn: socket.socket) -> None:
    time.sleep(10)
    conn.close()


@contextmanager
def tcp_peer(handle: Callable[[socket.socket], None]) -> Iterator[int]:
    """A TCP listener on 127.0.0.1 that treats every connection with `handle`."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve_forever() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=serve_forever, daemon=True).start()
    try:
        yield port
    finally:
        listener.close()


_KILLED_WHILE_CONNECTING = """
import os, signal, socket, sys
s = socket.create_server(("127.0.0.1", 0)); print(s.getsockname()[1], flush=True)
c, _ = s.accept(); c.recv(4096); os.kill(os.getpid(), signal.SIGKILL)
"""


@contextmanager
def killed_while_connecting() -> Iterator[int]:
    """A verifier process that is killed (SIGKILL) in the middle of the device's handshake."""
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WHILE_CONNECTING], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


@contextmanager
def nothing_listening() -> Iterator[int]:
    yield free_port()


@contextmanager
def shaped(handle: Callable[[socket.socket], None]) -> Iterator[int]:
    with tcp_peer(handle) as port:
        yield port


DEAD_VERIFIERS = {
    "nothing listening": nothing_listening,
    "closed before the handshake": lambda: shaped(_close),
    "connection reset in the handshake": lambda: shaped(_read_then_reset),
    "killed while connecting": killed_while_connecting,
    "balancer with no healthy backend": lambda: shaped(_read_then_close),
    "accepts and never answers": lambda: shaped(_silent),
}


@pytest.mark.parametrize("shape", sorted(DEAD_VERIFIERS))
def test_a_dead_verifier_means_fallback(pki, models, shape) -> None:
    # Prepare
    tap = RecordingTap()
    specialist = Specialist(models[0], None)
    with DEAD_VERIFIERS[shape]() as port, remote(port, pki, vocab_size=99, tap=tap, connect_timeout=2.0) as verifier:
        # Execute: the device loop meets the dead verifier when it opens the session.
        result = generate(specialist, PROMPT, SessionParams(draft_len=3), DecodeOptions(max_new_tokens=6), verifier)
    # Assert: the Specialist finished locally, and said why; nothing left the device.
    assert result.stats.fallback == "verifier-unreachable", result.stats.fallback
    assert len(result.token_ids) == 6
    assert tap.uplinks == []


def test_a_verifier_that_refuses_the_device_certificate_is_a_refusal_not_an_outage(pki, models, tmp_path) -> None:
    # Prepare: a certificate for "alice" from a device CA the verifier does not trust.
    stranger = pki_mod.issue_leaf(pki_mod.new_ca("SpecSteer Device CA"), "alice", client=True)
    cert, key = pki_mod.write_issued(tmp_path, "stranger", stranger)
    tap = RecordingTap()
    specialist = Specialist(models[0], None)
    cloud = CloudVerifier(models[1], models[0], seed=0, max_top_k=64)
    with serve(cloud, pki) as (_, port):
        ident = TlsIdentity.from_files(pki.pins, cert, key)
        with (
            RemoteVerifier(f"127.0.0.1:{port}", ident, vocab_size=99, tap=tap, connect_timeout=5.0) as verifier,
            pytest.raises(VerifierRefused, match="refused this device"),
        ):
            # Execute: fallback is on, and still the refusal surfaces.
            generate(specialist, PROMPT, SessionParams(draft_len=3), DecodeOptions(max_new_tokens=6), verifier)
    assert tap.uplinks == []


@pytest.mark.parametrize(
    ("detail", "refused"),
    [
        ("UNAVAILABLE: ipv4:127.0.0.1:1: Handshake read failed (Socket closed)", False),
        ("failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Connection refused", False),
        ("Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: ... CERTIFICATE_VERIFY_FAILED", True),
        ("Peer name 127.0.0.2 is not in peer certificate; Hostname Verification Check failed", True),
        ("SSL_ERROR_SSL: error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER", True),
        ("Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: something new", True),  # fail closed
    ],
)
def test_causes_are_read_from_the_specific_detail(detail: str, refused: bool) -> None:
    assert classify(detail, "127.0.0.1").refused is refused

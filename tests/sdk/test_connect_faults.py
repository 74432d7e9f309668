"""A dead verifier means fallback; a failed check means refusal. Each shape is a real socket on
127.0.0.1 reached by the real client (`RemoteVerifier` inside the device loop)."""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import os
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from specsteer.core.errors import ConfigError
from specsteer.core.session_types import SessionParams
from specsteer.sdk.cli import main as cli_main
from specsteer.sdk.connect_faults import certificate_refusal, classify
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.remote import RemoteVerifier, TlsIdentity, VerifierRefused
from specsteer.sdk.transport import VerifierLost
from specsteer.server import pki as pki_mod
from specsteer.server.session import CloudVerifier
from tests.tinymodels import save_tiny, tiny_lm
from tests.verifier_harness import RecordingTap, free_port, identity, make_pki, remote, serve

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
        (
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
            "Failed to create security handshaker.",
            True,
        ),
        ("UNAVAILABLE: ipv4:127.0.0.1:1: a cause no gRPC release has printed yet", True),
        ("UNAVAILABLE: ipv4:127.0.0.1:1: recvmsg:Connection reset by peer (104)", False),
        ("DEADLINE_EXCEEDED: Deadline Exceeded", False),
        ("UNAVAILABLE: DNS resolution failed for nowhere.invalid:443: C-ares status is not ARES_SUCCESS", False),
        ("UNAVAILABLE: ipv4:10.0.0.1:443: Failed to connect to remote host: Timeout occurred: FD Shutdown", False),
        ("UNAVAILABLE: ipv4:10.0.0.1:443: Failed to connect to remote host: No route to host", False),
    ],
)
def test_causes_are_read_from_the_specific_detail(detail: str, refused: bool) -> None:
    assert classify(detail, "127.0.0.1").refused is refused


# -- misconfiguration fails closed, before any connection ---------------------------------


def _other_key(tmp_path, pki) -> Path:
    """A valid device key that is not alice's: a misconfigured device."""
    other = pki_mod.issue_leaf(pki_mod.load_issued(pki.directory, "device-ca"), "alice", client=True)
    _, key = pki_mod.write_issued(tmp_path, "other", other)
    return key


def test_a_key_that_is_not_the_certificates_is_one_sentence_before_connecting(pki, tmp_path) -> None:
    key = _other_key(tmp_path, pki)
    with pytest.raises(ConfigError) as info:
        TlsIdentity.from_files(pki.pins, pki.device_cert("alice"), key)
    message = str(info.value)
    assert message == f"the key in {key} is not the key of the certificate in {pki.device_cert('alice')}"


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("key-not-pem", "holds no PEM private key that can be read"),
        ("key-encrypted", "is encrypted"),
        ("cert-not-pem", "holds no PEM certificate that can be read"),
        ("cert-expired", "is not valid now"),
        ("cert-not-yet-valid", "is not valid now"),
    ],
)
def test_unusable_device_credentials_are_refused_at_load(pki, tmp_path, case, message) -> None:
    device_ca = pki_mod.load_issued(pki.directory, "device-ca")
    cert, key = pki.device_cert("alice"), pki.device_key("alice")
    if case == "key-not-pem":
        key = tmp_path / "k.pem"
        key.write_bytes(b"-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
        key.chmod(0o600)
    elif case == "key-encrypted":
        issued = pki_mod.load_issued(pki.directory / "devices", "alice")
        key = tmp_path / "k.pem"
        key.write_bytes(
            issued.key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.BestAvailableEncryption(b"secret"),
            )
        )
        key.chmod(0o600)
    elif case == "cert-not-pem":
        cert = tmp_path / "c.pem"
        cert.write_bytes(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    else:
        start = dt.datetime.now(dt.UTC) + (dt.timedelta(days=-30) if case == "cert-expired" else dt.timedelta(days=2))
        cert, key = pki_mod.write_issued(
            tmp_path, case, pki_mod.issue_leaf(device_ca, "alice", client=True, not_before=start, days=1)
        )
    with pytest.raises(ConfigError, match=message):
        TlsIdentity.from_files(pki.pins, cert, key)


def test_the_cli_refuses_a_mismatched_key_with_one_sentence_and_no_fallback(pki, tmp_path, char_tok, capsys) -> None:
    specialist_dir = save_tiny(tmp_path, char_tok, seed=1, name="s")
    key = _other_key(tmp_path, pki)
    args = ["generate", "--prompt", PROMPT, "--max-new-tokens", "4", "--specialist", str(specialist_dir)]
    args += ["--server", f"127.0.0.1:{free_port()}", "--pins", str(pki.pins)]
    args += ["--cert", str(pki.device_cert("alice")), "--key", str(key)]
    capsys.readouterr()  # the model folder's own progress output
    code = cli_main(args)
    captured = capsys.readouterr()
    assert code == 1
    assert captured.err.strip().splitlines() == [
        f"sdk: error: the key in {key} is not the key of the certificate in {pki.device_cert('alice')}"
    ]
    assert "fallback" not in captured.out + captured.err


def test_a_cause_gRPC_gives_that_is_no_network_fault_is_a_refusal(pki, models, tmp_path) -> None:
    # The same mismatch, handed to gRPC directly (past the load check): its cause ("Failed to
    # create security handshaker") is no network fault, so the device must not finish locally.
    key = _other_key(tmp_path, pki)
    ident = TlsIdentity.from_files(pki.pins, pki.device_cert("alice"), pki.device_key("alice"))
    mismatched = TlsIdentity(ident.pins, ident.cert_chain, key.read_bytes())
    tap = RecordingTap()
    specialist = Specialist(models[0], None)
    cloud = CloudVerifier(models[1], models[0], seed=0, max_top_k=64)
    with (
        serve(cloud, pki) as (_, port),
        RemoteVerifier(f"127.0.0.1:{port}", mismatched, vocab_size=99, tap=tap, connect_timeout=5.0) as verifier,
        pytest.raises(VerifierRefused, match="not a network fault"),
    ):
        generate(specialist, PROMPT, SessionParams(draft_len=3), DecodeOptions(max_new_tokens=6), verifier)
    assert tap.uplinks == [] and tap.fallbacks == []


# -- a peer that closes after the handshake, and the connect deadline ------------------------


# An empty HTTP/2 SETTINGS frame: what a gRPC server writes first on a connection it accepted.
_H2_SETTINGS = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _tls_peer(
    pki, folder: Path, *, then: Callable[[ssl.SSLSocket], None], version: ssl.TLSVersion | None = None
) -> Callable[[socket.socket], None]:
    """A peer with the verifier's own certificate that completes the handshake, then does `then`."""
    server = pki_mod.load_issued(pki.directory, "server")
    (folder / "chain.pem").write_bytes(server.chain_pem)
    (folder / "key.pem").write_bytes(server.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "chain.pem", folder / "key.pem")
    context.set_alpn_protocols(["h2"])
    context.verify_mode = ssl.CERT_OPTIONAL
    context.load_verify_locations(cadata=pki_mod.load_issued(pki.directory, "device-ca").cert_pem.decode())
    if version is not None:
        context.minimum_version = context.maximum_version = version

    def handle(conn: socket.socket) -> None:
        try:
            tls = context.wrap_socket(conn, server_side=True)
        except OSError:
            conn.close()
            return
        with contextlib.suppress(OSError):
            then(tls)
        tls.close()

    return handle


def _close_first_then_speak() -> Callable[[ssl.SSLSocket], None]:
    """A verifier that went away right after the device's handshake (no byte: gRPC reads "Socket
    closed"), then, asked again, accepts the device: it speaks first, as gRPC does, and closes."""
    connections = itertools.count()

    def then(tls: ssl.SSLSocket) -> None:
        if next(connections):
            tls.sendall(_H2_SETTINGS)
            tls.settimeout(0.2)
            tls.recv(65536)

    return then


def test_a_tls_peer_that_accepts_then_closes_means_fallback(pki, models, tmp_path) -> None:
    tap = RecordingTap()
    specialist = Specialist(models[0], None)
    with (
        tcp_peer(_tls_peer(pki, tmp_path, then=_close_first_then_speak())) as port,
        remote(port, pki, vocab_size=99, tap=tap, connect_timeout=3.0) as v,
    ):
        result = generate(specialist, PROMPT, SessionParams(draft_len=3), DecodeOptions(max_new_tokens=6), v)
    assert result.stats.fallback == "verifier-unreachable", result.stats.fallback
    assert tap.uplinks == []


def test_the_refusal_probe_never_shows_the_device_certificate_in_tls_1_2(pki, tmp_path) -> None:
    # An on-path attacker who cuts the device's TLS 1.3 connection must not make the probe that
    # follows re-handshake in TLS 1.2, where the device's certificate (its name) crosses unencrypted.
    seen: list[object] = []
    peer = _tls_peer(pki, tmp_path, then=lambda tls: seen.append(tls.getpeercert()), version=ssl.TLSVersion.TLSv1_2)
    alice = identity(pki)
    with tcp_peer(peer) as port:
        refusal = certificate_refusal(
            "127.0.0.1",
            port,
            anchors_pem=alice.pins.root_pem,
            cert_chain_pem=alice.cert_chain,
            key_pem=alice.key,
            server_name="localhost",
            timeout=3.0,
        )
        time.sleep(0.2)  # the peer's thread records what it saw
    assert refusal is None
    assert seen == []  # no TLS 1.2 handshake completed, with or without the device's certificate


@pytest.mark.parametrize("shape", ["accepts and never answers", "nothing listening"])
def test_a_failed_connection_takes_no_longer_than_the_connect_timeout(pki, shape) -> None:
    timeout = 1.5
    with DEAD_VERIFIERS[shape]() as port, remote(port, pki, vocab_size=99, connect_timeout=timeout) as verifier:
        start = time.monotonic()
        with pytest.raises(VerifierLost):
            verifier.open([1, 2, 3], SessionParams(draft_len=3))
        elapsed = time.monotonic() - start
    # One deadline for the wait and the questions after it: the timeout, not twice it (a second
    # wait of its own). The margin is the machine's: 0.13-0.28 s past the timeout under load here,
    # where 0.5 s of slack came close.
    assert elapsed < 2 * timeout, elapsed


def test_the_probe_handshake_is_written_once_for_both_checks() -> None:
    """Issue #46 (review): `certificate_refusal` and `read_serving_chain` each built the probe's TLS
    context and handshake. Both now go through `sdk.tls_probe.tls_handshake`, so what the probe
    offers (TLS 1.3 only, ALPN h2, the device's certificate) is written once."""
    import ast

    root = Path(__file__).resolve().parents[2] / "sdk"
    tls_calls = {"create_default_context", "SSLContext", "wrap_socket", "do_handshake", "load_cert_chain"}
    found: dict[str, list[str]] = {}
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in tls_calls:
                found.setdefault(path.name, []).append(node.func.attr)
    assert set(found) == {"tls_probe.py"}, found

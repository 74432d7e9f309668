"""Man-in-the-middle and mutual-TLS tests against real TLS servers on 127.0.0.1.

Each impostor is refused with a clear `VerifierRefused` before any payload leaves: the egress tap
recorded nothing and the impostor received no call (gRPC servers) or no application bytes
(`openssl s_server`). A refused peer is never papered over by finishing locally. The verifier in
turn refuses devices without a certificate from its device CA.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from specsteer.core.errors import ConfigError, SpecSteerError
from specsteer.core.session_types import SessionParams
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.remote import RemoteVerifier, TlsIdentity, VerifierRefused
from specsteer.server import pki as pki_mod
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import RecordingTap, free_port, identity, make_pki, remote, serve

PROMPT = "Hello there"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> pki_mod.Pki:
    return make_pki(tmp_path_factory.mktemp("mitm"), devices=("alice",))


@pytest.fixture(scope="module")
def models(char_tok):
    return tiny_lm(char_tok, seed=1, name="s"), tiny_lm(char_tok, seed=2, name="g")


@pytest.fixture
def cloud(models) -> CloudVerifier:
    return CloudVerifier(models[1], models[0], seed=0, max_top_k=64)


class _Recorder(grpc.GenericRpcHandler):
    """Accepts any method and counts the calls that reach it: an impostor must see none."""

    def __init__(self) -> None:
        self.calls = 0

    def service(self, handler_call_details):
        self.calls += 1
        return grpc.stream_stream_rpc_method_handler(lambda it, ctx: iter(()))


@contextmanager
def grpc_impostor(issued: pki_mod.Issued | None) -> Iterator[tuple[int, _Recorder]]:
    """A gRPC server with someone else's certificate (or none: plaintext) on 127.0.0.1."""
    recorder = _Recorder()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=(recorder,))
    if issued is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(issued.key_pem, issued.chain_pem)]))
    server.start()
    try:
        yield port, recorder
    finally:
        server.stop(0)


@contextmanager
def openssl_impostor(tmp_path: Path, issued: pki_mod.Issued) -> Iterator[tuple[int, Path]]:
    """`openssl s_server` speaking TLS + ALPN h2 with `issued`; its output shows any decrypted bytes."""
    cert, key = pki_mod.write_issued(tmp_path, "impostor", issued)
    port = free_port()
    out = tmp_path / "s_server.out"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [
                *("openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-alpn", "h2", "-naccept", "20"),
                *("-cert", str(cert), "-key", str(key)),
            ],
            stdin=subprocess.PIPE,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 10
        while b"ACCEPT" not in out.read_bytes():
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.05)
        yield port, out
    finally:
        proc.kill()
        proc.wait()


def _connect(port: int, pki: pki_mod.Pki, tap: RecordingTap, **kw) -> RemoteVerifier:
    return remote(port, pki, vocab_size=99, tap=tap, connect_timeout=5.0, **kw)


def _refused(port: int, pki: pki_mod.Pki, match: str, **kw) -> RecordingTap:
    tap = RecordingTap()
    with _connect(port, pki, tap, **kw) as verifier, pytest.raises(VerifierRefused, match=match):
        verifier.open([10, 11], SessionParams())
    assert tap.uplinks == [] and tap.sessions == 0  # nothing was even handed to the tap
    return tap


def test_server_certificate_from_another_ca_is_refused(pki) -> None:
    other = pki_mod.new_ca("SpecSteer Dev Serving CA")  # same name as the real CA, different key
    with grpc_impostor(pki_mod.issue_leaf(other, "specsteer-verifier", hosts=["127.0.0.1"])) as (port, rogue):
        _refused(port, pki, "does not chain to a pinned anchor")
    assert rogue.calls == 0


def test_right_ca_wrong_host_name_is_refused(pki) -> None:
    ca = pki_mod.load_issued(pki.directory, "ca")
    with grpc_impostor(pki_mod.issue_leaf(ca, "specsteer-verifier", hosts=["evil.example"])) as (port, rogue):
        _refused(port, pki, "not valid for the host name '127.0.0.1'")
    assert rogue.calls == 0


def test_expired_certificate_is_refused(pki, tmp_path) -> None:
    ca = pki_mod.load_issued(pki.directory, "ca")
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
    expired = pki_mod.issue_leaf(ca, "specsteer-verifier", hosts=["127.0.0.1"], not_before=long_ago, days=10)
    with openssl_impostor(tmp_path, expired) as (port, out):
        _refused(port, pki, "has expired")
        time.sleep(0.2)
        assert b"PRI * HTTP/2.0" not in out.read_bytes()  # no HTTP/2 preface was ever decrypted


def test_self_signed_certificate_with_the_same_subject_is_refused(pki, tmp_path) -> None:
    real = pki_mod.load_issued(pki.directory, "server").cert
    hosts = ["localhost", "127.0.0.1", "::1"]
    forged = pki_mod.issue_leaf(None, "", hosts=hosts, subject=real.subject)
    assert forged.cert.subject == real.subject and forged.cert.issuer == real.subject
    with openssl_impostor(tmp_path, forged) as (port, out):
        _refused(port, pki, "does not chain to a pinned anchor")
        time.sleep(0.2)
        assert b"PRI * HTTP/2.0" not in out.read_bytes()


def test_plaintext_server_is_refused(pki) -> None:
    with grpc_impostor(None) as (port, rogue):
        _refused(port, pki, "does not speak TLS")
    assert rogue.calls == 0


def test_a_refused_peer_is_an_error_even_with_fallback_on(pki, models) -> None:
    # Finishing locally would hide an attack: the generation fails loudly instead.
    with (
        grpc_impostor(None) as (port, rogue),
        _connect(port, pki, RecordingTap()) as verifier,
        pytest.raises(VerifierRefused, match="nothing was sent"),
    ):
        generate(Specialist(models[0]), PROMPT, SessionParams(), DecodeOptions(max_new_tokens=4), verifier)
    assert rogue.calls == 0


def test_server_name_override_renames_but_never_skips_host_verification(pki, cloud) -> None:
    with serve(cloud, pki) as (_, port):
        # The real certificate names localhost: overriding to it works ...
        ok = RecordingTap()
        with _connect(port, pki, ok, server_name="localhost") as verifier:
            verifier.open([10, 11], SessionParams()).close()
        assert len(ok.uplinks) == 2  # Open, Close
        # ... and to a name the certificate does not carry is refused.
        _refused(port, pki, "not valid for the host name 'evil.example'", server_name="evil.example")
    # A name that is no host name is refused before it could be checked as some other name.
    for bad in (" ", "", "localhost\x00.evil.example", " localhost", "*.example", "a b"):
        with pytest.raises(ConfigError, match=r"server name override .* must be a DNS name or an IP address"):
            RemoteVerifier("127.0.0.1:1", identity(pki), vocab_size=99, server_name=bad)


def _rotate_to(pki: pki_mod.Pki, issuer: pki_mod.Issued) -> None:
    pki_mod.write_issued(pki.directory, "server", pki_mod.issue_leaf(issuer, "specsteer-verifier", hosts=["127.0.0.1"]))


def test_rotated_certificate_not_in_the_pin_set_is_refused_and_the_backup_anchor_works(tmp_path, cloud) -> None:
    # Prepare: a private PKI, since this test rewrites the server certificate.
    pki = make_pki(tmp_path)
    with serve(cloud, pki) as (server, port):
        tap = RecordingTap()
        with _connect(port, pki, tap) as verifier:
            verifier.open([10, 11], SessionParams()).close()
        # Execute: rotate (no restart) to a leaf from a CA nobody pinned.
        _rotate_to(pki, pki_mod.new_ca("SpecSteer Dev Serving CA"))
        _refused(port, pki, "does not chain to a pinned anchor")
        # Rotate again, to a leaf under the pinned backup anchor: devices follow without an update.
        _rotate_to(pki, pki_mod.load_issued(pki.directory, "backup-ca"))
        with _connect(port, pki, RecordingTap()) as verifier:
            verifier.open([10, 11], SessionParams()).close()
        assert server.metrics.value("specsteer_cert_reloads_total", {"result": "ok"}) == 2


class _NoCertificate(TlsIdentity):
    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(root_certificates=self.pins.root_pem)


@pytest.mark.parametrize("who", ["no-certificate", "other-ca"])
def test_the_server_refuses_devices_without_a_certificate_from_its_device_ca(pki, cloud, tmp_path, who) -> None:
    # Prepare
    if who == "no-certificate":
        ident: TlsIdentity = _NoCertificate(identity(pki).pins, b"", b"")
    else:
        stranger = pki_mod.issue_leaf(pki_mod.new_ca("SpecSteer Device CA"), "alice", client=True)
        cert, key = pki_mod.write_issued(tmp_path, "stranger", stranger)
        ident = TlsIdentity.from_files(pki.pins, cert, key)
    tap = RecordingTap()
    with serve(cloud, pki) as (server, port):
        verifier = RemoteVerifier(f"127.0.0.1:{port}", ident, vocab_size=99, tap=tap, connect_timeout=5.0)
        # Execute / Assert: the verifier refuses this device: a refusal, never an outage to fall back from.
        with verifier, pytest.raises(VerifierRefused, match=r"refused this device: it does not accept"):
            verifier.open([10, 11], SessionParams())
        assert tap.uplinks == []
        assert server.metrics.value("specsteer_streams_total") == 0  # no stream reached the servicer
        # The same server still serves a proper device.
        with _connect(port, pki, RecordingTap()) as good:
            good.open([10, 11], SessionParams()).close()


class _Blocked(SpecSteerError):
    pass


class _BlockThird(RecordingTap):
    """Refuses the third uplink, as an egress policy would."""

    def on_uplink(self, session_id: str, payload: bytes) -> None:
        if len(self.uplinks) == 2:
            raise _Blocked("uplink 3 blocked by the egress policy")
        super().on_uplink(session_id, payload)


def test_an_uplink_the_tap_refuses_is_never_sent_and_ends_the_generation(pki, cloud, models) -> None:
    tap = _BlockThird()
    with serve(cloud, pki) as (server, port), _connect(port, pki, tap) as verifier:
        with pytest.raises(_Blocked, match="blocked by the egress policy"):
            generate(
                Specialist(models[0]), PROMPT, SessionParams(gamma=0.05), DecodeOptions(max_new_tokens=16), verifier
            )
        deadline = time.monotonic() + 5
        while server.service.open_sessions and time.monotonic() < deadline:
            time.sleep(0.02)
        # The server saw the Open and round 1 only; no Close after the refusal, and the session's
        # record ends saying why (so an auditor sees every session end).
        assert server.metrics.value("specsteer_rounds_total") == 1
        assert len(tap.uplinks) == 2 and tap.fallbacks == [("s1", "egress-refused")]
        assert server.service.open_sessions == 0


def test_closing_right_after_quick_sessions_leaves_no_traceback_on_stderr(pki, cloud, models) -> None:
    """Sessions opened one after another, then the client closed at once (a short request, a
    refusal): gRPC's connectivity poller must not be left a request to connect that it acts on
    after the close. It raised `ValueError: Cannot invoke RPC: Channel closed!` in its own thread
    (grpc/grpc#18995), a traceback on the user's stderr, whenever a session was opened within
    0.2 s of the one before."""
    errors: list[BaseException | None] = []
    hook = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    try:
        with serve(cloud, pki) as (_, port):
            for _ in range(3):
                verifier = remote(port, pki, vocab_size=models[0].vocab_size)
                for _ in range(2):
                    verifier.open([5, 6, 7], SessionParams()).close()
                verifier.close()
            time.sleep(0.5)  # the poller wakes every 0.2 s
    finally:
        threading.excepthook = hook
    assert errors == []

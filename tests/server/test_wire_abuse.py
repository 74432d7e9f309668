"""What an operator is told about the wire must hold against one hostile but enrolled device:
it cannot lock other devices out, and it is known by exactly one certificate name."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from specsteer.core import wire
from specsteer.core.session_types import SessionParams
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.remote import TlsIdentity
from specsteer.server import pki as pki_mod
from specsteer.server.config import ServerConfig
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import identity, make_pki, remote, serve

C = grpc.StatusCode
OPEN = wire.encode_open([40, 41, 42, 43], SessionParams(top_k=5, draft_len=4))


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("abuse"), devices=("alice", "bob"))


@pytest.fixture(scope="module")
def models(char_tok):
    return tiny_lm(char_tok, seed=11, name="s"), tiny_lm(char_tok, seed=22, name="g")


class HalfOpenFlood:
    """`n` Session streams of one device that never send a frame, spread over channels.

    No channel carries more streams than the server allows on one connection: beyond that limit,
    streams a client starts before the server's HTTP/2 SETTINGS reach it are refused by gRPC's
    transport (REFUSED_STREAM, UNAVAILABLE), not by the servicer, which is what these tests are
    about. On a loaded machine the SETTINGS came late and some of the flood ended UNAVAILABLE."""

    def __init__(self, port: int, ident, n: int) -> None:
        self.gate = threading.Event()
        self.codes: queue.Queue[tuple[grpc.StatusCode, str, float]] = queue.Queue()
        per_channel = ServerConfig().extra_streams  # below any connection's stream limit
        channels = -(-n // per_channel)
        self.channels = [grpc.secure_channel(f"127.0.0.1:{port}", ident.credentials()) for _ in range(channels)]
        self.calls = []
        start = time.monotonic()
        for i in range(n):
            call = self.channels[i % channels].stream_stream(wire.SESSION_METHOD)(self._silence(), timeout=60)
            self.calls.append(call)
            threading.Thread(target=self._drain, args=(call, start), daemon=True).start()

    def _silence(self) -> Iterator[bytes]:
        self.gate.wait(60)
        return
        yield b""  # a generator that never yields before the gate opens

    def _drain(self, call, start: float) -> None:
        try:
            list(call)
            self.codes.put((call.code(), call.details() or "", time.monotonic() - start))
        except grpc.RpcError as exc:
            self.codes.put((exc.code(), exc.details() or "", time.monotonic() - start))

    def ended(self, count: int, timeout: float) -> list[tuple[grpc.StatusCode, str, float]]:
        """The streams that ended, once `count` have or `timeout` seconds have passed."""
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            try:
                out.append(self.codes.get(timeout=0.1))
            except queue.Empty:
                continue
        return out

    def stop(self) -> None:
        self.gate.set()
        for call in self.calls:
            call.cancel()
        for ch in self.channels:
            ch.close()


def test_one_device_flooding_half_open_streams_cannot_lock_out_another(models, pki) -> None:
    # Prepare: a small verifier; alice opens many more streams than the whole verifier admits.
    cloud = CloudVerifier(models[1], models[0], seed=0, max_top_k=64)
    with serve(cloud, pki, max_sessions=4, max_sessions_per_device=2, open_timeout=30.0) as (_, port):
        flood = HalfOpenFlood(port, identity(pki, "alice"), n=200)
        try:
            # Assert: the streams beyond alice's cap are refused at once, by the servicer, per device
            # (well before the 30 s open timeout would end them; the 2 she may hold stay open).
            refused = flood.ended(count=198, timeout=20.0)
            assert len(refused) >= 190, f"only {len(refused)} of alice's 200 streams were refused"
            assert all(code is C.RESOURCE_EXHAUSTED for code, _, _ in refused), {c for c, _, _ in refused}
            assert all("'alice' already has 2 open sessions or half-open streams" in d for _, d, _ in refused)
            # Execute: bob generates while alice still holds her half-open streams.
            specialist = Specialist(models[0], None)
            with remote(port, pki, vocab_size=models[0].vocab_size, device="bob") as verifier:
                result = generate(
                    specialist,
                    "Hello there",
                    SessionParams(top_k=5, draft_len=3),
                    DecodeOptions(max_new_tokens=8),
                    verifier,
                    fallback=False,
                )
            # Assert: bob was served by the verifier, not by his own fallback.
            assert result.stats.fallback is None and result.stats.rounds > 0
        finally:
            flood.stop()


def test_a_stream_that_never_opens_ends_after_the_open_timeout(models, pki) -> None:
    cloud = CloudVerifier(models[1], models[0], seed=0, max_top_k=64)
    with serve(cloud, pki, open_timeout=0.5, idle_timeout=60.0) as (_, port):
        flood = HalfOpenFlood(port, identity(pki, "alice"), n=1)
        try:
            ended = flood.ended(count=1, timeout=30.0)
            assert len(ended) == 1  # within 30 s: not the 60 s idle timeout
            code, details, _ = ended[0]
            assert code is C.DEADLINE_EXCEEDED and "no Open for 0.5 s" in details
        finally:
            flood.stop()


def _device_cert(tmp_path, pki, stem: str, names: list[x509.NameAttribute]) -> tuple:
    device_ca = pki_mod.load_issued(pki.directory, "device-ca")
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "SpecSteer"), *names])
    issued = pki_mod.issue_leaf(device_ca, "unused", client=True, subject=subject)
    return pki_mod.write_issued(tmp_path, stem, issued)


@pytest.mark.parametrize(
    ("stem", "cns", "message"),
    [
        ("two-cns", ["alice", "bob"], "exactly one device (one CN); it has 2"),
        ("no-cn", [], "exactly one device (one CN); it has 0"),
        ("bad-name", ["Alice Smith"], "CN 'Alice Smith' is not a device name"),
        ("empty-cn", [""], "CN '' is not a device name"),
    ],
)
def test_a_device_is_exactly_one_valid_certificate_name(models, pki, tmp_path, stem, cns, message) -> None:
    # _validate=False: cryptography would refuse to build an empty CN, which an attacker's tool need not.
    names = [x509.NameAttribute(NameOID.COMMON_NAME, cn, _validate=False) for cn in cns]
    cert, key = _device_cert(tmp_path, pki, stem, names)
    ident = TlsIdentity.from_files(pki.pins, cert, key)
    cloud = CloudVerifier(models[1], models[0], seed=0, max_top_k=64)
    with serve(cloud, pki) as (server, port):
        channel = grpc.secure_channel(f"127.0.0.1:{port}", ident.credentials())
        try:
            call = channel.stream_stream(wire.SESSION_METHOD)(iter([OPEN]), timeout=20)
            with pytest.raises(grpc.RpcError) as info:
                list(call)
        finally:
            channel.close()
        assert info.value.code() is C.UNAUTHENTICATED
        assert message in (info.value.details() or "")
        assert server.service.open_sessions == 0

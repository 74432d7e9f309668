"""Bad input against a live verifier: each gets a specific status and message, and harms no other
session. Frames are hand-built bytes on a real mutual-TLS stream, as a hostile device would send."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator, Sequence

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specsteer.core import wire
from specsteer.core.limits import MAX_PROMPT_TOKENS, MAX_UPLINK_BYTES
from specsteer.core.models import CausalLM
from specsteer.core.proto import verifier_pb2 as pb
from specsteer.core.session_types import Method, SessionParams
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.transport import InProcessVerifier
from specsteer.server.service import VerifierService
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_llama, tiny_lm
from tests.verifier_harness import identity, make_pki, remote, serve

C = grpc.StatusCode
PROMPT_IDS = [40, 41, 42, 43]
OPEN = wire.encode_open(PROMPT_IDS, SessionParams(top_k=5, draft_len=4))


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("service"), devices=("alice", "bob", "mallory"))


@pytest.fixture(scope="module")
def models(char_tok):
    return tiny_lm(char_tok, seed=11, name="s"), tiny_lm(char_tok, seed=22, name="g", layers=3)


@pytest.fixture(scope="module")
def live(models, pki):
    """One verifier for the module; tests that need other limits start their own.

    Its tests send hundreds of streams a second from one device on purpose: no stream rate here."""
    cloud = CloudVerifier(models[1], models[0], seed=0, max_top_k=64)
    unmetered = {"stream_rate": 1e6, "stream_burst": 10**6}
    with serve(cloud, pki, revoked_devices=("mallory",), **unmetered) as s:
        yield s


@pytest.fixture(scope="module")
def channel(live, pki) -> Iterator[grpc.Channel]:
    _, port = live
    ident = identity(pki)
    ch = grpc.secure_channel(f"127.0.0.1:{port}", ident.credentials())
    yield ch
    ch.close()


def raw_stream(channel: grpc.Channel, frames: Sequence[bytes], timeout: float = 30.0) -> tuple[list[bytes], C, str]:
    """Send `frames` on one Session stream, half-close; return (downlinks, status code, details)."""
    call = channel.stream_stream(wire.SESSION_METHOD)(iter(list(frames)), timeout=timeout)
    out: list[bytes] = []
    try:
        out.extend(call)
    except grpc.RpcError as exc:
        return out, exc.code(), exc.details() or ""
    return out, call.code(), call.details() or ""


def settled(server, timeout: float = 5.0) -> bool:
    """The status reaches the client a moment before the server's cleanup runs: wait for it."""
    deadline = time.monotonic() + timeout
    while server.service.open_sessions:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def uplink(**fields) -> bytes:
    return pb.Uplink(**fields).SerializeToString(deterministic=True)


def params_frame(**fields) -> bytes:
    fields = {"method": 1, "policy": 1, "top_k": 5, "draft_len": 4, "alpha_milli": 1000, "gamma_ppm": 500_000} | fields
    return uplink(open=pb.Open(prompt_ids=PROMPT_IDS, params=pb.SessionParams(**fields)))


def varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1  # negative numbers as protobuf's int64 does: ten bytes, two's complement
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def round_with_negative_draft() -> bytes:
    # Round{seq=1, draft_ids=[-1]}: draft_ids is packed uint32, so -1 arrives as 2^32 - 1.
    packed = varint(-1)
    body = bytes([1 << 3, 1, 3 << 3 | 2, len(packed)]) + packed
    return bytes([2 << 3 | 2, len(body)]) + body


def open_with_negative_prompt_id() -> bytes:
    params = wire.params_to_proto(SessionParams()).SerializeToString()
    packed = varint(7) + varint(-5)
    body = bytes([1 << 3 | 2, len(packed)]) + packed + bytes([2 << 3 | 2, len(params)]) + params
    return bytes([1 << 3 | 2, len(body)]) + body


def first_candidate(downlink: bytes) -> list[int]:
    return list(pb.Downlink.FromString(downlink).candidates[0].token_ids)


BAD_INPUT = [
    # token IDs out of vocabulary / negative
    (
        "draft-out-of-vocab",
        [OPEN, wire.encode_round(1, [], [5, 9999])],
        C.INVALID_ARGUMENT,
        "draft token ID 9999 is outside",
    ),
    ("commit-out-of-vocab", [OPEN, wire.encode_round(1, [2**32 - 1], [5])], C.INVALID_ARGUMENT, "commit token ID"),
    ("prompt-out-of-vocab", [wire.encode_open([5, 100_000], SessionParams())], C.INVALID_ARGUMENT, "prompt token ID"),
    ("negative-draft-id", [OPEN, round_with_negative_draft()], C.INVALID_ARGUMENT, "draft token ID 4294967295 is out"),
    ("negative-prompt-id", [open_with_negative_prompt_id()], C.INVALID_ARGUMENT, "prompt token ID 4294967291 is out"),
    # a draft longer than K
    (
        "draft-longer-than-k",
        [OPEN, wire.encode_round(1, [], [5] * 5)],
        C.INVALID_ARGUMENT,
        "more than the declared K = 4",
    ),
    # oversize prompt: over the token cap, and over the frame size cap (refused by gRPC itself)
    (
        "prompt-over-token-cap",
        [wire.encode_open([5] * (MAX_PROMPT_TOKENS + 1), SessionParams())],
        C.INVALID_ARGUMENT,
        f"the verifier takes at most {MAX_PROMPT_TOKENS}",
    ),
    (
        "frame-over-size-cap",
        [wire.encode_open([50_000] * (MAX_UPLINK_BYTES // 3), SessionParams())],
        C.RESOURCE_EXHAUSTED,
        "larger than max",
    ),
    # parameters out of range
    ("alpha-out-of-range", [params_frame(alpha_milli=10_001)], C.INVALID_ARGUMENT, "alpha must be in"),
    ("k-above-verifier-cap", [params_frame(top_k=65)], C.INVALID_ARGUMENT, "above this verifier's maximum 64"),
    ("draft-len-out-of-range", [params_frame(draft_len=33)], C.INVALID_ARGUMENT, "draft length K must be in"),
    ("unknown-method", [params_frame(method=9)], C.INVALID_ARGUMENT, "unknown method 9"),
    ("gamma-out-of-range", [params_frame(gamma_ppm=2_000_000_000)], C.INVALID_ARGUMENT, "gamma must be"),
    # messages out of order; unknown session (no Open on the stream)
    ("round-before-open", [wire.encode_round(1, [], [5])], C.FAILED_PRECONDITION, "no session is open"),
    ("close-before-open", [wire.encode_close(1)], C.FAILED_PRECONDITION, "no session is open"),
    ("round-seq-gap", [OPEN, wire.encode_round(2, [], [5])], C.FAILED_PRECONDITION, "round seq 2 where 1 was expected"),
    ("close-seq-wrong", [OPEN, wire.encode_close(3)], C.FAILED_PRECONDITION, "Close seq 3 where 1 was expected"),
    ("second-open", [OPEN, OPEN], C.FAILED_PRECONDITION, "a second Open on one stream"),
    (
        "frame-after-close",
        [OPEN, wire.encode_close(1), wire.encode_round(1, [], [5])],
        C.FAILED_PRECONDITION,
        "after Close",
    ),
    (
        "commit-without-candidates",
        [OPEN, wire.encode_round(1, [7], [5])],
        C.FAILED_PRECONDITION,
        "no steering candidates outstanding",
    ),
    # frames that are not what they claim
    ("garbage", [b"\xff\xff\xff"], C.INVALID_ARGUMENT, "does not parse"),
    ("unknown-field", [wire.encode_round(1, [], [5]) + bytes([9 << 3 | 2, 2]) + b"hi"], C.INVALID_ARGUMENT, "field 9"),
    (
        "non-canonical",
        [uplink() + bytes([2 << 3 | 2, 6, 1 << 3, 1, 3 << 3, 4, 3 << 3, 5])],
        C.INVALID_ARGUMENT,
        "canon",
    ),
    ("empty-uplink", [b""], C.INVALID_ARGUMENT, "no Open, Round, PaddedRound or Close"),
]


@pytest.mark.parametrize(("frames", "code", "message"), [b[1:] for b in BAD_INPUT], ids=[b[0] for b in BAD_INPUT])
def test_bad_input_gets_a_specific_status_and_message(channel, live, frames, code, message) -> None:
    # Execute
    _, got, details = raw_stream(channel, frames)
    # Assert
    assert got is code, details
    assert message in details
    assert settled(live[0])  # nothing left behind


def test_a_session_past_the_protocols_length_ends_out_of_range(channel, live, monkeypatch) -> None:
    """The verifier bounded no session (a device could grow its KV caches round after round): a
    round that would take it past a generation of the protocol's length is refused."""
    monkeypatch.setattr("specsteer.server.session.MAX_NEW_TOKENS", 3)
    monkeypatch.setattr("specsteer.server.session.MAX_CANDIDATE_TOKENS", 0)
    _, code, details = raw_stream(channel, [OPEN, wire.encode_round(1, [], [5, 6, 7, 8])])
    assert code is C.OUT_OF_RANGE and "past the protocol's 3 new tokens (4 of its text, 0 of placeholders)" in details
    assert settled(live[0])


def test_a_commit_that_is_not_a_candidate_is_refused(channel) -> None:
    # gamma = inf rejects every draft, so round 1 returns candidates; commit something else.
    opened = wire.encode_open(PROMPT_IDS, SessionParams(gamma=float("inf"), top_k=3, draft_len=2))
    down, code, _ = raw_stream(channel, [opened, wire.encode_round(1, [], [5, 6])])
    assert code is C.OK and len(down) == 1
    wrong = next(
        t for t in range(4, 90) if [t] not in [list(c.token_ids) for c in pb.Downlink.FromString(down[0]).candidates]
    )
    _, code, details = raw_stream(
        channel, [opened, wire.encode_round(1, [], [5, 6]), wire.encode_round(2, [wrong], [5])]
    )
    assert code is C.FAILED_PRECONDITION and "not one of the last steering candidates" in details
    _, code, details = raw_stream(channel, [opened, wire.encode_round(1, [], [5, 6]), wire.encode_round(2, [], [5])])
    assert code is C.FAILED_PRECONDITION and "must commit a recovery token" in details
    right = first_candidate(down[0])
    down, code, _ = raw_stream(channel, [opened, wire.encode_round(1, [], [5, 6]), wire.encode_round(2, right, [5])])
    assert code is C.OK and len(down) == 2


def test_an_idle_session_expires(models, pki) -> None:
    with serve(CloudVerifier(models[1], models[0], seed=0), pki, idle_timeout=0.5) as (server, port):
        ch = grpc.secure_channel(f"127.0.0.1:{port}", identity(pki).credentials())
        gate = threading.Event()

        def frames() -> Iterator[bytes]:
            yield OPEN
            gate.wait(10)  # stay silent well past the idle timeout

        call = ch.stream_stream(wire.SESSION_METHOD)(frames(), timeout=10)
        with pytest.raises(grpc.RpcError) as info:
            list(call)
        gate.set()
        assert info.value.code() is C.DEADLINE_EXCEEDED
        assert "session expired: no uplink for 0.5 s" in info.value.details()
        assert settled(server)
        assert server.metrics.value("specsteer_sessions_total", {"outcome": "expired"}) == 1
        ch.close()


class _LateCleanupContext:
    """A servicer context whose abort returns late: the stream's cleanup after it then runs well
    after the device has its status, as it may on a loaded verifier."""

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self._context = context

    def __getattr__(self, name: str):
        return getattr(self._context, name)

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        try:
            await self._context.abort(code, details)
        finally:
            await asyncio.sleep(0.5)


def test_a_refused_session_is_counted_when_its_slot_goes_back(models, pki, monkeypatch) -> None:
    # The slot goes back before the status is sent; its outcome must be counted with it, not in
    # the cleanup after the status (CI once read the metric in between).
    session = VerifierService.session

    async def late_cleanup(self, request_iterator, context) -> None:
        await session(self, request_iterator, _LateCleanupContext(context))

    monkeypatch.setattr(VerifierService, "session", late_cleanup)
    with serve(CloudVerifier(models[1], models[0], seed=0), pki, idle_timeout=0.3) as (server, port):
        ch = grpc.secure_channel(f"127.0.0.1:{port}", identity(pki).credentials())
        gate = threading.Event()

        def frames() -> Iterator[bytes]:
            yield OPEN
            gate.wait(10)

        with pytest.raises(grpc.RpcError) as info:
            list(ch.stream_stream(wire.SESSION_METHOD)(frames(), timeout=10))
        gate.set()
        assert info.value.code() is C.DEADLINE_EXCEEDED
        assert settled(server)
        assert server.metrics.value("specsteer_sessions_total", {"outcome": "expired"}) == 1
        ch.close()
        time.sleep(0.6)  # the late cleanup ends before the verifier stops


def test_a_session_whose_device_stops_reading_expires(char_tok, pki) -> None:
    # fusion's downlink is the vocabulary's size and any one-token commit is allowed, so a device
    # can send rounds blind and never read: the server's write then blocks on flow control, where
    # no idle deadline ran, and the session kept its slot for the connection's life (2 h).
    big = [
        CausalLM.from_parts(name, tiny_llama(char_tok, seed=seed, layers=1, hidden=16), char_tok)
        for seed, name in ((1, "s"), (2, "g"))
    ]
    for lm in big:
        lm.model.resize_token_embeddings(32768)  # 128 KiB downlinks
    cloud = CloudVerifier(big[1], big[0], seed=0, max_top_k=64)
    params = SessionParams(method=Method.FUSION, alpha=0.0, draft_len=0, top_k=1)
    frames = [wire.encode_open([40, 41, 42], params)]
    frames += [wire.encode_round(i, [44] if i > 1 else [], []) for i in range(1, 2000)]
    with serve(cloud, pki, idle_timeout=2.0, round_idle_timeout=1.0) as (server, port):
        ch = grpc.secure_channel(f"127.0.0.1:{port}", identity(pki).credentials())
        call = ch.stream_stream(wire.SESSION_METHOD)(iter(frames), timeout=60)  # sent, never read
        try:
            # Its rounds ran (on a loaded machine the first may take more than a moment), then the
            # writes blocked.
            deadline = time.monotonic() + 30
            while not server.metrics.value("specsteer_rounds_total"):
                assert time.monotonic() < deadline, "no round of the session ran"
                time.sleep(0.02)
            assert settled(server, timeout=10.0)  # its session expired and its slot is back
        finally:
            call.cancel()
            ch.close()


def test_session_caps_refuse_politely(models, pki) -> None:
    # A short queue: carol's Open waits 0.3 s for a slot, then is refused. The held sessions'
    # round-idle deadline is far off: at the default 5 s, a loaded machine could reach carol's
    # Open late enough for it to end one of them and give carol its slot.
    limits = {"max_sessions": 2, "max_sessions_per_device": 1, "queue_timeout": 0.3, "round_idle_timeout": 60.0}
    with serve(CloudVerifier(models[1], models[0], seed=0), pki, **limits) as (server, port):
        alice = [grpc.secure_channel(f"127.0.0.1:{port}", identity(pki, "alice").credentials()) for _ in range(2)]
        bob = grpc.secure_channel(f"127.0.0.1:{port}", identity(pki, "bob").credentials())
        gate = threading.Event()

        def hold() -> Iterator[bytes]:
            yield OPEN
            gate.wait(10)

        held = alice[0].stream_stream(wire.SESSION_METHOD)(hold(), timeout=20)
        deadline = time.monotonic() + 10
        while server.service.open_sessions < 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        # A second session of the same device is over its per-device cap ...
        _, code, details = raw_stream(alice[1], [OPEN])
        assert code is C.RESOURCE_EXHAUSTED and "already has 1 open sessions" in details
        # ... another device fills the global cap, after which everyone waits.
        bob_held = bob.stream_stream(wire.SESSION_METHOD)(hold(), timeout=20)
        while server.service.open_sessions < 2:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        carol = grpc.secure_channel(f"127.0.0.1:{port}", identity(pki, "mallory").credentials())
        _, code, details = raw_stream(carol, [OPEN])
        assert code is C.RESOURCE_EXHAUSTED and "at its cap of 2 sessions and none freed within 0.3 s" in details
        gate.set()
        for call in (held, bob_held):
            list(call)
        for ch in (*alice, bob, carol):
            ch.close()


def test_revoked_device_is_refused(live, pki) -> None:
    _, port = live
    ch = grpc.secure_channel(f"127.0.0.1:{port}", identity(pki, "mallory").credentials())
    _, code, details = raw_stream(ch, [OPEN])
    ch.close()
    assert code is C.PERMISSION_DENIED and "'mallory' is revoked" in details


def test_a_device_refused_stream_after_stream_writes_one_log_line_per_window(models, pki, caplog) -> None:
    # Refused at once, before any rate limit, a revoked device wrote a line per stream (~950/s).
    with serve(CloudVerifier(models[1], models[0], seed=0), pki, revoked_devices=("mallory",)) as (_, port):
        ch = grpc.secure_channel(f"127.0.0.1:{port}", identity(pki, "mallory").credentials())
        with caplog.at_level(logging.INFO, logger="server"):
            codes = [raw_stream(ch, [OPEN])[1] for _ in range(40)]
        ch.close()
    assert codes == [C.PERMISSION_DENIED] * 40
    lines = [r.getMessage() for r in caplog.records if "'mallory' is revoked" in r.getMessage()]
    assert len(lines) == 1, lines  # the rest are counted into its next line, ten seconds on


def test_the_client_certificate_is_parsed_once(live, pki, monkeypatch: pytest.MonkeyPatch) -> None:
    """The device's name and its fingerprint come from one parse of the certificate gRPC verified."""
    from cryptography import x509

    from specsteer.audit.identity import DeviceIdentity
    from specsteer.server.service import Device

    server, _ = live
    pem = pki.device_cert("alice").read_bytes()
    real = x509.load_pem_x509_certificate
    parses: list[bytes] = []

    def counting(data: bytes, *args: object) -> x509.Certificate:
        parses.append(data)
        return real(data, *args)

    class Context:
        def auth_context(self) -> dict[str, list[bytes]]:
            return {"x509_pem_cert": [pem]}

    monkeypatch.setattr(x509, "load_pem_x509_certificate", counting)
    device = server.service._device(Context())
    assert parses == [pem]
    monkeypatch.undo()
    assert device == Device("alice", DeviceIdentity.from_pem(pem).cert_sha256)


def test_a_vanishing_client_harms_nobody(channel, live, models, pki) -> None:
    server, port = live
    before = server.metrics.value("specsteer_sessions_total", {"outcome": "vanished"})
    gate = threading.Event()

    def frames() -> Iterator[bytes]:
        yield OPEN
        yield wire.encode_round(1, [], [5, 6])
        gate.wait(10)

    call = channel.stream_stream(wire.SESSION_METHOD)(frames(), timeout=20)
    next(call)  # round 1 answered; now vanish mid-session
    call.cancel()
    gate.set()
    assert settled(server), "the session was not released"
    assert server.metrics.value("specsteer_sessions_total", {"outcome": "vanished"}) == before + 1
    _good_session_still_matches_in_process(models, pki, port)


def _good_session_still_matches_in_process(models, pki, port: int) -> None:
    s_lm, g_lm = models
    params = SessionParams(gamma=0.05, draft_len=3)
    local = generate(
        Specialist(s_lm),
        "A well-behaved device",
        params,
        DecodeOptions(max_new_tokens=12),
        InProcessVerifier(CloudVerifier(g_lm, s_lm, seed=0).open, vocab_size=s_lm.vocab_size),
    )
    with remote(port, pki, vocab_size=s_lm.vocab_size) as verifier:
        net = generate(
            Specialist(s_lm),
            "A well-behaved device",
            params,
            DecodeOptions(max_new_tokens=12),
            verifier,
            fallback=False,
        )
    assert net.token_ids == local.token_ids and net.stats.rounds == local.stats.rounds


# -- property-based: whatever arrives, the server answers with a status and keeps serving -------

_valid_frames = st.sampled_from(
    [OPEN, wire.encode_round(1, [], [5, 6]), wire.encode_round(2, [], [5]), wire.encode_close(1), wire.encode_close(2)]
)


@st.composite
def _mutated(draw) -> bytes:
    frame = bytearray(draw(_valid_frames))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "cut", "append", "insert"]))
        i = draw(st.integers(0, max(len(frame) - 1, 0)))
        if op == "flip" and frame:
            frame[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del frame[i:]
        elif op == "append":
            frame += draw(st.binary(min_size=1, max_size=8))
        else:
            frame[i:i] = draw(st.binary(min_size=1, max_size=4))
    return bytes(frame)


_ids = st.lists(st.integers(0, 2**32 - 1), max_size=40)
_small = st.integers(0, 100)
_structured = st.one_of(
    st.builds(wire.encode_round, st.integers(0, 2**32 - 1), _ids, _ids),
    st.builds(wire.encode_close, st.integers(0, 2**32 - 1)),
    st.builds(
        lambda m, k, d, a, g, pol: params_frame(method=m, top_k=k, draft_len=d, alpha_milli=a, gamma_ppm=g, policy=pol),
        st.integers(0, 6),
        _small,
        st.integers(0, 40),
        st.integers(0, 20_000),
        st.integers(0, 2**32 - 1),
        st.integers(0, 3),
    ),
    st.builds(
        lambda ids, m, k, d: uplink(
            open=pb.Open(prompt_ids=ids, params=pb.SessionParams(method=m, top_k=k, draft_len=d))
        ),
        _ids,
        st.integers(0, 6),
        _small,
        st.integers(0, 40),
    ),
)
_frame = st.one_of(st.binary(max_size=48), _mutated(), _structured, _valid_frames)
ANSWERS = {C.OK, C.INVALID_ARGUMENT, C.FAILED_PRECONDITION, C.RESOURCE_EXHAUSTED}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(_frame, min_size=1, max_size=5))
def test_malformed_frames_never_hurt_the_server(channel, live, frames) -> None:
    _, code, details = raw_stream(channel, frames)
    assert code in ANSWERS, (code, details)  # never UNKNOWN/INTERNAL: nothing escaped unhandled
    assert details or code is C.OK


def test_after_the_barrage_the_server_is_healthy_and_exact(channel, live, models, pki) -> None:
    server, port = live
    assert settled(server)
    check = health_pb2_grpc.HealthStub(channel).Check
    reply = check(health_pb2.HealthCheckRequest(service=wire.SERVICE_NAME), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    _good_session_still_matches_in_process(models, pki, port)


def test_a_good_session_runs_exactly_while_bad_streams_arrive(channel, live, models, pki) -> None:
    _, port = live
    stop = threading.Event()
    codes: list[C] = []

    def barrage() -> None:
        while not stop.is_set():
            codes.append(raw_stream(channel, [OPEN, wire.encode_round(1, [], [5, 9999])])[1])
            codes.append(raw_stream(channel, [b"\x0a\x03\xff\xff"])[1])

    thread = threading.Thread(target=barrage)
    thread.start()
    try:
        _good_session_still_matches_in_process(models, pki, port)
    finally:
        stop.set()
        thread.join()
    assert codes and set(codes) == {C.INVALID_ARGUMENT}

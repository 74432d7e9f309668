"""The device against a hostile verifier: a real gRPC server over mutual TLS on 127.0.0.1, holding
the pinned certificate, that answers with what an honest verifier never sends.

Each test drives the device's real remote transport (and, where it matters, its real audit log)
and asserts what the device did: what it refused, what it kept on record, what it proved from.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from specsteer.audit.cosignature import WitnessSigner
from specsteer.audit.log import AuditLog
from specsteer.audit.note import Checkpoint, SigningKey
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.verify import inspect
from specsteer.core import wire
from specsteer.core.errors import ProtocolError
from specsteer.core.models import CausalLM
from specsteer.core.session_types import SessionParams
from specsteer.core.wire import pb
from specsteer.sdk.decoding import DecodeOptions, Generation, Specialist, generate
from specsteer.server import pki as pki_mod
from specsteer.server.witness import Cosigned, Witness
from tests.tinymodels import tiny_llama, tiny_lm
from tests.verifier_harness import RecordingTap, make_pki, remote

PROMPT = "Hello there"
Behaviour = Callable[[Iterator[bytes], grpc.ServicerContext], Iterator[bytes]]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> pki_mod.Pki:
    return make_pki(tmp_path_factory.mktemp("hostile"), devices=("alice",))


@pytest.fixture(scope="module")
def specialist(char_tok) -> Specialist:
    return Specialist(tiny_lm(char_tok, seed=1, name="s"))


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        if details.method != wire.SESSION_METHOD:
            return None
        return grpc.stream_stream_rpc_method_handler(self.behaviour)


@contextmanager
def hostile(pki: pki_mod.Pki, behaviour: Behaviour, **server_kw: Any) -> Iterator[int]:
    """A verifier with the pinned certificate that runs `behaviour` for every session stream."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=(_Handler(behaviour),), **server_kw)
    credentials = grpc.ssl_server_credentials(
        [(pki.server_key.read_bytes(), pki.server_cert.read_bytes())],
        root_certificates=pki.device_ca.read_bytes(),
        require_client_auth=True,
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    try:
        yield port
    finally:
        server.stop(0)


def answer(seq: int, *cands: tuple[tuple[int, ...], float], accepted: int = 0) -> bytes:
    msg = pb.Downlink(seq=seq, accepted=accepted)
    for ids, value in cands:
        msg.candidates.add(token_ids=list(ids), value=value)
    return msg.SerializeToString(deterministic=True)


def rounds_then(on_close: Callable[[wire.CloseFrame], Iterator[bytes]]) -> Behaviour:
    """Answer every round with accepted 0 and one candidate; at the Close, run `on_close`."""

    def behaviour(requests: Iterator[bytes], ctx: grpc.ServicerContext) -> Iterator[bytes]:
        for raw in requests:
            frame = wire.decode_uplink(raw)
            if isinstance(frame, wire.RoundFrame):
                yield answer(frame.seq, ((5,), 0.0))
            elif isinstance(frame, wire.CloseFrame):
                yield from on_close(frame)
                return

    return behaviour


def run(specialist: Specialist, port: int, pki: pki_mod.Pki, *, max_new: int = 3, **kw: Any) -> Generation:
    kw.setdefault("connect_timeout", 5.0)
    kw.setdefault("round_timeout", 10.0)
    with remote(port, pki, vocab_size=specialist.lm.vocab_size, **kw) as verifier:
        return generate(specialist, PROMPT, SessionParams(), DecodeOptions(max_new_tokens=max_new), verifier)


# -- 1. a bad cosignature must not break witnessing ---------------------------------------------------


@pytest.mark.parametrize("bad", ["random-signature", "another-root"])
def test_a_bad_cosignature_is_kept_on_record_but_never_proved_from(
    tmp_path: Path, pki: pki_mod.Pki, specialist: Specialist, bad: str
) -> None:
    """One bad answer to a Close (random bytes under the witness's key ID, or the witness's genuine
    signature over another root) used to become the log's last cosigned size: every later Close
    proved from it and the honest witness refused them all. Now it is on record, the device proves
    from the last valid cosignature, and `audit verify` names the verifier's answer, not the log."""
    signer = WitnessSigner.generate("verifier.test/witness")
    honest = Witness(signer, tmp_path / "witness-state.json")
    log_key = SigningKey.generate("device.test/log")
    plan = ["honest", bad, "honest", "honest"]
    answers: list[str] = []

    def on_close(frame: wire.CloseFrame) -> Iterator[bytes]:
        request = frame.witness
        assert request is not None
        mode = plan[len(answers)]
        if mode == "honest":
            result = honest.cosign("alice", request)
            answers.append(type(result).__name__)
            if isinstance(result, Cosigned):
                yield wire.encode_cosignature(frame.seq, result.witness, result.signature)
            return
        answers.append(mode)
        if mode == "random-signature":
            signature = signer.key.id + os.urandom(72)
        else:
            signature = signer.cosign(Checkpoint(request.origin, request.size, os.urandom(32)), int(time.time()))
        yield wire.encode_cosignature(frame.seq, signer.name, signature)

    sizes = []
    with (
        hostile(pki, rounds_then(on_close)) as port,
        AuditLog.open(tmp_path / "log", log_key, witness_key=signer.key) as log,
    ):
        tap = EgressRecorder(log)
        for _ in plan:
            out = run(specialist, port, pki, tap=tap)
            assert out.stats.fallback is None
            sizes.append(log.cosigned[0] if log.cosigned else None)
    # The honest witness cosigned every Close after the bad answer: each proved from a size it cosigned.
    assert answers == ["Cosigned", bad, "Cosigned", "Cosigned"]
    assert sizes[1] == sizes[0] and sizes[0] is not None and sizes[3] > sizes[2] > sizes[1]
    report = inspect(tmp_path / "log", key=log_key.verifier, witness_keys=[signer.key])
    failures = [f for c in report.checks for f in c.failures]
    assert failures == []  # nothing of the device's is blamed: the spoilt answer is named as the cloud's
    (named,) = report.cloud
    assert named.startswith("record ") and "the verifier answered the Close with an invalid cosignature" in named


def test_without_a_witness_key_no_cosignature_is_proved_from(
    tmp_path: Path, pki: pki_mod.Pki, specialist: Specialist
) -> None:
    """The device cannot check a cosignature without the witness's key: it keeps the answer on
    record (the log holds what crossed the wire) but never proves from it."""
    signer = WitnessSigner.generate("verifier.test/witness")

    def on_close(frame: wire.CloseFrame) -> Iterator[bytes]:
        request = frame.witness
        assert request is not None and request.old_size == 0
        # A genuine witness signature, over a checkpoint the device never had.
        signature = signer.cosign(Checkpoint(request.origin, request.size + 1000, request.root_hash), 1)
        yield wire.encode_cosignature(frame.seq, signer.name, signature)

    log_key = SigningKey.generate("device.test/log")
    with hostile(pki, rounds_then(on_close)) as port, AuditLog.open(tmp_path / "log", log_key) as log:
        tap = EgressRecorder(log)
        for _ in range(2):
            assert run(specialist, port, pki, tap=tap).stats.fallback is None
            assert log.cosigned is None
    # Reopened (now with the key), the log still proves from nothing: the answer never verified.
    with AuditLog.open(tmp_path / "log", log_key, witness_key=signer.key) as log:
        assert log.cosigned is None
    report = inspect(tmp_path / "log", key=log_key.verifier)
    assert report.ok, [f for c in report.checks for f in c.failures]
    downlinks = [r for r in _records(tmp_path / "log") if r.kind == "downlink" and r.payload is not None]
    assert sum(wire.decode_cosignature(r.payload) is not None for r in downlinks) == 2  # both on record


def _records(log: Path) -> list[Any]:
    from specsteer.audit import records
    from specsteer.audit.log import scan_log

    return [records.parse(s.data) for s in scan_log(log).records]


# -- 2. a downlink nobody asked for is never buffered ------------------------------------------------


class _CountingTap(RecordingTap):
    """A tap that lets a test wait until the device's reader has taken `n` downlinks."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = threading.Condition()

    def on_downlink(self, session_id: str, payload: bytes) -> None:
        with self.seen:
            super().on_downlink(session_id, payload)
            self.seen.notify_all()

    def wait_for(self, n: int) -> None:
        with self.seen:
            self.seen.wait_for(lambda: len(self.downlinks) >= n, timeout=30)


def test_a_flood_after_the_close_is_cut_off_at_its_first_frame(pki: pki_mod.Pki, specialist: Specialist) -> None:
    """A verifier that floods ~16 KiB downlinks after the Close used to fill an unbounded queue (and
    held every generate() for seconds): the first frame that answers nothing cancels the call."""
    flood = answer(999, ((5,), 0.0)) + b"\x08\x01" * 8000  # a repeated seq field pads it to ~16 KiB
    ended = threading.Event()
    sent = [0]

    def on_close(frame: wire.CloseFrame) -> Iterator[bytes]:
        try:
            while sent[0] < 20_000:  # bounded, so a device that never cancels still ends the test
                sent[0] += 1
                yield flood
        finally:
            ended.set()

    tap = _CountingTap()
    with hostile(pki, rounds_then(on_close)) as port:
        out = run(specialist, port, pki, tap=tap, max_new=4)
        assert ended.wait(30)  # the server's stream ended: the device cancelled it
    assert out.stats.fallback is None
    rounds = [u for u in tap.uplinks if isinstance(wire.decode_uplink(u), wire.RoundFrame)]
    # One answer per round, then exactly one unsolicited frame read (and on record) before the cancel.
    assert len(tap.downlinks) == len(rounds) + 1
    assert tap.downlinks[-1] == flood
    assert sent[0] < 20_000


def test_an_answer_to_a_round_not_yet_asked_is_a_breach(pki: pki_mod.Pki, specialist: Specialist) -> None:
    """A second downlink after round 1's answer (a pre-answer of round 2) is refused when it
    arrives: round 2 is never sent, and the call is cancelled."""

    def behaviour(requests: Iterator[bytes], ctx: grpc.ServicerContext) -> Iterator[bytes]:
        for raw in requests:
            frame = wire.decode_uplink(raw)
            if isinstance(frame, wire.RoundFrame):
                yield answer(frame.seq, ((5,), 0.0))
                if frame.seq == 1:
                    yield answer(2, ((5,), 0.0))
            elif isinstance(frame, wire.CloseFrame):
                return

    tap = _CountingTap()
    with (
        hostile(pki, behaviour) as port,
        remote(port, pki, vocab_size=specialist.lm.vocab_size, tap=tap, round_timeout=10.0) as verifier,
        pytest.raises(ProtocolError, match="answers nothing"),
    ):
        # Round 2 goes up only once the device's reader has taken both frames of round 1.
        generate(
            specialist,
            PROMPT,
            SessionParams(),
            DecodeOptions(max_new_tokens=8),
            verifier,
            on_commit=lambda _ids: tap.wait_for(2),
        )
    kinds = [type(wire.decode_uplink(u)).__name__ for u in tap.uplinks]
    assert kinds == ["OpenFrame", "RoundFrame"], kinds  # round 2 never went up
    assert len(tap.downlinks) == 2  # both on record
    assert tap.fallbacks and tap.fallbacks[-1][1] == "protocol-error"  # the session's end says why


# -- 3. candidates past the tokenizer's vocabulary (padded embedding rows) -------------------------


def test_a_candidate_in_a_padded_embedding_row_is_refused(char_tok, pki: pki_mod.Pki) -> None:
    """A Specialist whose table is padded past its tokenizer (as Qwen2.5's 151,936 rows for 151,665
    tokens): the transport bounds IDs by the table, so a hostile verifier could steer the device
    to rows that are no tokens. The device refuses them."""
    model = tiny_llama(char_tok, seed=1)
    model.resize_token_embeddings(len(char_tok) + 28)
    padded = Specialist(CausalLM.from_parts("padded", model, char_tok))
    assert padded.lm.vocab_size == len(char_tok) + 28
    row = len(char_tok) + 5

    def behaviour(requests: Iterator[bytes], ctx: grpc.ServicerContext) -> Iterator[bytes]:
        for raw in requests:
            frame = wire.decode_uplink(raw)
            if isinstance(frame, wire.RoundFrame):
                yield answer(frame.seq, ((row,), 0.0))
            elif isinstance(frame, wire.CloseFrame):
                return

    committed: list[int] = []
    with (
        hostile(pki, behaviour) as port,
        remote(port, pki, vocab_size=padded.lm.vocab_size, round_timeout=10.0) as verifier,
        pytest.raises(ProtocolError, match="padded row"),
    ):
        generate(padded, PROMPT, SessionParams(), DecodeOptions(max_new_tokens=6), verifier, on_commit=committed.extend)
    assert all(t < len(char_tok) for t in committed)


# -- 4. the verifier's status details are its words: printable and short ----------------------------


def _abort_after_round_one(code: grpc.StatusCode, details: str) -> Behaviour:
    def behaviour(requests: Iterator[bytes], ctx: grpc.ServicerContext) -> Iterator[bytes]:
        for raw in requests:
            frame = wire.decode_uplink(raw)
            if isinstance(frame, wire.RoundFrame):
                if frame.seq > 1:
                    ctx.abort(code, details)
                yield answer(frame.seq, ((5,), 0.0))
            elif isinstance(frame, wire.CloseFrame):
                return

    return behaviour


ESCAPES = "\x1b[2J\x1b[31mPWNED\x1b[0m\r\nfake: verifier-refused\x00\x07" + "A" * 7000


def test_status_details_reach_errors_printable_and_short(pki: pki_mod.Pki, specialist: Specialist) -> None:
    """Terminal escapes, control characters and kilobytes of text in a status's details used to flow
    verbatim into `fallback_detail` (and the CLI's stderr) and into raised errors."""
    with hostile(pki, _abort_after_round_one(grpc.StatusCode.INTERNAL, ESCAPES)) as port:
        out = run(specialist, port, pki, max_new=8)
    detail = out.fallback_detail
    assert out.stats.fallback == "verifier-error" and detail is not None
    assert "PWNED" in detail and detail.isprintable() and len(detail) < 400, detail
    with (
        hostile(pki, _abort_after_round_one(grpc.StatusCode.INVALID_ARGUMENT, ESCAPES)) as port,
        pytest.raises(ProtocolError) as raised,
    ):
        run(specialist, port, pki, max_new=8)
    message = str(raised.value)
    assert "PWNED" in message and message.isprintable() and len(message) < 400, message


# -- 5. a compressed downlink is refused, never inflated ----------------------------------------------


def test_a_gzip_compressed_downlink_is_refused(pki: pki_mod.Pki, specialist: Specialist) -> None:
    """gRPC used to inflate gzip downlinks before the tap saw them, so the audit log recorded bytes
    that never crossed the wire as such; the channel now enables identity only."""

    def behaviour(requests: Iterator[bytes], ctx: grpc.ServicerContext) -> Iterator[bytes]:
        ctx.set_compression(grpc.Compression.Gzip)
        for raw in requests:
            frame = wire.decode_uplink(raw)
            if isinstance(frame, wire.RoundFrame):
                yield answer(frame.seq, ((5,), 0.0))
            elif isinstance(frame, wire.CloseFrame):
                return

    with hostile(pki, behaviour) as port:
        out = run(specialist, port, pki, max_new=8)
    # gRPC refuses the first compressed message: the session ends there, the device finishes locally.
    assert out.stats.fallback is not None and "compression" in (out.fallback_detail or "").lower()


# -- 7. a verifier that sends past the device's limits is at fault, not at capacity -------------------


@pytest.mark.parametrize("where", ["initial", "trailing"])
def test_metadata_past_the_devices_limit_is_the_verifiers_error_not_its_capacity(
    pki: pki_mod.Pki, specialist: Specialist, where: str
) -> None:
    def behaviour(requests: Iterator[bytes], ctx: grpc.ServicerContext) -> Iterator[bytes]:
        big = (("x-big", "B" * 200_000),)
        if where == "initial":
            ctx.send_initial_metadata(big)
        for raw in requests:
            frame = wire.decode_uplink(raw)
            if not isinstance(frame, wire.RoundFrame):
                continue
            if frame.seq > 1:
                ctx.set_trailing_metadata(big)  # the stream ends mid-session with the oversized trailers
                return
            yield answer(frame.seq, ((5,), 0.0))

    with hostile(pki, behaviour) as port:
        out = run(specialist, port, pki, max_new=8)
    assert out.stats.fallback == "verifier-error", out.fallback_detail
    assert "sent more than this device accepts" in (out.fallback_detail or "")


# -- 1b. every way a cloud can spoil the witnessing: seen on the device, named by the audit ------------

SPOILS = ["twice", "withheld", "replayed", "forged", "enlarged", "other-key", "time-0", "time-2^40"]


@pytest.mark.slow  # eight real gRPC sessions pairs, ~3 s each on a shared CPU
@pytest.mark.parametrize("spoil", SPOILS)
def test_a_cloud_that_spoils_the_witnessing_is_caught_and_never_fails_the_honest_log(
    tmp_path: Path, pki: pki_mod.Pki, specialist: Specialist, spoil: str
) -> None:
    """Issue 48, finding 2: a cloud in front of an honest witness answers the second Close badly.
    The device reports it once (stats, and `require_witness` turns it into an error); `audit verify`
    names it as the cloud's and the honest log never FAILS: UNPROVEN, since nothing cosigned its end."""
    from specsteer.sdk.audited import AuditedTap, WitnessRequired
    from specsteer.sdk.client import SpecSteerClient

    signer = WitnessSigner.generate("verifier.test/witness")
    honest = Witness(signer, tmp_path / "witness-state.json")
    first: list[bytes] = []

    def on_close(frame: wire.CloseFrame) -> Iterator[bytes]:
        request = frame.witness
        assert request is not None
        result = honest.cosign("alice", request)
        assert isinstance(result, Cosigned)
        genuine = wire.encode_cosignature(frame.seq, result.witness, result.signature)
        if not first:
            first.append(result.signature)
            yield genuine
            return
        cp = Checkpoint(request.origin, request.size, request.root_hash)
        spoilt = {
            "replayed": first[0],
            "forged": signer.key.id + os.urandom(72),
            "enlarged": result.signature + b"\x00" * 8,
            "other-key": WitnessSigner.generate(signer.name).cosign(cp, int(time.time())),
            "time-0": signer.cosign(cp, 0),
            "time-2^40": signer.cosign(cp, 2**40),
        }
        if spoil == "twice":
            yield genuine
            yield genuine
        elif spoil != "withheld":
            yield pb.Downlink(
                seq=frame.seq, cosignature=pb.Cosignature(witness=signer.name, signature=spoilt[spoil])
            ).SerializeToString(deterministic=True)

    log_key = SigningKey.generate("device.test/log")
    with (
        hostile(pki, rounds_then(on_close)) as port,
        AuditLog.open(tmp_path / "log", log_key, witness_key=signer.key) as log,
    ):
        tap = AuditedTap(EgressRecorder(log), None)
        with remote(port, pki, vocab_size=specialist.lm.vocab_size, tap=tap, round_timeout=10.0) as verifier:
            client = SpecSteerClient(specialist, verifier, fallback=False)
            client._audited, client.require_witness = tap, True  # as SpecSteerClient.connect sets them
            first_out = client.generate(PROMPT, max_new_tokens=3)
            assert first_out.stats.extra["witness_faults"] == 0.0
            with pytest.raises(WitnessRequired, match="the cloud misbehaved as the log's witness") as caught:
                client.generate(PROMPT, max_new_tokens=3)
            generation = caught.value.generation
            assert isinstance(generation, Generation) and generation.stats.extra["witness_faults"] == 1.0
            assert tap.witness_report().faults == ()  # reported once
    report = inspect(tmp_path / "log", key=log_key.verifier, witness_keys=[signer.key])
    assert report.ok, [f for c in report.checks for f in c.failures]  # never FAILED: nothing blamed on the log
    assert report.verdict == "UNPROVEN" and report.unwitnessed is not None
    assert report.cloud and all(m.startswith("record ") for m in report.cloud), report.cloud
    assert inspect(tmp_path / "log", key=log_key.verifier).ok  # and with the device's key alone

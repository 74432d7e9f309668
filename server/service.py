"""The Verifier servicer: one bidirectional stream per generation session, parsed strictly here.

The stream's frames arrive as raw bytes (the request deserializer is the identity), so the
server hashes exactly what arrived into the transcript, then parses with `core.wire.decode_uplink`
(no unknown fields, canonical encoding, token IDs in the vocabulary), then checks each frame
against the one session contract (`core.contract.RoundContract`, held by the `CloudSession`) that
the device's recorder and `audit verify` follow too. Every refusal ends only that stream, with a
specific status:

    INVALID_ARGUMENT     a frame that does not parse, carries unknown fields or is not canonical;
                         token IDs outside the vocabulary; a draft longer than K; a prompt too
                         long; parameters out of range (including k above the verifier's cap)
    FAILED_PRECONDITION  messages out of order: a Round or Close before Open (no session is open
                         on the stream: unknown session), a second Open, a gap in Round seq, a
                         Round after the session ended, a commit that is not a candidate
    DEADLINE_EXCEEDED    the session expired: no uplink within the idle timeout (or the round-idle
                         timeout, while a device with fewer sessions waits), a downlink the device
                         did not read within the same, or no Open within the (much shorter) open
                         timeout of a new stream
    RESOURCE_EXHAUSTED   the verifier is at its session cap (after the queue wait), the session was
                         evicted between rounds for a waiting device after holding its slot
                         `slot_min_hold` seconds, this device is
                         at its stream cap or starts streams faster than its rate; a session
                         within the protocol's bounds longer than this verifier's KV slots; an
                         oversize frame (gRPC refuses it before it reaches this code)
    UNAVAILABLE          an Open while the verifier drains (SIGTERM, SIGUSR1, `server drain`): the
                         device finishes locally or opens elsewhere; open sessions go on
    UNAUTHENTICATED      the client certificate has no valid X.509 path to the device CA
                         (`server.device_identity`: path length, key usage, EKU clientAuth,
                         validity), or does not name exactly one valid device
    PERMISSION_DENIED    the device's certificate is revoked
    OUT_OF_RANGE         a round that would take the session past what one may hold (the protocol's
                         longest generation, `core.limits.MAX_NEW_TOKENS`) or past a model's context

With a witness key (`[audit] witness_key`), a Close that carries the device's audit-log checkpoint
is answered by one more downlink, the witness's cosignature, if `server.witness` accepts it.

One device cannot lock the others out (`server.admission` has the rule): a device may start
`stream_burst` streams at once, then `stream_rate` per second (the rest are refused before any
frame is read, so a looping device cannot grow the transcript without bound); its streams are
counted from the moment they start (at most `max_sessions_per_device`, open or half-open); a
stream that has not sent Open within `open_timeout` seconds is ended. Session slots are shared
fairly: the last `reserved_sessions` slots go only to devices holding no session, an Open that
finds no slot waits up to `queue_timeout` seconds (freed slots go to the waiting device holding
the fewest), and while a device holding fewer sessions waits, a session silent for
`round_idle_timeout` seconds after its last verdict is ended, and so is the session that has held
its slot longest, once between rounds, if it has held it `slot_min_hold` seconds (however often
it sends rounds: a trickle of cheap rounds cannot keep every slot). gRPC's own concurrent-call limit
is only a backstop far above these caps, so a flood is refused here, per device, at once.

A client that vanishes only ends its own session; model work already started finishes, its result
is dropped, and the session's caches go with it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import secrets
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
from cryptography import x509
from cryptography.x509.oid import NameOID

from specsteer.audit.errors import AuditError
from specsteer.audit.identity import cert_sha256
from specsteer.core import wire
from specsteer.core.contract import NO_SESSION, SECOND_OPEN, Breach, ContractError, Phase, RoundContract, raise_first
from specsteer.core.errors import ProtocolError
from specsteer.core.session_types import Verdict
from specsteer.server.admission import SessionSlots, StreamRate
from specsteer.server.batching import Scheduler
from specsteer.server.config import ServerConfig
from specsteer.server.device_identity import DeviceCertificates, NotADevice
from specsteer.server.errors import (
    Draining,
    NoSessionSlot,
    RevocationUnreadable,
    SessionOverCapacity,
    SessionTooLong,
    SlotPoolTooLarge,
)
from specsteer.server.metrics import Metrics
from specsteer.server.pki import DEVICE_NAME
from specsteer.server.revocation import RevocationList
from specsteer.server.session import CloudSession, CloudVerifier
from specsteer.server.witness import Cosigned, Witness, load_witness

__all__ = ["Device", "TranscriptSink", "VerifierService"]

log = logging.getLogger("server")

_THROTTLE_LOG_EVERY = 10.0  # seconds between the aggregated log lines of throttled streams
_DRAINING = "the verifier is draining (shutting down): no new session here; open one elsewhere or later"


class TranscriptSink(Protocol):
    """Who sent each stream and every uplink exactly as it arrived (e.g. `audit.transcript.ServerTranscript`)."""

    def begin_stream(self, stream: str, device: str, cert_sha256: str) -> None: ...

    def record_uplink(self, stream: str, payload: bytes) -> None: ...

    def end_stream(self, stream: str, outcome: str) -> None: ...


@dataclass(frozen=True)
class Device:
    """Who is on the other end of a stream, from its verified client certificate."""

    name: str
    fingerprint: str  # sha256 of the certificate's DER, hex (`audit.identity`); what the device's log binds


class _Abort(Exception):
    def __init__(self, code: grpc.StatusCode, message: str, outcome: str = "refused") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.outcome = outcome


class VerifierService:
    """Serves `CloudVerifier` sessions over gRPC; `handler()` is what the server registers.

    `device_cas` returns the device CAs a client certificate's path must end at (the server's
    client CA file, as loaded now); without it no certificate is a device's.
    """

    def __init__(
        self,
        cloud: CloudVerifier,
        config: ServerConfig,
        metrics: Metrics,
        scheduler: Scheduler,
        transcript: TranscriptSink | None = None,
        *,
        device_cas: Callable[[], Sequence[x509.Certificate]] = tuple,
        witness: Witness | None = None,
    ) -> None:
        self.cloud = cloud
        self.config = config
        self.metrics = metrics
        self.scheduler = scheduler
        self.transcript = transcript
        self.vocab_size = cloud.specialist.vocab_size
        self._slots = SessionSlots(config.max_sessions, reserved=config.reserve, max_queued=config.queue_length)
        self._rate = StreamRate(config.stream_rate, config.burst)
        self._throttle_logged = 0.0
        self._refusals = _RefusalLog(_THROTTLE_LOG_EVERY)
        self._streams: Counter[str] = Counter()  # live streams per device, from their first byte
        self._held_since: dict[_Stream, float] = {}  # when each session took its slot (loop time)
        self._idle: set[_Stream] = set()  # sessions waiting on their device between rounds
        self.draining = False  # set by `drain`: Opens are refused, open sessions go on
        self._revoked = frozenset(config.revoked_devices)
        # Per certificate, re-read at each new stream when the file changed (server/revocation.py).
        self._revoked_certs = (
            None if config.revoked_certificates is None else RevocationList(config.revoked_certificates)
        )
        self._devices = DeviceCertificates(device_cas)
        # The witness of the devices' audit logs: cosigns the checkpoint a Close carries.
        if witness is None and config.witness_key is not None:
            witness = load_witness(config.witness_key, config.witness_state)
        self.witness = witness

    def handler(self) -> grpc.GenericRpcHandler:
        # bytes in, bytes out
        method: grpc.RpcMethodHandler[bytes, bytes] = grpc.stream_stream_rpc_method_handler(self.session)
        return grpc.method_handlers_generic_handler(wire.SERVICE_NAME, {"Session": method})

    @property
    def open_sessions(self) -> int:
        return self._slots.open

    @property
    def waiting_opens(self) -> int:
        """Opens waiting in the queue for a session slot."""
        return self._slots.waiting

    def drain(self) -> None:
        """Refuse every Open from now on (UNAVAILABLE, "draining"), queued ones too; open sessions go
        on to their end. Call on the server's event loop."""
        self.draining = True
        self._slots.refuse_waiting(Draining(_DRAINING))

    # -- identity ----------------------------------------------------------------------------------

    def _device(self, context: grpc.aio.ServicerContext) -> Device:
        auth = context.auth_context()
        certs = list(auth.get("x509_pem_cert") or [])
        if len(certs) != 1:
            raise _Abort(grpc.StatusCode.UNAUTHENTICATED, "no client certificate names a device")
        try:
            cert = x509.load_pem_x509_certificate(certs[0])  # parsed once: the path, the name, the fingerprint
            # The rest of what the peer presented: candidate intermediates, never anchors.
            presented = [
                c for pem in auth.get("x509_pem_cert_chain") or [] for c in x509.load_pem_x509_certificates(pem)
            ]
        except ValueError:
            raise _Abort(grpc.StatusCode.UNAUTHENTICATED, "the client certificate cannot be read") from None
        try:
            self._devices.verify(cert, presented)
        except NotADevice as exc:
            raise _Abort(grpc.StatusCode.UNAUTHENTICATED, str(exc)) from None
        name = device_name(cert)
        if name in self._revoked:
            raise _Abort(grpc.StatusCode.PERMISSION_DENIED, f"the certificate of device {name!r} is revoked")
        if self._revoked_certs is not None:
            try:
                why = self._revoked_certs.revoked(cert)
            except RevocationUnreadable as exc:
                # Fail closed: without the list, a revoked certificate cannot be told from a good one.
                raise _Abort(grpc.StatusCode.UNAVAILABLE, f"the verifier refuses new sessions: {exc}") from None
            if why is not None:
                raise _Abort(grpc.StatusCode.PERMISSION_DENIED, f"{why} (device {name!r})")
        return Device(name, cert_sha256(cert))

    async def refuse_unless_device(self, context: grpc.aio.ServicerContext) -> str:
        """The device's name; the call is aborted unless its peer is a device this verifier would
        serve (for the calls beside the session, e.g. the health check: a revoked device learns
        nothing from them)."""
        try:
            return self._device(context).name
        except _Abort as abort:
            self.metrics.rejected_messages.labels(abort.code.name).inc()
            await context.abort(abort.code, abort.message)
            raise  # not reached: abort raises

    def _admit(self, state: _Stream) -> None:
        """Count the stream against its device from its first moment, or refuse it at once."""
        assert state.device is not None
        name = state.device.name
        if self._streams[name] >= self.config.max_sessions_per_device:
            raise _Abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"device {name!r} already has {self.config.max_sessions_per_device} open sessions or half-open streams",
            )
        # Metered after the cap: the bucket counts the streams that are served and reach the transcript.
        if not self._rate.allow(name):
            self._log_throttled()
            raise _Abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"device {name!r} starts streams faster than {self.config.stream_rate:g} per second "
                f"(after a burst of {self.config.burst}); slow down",
                outcome="throttled",
            )
        self._streams[name] += 1
        state.admitted = True

    # -- the stream --------------------------------------------------------------------------------

    async def session(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:
        stream = secrets.token_hex(8)
        state = _Stream(stream)
        self.metrics.streams.inc()
        outcome = "vanished"
        try:
            state.device = self._device(context)
            self._admit(state)
            if self.transcript is not None:  # the transcript says which certificate sent each stream
                # Its fsync (a few ms) runs off the event loop that serves every other session.
                await asyncio.to_thread(
                    self.transcript.begin_stream, stream, state.device.name, state.device.fingerprint
                )
            outcome = await self._serve(state, context)
        except _Abort as abort:
            outcome = abort.outcome
            self.metrics.rejected_messages.labels(abort.code.name).inc()
            who = state.device.name if state.device else "?"
            if outcome != "throttled":  # a looping device must not flood the log either: `_log_throttled`
                self._refusals.refused(who, stream, abort.code.name, abort.message)
            # The session and its slot go back now: the status is sent only after any downlink the
            # device never read, so `abort` may wait as long as the call lives. The stream keeps
            # counting against its device until then, so a device cannot pile such streams up.
            self._settle(state, outcome)
            await context.abort(abort.code, abort.message)
        except asyncio.CancelledError:
            outcome = "vanished"  # the client went away (or the server is stopping)
            raise
        finally:
            try:
                if self.transcript is not None and state.device is not None:
                    # The witness statement: all it received.
                    await asyncio.to_thread(self.transcript.end_stream, stream, outcome)
            finally:  # even if a cancellation ends that wait (the line is still written: its thread runs on)
                self._settle(state, outcome)
                self._release(state)

    def _log_throttled(self) -> None:
        """One line per device every few seconds for throttled streams, however many there were."""
        now = time.monotonic()
        if now - self._throttle_logged < _THROTTLE_LOG_EVERY:
            return
        self._throttle_logged = now
        for name, count in self._rate.drain_refused().items():
            log.info("device %s throttled: %d stream(s) refused over the stream rate", name, count)

    async def _read(self, state: _Stream, context: grpc.aio.ServicerContext) -> bytes | None:
        # A stream without a session yet gets only the short Open deadline: held half-open
        # streams would otherwise tie up capacity for the whole idle timeout.
        opening = state.session is None and not state.ended
        timeout = self.config.open_timeout if opening else self.config.idle_timeout
        read = asyncio.ensure_future(context.read())
        try:
            if state.counted:
                expired = await self._session_silence(read, state, timeout, "no uplink")
            else:
                done, _ = await asyncio.wait({read}, timeout=timeout)
                expired = None if done else f"no {'Open' if opening else 'uplink'} for {timeout:g} s"
            if expired is not None:
                raise _Abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"session expired: {expired}", outcome="expired")
            raw = read.result()
        finally:
            if not read.done():
                read.cancel()
        if raw is grpc.aio.EOF:
            return None
        assert isinstance(raw, bytes)
        return raw

    async def _session_silence(
        self, pending: asyncio.Future[Any], state: _Stream, timeout: float, silence: str
    ) -> str | None:
        """Wait for an open session's device (its next uplink, or to take the last downlink):
        None when `pending` is done, else why the session expired (`silence`: what did not come).

        The read's clock starts once the last verdict is written, so the models' time never
        counts. After `round_idle_timeout` seconds of silence the session keeps its slot only while
        no device holding fewer sessions than this one's waits for a slot (`SessionSlots.starves`).
        """
        assert state.device is not None
        name = state.device.name
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + timeout
        short = min(self.config.round_idle_timeout, timeout)
        held_since = self._held_since.get(state)
        self._idle.add(state)
        try:
            while True:
                now = loop.time()
                evicted = self._eviction(state, now)
                if evicted is not None:
                    raise _Abort(grpc.StatusCode.RESOURCE_EXHAUSTED, evicted, outcome="evicted")
                if now >= deadline:
                    return f"{silence} for {timeout:g} s"
                starves = self._slots.starves(name)
                if starves and now - start >= short:
                    return f"{silence} for {short:g} s while a device holding fewer sessions waits for a slot"
                # Wake at the next moment one of the rules above may change its answer, or when who
                # holds or waits changes.
                wake = [deadline]
                if starves:
                    wake.append(start + short)
                    if held_since is not None and now < held_since + self.config.slot_min_hold:
                        wake.append(held_since + self.config.slot_min_hold)
                changed = asyncio.ensure_future(self._slots.changed().wait())
                try:
                    done, _ = await asyncio.wait(
                        {pending, changed}, timeout=max(0.0, min(wake) - now), return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    changed.cancel()
                if pending in done:
                    return None
        finally:
            self._idle.discard(state)

    def _eviction(self, state: _Stream, now: float) -> str | None:
        """Why this idle session is to end for a waiting device, or None.

        While a device holding fewer sessions than this one's waits for a slot, the idle session
        that has held its slot longest, if it has held it `slot_min_hold` seconds, gives it up:
        a session that sends a cheap round every few seconds is never silent long enough for the
        round-idle deadline, so without this a trickle of rounds kept every slot for ever.
        """
        assert state.device is not None
        held_since = self._held_since.get(state)
        if held_since is None or now - held_since < self.config.slot_min_hold:
            return None
        if not self._slots.starves(state.device.name):
            return None
        for other in self._idle:
            # An older idle session goes first (it wakes on the same change, or sooner).
            since = self._held_since.get(other)
            if other is not state and since is not None and since < held_since:
                assert other.device is not None
                if self._slots.starves(other.device.name):
                    return None
        return f"evicted for a waiting device after holding a slot {now - held_since:.1f} s"

    async def _write(self, state: _Stream, context: grpc.aio.ServicerContext, message: bytes) -> None:
        """Send a downlink under the same deadlines as a read: a device that stops reading (its
        flow-control window full) must not park its session, and its slot, in the write."""
        write = asyncio.ensure_future(context.write(message))
        try:
            expired = await self._session_silence(write, state, self.config.idle_timeout, "downlink not read")
            if expired is not None:
                raise _Abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"session expired: {expired}", outcome="expired")
            write.result()
        finally:
            if not write.done():
                write.cancel()
            # Read its outcome, so a write that failed as the call ended is no "exception was
            # never retrieved" traceback in the log, which a device could otherwise cause at will.
            write.add_done_callback(lambda done: done.cancelled() or done.exception())

    async def _serve(self, state: _Stream, context: grpc.aio.ServicerContext) -> str:
        while True:
            raw = await self._read(state, context)
            if raw is None:  # the device half-closed: after its Close, or (vanishing) without one
                return "closed" if state.ended else "vanished" if state.counted else "empty"
            state.frames += 1
            if self.transcript is not None:
                # Hash what arrived, before parsing: malformed and late frames are evidence too.
                await asyncio.to_thread(self.transcript.record_uplink, state.stream, raw)
            if state.ended:
                raise self._precondition(RoundContract(phase=Phase.CLOSED).after_end("a frame").message)
            try:
                frame = wire.decode_uplink(raw, vocab_size=self.vocab_size)
            except ProtocolError as exc:
                raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"uplink {state.frames}: {exc}") from None
            if isinstance(frame, wire.OpenFrame):
                await self._open_session(state, frame)
            elif isinstance(frame, wire.RoundFrame):
                await self._write(state, context, await self._round(state, frame))
            else:
                self._close(state, frame)
                answer = await self._cosign(state, frame)
                if answer is not None:
                    await self._write(state, context, answer)

    def _precondition(self, message: str) -> _Abort:
        return _Abort(grpc.StatusCode.FAILED_PRECONDITION, message)

    async def _open_session(self, state: _Stream, frame: wire.OpenFrame) -> None:
        if state.session is not None or state.ended:
            raise self._precondition(SECOND_OPEN)
        assert state.device is not None
        if frame.params.top_k > self.config.max_top_k:
            raise _Abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Open refused: top-k {frame.params.top_k} is above this verifier's maximum {self.config.max_top_k}",
            )
        if self._slots.held[state.device.name] >= self.config.max_sessions_per_device:
            raise _Abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"device {state.device.name!r} already has {self.config.max_sessions_per_device} open sessions",
            )
        if self.draining:
            raise _Abort(grpc.StatusCode.UNAVAILABLE, _DRAINING)
        # The slot is taken before the prefill runs, so concurrent Opens cannot overshoot the cap.
        try:
            await self._slots.acquire(state.device.name, self.config.queue_timeout)
        except Draining:
            raise _Abort(grpc.StatusCode.UNAVAILABLE, _DRAINING) from None
        except NoSessionSlot as exc:
            raise _Abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)) from None
        state.counted = True
        self._held_since[state] = asyncio.get_running_loop().time()
        self.metrics.sessions_active.inc()
        start = time.perf_counter()
        try:
            # The session's forwards go through the scheduler's runner: merged with other sessions'
            # when batching is on.
            open_session = functools.partial(
                self.cloud.open, runner=self.scheduler.runner, resume_ids=list(frame.resume_ids)
            )
            state.session = await self.scheduler.run(open_session, list(frame.prompt_ids), frame.params)
        except (NoSessionSlot, SlotPoolTooLarge, SessionOverCapacity) as exc:  # this verifier's limits
            raise _Abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"Open refused: {exc}") from None
        except ProtocolError as exc:
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, f"Open refused: {exc}") from None
        except (ValueError, IndexError, RuntimeError) as exc:
            # The models could not take this prompt (e.g. longer than their context window).
            raise _Abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"Open refused: the prompt cannot be processed ({exc})"
            ) from None
        self.metrics.open_latency.observe(time.perf_counter() - start)
        log.debug("stream %s: device %s (certificate sha256 %s) opened a session", state.stream, *state.device_ids)

    def _refusal(self, exc: ContractError) -> _Abort:
        """The session contract's verdict on a frame, as the status the device gets."""
        if exc.violation.kind is Breach.ORDER:
            return self._precondition(exc.violation.message)
        return _Abort(grpc.StatusCode.INVALID_ARGUMENT, exc.violation.message)

    def _check_round(self, state: _Stream, frame: wire.RoundFrame) -> CloudSession:
        if state.session is None:
            raise self._precondition(f"{NO_SESSION}: send Open first")
        try:
            raise_first(state.session.contract.round_violations(frame))
        except ContractError as exc:
            raise self._refusal(exc) from None
        return state.session

    async def _round(self, state: _Stream, frame: wire.RoundFrame) -> bytes:
        session = self._check_round(state, frame)
        start = time.perf_counter()
        try:
            verdict: Verdict = await self.scheduler.run(session.round_frame, frame)
        except ContractError as exc:
            raise self._refusal(exc) from None
        except SessionOverCapacity as exc:  # the verifier's limit: the device may finish on its own
            raise _Abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"round {frame.seq} refused: {exc}", outcome="failed"
            ) from None
        except SessionTooLong as exc:
            raise _Abort(grpc.StatusCode.OUT_OF_RANGE, f"round {frame.seq} refused: {exc}", outcome="failed") from None
        except ProtocolError as exc:
            raise self._precondition(f"round {frame.seq} refused: {exc}") from None
        except (ValueError, IndexError, RuntimeError) as exc:
            # E.g. the session outgrew a model's context window: only this session ends.
            raise _Abort(
                grpc.StatusCode.OUT_OF_RANGE, f"round {frame.seq} cannot be verified: {exc}", outcome="failed"
            ) from None
        m = self.metrics
        m.round_latency.observe(time.perf_counter() - start)
        m.rounds.inc()
        m.drafted.inc(len(frame.draft))
        m.accepted.inc(verdict.accepted)
        if frame.draft:
            m.acceptance.observe(verdict.accepted / len(frame.draft))
        return wire.encode_downlink(frame.seq, verdict)

    def _close(self, state: _Stream, frame: wire.CloseFrame) -> None:
        if state.session is None:
            raise self._precondition(f"{NO_SESSION}: nothing to Close")
        try:
            raise_first(state.session.contract.close_violations(frame.seq))
        except ContractError as exc:
            raise self._refusal(exc) from None
        state.ended = True
        self._free(state)  # the device may still half-close late: the caches go now

    async def _cosign(self, state: _Stream, frame: wire.CloseFrame) -> bytes | None:
        """The witness's cosignature of the Close's checkpoint, as the downlink answering it (None: none).

        A refused checkpoint gets no answer (the witness keeps the refusal); the session is over
        either way, so the device's stream simply ends.
        """
        if frame.witness is None or self.witness is None:
            return None
        assert state.device is not None
        # The state file's fsync stays off the event loop that serves every other session.
        try:
            result = await asyncio.to_thread(self.witness.cosign, state.device.name, frame.witness)
        except AuditError as exc:  # its state could not be saved: no cosignature it might forget
            log.error("witness: %s", exc)
            return None
        if not isinstance(result, Cosigned):
            return None
        return wire.encode_cosignature(frame.seq, result.witness, result.signature)

    def _free(self, state: _Stream) -> None:
        """The session and its slot go back (a Close, or the end of the stream)."""
        if state.session is not None:
            state.session.close()
            state.session = None
        if state.counted:
            assert state.device is not None
            state.counted = False
            self._held_since.pop(state, None)
            self._idle.discard(state)
            self.metrics.sessions_active.dec()  # before the slot goes back: whoever sees it free sees this
            self._slots.release(state.device.name)

    def _settle(self, state: _Stream, outcome: str) -> None:
        """The session and its slot go back with its outcome counted in the metrics, once: whoever
        sees the slot free after a refusal (a waiting Open, a scrape, a test) also sees why."""
        if not state.settled and (state.counted or state.ended or outcome != "empty"):
            self.metrics.sessions.labels(outcome).inc()  # before the slot goes back, as above
        state.settled = True
        self._free(state)

    def _release(self, state: _Stream) -> None:
        """The stream stops counting against its device (only when the call itself ends)."""
        if state.admitted:
            assert state.device is not None
            state.admitted = False
            self._streams[state.device.name] -= 1
            if not self._streams[state.device.name]:
                del self._streams[state.device.name]


class _RefusalLog:
    """Refused streams in the log: each device's first in a window in full, the rest counted into
    its next line. A device refused at once (revoked, at its cap) could otherwise write a line
    per stream, hundreds a second, before any rate limit ran."""

    _MAX_DEVICES = 4096  # names remembered; older ones are forgotten first

    def __init__(self, every: float) -> None:
        self.every = every
        self._last: dict[str, float] = {}
        self._held: Counter[str] = Counter()

    def refused(self, device: str, stream: str, code: str, message: str) -> None:
        now = time.monotonic()
        if now - self._last.get(device, -math.inf) < self.every:
            self._held[device] += 1
            return
        held = self._held.pop(device, 0)
        self._last.pop(device, None)
        self._last[device] = now  # last in insertion order: the oldest are first to go
        if len(self._last) > self._MAX_DEVICES:
            oldest = next(iter(self._last))
            del self._last[oldest]
            self._held.pop(oldest, None)
        more = f" ({held} more of its streams refused since its last line)" if held else ""
        log.info("stream %s (device %s) refused: %s: %s%s", stream, device, code, message, more)


class _Stream:
    """What one stream has declared and done so far."""

    @property
    def device_ids(self) -> tuple[str, str]:
        return (self.device.name, self.device.fingerprint[:16]) if self.device else ("?", "?")

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.device: Device | None = None
        self.session: CloudSession | None = None
        self.frames = 0
        self.counted = False
        self.admitted = False  # counted in the device's live streams
        self.ended = False
        self.settled = False  # its outcome is counted


def device_name(cert: x509.Certificate) -> str:
    """The one device name a client certificate carries, or an UNAUTHENTICATED refusal.

    gRPC's `x509_common_name` reports only the first CN (and "" for none), so the certificate
    itself is read: exactly one CN, and it must follow the device-name rule of `server pki`.
    """
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(names) != 1:
        raise _Abort(
            grpc.StatusCode.UNAUTHENTICATED,
            f"the client certificate must name exactly one device (one CN); it has {len(names)}",
        )
    name = names[0].value
    if not isinstance(name, str) or not DEVICE_NAME.fullmatch(name):
        raise _Abort(grpc.StatusCode.UNAUTHENTICATED, f"the client certificate's CN {name!r} is not a device name")
    return name

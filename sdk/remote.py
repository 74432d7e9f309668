"""The network transport: a `Verifier` over one TLS-pinned, mutually authenticated gRPC channel.

    verifier = RemoteVerifier("127.0.0.1:50051", TlsIdentity.from_files(pins, cert, key), vocab_size=49152)
    session = verifier.open(prompt_ids, params)        # one bidirectional stream per session
    verdict = session.round(commit, draft)
    session.close()                                      # with an audit log: asks for a cosignature

Trust: gRPC gets exactly the pinned anchors as its roots (`sdk.pinning`), checks the host name
against the target (or `server_name`, which renames the host but never disables the check), and
presents the device's own certificate. On each fresh connection the verifier's chain is also
checked as an X.509 path under the pinned anchors (`sdk.serving_chain`: path length, serverAuth,
validity, name), which gRPC does not do, before any uplink. No session starts until the channel's TLS handshake has
succeeded, so a refused peer never receives an application byte and the egress tap records none.

Errors, all `SpecSteerError`s:

    VerifierRefused    the peer failed TLS (unpinned or expired certificate, wrong host name, no TLS,
                       a chain that breaks the anchors' path rules)
                       or refused this device: a security failure, never papered over by a fallback
    VerifierLost       unreachable, too slow (per-round deadline), stream broken, at capacity:
                       the device may finish locally (`sdk.decoding.generate(fallback=True)`)
    ProtocolError      the verifier answered with a contract breach or refused our message

Every uplink is serialized here and passes through `sdk.egress` before gRPC sees it (gRPC's own
serializer is the identity), so the tap holds exactly the bytes that went out. Compression is
off and a compressed downlink is refused (the channel enables identity only, so the tap never sees
inflated bytes), retries are off (a retried stream would resend uplinks the tap saw once), and message sizes
are capped both ways (`core.limits`). A session's `uplink_bytes` counts what gRPC wrote: a frame the
tap saw but a broken stream never carried is on record, not in the count.

One answer is outstanding at a time (a round's verdict, or the cosignature a Close asked for), so
at most that answer is buffered: a downlink that answers nothing (after the Close, or a second one
for a round) goes to the tap, then cancels the call at once as a `ProtocolError`.
"""

from __future__ import annotations

import contextlib
import queue
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from specsteer.core import wire
from specsteer.core.errors import ConfigError, ProtocolError, SpecSteerError
from specsteer.core.limits import (
    MAX_DOWNLINK_BYTES,
    MAX_UPLINK_BYTES,
    WIRE_MAX_TOP_K,
    prompt_length_problem,
    resume_length_problem,
    top_k_problem,
)
from specsteer.core.session_types import Method, SessionParams, Verdict
from specsteer.core.tls_identity import check_tls_identity, host_name, read_tls_file
from specsteer.sdk.connect_faults import certificate_refusal, classify, specific_cause
from specsteer.sdk.egress import Egress, EgressSession, EgressTap
from specsteer.sdk.pinning import PinSet, load_pin_set
from specsteer.sdk.serving_chain import read_serving_chain, serving_chain_problem
from specsteer.sdk.transport import VerifierLost

__all__ = [
    "RemoteSession",
    "RemoteVerifier",
    "TlsIdentity",
    "VerifierRefused",
    "split_target",
]

HEALTH_CHECK_METHOD = "/grpc.health.v1.Health/Check"
# Resuming a generation after its verifier was lost (`RemoteVerifier.resume`): at most this many
# tries, the first at once, then after 0.25, 0.5 and 1 s, all within one connect timeout; a proxy
# marks a dead replica down within its health check's interval, and a replica killed mid-round
# leaves the next try to another one.
RESUME_ATTEMPTS = 4
RESUME_BACKOFF = 0.25


class VerifierRefused(SpecSteerError):
    """The verifier failed authentication (or refused ours); nothing was sent. Never a fallback."""


@dataclass(frozen=True)
class TlsIdentity:
    """The device's trust (pin set) and identity (client certificate chain and key), as PEM bytes."""

    pins: PinSet
    cert_chain: bytes
    key: bytes

    @classmethod
    def from_files(cls, pins: Path, cert: Path, key: Path, *, anchors: Path | None = None) -> TlsIdentity:
        pin_set = load_pin_set(pins, anchors)
        cert_pem, key_pem = read_tls_file(cert, "certificate"), read_tls_file(key, "key")
        check_tls_identity(cert_pem, key_pem, cert_path=Path(cert), key_path=Path(key), role="client")
        return cls(pin_set, cert_pem, key_pem)

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.pins.root_pem, private_key=self.key, certificate_chain=self.cert_chain
        )


def split_target(target: str) -> str:
    """The host of a HOST:PORT address (IPv6 in brackets); ConfigError if it is not one."""
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"the verifier address must be HOST:PORT; got {target!r}")
    return host.strip("[]")


class RemoteVerifier:
    """Opens verifier sessions over one channel; after a fault it reconnects on the next `open`.

    `vocab_size` is the Specialist's: downlinks naming other token IDs are refused. `round_timeout`
    bounds each round trip; `connect_timeout` bounds the TLS connection before a session starts.
    """

    max_top_k = WIRE_MAX_TOP_K  # the largest k a session may declare over the network (core.limits)

    def __init__(
        self,
        target: str,
        identity: TlsIdentity,
        *,
        vocab_size: int,
        server_name: str | None = None,
        connect_timeout: float = 10.0,
        round_timeout: float = 30.0,
        tap: EgressTap | None = None,
    ) -> None:
        self.host = split_target(target)
        if server_name is not None:
            # The name the verifier's certificate is checked against: a NUL or a blank would be
            # checked as some other name than the one configured.
            server_name = host_name(server_name, "the server name override (server_name)")
        if not connect_timeout > 0 or not round_timeout > 0:
            raise ConfigError("connect and round timeouts must be positive")
        self.target = target
        self.identity = identity
        self.vocab_size = vocab_size
        self.server_name = server_name
        self.connect_timeout = connect_timeout
        self.round_timeout = round_timeout
        self.egress = Egress(tap)
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._was_ready: grpc.Channel | None = None  # the channel last seen READY
        self._closed = False

    # -- channel ---------------------------------------------------------------------------------

    def _new_channel(self) -> grpc.Channel:
        options: list[tuple[str, int | str]] = [
            ("grpc.max_send_message_length", MAX_UPLINK_BYTES),
            # A fusion session's dense downlink is bounded by the vocabulary (core.wire.fusion_violation).
            ("grpc.max_receive_message_length", max(MAX_DOWNLINK_BYTES, wire.fusion_downlink_bytes(self.vocab_size))),
            ("grpc.enable_retries", 0),
            # Identity only (bit 0): a compressed downlink is refused by gRPC, never inflated, so the
            # audit log's downlink bytes are the wire's (and a gzip bomb never reaches memory).
            ("grpc.compression_enabled_algorithms_bitset", 1),
            # A private subchannel pool: a reconnect really dials again instead of inheriting
            # another channel's connection (or its backoff after the verifier went away).
            ("grpc.use_local_subchannel_pool", 1),
        ]
        if self.server_name is not None:
            options.append(("grpc.ssl_target_name_override", self.server_name))
        return grpc.secure_channel(
            self.target, self.identity.credentials(), options=options, compression=grpc.Compression.NoCompression
        )

    def _ready_channel(self, deadline: float | None = None) -> grpc.Channel:
        """A channel whose TLS handshake (both ways) has completed, or a precise error, by
        `deadline` (a `time.monotonic()` instant; None: `connect_timeout` from now)."""
        with self._lock:
            if self._closed:
                raise ConfigError("the remote verifier is closed")
            if self._channel is None:
                self._channel = self._new_channel()
            channel = self._channel
        # One deadline for the whole attempt: the wait, then (only for a failed channel) the
        # questions about why, so a failure reads within the connect timeout, not twice it.
        if deadline is None:
            deadline = time.monotonic() + self.connect_timeout
        state = None
        if channel is self._was_ready:
            # Connected before: look without asking to connect. Asking while gRPC's connectivity
            # poller still runs (a session opened just before) leaves the poller a request it acts
            # on at its next wake, and if the channel is closed by then, the poller's thread raises
            # a traceback on stderr (grpc/grpc#18995). A channel still READY needs no request; one
            # gone idle since is asked below (and connects at the poller's next wake, within 0.2 s).
            state = _await_connectivity(channel, min(_left(deadline, floor=0.0), 1.0), try_to_connect=False)
        connected = False
        if state is not grpc.ChannelConnectivity.READY:
            state = _await_connectivity(channel, _left(deadline, floor=0.0))
            connected = True
        if state is grpc.ChannelConnectivity.READY:
            if connected:
                # A fresh connection: gRPC checked the chain to a pinned anchor, not the path
                # rules (the anchor's path length, serverAuth): those are checked before any uplink.
                self._check_serving_chain(channel, deadline)
            self._was_ready = channel
            return channel
        if state is None:  # still connecting: a probe would only wait again
            self._drop(channel, close=True)
            raise VerifierLost(
                "verifier-unreachable",
                f"the verifier at {self.target} did not connect within {self.connect_timeout:g} s",
            )
        detail = self._probe(channel, deadline)
        self._drop(channel, close=True)  # not connected: nothing can be streaming on it
        raise self._connect_error(detail, deadline)

    def _check_serving_chain(self, channel: grpc.Channel, deadline: float) -> None:
        """Refuse (`VerifierRefused`, nothing sent) a verifier whose chain is no valid X.509 path
        under the pinned anchors for the host dialled (see `sdk.serving_chain`)."""
        port = int(self.target.rpartition(":")[2])
        chain = read_serving_chain(
            self.host,
            port,
            anchors_pem=self.identity.pins.root_pem,
            cert_chain_pem=self.identity.cert_chain,
            key_pem=self.identity.key,
            server_name=self.server_name,
            timeout=_left(deadline, floor=1.0),
        )
        problem = (
            chain
            if isinstance(chain, str)
            else serving_chain_problem(chain, self.identity.pins.anchors, self.server_name or self.host)
        )
        if problem is not None:
            self._drop(channel, close=True)  # connected, but no session was ever opened on it
            raise VerifierRefused(
                f"refused the verifier at {self.target}: its certificate chain breaks the pinned anchors' "
                f"path rules: {problem}; nothing was sent"
            )

    def _probe(self, channel: grpc.Channel, deadline: float) -> str:
        """Why the channel failed: a health check fails at once with gRPC's own explanation."""
        check: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(HEALTH_CHECK_METHOD)
        try:
            check(b"", timeout=_left(deadline, floor=0.1), wait_for_ready=False)
        except grpc.RpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
        return "the connection was not ready in time"

    def _connect_error(self, detail: str, deadline: float) -> SpecSteerError:
        """A failed check is a refusal; a verifier that is down or went away is `VerifierLost`."""
        fault = classify(detail, self.server_name or self.host)
        if fault.ambiguous:
            refusal = self._certificate_refusal(deadline)
            if refusal is not None:
                return VerifierRefused(f"the verifier at {self.target} refused this device: {refusal}; nothing sent")
        if fault.refused:
            return VerifierRefused(
                f"refused the verifier at {self.target}: {fault.meaning}; nothing was sent ({_last_words(detail)})"
            )
        return VerifierLost(
            "verifier-unreachable", f"the verifier at {self.target} is unreachable ({_last_words(detail)})"
        )

    def _certificate_refusal(self, deadline: float) -> str | None:
        """Ask the peer whether it refuses this device's certificate (see `sdk.connect_faults`)."""
        port = int(self.target.rpartition(":")[2])
        return certificate_refusal(
            self.host,
            port,
            anchors_pem=self.identity.pins.root_pem,
            cert_chain_pem=self.identity.cert_chain,
            key_pem=self.identity.key,
            server_name=self.server_name,
            # A refusal arrives within milliseconds of the handshake; the floor only keeps a
            # channel that failed right at the deadline from being read as no refusal.
            timeout=_left(deadline, floor=0.5),
        )

    def _drop(self, channel: grpc.Channel, *, close: bool) -> None:
        """Forget a channel that failed, so the next session dials afresh.

        After one session's fault the channel is only forgotten, not closed: other sessions may
        still be streaming on it (they hold it; it closes when the last one lets go).
        """
        with self._lock:
            if self._channel is channel:
                self._channel = None
            if self._was_ready is channel:
                self._was_ready = None
        if close:
            channel.close()

    # -- sessions --------------------------------------------------------------------------------

    def check(self, prompt_ids: Sequence[int], params: SessionParams) -> None:
        """Refuse (`ConfigError`) what the protocol's limits (`core.limits`) would make the verifier
        refuse, before anything is dialled, computed or sent."""
        problem = prompt_length_problem(len(prompt_ids)) or top_k_problem(params.top_k, self.max_top_k, remote=True)
        if problem is not None:
            raise ConfigError(problem)

    def open(self, prompt_ids: Sequence[int], params: SessionParams) -> RemoteSession:
        return self._open(prompt_ids, params, (), None)

    def resume(self, prompt_ids: Sequence[int], params: SessionParams, resume_ids: Sequence[int]) -> RemoteSession:
        """A new session that continues a generation whose verifier was lost: its Open carries
        `resume_ids`, the tokens the lost session had committed as its verifier saw them.

        Dials this verifier's address again (behind a proxy, another replica answers) up to
        `RESUME_ATTEMPTS` times, waiting `RESUME_BACKOFF` seconds (doubling) between tries, all
        within one `connect_timeout` from the first; `VerifierLost` when none answered in time.
        A refusal (`VerifierRefused`) or a protocol error is raised at once: never retried."""
        problem = resume_length_problem(len(resume_ids))
        if problem is not None:
            raise ConfigError(problem)
        deadline = time.monotonic() + self.connect_timeout
        wait = RESUME_BACKOFF
        for attempt in range(1, RESUME_ATTEMPTS + 1):
            try:
                return self._open(prompt_ids, params, resume_ids, deadline)
            except VerifierLost as exc:
                left = deadline - time.monotonic()
                if attempt == RESUME_ATTEMPTS or left <= wait:
                    raise VerifierLost(
                        exc.reason, f"no verifier took the generation back after {attempt} tries: {exc}"
                    ) from None
            time.sleep(wait)
            wait *= 2
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def _open(
        self, prompt_ids: Sequence[int], params: SessionParams, resume_ids: Sequence[int], deadline: float | None
    ) -> RemoteSession:
        self.check(prompt_ids, params)
        channel = self._ready_channel(deadline)
        max_top_k = min(params.top_k, WIRE_MAX_TOP_K)
        egress = self.egress.begin(vocab_size=self.vocab_size, max_top_k=max_top_k)
        session = RemoteSession(self, channel, egress, max_top_k=max_top_k)
        session.pad_to = params.draft_len if params.padded_frames else None
        session.fusion = params.method is Method.FUSION
        session.start(wire.encode_open(prompt_ids, params, resume_ids))
        return session

    def close(self) -> None:
        with self._lock:
            self._closed = True
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    def __enter__(self) -> RemoteVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_END = object()
# gRPC's details when what a peer sent is past this end's limits ("received metadata size exceeds
# hard limit", "Received message larger than max").
_RECEIVE_LIMIT = re.compile(r"exceeds (hard |soft )?limit|larger than max", re.IGNORECASE)


class RemoteSession:
    """One bidirectional stream: Open, Rounds (one downlink each), Close."""

    def __init__(self, verifier: RemoteVerifier, channel: grpc.Channel, egress: EgressSession, *, max_top_k: int):
        self._verifier = verifier
        self._channel = channel
        self._egress = egress
        self._max_top_k = max_top_k
        self._seq = 0
        self._requests: queue.Queue[bytes | object] = queue.Queue()
        # Bounded: one answer is outstanding at a time (a round's, or the Close's cosignature), plus
        # the stream's end. A downlink nobody asked for is a breach that cancels the call (_read).
        self._responses: queue.Queue[bytes | grpc.RpcError | object] = queue.Queue(maxsize=2)
        self._outstanding = 0  # answers asked for and not yet received
        self._outstanding_lock = threading.Lock()
        self._breach: ProtocolError | None = None  # set by the reader: a downlink nobody asked for
        self._call: grpc.Call | None = None
        self._reader: threading.Thread | None = None
        self._broken: SpecSteerError | None = None
        self._refused_by_tap = False
        self._in_flight: bytes | None = None  # taken by gRPC, not yet known to be written (_request_iter)
        self._in_flight_lock = threading.Lock()
        self.verifier_stats: dict[str, float] = {}
        self.pad_to: int | None = None  # the session's K if it declared padded frames
        self.fusion = False  # the session declared method fusion: a dense fusion vector may come down

    @property
    def uplink_bytes(self) -> int:
        return self._egress.uplink_bytes

    @property
    def downlink_bytes(self) -> int:
        return self._egress.downlink_bytes

    def _request_iter(self) -> Iterator[bytes]:
        # gRPC writes the frame it takes from here, and comes back for the next one only once that
        # write has completed, and never if the stream ended first (then the frame it took was not
        # sent). So a frame counts as sent when gRPC comes back, when the verifier answers it, or
        # when the stream ends normally (the verifier read everything, Close included).
        while True:
            item = self._requests.get()
            if item is _END:
                return
            assert isinstance(item, bytes)
            with self._in_flight_lock:
                self._in_flight = item
            yield item
            self._sent()

    def _sent(self) -> None:
        """Count the frame gRPC last took, now known to have been written."""
        with self._in_flight_lock:
            if self._in_flight is not None:
                self._egress.sent(self._in_flight)
                self._in_flight = None

    def _read(self, call: Iterator[bytes]) -> None:
        # Each downlink goes to the egress tap (the audit log) on receipt, not when a round takes
        # it: one still queued when the session is cancelled is on record too. Only answers asked
        # for are kept: a downlink that answers nothing (a flood after the Close, a second answer
        # to one round) is on record, then ends the call at once, so nothing piles up in memory.
        try:
            for raw in call:
                self._sent()  # a downlink answers the frame last sent (one round is out at a time)
                expected = self._take_outstanding()
                try:
                    item = self._egress.downlink(raw)
                except SpecSteerError as exc:  # the tap refused it: it is logged, never used
                    self._stop_reading(exc)
                    return
                if not expected:
                    self._stop_reading(
                        ProtocolError(
                            f"the verifier sent a downlink of {len(raw):,} bytes that answers nothing "
                            "(no round or cosignature was outstanding): a protocol breach, the call is cancelled"
                        )
                    )
                    return
                self._put(item)
            self._sent()
            self._put(_END)
        except grpc.RpcError as exc:
            self._put(exc)

    def _take_outstanding(self) -> bool:
        with self._outstanding_lock:
            if self._outstanding <= 0:
                return False
            self._outstanding -= 1
            return True

    def _expect_answer(self) -> None:
        with self._outstanding_lock:
            self._outstanding += 1

    def _stop_reading(self, error: SpecSteerError) -> None:
        """The reader's end on a breach: the error for whoever waits, and the call cancelled now."""
        if self._breach is None and isinstance(error, ProtocolError):
            self._breach = error
        self._put(error)
        if self._call is not None:
            self._call.cancel()

    def _put(self, item: bytes | grpc.RpcError | object) -> None:
        # Never blocks the reader: the queue holds at most the one answer asked for and the end.
        with contextlib.suppress(queue.Full):
            self._responses.put_nowait(item)

    def _send(self, payload: bytes) -> None:
        # The tap sees the bytes first; if it refuses them, they are never queued for gRPC, and
        # the stream ends here (no Close; the session's record ends with an `egress-refused` end).
        # A frame over the channel's cap would be refused by gRPC after the tap saw it, looking like
        # a busy verifier: refuse it here, before the tap.
        if len(payload) > MAX_UPLINK_BYTES:
            self._broken = ProtocolError(
                f"an uplink of {len(payload):,} bytes is over the protocol's {MAX_UPLINK_BYTES:,}; nothing was sent"
            )
            self._cancel()
            raise self._broken
        try:
            checked = self._egress.uplink(payload)
        except BaseException as exc:
            self._refused_by_tap = True
            self._broken = exc if isinstance(exc, SpecSteerError) else ProtocolError(f"the egress tap failed: {exc}")
            self._cancel()
            raise
        self._requests.put(checked)

    def start(self, open_payload: bytes) -> None:
        self._send(open_payload)
        stream: grpc.StreamStreamMultiCallable[bytes, bytes] = self._channel.stream_stream(wire.SESSION_METHOD)
        call = stream(self._request_iter(), wait_for_ready=False, compression=grpc.Compression.NoCompression)
        self._call = call
        self._reader = threading.Thread(target=self._read, args=(call,), name="verifier-stream", daemon=True)
        self._reader.start()

    def _lost(self, reason: str, message: str) -> VerifierLost:
        self._verifier._drop(self._channel, close=False)
        self._cancel()
        error = VerifierLost(reason, message, on_fallback=self._egress.fallback)
        self._broken = error
        return error

    def _from_status(self, exc: grpc.RpcError) -> SpecSteerError:
        code, raw = exc.code(), exc.details() or ""
        details = _last_words(raw)  # the verifier's words: printable and short, never its escapes
        where = self._verifier.target
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            self._broken = VerifierRefused(f"the verifier at {where} refused this device: {details}")
            return self._broken
        if code is grpc.StatusCode.UNAVAILABLE:
            fault = classify(raw, self._verifier.server_name or self._verifier.host)
            # Mid-stream the handshake is long done and the verifier accepted this device: a cause
            # that names no failed check (a verifier shutting down: "Cancelling all calls") is a loss.
            if fault.refused and not fault.unknown:
                self._broken = VerifierRefused(f"refused the verifier at {where}: {fault.meaning} ({details})")
                return self._broken
            return self._lost("verifier-lost", f"the connection to the verifier at {where} broke: {details}")
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return self._lost("verifier-expired", f"the verifier at {where} expired the session: {details}")
        if code is grpc.StatusCode.RESOURCE_EXHAUSTED and _RECEIVE_LIMIT.search(raw):
            # gRPC's own words for what the verifier sent past this device's limits (metadata,
            # a message): the verifier's fault, not its capacity.
            return self._lost(
                "verifier-error", f"the verifier at {where} sent more than this device accepts: {details}"
            )
        if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
            return self._lost("verifier-busy", f"the verifier at {where} is at capacity: {details}")
        if code in (grpc.StatusCode.CANCELLED, grpc.StatusCode.ABORTED):
            return self._lost("verifier-lost", f"the verifier at {where} ended the session: {details}")
        if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
            return self._lost("verifier-error", f"the verifier at {where} failed: {details}")
        self._broken = ProtocolError(f"the verifier at {where} refused the session ({code.name}): {details}")
        return self._broken

    def guard_decision(self, decision: str, count: int, placeholder: str) -> None:
        self._egress.guard_decision(decision, count, placeholder)

    def end_locally(self, reason: str) -> None:
        self._egress.fallback(reason)

    def round(self, commit: Sequence[int], draft: Sequence[int], literal: Sequence[int] = ()) -> Verdict:
        if self._broken is None and self._breach is not None:
            self._broken = self._breach
            self._cancel()
        if self._broken is not None:
            raise self._broken
        self._seq += 1
        self._expect_answer()  # before the uplink: its answer may arrive before _send returns
        self._send(wire.encode_round(self._seq, commit, draft, literal, pad_to=self.pad_to))
        try:
            item = self._responses.get(timeout=self._verifier.round_timeout)
        except queue.Empty:
            raise self._lost(
                "verifier-timeout",
                f"the verifier did not answer round {self._seq} within {self._verifier.round_timeout:g} s",
            ) from None
        if isinstance(item, grpc.RpcError):
            raise self._from_status(item)
        if item is _END:
            raise self._lost("verifier-lost", "the verifier ended the session without answering")
        if isinstance(item, SpecSteerError):
            self._broken = item
            self._cancel()
            raise item
        assert isinstance(item, bytes)
        seq, verdict = wire.decode_downlink(
            item, max_top_k=self._max_top_k, vocab_size=self._verifier.vocab_size, fusion=self.fusion
        )
        if seq != self._seq:
            self._broken = ProtocolError(f"the verifier answered round {seq} where round {self._seq} was asked")
            self._cancel()
            raise self._broken
        return verdict

    def _cancel(self) -> None:
        self._requests.put(_END)
        if self._call is not None:
            self._call.cancel()

    def close(self) -> None:
        """Send Close and wait (briefly) for the verifier to end the stream; never raises on a dead one."""
        if self._call is None:
            return
        if self._broken is None and self._breach is not None:
            self._broken = self._breach
        if self._broken is None:
            self._seq += 1
            with contextlib.suppress(SpecSteerError):
                # With an audit log, the Close asks the verifier, the log's witness, to cosign its
                # checkpoint; the answer arrives as one more downlink, which the reader logs. Any
                # other downlink after the Close cancels the call (_read): close never waits on it.
                request = self._egress.witness_request()
                if request is not None:
                    self._expect_answer()
                self._send(wire.encode_close(self._seq, request))
        elif not self._egress.ended:
            # A session that ends without Close still ends on record (the auditor checks that every
            # session closes or records why not): a lost verifier the device did not fall back
            # from, a refused peer, a protocol violation (if the tap refuses this too, so be it).
            with contextlib.suppress(SpecSteerError, ValueError):
                self._egress.fallback("egress-refused" if self._refused_by_tap else _end_reason(self._broken))
        self._requests.put(_END)
        if self._reader is not None:
            self._reader.join(timeout=min(self._verifier.round_timeout, 5.0))
            if self._reader.is_alive():
                self._call.cancel()
                self._reader.join(timeout=1.0)
        self._call = None


def _end_reason(error: SpecSteerError) -> str:
    if isinstance(error, VerifierLost):
        return error.reason
    if isinstance(error, VerifierRefused):
        return "verifier-refused"
    return "protocol-error"


def _await_connectivity(
    channel: grpc.Channel, timeout: float, *, try_to_connect: bool = True
) -> grpc.ChannelConnectivity | None:
    """Wait until the channel is READY or has failed (TRANSIENT_FAILURE / SHUTDOWN); None on timeout.
    Without `try_to_connect`, the channel's state as first reported: an idle channel stays idle."""
    done = threading.Event()
    seen: list[grpc.ChannelConnectivity] = []
    final = (
        grpc.ChannelConnectivity.READY,
        grpc.ChannelConnectivity.TRANSIENT_FAILURE,
        grpc.ChannelConnectivity.SHUTDOWN,
    )

    def watch(state: grpc.ChannelConnectivity) -> None:
        seen.append(state)
        if state in final or not try_to_connect:
            done.set()

    channel.subscribe(watch, try_to_connect=try_to_connect)
    try:
        done.wait(timeout)
    finally:
        channel.unsubscribe(watch)
    last = seen[-1] if seen else None
    return last if last in final else None


def _left(deadline: float, *, floor: float) -> float:
    return max(deadline - time.monotonic(), floor)


def _last_words(detail: str, limit: int = 240) -> str:
    """The peer's words as they may go into an error message: the specific cause, printable
    characters only (no control characters or terminal escapes), at most `limit` characters."""
    text = " ".join("".join(c if c.isprintable() else " " for c in specific_cause(detail)).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"

"""The egress choke point: every byte the SDK sends to the verifier passes through here first.

The one path of an uplink: `sdk.remote` (`_send`) serializes it and hands the exact bytes to
`EgressSession.uplink`, whose tap (`audit.recorder.EgressRecorder`, whose `on_uplink` checks and
logs them, when an audit log is configured) sees them; only then do they go to gRPC, whose
serializer is the identity (gRPC interceptors would see message objects, not bytes). A tap can
log them, or refuse them by raising: a refused uplink is not sent, and the generation stops with
that error (fail closed).
Downlinks reach the tap as received, before they are parsed, so malformed ones are evidence too.

    egress = Egress(tap)                                   # tap: anything shaped like `EgressTap`
    session = egress.begin(vocab_size=49152, max_top_k=10)
    payload = session.uplink(wire.encode_round(1, [], [5, 6]))   # tap saw it; now send it
    session.sent(payload)                                  # the transport handed it to the network
    session.downlink(received_bytes)
    session.guard_decision("placeholder", 1, "<EMAIL>")    # the guard replaced a span (before that round)
    session.fallback("verifier-lost")                      # the device finished locally

`audit.EgressRecorder` is a tap as it is: `EgressTap` is a protocol, so audit imports nothing of
the sdk. The session ID is device-local: it never goes on the wire.
"""

from __future__ import annotations

import re
import secrets
from typing import Protocol

from specsteer.core.wire import WitnessRequest

__all__ = ["Egress", "EgressSession", "EgressTap", "NullTap"]

_REASON = re.compile(r"[a-z][a-z0-9-]{0,63}")


class EgressTap(Protocol):
    """Sees every uplink's bytes before they leave, and every downlink's bytes as they arrive.

    What the `on_*` methods return is ignored (the audit recorder returns the record's index)."""

    def begin_session(self, *, vocab_size: int, max_top_k: int) -> str:
        """A new session's device-local ID."""
        ...

    def on_uplink(self, session_id: str, payload: bytes) -> object:
        """Called before `payload` is sent; raising blocks it (and ends the generation)."""
        ...

    def on_downlink(self, session_id: str, payload: bytes) -> object:
        """Called with each received payload before it is parsed; raising rejects it."""
        ...

    def on_fallback(self, session_id: str, reason: str) -> object:
        """The device finished this session locally; `reason` is a short identifier."""
        ...

    def on_guard_decision(self, session_id: str, decision: str, count: int, placeholder: str) -> object:
        """The egress guard acted on `count` sensitive span(s); called before the uplink it shaped."""
        ...


class NullTap:
    """Records nothing; the default when no audit is configured."""

    def begin_session(self, *, vocab_size: int, max_top_k: int) -> str:
        return secrets.token_hex(16)

    def on_uplink(self, session_id: str, payload: bytes) -> None:
        pass

    def on_downlink(self, session_id: str, payload: bytes) -> None:
        pass

    def on_fallback(self, session_id: str, reason: str) -> None:
        pass

    def on_guard_decision(self, session_id: str, decision: str, count: int, placeholder: str) -> None:
        pass


class EgressSession:
    """One session's view of the choke point; counts the bytes that actually crossed."""

    def __init__(self, tap: EgressTap, session_id: str) -> None:
        self._tap = tap
        self.session_id = session_id
        self.uplink_bytes = 0
        self.downlink_bytes = 0
        self.uplinks = 0
        self.ended = False  # a fallback (or another abnormal end) is on record

    def uplink(self, payload: bytes) -> bytes:
        """Show `payload` to the tap; return it for sending. The tap raising means: do not send.

        Not counted yet: the transport calls `sent` once the bytes are handed to the network, so a
        frame that never leaves (the stream broke first) is on record but not in the byte counts."""
        self._tap.on_uplink(self.session_id, payload)
        return payload

    def sent(self, payload: bytes) -> None:
        """Count `payload`, which the transport has handed to the network."""
        self.uplink_bytes += len(payload)
        self.uplinks += 1

    def downlink(self, payload: bytes) -> bytes:
        self.downlink_bytes += len(payload)
        self._tap.on_downlink(self.session_id, payload)
        return payload

    def fallback(self, reason: str) -> None:
        if not _REASON.fullmatch(reason):
            raise ValueError(f"a fallback reason is a short lowercase identifier; got {reason!r}")
        self._tap.on_fallback(self.session_id, reason)
        self.ended = True

    def guard_decision(self, decision: str, count: int, placeholder: str) -> None:
        """Put the guard's decision on record (never the span); raising means: do not send."""
        self._tap.on_guard_decision(self.session_id, decision, count, placeholder)

    def witness_request(self) -> WitnessRequest | None:
        """The checkpoint a Close asks the verifier to cosign: only a tap that keeps a log has one."""
        issue = getattr(self._tap, "witness_request", None)
        return None if issue is None else issue(self.session_id)


class Egress:
    """Opens `EgressSession`s on one tap (a `NullTap` if none is given)."""

    def __init__(self, tap: EgressTap | None = None) -> None:
        self.tap: EgressTap = tap if tap is not None else NullTap()

    def begin(self, *, vocab_size: int, max_top_k: int) -> EgressSession:
        return EgressSession(self.tap, self.tap.begin_session(vocab_size=vocab_size, max_top_k=max_top_k))

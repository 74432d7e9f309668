"""`EgressRecorder`: the audit side of the device's one egress choke point.

The one path every uplink takes: `sdk.remote` serializes it and hands the exact bytes to
`sdk.egress.EgressSession.uplink`, whose tap is this recorder (it has the `sdk.egress.EgressTap`
methods itself). `EgressRecorder.on_uplink` checks them against the session contract
(`core.contract`), appends them to the log, waits for the fsync, and only then returns, after
which the bytes go to gRPC (whose serializer is the identity). An uplink that breaks the contract
raises `EgressBlocked`: it is neither logged nor sent (fail closed). `on_downlink` logs the
received bytes first (evidence, even when malformed), then parses and checks them, raising
`ProtocolError` on a breach.

    recorder = EgressRecorder(AuditLog.open(log_dir, signing_key))
    sid = recorder.begin_session(vocab_size=specialist_vocab_size)
    recorder.on_uplink(sid, payload)       # before sending; raises EgressBlocked to stop it
    recorder.on_downlink(sid, received)    # on receipt, before parsing
    recorder.on_fallback(sid, "verifier-unreachable")   # if the device finishes locally

Keep gRPC compression off on this channel, so the logged bytes are the wire bytes (gRPC adds only
its 5-byte length prefix). A session ends with its Close uplink or a fallback; a checkpoint is
signed then. The session ID is random and device-local: it never goes on the wire.

The witness exchange (docs/audit-format.md, section 8): `witness_request(sid)` signs a checkpoint
of the log as it stands and proves it consistent with the last cosigned one; the Close carries it,
and the recorder lets a Close carry only the request it issued for that session. The verifier's
answer, a downlink with its cosignature, is logged like any downlink, and a checkpoint signed over
it, so no tail is left unsigned. Only a cosignature that verifies under the log's witness key
(`AuditLog.open(..., witness_key=)`), dated within the exchange (from the Close's record time to
the answer's, give or take `COSIGNATURE_SKEW_S`), is kept in checkpoints.jsonl and proved from by the next Close;
any other answer stays on record only (one that fails under the key raises `ProtocolError`), so a
bad answer cannot make the witness refuse every later Close.

    request = recorder.witness_request(sid)
    recorder.on_uplink(sid, wire.encode_close(seq, request))
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable

from specsteer.audit import merkle, records
from specsteer.audit.cosignature import add_cosignature, time_problem
from specsteer.audit.errors import AuditError, EgressBlocked, NoteError
from specsteer.audit.log import AuditLog
from specsteer.audit.note import Checkpoint, parse_note
from specsteer.core import wire
from specsteer.core.contract import SessionState, Violation
from specsteer.core.errors import ProtocolError
from specsteer.core.limits import MAX_VOCAB_SIZE, WIRE_MAX_TOP_K


def _describe(violations: list[Violation]) -> str:
    return "; ".join(v.message for v in violations)


class EgressRecorder:
    """Records uplinks before they are sent and downlinks on receipt, for any number of sessions."""

    def __init__(self, log: AuditLog) -> None:
        self.log = log
        self._lock = threading.Lock()
        self._sessions: dict[str, SessionState] = {}
        # Per session: the witness request issued for its Close and the checkpoint note it carries.
        self._witness: dict[str, tuple[wire.WitnessRequest, str]] = {}
        self._asked: dict[str, float] = {}  # per session: when its Close was logged (the record's time)
        self._close_at: dict[str, int] = {}  # per session: the record of its Close, until answered
        # The cloud's misbehaviour in answering Closes (finding 2 of issue 48), once each, for the
        # device to report (`sdk generate` stats, `--require-witness`); `audit verify` names it too.
        self.faults: list[str] = []
        self.on_cosigned: Callable[[int], None] | None = None  # told the size a valid answer cosigned

    def begin_session(self, *, vocab_size: int, max_top_k: int = WIRE_MAX_TOP_K) -> str:
        """Start a session: log the Specialist's vocabulary size and the largest k the device accepts."""
        if not 1 <= vocab_size <= MAX_VOCAB_SIZE:
            raise AuditError(f"vocabulary size must be in [1, {MAX_VOCAB_SIZE:,}]; got {vocab_size:,}")
        if not 1 <= max_top_k <= WIRE_MAX_TOP_K:
            raise AuditError(f"the session's k cap must be in [1, {WIRE_MAX_TOP_K}]; got {max_top_k}")
        session_id = secrets.token_hex(16)
        with self._lock:
            self.log.append_session(records.KIND_BEGIN, session_id, {"vocab_size": vocab_size, "max_top_k": max_top_k})
            self._sessions[session_id] = SessionState(session_id, vocab_size, max_top_k)
        return session_id

    def _state(self, session_id: str) -> SessionState:
        state = self._sessions.get(session_id)
        if state is None:
            raise AuditError(f"session {session_id!r} was not begun by this recorder")
        return state

    def _after_end(self, state: SessionState, was_ended: bool) -> None:
        if state.ended and not was_ended:
            self.log.checkpoint()

    def witness_request(self, session_id: str) -> wire.WitnessRequest:
        """Sign a checkpoint of the log as it stands and prove it consistent with the last cosigned one.

        Every field is the log's own (its key, size, root, signature, the last cosigned size and
        the RFC 9162 proof from it), so the Close that carries it says nothing the log does not.
        """
        with self._lock:
            self._state(session_id)
            log = self.log
            note = log.checkpoint()
            size, root = log.size, log.root()
            old = log.cosigned
            old_size = old[0] if old is not None else 0
            proof = merkle.consistency_proof(old_size, log.leaf_hashes[:size]) if 0 < old_size < size else []
            (signature,) = [s.signature for s in parse_note(note).signatures]
            request = wire.WitnessRequest(
                log.key.name, log.key.verifier.public_key, size, root, signature, old_size, tuple(proof)
            )
            self._witness[session_id] = (request, note)
            return request

    def on_uplink(self, session_id: str, payload: bytes) -> int:
        """Check and log one serialized `Uplink`; return its record index once it is on disk.

        Raises `EgressBlocked` (and logs nothing) if the bytes break the egress contract: the
        caller must then not send them.
        """
        with self._lock:
            state = self._state(session_id)
            violations, commit = state.examine_uplink(payload, self._sessions.values())
            if violations:
                raise EgressBlocked(f"uplink blocked for session {session_id[:8]}…: {_describe(violations)}")
            witness = wire.witness_of(payload)
            issued = self._witness.get(session_id)
            if witness is not None and (issued is None or witness != issued[0]):
                # Only the log's own checkpoint may ride on a Close: anything else could carry text.
                raise EgressBlocked(
                    f"uplink blocked for session {session_id[:8]}…: the Close carries a witness request "
                    "this recorder did not issue for it"
                )
            was_ended = state.ended
            index = self.log.append_session(
                records.KIND_UPLINK, session_id, records.payload_fields("up", payload), payload=payload
            )
            commit()
            if witness is not None:
                self._asked[session_id] = self._time_of(index)
                self._close_at[session_id] = index
            self._after_end(state, was_ended)
            return index

    def _time_of(self, index: int) -> float:
        """The time (Unix seconds) of record `index`, just appended by this recorder."""
        last = self.log.last_appended
        return last[1] if last is not None and last[0] == index else time.time()

    def on_downlink(self, session_id: str, payload: bytes) -> int:
        """Log one received `Downlink` as received, then check it; raise `ProtocolError` if it breaks the contract."""
        with self._lock:
            state = self._state(session_id)
            index = self.log.append_session(records.KIND_DOWNLINK, session_id, records.payload_fields("down", payload))
            violations, commit = state.examine_downlink(payload)
            answers_close = wire.carries_cosignature(payload)
            open_close = session_id in self._close_at
            if answers_close and (violations or not open_close):
                # A cosignature nobody asked for (a second answer), or one of the wrong shape: the cloud's.
                self._witness.pop(session_id, None)
                self._close_at.pop(session_id, None)
                self.faults.append(
                    f"the verifier answered the Close with a malformed cosignature (audit record {index})"
                    if open_close
                    else f"the verifier sent a cosignature that answers no open Close (audit record {index})"
                )
            if violations:
                raise ProtocolError(f"downlink rejected (audit record {index}): {_describe(violations)}")
            commit()
            cosignature = wire.decode_cosignature(payload)
            issued = self._witness.pop(session_id, None) if cosignature is not None else None
            if cosignature is not None:
                self._close_at.pop(session_id, None)
            if cosignature is not None and issued is not None:  # the contract admitted it: our Close asked
                request, note = issued
                # The exchange's window on the log's own clock: from the Close's record to this answer's.
                answered = self._time_of(index)
                asked = self._asked.pop(session_id, answered)
                problem = self._cosignature_problem(request, cosignature, asked, answered)
                if problem is None:
                    self.log.store_cosigned(add_cosignature(note, cosignature.witness, cosignature.signature))
                # Kept on record either way (the downlink above); never proved from unless it verified.
                self.log.checkpoint()  # the answer is the session's last record: sign over it
                if problem is None and self.on_cosigned is not None:
                    self.on_cosigned(request.size)
                if problem is not None and self.log.witness_key is not None:
                    self.faults.append(
                        f"the verifier answered the Close with an invalid cosignature (audit record {index}): {problem}"
                    )
                    raise ProtocolError(
                        f"the verifier answered the Close with an invalid cosignature (audit record {index}): "
                        f"{problem}; it is kept on record, and the next Close proves from the last valid one"
                    )
            return index

    def unanswered(self) -> list[str]:
        """Closes that asked for a cosignature and got no answer, each reported once as withheld.

        Called when the device is done with a session (after the stream ended): an answer cannot
        come any more, so the verifier withheld it."""
        with self._lock:
            out = [
                f"the verifier withheld its cosignature of the Close (audit record {index})"
                for sid, index in self._close_at.items()
                if self._sessions.get(sid) is not None and self._sessions[sid].ended
            ]
            for sid in [sid for sid in self._close_at if self._sessions[sid].ended]:
                self._close_at.pop(sid)
                self._witness.pop(sid, None)
            self.faults.extend(out)
            return out

    def _cosignature_problem(
        self, request: wire.WitnessRequest, cosignature: wire.CosignatureFrame, asked: float, answered: float
    ) -> str | None:
        """Why the answer to a Close is not the witness's valid cosignature of the checkpoint it carried,
        dated within the exchange (`asked` to `answered`, widened by the clock skew allowed)."""
        key = self.log.witness_key
        if key is None:
            return "the device holds no witness key to check it with"
        if cosignature.witness != key.name:
            return f"it names witness {cosignature.witness!r}, not {key.name!r}"
        try:
            timestamp = key.verify(
                Checkpoint(request.origin, request.size, request.root_hash).body(), cosignature.signature
            )
        except NoteError as exc:
            return str(exc)
        return time_problem(timestamp, asked, answered)

    def on_fallback(self, session_id: str, reason: str) -> int:
        """The device finished this session locally; `reason` is a short identifier, never free text."""
        if not records.is_identifier(reason):
            raise AuditError(
                f"a fallback reason is a short lowercase identifier such as 'verifier-unreachable'; got {reason!r}"
            )
        with self._lock:
            state = self._state(session_id)
            violations, commit = state.examine_fallback(reason)
            if violations:
                raise AuditError(_describe(violations))
            was_ended = state.ended
            index = self.log.append_session(records.KIND_FALLBACK, session_id, {"reason": reason})
            commit()
            self._after_end(state, was_ended)
            return index

    def on_guard_decision(self, session_id: str, decision: str, count: int, placeholder: str) -> int:
        """The privacy guard's decision: what it did, how many spans, which placeholder label (never the span).

        A `placeholder` decision must come before the round that carries the placeholder's tokens.
        """
        if not records.is_placeholder(placeholder):
            raise AuditError(f"a placeholder is a short label such as '[EMAIL]'; got {placeholder!r}")
        with self._lock:
            state = self._state(session_id)
            violations, commit = state.examine_guard(decision, count, placeholder)
            if violations:
                raise AuditError(_describe(violations))
            fields = {"decision": decision, "count": count, "placeholder": placeholder}
            index = self.log.append_session(records.KIND_GUARD, session_id, fields)
            commit()
            return index

"""The egress contract, checked the same way live (before an uplink leaves) and by `audit verify`.

One `SessionState` per device session follows its messages in order. `examine_uplink(payload)` and
`examine_downlink(payload)` return the violations they find and a `commit` that advances the state:
the recorder commits only a clean message (and blocks a dirty uplink), the verifier always commits
so one bad record does not hide the next.

An uplink must parse as `Uplink` with no unknown field at any depth, re-serialize
deterministically to the very same bytes, carry only token IDs inside the vocabulary and declared
parameters inside their bounds, and follow the session order: Open first, Rounds numbered 1, 2, ...
each after the previous one was answered, a commit that is exactly one of the last steering
candidates, a placeholder (`literal_ids`) only after a guard decision declared it, every round a
full-slot `PaddedRound` if the session declared padded frames (and only then), then Close.
A downlink must answer the outstanding round with at most k candidates (k = min(declared top-k,
the session's cap), the cap at most the protocol maximum), each 1 to `MAX_CANDIDATE_TOKENS`
in-vocabulary tokens with a finite value; or, only in a session that declared method fusion, one
dense fusion vector of exactly one finite float32 per vocabulary entry (token-level fusion's real
downlink, bounded by the vocabulary), after which the commit may be any single token.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from core import wire
from core.errors import ProtocolError
from core.proto import verifier_pb2 as pb
from core.session_types import (
    ANY_ONE_TOKEN,
    MAX_CANDIDATE_TOKENS,
    MAX_LITERAL_TOKENS,
    WIRE_MAX_TOP_K,
    AnyOneToken,
    Method,
)

# The guard's decisions (audit records' `decision`): a shorter draft; a placeholder on the wire in
# place of a span; the rest of the text kept on the device; recovery candidates dropped.
GUARD_CUT = "cut"
GUARD_PLACEHOLDER = "placeholder"
GUARD_KEEP_LOCAL = "keep-local"
GUARD_FILTER = "filter"


class Area(StrEnum):
    UPLINK = "uplinks"
    DOWNLINK = "downlinks"
    SESSION = "session structure"


@dataclass(frozen=True)
class Violation:
    area: Area
    message: str


def unknown_fields(msg: Message, path: str = "") -> list[str]:
    """Every unknown field at any depth, as 'path.field N'. Python protobuf keeps unknown fields and
    re-serializes them, so only this walk (not a round trip) proves there are none."""
    # UnknownFieldSet iterates by __getitem__ and __len__, which the protobuf stubs do not call iteration.
    found = [f"{path or msg.DESCRIPTOR.name} field {f.field_number}" for f in UnknownFieldSet(msg)]  # type: ignore[attr-defined]
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        children = value if fd.is_repeated else [value]
        for i, child in enumerate(children):
            sub = f"{path or msg.DESCRIPTOR.name}.{fd.name}" + (f"[{i}]" if fd.is_repeated else "")
            found.extend(unknown_fields(child, sub))
    return found


def _out_of_vocab(ids: list[int], vocab_size: int) -> list[int]:
    return [t for t in ids if t >= vocab_size]


class Phase(StrEnum):
    BEGUN = "begun"  # no Open yet
    OPEN = "open"
    CLOSED = "closed"  # Close sent
    FELL_BACK = "fell back"  # device finished locally


@dataclass
class SessionState:
    """What one session has declared and done so far."""

    session_id: str
    vocab_size: int
    max_top_k: int
    phase: Phase = Phase.BEGUN
    top_k: int = 0
    draft_len: int = 0
    last_seq: int = 0  # the last Round's seq
    awaiting: int | None = None  # seq of a round not yet answered
    awaiting_draft: int = 0
    # The last steering vector's candidates, until committed (ANY_ONE_TOKEN after a fusion vector).
    candidates: frozenset[tuple[int, ...]] | AnyOneToken | None = None
    rounds: int = 0
    uplink_bytes: int = 0
    downlink_bytes: int = 0
    fallback_reason: str | None = None
    notes: list[str] = field(default_factory=list)
    # Guard decisions by (decision, placeholder), and placeholders declared but not yet on the wire.
    guard: Counter[tuple[str, str]] = field(default_factory=Counter)
    placeholders_declared: int = 0
    padded: bool = False  # the session declared constant-size rounds (PaddedRound)
    fusion: bool = False  # the session declared method fusion: dense fusion vectors may come down

    @property
    def ended(self) -> bool:
        return self.phase in (Phase.CLOSED, Phase.FELL_BACK)

    @property
    def k(self) -> int:
        return min(self.top_k, self.max_top_k)

    @staticmethod
    def begin_violations(vocab_size: int, max_top_k: int) -> list[Violation]:
        if max_top_k > WIRE_MAX_TOP_K:
            return [
                Violation(
                    Area.DOWNLINK, f"the session allows k = {max_top_k}, above the protocol maximum {WIRE_MAX_TOP_K}"
                )
            ]
        if vocab_size < 1 or max_top_k < 1:
            return [Violation(Area.SESSION, "the session declares an empty vocabulary or k < 1")]
        return []

    # -- uplinks ---------------------------------------------------------------------------------

    def examine_uplink(self, payload: bytes) -> tuple[list[Violation], Callable[[], None]]:
        out: list[Violation] = []
        try:
            msg = pb.Uplink.FromString(payload)
        except DecodeError:
            return [Violation(Area.UPLINK, "the bytes do not parse as an Uplink message")], self._count_up(payload)
        unknown = unknown_fields(msg)
        if unknown:
            out.append(
                Violation(Area.UPLINK, f"{len(unknown)} unknown field(s) outside the schema: {', '.join(unknown)}")
            )
        if msg.SerializeToString(deterministic=True) != payload:
            out.append(
                Violation(Area.UPLINK, "the bytes are not the deterministic serialization of what they parse to")
            )
        kind = msg.WhichOneof("kind")
        if kind is None:
            out.append(Violation(Area.UPLINK, "the Uplink carries no Open, Round or Close"))
            return out, self._count_up(payload)
        if self.ended and not (kind == "close" and self.phase is Phase.FELL_BACK):
            out.append(Violation(Area.SESSION, f"an uplink {kind} after the session {self.phase.value}"))
        if kind == "open":
            return self._open(msg.open, payload, out)
        if kind == "round":
            frame = wire.round_frame(msg.round)
            if self.padded:
                out.append(Violation(Area.UPLINK, f"Round {frame.seq} is not padded, but the session declared padding"))
            return self._round(frame, payload, out)
        if kind == "padded_round":
            p = msg.padded_round
            slots = (len(p.commit_ids), len(p.draft_ids), len(p.literal_ids))
            expected = wire.padded_slots(self.draft_len)
            if not self.padded:
                out.append(Violation(Area.UPLINK, f"PaddedRound {p.seq} in a session that declared no padding"))
            elif slots != expected:
                out.append(Violation(Area.UPLINK, f"PaddedRound {p.seq} fills {slots} slots, not {expected}"))
            try:
                frame = wire.padded_frame(p)
            except ProtocolError as exc:  # a token after padding: checked as an empty round from here
                out.append(Violation(Area.UPLINK, str(exc)))
                frame = wire.RoundFrame(p.seq, (), (), (), slots=slots)
            return self._round(frame, payload, out)
        return self._close(msg.close, payload, out)

    def _count_up(self, payload: bytes) -> Callable[[], None]:
        def commit() -> None:
            self.uplink_bytes += len(payload)

        return commit

    def _open(self, msg: pb.Open, payload: bytes, out: list[Violation]) -> tuple[list[Violation], Callable[[], None]]:
        if self.phase is not Phase.BEGUN:
            out.append(Violation(Area.SESSION, "a second Open in one session"))
        top_k = draft_len = 0
        padded = fusion = False
        try:
            params = wire.params_from_proto(msg.params)
        except ProtocolError as exc:
            out.append(Violation(Area.UPLINK, f"declared parameters out of bounds: {exc}"))
        else:
            top_k, draft_len, padded = params.top_k, params.draft_len, params.padded_frames
            fusion = params.method is Method.FUSION
            if top_k > self.vocab_size:
                out.append(
                    Violation(Area.UPLINK, f"declared top-k {top_k} exceeds the vocabulary of {self.vocab_size}")
                )
        if not msg.prompt_ids:
            out.append(Violation(Area.UPLINK, "the Open carries no prompt tokens"))
        bad = _out_of_vocab(list(msg.prompt_ids), self.vocab_size)
        if bad:
            out.append(
                Violation(Area.UPLINK, f"prompt token ID(s) {bad[:5]} outside the vocabulary of {self.vocab_size}")
            )
        count = self._count_up(payload)

        def commit() -> None:
            count()
            if self.phase is Phase.BEGUN:
                self.phase, self.top_k, self.draft_len, self.padded = Phase.OPEN, top_k, draft_len, padded
                self.fusion = fusion

        return out, commit

    def _round(
        self, msg: wire.RoundFrame, payload: bytes, out: list[Violation]
    ) -> tuple[list[Violation], Callable[[], None]]:
        if self.phase is Phase.BEGUN:
            out.append(Violation(Area.SESSION, "a Round before the session's Open"))
        if msg.seq != self.last_seq + 1:
            what = "a gap" if msg.seq > self.last_seq + 1 else "a repeat or reordering"
            out.append(Violation(Area.SESSION, f"Round seq {msg.seq} follows seq {self.last_seq}: {what}"))
        if self.awaiting is not None:
            out.append(Violation(Area.SESSION, f"Round {msg.seq} was sent before round {self.awaiting} was answered"))
        draft, commit_ids = list(msg.draft), list(msg.commit)
        if self.phase is Phase.OPEN and len(draft) > self.draft_len:
            out.append(
                Violation(
                    Area.UPLINK, f"the draft has {len(draft)} tokens, more than the declared K = {self.draft_len}"
                )
            )
        literal = list(msg.literal)
        bad = _out_of_vocab(draft + commit_ids + literal, self.vocab_size)
        if bad:
            out.append(Violation(Area.UPLINK, f"token ID(s) {bad[:5]} outside the vocabulary of {self.vocab_size}"))
        if literal:
            # Device-authored tokens outside the draft are only a guard's placeholder, declared first.
            if len(literal) > MAX_LITERAL_TOKENS:
                out.append(
                    Violation(Area.UPLINK, f"a placeholder of {len(literal)} tokens (at most {MAX_LITERAL_TOKENS})")
                )
            if self.placeholders_declared < 1:
                out.append(Violation(Area.UPLINK, f"Round {msg.seq} carries a placeholder no guard decision declared"))
        if commit_ids:
            # A commit is the device's pick among the cloud's own candidates, so it can carry nothing else.
            if self.candidates is None:
                out.append(Violation(Area.UPLINK, "a commit was sent with no steering candidates outstanding"))
            elif tuple(commit_ids) not in self.candidates:
                out.append(Violation(Area.UPLINK, "the commit is not one of the last downlink's candidates"))
        count = self._count_up(payload)

        def commit() -> None:
            count()
            self.last_seq = max(self.last_seq, msg.seq)
            self.awaiting, self.awaiting_draft = msg.seq, len(draft)
            self.candidates = None
            self.rounds += 1
            if literal and self.placeholders_declared:
                self.placeholders_declared -= 1

        return out, commit

    def _close(self, msg: pb.Close, payload: bytes, out: list[Violation]) -> tuple[list[Violation], Callable[[], None]]:
        if self.phase is Phase.BEGUN:
            out.append(Violation(Area.SESSION, "a Close before the session's Open"))
        if msg.seq != self.last_seq + 1:
            out.append(Violation(Area.SESSION, f"Close seq {msg.seq} does not follow the last round {self.last_seq}"))
        count = self._count_up(payload)

        def commit() -> None:
            count()
            if self.phase is not Phase.FELL_BACK:
                self.phase = Phase.CLOSED

        return out, commit

    # -- downlinks -------------------------------------------------------------------------------

    def examine_downlink(self, payload: bytes) -> tuple[list[Violation], Callable[[], None]]:
        out: list[Violation] = []

        def count() -> None:
            self.downlink_bytes += len(payload)

        try:
            msg = pb.Downlink.FromString(payload)
        except DecodeError:
            return [Violation(Area.DOWNLINK, "the bytes do not parse as a Downlink message")], count
        unknown = unknown_fields(msg)
        if unknown:
            out.append(
                Violation(Area.DOWNLINK, f"{len(unknown)} unknown field(s) outside the schema: {', '.join(unknown)}")
            )
        n = len(msg.candidates)
        if n > WIRE_MAX_TOP_K:
            out.append(Violation(Area.DOWNLINK, f"{n} candidates, above the protocol maximum k = {WIRE_MAX_TOP_K}"))
        elif self.phase is not Phase.BEGUN and n > self.k:
            out.append(Violation(Area.DOWNLINK, f"{n} candidates, above the session's k = {self.k}"))
        for i, cand in enumerate(msg.candidates):
            if not 1 <= len(cand.token_ids) <= MAX_CANDIDATE_TOKENS:
                out.append(
                    Violation(
                        Area.DOWNLINK,
                        f"candidate {i} has {len(cand.token_ids)} tokens (1 to {MAX_CANDIDATE_TOKENS} allowed)",
                    )
                )
            bad = _out_of_vocab(list(cand.token_ids), self.vocab_size)
            if bad:
                out.append(Violation(Area.DOWNLINK, f"candidate {i} has token ID(s) {bad[:5]} outside the vocabulary"))
            if not math.isfinite(cand.value):
                out.append(Violation(Area.DOWNLINK, f"candidate {i} has a non-finite value {cand.value}"))
        problem = wire.fusion_violation(msg, fusion=self.fusion, vocab_size=self.vocab_size)
        if problem is not None:
            out.append(Violation(Area.DOWNLINK, problem))
        if self.awaiting is None:
            out.append(Violation(Area.SESSION, f"downlink seq {msg.seq} answers no outstanding round"))
        elif msg.seq != self.awaiting:
            out.append(
                Violation(Area.SESSION, f"downlink seq {msg.seq} does not answer the outstanding round {self.awaiting}")
            )
        elif msg.accepted > self.awaiting_draft:
            out.append(Violation(Area.DOWNLINK, f"accepted {msg.accepted} of a {self.awaiting_draft}-token draft"))

        def commit() -> None:
            count()
            if self.awaiting is not None and msg.seq == self.awaiting:
                self.awaiting = None
            self.candidates = frozenset(tuple(c.token_ids) for c in msg.candidates) or None
            if msg.HasField("fusion"):
                self.candidates = ANY_ONE_TOKEN

        return out, commit

    # -- device-local records --------------------------------------------------------------------

    def examine_fallback(self, reason: str) -> tuple[list[Violation], Callable[[], None]]:
        out = [Violation(Area.SESSION, f"a fallback after the session {self.phase.value}")] if self.ended else []

        def commit() -> None:
            if not self.ended:
                self.phase, self.fallback_reason = Phase.FELL_BACK, reason

        return out, commit

    def examine_guard(self, decision: str, count: int, placeholder: str) -> tuple[list[Violation], Callable[[], None]]:
        out = [Violation(Area.SESSION, f"a guard decision after the session {self.phase.value}")] if self.ended else []

        def commit() -> None:
            self.guard[(decision, placeholder)] += count
            if decision == GUARD_PLACEHOLDER:
                self.placeholders_declared += count

        return out, commit

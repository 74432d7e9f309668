"""The one session contract: the state machine over a session's rounds, and the byte-level checks.

`RoundContract` is the order of a session (Open, Rounds numbered 1, 2, ... each answered before the
next, a commit that is exactly one of the last steering candidates, a recovery after a rejected
draft, every round a full-slot `PaddedRound` if the session declared padded frames and only then,
Close) and the bounds of each round (K, commit and placeholder lengths, the vocabulary). The server
(`server.session.CloudSession`, `server.service`), the device's live recorder (`audit.recorder`) and
`audit verify` all follow sessions with it, so the contract is written once.

`SessionState` adds what only a recorder of bytes can check: an uplink must parse as `Uplink` with
no unknown field at any depth and re-serialize deterministically to the very same bytes, carry
declared parameters inside their bounds, and a placeholder (`literal_ids`) only after a guard
decision declared it. A downlink must answer the outstanding round with at most k candidates
(k = min(declared top-k, the session's cap), the cap at most the protocol maximum), each 1 to
`MAX_CANDIDATE_TOKENS` in-vocabulary tokens with a finite value; or, only in a session that declared
method fusion, one dense fusion vector of exactly one finite float32 per vocabulary entry
(token-level fusion's real downlink, bounded by the vocabulary), after which the commit may be any
single token. `examine_uplink(payload)` and
`examine_downlink(payload)` return the violations they find and a `commit` that advances the state:
the recorder commits only a clean message (and blocks a dirty uplink), the verifier always commits
so one bad record does not hide the next.

A resumed Open (`resume_ids`, a generation continuing after its verifier was lost) may carry only
what an earlier session of the same log, with the same prompt, already sent up and had committed:
its own resumed tokens, then each answered round's commit, placeholder and accepted draft, and the
commit and placeholder of a round left unanswered (`SessionState.sent_text`). So a resume can carry
no token the device had not sent before, least of all a span the guard held back.

A Close may carry a witness request (the device's audit-log checkpoint, bounded field by field:
`core.wire.witness_violation`); then, and only then, one downlink with the Close's seq may answer
it with a cosignature, alone.

Every `Violation` says whether the message is malformed (`Breach.MALFORMED`: the server answers
INVALID_ARGUMENT) or out of order (`Breach.ORDER`: FAILED_PRECONDITION).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from google.protobuf.message import DecodeError

from specsteer.core import wire
from specsteer.core.errors import ProtocolError
from specsteer.core.limits import MAX_GUARD_SPANS, MAX_VOCAB_SIZE, WIRE_MAX_TOP_K, resume_length_problem
from specsteer.core.session_types import (
    ANY_ONE_TOKEN,
    MAX_CANDIDATE_TOKENS,
    MAX_LITERAL_TOKENS,
    AnyOneToken,
    GuardDecision,
    Method,
)
from specsteer.core.wire import pb, unknown_fields

__all__ = [
    "NO_SESSION",
    "SECOND_OPEN",
    "Area",
    "Breach",
    "ContractError",
    "GuardDecision",
    "Phase",
    "RoundContract",
    "SessionState",
    "Violation",
]


class Area(StrEnum):
    UPLINK = "uplinks"
    DOWNLINK = "downlinks"
    SESSION = "session structure"


class Breach(StrEnum):
    MALFORMED = "malformed"  # the message itself is wrong
    ORDER = "order"  # a well-formed message at the wrong point of the session


@dataclass(frozen=True)
class Violation:
    area: Area
    message: str
    breach: Breach | None = None  # None: MALFORMED, or ORDER for the session structure

    @property
    def kind(self) -> Breach:
        if self.breach is not None:
            return self.breach
        return Breach.ORDER if self.area is Area.SESSION else Breach.MALFORMED


class ContractError(ProtocolError):
    """A message the session contract refuses; carries the first violation."""

    def __init__(self, violation: Violation) -> None:
        super().__init__(violation.message)
        self.violation = violation


def raise_first(violations: Sequence[Violation]) -> None:
    if violations:
        raise ContractError(violations[0])


NO_SESSION = "no session is open on this stream (unknown session)"
SECOND_OPEN = "a second Open on one stream: a stream carries exactly one session"


class Phase(StrEnum):
    BEGUN = "begun"  # no Open yet
    OPEN = "open"
    CLOSED = "closed"  # Close sent
    FELL_BACK = "fell back"  # device finished locally


# What a recorded guard decision may say: the device's decisions, and the names earlier versions
# wrote ("redact", "filter"), so that their logs still verify. A fixed set, never free text: an
# identifier of the device's choosing could spell out the span it stands for.
RECORDED_GUARD_DECISIONS = frozenset({*GuardDecision, "redact", "filter"})
PROMPT_DECISIONS = frozenset({GuardDecision.PROMPT_REDACT, GuardDecision.PROMPT_ALLOW})


def guard_decision_violations(decision: str, count: int) -> list[Violation]:
    """What is wrong with a guard decision record's `decision` and span `count`, if anything."""
    out = []
    if decision not in RECORDED_GUARD_DECISIONS:
        allowed = ", ".join(sorted(RECORDED_GUARD_DECISIONS))
        out.append(Violation(Area.SESSION, f"guard decision {decision!r} is none of the decisions ({allowed})"))
    if not 0 <= count <= MAX_GUARD_SPANS:
        out.append(
            Violation(Area.SESSION, f"a guard decision counts {count} spans; a session holds at most {MAX_GUARD_SPANS}")
        )
    return out


def _outside(ids: Iterable[int], vocab_size: int | None, what: str) -> list[Violation]:
    problem = wire.vocabulary_violation(ids, vocab_size, what)
    return [] if problem is None else [Violation(Area.UPLINK, problem)]


@dataclass
class RoundContract:
    """The state machine over one session's rounds; `*_violations` only look, `after_*` advance.

    `vocab_size=None` skips the vocabulary (a caller that parsed with `core.wire` already checked it);
    `placeholders` counts guard-declared placeholders when the caller sees guard decisions (the
    device and its auditor), and is None where it cannot (the server).
    """

    vocab_size: int | None = None
    phase: Phase = Phase.BEGUN
    draft_len: int = 0
    padded: bool = False
    last_seq: int = 0  # the last Round's seq
    awaiting: int | None = None  # seq of a round not yet answered
    awaiting_draft: int = 0
    # The last steering vector's candidates, until committed (ANY_ONE_TOKEN after a dense fusion vector).
    candidates: frozenset[tuple[int, ...]] | AnyOneToken | None = None
    must_commit: bool = False  # the last round rejected a draft token (or drafted none): recover
    rounds: int = 0
    placeholders: int | None = None
    awaiting_cosignature: int | None = None  # seq of a Close whose witness request is not yet answered

    @property
    def ended(self) -> bool:
        return self.phase in (Phase.CLOSED, Phase.FELL_BACK)

    def after_end(self, what: str) -> Violation:
        if self.phase is Phase.CLOSED:
            return Violation(Area.SESSION, f"{what} after Close: after the session closed, the stream is over")
        return Violation(Area.SESSION, f"{what} after the session {self.phase.value}")

    # -- Open --------------------------------------------------------------------------------------

    def open_violations(self) -> list[Violation]:
        return [] if self.phase is Phase.BEGUN else [Violation(Area.SESSION, SECOND_OPEN)]

    def after_open(self, draft_len: int, padded: bool) -> None:
        if self.phase is Phase.BEGUN:
            self.phase, self.draft_len, self.padded = Phase.OPEN, draft_len, padded

    # -- Rounds ------------------------------------------------------------------------------------

    def next_frame(self, commit: Sequence[int], draft: Sequence[int], literal: Sequence[int] = ()) -> wire.RoundFrame:
        """The next round as an in-process caller (no wire) would send it."""
        slots = wire.padded_slots(self.draft_len) if self.padded else None
        return wire.RoundFrame(self.last_seq + 1, tuple(commit), tuple(draft), tuple(literal), slots=slots)

    def round_violations(self, frame: wire.RoundFrame) -> list[Violation]:
        out: list[Violation] = []
        if self.phase is Phase.BEGUN:
            out.append(Violation(Area.SESSION, f"{NO_SESSION}: send Open first"))
        elif self.ended:
            out.append(self.after_end("a Round"))
        seq = frame.seq
        if seq != self.last_seq + 1:
            what = "a gap" if seq > self.last_seq + 1 else "a repeat or reordering"
            out.append(
                Violation(
                    Area.SESSION,
                    f"round seq {seq} where {self.last_seq + 1} was expected ({what}): "
                    "rounds are numbered from 1 without gaps",
                )
            )
        if self.awaiting is not None:
            out.append(Violation(Area.SESSION, f"Round {seq} was sent before round {self.awaiting} was answered"))
        if self.phase is Phase.OPEN:
            out.extend(self._padding(frame))
            if len(frame.draft) > self.draft_len:
                out.append(
                    Violation(
                        Area.UPLINK,
                        f"the draft has {len(frame.draft)} tokens, more than the declared K = {self.draft_len}",
                    )
                )
        if len(frame.commit) > MAX_CANDIDATE_TOKENS:
            out.append(Violation(Area.UPLINK, f"a commit has at most {MAX_CANDIDATE_TOKENS} tokens"))
        if len(frame.literal) > MAX_LITERAL_TOKENS:
            out.append(Violation(Area.UPLINK, f"a placeholder has at most {MAX_LITERAL_TOKENS} tokens"))
        out += _outside(frame.commit, self.vocab_size, "commit")
        out += _outside(frame.draft, self.vocab_size, "draft")
        out += _outside(frame.literal, self.vocab_size, "placeholder")
        if frame.literal and self.placeholders is not None and self.placeholders < 1:
            # Device-authored tokens outside the draft are only a guard's placeholder, declared first.
            out.append(Violation(Area.UPLINK, f"Round {seq} carries a placeholder no guard decision declared"))
        if frame.commit:
            # A commit is the device's pick among the cloud's own candidates, so it can carry nothing else.
            if self.candidates is None:
                out.append(
                    Violation(Area.UPLINK, "a commit was sent with no steering candidates outstanding", Breach.ORDER)
                )
            elif tuple(frame.commit) not in self.candidates:
                out.append(
                    Violation(
                        Area.UPLINK,
                        "the commit is not one of the last steering candidates (not one of the last downlink's)",
                        Breach.ORDER,
                    )
                )
        elif self.must_commit and not frame.literal:
            out.append(
                Violation(
                    Area.UPLINK,
                    "the last round rejected the draft, so this round must commit a recovery token",
                    Breach.ORDER,
                )
            )
        return out

    def _padding(self, frame: wire.RoundFrame) -> list[Violation]:
        expected = wire.padded_slots(self.draft_len) if self.padded else None
        if frame.slots == expected:
            return []
        if frame.slots is None:
            why = f"Round {frame.seq} is not padded, but the session declared padded frames: "
            why += "every round must be a PaddedRound"
        elif expected is None:
            why = f"PaddedRound {frame.seq}: a PaddedRound in a session that did not declare padded frames"
        else:
            why = f"a padded round fills exactly {expected} (commit, draft, placeholder) slots; got {frame.slots}"
        return [Violation(Area.UPLINK, why)]

    def after_round(self, frame: wire.RoundFrame) -> None:
        self.last_seq = max(self.last_seq, frame.seq)
        self.awaiting, self.awaiting_draft = frame.seq, len(frame.draft)
        self.candidates = None
        self.must_commit = False
        self.rounds += 1
        if frame.literal and self.placeholders:
            self.placeholders -= 1

    # -- answers (downlinks) -----------------------------------------------------------------------

    def cosignature_violations(self, seq: int) -> list[Violation]:
        """A cosignature answers only the Close that asked for one (same seq), and only once."""
        if self.awaiting_cosignature is None:
            return [Violation(Area.SESSION, f"downlink seq {seq} carries a cosignature no Close asked for")]
        if seq != self.awaiting_cosignature:
            return [
                Violation(
                    Area.SESSION,
                    f"cosignature seq {seq} does not answer the Close {self.awaiting_cosignature} that asked for it",
                )
            ]
        return []

    def after_cosignature(self) -> None:
        self.awaiting_cosignature = None

    def answer_violations(self, seq: int, accepted: int) -> list[Violation]:
        if self.awaiting is None:
            return [Violation(Area.SESSION, f"downlink seq {seq} answers no outstanding round")]
        if seq != self.awaiting:
            return [
                Violation(Area.SESSION, f"downlink seq {seq} does not answer the outstanding round {self.awaiting}")
            ]
        if accepted > self.awaiting_draft:
            return [Violation(Area.DOWNLINK, f"accepted {accepted} of a {self.awaiting_draft}-token draft")]
        return []

    def after_answer(
        self, seq: int, accepted: int, candidates: Iterable[Sequence[int]], *, fusion_vector: bool = False
    ) -> None:
        """Record the answer; a dense fusion vector (token-level fusion) lets the commit be any one token."""
        drafted = self.awaiting_draft
        if self.awaiting is not None and seq == self.awaiting:
            self.awaiting = None
        self.candidates = ANY_ONE_TOKEN if fusion_vector else (frozenset(tuple(c) for c in candidates) or None)
        # With candidates out, a rejected (or empty) draft obliges the next round to recover.
        self.must_commit = self.candidates is not None and (accepted < drafted or drafted == 0)

    # -- Close and local ends ----------------------------------------------------------------------

    def close_violations(self, seq: int) -> list[Violation]:
        out: list[Violation] = []
        if self.phase is Phase.BEGUN:
            out.append(Violation(Area.SESSION, f"{NO_SESSION}: nothing to Close"))
        elif self.phase is Phase.CLOSED:
            out.append(self.after_end("a Close"))
        if seq != self.last_seq + 1:
            out.append(
                Violation(
                    Area.SESSION,
                    f"Close seq {seq} where {self.last_seq + 1} was expected: it does not follow the last round "
                    f"{self.last_seq}",
                )
            )
        return out

    def after_close(self, seq: int | None = None, *, witness: bool = False) -> None:
        """`witness`: the Close carried a witness request, so one cosignature may answer it."""
        if self.phase is not Phase.FELL_BACK:
            self.phase = Phase.CLOSED
        if witness and seq is not None:
            self.awaiting_cosignature = seq


@dataclass
class SessionState:
    """What one session has declared and done so far, followed from its recorded bytes."""

    session_id: str
    vocab_size: int
    max_top_k: int
    top_k: int = 0
    uplink_bytes: int = 0
    downlink_bytes: int = 0
    fallback_reason: str | None = None
    notes: list[str] = field(default_factory=list)
    # Guard decisions by (decision, placeholder).
    guard: Counter[tuple[str, str]] = field(default_factory=Counter)
    fusion: bool = False  # the session declared method fusion: dense fusion vectors may come down
    rounds_contract: RoundContract = field(init=False)
    # What the Open declared, and the committed text as this session's verifier saw it (`sent_text`).
    prompt: tuple[int, ...] = ()
    resumed: tuple[int, ...] = ()
    committed: list[int] = field(default_factory=list)
    unanswered: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # the last round's (commit + placeholder, draft)

    def __post_init__(self) -> None:
        self.rounds_contract = RoundContract(vocab_size=self.vocab_size, placeholders=0)

    @property
    def phase(self) -> Phase:
        return self.rounds_contract.phase

    @property
    def ended(self) -> bool:
        return self.rounds_contract.ended

    @property
    def rounds(self) -> int:
        return self.rounds_contract.rounds

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
        if vocab_size > MAX_VOCAB_SIZE:
            return [
                Violation(
                    Area.SESSION,
                    f"the session declares a vocabulary of {vocab_size:,} tokens, above the protocol maximum "
                    f"{MAX_VOCAB_SIZE:,}: with it, IDs that are no model's tokens would pass as token IDs",
                )
            ]
        return []

    # -- uplinks ---------------------------------------------------------------------------------

    def sent_text(self) -> list[tuple[int, ...]]:
        """What a session resuming this one may carry: the committed text as this session's
        verifier saw it, with and without the commit and placeholder of a round left unanswered.
        Nothing for a session that closed: the device resumes only a session it lost."""
        if self.phase is Phase.CLOSED:
            return []
        text = (*self.resumed, *self.committed)
        if self.unanswered is None or not self.unanswered[0]:
            return [text]
        return [text, (*text, *self.unanswered[0])]

    def examine_uplink(
        self, payload: bytes, earlier: Collection[SessionState] = ()
    ) -> tuple[list[Violation], Callable[[], None]]:
        """`earlier`: the log's other sessions so far, which a resumed Open must continue."""
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
        if kind == "open":
            return self._open(msg.open, payload, out, earlier)
        if kind == "round":
            return self._round(wire.round_frame(msg.round), payload, out)
        if kind == "padded_round":
            p = msg.padded_round
            try:
                frame = wire.padded_frame(p)
            except ProtocolError as exc:  # a token after padding: checked as an empty round from here
                out.append(Violation(Area.UPLINK, str(exc)))
                frame = wire.RoundFrame(
                    p.seq, (), (), (), slots=(len(p.commit_ids), len(p.draft_ids), len(p.literal_ids))
                )
            return self._round(frame, payload, out)
        out += self.rounds_contract.close_violations(msg.close.seq)
        witness = msg.close.HasField("witness")
        problem = wire.witness_violation(msg.close.witness) if witness else None
        if problem is not None:
            out.append(Violation(Area.UPLINK, f"the Close's witness request is malformed: {problem}"))
        count = self._count_up(payload)

        def commit() -> None:
            count()
            self.rounds_contract.after_close(msg.close.seq, witness=witness)
            if self.phase is Phase.CLOSED:  # never resumed (`sent_text`): a long-lived recorder keeps no text
                self.committed, self.resumed, self.unanswered = [], (), None

        return out, commit

    def _count_up(self, payload: bytes) -> Callable[[], None]:
        def commit() -> None:
            self.uplink_bytes += len(payload)

        return commit

    def _open(
        self, msg: pb.Open, payload: bytes, out: list[Violation], earlier: Collection[SessionState]
    ) -> tuple[list[Violation], Callable[[], None]]:
        if self.ended:
            out.append(self.rounds_contract.after_end("an uplink open"))
        else:
            out += self.rounds_contract.open_violations()
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
        out += _outside(msg.prompt_ids, self.vocab_size, "prompt")
        prompt, resumed = tuple(msg.prompt_ids), tuple(msg.resume_ids)
        if resumed:
            out += _outside(resumed, self.vocab_size, "resumed text")
            problem = resume_length_problem(len(resumed))
            if problem is not None:
                out.append(Violation(Area.UPLINK, problem))
            elif not any(s.prompt == prompt and resumed in s.sent_text() for s in earlier if s is not self):
                out.append(
                    Violation(
                        Area.UPLINK,
                        f"the Open resumes {len(resumed)} token(s) that no earlier session of this log with the "
                        "same prompt sent up and committed: a resume may carry nothing that had not gone up",
                    )
                )
        count = self._count_up(payload)

        def commit() -> None:
            count()
            if self.phase is Phase.BEGUN:
                self.top_k, self.fusion = top_k, fusion
                self.prompt, self.resumed = prompt, resumed
            self.rounds_contract.after_open(draft_len, padded)

        return out, commit

    def _round(
        self, frame: wire.RoundFrame, payload: bytes, out: list[Violation]
    ) -> tuple[list[Violation], Callable[[], None]]:
        out += self.rounds_contract.round_violations(frame)
        count = self._count_up(payload)

        def commit() -> None:
            count()
            if self.rounds_contract.awaiting is None:  # a round out of turn is not the text
                self.unanswered = ((*frame.commit, *frame.literal), frame.draft)
            self.rounds_contract.after_round(frame)

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
        if msg.SerializeToString(deterministic=True) != payload:
            # A field repeated in the bytes parses to its last value: the bytes before it could carry
            # anything while the message they parse to is a bounded top-k verdict.
            out.append(
                Violation(Area.DOWNLINK, "the bytes are not the deterministic serialization of what they parse to")
            )
        if msg.HasField("cosignature"):
            # The witness's answer to a Close: checked as that, never as a round's verdict.
            problem = wire.cosignature_violation(msg)
            if problem is not None:
                out.append(Violation(Area.DOWNLINK, problem))
            out += self.rounds_contract.cosignature_violations(msg.seq)

            def commit_cosignature() -> None:
                count()
                self.rounds_contract.after_cosignature()

            return out, commit_cosignature
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
            problem = wire.vocabulary_violation(cand.token_ids, self.vocab_size, f"candidate {i}")
            if problem is not None:
                out.append(Violation(Area.DOWNLINK, problem))
            if not math.isfinite(cand.value):
                out.append(Violation(Area.DOWNLINK, f"candidate {i} has a non-finite value {cand.value}"))
        problem = wire.fusion_violation(msg, fusion=self.fusion, vocab_size=self.vocab_size)
        if problem is not None:
            out.append(Violation(Area.DOWNLINK, problem))
        out += self.rounds_contract.answer_violations(msg.seq, msg.accepted)

        def commit() -> None:
            count()
            if self.unanswered is not None and self.rounds_contract.awaiting == msg.seq:
                prefix, draft = self.unanswered
                self.committed += [*prefix, *draft[: msg.accepted]]
                self.unanswered = None
            self.rounds_contract.after_answer(
                msg.seq, msg.accepted, [c.token_ids for c in msg.candidates], fusion_vector=msg.HasField("fusion")
            )

        return out, commit

    # -- device-local records --------------------------------------------------------------------

    def examine_fallback(self, reason: str) -> tuple[list[Violation], Callable[[], None]]:
        out = [Violation(Area.SESSION, f"a fallback after the session {self.phase.value}")] if self.ended else []

        def commit() -> None:
            if not self.ended:
                self.rounds_contract.phase, self.fallback_reason = Phase.FELL_BACK, reason

        return out, commit

    def examine_guard(self, decision: str, count: int, placeholder: str) -> tuple[list[Violation], Callable[[], None]]:
        out = [Violation(Area.SESSION, f"a guard decision after the session {self.phase.value}")] if self.ended else []
        out += guard_decision_violations(decision, count)
        if decision in PROMPT_DECISIONS and (self.phase is not Phase.OPEN or self.rounds):
            # A decision about the prompt is made before the Open goes up and recorded right after
            # it: one after a round could not have shaped the Open it claims to describe.
            when = "before the Open" if self.phase is Phase.BEGUN else f"after round {self.rounds}"
            out.append(
                Violation(Area.SESSION, f"a prompt guard decision ({decision}) {when}: it belongs right after the Open")
            )

        def commit() -> None:
            self.guard[(decision, placeholder)] += count
            if decision == GuardDecision.PLACEHOLDER and self.rounds_contract.placeholders is not None:
                self.rounds_contract.placeholders += count

        return out, commit

"""Reading what the privacy tools measure: raw dataset users, canary registries, and uplinks.

* `read_users` reads the dataset (`privacy.profile_format`, the format's one reader) and keeps each
  user's entries as stored, *with* the `trailers` that `sdk.context.Profile` drops: they are the
  real names and emails the leakage report looks for in the uplink.
* `read_canaries` / `write_canaries` keep the canaries planted for an exposure test.
* `read_uplinks` reconstructs, per device session, what the cloud received, from the device's
  audit log (which holds the exact uplink bytes), optionally restricted to the uplinks a server
  transcript says arrived (the transcript holds only their hashes).

Every user-facing failure is a `PrivacyError` with one sentence naming the file.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.message import DecodeError

from specsteer.audit import records
from specsteer.audit.errors import AuditError
from specsteer.audit.log import scan_log
from specsteer.audit.transcript import read_transcript
from specsteer.core import wire
from specsteer.core.contract import PROMPT_DECISIONS
from specsteer.core.errors import ProfileError, ProtocolError
from specsteer.core.fileio import atomic_write
from specsteer.core.wire import pb
from specsteer.privacy import profile_format
from specsteer.privacy.errors import PrivacyError
from specsteer.privacy.leakage import CanarySpace
from specsteer.privacy.profile_format import DatasetUser

__all__ = [
    "CANARY_FORMAT",
    "Canary",
    "DatasetUser",
    "PrivacyError",
    "UplinkSession",
    "read_canaries",
    "read_uplinks",
    "read_users",
    "write_canaries",
]

CANARY_FORMAT = "specsteer-canaries/1"


def read_users(path: str | Path) -> list[DatasetUser]:
    """The users of a dataset file (one user object a line), of one user object or of a profile
    file, sealed or not (`privacy.profile_format.read_users`, with the environment's key)."""
    try:
        return profile_format.read_users(path, what="the data file")
    except ProfileError as exc:
        raise PrivacyError(str(exc)) from None


@dataclass(frozen=True)
class Canary:
    user_id: str | None
    secret: str


def write_canaries(path: str | Path, space: CanarySpace, canaries: Sequence[Canary]) -> None:
    """Keep the planted canaries (the secret is what the test looks for; keep the file private)."""
    data = {
        "format": CANARY_FORMAT,
        "space": space.as_dict(),
        "canaries": [{"user_id": c.user_id, "secret": c.secret} for c in canaries],
    }
    atomic_write(path, json.dumps(data, indent=1) + "\n")  # 0600: the secrets are the test's answer


def read_canaries(path: str | Path) -> tuple[CanarySpace, list[Canary]]:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PrivacyError(f"the canary file {p} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PrivacyError(f"cannot read the canary file {p}: {getattr(exc, 'strerror', None) or exc}") from None
    if not isinstance(data, dict) or data.get("format") != CANARY_FORMAT:
        raise PrivacyError(f'the canary file {p} is not a "{CANARY_FORMAT}" file')
    try:
        space = CanarySpace(**data["space"])
        canaries = [Canary(c.get("user_id"), str(c["secret"])) for c in data["canaries"]]
        for c in canaries:
            space.render(c.secret)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PrivacyError(f"the canary file {p} is malformed ({exc})") from None
    return space, canaries


@dataclass
class UplinkSession:
    """What the cloud received in one device session, rebuilt from the audit log."""

    session_id: str
    prompt_ids: list[int] = field(default_factory=list)
    vocab_size: int | None = None  # from the session-begin record: the Specialist's vocabulary
    # (commit_ids + literal_ids, draft_ids): what the cloud committed before the draft, and the draft
    rounds: list[tuple[list[int], list[int]]] = field(default_factory=list)
    accepted: list[int | None] = field(default_factory=list)  # per round, from its downlink
    round_sizes: list[int] = field(default_factory=list)  # bytes of each Round uplink
    uplink_bytes: int = 0
    # The device's decisions about the prompt's spans ("prompt-redact", "prompt-allow"): span counts.
    prompt_decisions: Counter[str] = field(default_factory=Counter)

    def committed_ids(self) -> list[int]:
        """The text both sides committed: each round's commit plus the accepted part of its draft."""
        out: list[int] = []
        for (commit, draft), n in zip(self.rounds, self.accepted, strict=True):
            out += commit + (draft if n is None else draft[:n])
        return out

    def views(self, context: int = 32) -> list[list[int]]:
        """Every token sequence the cloud saw: the committed text, and each rejected draft tail
        after the `context` committed tokens it continued from."""
        return [ids for ids, _ in self.new_views(context)]

    def new_views(self, context: int = 32) -> list[tuple[list[int], int]]:
        """`views` with, for each, where what it adds begins: 0 for the committed text, the
        length of the repeated context for a rejected draft (a count over views counts only what
        touches that new part, or one name before two rejected drafts is counted three times)."""
        out: list[tuple[list[int], int]] = []
        committed: list[int] = []
        for (commit, draft), n in zip(self.rounds, self.accepted, strict=True):
            committed = committed + commit
            k = len(draft) if n is None else n
            if k < len(draft):
                before = committed[-context:] if context else []
                out.append((before + draft, len(before) + k))
            committed = committed + draft[:k]
        return [(committed, 0), *out]

    def device_tokens(self) -> list[list[int]]:
        """Only what the device authored (commits and drafts, no prompt), round by round."""
        return [commit + draft for commit, draft in self.rounds]


@dataclass
class UplinkLog:
    sessions: list[UplinkSession]
    guard: Counter[tuple[str, str]]  # (decision, placeholder) -> spans, from guard-decision records
    problems: list[str]
    logged: int = 0  # uplink records in the log
    received: int = 0  # of them, those counted (all of them without a server transcript)


def read_uplinks(log_dir: str | Path, *, server_transcript: str | Path | None = None) -> UplinkLog:
    """Sessions rebuilt from an audit log; with a transcript, only uplinks the server logged receiving."""
    try:
        scan = scan_log(Path(log_dir))
    except AuditError as exc:
        raise PrivacyError(str(exc)) from None
    except OSError as exc:
        raise PrivacyError(f"cannot read the audit log {log_dir}: {exc.strerror or exc}") from None
    received: set[str] | None = None
    problems = list(scan.problems)
    if server_transcript is not None:
        try:
            transcript = read_transcript(Path(server_transcript))
        except AuditError as exc:
            raise PrivacyError(str(exc)) from None
        received = {e.sha256 for entries in transcript.streams.values() for e in entries}
        problems += transcript.problems
    sessions: dict[str, UplinkSession] = {}
    pending: dict[str, dict[int, int]] = {}  # session -> round seq -> index into rounds
    guard: Counter[tuple[str, str]] = Counter()
    logged = kept = 0
    for stored in scan.records:
        try:
            rec = records.parse(stored.data)
        except AuditError as exc:
            problems.append(f"{stored.where()}: {exc}")
            continue
        sid = rec.session
        if sid is None:
            continue
        session = sessions.setdefault(sid, UplinkSession(sid))
        if rec.kind == records.KIND_BEGIN:
            session.vocab_size = rec.fields["vocab_size"]
        elif rec.kind == records.KIND_GUARD:
            guard[(rec.fields["decision"], rec.fields["placeholder"])] += rec.fields["count"]
            if rec.fields["decision"] in PROMPT_DECISIONS:
                session.prompt_decisions[rec.fields["decision"]] += rec.fields["count"]
        elif rec.kind == records.KIND_UPLINK:
            logged += 1
            if received is not None and rec.fields["sha256"] not in received:
                continue
            kept += 1
            payload = rec.payload or b""
            try:
                msg = pb.Uplink.FromString(payload)
            except DecodeError:
                problems.append(f"{stored.where()}: an uplink that does not parse")
                continue
            session.uplink_bytes += len(payload)
            kind = msg.WhichOneof("kind")
            if kind == "open":
                session.prompt_ids = list(msg.open.prompt_ids)
            elif kind in ("round", "padded_round"):
                try:
                    frame = wire.decode_uplink(payload)
                except ProtocolError as exc:
                    problems.append(f"{stored.where()}: {exc}")
                    continue
                assert isinstance(frame, wire.RoundFrame)
                pending.setdefault(sid, {})[frame.seq] = len(session.rounds)
                # A guard placeholder is committed by the cloud right after the commit: one prefix.
                session.rounds.append(([*frame.commit, *frame.literal], list(frame.draft)))
                session.accepted.append(None)
                session.round_sizes.append(len(payload))
        elif rec.kind == records.KIND_DOWNLINK:
            try:
                down = pb.Downlink.FromString(rec.payload or b"")
            except DecodeError:
                continue
            index = pending.get(sid, {}).pop(down.seq, None)
            if index is not None:
                session.accepted[index] = min(down.accepted, len(session.rounds[index][1]))
    return UplinkLog([s for s in sessions.values() if s.rounds or s.prompt_ids], guard, problems, logged, kept)

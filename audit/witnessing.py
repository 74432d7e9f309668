"""`audit verify`'s checks of the witness exchange: what a Close carried up, and what came back.

Two checks over a parsed log (docs/audit-format.md, section 8):

- `request_failures`: every Close's witness request must be the log's own state at that point:
  its origin and key the header's, a size covering only records before the Close, the root of
  those records, a signature that verifies under the log key, a proof from 0 or a size cosigned
  earlier in the log that verifies. So the request carries nothing the log does not already say.
- `cosignature_check`: with the auditor's witness keys, every cosignature by one of them (in
  checkpoints.jsonl, and in the downlinks that answered the Closes) must verify, and each
  cosigned checkpoint must match the records as presented; a witness key with no valid
  cosignature fails, and so does a log that no longer holds what the witness's own state says it
  cosigned. A rewrite, truncation or rollback of cosigned records therefore fails even when the
  log key's holder re-signed everything. A cosignature dated outside its exchange (the Close's and
  the answer's record times, give or take `COSIGNATURE_SKEW_S`; never time 0) vouches for nothing
  and fails (`audit.cosignature.time_problem`).
- `unwitnessed_records`: the records after the last checkpoint the witnesses cosigned. Only the
  device's key vouches for them: a key holder can append sessions there and re-sign, so a session
  that lies wholly or partly there leaves `audit verify` at UNPROVEN, never VERIFIED.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specsteer.audit import merkle, records
from specsteer.audit.cosignature import WitnessKey, cosignatures, time_problem
from specsteer.audit.errors import AuditError, NoteError, ProofError
from specsteer.audit.log import StoredCheckpoint
from specsteer.audit.note import Checkpoint, VerifierKey
from specsteer.audit.rotation import KeyChain
from specsteer.audit.witness_state import WitnessedLog, WitnessState
from specsteer.core import wire


@dataclass(frozen=True)
class ParsedRecord:
    position: int
    record: records.Record | None


@dataclass(frozen=True)
class _Answer:
    """A cosignature downlink and the Close request it answered."""

    position: int
    request: wire.WitnessRequest
    witness: str
    signature: bytes
    close: int  # the position of the Close that asked for it


RootsAt = Callable[[set[int]], dict[int, bytes]]


@dataclass(frozen=True)
class _Request:
    position: int  # the Close's record
    request: wire.WitnessRequest
    earlier: set[int]  # the sizes cosigned before it
    own: int  # how many records the log held after its session's record before the Close


def _exchanges(parsed: Sequence[ParsedRecord]) -> tuple[list[_Request], list[_Answer]]:
    """Every Close's witness request (with the sizes cosigned before it), and every answer."""
    requests: list[_Request] = []
    answers: list[_Answer] = []
    pending: dict[str, tuple[wire.WitnessRequest, int]] = {}
    cosigned: set[int] = set()
    last: dict[str, int] = {}  # each session's latest record so far
    for p in parsed:
        rec = p.record
        if rec is None or rec.session is None:
            continue
        own = last.get(rec.session, -1) + 1
        last[rec.session] = p.position
        if rec.payload is None:
            continue
        if rec.kind == records.KIND_UPLINK:
            request = wire.witness_of(rec.payload)
            if request is not None:
                requests.append(_Request(p.position, request, set(cosigned), own))
                pending[rec.session] = (request, p.position)
        else:
            answer = wire.decode_cosignature(rec.payload)
            asked = pending.pop(rec.session, None)
            if answer is not None and asked is not None:
                answers.append(_Answer(p.position, asked[0], answer.witness, answer.signature, asked[1]))
                cosigned.add(asked[0].size)
    return requests, answers


def request_failures(
    parsed: Sequence[ParsedRecord], key: VerifierKey | None, roots_at: RootsAt, chain: KeyChain | None = None
) -> list[str]:
    """Where a Close's witness request says anything the log itself does not (its key: the one in
    force at the request's size, through the log's key rotations)."""
    requests, _ = _exchanges(parsed)
    if not requests:
        return []
    roots = roots_at({q.request.size for q in requests} | {q.request.old_size for q in requests})
    failures: list[str] = []
    for q in requests:
        position, r, earlier = q.position, q.request, q.earlier
        where = f"record {position} (the Close's witness request)"
        key = chain.key_for(r.size) if chain is not None else key
        if key is None or r.origin != key.name or r.log_key != key.public_key:
            failures.append(f"{where}: names log {r.origin!r} and a key that is not this log's")
            continue
        if r.size > position:
            failures.append(f"{where}: signs {r.size} records, more than the {position} logged before it")
            continue
        # The recorder signs the log as it stands when the session asks to close, after every record
        # of the session's own: only other sessions' records may come between. The cloud sees the
        # size, so a size the device could pick freely would carry log2(position) bits a Close.
        if r.size < q.own:
            failures.append(
                f"{where}: signs {r.size} records, fewer than the {q.own} logged up to its session's own "
                "last record (a size the device chose: the cloud sees it)"
            )
            continue
        checkpoint = Checkpoint(r.origin, r.size, r.root_hash)
        if roots.get(r.size) != r.root_hash:
            failures.append(f"{where}: its root is not the root of the log's first {r.size} records")
        elif not key.verify(checkpoint.body().encode(), r.signature):
            failures.append(f"{where}: its signature does not verify under the log key")
        if r.old_size != 0 and r.old_size not in earlier:
            failures.append(f"{where}: proves from size {r.old_size}, which no earlier cosignature covers")
            continue
        if 0 < r.old_size < r.size:
            try:
                merkle.verify_consistency(r.old_size, r.size, roots[r.old_size], r.root_hash, r.consistency_proof)
            except ProofError as exc:
                failures.append(f"{where}: its consistency proof is not the log's: {exc}")
        elif r.consistency_proof:
            failures.append(f"{where}: carries a consistency proof where none is needed")
    return failures


@dataclass(frozen=True)
class CosignatureResult:
    failures: list[str]
    summaries: list[str]
    # The size every trusted witness cosigned (the smallest of their latest; with a quorum k, the
    # k-th largest): the records from it on are vouched for by the device's key alone, bar the
    # Close that carried it and its answer.
    cosigned_size: int = 0
    # What the cloud did wrong answering Closes: an answer is the verifier's word, not the device's,
    # so a bad one is named as the cloud's and vouches for nothing, but never fails the log.
    cloud: list[str] = field(default_factory=list)


def unwitnessed_records(parsed: Sequence[ParsedRecord], cosigned_size: int) -> list[ParsedRecord]:
    """The records after the last cosigned checkpoint (size `cosigned_size`) that no witness vouches
    for: all of them, except the Close whose request carried that checkpoint and the cosignature
    that answered it (the witness saw that exchange; it cannot sign the records that hold it)."""
    requests, answers = _exchanges(parsed)
    exchange = {r.position for r in requests if r.request.size == cosigned_size}
    exchange |= {a.position for a in answers if a.close in exchange}
    return [p for p in parsed if p.position >= cosigned_size and p.position not in exchange]


def _matches(cp: Checkpoint, n: int, roots: dict[int, bytes], where: str, key: WitnessKey, when: int) -> str | None:
    if cp.size > n:
        return (
            f"{where}: witness {key.name} cosigned size {cp.size} at time {when}, but the log holds only {n} "
            f"records: records {n} to {cp.size - 1} were removed after it was cosigned"
        )
    if roots.get(cp.size) != cp.root:
        return (
            f"{where}: witness {key.name} cosigned size {cp.size} at time {when}, but the log's first {cp.size} "
            "records no longer hash to that root: they were rewritten after it was cosigned"
        )
    return None


def cosignature_check(
    parsed: Sequence[ParsedRecord],
    notes: Sequence[StoredCheckpoint],
    n: int,
    witness_keys: Sequence[WitnessKey],
    log_key: VerifierKey | None,
    roots_at: RootsAt,
    state: WitnessState | None = None,
    devices: Sequence[str] = (),
    quorum: int | None = None,
) -> CosignatureResult:
    """Every cosignature by the auditor's witness keys verified and matched against the records.

    `devices` are whose log this is (the auditor's `--device`, else the names the log binds): the
    witness state's entry for this log must be pinned under one of them. With a `quorum` (a witness
    policy's k), a key without a valid cosignature is no failure (a witness may be down); the
    records are vouched for up to the size k of the keys cosigned.
    """
    requests, answers = _exchanges(parsed)
    failures: list[str] = []
    cloud: list[str] = []
    answered = {a.close for a in answers}
    spoilt: set[WitnessKey] = set()  # keys whose answers the cloud spoilt: their absence is its doing
    withheld = False
    for q in requests:
        if q.position not in answered:
            withheld = True
            cloud.append(
                f"record {q.position}: the Close asked the verifier to cosign size {q.request.size} and no "
                "cosignature came back (withheld, or the stream was cut)"
            )
    summaries: list[str] = []
    times = _record_times(parsed)
    last_time = max(times.values(), default=_LATE)
    found: list[tuple[str, WitnessKey, Checkpoint, int]] = []  # where, by whom, what, when
    dated: dict[tuple[WitnessKey, Checkpoint, int], tuple[float, float]] = {}  # each answer's exchange
    candidates: list[tuple[str, WitnessKey, Checkpoint, int, tuple[float, float] | None]] = []
    for key in witness_keys:
        for a in answers:
            if a.witness != key.name or a.signature[:4] != key.id:
                continue
            where = f"record {a.position} (the cosignature answering a Close)"
            cp = Checkpoint(a.request.origin, a.request.size, a.request.root_hash)
            try:
                when = key.verify(cp.body(), a.signature)
            except NoteError as exc:
                # The downlink is what came over the wire: the verifier's answer, kept as evidence of
                # the cloud's misbehaviour; it vouches for nothing, and the device is not to blame.
                spoilt.add(key)
                cloud.append(
                    f"record {a.position}: the verifier answered the Close with an invalid cosignature "
                    f"(not a valid cosignature of the checkpoint the Close carried: {exc})"
                )
                continue
            window = (times.get(a.close, _EARLY), times.get(a.position, _LATE))
            if time_problem(when, *window) is not None:
                spoilt.add(key)
            dated.setdefault((key, cp, when), window)
            candidates.append((where, key, cp, when, window))
        for stored in notes:
            where = f"checkpoint {stored.number}"
            try:
                candidates.extend((where, key, c.checkpoint, c.timestamp, None) for c in cosignatures(stored.note, key))
            except NoteError as exc:
                failures.append(f"{where}: {exc}: a forged or altered cosignature")
    cloud.extend(
        f"record {a.position}: the verifier answered the Close with a cosignature by {a.witness} (key ID "
        f"{a.signature[:4].hex()}), which is by none of the witness keys given"
        for a in answers
        if all(a.witness != k.name or a.signature[:4] != k.id for k in witness_keys)
    )
    for where, key, cp, when, exchange in candidates:
        # A line of checkpoints.jsonl is dated by the exchange that brought it; one no answer brought,
        # between the newest record it covers and the log's newest record.
        window = exchange or dated.get((key, cp, when)) or (times.get(cp.size - 1, _EARLY), last_time)
        problem = time_problem(when, *window)
        if problem is not None:
            # An answer on the wire is the cloud's word; a line the device kept is the device's.
            (cloud if exchange is not None else failures).append(
                f"{where}: the cosignature of size {cp.size} by {key.name} vouches for nothing: {problem}"
            )
            continue
        found.append((where, key, cp, when))
    state_entry = None
    if state is not None:
        state_entry, problem = _state_entry(state, witness_keys, log_key, devices)
        if problem is not None:
            failures.append(problem)
    sizes = {cp.size for _, _, cp, _ in found} | ({state_entry[1].size} if state_entry else set())
    roots = roots_at({s for s in sizes if s <= n})
    for where, key, cp, when in found:
        if log_key is not None and cp.origin != log_key.name:
            failures.append(f"{where}: witness {key.name} cosigned log {cp.origin!r}, not this log")
            continue
        problem = _matches(cp, n, roots, where, key, when)
        if problem is not None:
            failures.append(problem)
    latest_sizes: list[int] = []
    for key in witness_keys:
        mine = [(cp, when) for _, k, cp, when in found if k == key]
        if not mine:
            latest_sizes.append(0)
            message = (
                f"no checkpoint of this log carries a valid cosignature by witness {key.name}+{key.id.hex()}: "
                "the log was never witnessed by it, or its cosigned checkpoints were removed"
            )
            if quorum is not None or withheld or key in spoilt:
                # Below a quorum the verdict says so (UNPROVEN); an answer the cloud spoilt is its doing.
                summaries.append(message)
            else:
                failures.append(message)
            continue
        latest, when = max(mine, key=lambda x: (x[0].size, x[1]))
        latest_sizes.append(latest.size)
        # One cosignature is usually found twice: in checkpoints.jsonl and in the downlink that brought it.
        count = len({(cp.size, cp.root, t) for cp, t in mine})
        summaries.append(f"{count} cosignature(s) by {key.name}, the latest of size {latest.size} at time {when}")
    if state_entry is not None:
        key, entry = state_entry
        cp = Checkpoint(entry.origin, entry.size, entry.root)
        problem = time_problem(entry.time, times.get(entry.size - 1, _EARLY), max(last_time, time.time()))
        if problem is not None:
            problem = f"the witness's state: its cosignature of size {entry.size} vouches for nothing: {problem}"
        else:
            problem = _matches(cp, n, roots, "the witness's state", key, entry.time)
        if problem is not None:
            failures.append(problem)
        else:
            summaries.append(f"the witness's own record (size {entry.size}) matches the log")
    if quorum is None:
        vouched = min(latest_sizes, default=0)
    else:
        ranked = sorted(latest_sizes, reverse=True)
        vouched = ranked[quorum - 1] if len(ranked) >= quorum else 0
    return CosignatureResult(failures, summaries, vouched, cloud)


_EARLY, _LATE = float("-inf"), float("inf")  # no bound, where a record's time is unreadable


def _record_times(parsed: Sequence[ParsedRecord]) -> dict[int, float]:
    """Each readable record's time (Unix seconds, the device's clock), by position."""
    out: dict[int, float] = {}
    for p in parsed:
        if p.record is not None:
            out[p.position] = records.seconds(p.record.fields["time"])
    return out


def _state_entry(
    state: WitnessState, witness_keys: Sequence[WitnessKey], log_key: VerifierKey | None, devices: Sequence[str]
) -> tuple[tuple[WitnessKey, WitnessedLog] | None, str | None]:
    """The witness's record of this log, if the state is by a key the auditor gave and it verifies.

    The witness pins a log key for one device (the name mutual TLS verified). A state that pins
    this log's key under two names means the witness cosigned one log twice, possibly two
    histories of it (a split view): neither entry can vouch for the log, so that fails. The one
    entry must be under this log's device (`devices`), when known.
    """
    key = next((k for k in witness_keys if str(k) == state.witness), None)
    if key is None:
        return None, f"the witness state is by witness {state.witness}: give that key with --witness-key"
    owners = sorted(d for d, e in state.logs.items() if log_key is not None and _same_key(e.key, log_key))
    if not owners:
        return None, "the witness state holds no checkpoint of this log: the witness never cosigned it"
    if len(owners) > 1:
        sizes = ", ".join(f"{d} (size {state.logs[d].size})" for d in owners)
        return None, (
            f"the witness state pins this log's key under {len(owners)} devices, {sizes}: the witness cosigned "
            "one log under several names, so it may have been shown two histories of it (equivocation, a split "
            "view), and its record vouches for neither"
        )
    owner = owners[0]
    if devices and owner not in devices:
        return None, (
            f"the witness state holds this log's key under device {owner}, but this is the log of "
            f"{', '.join(sorted(set(devices)))}: the witness cosigned it as another device's"
        )
    entry = state.logs[owner]
    recorded = Checkpoint(entry.origin, entry.size, entry.root)
    try:
        if not any(c.checkpoint == recorded for c in cosignatures(entry.note, key)):
            return None, "the witness state's checkpoint carries no cosignature of its own"
    except NoteError as exc:
        return None, f"the witness state's checkpoint does not verify: {exc}"
    return (key, entry), None


def _same_key(text: str, key: VerifierKey) -> bool:
    """Whether a state entry's pinned key is `key`'s Ed25519 key (under whatever log name)."""
    if text == str(key):
        return True
    try:
        return VerifierKey.parse(text).public_key == key.public_key
    except AuditError:
        return False

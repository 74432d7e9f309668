"""`verify`: every check an auditor runs on a device's audit log, as one `Report`.

`verify(...)` returns the report only when every check holds and raises `VerificationFailed`
(carrying the same report) otherwise, so a caller cannot forget to look at a boolean. Each failure
message names the record (its position in the log), checkpoint or transcript line at fault.

Checks, in order: log integrity (framing, checksums, segments, record schema, positions, repair
evidence under torn/); the log key; every checkpoint (signature, origin, root over the records,
forks, truncation, and no record left unsigned after the latest); the auditor's previous
checkpoint (consistency, RFC 9162 §2.1.4); uplinks; downlinks; session structure; and, given
them, the verifier's transcripts: the streams of the certificate(s) the log binds, hash for hash
and in causal order, and every certificate the server saw under the log's device name (the
witness that catches a log cut back below what the server received, or rewritten around it).

The verdict (`Report.verdict`) is VERIFIED only when every check passed against a key the auditor
holds; without one it is UNPROVEN, since the log was checked against the key it declares itself.
The report also says what this proof does not cover. The format is in docs/audit-format.md.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from specsteer.audit import merkle, records
from specsteer.audit.cosignature import WitnessKey
from specsteer.audit.errors import AuditError, VerificationFailed
from specsteer.audit.log import SEGMENTS_DIR, TORN_DIR, LogScan, StoredCheckpoint, StoredRecord, scan_log, torn_evidence
from specsteer.audit.note import Checkpoint, NoteError, VerifierKey, open_checkpoint, parse_note
from specsteer.audit.policy import WitnessPolicy
from specsteer.audit.rotation import KeyChain, key_chain
from specsteer.audit.transcript import DeviceSession, Transcript, compare, merge, read_transcript, transcript_files
from specsteer.audit.witness_state import WitnessState, read_state
from specsteer.audit.witnessing import ParsedRecord, cosignature_check, request_failures, unwitnessed_records
from specsteer.core import wire
from specsteer.core.contract import Area, SessionState, Violation
from specsteer.core.session_types import WIRE_MAX_TOP_K

NOT_COVERED = (
    "TLS metadata: the size, timing and number of encrypted records and connections are visible on the network "
    "and are not in this log.",
    "The TLS server name (SNI) the device sends in the clear when it connects.",
    "The client certificate the device presents for mutual TLS, if any.",
    "DNS lookups the device makes to find the verifier.",
    "gRPC and HTTP/2 headers (method path, user agent, deadlines, metadata): only message payloads are logged.",
    "Which text the token IDs encode: the log proves that only token IDs left, not that the prompt was public.",
    "Egress by code that bypasses the recorder, unless a server transcript is compared (--server-transcript).",
)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    summary: str
    failures: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "summary": self.summary,
            "failures": list(self.failures),
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    first_record: int
    last_record: int
    vocab_size: int
    k: int
    rounds: int
    uplinks: int
    downlinks: int
    uplink_bytes: int
    downlink_bytes: int
    ended: str  # "close", "fallback (<reason>)" or "open"

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


VERIFIED = "VERIFIED"
UNPROVEN = "UNPROVEN"
FAILED = "FAILED"

UNPROVEN_WHY = (
    "no --key was given, so the log was checked against the key it declares itself: anyone who rewrote it and "
    "re-signed it with a key of their own would pass too; give the device's verifier key you hold"
)
NO_WITNESS = (
    "Truncation or rollback to an earlier signed size, without a witness: no --server-transcript was given, so "
    "a log cut back to one of its own earlier checkpoints is caught only by a checkpoint you kept (--checkpoint); "
    "keep the latest checkpoint from every audit (latest.note in an `audit export` bundle) and the device's "
    "verifier key, or compare with the verifier's transcript, or give its witness's key and state "
    "(--witness-key, --witness-state)."
)
NO_WITNESS_KEY_NOTE = (
    "no --witness-key was given: no record here is known to be vouched for by a witness, only by the device's "
    "key; give the witness's key to learn which records lie after the last checkpoint it cosigned"
)


@dataclass(frozen=True)
class Report:
    log: str
    records: int
    checks: tuple[Check, ...]
    sessions: tuple[SessionSummary, ...]
    # The egress guard's decisions over all sessions: (decision, placeholder label, spans).
    guard: tuple[tuple[str, str, int], ...] = ()
    not_covered: tuple[str, ...] = NOT_COVERED
    authenticated: bool = True  # checked against a key the auditor holds, not the one the log declares
    devices: tuple[tuple[str, str], ...] = ()  # (name, certificate sha256) the log binds, in order
    # With --witness-key: why sessions after the last cosigned checkpoint leave the verdict UNPROVEN.
    unwitnessed: str | None = None
    # The cloud's misbehaviour as the log's witness (a spoilt, replayed, withheld or extra answer to a
    # Close): named, never a failure of the device's log; what it leaves uncosigned is UNPROVEN.
    cloud: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Every check passed (authenticity aside: see `verdict`)."""
        return all(c.ok for c in self.checks)

    @property
    def verdict(self) -> str:
        """VERIFIED only with every check passed against the auditor's key and, given witness keys, every
        session covered by a witness's cosignature; UNPROVEN otherwise."""
        if not self.ok:
            return FAILED
        return VERIFIED if self.authenticated and self.unwitnessed is None else UNPROVEN

    def as_dict(self) -> dict[str, Any]:
        return {
            "log": self.log,
            "verdict": self.verdict,
            "ok": self.verdict == VERIFIED,
            "checks_passed": self.ok,
            "authenticated": self.authenticated,
            "unwitnessed": self.unwitnessed,
            "cloud_misbehaviour": list(self.cloud),
            "devices": [{"name": n, "cert_sha256": c} for n, c in self.devices],
            "records": self.records,
            "sessions": len(self.sessions),
            "checks": [c.as_dict() for c in self.checks],
            "guard_decisions": [{"decision": d, "placeholder": p, "count": n} for d, p, n in self.guard],
            "not_covered": list(self.not_covered),
        }

    def _unproven_why(self) -> str:
        return "; ".join(why for why in (None if self.authenticated else UNPROVEN_WHY, self.unwitnessed) if why)

    def render(self) -> str:
        failed = sum(not c.ok for c in self.checks)
        verdict = {
            VERIFIED: VERIFIED,
            UNPROVEN: f"{UNPROVEN} (every check passed, but authenticity is unproven: {self._unproven_why()})",
            FAILED: f"{FAILED} ({failed} of {len(self.checks)} checks failed)",
        }[self.verdict]
        lines = [f"audit log {self.log}: {self.records} records, {len(self.sessions)} sessions: {verdict}"]
        lines += [f"device: {n} (certificate sha256 {c})" for n, c in self.devices] or [
            "device: none bound (the log names no device certificate)"
        ]
        if self.cloud:
            lines.append(f"the cloud misbehaved as the log's witness ({len(self.cloud)}), not the device:")
            lines.extend(f"  - {m}" for m in self.cloud)
        lines.append("")
        for c in self.checks:
            lines.append(f"  [{'ok' if c.ok else 'FAIL'}] {c.name}: {c.summary}")
            lines.extend(f"         - {m}" for m in c.failures)
            lines.extend(f"         note: {m}" for m in c.notes)
        spans = sum(n for _, _, n in self.guard)
        totals = ", ".join(f"{d} {p} x{n}" for d, p, n in self.guard)
        lines += ["", f"Egress guard: {spans} span(s) acted on" + (f": {totals}" if totals else "")]
        lines += ["", "This proof does not cover:"]
        lines.extend(f"  - {m}" for m in self.not_covered)
        return "\n".join(lines) + "\n"


# -- the checks ----------------------------------------------------------------------------------


@dataclass
class _Parsed:
    stored: StoredRecord
    record: records.Record | None


@dataclass
class _Context:
    scan: LogScan
    parsed: list[_Parsed]
    key: VerifierKey | None = None
    leaves: list[bytes] = field(default_factory=list)
    chain: KeyChain | None = None  # the key in force at each size, through valid rotations

    def open(self, note: str) -> Checkpoint:
        """A checkpoint note, verified under the key in force at its size (NoteError otherwise)."""
        assert self.key is not None
        size = Checkpoint.parse_body(parse_note(note).text).size
        return open_checkpoint(note, self.chain.key_for(size) if self.chain is not None else self.key)


def _integrity(ctx: _Context, signed_size: int) -> Check:
    """Framing, checksums, positions and repair evidence. `signed_size` is the largest size a valid
    checkpoint signs: a "torn" tail inside it is damage to a signed record, not a crash."""
    failures = list(ctx.scan.problems)
    notes: list[str] = []
    intact = len(ctx.scan.records)
    for torn in ctx.scan.torn:
        if torn.file.startswith(SEGMENTS_DIR) and signed_size > intact:
            failures.append(
                f"record {intact} ({torn.file} at byte {torn.offset}) is damaged ({torn.reason}), yet a signed "
                f"checkpoint covers {signed_size} records: this is not a torn write but damage to a signed record; "
                "the device refuses to open this log rather than cut it, so restore it from a copy"
            )
            continue
        failures.append(
            f"{torn.file} ends in {torn.reason} ({torn.length} bytes from byte {torn.offset}): a torn write; "
            "opening the log on the device cuts it back and records the cut"
        )
    evidence = {(ev.file, ev.offset, ev.sha256): ev for ev in torn_evidence(ctx.scan.directory) if ev.file}
    for p in ctx.parsed:
        if p.record is None:
            continue
        if p.record.index != p.stored.position:
            detail = (
                "records before it are missing, or it was moved"
                if p.record.index > p.stored.position
                else "it was moved or repeated"
            )
            failures.append(f"{p.stored.where()} says it is record {p.record.index}: {detail}")
        if p.record.kind == records.KIND_HEADER and p.stored.position != 0:
            failures.append(f"{p.stored.where()} is a second log header")
        if p.record.kind == records.KIND_REPAIR:
            f = p.record.fields
            name = f"{TORN_DIR}/{f['file']}.{f['offset']}.{f['cut_sha256']}.bin"
            ev = evidence.get((f["file"], f["offset"], f["cut_sha256"]))
            what = f"record {p.stored.position}: the device cut a torn final write of {f['cut_bytes']} bytes from "
            what += f"{f['file']} at byte {f['offset']}"
            if ev is None:
                failures.append(f"{what}, but {name} is missing: the evidence of that repair was removed")
            elif not ev.intact or ev.length != f["cut_bytes"]:
                failures.append(f"{what}, but {name} holds {ev.length} bytes that do not hash to its recorded value")
            else:
                notes.append(f"{what} (kept as {name}, {ev.length} bytes, sha256 checked)")
    logged = {
        (p.record.fields["file"], p.record.fields["offset"], p.record.fields["cut_sha256"])
        for p in ctx.parsed
        if p.record is not None and p.record.kind == records.KIND_REPAIR
    }
    for ev in torn_evidence(ctx.scan.directory):
        if not ev.intact:
            failures.append(f"{TORN_DIR}/{ev.name}: kept torn bytes that do not hash to the value in their name")
        elif (ev.file, ev.offset, ev.sha256) not in logged:
            failures.append(
                f"{TORN_DIR}/{ev.name}: {ev.length} bytes were cut from {ev.file} but no repair record says so"
            )
    if not ctx.parsed:
        failures.append("the log holds no records")
    elif ctx.parsed[0].record is None or ctx.parsed[0].record.kind != records.KIND_HEADER:
        failures.append("record 0 is not the log header")
    segments = len({p.stored.segment for p in ctx.parsed})
    summary = f"{len(ctx.parsed)} records in {segments} segment(s)"
    summary += ", framing, checksums and record schema intact" if not failures else ""
    return Check("log integrity", not failures, summary, tuple(failures), tuple(notes))


def _parse_records(scan: LogScan) -> tuple[list[_Parsed], list[str]]:
    parsed: list[_Parsed] = []
    failures: list[str] = []
    for stored in scan.records:
        try:
            rec: records.Record | None = records.parse(stored.data)
        except records.RecordError as exc:
            rec = None
            failures.append(f"{stored.where()}: {exc}")
        parsed.append(_Parsed(stored, rec))
    return parsed, failures


def _log_key(ctx: _Context, auditor_key: VerifierKey | None) -> Check:
    check = _declared_key(ctx, auditor_key)
    if ctx.key is None:
        return check
    ctx.chain, problems = key_chain(ctx.key, ((p.stored.position, p.record) for p in ctx.parsed))
    if not problems and not ctx.chain.rotations:
        return check
    notes = (*check.notes, *(f"record {p}: the log key was handed over to {k}" for p, k in ctx.chain.rotations))
    failures = (*check.failures, *problems)
    return Check(check.name, not failures, check.summary, failures, notes)


def _declared_key(ctx: _Context, auditor_key: VerifierKey | None) -> Check:
    header = ctx.parsed[0].record if ctx.parsed else None
    declared: VerifierKey | None = None
    failures: list[str] = []
    if header is not None and header.kind == records.KIND_HEADER:
        try:
            declared = VerifierKey.parse(header.fields["key"])
        except AuditError as exc:
            failures.append(f"record 0: the declared log key is unusable: {exc}")
        else:
            if header.fields["origin"] != declared.name:
                failures.append(f"record 0: origin {header.fields['origin']!r} is not the key name {declared.name!r}")
            if header.fields["max_top_k"] > WIRE_MAX_TOP_K:
                failures.append(
                    f"record 0 declares a maximum k of {header.fields['max_top_k']}, above {WIRE_MAX_TOP_K}"
                )
    if auditor_key is not None:
        ctx.key = auditor_key
        if declared is not None and str(declared) != str(auditor_key):
            failures.append(f"record 0 declares key {declared}, not the auditor's key {auditor_key}")
        return Check(
            "log key", not failures, f"checkpoints are checked against the auditor's key {auditor_key}", tuple(failures)
        )
    ctx.key = declared
    if declared is None:
        failures.append("no key to check signatures with: the log header is unreadable and no --key was given")
        return Check("log key", False, "no usable log key", tuple(failures))
    note = "no --key given: the key declared in the log header was trusted; pass the key you hold to pin it"
    return Check("log key", not failures, f"the log declares key {declared}", tuple(failures), (note,))


def _checkpoints(ctx: _Context) -> tuple[Check, list[tuple[int, Checkpoint]]]:
    failures: list[str] = []
    notes: list[str] = []
    valid: list[tuple[int, Checkpoint]] = []
    if ctx.key is None:
        return Check("checkpoints", False, "no log key to check them with", ("no usable log key",)), valid
    for stored in ctx.scan.checkpoints:
        try:
            valid.append((stored.number, ctx.open(stored.note)))
        except NoteError as exc:
            failures.append(f"checkpoint {stored.number}: {exc}")
    n = len(ctx.leaves)
    roots = merkle.roots_at(ctx.leaves, {cp.size for _, cp in valid if cp.size <= n})
    by_size: dict[int, list[tuple[int, Checkpoint]]] = defaultdict(list)
    for number, cp in valid:
        by_size[cp.size].append((number, cp))
    for size, group in sorted(by_size.items()):
        distinct = {cp.root for _, cp in group}
        if len(distinct) > 1:
            numbers = " and ".join(str(num) for num, _ in group)
            failures.append(f"checkpoints {numbers} both sign size {size} with different roots: a forked history")
    good_sizes = sorted(cp.size for _, cp in valid if cp.size <= n and roots[cp.size] == cp.root)
    for number, cp in valid:
        if cp.size > n:
            failures.append(
                f"checkpoint {number} signs {cp.size} records but the log holds only {n}: "
                f"records {n} to {cp.size - 1} were removed"
            )
        elif roots[cp.size] != cp.root:
            below = max((s for s in good_sizes if s < cp.size), default=0)
            failures.append(
                f"checkpoint {number} (size {cp.size}) does not match the records: a record between "
                f"record {below} and record {cp.size - 1} was changed, removed or moved"
            )
    failures += _checkpoint_order(ctx, valid)
    if not ctx.scan.checkpoints:
        failures.append("the log has no signed checkpoint, so nothing in it is signed")
    latest = max((cp.size for _, cp in valid), default=0)
    if valid and latest < n:
        # The device signs at every session's end, on open and on close, so an honest log has no
        # unsigned tail once the device has reopened it after a crash: these records prove nothing.
        failures.append(
            f"records {latest} to {n - 1} are not covered by any signed checkpoint (the latest signs {latest}): "
            "anyone could have appended them; if the device crashed, open the log on the device (it closes "
            "interrupted sessions and signs) and verify again"
        )
    summary = f"{len(ctx.scan.checkpoints)} checkpoint(s)"
    if not failures:
        summary += f", all signed by {ctx.key.name}+{ctx.key.id.hex()} and matching the records (latest size {latest})"
    return Check("checkpoints", not failures, summary, tuple(failures), tuple(notes)), valid


def _checkpoint_order(ctx: _Context, valid: list[tuple[int, Checkpoint]]) -> list[str]:
    """Fail checkpoint lines that the device cannot have written where they stand.

    The device appends a checkpoint signed by the log key alone at its current size, only when the
    size has grown (or again at the same size after a reopen), so those sizes never go down; a
    cosigned note repeats, with the witness's line added, a checkpoint it signed earlier (the one the
    Close carried), and may come after a larger one (another session's end came first). An old line
    appended again (which made `audit export` hand out an old latest.note) breaks these rules.
    """
    notes = {s.number: s.note for s in ctx.scan.checkpoints}
    failures: list[str] = []
    top: tuple[int, int] | None = None  # (line, size) of the largest log-signed-only checkpoint so far
    signed: set[tuple[int, bytes]] = set()
    for number, cp in valid:
        try:
            extra = len(parse_note(notes[number]).signatures) > 1
        except NoteError:
            continue  # it opened, so it parses
        if extra:
            if (cp.size, cp.root) not in signed:
                failures.append(
                    f"checkpoint {number} (size {cp.size}) carries other signatures than the log's but repeats no "
                    "earlier checkpoint: the device stores a cosigned checkpoint only after the one its Close carried"
                )
            continue
        if top is not None and cp.size < top[1]:
            failures.append(
                f"checkpoint {number} (size {cp.size}) comes after checkpoint {top[0]} (size {top[1]}): the device "
                "signs its checkpoints in growing order, so this line was copied or moved here"
            )
            continue
        if top is None or cp.size > top[1]:
            top = (number, cp.size)
        signed.add((cp.size, cp.root))
    return failures


def latest_checkpoint(scan: LogScan, key: VerifierKey) -> str | None:
    """The note of the largest checkpoint that verifies under `key` and matches the records (for
    `audit export`'s latest.note: not the last line, which anyone can append to)."""
    leaves = [s.leaf for s in scan.records]
    opened: list[tuple[StoredCheckpoint, Checkpoint]] = []
    for stored in scan.checkpoints:
        try:
            opened.append((stored, open_checkpoint(stored.note, key)))
        except NoteError:
            continue
    roots = merkle.roots_at(leaves, {cp.size for _, cp in opened if cp.size <= len(leaves)})
    good = [(cp.size, stored.number, stored.note) for stored, cp in opened if roots.get(cp.size) == cp.root]
    if not good:
        return None
    size = max(g[0] for g in good)
    return min(g for g in good if g[0] == size)[2]


def _previous(ctx: _Context, note: str, valid: list[tuple[int, Checkpoint]]) -> Check:
    name = "previous checkpoint"
    if ctx.key is None:
        return Check(name, False, "no log key to check it with", ("no usable log key",))
    try:
        prev = ctx.open(note)
    except NoteError as exc:
        return Check(name, False, "the auditor's checkpoint does not verify", (f"previous checkpoint: {exc}",))
    n = len(ctx.leaves)
    failures: list[str] = []
    if prev.size > n:
        failures.append(
            f"your checkpoint signs {prev.size} records but the log holds only {n}: "
            f"records {n} to {prev.size - 1} were removed (the log was truncated below it)"
        )
    else:
        for number, cp in valid:
            if cp.size == prev.size and cp.root != prev.root:
                failures.append(
                    f"checkpoint {number} and your checkpoint both sign size {cp.size} with different roots: "
                    "a forked history"
                )
        latest = max(((num, cp) for num, cp in valid if cp.size <= n), key=lambda x: x[1].size, default=None)
        if latest is not None and latest[1].size >= prev.size > 0:
            num, cp = latest
            proof = merkle.consistency_proof(prev.size, ctx.leaves[: cp.size]) if prev.size < cp.size else []
            try:
                merkle.verify_consistency(prev.size, cp.size, prev.root, cp.root, proof)
            except merkle.ProofError as exc:
                failures.append(
                    f"your checkpoint (size {prev.size}) is not consistent with checkpoint {num} (size {cp.size}): "
                    f"{exc}; records 0 to {prev.size - 1} were rewritten"
                )
        elif merkle.root(ctx.leaves[: prev.size]) != prev.root:
            failures.append(
                f"records 0 to {prev.size - 1} do not hash to your checkpoint's root: history was rewritten"
            )
    summary = f"your checkpoint of size {prev.size}"
    summary += " is consistent with the log (RFC 9162 consistency proof verified)" if not failures else ""
    return Check(name, not failures, summary, tuple(failures))


def _payload(rec: records.Record) -> bytes:
    assert rec.payload is not None  # an uplink's or a downlink's, checked against the record by `records.parse`
    return rec.payload


# How each kind of session record after its begin is checked against the session's state
# (`core.contract.SessionState`): every kind of `records.SESSION_KINDS` but the begin, which makes
# the state. A session record of any other kind is refused by name, never read as one of these. An
# uplink is also checked against the log's sessions so far (a resumed Open must continue one).
_Examine = Callable[
    [SessionState, records.Record, Collection[SessionState]], tuple[list[Violation], Callable[[], None]]
]
_EXAMINE: dict[str, _Examine] = {
    records.KIND_UPLINK: lambda state, rec, earlier: state.examine_uplink(_payload(rec), earlier),
    records.KIND_DOWNLINK: lambda state, rec, _: state.examine_downlink(_payload(rec)),
    records.KIND_FALLBACK: lambda state, rec, _: state.examine_fallback(rec.fields["reason"]),
    records.KIND_GUARD: lambda state, rec, _: state.examine_guard(
        rec.fields["decision"], rec.fields["count"], rec.fields["placeholder"]
    ),
}


def _sessions(ctx: _Context) -> tuple[list[Check], list[SessionSummary], list[DeviceSession], list[str]]:
    found: dict[Area, list[str]] = {a: [] for a in Area}
    cloud: list[str] = []  # what a cosignature downlink did wrong: the cloud's doing, never the device's
    counts = {Area.UPLINK: 0, Area.DOWNLINK: 0}
    notes: list[str] = []
    header_k = WIRE_MAX_TOP_K
    if ctx.parsed and ctx.parsed[0].record is not None and ctx.parsed[0].record.kind == records.KIND_HEADER:
        header_k = min(header_k, ctx.parsed[0].record.fields["max_top_k"])
    states: dict[str, SessionState] = {}
    next_n: dict[str, int] = {}
    spans: dict[str, list[int]] = {}
    uplinks: dict[str, list[tuple[int, str]]] = defaultdict(list)
    counters: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    first_downlink: dict[str, int] = {}
    bound: tuple[str, str] | None = None  # (name, certificate) the latest device-cert record binds
    certs: dict[str, tuple[str, str] | None] = {}

    def report(where: str, violations: list[Violation]) -> None:
        for v in violations:
            found[v.area].append(f"{where}: {v.message}")

    for p in ctx.parsed:
        rec = p.record
        if rec is not None and rec.kind == records.KIND_DEVICE:
            bound = (rec.fields["device"], rec.fields["cert_sha256"])
        if rec is None or rec.session is None:
            continue
        sid, n = rec.session, rec.fields["n"]
        where = rec.describe(p.stored.position)
        if rec.kind == records.KIND_BEGIN:
            if sid in states:
                found[Area.SESSION].append(f"{where}: session {sid[:8]}… begins a second time")
                continue
            vocab, k = rec.fields["vocab_size"], rec.fields["max_top_k"]
            report(where, SessionState.begin_violations(vocab, k))
            if k > header_k:
                found[Area.DOWNLINK].append(f"{where}: allows k = {k}, above the log's maximum {header_k}")
            states[sid] = SessionState(sid, vocab, k)
            certs[sid] = bound
            next_n[sid] = 1
            spans[sid] = [rec.index, rec.index]
            continue
        state = states.get(sid)
        if state is None:
            found[Area.SESSION].append(f"{where}: belongs to a session that never began")
            continue
        spans[sid][1] = rec.index
        if n != next_n[sid]:
            what = "a record of this session is missing" if n > next_n[sid] else "records were reordered or repeated"
            found[Area.SESSION].append(f"{where}: expected n={next_n[sid]}, found n={n}: {what}")
        if n >= next_n[sid]:
            next_n[sid] = n + 1  # after a gap, continue from here; a late record does not move the count

        examine = _EXAMINE.get(rec.kind)
        if examine is None:
            found[Area.SESSION].append(f"{where}: a session record of unknown kind {rec.kind!r} cannot be checked")
            continue
        if rec.kind == records.KIND_UPLINK:
            counts[Area.UPLINK] += 1
            counters[sid][0] += 1
            uplinks[sid].append((rec.index, rec.fields["sha256"]))
        elif rec.kind == records.KIND_DOWNLINK:
            counts[Area.DOWNLINK] += 1
            counters[sid][1] += 1
            first_downlink.setdefault(sid, rec.index)
        violations, commit = examine(state, rec, states.values())
        if rec.kind == records.KIND_DOWNLINK and wire.carries_cosignature(_payload(rec)):
            # An answer to a Close is the verifier's word, recorded as received: a second answer, one
            # nobody asked for, or one of the wrong shape is the cloud spoiling the witnessing, which
            # the device could not prevent and does not vouch for.
            cloud.extend(f"{where}: {v.message}" for v in violations)
        else:
            report(where, violations)
        commit()  # the verifier always advances, so one bad record does not hide the next

    summaries: list[SessionSummary] = []
    device: list[DeviceSession] = []
    for sid, state in states.items():
        first, last = spans[sid]
        if not state.ended:
            found[Area.SESSION].append(
                f"session {sid[:8]}… (records {first} to {last}) has neither a Close nor a recorded fallback"
            )
        ended = {"closed": "close", "fell back": f"fallback ({state.fallback_reason})"}.get(state.phase.value, "open")
        summaries.append(
            SessionSummary(
                sid, first, last, state.vocab_size, state.k if state.top_k else state.max_top_k, state.rounds,
                counters[sid][0], counters[sid][1], state.uplink_bytes, state.downlink_bytes, ended,
            )
        )  # fmt: skip
        name, cert = certs[sid] or (None, None)
        fell_back = state.phase.value == "fell back"
        closed = state.phase.value == "closed"
        device.append(DeviceSession(sid, uplinks[sid], fell_back, cert, name, first_downlink.get(sid), closed))
    interrupted = [s for s in summaries if s.ended == "fallback (interrupted)"]
    if interrupted:
        notes.append(f"{len(interrupted)} session(s) were interrupted (the device process ended mid-session)")
    checks = [
        _area_check(
            "uplinks",
            found[Area.UPLINK],
            f"{counts[Area.UPLINK]} uplink(s): parse with no unknown fields, re-serialize to the same bytes, "
            "carry only in-vocabulary token IDs and bounded declared parameters (and, on a Close, only the "
            "log's own checkpoint)",
        ),
        _area_check(
            "downlinks",
            found[Area.DOWNLINK],
            f"{counts[Area.DOWNLINK]} downlink(s): at most k candidates (k <= {WIRE_MAX_TOP_K}), finite values, "
            "in-vocabulary tokens",
        ),
        _area_check(
            "session structure",
            found[Area.SESSION],
            f"{len(states)} session(s): Open first, rounds in order without gaps, each ended by Close or a fallback",
            notes,
        ),
    ]
    return checks, summaries, device, cloud


def _guard_totals(ctx: _Context) -> tuple[tuple[str, str, int], ...]:
    totals: Counter[tuple[str, str]] = Counter()
    for p in ctx.parsed:
        if p.record is not None and p.record.kind == records.KIND_GUARD:
            f = p.record.fields
            totals[(f["decision"], f["placeholder"])] += f["count"]
    return tuple((d, p, n) for (d, p), n in sorted(totals.items()))


def _area_check(name: str, failures: list[str], summary_ok: str, notes: list[str] | None = None) -> Check:
    summary = summary_ok if not failures else f"{len(failures)} violation(s)"
    return Check(name, not failures, summary, tuple(failures), tuple(notes or ()))


def _transcript(
    device: list[DeviceSession], paths: Sequence[Path], bindings: Sequence[tuple[str, str]], device_name: str | None
) -> Check:
    transcripts = [read_transcript(p) for p in paths]
    result = compare(device, merge(transcripts), bindings, device_name=device_name)
    summary = f"{result.matched} server stream(s) of this device match device sessions hash for hash, in order"
    if result.failures:
        summary = f"{len(result.failures)} mismatch(es) between the server's transcript and the device's log"
    names = {n for n, _ in bindings} | ({device_name} if device_name is not None else set())
    notes = [*result.notes, _replicas_seen(paths, transcripts, names)]
    return Check("server transcript", not result.failures, summary, tuple(result.failures), tuple(notes))


def _replicas_seen(paths: Sequence[Path], transcripts: Sequence[Transcript], names: set[str]) -> str:
    """Which replicas' transcripts were compared, and how many of this device's streams each holds:
    the auditor judges whether they are the whole fleet."""
    seen = []
    for path, t in zip(paths, transcripts, strict=True):
        mine = sum(1 for s in t.info.values() if s.device in names)
        who = f"replica {t.replica}" if t.replica is not None else f"unnamed {path}"
        seen.append(f"{who} ({mine} stream(s) of this device)")
    return f"transcripts compared ({len(seen)}): " + ", ".join(seen)


def _parsed_records(ctx: _Context) -> list[ParsedRecord]:
    return [ParsedRecord(p.stored.position, p.record) for p in ctx.parsed]


def _with_witness_requests(checks: list[Check], ctx: _Context) -> list[Check]:
    """The uplinks check, failed where a Close's witness request is not the log's own checkpoint."""
    roots = partial(merkle.roots_at, ctx.leaves)
    failures = request_failures(_parsed_records(ctx), ctx.key, roots, ctx.chain)
    if not failures:
        return checks
    out = []
    for c in checks:
        if c.name == "uplinks":
            bad = c.failures + tuple(failures)
            c = Check(c.name, False, f"{len(bad)} violation(s)", bad, c.notes)
        out.append(c)
    return out


def _witness(
    ctx: _Context,
    keys: Sequence[WitnessKey],
    state: WitnessState | None,
    device: str | None,
    policy: WitnessPolicy | None = None,
) -> tuple[Check, str | None, list[str]]:
    """The cosignatures checked, and (given witness keys) why sessions after the last checkpoint they
    cosigned leave the verdict UNPROVEN: a note on the check says how many records only the device vouches for."""
    # Whose log this is: the auditor's word, else the names the log binds (the witness state's entry
    # for this log must be under one of them).
    names = [device] if device is not None else [n for n, _ in _devices(ctx)]
    result = cosignature_check(
        _parsed_records(ctx), ctx.scan.checkpoints, len(ctx.leaves), keys, ctx.key,
        lambda sizes: merkle.roots_at(ctx.leaves, sizes), state, names, None if policy is None else policy.quorum,
    )  # fmt: skip
    who = "witness" if policy is None else f"witness policy's quorum ({policy.describe()})"
    if result.failures:
        summary = f"{len(result.failures)} problem(s) with the witness's cosignatures"
    else:
        summary = "; ".join(result.summaries) + ": every cosigned checkpoint matches the records"
    notes: list[str] = []
    unwitnessed = None
    if keys:
        tail = unwitnessed_records(_parsed_records(ctx), result.cosigned_size)
        sessions = list(dict.fromkeys(p.record.session for p in tail if p.record is not None and p.record.session))
        if tail:
            notes.append(
                f"{len(tail)} record(s) (from position {tail[0].position}) lie after the last checkpoint the "
                f"{who} cosigned (size {result.cosigned_size}): only the device's key vouches for them, and "
                "its holder could have appended or rewritten them and re-signed"
            )
        else:
            notes.append(
                f"every record lies within the last checkpoint the {who} cosigned (size {result.cosigned_size}) "
                "or is the Close that carried it and its answer"
            )
        if sessions:
            unwitnessed = (
                f"unwitnessed tail: {len(sessions)} session(s) lie wholly or partly after the last checkpoint the "
                f"{who} cosigned (size {result.cosigned_size}), so only the device vouches for them (a session "
                "the device finished locally, or one appended by whoever holds its key)"
            )
            notes.append(unwitnessed)
    check = Check("witness cosignatures", not result.failures, summary, tuple(result.failures), tuple(notes))
    return check, unwitnessed, result.cloud


def _devices(ctx: _Context) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for p in ctx.parsed:
        if p.record is not None and p.record.kind == records.KIND_DEVICE:
            bound = (p.record.fields["device"], p.record.fields["cert_sha256"])
            if bound not in out:
                out.append(bound)
    return tuple(out)


def _device_name(ctx: _Context, named: str | None, state: WitnessState | None) -> str | None:
    """Whose log this is: the auditor's word, else the one device the witness pinned this log's key for."""
    if named is not None or state is None or ctx.key is None:
        return named
    owners = [device for device, entry in state.logs.items() if entry.key == str(ctx.key)]
    return owners[0] if len(owners) == 1 else None


def _paths(server_transcript: Path | str | Sequence[Path | str] | None) -> list[Path]:
    """The transcript files: each path given, a folder standing for every transcript in it (a fleet's)."""
    if server_transcript is None:
        return []
    if isinstance(server_transcript, (str, Path)):
        server_transcript = [server_transcript]
    given = [Path(p) for p in server_transcript]
    out: list[Path] = []
    for path in given:
        for file in transcript_files(path) if path.is_dir() else [path]:
            if file not in out:
                out.append(file)
    return out


def inspect(
    log_dir: Path | str,
    *,
    key: VerifierKey | None = None,
    previous_checkpoint: str | None = None,
    server_transcript: Path | str | Sequence[Path | str] | None = None,
    witness_keys: Sequence[WitnessKey] = (),
    witness_state: WitnessState | Path | str | None = None,
    device: str | None = None,
    witness_policy: WitnessPolicy | None = None,
) -> Report:
    """Run every check and return the report, passed or not. Prefer `verify`, which raises on failure.

    `server_transcript` is the verifier's transcript (or several, one per verifier replica, or a
    folder of them: `audit.transcript.transcript_files`): the
    witness that catches a log cut back below what the server received from this device. `device`
    is whose log this is, by the auditor's knowledge (its certificate's common name); without it
    the witness state names the device whose log key it pinned, and failing both, the log must
    bind a certificate the transcript holds.
    `witness_keys` are the cosigners the auditor trusts: each must have cosigned the log, and every
    cosigned checkpoint must still match it; `witness_state` is a witness's own record of what it
    cosigned (its state file), which catches a log whose cosigned checkpoints were deleted.
    `witness_policy` adds its keys, and counts records as witnessed only up to the checkpoint its
    quorum (k of n) cosigned.
    """
    if witness_policy is not None:
        witness_keys = list(dict.fromkeys((*witness_keys, *witness_policy.keys)))
    if isinstance(witness_state, (str, Path)):
        witness_state = read_state(Path(witness_state))
    scan = scan_log(Path(log_dir))
    parsed, parse_failures = _parse_records(scan)
    ctx = _Context(scan, parsed, leaves=[s.leaf for s in scan.records])
    key_check = _log_key(ctx, key)
    cp_check, valid = _checkpoints(ctx)
    integrity = _integrity(ctx, max((cp.size for _, cp in valid), default=0))
    if parse_failures:
        integrity = Check(
            integrity.name, False, integrity.summary, integrity.failures + tuple(parse_failures), integrity.notes
        )
    checks = [integrity, key_check, cp_check]
    if previous_checkpoint is not None:
        checks.append(_previous(ctx, previous_checkpoint, valid))
    session_checks, summaries, sessions, cloud = _sessions(ctx)
    checks.extend(_with_witness_requests(session_checks, ctx))
    paths = _paths(server_transcript)
    devices = _devices(ctx)
    if paths:
        checks.append(_transcript(sessions, paths, devices, _device_name(ctx, device, witness_state)))
    unwitnessed = None
    if witness_keys or witness_state is not None:
        witness_check, unwitnessed, answers = _witness(ctx, witness_keys, witness_state, device, witness_policy)
        checks.append(witness_check)
        cloud += answers
    if not witness_keys:
        checks[2] = Check(cp_check.name, cp_check.ok, cp_check.summary, cp_check.failures,
                          (*cp_check.notes, NO_WITNESS_KEY_NOTE))  # fmt: skip
    not_covered = NOT_COVERED if paths or witness_state is not None else (*NOT_COVERED, NO_WITNESS)
    return Report(
        str(log_dir), len(scan.records), tuple(checks), tuple(summaries), _guard_totals(ctx), not_covered,
        authenticated=key is not None, devices=devices, unwitnessed=unwitnessed, cloud=tuple(cloud),
    )  # fmt: skip


def verify(
    log_dir: Path | str,
    *,
    key: VerifierKey | None = None,
    previous_checkpoint: str | None = None,
    server_transcript: Path | str | Sequence[Path | str] | None = None,
    witness_keys: Sequence[WitnessKey] = (),
    witness_state: WitnessState | Path | str | None = None,
    device: str | None = None,
    witness_policy: WitnessPolicy | None = None,
) -> Report:
    """Return the report if every check holds; raise `VerificationFailed` (with the report) otherwise.

    Without `key` a returned report's `verdict` is UNPROVEN, never VERIFIED: the log was checked
    against the key it declares itself.
    """
    report = inspect(
        log_dir, key=key, previous_checkpoint=previous_checkpoint, server_transcript=server_transcript,
        witness_keys=witness_keys, witness_state=witness_state, device=device, witness_policy=witness_policy,
    )  # fmt: skip
    if not report.ok:
        raise VerificationFailed(report)
    return report

"""`audit monitor`: follow device logs' published checkpoints and the witnesses' states over time.

A monitor is the party that watches: it reads a folder of publications (one subfolder per device
log, as `audit export` writes it: `device.pub`, `checkpoints/*.note`, `log/`; or a log directory
itself) and any witnesses' states (a witness service's SQLite database, or the verifier's
witness-state.json), and raises an alarm, one sentence each, for

- a split view: two checkpoints of one log of the same size with different roots (typically each
  cosigned by different witnesses: the log showed each of them another history);
- a fork: a checkpoint that the published records do not extend;
- a rollback: a log whose checkpoints now end below a size the monitor saw in an earlier run, or
  show another root for a size it saw, or whose records no longer extend what it saw
  (RFC 9162 consistency proof from the seen checkpoint);
- a witness whose own state went back (a smaller size, or another root, than it held before);
- a missing quorum under a witness policy: the latest checkpoint lacks k of n cosignatures;
- anything that does not verify (a checkpoint not signed by the log's key, a bogus cosignature),
  a publication it cannot read, a log key that changed, or a log it followed that is no longer published.

Its own state is an SQLite database (`--state`): per log, the key it pinned and the largest
checkpoint it accepted; every (size, root) it accepted; per witness and log, the last checkpoint
that witness held. A log with an alarm leaves its state unchanged, so the alarm repeats on every
run until someone acts. Details: docs/audit-format.md section 8.3.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specsteer.audit import merkle
from specsteer.audit.cosignature import WitnessKey, cosignatures
from specsteer.audit.errors import AuditError, NoteError, ProofError
from specsteer.audit.files import read_regular
from specsteer.audit.log import SEGMENTS_DIR, scan_log, verifier_of
from specsteer.audit.note import MAX_NOTE_BYTES, VerifierKey, load_verifier_key, open_checkpoint
from specsteer.audit.policy import WitnessPolicy
from specsteer.audit.witness_state import read_state

__all__ = ["Alarm", "Monitor", "MonitorResult"]

FORMAT = "specsteer-monitor/1"
SQLITE_MAGIC = b"SQLite format 3\x00"
MAX_NOTES = 100_000  # checkpoint files per publication read in one pass
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (format TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS logs (
    origin TEXT PRIMARY KEY, key TEXT NOT NULL, size INTEGER NOT NULL, root BLOB NOT NULL, time INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS seen (
    origin TEXT NOT NULL, size INTEGER NOT NULL, root BLOB NOT NULL, time INTEGER NOT NULL,
    PRIMARY KEY (origin, size));
CREATE TABLE IF NOT EXISTS witnesses (
    witness TEXT NOT NULL, origin TEXT NOT NULL, size INTEGER NOT NULL, root BLOB NOT NULL, time INTEGER NOT NULL,
    PRIMARY KEY (witness, origin));
"""


@dataclass(frozen=True)
class Alarm:
    # split-view, fork, rollback, witness-rollback, quorum, unverifiable, unreadable, key-changed, withdrawn
    kind: str
    origin: str
    message: str  # one sentence

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "origin": self.origin, "message": self.message}


@dataclass(frozen=True)
class _Sighting:
    size: int
    root: bytes
    source: str
    cosigners: frozenset[str]


@dataclass
class _Log:
    key: VerifierKey
    sightings: list[_Sighting] = field(default_factory=list)
    histories: list[tuple[str, list[bytes]]] = field(default_factory=list)  # (publication, leaf hashes)
    published: bool = False
    witness_heads: list[tuple[str, int, bytes]] = field(default_factory=list)  # (witness, size, root)


@dataclass
class MonitorResult:
    alarms: list[Alarm]
    logs: dict[str, dict[str, object]]  # origin -> what the monitor holds after the pass

    @property
    def ok(self) -> bool:
        return not self.alarms

    def as_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "alarms": [a.as_dict() for a in self.alarms], "logs": self.logs}


def _short(root: bytes) -> str:
    return base64.b64encode(root).decode()[:12] + "..."


def _who(cosigners: frozenset[str]) -> str:
    return f"cosigned by {', '.join(sorted(cosigners))}" if cosigners else "cosigned by no known witness"


class Monitor:
    """One monitor: its state database, the logs and witnesses it knows, and `check()` for one pass."""

    def __init__(
        self,
        state: Path,
        *,
        witness_keys: Sequence[WitnessKey] = (),
        policy: WitnessPolicy | None = None,
        known_logs: Callable[[str], VerifierKey | None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        keys = {str(k): k for k in [*witness_keys, *(policy.keys if policy else ())]}
        self.witness_keys = tuple(keys.values())
        self.policy = policy
        self.known_logs = known_logs
        self._clock = clock
        if not state.exists():
            # Private from the first byte: the monitor's memory is its evidence.
            os.close(os.open(state, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        # A second monitor on the same state waits a second, then this one says so (never a pass half-kept).
        self.db = sqlite3.connect(state, isolation_level=None, timeout=1.0)
        try:
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.executescript(_SCHEMA)
            row = self.db.execute("SELECT format FROM meta").fetchone()
            if row is None:
                self.db.execute("INSERT INTO meta (format) VALUES (?)", (FORMAT,))
            elif row[0] != FORMAT:
                raise AuditError(f"the monitor state {state} is of format {row[0]!r}, not {FORMAT}")
        except sqlite3.DatabaseError as exc:
            self.db.close()
            raise AuditError(f"cannot use the monitor state {state}: {exc}") from None
        except AuditError:
            self.db.close()
            raise

    def close(self) -> None:
        self.db.close()

    # -- reading what is published ---------------------------------------------------------------

    def _publication_key(self, folder: Path, log_dir: Path | None) -> VerifierKey:
        if (folder / "device.pub").exists():
            return load_verifier_key(folder / "device.pub")
        if log_dir is not None:
            return verifier_of(log_dir)
        raise AuditError(f"publication {folder} has neither device.pub nor a log to name its key")

    def _read_publication(self, folder: Path, logs: dict[str, _Log], alarms: list[Alarm]) -> None:
        log_dir = next((d for d in (folder / "log", folder) if (d / SEGMENTS_DIR).is_dir()), None)
        key = self._publication_key(folder, log_dir)
        origin = key.name
        known = self.known_logs(origin) if self.known_logs else key
        if known is None:
            return  # a log this monitor was not asked to follow
        if known != key:
            alarms.append(
                Alarm(
                    "key-changed",
                    origin,
                    f"publication {folder.name} names key {key} for log "
                    f"{origin}, not the key {known} the monitor follows",
                )
            )
            return
        entry = logs.setdefault(origin, _Log(key))
        if entry.key != key:
            alarms.append(Alarm("key-changed", origin, f"publications of log {origin} name two keys"))
            return
        entry.published = True
        notes: list[tuple[str, str]] = []
        cp_dir = folder / "checkpoints"
        if cp_dir.is_dir():
            files = sorted(p for p in cp_dir.iterdir() if p.suffix == ".note")[:MAX_NOTES]
            for path in files:
                notes.append((f"{folder.name}/checkpoints/{path.name}", _read_note(path)))
        if (folder / "latest.note").exists():
            notes.append((f"{folder.name}/latest.note", _read_note(folder / "latest.note")))
        if log_dir is not None:
            scan = scan_log(log_dir)
            entry.histories.append((folder.name, [r.leaf for r in scan.records]))
            notes += [(f"{folder.name} checkpoint {c.number}", c.note) for c in scan.checkpoints]
        for source, note in notes:
            self._sight(entry, source, note, alarms)

    def _sight(self, entry: _Log, source: str, note: str, alarms: list[Alarm]) -> _Sighting | None:
        origin = entry.key.name
        try:
            cp = open_checkpoint(note, entry.key)
            cosigners = frozenset(k.name for k in self.witness_keys if cosignatures(note, k))
        except NoteError as exc:
            alarms.append(Alarm("unverifiable", origin, f"{source} of log {origin} does not verify: {exc}"))
            return None
        sighting = _Sighting(cp.size, cp.root, source, cosigners)
        entry.sightings.append(sighting)
        return sighting

    def _read_witness_state(self, path: Path, logs: dict[str, _Log], alarms: list[Alarm]) -> None:
        witness_text, heads = _witness_heads(path)
        witness = next((k for k in self.witness_keys if str(k) == witness_text), None)
        if witness is None:
            raise AuditError(
                f"the witness state {path} is by witness key {witness_text}, which no --witness-key "
                "or --witness-policy names"
            )
        for origin, note in heads:
            entry = logs.get(origin)
            if entry is None:
                entry = self._pinned(origin, logs)
                if entry is None:
                    continue  # a log this monitor does not follow
            sighting = self._sight(entry, f"witness {witness.name}'s state", note, alarms)
            if sighting is None:
                continue
            if witness.name not in sighting.cosigners:
                alarms.append(
                    Alarm(
                        "unverifiable",
                        origin,
                        f"witness {witness.name}'s state holds a checkpoint "
                        f"of log {origin} (size {sighting.size}) without its own cosignature",
                    )
                )
                continue
            entry.witness_heads.append((witness.name, sighting.size, sighting.root))

    def _pinned(self, origin: str, logs: dict[str, _Log]) -> _Log | None:
        row = self.db.execute("SELECT key FROM logs WHERE origin = ?", (origin,)).fetchone()
        known = self.known_logs(origin) if self.known_logs else None
        key = known or (VerifierKey.parse(row[0]) if row else None)
        if key is None:
            return None
        return logs.setdefault(origin, _Log(key))

    # -- one pass -----------------------------------------------------------------------------------

    def check(self, published: Path, witness_states: Sequence[Path] = ()) -> MonitorResult:
        """Read everything once, compare it with what the monitor saw before, and keep what holds."""
        try:
            return self._check(published, witness_states)
        except sqlite3.Error as exc:
            # A state locked by a second monitor, or a full disk: one sentence, nothing half-kept.
            raise AuditError(f"cannot use the monitor state: {exc}") from None

    def _check(self, published: Path, witness_states: Sequence[Path]) -> MonitorResult:
        if not published.is_dir():
            raise AuditError(f"{published} is not a folder of published logs")
        alarms: list[Alarm] = []
        logs: dict[str, _Log] = {}
        for folder in sorted(p for p in published.iterdir() if p.is_dir()):
            try:
                self._read_publication(folder, logs, alarms)
            except (AuditError, OSError) as exc:
                # One device's broken publication is an alarm about it, not a blind spot for the others.
                why = exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)
                alarms.append(Alarm("unreadable", folder.name, f"publication {folder.name} cannot be read: {why}"))
        for path in witness_states:
            self._read_witness_state(path, logs, alarms)
        for (origin,) in self.db.execute("SELECT origin FROM logs").fetchall():
            if origin not in logs or not logs[origin].published:
                alarms.append(
                    Alarm(
                        "withdrawn",
                        origin,
                        f"log {origin}, which the monitor followed, is no longer published in {published}",
                    )
                )
        now = int(self._clock())
        summary: dict[str, dict[str, object]] = {}
        for origin, entry in sorted(logs.items()):
            found = self._check_log(origin, entry)
            alarms += found
            if not found and entry.published and entry.sightings:
                self._keep(origin, entry, now)
            row = self.db.execute("SELECT size, root FROM logs WHERE origin = ?", (origin,)).fetchone()
            summary[origin] = {
                "size": None if row is None else int(row[0]),
                "root": None if row is None else base64.b64encode(bytes(row[1])).decode(),
                "alarms": len(found),
            }
        return MonitorResult(alarms, summary)

    def _check_log(self, origin: str, entry: _Log) -> list[Alarm]:
        alarms: list[Alarm] = []
        row = self.db.execute("SELECT key, size, root, time FROM logs WHERE origin = ?", (origin,)).fetchone()
        if row is not None and row[0] != str(entry.key):
            # A rotation (docs/audit-format.md 5.1) is not followed yet: fail closed, an operator decides.
            return [
                Alarm(
                    "key-changed",
                    origin,
                    f"log {origin} is now signed by {entry.key}, not by the key {row[0]} the monitor pinned",
                )
            ]
        by_size: dict[int, dict[bytes, list[_Sighting]]] = {}
        for s in entry.sightings:
            by_size.setdefault(s.size, {}).setdefault(s.root, []).append(s)
        split: set[int] = set()
        for size, roots in sorted(by_size.items()):
            if len(roots) > 1:
                split.add(size)
                views = [
                    f"{_short(root)} {_who(frozenset().union(*(s.cosigners for s in seen)))} (from {seen[0].source})"
                    for root, seen in roots.items()
                ]
                alarms.append(
                    Alarm(
                        "split-view",
                        origin,
                        f"split view: log {origin} has {len(roots)} checkpoints "
                        f"of size {size} with different roots: {' and '.join(views)}",
                    )
                )
        for publication, leaves in entry.histories:
            roots_at = merkle.roots_at(leaves, {s.size for s in entry.sightings})
            for size, roots in sorted(by_size.items()):
                if size in split or size not in roots_at:
                    continue
                for root, seen in roots.items():
                    if root != roots_at[size]:
                        alarms.append(
                            Alarm(
                                "fork",
                                origin,
                                f"fork: the checkpoint of log {origin} of size {size} "
                                f"from {seen[0].source} ({_who(seen[0].cosigners)}) is not the tree of "
                                f"the records published in {publication}",
                            )
                        )
        alarms += self._against_the_past(origin, entry, row, by_size)
        alarms += self._witness_history(origin, entry)
        alarms += self._quorum(origin, entry, by_size)
        return alarms

    def _against_the_past(
        self, origin: str, entry: _Log, row: tuple | None, by_size: dict[int, dict[bytes, list[_Sighting]]]
    ) -> list[Alarm]:
        alarms: list[Alarm] = []
        rewritten: set[int] = set()
        for size, roots in sorted(by_size.items()):
            past = self.db.execute("SELECT root FROM seen WHERE origin = ? AND size = ?", (origin, size)).fetchone()
            if past is not None and any(root != bytes(past[0]) for root in roots):
                rewritten.add(size)
                alarms.append(
                    Alarm(
                        "rollback",
                        origin,
                        f"rollback: log {origin} now shows a checkpoint of size "
                        f"{size} with a root other than the one the monitor saw before",
                    )
                )
        if row is None:
            return alarms
        seen_size, seen_root, seen_time = int(row[1]), bytes(row[2]), int(row[3])
        published = [s for s in entry.sightings if not s.source.startswith("witness ")]
        latest = max((s.size for s in published), default=0)
        if entry.published and latest < seen_size:
            alarms.append(
                Alarm(
                    "rollback",
                    origin,
                    f"rollback: log {origin} now publishes checkpoints up to size "
                    f"{latest}, below the size {seen_size} the monitor saw at {_utc(seen_time)}",
                )
            )
        for publication, leaves in entry.histories:
            heads = [s for s in published if s.size <= len(leaves) and s.size >= seen_size]
            if not heads:
                continue
            head = max(heads, key=lambda s: s.size)
            if head.size in rewritten:
                continue  # already said: another root for a size the monitor saw
            try:
                if head.size == seen_size:
                    if head.root != seen_root:
                        raise ProofError("the roots differ")
                else:
                    proof = merkle.consistency_proof(seen_size, leaves[: head.size])
                    merkle.verify_consistency(seen_size, head.size, seen_root, head.root, proof)
            except ProofError as exc:
                alarms.append(
                    Alarm(
                        "rollback",
                        origin,
                        f"rollback: the records of log {origin} published in "
                        f"{publication} (size {head.size}) do not extend the checkpoint of size "
                        f"{seen_size} the monitor saw at {_utc(seen_time)} ({exc})",
                    )
                )
        return alarms

    def _witness_history(self, origin: str, entry: _Log) -> list[Alarm]:
        alarms = []
        for witness, size, root in entry.witness_heads:
            row = self.db.execute(
                "SELECT size, root FROM witnesses WHERE witness = ? AND origin = ?", (witness, origin)
            ).fetchone()
            if row is not None and (size < int(row[0]) or (size == int(row[0]) and root != bytes(row[1]))):
                alarms.append(
                    Alarm(
                        "witness-rollback",
                        origin,
                        f"witness {witness}'s state for log {origin} went "
                        f"back: it holds size {size}, after size {int(row[0])} before",
                    )
                )
        return alarms

    def _quorum(self, origin: str, entry: _Log, by_size: dict[int, dict[bytes, list[_Sighting]]]) -> list[Alarm]:
        if self.policy is None or not entry.sightings:
            return []
        latest = max(by_size)
        best: dict[str, int] = {}
        for s in entry.sightings:
            for name in s.cosigners:
                best[name] = max(best.get(name, 0), s.size)
        sizes = sorted((best.get(w.name, 0) for w in self.policy.witnesses), reverse=True)
        witnessed = sizes[self.policy.quorum - 1]
        if witnessed >= latest:
            return []
        have = sorted(name for name in best if best[name] >= latest and name in {w.name for w in self.policy.witnesses})
        return [
            Alarm(
                "quorum",
                origin,
                f"missing quorum: the latest checkpoint of log {origin} (size {latest}) is "
                f"cosigned by {len(have)} of the {self.policy.quorum} witnesses the policy "
                f"{self.policy.describe()} needs ({', '.join(have) or 'none'}); the quorum covers size "
                f"{witnessed} only",
            )
        ]

    def _keep(self, origin: str, entry: _Log, now: int) -> None:
        """Remember what held: the largest published checkpoint, every (size, root), each witness's head.

        The head is the publication's, not a witness's: a witness may be ahead of the last export,
        and the next run's rollback check compares publications with publications."""
        published = [s for s in entry.sightings if not s.source.startswith("witness ")]
        if not published:
            return
        head = max(published, key=lambda s: s.size)
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.execute(
                "INSERT INTO logs (origin, key, size, root, time) VALUES (?, ?, ?, ?, ?) ON CONFLICT(origin) DO "
                "UPDATE SET size=excluded.size, root=excluded.root, time=excluded.time WHERE excluded.size > size",
                (origin, str(entry.key), head.size, head.root, now),
            )
            for s in entry.sightings:
                self.db.execute(
                    "INSERT OR IGNORE INTO seen (origin, size, root, time) VALUES (?, ?, ?, ?)",
                    (origin, s.size, s.root, now),
                )
            for witness, size, root in entry.witness_heads:
                self.db.execute(
                    "INSERT INTO witnesses (witness, origin, size, root, time) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT(witness, origin) DO UPDATE SET size=excluded.size, root=excluded.root, "
                    "time=excluded.time",
                    (witness, origin, size, root, now),
                )
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")


def _read_note(path: Path) -> str:
    data = read_regular(path, "checkpoint", MAX_NOTE_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise AuditError(f"the checkpoint {path} is not UTF-8 text") from None


def _witness_heads(path: Path) -> tuple[str, list[tuple[str, str]]]:
    """(the witness's key, [(origin, cosigned note)]) from a witness service's SQLite database or the
    verifier's witness-state.json; read only, never locked for writing."""
    with open(path, "rb") as handle:
        magic = handle.read(len(SQLITE_MAGIC))
    if magic != SQLITE_MAGIC:
        state = read_state(path)
        return state.witness, [(e.origin, e.note) for e in state.logs.values()]
    try:
        db = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        try:
            witness = db.execute("SELECT key FROM witness").fetchone()
            heads = [(str(o), str(n)) for o, n in db.execute("SELECT origin, note FROM logs").fetchall()]
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise AuditError(f"the witness state {path} is not a witness's SQLite database: {exc}") from None
    if witness is None:
        raise AuditError(f"the witness state {path} names no witness key")
    return str(witness[0]), heads


def _utc(timestamp: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(timestamp))


def render(result: MonitorResult) -> str:
    lines = [f"ALARM {a.message}" for a in result.alarms]
    for origin, held in result.logs.items():
        state = "consistent" if not held["alarms"] else f"{held['alarms']} alarm(s)"
        lines.append(f"log {origin}: size {held['size']}, {state}")
    return "\n".join(lines) + "\n" if lines else "no published logs\n"


def dumps(result: MonitorResult) -> str:
    return json.dumps(result.as_dict(), indent=2)

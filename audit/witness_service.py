"""A witness anyone can run: C2SP tlog-witness `add-checkpoint` over HTTPS, its state in SQLite.

`audit witness serve` runs it. It holds its own cosignature/v1 key and nothing of the verifier's,
knows the logs it witnesses from a file of their verifier keys (`--logs`, one `audit keygen` .pub
line each, re-read when it changes: adding a device needs no restart), and keeps, per log origin,
the last checkpoint it cosigned in an SQLite database (`--state`), updated in the same transaction
that checks it, before the answer is sent (the spec's atomicity rule).

    POST <prefix>/add-checkpoint
    old <size>\\n  <consistency proof lines, base64>  \\n  <the checkpoint note>

Answers (tlog-witness): 200 and the cosignature line; 400 malformed or old size above the size;
403 no signature by the log's key; 404 unknown origin; 409 (`text/x.tlog.size`, the size it holds)
when the old size is not its last cosigned size, or a second root for that size (a fork); 422 a
consistency proof that does not verify. Beyond the spec, as the verifier's witness does (section
8): one Ed25519 key is one log (a key listed under two origins is refused at load), and it never
signs a time it cannot stand behind: a clock before its last cosignature of the log, before
`EARLIEST_CLOCK` or beyond `LATEST_CLOCK` answers 503 and signs nothing. Every refusal of a
known log is kept in the database (the newest `MAX_REFUSALS`), as evidence against a log.
"""

from __future__ import annotations

import base64
import binascii
import http.server
import logging
import os
import sqlite3
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specsteer.audit import merkle
from specsteer.audit.cosignature import WitnessSigner, signature_line
from specsteer.audit.errors import AuditError, NoteError, ProofError
from specsteer.audit.files import read_regular
from specsteer.audit.note import Checkpoint, VerifierKey, open_note

__all__ = ["Answer", "KnownLogs", "TlogWitness", "serve"]

log = logging.getLogger("audit.witness")

MAX_BODY_BYTES = 80 * 1024  # a note (64 KiB at most) and 63 proof lines
MAX_PROOF_LINES = 63  # the spec's limit
MAX_REFUSALS = 256
EARLIEST_CLOCK = 1_704_067_200  # 2024-01-01: a clock before this is unset, not a date to sign
LATEST_CLOCK = 2**40  # ~ year 36812: a clock beyond it is broken
SIZE_TYPE = "text/x.tlog.size"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS witness (key TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS logs (
    origin TEXT PRIMARY KEY, key TEXT NOT NULL, size INTEGER NOT NULL, root BLOB NOT NULL,
    time INTEGER NOT NULL, note TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS refusals (
    id INTEGER PRIMARY KEY AUTOINCREMENT, origin TEXT NOT NULL, size INTEGER NOT NULL,
    time INTEGER NOT NULL, status INTEGER NOT NULL, reason TEXT NOT NULL);
"""


@dataclass(frozen=True)
class Answer:
    status: int
    body: str
    content_type: str = "text/plain; charset=utf-8"


class KnownLogs:
    """The logs a witness serves: verifier keys by origin, re-read when the file changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._keys: dict[str, VerifierKey] = {}
        self._lock = threading.Lock()
        self.reload()

    def reload(self) -> None:
        """Re-read the file if it changed; a file that became unusable keeps the last good list."""
        try:
            info = os.stat(self.path)
        except OSError as exc:
            raise AuditError(f"cannot read the witnessed logs file {self.path}: {exc.strerror or exc}") from None
        stamp = (info.st_mtime_ns, info.st_size)
        with self._lock:
            if stamp == self._stamp:
                return
            self._keys = _parse_known(read_regular(self.path, "the witnessed logs file", 4 << 20), self.path)
            self._stamp = stamp

    def get(self, origin: str) -> VerifierKey | None:
        try:
            self.reload()
        except AuditError as exc:
            log.warning("witness: %s; keeping the logs it listed before", exc)
        with self._lock:
            return self._keys.get(origin)


def _parse_known(data: bytes, path: Path) -> dict[str, VerifierKey]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AuditError(f"the witnessed logs file {path} is not UTF-8 text") from None
    keys: dict[str, VerifierKey] = {}
    owners: dict[bytes, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            key = VerifierKey.parse(line)
        except AuditError as exc:
            raise AuditError(f"the witnessed logs file {path}, line {number}: {exc}") from None
        # One Ed25519 key is one log: under two origins it could be shown two histories that each verify.
        if key.name in keys or key.public_key in owners:
            raise AuditError(f"the witnessed logs file {path}, line {number}: origin or key {key.name} is listed twice")
        keys[key.name] = key
        owners[key.public_key] = key.name
    return keys


def _parse_request(body: bytes) -> tuple[int, list[bytes], str]:
    """(old size, proof, checkpoint note) of an add-checkpoint body; NoteError if malformed."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise NoteError("the request is not UTF-8 text") from None
    head, sep, note = text.partition("\n\n")
    if not sep:
        raise NoteError("the request has no empty line before the checkpoint")
    lines = head.split("\n")
    old = lines[0].removeprefix("old ")
    if not lines[0].startswith("old ") or not old.isdigit() or old != str(int(old)) or len(old) > 20:
        raise NoteError("the request's first line is not `old <size>`")
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise NoteError(f"the consistency proof has more than {MAX_PROOF_LINES} lines")
    proof = []
    for line in lines[1:]:
        try:
            node = base64.b64decode(line, validate=True)
        except (binascii.Error, ValueError):
            raise NoteError("a consistency proof line is not base64") from None
        if len(node) != 32:
            raise NoteError("a consistency proof line is not a SHA-256 hash")
        proof.append(node)
    return int(old), proof, note


class TlogWitness:
    """The add-checkpoint decision and the witness's durable state."""

    def __init__(
        self, signer: WitnessSigner, state: Path, known: KnownLogs, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.signer = signer
        self.known = known
        self._clock = clock
        self._lock = threading.Lock()
        if not state.exists():
            # Private from the first byte: the state is the witness's evidence, nobody else's to edit.
            os.close(os.open(state, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        self.db = sqlite3.connect(state, isolation_level=None, check_same_thread=False)
        try:
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.executescript(_SCHEMA)
            row = self.db.execute("SELECT key FROM witness").fetchone()
            if row is None:
                self.db.execute("INSERT INTO witness (key) VALUES (?)", (str(signer.key),))
            elif row[0] != str(signer.key):
                raise AuditError(f"the witness state {state} belongs to witness key {row[0]}, not {signer.key}")
        except sqlite3.DatabaseError as exc:
            self.db.close()
            raise AuditError(f"the witness state {state} is not a usable SQLite database: {exc}") from None
        except AuditError:
            self.db.close()
            raise

    def close(self) -> None:
        self.db.close()

    def latest(self, origin: str) -> tuple[int, bytes, int] | None:
        """(size, root, time) of the last checkpoint of `origin` this witness cosigned."""
        with self._lock:
            row = self.db.execute("SELECT size, root, time FROM logs WHERE origin = ?", (origin,)).fetchone()
        return None if row is None else (int(row[0]), bytes(row[1]), int(row[2]))

    def add_checkpoint(self, body: bytes) -> Answer:
        try:
            old, proof, note = _parse_request(body)
            checkpoint = Checkpoint.parse_body(_note_text(note))
        except NoteError as exc:
            return Answer(400, f"{exc}\n")
        key = self.known.get(checkpoint.origin)
        if key is None:
            return Answer(404, f"unknown log origin {checkpoint.origin!r}\n")
        try:
            open_note(note, key)
        except NoteError as exc:
            return self._refuse(checkpoint, 403, f"no valid signature by the log's key: {exc}")
        if old > checkpoint.size:
            return self._refuse(checkpoint, 400, f"old size {old} is above the checkpoint's size {checkpoint.size}")
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                answer = self._decide(key, checkpoint, old, proof, note)
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
        if answer.status != 200:
            log.info("witness: refused %s size %d: %s", checkpoint.origin, checkpoint.size, answer.body.strip())
        return answer

    def _decide(self, key: VerifierKey, cp: Checkpoint, old: int, proof: list[bytes], note: str) -> Answer:
        """Inside the transaction: check against the stored checkpoint, then store and cosign."""
        row = self.db.execute("SELECT key, size, root, time FROM logs WHERE origin = ?", (cp.origin,)).fetchone()
        last_size, last_root, last_time = (0, b"", 0) if row is None else (int(row[1]), bytes(row[2]), int(row[3]))
        if row is not None and row[0] != str(key):
            return self._refused(
                cp, 403, f"the log's key changed from {row[0]} to {key}; the operator must re-enrol it"
            )
        if old != last_size:
            return self._refused(cp, 409, f"old size {old} is not the last cosigned size {last_size}", f"{last_size}\n")
        if old == cp.size and row is not None and cp.root != last_root:
            return self._refused(cp, 409, f"a second root for the cosigned size {old}: the log forked", f"{old}\n")
        if old == 0 and proof:
            return self._refused(cp, 400, "a consistency proof from size 0 must be empty")
        if 0 < old < cp.size:
            try:
                merkle.verify_consistency(old, cp.size, last_root, cp.root, proof)
            except ProofError as exc:
                return self._refused(cp, 422, f"not consistent with the last cosigned checkpoint: {exc}")
        now = int(self._clock())
        if not EARLIEST_CLOCK <= now <= LATEST_CLOCK or now < last_time:
            # A cosignature/v1 dates what the witness saw; a clock it cannot trust dates nothing.
            return self._refused(
                cp, 503, f"the witness's clock reads {now}, which it cannot sign (its last cosignature: {last_time})"
            )
        signature = self.signer.cosign(cp, now)
        line = signature_line(self.signer.name, signature)
        self.db.execute(
            "INSERT INTO logs (origin, key, size, root, time, note) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(origin) DO UPDATE SET key=excluded.key, size=excluded.size, root=excluded.root, "
            "time=excluded.time, note=excluded.note",
            (cp.origin, str(key), cp.size, cp.root, now, note + line),
        )
        return Answer(200, line)

    def _refused(self, cp: Checkpoint, status: int, reason: str, body: str | None = None) -> Answer:
        """Keep the refusal (inside the open transaction) and answer it."""
        self.db.execute(
            "INSERT INTO refusals (origin, size, time, status, reason) VALUES (?, ?, ?, ?, ?)",
            (cp.origin, cp.size, int(self._clock()), status, reason),
        )
        self.db.execute("DELETE FROM refusals WHERE id <= (SELECT MAX(id) FROM refusals) - ?", (MAX_REFUSALS,))
        if body is not None:
            return Answer(status, body, SIZE_TYPE)
        return Answer(status, f"{reason}\n")

    def _refuse(self, cp: Checkpoint, status: int, reason: str) -> Answer:
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            answer = self._refused(cp, status, reason)
            self.db.execute("COMMIT")
        return answer


def _note_text(note: str) -> str:
    from specsteer.audit.note import parse_note

    return parse_note(note).text


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = 10  # a client that stalls mid-request loses its connection, not a thread forever

    def do_POST(self) -> None:
        if self.path.rstrip("/") != f"{self.server.prefix}/add-checkpoint":
            self._send(Answer(404, "not found\n"))
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._send(Answer(411, "a Content-Length is required\n"))
            return
        if not 0 < length <= MAX_BODY_BYTES:
            self._send(Answer(413, f"the body must be 1 to {MAX_BODY_BYTES} bytes\n"))
            return
        body = self.rfile.read(length)
        try:
            answer = self.server.witness.add_checkpoint(body)
        except (AuditError, sqlite3.Error) as exc:
            log.error("witness: cannot record the checkpoint: %s", exc)
            answer = Answer(500, "the witness cannot record its state\n")  # fail closed: nothing signed
        self._send(answer)

    def do_GET(self) -> None:
        self._send(Answer(405, "add-checkpoint is a POST\n"))

    def _send(self, answer: Answer) -> None:
        data = answer.body.encode()
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("witness: %s %s", self.address_string(), format % args)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], witness: TlogWitness, prefix: str, context: ssl.SSLContext) -> None:
        super().__init__(address, _Handler)
        self.witness = witness
        self.prefix = prefix.rstrip("/")
        # The handshake runs in the connection's own thread (`_Handler.setup`), under its timeout:
        # in accept() a client that never finishes it would stall every other one.
        self.socket = context.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    def handle_error(self, request: object, client_address: object) -> None:
        log.debug("witness: a connection from %s ended badly", client_address, exc_info=True)


def serve(
    witness: TlogWitness, host: str, port: int, cert: Path, key: Path, *, prefix: str = ""
) -> http.server.ThreadingHTTPServer:
    """The HTTPS server (bound, not yet serving: call `serve_forever`); TLS 1.2 or later only."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise AuditError(f"the witness's TLS certificate or key is unusable: {exc}") from None
    return _Server((host, port), witness, prefix, context)

"""The device's side of its witness policy: checkpoints to the witnesses it names, and what went wrong.

`DeviceWitnessing` holds a log's policy (`audit.policy`). After each generation (and when the log
closes) `round()` signs a checkpoint of the log and sends it, with the RFC 9162 proof from the last
size that witness cosigned, to every witness with a URL, straight from the device over HTTPS as a
C2SP tlog-witness `add-checkpoint`: the verifier, whose log this holds to account, never carries
them, so it can neither withhold nor forge what they answer. Only the log's own signed checkpoint
and proof go out (functions of the log, as on a Close). A cosignature is kept (checkpoints.jsonl)
only if it verifies under the policy's key for that witness and is dated within the exchange.

`faults` are the cloud's misbehaviour the recorder saw in its answers to Closes (withheld,
replayed, forged, other key, misdated, a second answer); `problems` what the last round's direct
witnesses did wrong or could not do (down, refused). `quorum_met()` says whether the log's latest
checkpoint is cosigned by `quorum` of the policy's witnesses.
"""

from __future__ import annotations

import base64
import http.client
import ssl
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from specsteer.audit import merkle
from specsteer.audit.cosignature import cosignatures, time_problem
from specsteer.audit.errors import AuditError, NoteError
from specsteer.audit.log import AuditLog
from specsteer.audit.note import Checkpoint, parse_note
from specsteer.audit.policy import PolicyWitness, WitnessPolicy

__all__ = ["DeviceWitnessing", "add_checkpoint_body"]

TIMEOUT_S = 5.0
MAX_ANSWER_BYTES = 64 * 1024


def add_checkpoint_body(old: int, proof: list[bytes], note: str) -> bytes:
    lines = [f"old {old}"] + [base64.b64encode(node).decode() for node in proof]
    return ("\n".join(lines) + "\n\n" + note).encode()


def _post(witness: PolicyWitness, body: bytes, timeout: float) -> tuple[int, str, str]:
    assert witness.url is not None
    parts = urlsplit(witness.url)
    context = ssl.create_default_context(cafile=None if witness.ca is None else str(witness.ca))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    conn = http.client.HTTPSConnection(parts.hostname or "", parts.port or 443, timeout=timeout, context=context)
    try:
        conn.request("POST", f"{parts.path}/add-checkpoint", body, {"Content-Type": "text/plain"})
        response = conn.getresponse()
        data = response.read(MAX_ANSWER_BYTES + 1)
        if len(data) > MAX_ANSWER_BYTES:
            raise AuditError(f"witness {witness.name} answered with more than {MAX_ANSWER_BYTES} bytes")
        return response.status, response.getheader("Content-Type", ""), data.decode("utf-8", "replace")
    finally:
        conn.close()


@dataclass
class DeviceWitnessing:
    log: AuditLog
    policy: WitnessPolicy
    timeout: float = TIMEOUT_S
    faults: list[str] = field(default_factory=list)  # the cloud's misbehaviour, as the recorder saw it
    problems: list[str] = field(default_factory=list)  # the last round's direct witnesses
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _exchange: tuple[int, int] | None = None

    def cloud_fault(self, message: str) -> None:
        with self._lock:
            self.faults.append(message)

    def round(self) -> list[str]:
        """Ask every direct witness to cosign the log as it stands; return what went wrong (also `problems`)."""
        problems: list[str] = []
        note = self.log.checkpoint()
        for witness in self.policy.direct:
            try:
                problem = self._ask(witness, note)
            except (OSError, ssl.SSLError, http.client.HTTPException) as exc:
                problem = f"witness {witness.name} at {witness.url} is unreachable: {exc}"
            except AuditError as exc:
                problem = str(exc)
            if problem is not None:
                problems.append(problem)
        self.problems = problems
        return problems

    def _ask(self, witness: PolicyWitness, note: str) -> str | None:
        cp = Checkpoint.parse_body(parse_note(note).text)
        old = self.log.cosigned_by(witness.key)
        old_size = 0 if old is None else old[0]
        if old_size == cp.size:
            return None  # it already cosigned this checkpoint
        for _ in range(2):  # a 409 names the size the witness holds: prove from it once
            proof = (
                merkle.consistency_proof(old_size, self.log.leaf_hashes[: cp.size]) if 0 < old_size < cp.size else []
            )
            asked = time.time()
            status, content_type, text = _post(witness, add_checkpoint_body(old_size, proof, note), self.timeout)
            answered = time.time()
            if status == 409 and content_type.startswith("text/x.tlog.size") and text.strip().isdigit():
                held = int(text.strip())
                if held > cp.size:
                    return (
                        f"witness {witness.name} holds size {held} of this log, more than its {cp.size} records: "
                        "the log was rolled back, or another copy of it grew"
                    )
                if held == old_size:  # the same size twice: its root differs from ours (a fork)
                    return f"witness {witness.name} refused the checkpoint of size {cp.size}: {text.strip()}"
                old_size = held
                continue
            if status != 200:
                return (
                    f"witness {witness.name} refused the checkpoint of size {cp.size} ({status}): {text.strip()[:200]}"
                )
            return self._keep(witness, note, cp, text, asked, answered)
        return f"witness {witness.name} kept answering with a conflict for the checkpoint of size {cp.size}"

    def _keep(
        self, witness: PolicyWitness, note: str, cp: Checkpoint, text: str, asked: float, answered: float
    ) -> str | None:
        if not text.endswith("\n") or not all(line.startswith("— ") for line in text[:-1].split("\n")):
            return f"witness {witness.name} answered with something other than signature lines"
        cosigned = note + text
        try:
            found = cosignatures(cosigned, witness.key)
        except NoteError as exc:
            return f"witness {witness.name} answered with a cosignature that does not verify: {exc}"
        if not found:
            return f"witness {witness.name} answered with no cosignature by its key {witness.key}"
        problem = time_problem(found[0].timestamp, asked, answered)
        if problem is not None:
            return f"witness {witness.name}'s cosignature of size {cp.size} vouches for nothing: {problem}"
        # Only the witness's own line is kept: other lines in its answer are not ours to vouch for.
        own = "".join(line + "\n" for line in text[:-1].split("\n") if line.startswith(f"— {witness.name} "))
        self.log.store_cosigned(note + own, key=witness.key)
        return None

    def verifier_answered(self, cosigned_size: int) -> None:
        """The verifier's witness validly cosigned `cosigned_size`; the log now ends with that exchange."""
        with self._lock:
            self._exchange = (cosigned_size, self.log.size)

    def cosigners(self) -> list[str]:
        """The policy's witnesses whose cosignature covers every record of the log as it stands (the
        verifier's witness also when only the Close it answered and its answer came after its size)."""
        size = self.log.size
        out = []
        for w in self.policy.witnesses:
            c = self.log.cosigned_by(w.key)
            if c is not None and (c[0] >= size or (w.url is None and self._exchange == (c[0], size))):
                out.append(w.name)
        return out

    def quorum_met(self) -> bool:
        return len(self.cosigners()) >= self.policy.quorum

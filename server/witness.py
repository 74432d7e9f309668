"""The verifier as each device log's witness (C2SP tlog-witness's checks, over our gRPC stream).

A device's Close carries its audit log's signed checkpoint and an RFC 9162 consistency proof from
the last size this witness cosigned for it (`core.wire.WitnessRequest`). The witness cosigns
(C2SP tlog-cosignature/v1, `audit.cosignature`) only if

1. the checkpoint is signed by the log key pinned for this device (the certificate's name, which
   mutual TLS verified) at first sight: trust on first use, so a device that changes its log key
   is refused until the operator removes its entry from the state file. A log key is pinned for
   one device only: a key already pinned for another device is refused at first sight, or one log
   could be cosigned under two names with two histories (a split view) that each verify;
2. it is not smaller than the last cosigned checkpoint (no rollback), and the proof shows the
   last cosigned tree is a prefix of it (no rewrite, no fork). At first sight there is nothing
   to be consistent with, and the checkpoint is accepted as it is.

Anything else is refused, never cosigned, and the refusal is kept in the state file. A request
whose proof starts from another size than the last cosigned one (two of the device's sessions
closing at once) is refused as a conflict; the device's next Close proves from the cosignature
it holds. The state (`audit.witness_state`) is rewritten atomically after every decision, so a
cosignature is never given for a checkpoint the witness would forget in a crash.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specsteer.audit import merkle
from specsteer.audit.cosignature import WitnessSigner, add_cosignature, load_witness_signer
from specsteer.audit.errors import AuditError, ProofError
from specsteer.audit.note import SIG_PREFIX, Checkpoint, VerifierKey
from specsteer.audit.witness_state import MAX_REFUSALS, WitnessedLog, WitnessState, read_state
from specsteer.core.errors import ConfigError
from specsteer.core.fileio import atomic_write
from specsteer.core.wire import WitnessRequest

__all__ = ["Cosigned", "Refused", "Witness", "load_witness"]

log = logging.getLogger("server")

STATE_FILE = "witness-state.json"


@dataclass(frozen=True)
class Cosigned:
    witness: str
    signature: bytes  # key ID || timestamp || Ed25519, the signature line's base64 content


@dataclass(frozen=True)
class Refused:
    reason: str


class Witness:
    """Cosigns device checkpoints that extend the last one it cosigned for that device's log."""

    def __init__(self, signer: WitnessSigner, state_path: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.signer = signer
        self.state_path = state_path
        self._clock = clock
        self._lock = threading.Lock()
        self.state = _read_or_new(state_path, signer)

    def cosign(self, device: str, request: WitnessRequest) -> Cosigned | Refused:
        """Check `request` from `device` (its certificate's name) and cosign it, or say why not."""
        with self._lock:
            decision = self._decide(device, request)
            if isinstance(decision, Refused):
                self.state.refusals.append(
                    {
                        "device": device,
                        "origin": request.origin,
                        "size": request.size,
                        "time": int(self._clock()),
                        "reason": decision.reason,
                    }
                )
                # Only the last MAX_REFUSALS are kept, in memory as in the file: a device sending bad
                # checkpoints over and over would otherwise grow the witness's memory for good.
                del self.state.refusals[:-MAX_REFUSALS]
                log.info("witness: refused %s's checkpoint of size %d: %s", device, request.size, decision.reason)
            self._save()
            return decision

    def _decide(self, device: str, request: WitnessRequest) -> Cosigned | Refused:
        try:
            key = VerifierKey(request.origin, request.log_key)
        except AuditError as exc:
            return Refused(f"the log key is unusable: {exc}")
        checkpoint = Checkpoint(request.origin, request.size, request.root_hash)
        if not key.verify(checkpoint.body().encode(), request.signature):
            return Refused("the checkpoint's signature does not verify under the log key it names")
        last = self.state.logs.get(device)
        if last is None:
            other = _pinned_elsewhere(self.state, device, key)
            if other is not None:
                return Refused(
                    f"the log key {key} is pinned for device {other}: one log witnessed under two device names "
                    "could be shown two histories (a split view), so it is refused until the operator removes "
                    f"{other}'s entry from the state file"
                )
        else:
            if last.key != str(key):
                return Refused(
                    f"the checkpoint is signed by log key {key}, not the key {last.key} pinned for this device"
                )
            if request.size < last.size:
                return Refused(f"size {request.size} is smaller than the last cosigned size {last.size}: a rollback")
            if request.size == last.size:
                if request.root_hash != last.root:
                    return Refused(f"a second root for the cosigned size {last.size}: the log forked")
            elif request.old_size != last.size:
                return Refused(
                    f"the proof starts at size {request.old_size}, but the last cosigned size is {last.size} "
                    "(a conflict: another Close was cosigned first)"
                )
            else:
                try:
                    merkle.verify_consistency(
                        last.size, request.size, last.root, request.root_hash, request.consistency_proof
                    )
                except ProofError as exc:
                    return Refused(f"the checkpoint is not consistent with the last cosigned one: {exc}")
        # A cosignature/v1 says "the largest consistent tree I have seen at this time": never go back in time.
        timestamp = max(int(self._clock()), last.time if last is not None else 0)
        signature = self.signer.cosign(checkpoint, timestamp)
        note = add_cosignature(_log_note(checkpoint, key, request.signature), self.signer.name, signature)
        self.state.logs[device] = WitnessedLog(
            request.origin, str(key), request.size, request.root_hash, timestamp, note
        )
        return Cosigned(self.signer.name, signature)

    def _save(self) -> None:
        try:
            atomic_write(self.state_path, self.state.dumps(), mode=0o600)
        except OSError as exc:
            # Fail closed: a cosignature the witness cannot remember must not be handed out.
            raise AuditError(f"cannot write the witness state {self.state_path}: {exc.strerror or exc}") from None


def _pinned_elsewhere(state: WitnessState, device: str, key: VerifierKey) -> str | None:
    """The other device, if any, whose entry pins `key`'s Ed25519 key (under whatever log name)."""
    for other, entry in sorted(state.logs.items()):
        if other == device:
            continue
        if entry.key == str(key) or _public_key(entry.key) == key.public_key:
            return other
    return None


def _public_key(text: str) -> bytes | None:
    try:
        return VerifierKey.parse(text).public_key
    except AuditError:
        return None


def _log_note(checkpoint: Checkpoint, key: VerifierKey, signature: bytes) -> str:
    """The device's signed checkpoint note, rebuilt from its parts (the signature line is canonical)."""
    line = base64.b64encode(key.id + signature).decode()
    return f"{checkpoint.body()}\n{SIG_PREFIX}{key.name} {line}\n"


def _read_or_new(path: Path, signer: WitnessSigner) -> WitnessState:
    if not path.exists():
        return WitnessState(str(signer.key))
    try:
        state = read_state(path)  # non-blocking, regular files only: a FIFO must not hang the start
    except AuditError as exc:
        raise ConfigError(str(exc)) from None
    if state.witness != str(signer.key):
        raise ConfigError(f"the witness state {path} belongs to witness key {state.witness}, not {signer.key}")
    return state


def load_witness(key_path: Path, state_path: Path | None = None) -> Witness:
    """The witness of `key_path` (a `server witness-key` signer key), its state beside it unless given."""
    try:
        signer = load_witness_signer(key_path)
    except AuditError as exc:
        raise ConfigError(f"the witness key is unusable: {exc}") from None
    state = state_path if state_path is not None else key_path.parent / STATE_FILE
    if not state.parent.is_dir():
        raise ConfigError(f"the witness state's folder {state.parent} does not exist")
    return Witness(signer, state)

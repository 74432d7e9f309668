"""The device's audit log, opened for a client: every uplink's bytes recorded before they are sent.

With a witness policy (`--witness-policy`, `[audit] witness_policy`) the log's checkpoints also go
to the policy's witnesses after each generation (`audit.witness_client`), and `witness_report()`
says, for the generation's stats, what the cloud did wrong in answering Closes and whether the
policy's quorum cosigned the log as it stands (`--require-witness` turns either into an error).

`open_audit_tap` is what `SpecSteerClient.connect` (and so `sdk generate --audit-log`) runs when
the client's config names an audit log: the log binds its key to the device's mutual-TLS
certificate (so an auditor compares it with only this device's streams in the verifier's
transcript), and with the witness's public key each Close is proved from the last cosignature that
verifies under it (docs/audit-format.md, §8). Only the device's writing side of `audit` is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specsteer.core.errors import ConfigError, SpecSteerError
from specsteer.core.wire import WitnessRequest
from specsteer.sdk.egress import EgressTap

if TYPE_CHECKING:
    from specsteer.audit.recorder import EgressRecorder
    from specsteer.audit.witness_client import DeviceWitnessing

__all__ = ["AuditedTap", "WitnessReport", "WitnessRequired", "check_audit_settings", "open_audit_tap"]


class WitnessRequired(SpecSteerError):
    """`require_witness` is set and the log is not witnessed as required (the cloud misbehaved, or
    the policy's quorum did not cosign); the generation itself finished (`.generation`)."""

    generation: object = None


@dataclass(frozen=True)
class WitnessReport:
    faults: tuple[str, ...]  # the cloud's misbehaviour seen since the last report
    problems: tuple[str, ...]  # the direct witnesses that did not cosign, and why
    cosigners: int | None  # how many of the policy's witnesses cosigned the log as it stands (None: no policy)
    quorum: int | None

    def stats(self) -> dict[str, float]:
        out = {"witness_faults": float(len(self.faults))}
        if self.cosigners is not None and self.quorum is not None:
            out |= {
                "witness_cosigners": float(self.cosigners),
                "witness_quorum_met": float(self.cosigners >= self.quorum),
            }
        return out

    def problem(self) -> str | None:
        """One sentence on what `require_witness` refuses, or None."""
        if self.faults:
            return f"the cloud misbehaved as the log's witness: {'; '.join(self.faults)}"
        if self.cosigners is not None and self.quorum is not None and self.cosigners < self.quorum:
            why = f" ({'; '.join(self.problems)})" if self.problems else ""
            return f"only {self.cosigners} of the {self.quorum} witnesses the policy requires cosigned the log{why}"
        return None


class AuditedTap:
    """The audit recorder as the egress tap (each `on_*` is the recorder's), plus what the device
    learnt about its witnesses."""

    def __init__(self, recorder: EgressRecorder, witnessing: DeviceWitnessing | None) -> None:
        self.audit_recorder = recorder
        self.begin_session = recorder.begin_session
        self.on_uplink = recorder.on_uplink
        self.on_downlink = recorder.on_downlink
        self.on_fallback = recorder.on_fallback
        self.on_guard_decision = recorder.on_guard_decision
        self.witnessing = witnessing
        self._reported = 0

    def witness_report(self) -> WitnessReport:
        """After a generation: withheld answers noted, the direct witnesses asked, what is new said."""
        self.audit_recorder.unanswered()
        problems: tuple[str, ...] = ()
        cosigners = quorum = None
        if self.witnessing is not None:
            problems = tuple(self.witnessing.round())
            cosigners, quorum = len(self.witnessing.cosigners()), self.witnessing.policy.quorum
        faults = tuple(self.audit_recorder.faults[self._reported :])
        self._reported = len(self.audit_recorder.faults)
        return WitnessReport(faults, problems, cosigners, quorum)

    def witness_request(self, session_id: str) -> WitnessRequest:
        """The log's signed checkpoint for the session's Close."""
        return self.audit_recorder.witness_request(session_id)


def check_audit_settings(
    log_dir: Path | None,
    key_path: Path | None,
    witness_key: Path | None,
    witness_policy: Path | None = None,
    require_witness: bool = False,
) -> None:
    """A key, witness key or policy without a log, or a log without its key, is a `ConfigError`."""
    if log_dir is None:
        if key_path is not None or witness_key is not None or witness_policy is not None or require_witness:
            what = (
                "an audit key" if key_path is not None
                else "a witness key" if witness_key is not None
                else "a witness policy" if witness_policy is not None
                else "require_witness"
            )  # fmt: skip
            raise ConfigError(f"{what} is for an audit log: set the audit log folder too (--audit-log DIR)")
        return
    if key_path is None:
        raise ConfigError("an audit log needs its signing key (--audit-key; create one with: audit keygen)")
    if require_witness and witness_key is None and witness_policy is None:
        raise ConfigError("require_witness needs a witness to require: give --witness-key or --witness-policy")


@contextmanager
def open_audit_tap(
    log_dir: Path,
    key_path: Path,
    cert: Path | None = None,
    witness_key: Path | None = None,
    witness_policy: Path | None = None,
) -> Iterator[EgressTap]:
    """The egress tap (an `AuditedTap`) that writes the audit log at `log_dir`, signed with the key at
    `key_path`; the log is closed (its last checkpoint signed, and sent to the policy's witnesses)
    when the block ends."""
    check_audit_settings(log_dir, key_path, witness_key, witness_policy)
    from specsteer.audit.cosignature import load_witness_key
    from specsteer.audit.errors import AuditError
    from specsteer.audit.identity import DeviceIdentity
    from specsteer.audit.log import AuditLog
    from specsteer.audit.note import load_signing_key
    from specsteer.audit.policy import load_policy
    from specsteer.audit.recorder import EgressRecorder
    from specsteer.audit.witness_client import DeviceWitnessing

    try:
        device = None if cert is None else DeviceIdentity.from_pem(Path(cert).read_bytes())
        witness = None if witness_key is None else load_witness_key(witness_key)
        policy = None if witness_policy is None else load_policy(witness_policy)
        if policy is not None and policy.via_verifier is not None:
            if witness is not None and witness != policy.via_verifier.key:
                raise ConfigError("the witness key and the policy's verifier witness (no url) differ: give one")
            witness = policy.via_verifier.key
        keys = () if policy is None else policy.keys
        with AuditLog.open(
            log_dir, load_signing_key(key_path), device=device, witness_key=witness, policy_keys=keys
        ) as log:
            recorder = EgressRecorder(log)
            witnessing = None if policy is None else DeviceWitnessing(log, policy)
            if witnessing is not None:
                recorder.on_cosigned = witnessing.verifier_answered
            yield AuditedTap(recorder, witnessing)
            if witnessing is not None:
                witnessing.round()  # the log's last records reach the witnesses before it closes
    except AuditError as exc:
        raise ConfigError(f"audit log {log_dir}: {exc}") from None

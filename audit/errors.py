"""The audit package's errors, under the SDK's `SpecSteerError` so one `except` in a CLI catches all.

SpecSteerError             core.errors, the root of every package's errors
└── AuditError             anything the audit package refuses, with a one-sentence message
    ├── KeyFileError       a signing or verifier key that cannot be read or does not match
    │   └── LogHandedOver  the log was handed to a newer key than the one it was opened with
    ├── LogCorruptError    a log whose stored bytes are damaged where a crash cannot explain it
    ├── RecordError        a record's bytes are not a well-formed record of the schema (audit.records)
    ├── ProofError         a Merkle proof does not prove what it claims (audit.merkle)
    ├── NoteError          a signed note or checkpoint is malformed or does not verify (audit.note)
    ├── EgressBlocked      an uplink the recorder refused to log, and so to let leave the device
    └── VerificationFailed `verify` found at least one failed check (carries the full report)

Every audit error is defined here; the modules that raise them import them from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specsteer.core.errors import SpecSteerError

if TYPE_CHECKING:
    from specsteer.audit.note import VerifierKey
    from specsteer.audit.verify import Report


class AuditError(SpecSteerError):
    """The audit log, a key or a proof is unusable; the message says which and why."""


class KeyFileError(AuditError):
    """A key file is missing, malformed, or belongs to another log."""


class LogHandedOver(KeyFileError):
    """The log was opened with the key its latest rotation handed it over from: `position` is the
    rotation's record, `new_key` the key that writes to it now."""

    def __init__(self, message: str, position: int, new_key: VerifierKey) -> None:
        super().__init__(message)
        self.position = position
        self.new_key = new_key


class LogCorruptError(AuditError):
    """Stored log bytes are damaged somewhere other than a torn final write."""


class RecordError(AuditError):
    """A record's bytes are not a well-formed record of the schema."""


class ProofError(AuditError):
    """A Merkle proof does not prove what it claims."""


class NoteError(AuditError):
    """A signed note or checkpoint is malformed or does not verify."""


class EgressBlocked(AuditError):
    """An uplink broke the egress contract, so it was neither logged nor sent."""


class VerificationFailed(AuditError):
    """At least one audit check failed; `report` holds every check, passed or not."""

    def __init__(self, report: Report) -> None:
        failed = [c for c in report.checks if not c.ok]
        names = ", ".join(c.name for c in failed)
        super().__init__(f"audit verification failed: {len(failed)} check(s) failed ({names})")
        self.report = report

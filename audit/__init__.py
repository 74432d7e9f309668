"""The device's tamper-evident egress log and the auditor's tools.

- `audit.merkle`: RFC 9162 Merkle tree hashes, inclusion and consistency proofs.
- `audit.note`: C2SP signed notes, Ed25519 log keys, tlog-checkpoint bodies.
- `audit.records`: the record schema (one canonical JSON object per record).
- `audit.identity`: a device's mTLS certificate as both ends see it (name, DER SHA-256).
- `audit.log`: the append-only, crash-safe segment store and its signed checkpoints.
- `core.contract`: what an uplink and a downlink may carry, checked live and by `verify` alike.
- `audit.recorder`: `EgressRecorder`, the recorder behind the device's one egress choke point
  (`sdk.remote` → `sdk.egress.EgressSession.uplink` → `EgressRecorder.on_uplink`).
- `audit.transcript`: the server's per-device record of what it received (the witness), and its comparison.
- `audit.cosignature`: C2SP tlog-cosignature/v1 (the witness's signature of a checkpoint) and its keys.
- `audit.witness_state`: the witness's record of what it cosigned, per device log.
- `audit.witnessing`: the checks of a Close's witness request and of the witness's cosignatures.
- `audit.witness_service`: `audit witness serve`, a C2SP tlog-witness anyone can run (HTTPS, SQLite state).
- `audit.policy`: a witness policy (which witnesses, k of n).
- `audit.witness_client`: the device's side of its policy: checkpoints to its witnesses, and what went wrong.
- `audit.rotation`: log-key rotation, a handover record signed by the key in force.
- `audit.verify`: every check an auditor runs, as a `Report`.
- `audit.monitor`: `audit monitor`, following published checkpoints and witness states over time.
- `audit.cli`: the `audit` command.

The on-disk format, for independent verifiers, is docs/audit-format.md.

The other modules:

- `audit.errors`: The audit package's errors, under the SDK's `SpecSteerError` so one `except` in a CLI
  catches all.
- `audit.files`: Opening the files an auditor is handed: regular files only, never waiting, never unbounded.
"""

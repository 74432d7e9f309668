"""Every kind of tampering with a log is caught by `verify`, with a message naming the record at fault."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from specsteer.audit import records
from specsteer.audit.errors import VerificationFailed
from specsteer.audit.log import AuditLog
from specsteer.audit.note import Checkpoint, SigningKey, open_checkpoint, sign_checkpoint
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.verify import Report, verify
from specsteer.core import wire
from specsteer.core.errors import ProtocolError
from specsteer.core.proto import verifier_pb2 as pb
from specsteer.core.session_types import WIRE_MAX_TOP_K, SessionParams
from tests.audit.helpers import (
    BuiltLog,
    build_log,
    checkpoint_notes,
    delete_record,
    downlink_deserializer,
    record_data,
    replace_record,
    segment_path,
    swap_records,
    truncate_records,
    uplink_positions,
    uplink_serializer,
    write_checkpoint_notes,
)


@pytest.fixture
def built(tmp_path: Path) -> BuiltLog:
    log = build_log(tmp_path, sessions=3)
    verify(log.directory, key=log.key.verifier)  # the untouched log verifies, so every failure below is the attack's
    return log


def _failures(built: BuiltLog, **kwargs: object) -> tuple[Report, str]:
    with pytest.raises(VerificationFailed) as info:
        verify(built.directory, key=built.key.verifier, **kwargs)  # type: ignore[arg-type]
    report = info.value.report
    return report, "\n".join(m for c in report.checks for m in c.failures)


def _failed(report: Report) -> set[str]:
    return {c.name for c in report.checks if not c.ok}


def test_a_flipped_byte_in_a_record(built: BuiltLog) -> None:
    target = uplink_positions(built.directory)[2]
    path, offset, _ = segment_path(built.directory, target)
    buf = bytearray(path.read_bytes())
    buf[offset + 4 + 40] ^= 0x20
    path.write_bytes(bytes(buf))
    report, text = _failures(built)
    assert f"record {target} (seg-000000000000.log at byte {offset}): checksum mismatch" in text
    assert {"log integrity", "checkpoints"} <= _failed(report)


def test_a_rewritten_record_with_a_fixed_up_checksum(built: BuiltLog) -> None:
    """A careful attacker re-encodes the record, its payload hash and its frame checksum: only the
    signed roots catch it, and the report narrows it to the records between two checkpoints."""
    target = uplink_positions(built.directory)[5]
    rec = records.parse(record_data(built.directory, target))
    msg = pb.Uplink.FromString(rec.payload or b"")
    msg.round.draft_ids[0] = (msg.round.draft_ids[0] + 1) % 500
    payload = msg.SerializeToString(deterministic=True)
    forged = records.encode({**rec.fields, **records.payload_fields("up", payload)})
    replace_record(built.directory, target, forged)
    report, text = _failures(built)
    assert _failed(report) == {"checkpoints"}
    ranges = []
    for line in text.splitlines():  # every checkpoint from the altered record on fails; the first narrows it
        lo, hi = (int(x) for x in line.split("between record ")[1].split(" was")[0].split(" and record "))
        ranges.append((hi - lo, lo, hi))
    _, lo, hi = min(ranges)
    assert lo <= target <= hi and hi - lo < 12  # localized to one session's records


def test_a_deleted_record(built: BuiltLog) -> None:
    size = len(uplink_positions(built.directory))
    target = uplink_positions(built.directory)[3]
    delete_record(built.directory, target)
    report, text = _failures(built)
    assert f"record {target} (seg-000000000000.log" in text and f"says it is record {target + 1}" in text
    assert "records before it are missing" in text
    assert {"log integrity", "checkpoints", "session structure"} <= _failed(report)
    assert size


def test_two_records_swapped(built: BuiltLog) -> None:
    a = uplink_positions(built.directory)[4]
    swap_records(built.directory, a, a + 1)
    report, text = _failures(built)
    assert f"record {a} (seg-000000000000.log" in text and f"says it is record {a + 1}" in text
    assert f"says it is record {a}: it was moved or repeated" in text
    assert {"log integrity", "checkpoints", "session structure"} <= _failed(report)


def test_a_log_truncated_below_a_signed_checkpoint(built: BuiltLog) -> None:
    prev = checkpoint_notes(built.directory)[-1]  # the auditor kept this one
    size = open_checkpoint(prev, built.key.verifier).size
    truncate_records(built.directory, size - 3)
    report, text = _failures(built, previous_checkpoint=prev)
    assert (
        f"signs {size} records but the log holds only {size - 3}: records {size - 3} to {size - 1} were removed" in text
    )
    assert {"checkpoints", "previous checkpoint"} <= _failed(report)


def test_a_checkpoint_re_signed_with_another_key(built: BuiltLog) -> None:
    impostor = SigningKey.generate(built.key.name)  # same name, different key
    notes = checkpoint_notes(built.directory)
    forged = [sign_checkpoint(open_checkpoint(n, built.key.verifier), impostor) for n in notes]
    write_checkpoint_notes(built.directory, [*notes[:-1], forged[-1]])
    report, text = _failures(built)
    last = len(notes) - 1
    assert f"checkpoint {last}: no signature by the log key {built.key.name}+{built.key.verifier.id.hex()}" in text
    assert f"key ID {impostor.verifier.id.hex()}" in text
    assert _failed(report) == {"checkpoints"}


def test_a_forked_history_two_checkpoints_of_one_size(built: BuiltLog) -> None:
    notes = checkpoint_notes(built.directory)
    real = open_checkpoint(notes[-1], built.key.verifier)
    fork = sign_checkpoint(Checkpoint(real.origin, real.size, bytes(32)), built.key)  # the device key equivocates
    write_checkpoint_notes(built.directory, [*notes, fork])
    report, text = _failures(built)
    assert (
        f"checkpoints {len(notes) - 1} and {len(notes)} both sign size {real.size} with different roots: "
        "a forked history" in text
    )
    assert _failed(report) == {"checkpoints"}


def test_rewritten_history_against_the_auditors_earlier_checkpoint(tmp_path: Path) -> None:
    """The device rewrites its history and re-signs everything: only the auditor's old checkpoint catches it."""
    built = build_log(tmp_path, sessions=2)
    kept = checkpoint_notes(built.directory)[-1]
    size = open_checkpoint(kept, built.key.verifier).size
    target = uplink_positions(built.directory)[1]
    rec = records.parse(record_data(built.directory, target))
    msg = pb.Uplink.FromString(rec.payload or b"")
    msg.round.draft_ids[0] = (msg.round.draft_ids[0] + 1) % 500
    replace_record(
        built.directory, target, records.encode({**rec.fields, **records.payload_fields("up", msg.SerializeToString())})
    )
    (built.directory / "checkpoints.jsonl").unlink()
    with AuditLog.open(built.directory, built.key) as log:  # re-signs a checkpoint over the rewritten records
        EgressRecorder(log)
    verify(built.directory, key=built.key.verifier)  # on its own, the rewritten log is self-consistent
    report, text = _failures(built, previous_checkpoint=kept)
    assert _failed(report) == {"previous checkpoint"}
    assert (
        f"your checkpoint (size {size}) is not consistent" in text and f"records 0 to {size - 1} were rewritten" in text
    )


def _log_with(tmp_path: Path, bad: str) -> BuiltLog:
    """A log whose session carries one bad message, written straight through the log API (as a buggy
    or malicious code path that skipped the recorder's checks would)."""
    key = SigningKey.generate("device.test/log")
    pub = tmp_path / "device.pub"
    pub.write_text(str(key.verifier))
    with AuditLog.open(tmp_path / "log", key) as log:
        rec = EgressRecorder(log)
        sid = rec.begin_session(vocab_size=500)
        uplink_serializer(rec, sid)(wire.open_to_proto([1, 2], SessionParams(top_k=WIRE_MAX_TOP_K, draft_len=4)))
        if bad == "uplink":
            payload = wire.round_to_proto(1, [], [5]).SerializeToString() + bytes([9 << 3, 42])
            log.append_session(records.KIND_UPLINK, sid, records.payload_fields("up", payload), payload=payload)
        else:
            uplink_serializer(rec, sid)(wire.round_to_proto(1, [], [3, 4]))
            msg = pb.Downlink(seq=1, accepted=2)
            for i in range(WIRE_MAX_TOP_K + 1):
                msg.candidates.add(token_ids=[i], value=-float(i))
            with pytest.raises(ProtocolError):  # the device rejects it live, after logging it as evidence
                downlink_deserializer(rec, sid)(msg.SerializeToString())
        rec.on_fallback(sid, "protocol-error")
    return BuiltLog(tmp_path / "log", key, pub, [sid])


def test_an_uplink_record_carrying_an_unknown_field(tmp_path: Path) -> None:
    built = _log_with(tmp_path, "uplink")
    report, text = _failures(built)
    assert "record 3 (uplink, n=2 of session" in text
    assert "1 unknown field(s) outside the schema: Uplink field 9" in text
    assert _failed(report) == {"uplinks"}


def test_a_downlink_with_k_above_the_maximum(tmp_path: Path) -> None:
    built = _log_with(tmp_path, "downlink")
    report, text = _failures(built)
    assert "record 4 (downlink, n=3 of session" in text
    assert f"{WIRE_MAX_TOP_K + 1} candidates, above the protocol maximum k = {WIRE_MAX_TOP_K}" in text
    assert _failed(report) == {"downlinks"}


def test_an_extra_field_smuggled_into_a_record(built: BuiltLog) -> None:
    target = uplink_positions(built.directory)[0]
    rec = records.parse(record_data(built.directory, target))
    replace_record(built.directory, target, records.encode({**rec.fields, "context": "private notes"}))
    _, text = _failures(built)
    assert f"record {target} (seg-000000000000.log" in text and "unexpected field(s) context" in text


def test_a_stored_checkpoint_line_that_is_not_json(built: BuiltLog) -> None:
    notes = checkpoint_notes(built.directory)
    path = built.directory / "checkpoints.jsonl"
    path.write_text(path.read_text() + "garbage\n" + json.dumps({"note": notes[-1]}) + "\n")
    _, text = _failures(built)
    assert f"checkpoint {len(notes)} (checkpoints.jsonl at byte" in text


def test_a_payload_edited_without_its_hash(built: BuiltLog) -> None:
    target = uplink_positions(built.directory)[1]
    rec = records.parse(record_data(built.directory, target))
    edited = bytearray(rec.payload or b"")
    edited[-1] ^= 1
    replace_record(
        built.directory, target, records.encode({**rec.fields, "bytes": base64.b64encode(bytes(edited)).decode()})
    )
    _, text = _failures(built)
    assert f"record {target} (seg-000000000000.log" in text and "does not hash to the recorded sha256" in text


def test_a_hostile_deeply_nested_record_is_reported_not_crashed_on(built: BuiltLog) -> None:
    replace_record(built.directory, 3, b"[" * 200_000 + b"]" * 200_000)
    _, text = _failures(built)
    assert "record 3 (seg-000000000000.log" in text and "not a JSON record" in text

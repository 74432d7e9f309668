"""Two devices, one real verifier over mutual TLS, one transcript: the server's witness per device.

Both honest logs verify against the one transcript with `--key`; a log that claims the other
device's stream fails; a log rolled back to an earlier signed size passes on its own (no witness)
and fails against the server's transcript; and each of the 14 tamper classes fails with `--key`
plus the witnessed transcript.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from specsteer.audit import records
from specsteer.audit.cli import main
from specsteer.audit.identity import DeviceIdentity
from specsteer.audit.log import CHECKPOINTS_FILE, SEGMENTS_DIR, AuditLog, scan_log
from specsteer.audit.note import SigningKey, open_checkpoint
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.verify import inspect
from specsteer.core.proto import verifier_pb2 as pb
from specsteer.core.session_types import WIRE_MAX_TOP_K, SessionParams
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.server.session import CloudVerifier
from tests.audit.helpers import (
    checkpoint_notes,
    delete_record,
    frame,
    record_data,
    replace_record,
    segment_path,
    swap_records,
    truncate_records,
    write_checkpoint_notes,
)
from tests.tinymodels import tiny_lm
from tests.verifier_harness import make_pki, remote, serve

DEVICES = ("alice", "bob")


@dataclass
class Device:
    name: str
    key: SigningKey
    pub: Path
    log: Path


@dataclass
class Run:
    root: Path
    transcript: Path
    devices: dict[str, Device]


def _guarded_session(verifier: object, vocab: int) -> None:
    """A session whose round carries a guard placeholder, declared by a guard decision first."""
    session = verifier.open([5, 6, 7], SessionParams(top_k=3, draft_len=4))  # type: ignore[attr-defined]
    session.guard_decision("placeholder", 1, "<EMAIL>")
    session.round([], [8 % vocab, 9 % vocab], [10 % vocab, 11 % vocab])
    session.close()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, char_tok) -> Run:
    root = tmp_path_factory.mktemp("two-devices")
    s_lm, g_lm = tiny_lm(char_tok, seed=1, name="s"), tiny_lm(char_tok, seed=2, name="g")
    cloud = CloudVerifier(g_lm, s_lm, seed=0, max_top_k=64)
    p = make_pki(root, devices=DEVICES)
    devices: dict[str, Device] = {}
    logs: dict[str, AuditLog] = {}
    for name in DEVICES:
        key = SigningKey.generate(f"device.test/{name}")
        pub = root / f"{name}.pub"
        pub.write_text(f"{key.verifier}\n")
        devices[name] = Device(name, key, pub, root / name / "log")
        identity = DeviceIdentity.from_pem(p.device_cert(name).read_bytes())
        logs[name] = AuditLog.open(devices[name].log, key, device=identity)
    with serve(cloud, p, transcript_dir=root / "transcripts") as (_, port):
        # Interleaved sessions of both devices on one verifier.
        for prompt in ("Hi there", "refs: speed up"):
            for name in DEVICES:
                tap = EgressRecorder(logs[name])
                with remote(port, p, vocab_size=s_lm.vocab_size, device=name, tap=tap) as verifier:
                    out = generate(Specialist(s_lm), prompt, SessionParams(gamma=0.05), DecodeOptions(8), verifier)
                    assert out.stats.fallback is None
                    if prompt == "Hi there":
                        _guarded_session(verifier, s_lm.vocab_size)
    for log in logs.values():
        log.close()
    return Run(root, root / "transcripts" / "server-transcript.jsonl", devices)


def _verify(run: Run, log: Path, *, device: str = "alice", witness: bool = True, capsys=None) -> tuple[int, dict]:
    argv = ["verify", str(log), "--key", str(run.devices[device].pub), "--json"]
    if witness:
        argv += ["--server-transcript", str(run.transcript)]
    code = main(argv)
    report = json.loads(capsys.readouterr().out) if capsys is not None else {}
    return code, report


def _failures(report: dict) -> str:
    return "\n".join(m for c in report["checks"] for m in c["failures"])


# -- the transcript is per device -------------------------------------------------------------------


def test_both_devices_verify_against_one_transcript(run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    for name, device in run.devices.items():
        code, report = _verify(run, device.log, device=name, capsys=capsys)
        assert code == 0 and report.get("verdict") == "VERIFIED", _failures(report)
        (check,) = [c for c in report["checks"] if c["name"] == "server transcript"]
        assert "3 server stream(s) of this device match" in check["summary"]
        assert report["devices"][0]["name"] == name
    # The text report says VERIFIED too.
    assert main(["verify", str(run.devices["bob"].log), "--key", str(run.devices["bob"].pub),
                 "--server-transcript", str(run.transcript)]) == 0  # fmt: skip
    assert ": VERIFIED\ndevice: bob (certificate sha256 " in capsys.readouterr().out
    streams = [json.loads(x) for x in run.transcript.read_text().splitlines()[1:]]
    assert {x["device"] for x in streams if "device" in x} == set(DEVICES)  # one transcript, both devices


# -- the tamper classes ------------------------------------------------------------------------------


def _records(log: Path) -> list[records.Record]:
    return [records.parse(r.data) for r in scan_log(log).records]


def _positions(log: Path, kind: str) -> list[int]:
    return [i for i, r in enumerate(_records(log)) if r.kind == kind]


def _rewrite(log: Path, key: SigningKey, edit: Callable[[list[dict]], list[dict]]) -> None:
    """What a key holder can do: rewrite the records, renumber them, and sign the result afresh."""
    fields = [dict(r.fields) for r in _records(log)]
    fields = edit(fields)
    seg = log / SEGMENTS_DIR
    shutil.rmtree(seg)
    seg.mkdir()
    body = b""
    data = []
    for i, f in enumerate(fields):
        data.append(records.encode({**f, "index": i}))
        body += frame(data[-1])
    (seg / "seg-000000000000.log").write_bytes(body)
    (log / CHECKPOINTS_FILE).unlink()  # the old checkpoints sign the old history
    with AuditLog.open(log, key):  # recovers the rewritten records and signs a checkpoint over them
        pass


def _session_fields(log: Path, uplink_no: int = 0) -> list[int]:
    recs = _records(log)
    sid = [r for r in recs if r.kind == records.KIND_UPLINK][uplink_no].session
    return [i for i, r in enumerate(recs) if r.session == sid]


def t_flip(run: Run, log: Path) -> str:
    path, offset, _ = segment_path(log, _positions(log, records.KIND_UPLINK)[2])
    buf = bytearray(path.read_bytes())
    buf[offset + 44] ^= 0x20
    path.write_bytes(bytes(buf))
    return "checksum mismatch"


def t_delete(run: Run, log: Path) -> str:
    delete_record(log, _positions(log, records.KIND_UPLINK)[3])
    return "records before it are missing"


def t_truncate(run: Run, log: Path) -> str:
    n = len(scan_log(log).records)
    truncate_records(log, n - 3)
    return f"records {n - 3} to {n - 1} were removed"


def t_reorder(run: Run, log: Path) -> str:
    a = _positions(log, records.KIND_UPLINK)[2]
    swap_records(log, a, a + 1)
    return "it was moved or repeated"


def t_replay(run: Run, log: Path) -> str:
    target = _positions(log, records.KIND_UPLINK)[2]
    path, offset, length = segment_path(log, target)
    buf = path.read_bytes()
    path.write_bytes(buf[: offset + length] + buf[offset : offset + length] + buf[offset + length :])
    return "it was moved or repeated"


def t_forged_field(run: Run, log: Path) -> str:
    target = _positions(log, records.KIND_UPLINK)[0]
    rec = records.parse(record_data(log, target))
    replace_record(log, target, records.encode({**rec.fields, "context": "private notes"}))
    return "unexpected field(s) context"


def t_oversized_downlink(run: Run, log: Path) -> str:
    def edit(fields: list[dict]) -> list[dict]:
        i = next(i for i, f in enumerate(fields) if f["kind"] == records.KIND_DOWNLINK)
        msg = pb.Downlink.FromString(records.parse(records.encode(fields[i])).payload or b"")
        del msg.candidates[:]
        for t in range(WIRE_MAX_TOP_K + 1):
            msg.candidates.add(token_ids=[t], value=-float(t))
        fields[i] = {**fields[i], **records.payload_fields("down", msg.SerializeToString())}
        return fields

    _rewrite(log, run.devices["alice"].key, edit)
    return f"above the protocol maximum k = {WIRE_MAX_TOP_K}"


def t_re_sign(run: Run, log: Path) -> str:
    impostor = SigningKey.generate(run.devices["alice"].key.name)

    def edit(fields: list[dict]) -> list[dict]:
        fields[0] = {**fields[0], "key": str(impostor.verifier)}
        return fields

    _rewrite(log, impostor, edit)
    return "not the auditor's key"


def t_rollback(run: Run, log: Path) -> str:
    """Cut back to an earlier signed size (a session end) and drop the later checkpoints: self-consistent."""
    key = run.devices["alice"].key.verifier
    notes = checkpoint_notes(log)
    n = len(scan_log(log).records)
    # A session end (not the checkpoint a Close asks the witness to cosign, signed just before it).
    ends = {i + 1 for i, r in enumerate(_records(log)) if r.kind == records.KIND_UPLINK and _is_close(r)}
    earlier = [x for x in notes if 2 < open_checkpoint(x, key).size < n - 3 and open_checkpoint(x, key).size in ends]
    keep = earlier[len(earlier) // 2]
    size = open_checkpoint(keep, key).size
    truncate_records(log, size)
    write_checkpoint_notes(log, notes[: notes.index(keep) + 1])
    # Without a witness this passes (the auditor kept no checkpoint), and the report says what to keep.
    alone = inspect(log, key=key)
    assert alone.verdict == "VERIFIED"
    assert any("keep the latest checkpoint from every audit" in m for m in alone.not_covered)
    return "matches no session in this log: the log is shorter than what the server witnessed"


def _is_close(rec: records.Record) -> bool:
    return pb.Uplink.FromString(rec.payload or b"").WhichOneof("kind") == "close"


def t_splice(run: Run, log: Path) -> str:
    """Alice's log claims a session of bob's (his exact records), re-signed with alice's key."""
    bob = _records(run.devices["bob"].log)
    sid = next(r.session for r in bob if r.kind == records.KIND_UPLINK)
    stolen = [dict(r.fields) for r in bob if r.session == sid]

    def edit(fields: list[dict]) -> list[dict]:
        return fields + stolen

    _rewrite(log, run.devices["alice"].key, edit)
    return "closed normally but the server has no matching record of its"


def t_consistent_rewrite(run: Run, log: Path) -> str:
    def edit(fields: list[dict]) -> list[dict]:
        ups = [i for i, f in enumerate(fields) if f["kind"] == records.KIND_UPLINK]
        i = ups[1]
        msg = pb.Uplink.FromString(records.parse(records.encode(fields[i])).payload or b"")
        msg.round.draft_ids[0] = (msg.round.draft_ids[0] + 1) % 40
        fields[i] = {**fields[i], **records.payload_fields("up", msg.SerializeToString(deterministic=True))}
        return fields

    _rewrite(log, run.devices["alice"].key, edit)
    return "the device logged a different uplink there"


def t_torn_tail(run: Run, log: Path) -> str:
    path = max((log / SEGMENTS_DIR).iterdir())
    with path.open("ab") as f:
        f.write(frame(records.encode({"kind": "half-written"}))[:17])
    return "a torn write"


def t_wrong_kind(run: Run, log: Path) -> str:
    target = _positions(log, records.KIND_UPLINK)[1]
    rec = records.parse(record_data(log, target))
    replace_record(log, target, records.encode({**rec.fields, "kind": records.KIND_DOWNLINK, "dir": "down"}))
    return "does not match the records"


def t_removed_guard_decision(run: Run, log: Path) -> str:
    def edit(fields: list[dict]) -> list[dict]:
        i = next(i for i, f in enumerate(fields) if f["kind"] == records.KIND_GUARD)
        after = [f for f in fields[i + 1 :] if f.get("session") == fields[i]["session"]]
        for f in after:
            f["n"] -= 1
        return fields[:i] + fields[i + 1 :]

    _rewrite(log, run.devices["alice"].key, edit)
    return "carries a placeholder no guard decision declared"


TAMPERS: dict[str, Callable[[Run, Path], str]] = {
    "flip": t_flip,
    "delete": t_delete,
    "truncate": t_truncate,
    "reorder": t_reorder,
    "replay": t_replay,
    "forged field": t_forged_field,
    "oversized downlink": t_oversized_downlink,
    "re-sign": t_re_sign,
    "rollback": t_rollback,
    "splice": t_splice,
    "consistent rewrite": t_consistent_rewrite,
    "torn tail": t_torn_tail,
    "wrong kind": t_wrong_kind,
    "removed guard decision": t_removed_guard_decision,
}


@pytest.mark.parametrize("tamper", list(TAMPERS))  # the 14 classes of tampering with a log
def test_each_tamper_class_fails_with_key_and_witnessed_transcript(
    run: Run, tmp_path: Path, tamper: str, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "log"
    shutil.copytree(run.devices["alice"].log, log, ignore=shutil.ignore_patterns("lock"))
    expected = TAMPERS[tamper](run, log)
    capsys.readouterr()
    code, report = _verify(run, log, capsys=capsys)
    assert code == 1 and report["verdict"] == "FAILED"
    assert expected in _failures(report), _failures(report)

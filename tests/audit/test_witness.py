"""Witness cosigning: the C2SP cosignature format, the witness's refusals, and `audit verify --witness-key`.

The logs here go through the real recorder and the real witness (`server.witness.Witness`), with the
wire messages the stream carries, minus the network (tests/server/test_witness_stream.py runs it over
mutual TLS). Each key-holder rewrite class re-signs the whole log with the device's own key, so only
the witness's cosignatures (and its state) can tell.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import shutil
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from specsteer.audit import merkle, records
from specsteer.audit.cli import main
from specsteer.audit.cosignature import (
    COSIGNATURE_SKEW_S,
    WitnessSigner,
    add_cosignature,
    cosignatures,
    write_witness_key_pair,
)
from specsteer.audit.errors import EgressBlocked
from specsteer.audit.log import CHECKPOINTS_FILE, SEGMENTS_DIR, AuditLog, scan_log
from specsteer.audit.note import SigningKey, open_checkpoint
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.witness_state import read_state
from specsteer.core import wire
from specsteer.core.errors import ProtocolError
from specsteer.server.witness import Cosigned, Refused, Witness
from tests.audit.helpers import (
    DEVICE,
    checkpoint_notes,
    resign_witness_requests,
    run_session,
    signed_witness_request,
    swap_records,
    truncate_records,
    write_checkpoint_notes,
)

VERIFIED, FAILED, UNPROVEN = "VERIFIED", "FAILED", "UNPROVEN"


@dataclass
class Witnessed:
    root: Path
    log: Path
    key: SigningKey
    pub: Path
    witness: WitnessSigner
    witness_pub: Path
    state: Path


def witnessed_session(rec: EgressRecorder, witness: Witness, *, seed: int, device: str = "alice") -> Cosigned | Refused:
    """One session whose Close carries the log's checkpoint, answered by the witness as the stream does."""
    sid = run_session(rec, seed=seed, close=False)
    close = wire.encode_close(3, rec.witness_request(sid))
    rec.on_uplink(sid, close)
    frame_ = wire.decode_uplink(close)
    assert isinstance(frame_, wire.CloseFrame) and frame_.witness is not None
    result = witness.cosign(device, frame_.witness)
    if isinstance(result, Cosigned):
        rec.on_downlink(sid, wire.encode_cosignature(3, result.witness, result.signature))
    return result


def build(tmp: Path, sessions: int = 3) -> Witnessed:
    key = SigningKey.generate("device.test/log")
    pub = tmp / "device.pub"
    pub.write_text(f"{key.verifier}\n")
    private, witness_pub = write_witness_key_pair("witness.test/w1", tmp / "witness")
    signer = WitnessSigner.parse(private.read_text())
    witness = Witness(signer, tmp / "witness" / "state.json")
    with AuditLog.open(tmp / "log", key, device=DEVICE, witness_key=signer.key) as log:
        rec = EgressRecorder(log)
        for seed in range(sessions):
            assert isinstance(witnessed_session(rec, witness, seed=seed), Cosigned)
    return Witnessed(tmp, tmp / "log", key, pub, signer, witness_pub, tmp / "witness" / "state.json")


def audit(w: Witnessed, log: Path, *extra: str) -> tuple[int, dict]:
    argv = ["verify", str(log), "--key", str(w.pub), "--witness-key", str(w.witness_pub), *extra, "--json"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    return code, json.loads(out.getvalue())


def failures(report: dict) -> str:
    return "\n".join(m for c in report["checks"] for m in c["failures"])


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Witnessed:
    return build(tmp_path_factory.mktemp("witnessed"))


# -- the format ------------------------------------------------------------------------------------


def test_a_cosignature_is_c2sp_cosignature_v1(honest: Witnessed) -> None:
    """Checked by hand from the spec: key ID with 0x04, big-endian time, Ed25519 over the v1 message."""
    notes = [n for n in checkpoint_notes(honest.log) if n.count("\n— ") == 2]
    assert len(notes) == 3  # one cosigned checkpoint per session
    text, _, sigs = notes[-1].partition("\n\n")
    text += "\n"
    log_line, witness_line = sigs.rstrip("\n").split("\n")
    assert log_line.startswith(f"— {honest.key.name} ")
    name, b64 = witness_line.removeprefix("— ").split(" ")
    raw = base64.b64decode(b64)
    public = honest.witness.key.public_key
    assert name == "witness.test/w1" and len(raw) == 76
    assert raw[:4] == hashlib.sha256(name.encode() + b"\n\x04" + public).digest()[:4]
    (timestamp,) = struct.unpack(">Q", raw[4:12])
    message = b"cosignature/v1\ntime " + str(timestamp).encode() + b"\n" + text.encode()
    Ed25519PublicKey.from_public_bytes(public).verify(raw[12:], message)  # raises if not
    # The witness key file is a signed-note vkey with algorithm 0x04.
    vname, vid, vb64 = honest.witness_pub.read_text().strip().split("+", 2)  # base64 may hold a '+'
    assert (vname, vid) == (name, raw[:4].hex()) and base64.b64decode(vb64) == b"\x04" + public


def test_the_honest_witnessed_log_verifies_with_the_witness_key_and_state(honest: Witnessed) -> None:
    code, report = audit(honest, honest.log, "--witness-state", str(honest.state))
    assert (code, report["verdict"]) == (0, VERIFIED), failures(report)
    (check,) = [c for c in report["checks"] if c["name"] == "witness cosignatures"]
    assert "3 cosignature(s) by witness.test/w1" in check["summary"]


def test_the_honest_witnessed_log_has_no_unwitnessed_tail(honest: Witnessed) -> None:
    # Its last session ended by a witnessed Close: only that Close and its answer lie after the
    # checkpoint the witness cosigned, and those are the exchange the witness saw.
    code, report = audit(honest, honest.log)
    assert (code, report["verdict"], report["unwitnessed"]) == (0, VERIFIED, None), failures(report)
    (check,) = [c for c in report["checks"] if c["name"] == "witness cosignatures"]
    assert any("every record lies within the last checkpoint the witness cosigned" in n for n in check["notes"])


def _fabricated_tail(w: Witnessed, log: Path) -> None:
    """The key holder's append: a session the device 'finished locally' after the last Close, its
    tokens up in the log, the checkpoint re-signed with the device's key. No witness saw it."""
    shutil.copytree(w.log, log, ignore=shutil.ignore_patterns("lock"))
    with AuditLog.open(log, w.key, device=DEVICE) as appended:
        rec = EgressRecorder(appended)
        sid = run_session(rec, seed=7, close=False)
        rec.on_fallback(sid, "verifier-unreachable")


def test_a_fabricated_tail_after_the_last_close_is_unproven_with_the_witness_key(
    honest: Witnessed, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    _fabricated_tail(honest, log)
    # Every option set: the key, the witness's key and its state, the verifier's view notwithstanding.
    code, report = audit(honest, log, "--witness-state", str(honest.state))
    assert (code, report["verdict"]) == (3, "UNPROVEN"), failures(report)
    assert report["checks_passed"] and report["authenticated"]
    assert report["unwitnessed"].startswith("unwitnessed tail: 1 session(s) lie wholly or partly after")
    (check,) = [c for c in report["checks"] if c["name"] == "witness cosignatures"]
    assert any("record(s) (from position 26) lie after the last checkpoint the witness cosigned (size 24)" in n
               for n in check["notes"]), check["notes"]  # fmt: skip
    # The text report names it in the verdict line.
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["verify", str(log), "--key", str(honest.pub), "--witness-key", str(honest.witness_pub)]) == 3
    assert "UNPROVEN (every check passed, but authenticity is unproven: unwitnessed tail:" in out.getvalue()


def test_without_a_witness_key_the_tail_verifies_as_before_with_a_note(honest: Witnessed, tmp_path: Path) -> None:
    log = tmp_path / "log"
    _fabricated_tail(honest, log)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["verify", str(log), "--key", str(honest.pub), "--json"])
    report = json.loads(out.getvalue())
    assert (code, report["verdict"], report["unwitnessed"]) == (0, VERIFIED, None), failures(report)
    notes = [n for c in report["checks"] for n in c["notes"]]
    assert any(n.startswith("no --witness-key was given: no record here is known to be vouched for") for n in notes)


def test_another_witness_key_fails(honest: Witnessed, tmp_path: Path) -> None:
    _, other = write_witness_key_pair("witness.test/w2", tmp_path)
    code, report = audit(honest, honest.log, "--witness-key", str(other))
    assert (code, report["verdict"]) == (1, FAILED)
    assert "no checkpoint of this log carries a valid cosignature by witness witness.test/w2" in failures(report)


def test_a_bogus_cosignature_line_fails(honest: Witnessed, tmp_path: Path) -> None:
    log = tmp_path / "log"
    shutil.copytree(honest.log, log, ignore=shutil.ignore_patterns("lock"))
    notes = checkpoint_notes(log)
    i = max(i for i, n in enumerate(notes) if n.count("\n— ") == 2)
    head, _, b64 = notes[i].rstrip("\n").rpartition(" ")
    raw = bytearray(base64.b64decode(b64))
    raw[-1] ^= 1  # a cosignature that claims the witness's key but is not its signature
    notes[i] = f"{head} {base64.b64encode(bytes(raw)).decode()}\n"
    write_checkpoint_notes(log, notes)
    code, report = audit(honest, log)
    assert (code, report["verdict"]) == (1, FAILED)
    assert f"checkpoint {i}: the cosignature by witness.test/w1" in failures(report)


# -- the cosignature's time (issue #48, finding 3) ------------------------------------------------------

_MISDATED = [pytest.param(0, id="time-0"), pytest.param(2**40, id="time-2^40")]


@pytest.mark.parametrize("timestamp", _MISDATED)
def test_a_genuine_cosignature_dated_0_or_far_ahead_vouches_for_nothing(
    honest: Witnessed, tmp_path: Path, timestamp: int
) -> None:
    """The witness's real key signs the last cosigned checkpoint at a time it cannot have seen it:
    the signature verifies, only the time is wrong, and `audit verify` no longer says VERIFIED."""
    log = tmp_path / "log"
    shutil.copytree(honest.log, log, ignore=shutil.ignore_patterns("lock"))
    notes = checkpoint_notes(log)
    i = max(i for i, n in enumerate(notes) if n.count("\n— ") == 2)
    plain = notes[i][: notes[i].rstrip("\n").rindex("\n") + 1]  # the log's note without the witness line
    checkpoint = open_checkpoint(plain, honest.key.verifier)
    signature = honest.witness.cosign(checkpoint, timestamp)
    notes[i] = add_cosignature(plain, honest.witness.name, signature)
    assert cosignatures(notes[i], honest.witness.key)[0].timestamp == timestamp  # a valid cosignature
    write_checkpoint_notes(log, notes)
    code, report = audit(honest, log)
    assert (code, report["verdict"]) == (1, FAILED)
    found = failures(report)
    assert f"checkpoint {i}: the cosignature of size {checkpoint.size} by witness.test/w1 vouches for nothing" in found
    assert ("dated 0 (1970-01-01)" if timestamp == 0 else f"dated {2**40} (beyond the year 9999)") in found


@pytest.mark.parametrize(
    ("offset", "kept"),
    [
        pytest.param(-COSIGNATURE_SKEW_S + 60, True, id="within-the-skew-behind"),
        pytest.param(COSIGNATURE_SKEW_S - 60, True, id="within-the-skew-ahead"),
        pytest.param(-COSIGNATURE_SKEW_S - 60, False, id="beyond-the-skew-behind"),
        pytest.param(COSIGNATURE_SKEW_S + 60, False, id="beyond-the-skew-ahead"),
    ],
)
def test_a_cosignature_counts_only_within_the_clock_skew_of_its_exchange(
    tmp_path: Path, offset: int, kept: bool
) -> None:
    _, _, log, _ = _misdated_log(tmp_path, lambda: time.time() + offset)
    assert (log.cosigned is not None) == kept


@pytest.mark.parametrize("timestamp", _MISDATED)
def test_the_device_does_not_prove_from_a_misdated_cosignature(tmp_path: Path, timestamp: int) -> None:
    """A witness whose clock says 0 or 2^40 answers with its real key: the device keeps the answer on
    record only (a protocol error), proves its next Close from size 0, and the audit names it as the
    cloud's misbehaviour: the honest log does not FAIL, it is UNPROVEN (nothing cosigned it)."""
    error, key, log, witness = _misdated_log(tmp_path, lambda: timestamp)
    assert error is not None and "vouches" not in error and "it is dated" in error
    assert log.cosigned is None
    assert all(n.count("\n— ") == 1 for n in checkpoint_notes(log.directory))  # no cosigned note kept
    pub = tmp_path / "device.pub"
    pub.write_text(f"{key.verifier}\n")
    w = Witnessed(tmp_path, log.directory, key, pub, witness.signer, tmp_path / "w.pub", witness.state_path)
    w.witness_pub.write_text(f"{witness.signer.key}\n")
    code, report = audit(w, log.directory)
    assert (code, report["verdict"]) == (3, UNPROVEN), failures(report)
    assert any(
        "(the cosignature answering a Close): the cosignature of size" in m for m in report["cloud_misbehaviour"]
    )


def _misdated_log(tmp_path: Path, clock: Callable[[], float]) -> tuple[str | None, SigningKey, AuditLog, Witness]:
    """One witnessed session whose witness cosigns at `clock`'s time; the device's error, if any."""
    key = SigningKey.generate("device.test/log")
    witness = Witness(WitnessSigner.generate("witness.test/w1"), tmp_path / "state.json", clock=clock)
    error = None
    with AuditLog.open(tmp_path / "log", key, device=DEVICE, witness_key=witness.signer.key) as log:
        try:
            assert isinstance(witnessed_session(EgressRecorder(log), witness, seed=0), Cosigned)
        except ProtocolError as exc:
            error = str(exc)
    return error, key, log, witness


# -- the witness's own checks -------------------------------------------------------------------------


def _request(log: AuditLog, *, old: int = 0, key: SigningKey | None = None) -> wire.WitnessRequest:
    proof = merkle.consistency_proof(old, log.leaf_hashes) if 0 < old < log.size else []
    return signed_witness_request(key or log.key, log.size, log.root(), old, tuple(proof))


def test_the_witness_refuses_a_rewritten_smaller_foreign_or_forged_checkpoint(tmp_path: Path) -> None:
    key = SigningKey.generate("device.test/log")
    witness = Witness(WitnessSigner.generate("witness.test/w1"), tmp_path / "state.json")
    with AuditLog.open(tmp_path / "a", key, device=DEVICE, witness_key=witness.signer.key) as log:
        rec = EgressRecorder(log)
        assert isinstance(witnessed_session(rec, witness, seed=0), Cosigned)
        cosigned = log.cosigned
        assert cosigned is not None
        run_session(rec, seed=1)
        good = _request(log, old=cosigned[0])
    with AuditLog.open(tmp_path / "b", key, device=DEVICE) as fork:  # the same key over another history
        rec = EgressRecorder(fork)
        run_session(rec, seed=5)
        run_session(rec, seed=6)
        rewritten = _request(fork, old=cosigned[0])
        impostor = _request(fork, key=SigningKey.generate("device.test/log"))
    forged = wire.WitnessRequest(**{**good.__dict__, "signature": bytes(64)})
    for request, why in (
        (rewritten, "not consistent with the last cosigned one"),
        (forged, "signature does not verify"),
        (impostor, "not the key device.test/log"),
    ):
        result = witness.cosign("alice", request)
        assert isinstance(result, Refused) and why in result.reason, result
    assert isinstance(witness.cosign("alice", good), Cosigned)
    state = read_state(tmp_path / "state.json")
    assert (state.logs["alice"].size, len(state.refusals)) == (good.size, 3)
    assert state.refusals[0]["reason"].startswith("the checkpoint is not consistent with the last cosigned one")
    # Durable: a new witness over the same state refuses a rollback to the size it cosigned first.
    again = Witness(witness.signer, tmp_path / "state.json")
    result = again.cosign("alice", signed_witness_request(key, *cosigned))
    assert isinstance(result, Refused) and "a rollback" in result.reason


def test_the_recorder_lets_a_close_carry_only_the_checkpoint_it_issued(tmp_path: Path) -> None:
    """Anything else in a Close's witness request (here a made-up origin: text) is blocked, not sent."""
    key = SigningKey.generate("device.test/log")
    with AuditLog.open(tmp_path / "log", key, device=DEVICE) as log:
        rec = EgressRecorder(log)
        sid = run_session(rec, close=False)
        issued = rec.witness_request(sid)
        smuggled = wire.WitnessRequest(**{**issued.__dict__, "origin": "meet-at-noon"})
        with pytest.raises(EgressBlocked, match="did not issue"):
            rec.on_uplink(sid, wire.encode_close(3, smuggled))
        rec.on_uplink(sid, wire.encode_close(3, issued))


# -- one log key under two device names: a split view -------------------------------------------------


def _split_view(tmp: Path, witness_for_fork: Callable[[Witness], Witness]) -> tuple[Witnessed, Path, Witness]:
    """An honest log cosigned as alice (`build`), and a fork of it (session 1 dropped, the same log
    key) whose Closes go to `witness_for_fork(witness)` as device aaa-spare (a spare certificate of
    the fleet)."""
    w = build(tmp)
    fork_witness = witness_for_fork(Witness(w.witness, w.state))  # the witness as it stands after alice's
    with AuditLog.open(tmp / "fork", w.key, device=DEVICE, witness_key=w.witness.key) as log:
        rec = EgressRecorder(log)
        for seed in (0, 2):
            witnessed_session(rec, fork_witness, seed=seed, device="aaa-spare")
    return w, tmp / "fork", fork_witness


def test_the_witness_refuses_a_log_key_pinned_for_another_device(tmp_path: Path) -> None:
    """A log key is pinned for one device: the fork's first Close under another name is refused."""
    w, _, _ = _split_view(tmp_path, lambda witness: witness)
    state = read_state(w.state)
    assert set(state.logs) == {"alice"}
    assert [r["device"] for r in state.refusals] == ["aaa-spare", "aaa-spare"]
    assert "is pinned for device alice" in state.refusals[0]["reason"]
    assert "split view" in state.refusals[0]["reason"]


def test_a_witness_state_with_one_log_key_under_two_devices_fails_as_equivocation(tmp_path: Path) -> None:
    """A state written by a witness that pinned one key twice (or edited so): neither log verifies on it,
    and the honest log is not told it was "rewritten after it was cosigned"."""

    def second_witness(witness: Witness) -> Witness:  # the same signer, its own state: no cross-device check
        return Witness(witness.signer, tmp_path / "witness" / "other-state.json")

    w, fork, _ = _split_view(tmp_path, second_witness)
    state = json.loads(w.state.read_text())
    state["logs"].update(json.loads((tmp_path / "witness" / "other-state.json").read_text())["logs"])
    split = tmp_path / "split-state.json"
    split.write_text(json.dumps(state))
    for log in (w.log, fork):
        code, report = audit(w, log, "--witness-state", str(split))
        assert (code, report["verdict"]) == (1, FAILED), log
        text = failures(report)
        assert "pins this log's key under 2 devices, aaa-spare (size 16), alice (size 24)" in text, text
        assert "equivocation" in text and "rewritten after it was cosigned" not in text, text
    # The fork's own state (its key pinned under aaa-spare only) is not this log's device's record.
    code, report = audit(w, fork, "--witness-state", str(tmp_path / "witness" / "other-state.json"))
    assert (code, report["verdict"]) == (1, FAILED)
    assert "under device aaa-spare, but this is the log of alice" in failures(report)
    # The honest log and its witness's honest state still verify.
    code, report = audit(w, w.log, "--witness-state", str(w.state))
    assert (code, report["verdict"]) == (0, VERIFIED), failures(report)


# -- every key-holder rewrite class fails with the witness's key (and state) ---------------------------


def _records(log: Path) -> list[records.Record]:
    return [records.parse(r.data) for r in scan_log(log).records]


def _rewrite(w: Witnessed, log: Path, edit: Callable[[list[dict]], list[dict]]) -> None:
    """What the log key's holder can do: rewrite the records, renumber them, and sign it all afresh."""
    fields = edit([dict(r.fields) for r in _records(log)])
    seg = log / SEGMENTS_DIR
    shutil.rmtree(seg)
    seg.mkdir()
    (seg / "seg-000000000000.log").write_bytes(resign_witness_requests(fields, w.key))
    (log / CHECKPOINTS_FILE).unlink()
    with AuditLog.open(log, w.key):
        pass


def _sessions(fields: list[dict]) -> list[str]:
    return list(dict.fromkeys(f["session"] for f in fields if "session" in f))


def r_byte_flip(w: Witnessed, log: Path) -> None:
    def edit(fields: list[dict]) -> list[dict]:
        i = next(i for i, f in enumerate(fields) if f["kind"] == records.KIND_UPLINK)
        payload = bytearray(base64.b64decode(fields[i]["bytes"]))
        payload[-1] ^= 1
        fields[i] = {**fields[i], **records.payload_fields("up", bytes(payload))}
        return fields

    _rewrite(w, log, edit)


def r_altered_tokens(w: Witnessed, log: Path) -> None:
    def edit(fields: list[dict]) -> list[dict]:
        ups = [i for i, f in enumerate(fields) if f["kind"] == records.KIND_UPLINK]
        i = ups[1]
        msg = wire.pb.Uplink.FromString(base64.b64decode(fields[i]["bytes"]))
        msg.round.draft_ids[0] = (msg.round.draft_ids[0] + 1) % 500
        fields[i] = {**fields[i], **records.payload_fields("up", msg.SerializeToString(deterministic=True))}
        return fields

    _rewrite(w, log, edit)


def r_hidden_session(w: Witnessed, log: Path) -> None:
    def edit(fields: list[dict]) -> list[dict]:
        first = _sessions(fields)[0]
        return [f for f in fields if f.get("session") != first]

    _rewrite(w, log, edit)


def r_swapped_sessions(w: Witnessed, log: Path) -> None:
    def edit(fields: list[dict]) -> list[dict]:
        a, b = _sessions(fields)[:2]
        head = [f for f in fields if f.get("session") not in (a, b)]
        return (
            head[:2]
            + [f for f in fields if f.get("session") == b]
            + [f for f in fields if f.get("session") == a]
            + head[2:]
        )

    _rewrite(w, log, edit)


def r_reorder_re_signed(w: Witnessed, log: Path) -> None:
    def edit(fields: list[dict]) -> list[dict]:
        i = next(i for i, f in enumerate(fields) if f["kind"] == records.KIND_DOWNLINK)
        fields[i - 1], fields[i] = fields[i], fields[i - 1]
        return fields

    _rewrite(w, log, edit)


def r_truncation(w: Witnessed, log: Path) -> None:
    """Cut back to the end of the first session and keep only the checkpoints up to there."""
    key = w.key.verifier
    notes = checkpoint_notes(log)
    first_cosigned = min(open_checkpoint(n, key).size for n in notes if n.count("\n— ") == 2)
    keep = [n for n in notes if open_checkpoint(n, key).size <= first_cosigned + 2]
    size = max(open_checkpoint(n, key).size for n in keep)
    truncate_records(log, size)
    write_checkpoint_notes(log, keep)


def r_rollback(w: Witnessed, log: Path) -> None:
    """Back to before any cosignature, re-signed: a self-consistent earlier history."""

    def edit(fields: list[dict]) -> list[dict]:
        return fields[:2]

    _rewrite(w, log, edit)


def r_swap_raw(w: Witnessed, log: Path) -> None:
    i = next(r.position for r in scan_log(log).records if records.parse(r.data).kind == records.KIND_DOWNLINK)
    swap_records(log, i - 1, i)


REWRITES: dict[str, Callable[[Witnessed, Path], None]] = {
    "byte flip, re-signed": r_byte_flip,
    "altered tokens, re-signed": r_altered_tokens,
    "hidden session, re-signed": r_hidden_session,
    "swapped sessions, re-signed": r_swapped_sessions,
    "reorder, re-signed": r_reorder_re_signed,
    "truncation to a checkpoint": r_truncation,
    "rollback, re-signed": r_rollback,
    "swapped records": r_swap_raw,
}


@pytest.mark.parametrize("rewrite", list(REWRITES))
def test_each_rewrite_class_fails_with_the_witness_key_and_state(
    honest: Witnessed, tmp_path: Path, rewrite: str
) -> None:
    log = tmp_path / "log"
    shutil.copytree(honest.log, log, ignore=shutil.ignore_patterns("lock"))
    REWRITES[rewrite](honest, log)
    code, report = audit(honest, log, "--witness-state", str(honest.state))
    assert (code, report["verdict"]) == (1, FAILED), rewrite
    (check,) = [c for c in report["checks"] if c["name"] == "witness cosignatures"]
    assert not check["ok"], (rewrite, failures(report))


def test_the_rewrites_that_keep_a_cosignature_fail_on_the_key_alone(honest: Witnessed, tmp_path: Path) -> None:
    """Only deleting every later cosigned checkpoint needs the witness's own record to be caught."""
    verdicts = {}
    for name, rewrite in REWRITES.items():
        log = tmp_path / name.replace(" ", "_").replace(",", "")
        shutil.copytree(honest.log, log, ignore=shutil.ignore_patterns("lock"))
        rewrite(honest, log)
        verdicts[name] = audit(honest, log)[1]["verdict"]
    assert VERIFIED not in {v for k, v in verdicts.items() if k != "truncation to a checkpoint"}, verdicts
    # Without the witness key, a consistent re-signed rewrite verifies: the device's key signed all of it.
    for name in ("altered tokens, re-signed", "hidden session, re-signed", "rollback, re-signed"):
        log = tmp_path / f"plain-{name.split(',')[0].replace(' ', '_')}"
        shutil.copytree(honest.log, log, ignore=shutil.ignore_patterns("lock"))
        REWRITES[name](honest, log)
        assert main(["verify", str(log), "--key", str(honest.pub)]) == 0, name


def test_a_close_cannot_choose_the_size_its_checkpoint_signs(honest: Witnessed, tmp_path: Path) -> None:
    """The cloud sees the size a Close's checkpoint signs. Any size up to the Close verified, so the
    key holder could send log2(position) bits of its choice a Close (here 2, well before the session's
    own records); only other sessions' records may come between the session's last and the size."""

    def edit(fields: list[dict]) -> list[dict]:
        i = max(i for i, f in enumerate(fields) if f["kind"] == records.KIND_UPLINK and _request_of(f))
        payload = base64.b64decode(fields[i]["bytes"])
        chosen = replace(_request_of(fields[i]), size=2, old_size=0, consistency_proof=())
        seq = wire.pb.Uplink.FromString(payload).close.seq
        fields[i] = {**fields[i], **records.payload_fields("up", wire.encode_close(seq, chosen))}
        return fields

    log = tmp_path / "log"
    shutil.copytree(honest.log, log, ignore=shutil.ignore_patterns("lock"))
    _rewrite(honest, log, edit)
    # On the device's key alone (a witness that cosigns what it is sent would hide nothing here).
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["verify", str(log), "--key", str(honest.pub)]) == 1
    assert "signs 2 records, fewer than the" in out.getvalue()
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["verify", str(honest.log), "--key", str(honest.pub)]) == 0  # the honest sizes pass


def _request_of(f: dict) -> wire.WitnessRequest | None:
    return wire.witness_of(base64.b64decode(f["bytes"]))

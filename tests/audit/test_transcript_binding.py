"""`--server-transcript` binds the log to the server's evidence: every certificate and the order of sessions.

The attacks are built as the device itself could build them: it holds its log key, so it rewrites
the records, renumbers them and signs the result afresh. With `--key` alone such a log verifies;
the server's transcript is what must catch it.
"""

from __future__ import annotations

import secrets
import shutil
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from specsteer.audit import records
from specsteer.audit.cosignature import load_witness_key, write_witness_key_pair
from specsteer.audit.errors import VerificationFailed
from specsteer.audit.identity import DeviceIdentity
from specsteer.audit.log import CHECKPOINTS_FILE, SEGMENTS_DIR, AuditLog, scan_log
from specsteer.audit.note import SigningKey
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.transcript import ServerTranscript
from specsteer.audit.verify import Report, inspect, verify
from specsteer.audit.witness_state import WitnessedLog, WitnessState
from specsteer.core import wire
from specsteer.core.session_types import SessionParams, SteeringVector, Verdict
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.server.session import CloudVerifier
from tests.audit.helpers import (
    DEVICE,
    VOCAB,
    BuiltLog,
    build_log,
    downlink_deserializer,
    frame,
    run_session,
    uplink_serializer,
)
from tests.tinymodels import tiny_lm
from tests.verifier_harness import make_pki, remote, serve

BOB = DeviceIdentity("bob", "b0" * 32)
ROTATED = DeviceIdentity(DEVICE.name, "a2" * 32)  # alice's next certificate
FAKE = "fe" * 32  # a fingerprint no certificate has


def _records(log: Path) -> list[records.Record]:
    return [records.parse(r.data) for r in scan_log(log).records]


def _uplinks(log: Path) -> list[list[bytes]]:
    """Each session's uplink payloads, sessions in the order they began in the log."""
    out: dict[str, list[bytes]] = {}
    for rec in _records(log):
        if rec.kind == records.KIND_BEGIN:
            out[rec.session or ""] = []
        elif rec.kind == records.KIND_UPLINK:
            out[rec.session or ""].append(rec.payload or b"")
    return list(out.values())


def _server_saw(path: Path, streams: list[list[bytes]], device: DeviceIdentity = DEVICE) -> None:
    """The server received these streams one after another (appended to the transcript at `path`)."""
    with ServerTranscript.open(path, durable=False) as t:
        for payloads in streams:
            stream = secrets.token_hex(8)
            t.begin_stream(stream, device.name, device.cert_sha256)
            for p in payloads:
                t.record_uplink(stream, p)
            t.end_stream(stream, "closed")


def _rewrite(log: Path, key: SigningKey, edit: Callable[[list[dict]], list[dict]]) -> None:
    """What a key holder can do: rewrite the records, renumber them, and sign the result afresh."""
    fields = edit([dict(r.fields) for r in _records(log)])
    seg = log / SEGMENTS_DIR
    shutil.rmtree(seg)
    seg.mkdir()
    (seg / "seg-000000000000.log").write_bytes(
        b"".join(frame(records.encode({**f, "index": i})) for i, f in enumerate(fields))
    )
    (log / CHECKPOINTS_FILE).unlink()  # the old checkpoints sign the old history
    with AuditLog.open(log, key):  # recovers the rewritten records and signs a checkpoint over them
        pass


def _fake_fingerprint(fields: list[dict]) -> list[dict]:
    return [{**f, "cert_sha256": FAKE} if f["kind"] == records.KIND_DEVICE else f for f in fields]


def _failures(built: BuiltLog, transcript: Path) -> str:
    with pytest.raises(VerificationFailed) as info:
        verify(built.directory, key=built.key.verifier, server_transcript=transcript)
    failed = [c for c in info.value.report.checks if not c.ok]
    assert [c.name for c in failed] == ["server transcript"], [m for c in failed for m in c.failures]
    return "\n".join(failed[0].failures)


def _transcript_check(report: Report) -> str:
    (check,) = [c for c in report.checks if c.name == "server transcript"]
    return check.summary


@pytest.fixture
def honest(tmp_path: Path) -> tuple[BuiltLog, Path]:
    """Alice's log of three sessions and the server's transcript of them (with bob's streams between)."""
    built = build_log(tmp_path, sessions=3)
    path = tmp_path / "server.jsonl"
    streams = _uplinks(built.directory)
    _server_saw(path, streams[:1])
    _server_saw(path, [[b"\x1a\x02\x08\x01"]], device=BOB)
    _server_saw(path, streams[1:])
    assert verify(built.directory, key=built.key.verifier, server_transcript=path).verdict == "VERIFIED"
    return built, path


# -- the attacks: each one verified before this check existed ------------------------------------------


def test_a_fake_fingerprint_with_every_session_dropped_fails(honest: tuple[BuiltLog, Path]) -> None:
    built, path = honest

    def edit(fields: list[dict]) -> list[dict]:
        return [f for f in _fake_fingerprint(fields) if f["kind"] not in records.SESSION_KINDS]

    _rewrite(built.directory, built.key, edit)
    assert verify(built.directory, key=built.key.verifier).verdict == "VERIFIED"  # the key alone cannot tell
    text = _failures(built, path)
    assert f"3 stream(s) (12 uplink(s)) from device alice with certificate sha256 {DEVICE.cert_sha256[:16]}…" in text
    assert "which this log never binds" in text


def test_a_fake_fingerprint_with_sessions_turned_into_fallbacks_fails(honest: tuple[BuiltLog, Path]) -> None:
    """Each session keeps its uplinks but its Close becomes a fallback: no stream need match it any more."""
    built, path = honest

    def edit(fields: list[dict]) -> list[dict]:
        out = _fake_fingerprint(fields)
        closes = {f["session"]: i for i, f in enumerate(out) if f["kind"] == records.KIND_UPLINK}  # last uplink
        for sid, i in closes.items():
            out[i] = {"kind": records.KIND_FALLBACK, "time": out[i]["time"], "session": sid, "n": out[i]["n"],
                      "reason": "verifier-unreachable"}  # fmt: skip
        return out

    _rewrite(built.directory, built.key, edit)
    report = verify(built.directory, key=built.key.verifier)
    assert report.verdict == "VERIFIED" and all(s.ended.startswith("fallback") for s in report.sessions)
    assert "which this log never binds" in _failures(built, path)


def _made_up_device(fields: list[dict]) -> list[dict]:
    """A device name and a fingerprint of the device's own making, and every session dropped."""
    named = [{**f, "device": "alice-x", "cert_sha256": FAKE} if f["kind"] == records.KIND_DEVICE else f for f in fields]
    return [f for f in named if f["kind"] not in records.SESSION_KINDS]


def test_a_made_up_device_name_cannot_make_the_devices_streams_someone_elses(honest: tuple[BuiltLog, Path]) -> None:
    """Renamed, the log bound no name the server saw, so alice's three streams counted as another
    device's and the log verified with zero sessions."""
    built, path = honest
    _rewrite(built.directory, built.key, _made_up_device)
    assert verify(built.directory, key=built.key.verifier).verdict == "VERIFIED"  # the key alone cannot tell
    text = _failures(built, path)
    assert "the log binds alice-x (certificate sha256 fefefefefefefefe…), and the server saw no certificate" in text
    assert "--device NAME" in text
    # Named by the auditor, the device's streams are compared whatever the log says it is.
    with pytest.raises(VerificationFailed) as info:
        verify(built.directory, key=built.key.verifier, server_transcript=path, device=DEVICE.name)
    (check,) = [c for c in info.value.report.checks if not c.ok]
    text = "\n".join(check.failures)
    assert "the log binds device alice-x, but it is the log of device alice" in text
    assert "3 stream(s) (12 uplink(s)) from device alice" in text and "which this log never binds" in text


def test_a_log_with_no_certificate_at_all_is_not_compared_with_nothing(honest: tuple[BuiltLog, Path]) -> None:
    built, path = honest
    _rewrite(built.directory, built.key, lambda fs: [f for f in _made_up_device(fs) if f["kind"] != "device-cert"])
    assert "the log binds no device, and the server saw no certificate of it" in _failures(built, path)


def test_the_witness_state_names_the_device_whose_log_key_it_pinned(honest: tuple[BuiltLog, Path]) -> None:
    built, path = honest
    _rewrite(built.directory, built.key, _made_up_device)
    pinned = WitnessedLog("o", str(built.key.verifier), 1, b"\0" * 32, 0, "")
    state = WitnessState("w", {DEVICE.name: pinned, BOB.name: replace(pinned, key="another log's key")})
    report = inspect(built.directory, key=built.key.verifier, server_transcript=path, witness_state=state)
    (check,) = [c for c in report.checks if c.name == "server transcript"]
    assert any("the log binds device alice-x, but it is the log of device alice" in f for f in check.failures)


def test_the_auditor_names_the_device_of_an_honest_log(honest: tuple[BuiltLog, Path]) -> None:
    built, path = honest
    report = verify(built.directory, key=built.key.verifier, server_transcript=path, device=DEVICE.name)
    assert report.verdict == "VERIFIED" and _transcript_check(report).startswith("3 server stream(s)")
    with pytest.raises(VerificationFailed, match="server transcript"):
        verify(built.directory, key=built.key.verifier, server_transcript=path, device=BOB.name)


def test_whole_sessions_reordered_and_re_signed_fail(honest: tuple[BuiltLog, Path]) -> None:
    built, path = honest
    first, second = built.sessions[0], built.sessions[1]

    def edit(fields: list[dict]) -> list[dict]:
        head = [f for f in fields if f.get("session") is None]
        block = {sid: [f for f in fields if f.get("session") == sid] for sid in built.sessions}
        return head + block[second] + block[first] + block[built.sessions[2]]

    _rewrite(built.directory, built.key, edit)
    assert verify(built.directory, key=built.key.verifier).verdict == "VERIFIED"
    text = _failures(built, path)
    assert f"device session {second[:8]}… received a downlink (record " in text
    assert f"before device session {first[:8]}… sent its first uplink" in text
    assert "the sessions were reordered" in text


def test_a_reorder_hidden_behind_a_fallen_back_copy_fails(honest: tuple[BuiltLog, Path]) -> None:
    """A copy of the moved session, marked as fallen back, would make the server's stream ambiguous; but a
    session the server answered has a stream, so the copy with no stream of its own fails."""
    built, path = honest
    first, second, third = built.sessions

    def edit(fields: list[dict]) -> list[dict]:
        head = [f for f in fields if f.get("session") is None]
        block = {sid: [f for f in fields if f.get("session") == sid] for sid in built.sessions}
        copy = [{**f, "session": "c" * 32} for f in block[second]]
        close = copy.pop()  # the Close uplink: a fallback goes before it, and the Close follows it
        fallback = {"kind": records.KIND_FALLBACK, "time": close["time"], "session": "c" * 32, "n": close["n"],
                    "reason": "verifier-unreachable"}  # fmt: skip
        copy += [fallback, {**close, "n": close["n"] + 1}]
        return head + block[second] + block[first] + copy + block[third]

    _rewrite(built.directory, built.key, edit)
    assert verify(built.directory, key=built.key.verifier).verdict == "VERIFIED"
    text = _failures(built, path)
    assert "device session cccccccc… (uplinks from record " in text and "fell back after a downlink" in text
    assert "the sessions were reordered" in text


def test_a_certificate_the_log_never_recorded_fails(tmp_path: Path) -> None:
    """The device's certificate was rotated but the log kept only the first: the new streams are unaccounted for."""
    built = build_log(tmp_path, sessions=1)
    path = tmp_path / "server.jsonl"
    _server_saw(path, _uplinks(built.directory))
    _server_saw(path, [[b"\x1a\x02\x08\x01"]], device=ROTATED)
    assert f"certificate sha256 {ROTATED.cert_sha256[:16]}…, which this log never binds" in _failures(built, path)


def test_a_certificate_the_server_saw_under_another_name_fails(tmp_path: Path) -> None:
    """A certificate has one name: a log that binds bob's certificate under alice's name lies about one of them."""
    built = build_log(tmp_path, sessions=1, device=DeviceIdentity(DEVICE.name, BOB.cert_sha256))
    path = tmp_path / "server.jsonl"
    _server_saw(path, _uplinks(built.directory), device=BOB)
    assert "but the server saw that certificate as device bob" in _failures(built, path)


# -- honest logs stay VERIFIED -------------------------------------------------------------------------


def test_an_honest_log_with_another_devices_streams_between_verifies(honest: tuple[BuiltLog, Path]) -> None:
    built, path = honest
    report = verify(built.directory, key=built.key.verifier, server_transcript=path)
    assert "3 server stream(s) of this device match device sessions hash for hash, in order" in _transcript_check(
        report
    )


def test_a_rotated_certificate_recorded_in_the_log_verifies(tmp_path: Path) -> None:
    built = build_log(tmp_path, sessions=2)
    with AuditLog.open(built.directory, built.key, device=ROTATED) as log:  # the device's new certificate
        run_session(EgressRecorder(log), seed=7)
    streams = _uplinks(built.directory)
    path = tmp_path / "server.jsonl"
    _server_saw(path, streams[:2])
    _server_saw(path, streams[2:], device=ROTATED)
    report = verify(built.directory, key=built.key.verifier, server_transcript=path)
    assert report.devices == ((DEVICE.name, DEVICE.cert_sha256), (ROTATED.name, ROTATED.cert_sha256))
    assert "3 server stream(s) of this device match" in _transcript_check(report)
    # The same streams, all under the first certificate: the last session is bound to the second.
    wrong = tmp_path / "wrong.jsonl"
    _server_saw(wrong, streams)
    assert "closed normally but the server has no matching record" in _failures(built, wrong)


def test_a_fallback_the_server_saw_part_of_verifies(tmp_path: Path) -> None:
    key = SigningKey.generate("device.test/log")
    with AuditLog.open(tmp_path / "log", key, device=DEVICE) as log:
        rec = EgressRecorder(log)
        run_session(rec, seed=0)
        sid = run_session(rec, seed=1, close=False)
        rec.on_fallback(sid, "verifier-unreachable")
        run_session(rec, seed=2)
    built = BuiltLog(tmp_path / "log", key, tmp_path / "device.pub", [])
    streams = _uplinks(built.directory)
    path = tmp_path / "server.jsonl"
    _server_saw(path, [streams[0], streams[1][:2], streams[2]])  # the server got 2 of the fallback's 3 uplinks
    report = verify(built.directory, key=key.verifier, server_transcript=path)
    assert "3 server stream(s) of this device match" in _transcript_check(report)


def _concurrent_log(tmp_path: Path) -> tuple[BuiltLog, list[list[bytes]]]:
    """Two sessions of one device at once: both Open and send round 1 before either is answered."""
    key = SigningKey.generate("device.test/log")
    with AuditLog.open(tmp_path / "log", key, device=DEVICE) as log:
        rec = EgressRecorder(log)
        sids = [rec.begin_session(vocab_size=VOCAB) for _ in range(2)]
        ups = [uplink_serializer(rec, s) for s in sids]
        downs = [downlink_deserializer(rec, s) for s in sids]
        for i, up in enumerate(ups):
            up(wire.open_to_proto([10 + i, 11], SessionParams(top_k=2, draft_len=4)))
        for i, up in enumerate(ups):
            up(wire.round_to_proto(1, [], [20 + i, 21]))
        for i, down in enumerate(downs):
            verdict = Verdict(1, SteeringVector(((30 + i,), (31,)), (0.0, -1.0)))
            down(wire.verdict_to_proto(1, verdict).SerializeToString())
        for up in ups:
            up(wire.close_to_proto(2))
        run_session(rec, seed=5)  # a third session, after both were answered
    return BuiltLog(tmp_path / "log", key, tmp_path / "device.pub", sids), _uplinks(tmp_path / "log")


def _server_interleaved(path: Path, streams: list[list[bytes]], order: list[int]) -> None:
    """The server received the streams' messages interleaved: `order` lists stream numbers, one per message."""
    with ServerTranscript.open(path, durable=False) as t:
        names = [secrets.token_hex(8) for _ in streams]
        sent = [0] * len(streams)
        for s in order:
            if sent[s] == 0:
                t.begin_stream(names[s], DEVICE.name, DEVICE.cert_sha256)
            t.record_uplink(names[s], streams[s][sent[s]])
            sent[s] += 1
            if sent[s] == len(streams[s]):
                t.end_stream(names[s], "closed")


def test_concurrent_sessions_verify_whichever_stream_the_server_saw_first(tmp_path: Path) -> None:
    built, streams = _concurrent_log(tmp_path)
    third = [2] * len(streams[2])
    for order in ([0, 1, 0, 1, 0, 1], [1, 0, 1, 0, 1, 0], [1, 1, 0, 0, 0, 1]):
        path = tmp_path / f"server-{''.join(map(str, order))}.jsonl"
        _server_interleaved(path, streams, order + third)
        report = verify(built.directory, key=built.key.verifier, server_transcript=path)
        assert "3 server stream(s) of this device match" in _transcript_check(report)


def test_a_session_answered_before_another_began_must_come_first_at_the_server(tmp_path: Path) -> None:
    """The third session began after the first two were answered, so the server cannot have seen it first."""
    built, streams = _concurrent_log(tmp_path)
    path = tmp_path / "server.jsonl"
    _server_interleaved(path, streams, [2] * len(streams[2]) + [0, 1, 0, 1, 0, 1])
    text = _failures(built, path)
    assert text.count("the sessions were reordered") == 1, text
    assert "sent its first uplink (record 13)" in text


def test_identical_concurrent_sessions_raise_no_order_alarm(tmp_path: Path) -> None:
    """Two sessions send the same uplinks; the one answered first came before a third session at the server.

    Which stream is whose is unknown, so pairing the first-logged session with the first stream
    would claim an order the device never had.
    """
    key = SigningKey.generate("device.test/log")
    with AuditLog.open(tmp_path / "log", key, device=DEVICE) as log:
        rec = EgressRecorder(log)
        same = [rec.begin_session(vocab_size=VOCAB) for _ in range(2)]
        ups = {s: uplink_serializer(rec, s) for s in same}
        downs = {s: downlink_deserializer(rec, s) for s in same}
        verdict = wire.verdict_to_proto(1, Verdict(1, SteeringVector(((30,), (31,)), (0.0, -1.0)))).SerializeToString()
        for s in same:
            ups[s](wire.open_to_proto([10, 11], SessionParams(top_k=2, draft_len=4)))
        ups[same[1]](wire.round_to_proto(1, [], [20, 21]))
        downs[same[1]](verdict)  # the second session is answered first ...
        run_session(rec, seed=5)  # ... then a third session runs ...
        ups[same[0]](wire.round_to_proto(1, [], [20, 21]))
        downs[same[0]](verdict)  # ... and only then is the first answered
        for s in same:
            ups[s](wire.close_to_proto(2))
    built = BuiltLog(tmp_path / "log", key, tmp_path / "device.pub", same)
    streams = _uplinks(built.directory)
    assert streams[0] == streams[1]
    path = tmp_path / "server.jsonl"
    _server_interleaved(path, streams, [1, 1] + [2] * len(streams[2]) + [0, 0, 0, 1])
    report = verify(built.directory, key=key.verifier, server_transcript=path)
    assert "3 server stream(s) of this device match" in _transcript_check(report)


def test_replicas_streams_are_not_ordered_against_each_other(tmp_path: Path) -> None:
    """Two verifier replicas' transcripts have no common clock: order is compared within each one only."""
    built = build_log(tmp_path, sessions=3)
    streams = _uplinks(built.directory)
    _server_saw(tmp_path / "a.jsonl", [streams[2]])
    _server_saw(tmp_path / "b.jsonl", streams[:2])
    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    report = verify(built.directory, key=built.key.verifier, server_transcript=paths)
    assert "3 server stream(s) of this device match" in _transcript_check(report)


def test_every_session_dropped_under_the_real_certificate_fails(honest: tuple[BuiltLog, Path]) -> None:
    """A log that keeps its certificate record but no session is still compared with that certificate's streams."""
    built, path = honest
    _rewrite(built.directory, built.key, lambda fields: [f for f in fields if f["kind"] not in records.SESSION_KINDS])
    assert verify(built.directory, key=built.key.verifier).verdict == "VERIFIED"
    assert _failures(built, path).count("matches no session in this log") == 3


def test_concurrent_sessions_through_a_real_verifier_verify(tmp_path: Path, char_tok) -> None:
    """Threads of one device share a channel and a log; the server's order is whatever the network made it.
    The verifier is also the log's witness: a Close's checkpoint may sign other sessions' records too."""
    s_lm, g_lm = tiny_lm(char_tok, seed=1, name="s"), tiny_lm(char_tok, seed=2, name="g")
    pki = make_pki(tmp_path)
    key = SigningKey.generate("device.test/concurrent")
    identity = DeviceIdentity.from_pem(pki.device_cert("alice").read_bytes())
    witness_private, witness_public = write_witness_key_pair("verifier.test/witness", tmp_path / "witness")
    witness_key = load_witness_key(witness_public)
    start = threading.Barrier(4)
    failed: list[BaseException] = []
    with (
        serve(
            CloudVerifier(g_lm, s_lm, seed=0, max_top_k=64),
            pki,
            transcript_dir=tmp_path / "t",
            witness_key=witness_private,
        ) as (_, port),
        AuditLog.open(tmp_path / "log", key, device=identity, witness_key=witness_key) as log,
        remote(port, pki, vocab_size=s_lm.vocab_size, tap=EgressRecorder(log)) as verifier,
    ):

        def device(i: int) -> None:
            try:
                start.wait()
                for prompt in (f"thread {i} says hi", f"and {i} again"):
                    generate(Specialist(s_lm), prompt, SessionParams(gamma=0.05), DecodeOptions(8), verifier)
            except BaseException as exc:  # surfaced below: a thread's exception would otherwise vanish
                failed.append(exc)

        threads = [threading.Thread(target=device, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not failed, failed
    order = [r.session for r in _records(tmp_path / "log") if r.session is not None]
    spans = {sid: (order.index(sid), len(order) - order[::-1].index(sid)) for sid in set(order)}
    assert len(spans) == 8
    assert any(a[0] < b[0] < a[1] for a in spans.values() for b in spans.values()), "no two sessions overlapped"
    report = verify(
        tmp_path / "log",
        key=key.verifier,
        server_transcript=tmp_path / "t" / "server-transcript.jsonl",
        witness_keys=[witness_key],
    )
    assert "8 server stream(s) of this device match" in _transcript_check(report)
    (check,) = [c for c in report.checks if c.name == "witness cosignatures"]
    assert check.ok and "cosignature(s) by verifier.test/witness" in check.summary, check.summary

"""`--server-transcript`: the server's own record must match the device's log hash for hash."""

from __future__ import annotations

import base64
import secrets
from pathlib import Path

import pytest

from specsteer.audit import records
from specsteer.audit.cli import main
from specsteer.audit.errors import AuditError, VerificationFailed
from specsteer.audit.identity import DeviceIdentity
from specsteer.audit.log import scan_log
from specsteer.audit.transcript import ServerTranscript, TornLine, read_transcript
from specsteer.audit.verify import verify
from specsteer.core import wire
from tests.audit.helpers import DEVICE, BuiltLog, build_log


def _device_uplinks(built: BuiltLog) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for r in scan_log(built.directory).records:
        rec = records.parse(r.data)
        if rec.kind == records.KIND_UPLINK:
            out.setdefault(rec.session or "", []).append(base64.b64decode(rec.fields["bytes"]))
    return out


def _server_saw(path: Path, streams: list[list[bytes]], device: DeviceIdentity = DEVICE) -> None:
    with ServerTranscript.open(path) as t:
        for payloads in streams:
            stream = secrets.token_hex(8)
            t.begin_stream(stream, device.name, device.cert_sha256)
            for p in payloads:
                t.record_uplink(stream, p)
            t.end_stream(stream, "closed")


def _fail_text(built: BuiltLog, transcript: Path) -> str:
    with pytest.raises(VerificationFailed) as info:
        verify(built.directory, key=built.key.verifier, server_transcript=transcript)
    (check,) = [c for c in info.value.report.checks if not c.ok]
    assert check.name == "server transcript"
    return "\n".join(check.failures)


def test_a_matching_transcript_passes(tmp_path: Path) -> None:
    built = build_log(tmp_path, sessions=3)
    streams = list(_device_uplinks(built).values())
    _server_saw(tmp_path / "server.jsonl", streams)  # in the log's order (test_transcript_binding.py: order)
    report = verify(built.directory, key=built.key.verifier, server_transcript=tmp_path / "server.jsonl")
    assert (
        report.checks[-1].name == "server transcript"
        and "3 server stream(s) of this device match" in report.checks[-1].summary
    )


def test_an_uplink_the_device_never_logged_is_caught(tmp_path: Path) -> None:
    built = build_log(tmp_path, sessions=2)
    streams = list(_device_uplinks(built).values())
    smuggled = wire.round_to_proto(3, [], [1, 2, 3]).SerializeToString()
    _server_saw(tmp_path / "server.jsonl", [streams[0], [*streams[1][:2], smuggled, *streams[1][2:]]])
    text = _fail_text(built, tmp_path / "server.jsonl")
    assert "message 2 (transcript line" in text and "the device logged a different uplink there" in text


def test_a_stream_with_no_device_session_is_egress_that_bypassed_the_log(tmp_path: Path) -> None:
    built = build_log(tmp_path, sessions=1)
    streams = list(_device_uplinks(built).values())
    _server_saw(tmp_path / "server.jsonl", [*streams, [b"\x1a\x02\x08\x01"]])
    assert "bypassed the audit log" in _fail_text(built, tmp_path / "server.jsonl")


def test_a_closed_session_the_server_never_received_is_a_mismatch(tmp_path: Path) -> None:
    built = build_log(tmp_path, sessions=2)
    streams = list(_device_uplinks(built).values())
    _server_saw(tmp_path / "server.jsonl", streams[:1])
    assert "closed normally but the server has no matching record" in _fail_text(built, tmp_path / "server.jsonl")


def test_a_close_the_server_never_received_is_one_note_not_two_failures(tmp_path: Path) -> None:
    """The server ended the stream after the last verdict (idle timeout, restart): the device logged and
    sent its Close, the server never got it. The log holds more than the server, not less."""
    built = build_log(tmp_path, sessions=2)
    streams = list(_device_uplinks(built).values())
    with ServerTranscript.open(tmp_path / "server.jsonl") as t:
        for i, payloads in enumerate(streams):
            t.begin_stream(f"s{i}", DEVICE.name, DEVICE.cert_sha256)
            for p in payloads if i == 0 else payloads[:-1]:
                t.record_uplink(f"s{i}", p)
            t.end_stream(f"s{i}", "closed" if i == 0 else "expired")
    report = verify(built.directory, key=built.key.verifier, server_transcript=tmp_path / "server.jsonl")
    (check,) = [c for c in report.checks if c.name == "server transcript"]
    lost = [n for n in check.notes if "but its final Close" in n]
    assert len(lost) == 1 and "server stream s1 (ended: expired)" in lost[0], check.notes
    assert "2 server stream(s) of this device match" in check.summary
    # Missing more than the final Close is still a failure, as is the Close of a session missing.
    with ServerTranscript.open(tmp_path / "short.jsonl") as t:
        for i, payloads in enumerate(streams):
            t.begin_stream(f"s{i}", DEVICE.name, DEVICE.cert_sha256)
            for p in payloads if i == 0 else payloads[:-2]:
                t.record_uplink(f"s{i}", p)
            t.end_stream(f"s{i}", "expired")
    assert "closed normally" in _fail_text(built, tmp_path / "short.jsonl")


def _torn_by_a_crash(path: Path, stream: str, device: DeviceIdentity) -> None:
    """`device`'s stream is open when the server crashes mid-line; the server restarts and goes on."""
    with ServerTranscript.open(path) as t:
        t.begin_stream(stream, device.name, device.cert_sha256)
        t.record_uplink(stream, b"\x0a\x02\x08\x01")
    path.write_bytes(path.read_bytes()[:-25])  # the crash tore the last write
    with ServerTranscript.open(path) as t:  # the restarted server: new streams only
        t.begin_stream("later", "carol", "c3" * 32)
        t.end_stream("later", "closed")


def test_a_line_torn_by_a_crash_fails_only_the_device_whose_stream_was_open(tmp_path: Path) -> None:
    """A torn line fails no device forever: only one whose stream was open then (it may be its uplink)."""
    built = build_log(tmp_path, sessions=2)
    streams = list(_device_uplinks(built).values())
    transcript = tmp_path / "server.jsonl"
    _server_saw(transcript, streams)
    _torn_by_a_crash(transcript, "bobstream", BOB)
    report = verify(built.directory, key=built.key.verifier, server_transcript=transcript, device="alice")
    (check,) = [c for c in report.checks if c.name == "server transcript"]
    assert any("torn by a crash" in n and "none of this device's uplinks" in n for n in check.notes), check.notes
    # The same crash with one of alice's streams open: the torn line may be her uplink.
    mine = tmp_path / "mine.jsonl"
    _server_saw(mine, streams)
    _torn_by_a_crash(mine, "alicestream", DEVICE)
    with pytest.raises(VerificationFailed) as info:
        verify(built.directory, key=built.key.verifier, server_transcript=mine, device="alice")
    text = "\n".join(m for c in info.value.report.checks for m in c.failures)
    assert "torn by a crash while stream alicestream of this device was open" in text, text
    # A damaged line that streams open before it write past is no crash: it fails every device.
    lines = transcript.read_bytes().split(b"\n")
    torn = next(i for i, line in enumerate(lines) if line.startswith(b"{") and not line.endswith(b"}"))
    lines.insert(torn + 1, b'{"stream":"bobstream","end":"closed","uplinks":1}')
    transcript.write_bytes(b"\n".join(lines))
    assert "not a line torn by a crash" in _fail_text(built, transcript)


def test_a_malformed_transcript_line_is_named(tmp_path: Path) -> None:
    built = build_log(tmp_path, sessions=1)
    _server_saw(tmp_path / "server.jsonl", list(_device_uplinks(built).values()))
    with (tmp_path / "server.jsonl").open("a") as f:
        f.write('{"stream": "x", "i": 0, "len": 1}\n')
    assert "server transcript line" in _fail_text(built, tmp_path / "server.jsonl")


BOB = DeviceIdentity("bob", "b0" * 32)


def test_only_this_devices_streams_are_compared(tmp_path: Path) -> None:
    """Another device's streams on the same verifier are no false alarm, and cannot vouch for this log."""
    built = build_log(tmp_path, sessions=2)
    streams = list(_device_uplinks(built).values())
    path = tmp_path / "server.jsonl"
    _server_saw(path, streams)
    _server_saw(path, [[b"\x1a\x02\x08\x01"], streams[1]], device=BOB)  # bob: his own stream, and a copy
    report = verify(built.directory, key=built.key.verifier, server_transcript=path)
    (check,) = [c for c in report.checks if c.name == "server transcript"]
    assert "2 server stream(s) of this device match" in check.summary
    assert any("2 stream(s) of 1 other certificate(s) were not compared" in n for n in check.notes)
    # The same streams under bob's certificate only: alice's log cannot claim them.
    only_bob = tmp_path / "bob-only.jsonl"
    _server_saw(only_bob, streams, device=BOB)
    text = _fail_text(built, only_bob)
    assert text.count("closed normally but the server has no matching record of its 4 uplinks from device alice") == 2


def test_a_log_that_binds_no_certificate_cannot_be_attributed(tmp_path: Path) -> None:
    built = build_log(tmp_path, sessions=1, device=None)
    path = tmp_path / "server.jsonl"
    _server_saw(path, list(_device_uplinks(built).values()))
    assert "began before the log bound a device certificate" in _fail_text(built, path)


def test_the_writer_keeps_identity_and_end_and_refuses_an_old_format(tmp_path: Path) -> None:
    path = tmp_path / "server.jsonl"
    with ServerTranscript.open(path) as t:
        t.begin_stream("s1", "alice", DEVICE.cert_sha256)
        t.record_uplink("s1", b"abc")
        t.end_stream("s1", "closed")
        with pytest.raises(AuditError, match="was not begun"):
            t.record_uplink("s2", b"x")
    with path.open("ab") as f:
        f.write(b'{"stream":"s9"')  # a line torn by a crash
    with ServerTranscript.open(path) as t:  # reopens, keeps the torn line as evidence, writes on a new line
        t.begin_stream("s3", "bob", BOB.cert_sha256)
        with pytest.raises(AuditError, match="already exists"):
            t.begin_stream("s1", "alice", DEVICE.cert_sha256)
    parsed = read_transcript(path)
    assert parsed.info["s1"].end == "closed" and parsed.info["s1"].device == "alice"
    assert parsed.info["s3"].cert_sha256 == BOB.cert_sha256 and parsed.info["s3"].end is None
    # Not a problem in itself: `compare` judges it per device (whose streams were open then).
    assert parsed.problems == [] and parsed.torn == [TornLine(5, frozenset())]
    old = tmp_path / "v1.jsonl"
    old.write_text(
        '{"format":"specsteer-server-transcript/1"}\n{"stream":"a","i":0,"len":1,"sha256":"' + "0" * 64 + '"}\n'
    )
    with pytest.raises(AuditError, match="is not a specsteer-server-transcript/2 file"):
        ServerTranscript.open(old)
    assert any("without device identities" in p for p in read_transcript(old).problems)


def test_several_replicas_transcripts_are_compared_as_one(tmp_path: Path) -> None:
    built = build_log(tmp_path, sessions=3)
    streams = list(_device_uplinks(built).values())
    _server_saw(tmp_path / "a.jsonl", streams[:1])
    _server_saw(tmp_path / "b.jsonl", streams[1:])
    argv = ["verify", str(built.directory), "--key", str(built.pub)]
    assert main([*argv, "--server-transcript", str(tmp_path / "a.jsonl")]) == 1  # one replica is not enough
    both = ["--server-transcript", str(tmp_path / "a.jsonl"), "--server-transcript", str(tmp_path / "b.jsonl")]
    assert main([*argv, *both]) == 0


def test_many_stray_streams_are_explained_up_to_a_cap_then_counted() -> None:
    """Strays are matched through an index by first uplink (linear, not quadratic), and explained
    up to MAX_STRAY_REPORTS each; the rest are counted in one line."""
    from specsteer.audit.transcript import (
        MAX_STRAY_REPORTS,
        DeviceSession,
        Stream,
        Transcript,
        TranscriptEntry,
        compare,
    )

    cert = DEVICE.cert_sha256
    sessions = [
        DeviceSession(f"{i:032x}", [(3 * i + 1, f"{i:064x}")], True, cert, "alice", 3 * i + 2) for i in range(150)
    ]
    transcript = Transcript()
    for i in range(150):  # each stream's first uplink is its session's, its second never logged
        stream = Stream(f"s{i}", "alice", cert, 2 * i + 2, [TranscriptEntry(2 * i + 2, f"{i:064x}")])
        stream.entries.append(TranscriptEntry(2 * i + 3, "f" * 64))
        transcript.info[stream.name] = stream
        transcript.streams[stream.name] = stream.entries
    result = compare(sessions, transcript, [("alice", cert)], device_name="alice")
    explained = [f for f in result.failures if "message 1 (transcript line" in f]
    assert len(explained) == MAX_STRAY_REPORTS
    assert explained[0].startswith("server stream s0: message 1") and "device session 00000000…" in explained[0]
    assert any(f"{150 - MAX_STRAY_REPORTS} more server stream(s) from device alice" in f for f in result.failures)

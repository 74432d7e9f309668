"""The server transcript's fsyncs are shared: streams writing at once wait for one fsync that
covers all their lines, not one each in a queue, and none returns before its line is on disk."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import pytest

import specsteer.audit.transcript as transcript_mod
from specsteer.audit.transcript import ServerTranscript, read_transcript

STREAMS = 16


def test_concurrent_streams_share_fsyncs_and_each_line_is_on_disk_before_its_call_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "server-transcript.jsonl"
    synced: list[int] = []  # the file's size at each fsync: what it made durable
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        time.sleep(0.05)  # a disk's flush: long enough that the other streams' lines queue behind it
        synced.append(os.fstat(fd).st_size)
        real_fsync(fd)

    transcript = ServerTranscript.open(path)
    for n in range(STREAMS):
        transcript.begin_stream(f"s{n}", "alice", "ab" * 32)
    monkeypatch.setattr(transcript_mod.os, "fsync", slow_fsync)
    start = threading.Barrier(STREAMS)
    late: list[str] = []

    def uplink(n: int) -> None:
        payload = f"uplink of stream {n}".encode()
        start.wait()
        transcript.record_uplink(f"s{n}", payload)
        durable = path.read_bytes()[: max(synced)]  # what was fsync'ed when the call returned
        if hashlib.sha256(payload).hexdigest().encode() not in durable:
            late.append(f"s{n}")

    threads = [threading.Thread(target=uplink, args=(n,)) for n in range(STREAMS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    transcript.close()

    assert not late, f"record_uplink returned before its line was fsync'ed: {late}"
    assert len(synced) <= STREAMS // 2, f"{len(synced)} fsyncs for {STREAMS} lines written at once"
    read = read_transcript(path)
    assert not read.problems
    assert all(len(read.streams[f"s{n}"]) == 1 for n in range(STREAMS))


def test_a_transcript_closed_with_unsynced_lines_fsyncs_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    transcript = ServerTranscript.open(tmp_path / "t.jsonl")
    calls: list[int] = []
    monkeypatch.setattr(transcript_mod.os, "fsync", lambda fd: calls.append(fd))
    with transcript._lock:  # a line written by a writer that has not reached its fsync yet
        transcript._write({"stream": "s", "device": "alice", "cert_sha256": "ab" * 32})
    transcript.close()
    assert len(calls) == 1

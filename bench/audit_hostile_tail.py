"""How much work reading an audit log with a hostile tail costs (issue 13, item 5).

A real log (one session through the recorder), then a damaged frame and N bytes in which every
fifth offset looks like the start of a 32 KiB JSON frame. Prints the time `scan_log` takes and the
bytes it hashes; a linear reader hashes about the file's size once.

    python -m bench.audit_hostile_tail [--tail-bytes 1048576]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from specsteer.audit import log as log_mod
from specsteer.audit import merkle, records
from specsteer.audit.log import HEADER, SEGMENTS_DIR, AuditLog, scan_log
from specsteer.audit.note import SigningKey
from specsteer.audit.recorder import EgressRecorder
from specsteer.core import wire
from specsteer.core.session_types import SessionParams


def _frame(data: bytes) -> bytes:
    return HEADER.pack(len(data)) + data + merkle.leaf_hash(data)


def build(directory: Path, tail_bytes: int) -> Path:
    """A one-session log whose last segment ends in a damaged frame and a hostile tail."""
    with AuditLog.open(directory, SigningKey.generate("bench/hostile")) as log:
        rec = EgressRecorder(log)
        sid = rec.begin_session(vocab_size=500)
        rec.on_uplink(sid, wire.encode_open([1, 2, 3], SessionParams(top_k=3, draft_len=4)))
        rec.on_uplink(sid, wire.encode_close(1))
    seg = max((directory / SEGMENTS_DIR).iterdir())
    bad = bytearray(_frame(records.build(99, records.KIND_FALLBACK, {"session": "e" * 32, "n": 1, "reason": "x"})))
    bad[-1] ^= 1
    with seg.open("ab") as f:
        f.write(bytes(bad) + b"\x00\x00\x80\x00{" * (tail_bytes // 5))
    return seg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tail-bytes", type=int, default=1 << 20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        seg = build(Path(tmp) / "log", args.tail_bytes)
        hashed = 0
        real = log_mod.merkle.leaf_hash

        def counting(data: bytes) -> bytes:
            nonlocal hashed
            hashed += len(data)
            return real(data)

        log_mod.merkle.leaf_hash = counting  # type: ignore[assignment]
        start = time.perf_counter()
        scan = scan_log(Path(tmp) / "log")
        elapsed = time.perf_counter() - start
        print(
            f"log file {seg.stat().st_size} bytes: scan_log {elapsed:.3f} s, {hashed} bytes hashed, "
            f"{len(scan.problems)} problem(s), {len(scan.torn)} torn tail(s)"
        )


if __name__ == "__main__":
    main()

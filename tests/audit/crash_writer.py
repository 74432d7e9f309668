"""Child process for the crash test: appends sessions forever, printing each acknowledged record.

    python -m tests.audit.crash_writer LOG_DIR SIGNER_KEY_FILE RUN

Each line `ack <index> <kind> <session> <payload sha256 or ->` is printed (and flushed) only after
the recorder returned, i.e. after the record was fsync'ed. The parent kills this process with
SIGKILL at a random moment and then checks that every acknowledged record is in the log.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from specsteer.audit.log import AuditLog
from specsteer.audit.note import load_signing_key
from specsteer.audit.recorder import EgressRecorder
from specsteer.core import wire
from specsteer.core.session_types import SessionParams, SteeringVector, Verdict

VOCAB = 50_000


def main() -> None:
    log_dir, key_file, run = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    log = AuditLog.open(log_dir, load_signing_key(key_file), segment_records=40)
    rec = EgressRecorder(log)
    print(f"opened {log.size}", flush=True)

    def ack(index: int, kind: str, session: str, payload: bytes | None) -> None:
        digest = hashlib.sha256(payload).hexdigest() if payload is not None else "-"
        print(f"ack {index} {kind} {session} {digest}", flush=True)

    s = 0
    while True:
        s += 1
        sid = rec.begin_session(vocab_size=VOCAB)
        ack(log.size - 1, "session-begin", sid, None)
        # A long prompt makes frames of several kilobytes, so a kill can land mid-write.
        prompt = [(run * 7919 + s * 31 + i) % VOCAB for i in range(1500 + s % 7)]
        payload = wire.open_to_proto(prompt, SessionParams(top_k=8, draft_len=8)).SerializeToString()
        ack(rec.on_uplink(sid, payload), "uplink", sid, payload)
        commit: list[int] = []
        for seq in range(1, 4):
            payload = wire.round_to_proto(seq, commit, [(s + seq + j) % VOCAB for j in range(8)]).SerializeToString()
            ack(rec.on_uplink(sid, payload), "uplink", sid, payload)
            cands = tuple(((s * seq + i) % VOCAB,) for i in range(8))
            down = wire.verdict_to_proto(seq, Verdict(3, SteeringVector(cands, (0.0,) * 8))).SerializeToString()
            ack(rec.on_downlink(sid, down), "downlink", sid, down)
            commit = list(cands[0])
        payload = wire.close_to_proto(4).SerializeToString()
        ack(rec.on_uplink(sid, payload), "uplink", sid, payload)


if __name__ == "__main__":
    main()

"""Builders for realistic audit logs and the raw-file surgery the tamper tests perform.

Logs are written through the real recorder with real wire messages (`core.wire`), so a log that
verifies here is the same kind of log a device writes.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specsteer.audit import merkle, records
from specsteer.audit.identity import DeviceIdentity
from specsteer.audit.log import CHECKPOINTS_FILE, HEADER, SEGMENTS_DIR, AuditLog, scan_log
from specsteer.audit.note import Checkpoint, SigningKey, parse_note, sign_checkpoint
from specsteer.audit.recorder import EgressRecorder
from specsteer.core import wire
from specsteer.core.proto import verifier_pb2 as pb
from specsteer.core.session_types import SessionParams, SteeringVector, Verdict

VOCAB = 500
DEVICE = DeviceIdentity("alice", "a1" * 32)  # the mTLS certificate the test logs bind


def uplink_serializer(rec: EgressRecorder, session_id: str) -> Callable[[pb.Uplink], bytes]:
    """A gRPC `request_serializer` over the recorder: serialize, check, log (fsync), then return the bytes.

    The SDK does not send this way (the recorder is its `sdk.egress` tap); tests use it to
    drive the recorder with messages, and to check it against a plain gRPC channel.
    """
    rec._state(session_id)  # refuses a session the recorder did not begin, before any message

    def serialize(message: pb.Uplink) -> bytes:
        payload = message.SerializeToString(deterministic=True)
        rec.on_uplink(session_id, payload)
        return payload

    return serialize


def downlink_deserializer(rec: EgressRecorder, session_id: str) -> Callable[[bytes], pb.Downlink]:
    """A gRPC `response_deserializer` over the recorder: log the received bytes, then parse and check them."""
    rec._state(session_id)  # refuses a session the recorder did not begin, before any message

    def deserialize(payload: bytes) -> pb.Downlink:
        rec.on_downlink(session_id, payload)
        return pb.Downlink.FromString(payload)

    return deserialize


@dataclass
class BuiltLog:
    directory: Path
    key: SigningKey
    pub: Path  # the verifier key file an auditor holds
    sessions: list[str]


def run_session(rec: EgressRecorder, *, rounds: int = 2, top_k: int = 3, seed: int = 0, close: bool = True) -> str:
    """One device session through the real serializer hooks: Open, rounds with downlinks, Close."""
    sid = rec.begin_session(vocab_size=VOCAB)
    up, down = uplink_serializer(rec, sid), downlink_deserializer(rec, sid)
    up(wire.open_to_proto([10 + seed, 11, 12], SessionParams(top_k=top_k, draft_len=4)))
    commit: list[int] = []
    for seq in range(1, rounds + 1):
        draft = [(seed * 7 + seq * 3 + j) % VOCAB for j in range(3)]
        up(wire.round_to_proto(seq, commit, draft))
        cands = tuple(((seed + seq + i) % VOCAB,) for i in range(top_k))
        verdict = Verdict(1, SteeringVector(cands, tuple(-0.5 * i for i in range(top_k))))
        down(wire.verdict_to_proto(seq, verdict).SerializeToString())
        commit = list(cands[0])
    if close:
        up(wire.close_to_proto(rounds + 1))
    return sid


def build_log(
    tmp: Path,
    *,
    sessions: int = 3,
    rounds: int = 2,
    segment_records: int = 4096,
    name: str = "device.test/log",
    device: DeviceIdentity | None = DEVICE,
) -> BuiltLog:
    key = SigningKey.generate(name)
    pub = tmp / "device.pub"
    pub.write_text(f"{key.verifier}\n")
    directory = tmp / "log"
    with AuditLog.open(directory, key, segment_records=segment_records, device=device) as log:
        rec = EgressRecorder(log)
        sids = [run_session(rec, rounds=rounds, seed=i) for i in range(sessions)]
    return BuiltLog(directory, key, pub, sids)


def segment_path(directory: Path, position: int) -> tuple[Path, int, int]:
    """(segment file, byte offset, frame length) of the record at `position`."""
    stored = scan_log(directory).records[position]
    frame_len = HEADER.size + len(stored.data) + 32
    return directory / SEGMENTS_DIR / stored.segment, stored.offset, frame_len


def record_data(directory: Path, position: int) -> bytes:
    return scan_log(directory).records[position].data


def frame(data: bytes) -> bytes:
    return HEADER.pack(len(data)) + data + merkle.leaf_hash(data)


def replace_record(directory: Path, position: int, new_data: bytes, *, fix_checksum: bool = True) -> None:
    """Overwrite one record in place (and, like a careful attacker, its frame checksum)."""
    path, offset, length = segment_path(directory, position)
    buf = path.read_bytes()
    new_frame = (
        frame(new_data)
        if fix_checksum
        else HEADER.pack(len(new_data)) + new_data + buf[offset + length - 32 : offset + length]
    )
    path.write_bytes(buf[:offset] + new_frame + buf[offset + length :])


def delete_record(directory: Path, position: int) -> None:
    path, offset, length = segment_path(directory, position)
    buf = path.read_bytes()
    path.write_bytes(buf[:offset] + buf[offset + length :])


def swap_records(directory: Path, a: int, b: int) -> None:
    """Swap two adjacent records' frames (a < b, same segment)."""
    path, off_a, len_a = segment_path(directory, a)
    _, off_b, len_b = segment_path(directory, b)
    assert off_a + len_a == off_b
    buf = path.read_bytes()
    path.write_bytes(buf[:off_a] + buf[off_b : off_b + len_b] + buf[off_a : off_a + len_a] + buf[off_b + len_b :])


def truncate_records(directory: Path, keep: int) -> None:
    """Cut the log back to its first `keep` records, at a clean frame boundary (no torn tail)."""
    path, offset, _ = segment_path(directory, keep)
    path.write_bytes(path.read_bytes()[:offset])


def checkpoint_notes(directory: Path) -> list[str]:
    return [json.loads(line)["note"] for line in (directory / CHECKPOINTS_FILE).read_text().splitlines()]


def write_checkpoint_notes(directory: Path, notes: list[str]) -> None:
    (directory / CHECKPOINTS_FILE).write_text("".join(json.dumps({"note": n}) + "\n" for n in notes))


def uplink_positions(directory: Path) -> list[int]:
    return [r.position for r in scan_log(directory).records if records.parse(r.data).kind == records.KIND_UPLINK]


def signed_witness_request(
    key: SigningKey, size: int, root: bytes, old: int = 0, proof: tuple[bytes, ...] = ()
) -> wire.WitnessRequest:
    """A Close's witness request for the checkpoint (size, root) of `key`'s log, signed by `key`."""
    (sig,) = parse_note(sign_checkpoint(Checkpoint(key.name, size, root), key)).signatures
    return wire.WitnessRequest(key.name, key.verifier.public_key, size, root, sig.signature, old, proof)


def resign_witness_requests(fields: list[dict], key: SigningKey) -> bytes:
    """The key holder's best rewrite: every Close's checkpoint moved, recomputed and re-signed over the
    new history, so the log holds together under the device's key. Returns the framed segment."""
    leaves: list[bytes] = []
    moved: dict[int, int] = {}  # a request's size before the rewrite -> after it
    body = b""
    for i, f in enumerate(fields):
        payload = base64.b64decode(f["bytes"]) if f["kind"] == records.KIND_UPLINK else b""
        request = wire.witness_of(payload) if payload else None
        if request is not None:
            size = max(1, min(i, i - (f["index"] - request.size)))  # as far back from the Close as before
            old = moved.get(request.old_size, 0)
            moved[request.size] = size
            proof = tuple(merkle.consistency_proof(old, leaves[:size])) if 0 < old < size else ()
            close = signed_witness_request(key, size, merkle.root(leaves[:size]), old, proof)
            seq = wire.pb.Uplink.FromString(payload).close.seq
            f = {**f, **records.payload_fields("up", wire.encode_close(seq, close))}
        data = records.encode({**f, "index": i})
        leaves.append(merkle.leaf_hash(data))
        body += frame(data)
    return body

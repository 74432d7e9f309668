"""The witness exchange's frames: a Close carrying the device's checkpoint, and the downlink
carrying the witness's cosignature (docs/audit-format.md, section 8).

The Close vectors join `wire/uplinks.json` (judged by `core.wire.decode_uplink`, like any uplink);
a cosignature sent where a round's answer is due joins `wire/downlinks.json`. `wire/cosignatures.json`
holds the downlinks answering a Close that asked for a cosignature, as the device's recorder judges
them before keeping one: the session contract's `examine_downlink` in a session whose Close
(`CLOSE_SEQ`) carried a witness request. The contract judges form only: a well-formed
cosignature is kept on record; the device proves later Closes from it only if it verifies under
the witness key the device was given (`sdk generate --witness-key`), and `audit verify
--witness-key` checks it (`audit/cases.json`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from google.protobuf.message import DecodeError

from specsteer.audit.note import Checkpoint
from specsteer.core import wire
from specsteer.core.contract import SessionState
from specsteer.core.proto import verifier_pb2 as pb
from specsteer.core.session_types import SessionParams, SteeringVector, Verdict
from tools.conformance.common import ConformanceError, category, field_bytes, mismatch, text_form, varint
from tools.conformance.keys import TEST_KEY, TEST_WITNESS, history, signed_request
from tools.conformance.witness import T0

COSIGNATURE_FILE = "wire/cosignatures.json"
VOCAB = 32
MAX_TOP_K = 4
CLOSE_SEQ = 2  # the Close of an Open and one answered round


def witness_json(w: wire.WitnessRequest) -> dict[str, Any]:
    """A Close's witness request as a vector states it: byte fields in hex."""
    return {
        "origin": w.origin,
        "log_key_hex": w.log_key.hex(),
        "size": w.size,
        "root_hash_hex": w.root_hash.hex(),
        "signature_hex": w.signature.hex(),
        "old_size": w.old_size,
        "consistency_proof_hex": [h.hex() for h in w.consistency_proof],
    }


def _leaves() -> list[bytes]:
    return history("conformance frames", 200)


def first_request() -> wire.WitnessRequest:
    """The checkpoint of a log never cosigned before: no old size, no proof."""
    return signed_request(TEST_KEY, _leaves(), 3)


def uplinks() -> list[tuple[str, str, bytes, str]]:
    """(name, description, Close bytes, intended outcome): `wire/uplinks.json`'s witness vectors."""
    first = first_request()
    grown = signed_request(TEST_KEY, _leaves(), 7, 3)
    # The longest proof the shape allows; whether it proves anything is the witness's to judge.
    longest = replace(first, size=200, old_size=1, consistency_proof=tuple(bytes([i]) * 32 for i in range(64)))
    close = wire.encode_close
    inner = wire.witness_to_proto(first).SerializeToString(deterministic=True)
    return [
        ("close-witness-first", "a Close carrying the log's first checkpoint for the witness: old size 0, no proof",
         close(3, first), "valid"),
        ("close-witness-growth", "a Close carrying a checkpoint of size 7 and its consistency proof from size 3",
         close(5, grown), "valid"),
        ("close-witness-64-hashes", "a consistency proof of 64 hashes, the most a witness request may carry",
         close(3, longest), "valid"),
        ("witness-unknown-field", "a witness request carrying field 9, which WitnessRequest does not declare",
         field_bytes(3, varint(1 << 3) + varint(3) + field_bytes(2, inner + varint(9 << 3) + varint(1))),
         "unknown-field"),
        ("witness-origin-empty", "a witness request with an empty origin", close(3, replace(first, origin="")),
         "witness-origin"),
        ("witness-origin-space", "an origin holding a space (it could not round-trip into a signature line)",
         close(3, replace(first, origin="a log")), "witness-origin"),
        ("witness-origin-plus", "an origin holding '+' (the key encoding's separator)",
         close(3, replace(first, origin="a+log")), "witness-origin"),
        ("witness-origin-long", "an origin of 129 characters (at most 128)", close(3, replace(first, origin="o" * 129)),
         "witness-origin"),
        ("witness-log-key-short", "a log key of 31 bytes (an Ed25519 key is 32)",
         close(3, replace(first, log_key=first.log_key[:31])), "witness-log-key-size"),
        ("witness-log-key-long", "a log key of 33 bytes", close(3, replace(first, log_key=first.log_key + b"\x00")),
         "witness-log-key-size"),
        ("witness-root-short", "a root hash of 31 bytes (SHA-256 is 32)",
         close(3, replace(first, root_hash=first.root_hash[:31])), "witness-root-size"),
        ("witness-signature-short", "a checkpoint signature of 63 bytes (Ed25519 is 64)",
         close(3, replace(first, signature=first.signature[:63])), "witness-signature-size"),
        ("witness-size-zero", "a checkpoint of size 0", close(3, replace(first, size=0)), "witness-sizes"),
        ("witness-old-over-size", "an old size (5) above the checkpoint's size (3)",
         close(3, replace(first, old_size=5)), "witness-sizes"),
        ("witness-size-over-max", "a checkpoint of size 2^63 (at most 2^63 - 1)", close(3, replace(first, size=2**63)),
         "witness-sizes"),
        ("witness-proof-65-hashes", "a consistency proof of 65 hashes (at most 64)",
         close(3, replace(longest, consistency_proof=(*longest.consistency_proof, bytes(32)))),
         "witness-proof-shape"),
        ("witness-proof-hash-short", "a consistency proof holding a 31-byte hash",
         close(5, replace(grown, consistency_proof=(grown.consistency_proof[0][:31], *grown.consistency_proof[1:]))),
         "witness-proof-shape"),
    ]  # fmt: skip


def cosignature() -> tuple[str, bytes]:
    """The test witness's real cosignature of `first_request()`'s checkpoint at a fixed time."""
    first = first_request()
    return TEST_WITNESS.name, TEST_WITNESS.cosign(Checkpoint(first.origin, first.size, first.root_hash), T0)


def _cosig(seq: int, witness: str, signature: bytes, **extra: Any) -> bytes:
    # Built from the stubs: `wire.encode_cosignature` refuses to write a malformed one.
    msg = pb.Downlink(seq=seq, cosignature=pb.Cosignature(witness=witness, signature=signature), **extra)
    return msg.SerializeToString(deterministic=True)


def downlinks() -> list[tuple[str, str, bytes, bool, str]]:
    """`wire/downlinks.json`'s witness vector: the round parser never takes a cosignature."""
    name, sig = cosignature()
    return [
        ("cosignature-as-verdict", "a well-formed cosignature where the answer to a round is due", _cosig(1, name, sig),
         False, "cosignature-not-a-verdict"),
    ]  # fmt: skip


def _cosignature_frames() -> list[tuple[str, str, bytes, str]]:
    name, sig = cosignature()
    inner = pb.Cosignature(witness=name, signature=sig).SerializeToString(deterministic=True)
    return [
        ("cosignature", "the witness's cosignature of the Close's checkpoint, seq = the Close's",
         wire.encode_cosignature(CLOSE_SEQ, name, sig), "valid"),
        ("cosignature-unverified", "76 well-formed bytes that are no valid signature: the device keeps them "
         "unverified (it holds no witness key); `audit verify --witness-key` refuses them",
         wire.encode_cosignature(CLOSE_SEQ, "some.witness/w1", bytes(76)), "valid"),
        ("not-protobuf", "bytes that are no protobuf message", b"\x2a\x09\x0a", "not-protobuf"),
        ("unknown-field", "a cosignature carrying field 3, which Cosignature does not declare",
         varint(1 << 3) + varint(CLOSE_SEQ) + field_bytes(5, inner + varint(3 << 3) + varint(1)), "unknown-field"),
        ("with-accepted", "a cosignature beside an accepted count", _cosig(CLOSE_SEQ, name, sig, accepted=1),
         "cosignature-not-alone"),
        ("with-candidate", "a cosignature beside a steering candidate",
         _cosig(CLOSE_SEQ, name, sig, candidates=[pb.Candidate(token_ids=[3], value=0.5)]), "cosignature-not-alone"),
        ("with-fusion", "a cosignature beside a dense fusion vector",
         _cosig(CLOSE_SEQ, name, sig, fusion=pb.FusionVector(values=bytes(4 * VOCAB))), "cosignature-not-alone"),
        ("witness-name-empty", "a cosignature with no witness name", _cosig(CLOSE_SEQ, "", sig),
         "cosignature-witness-name"),
        ("witness-name-space", "a witness name holding a space", _cosig(CLOSE_SEQ, "a witness", sig),
         "cosignature-witness-name"),
        ("witness-name-plus", "a witness name holding '+'", _cosig(CLOSE_SEQ, "a+witness", sig),
         "cosignature-witness-name"),
        ("signature-short", "a cosignature of 75 bytes (key ID 4 + time 8 + Ed25519 64 = 76)",
         _cosig(CLOSE_SEQ, name, sig[:75]), "cosignature-size"),
        ("signature-long", "a cosignature of 77 bytes", _cosig(CLOSE_SEQ, name, sig + b"\x00"), "cosignature-size"),
        ("wrong-seq", f"a cosignature of seq {CLOSE_SEQ + 1}, answering no Close", _cosig(CLOSE_SEQ + 1, name, sig),
         "cosignature-seq"),
        ("verdict-instead", "a round's verdict (accepted 0, no candidates) where the cosignature is due",
         wire.encode_downlink(CLOSE_SEQ, Verdict(0, None)), "answer-unmatched"),
    ]  # fmt: skip


def _before() -> list[tuple[str, bytes]]:
    """The session up to where the device awaits a cosignature: Open, round 1 answered, and a Close
    (`CLOSE_SEQ`) carrying a witness request."""
    return [
        ("up", wire.encode_open((1, 2, 3), SessionParams(top_k=4, draft_len=4))),
        ("up", wire.encode_round(1, (), (5, 6))),
        ("down", wire.encode_downlink(1, Verdict(2, SteeringVector(((3,),), (-0.5,))))),
        ("up", wire.encode_close(CLOSE_SEQ, first_request())),
    ]


def _awaiting(before: list[tuple[str, bytes]], vocab_size: int, max_top_k: int) -> SessionState:
    state = SessionState("conformance", vocab_size, max_top_k)
    for direction, raw in before:
        found, commit = state.examine_uplink(raw) if direction == "up" else state.examine_downlink(raw)
        if found:
            raise ConformanceError(f"{COSIGNATURE_FILE}: the session before the cosignature breaks the contract: "
                                   f"{'; '.join(v.message for v in found)}")  # fmt: skip
        commit()
    return state


def cosignature_outcome(state: SessionState, raw: bytes) -> tuple[dict[str, Any], list[str]]:
    """What the device's recorder decides on the downlink answering its Close, and the SDK's sentences."""
    found, _ = state.examine_downlink(raw)
    messages = [v.message for v in found]
    if found:
        return {"outcome": "refused", "categories": [category(m) for m in messages]}, messages
    frame = wire.decode_cosignature(raw)
    if frame is None:
        raise ConformanceError(f"{COSIGNATURE_FILE}: the contract admits a downlink that carries no cosignature")
    answer = {"seq": frame.seq, "witness": frame.witness, "signature_hex": frame.signature.hex()}
    return {"outcome": "valid", "cosignature": answer}, messages


def _text(raw: bytes) -> str | None:
    try:
        return text_form(pb.Downlink.FromString(raw))
    except DecodeError:
        return None


def build_cosignatures() -> dict[str, Any]:
    before = _before()
    vectors = []
    for name, description, raw, intent in _cosignature_frames():
        outcome, messages = cosignature_outcome(_awaiting(before, VOCAB, MAX_TOP_K), raw)
        got = outcome.get("categories", ["valid"])
        if got != [intent]:
            raise ConformanceError(f"vector {name!r} was written to be {intent}, but the SDK says {got} ({messages})")
        vectors.append(
            {"name": name, "description": description, "frame_hex": raw.hex(), "frame_text": _text(raw),
             "expected": outcome}
        )  # fmt: skip
    return {
        "kind": "cosignature-frames", "receiver": "the device, on the downlink answering its Close's witness request",
        "vocab_size": VOCAB, "max_top_k": MAX_TOP_K, "close_seq": CLOSE_SEQ,
        "before": [{"dir": d, "frame_hex": raw.hex()} for d, raw in before], "vectors": vectors,
    }  # fmt: skip


def check_cosignatures(doc: dict[str, Any]) -> list[str]:
    before = [(step["dir"], bytes.fromhex(step["frame_hex"])) for step in doc["before"]]
    problems = []
    for v in doc["vectors"]:
        state = _awaiting(before, doc["vocab_size"], doc["max_top_k"])
        got, messages = cosignature_outcome(state, bytes.fromhex(v["frame_hex"]))
        if got != v["expected"]:
            why = f" (the SDK says: {'; '.join(messages)})" if messages else ""
            problems.append(mismatch(COSIGNATURE_FILE, v["name"], "outcome", v["expected"], got) + why)
    return problems

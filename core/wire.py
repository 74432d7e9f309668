"""The one module that touches the generated protobuf stubs: paired `*_to_proto` / `*_from_proto`.

`*_from_proto` functions parse at the boundary: they check every bound and raise `ProtocolError`
with a specific message, so nothing malformed reaches a session.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from specsteer.core.errors import ConfigError, ProtocolError
from specsteer.core.proto import verifier_pb2 as pb
from specsteer.core.session_types import (
    ALPHA_SCALE,
    GAMMA_SCALE,
    MAX_CANDIDATE_TOKENS,
    MAX_LITERAL_TOKENS,
    CandidatePolicy,
    FusionVector,
    Method,
    SessionParams,
    SteeringVector,
    Verdict,
)

_METHOD_TO_PB = {
    Method.SPECSTEER: pb.METHOD_SPECSTEER,
    Method.SD: pb.METHOD_SD,
    Method.FUSION: pb.METHOD_FUSION,
    Method.LLM: pb.METHOD_LLM,
}
_METHOD_FROM_PB = {v: k for k, v in _METHOD_TO_PB.items()}
_POLICY_TO_PB = {
    CandidatePolicy.GUARDRAIL: pb.CANDIDATE_POLICY_GUARDRAIL,
    CandidatePolicy.LITERAL: pb.CANDIDATE_POLICY_LITERAL,
}
_POLICY_FROM_PB = {v: k for k, v in _POLICY_TO_PB.items()}

PAD_ID = 0xFFFFFFFF  # an unused slot of a PaddedRound (no vocabulary is that large)


def padded_slots(draft_len: int) -> tuple[int, int, int]:
    """A padded session's (commit, draft, literal) slot counts: every round fills exactly these."""
    return MAX_CANDIDATE_TOKENS, draft_len, MAX_LITERAL_TOKENS


def params_to_proto(params: SessionParams) -> pb.SessionParams:
    if params.method not in _METHOD_TO_PB:
        raise ConfigError(f"method {params.method.value} runs on the device only and opens no cloud session")
    infinite = math.isinf(params.gamma)
    return pb.SessionParams(
        method=_METHOD_TO_PB[params.method],
        sampling=params.sampling,
        gamma_ppm=0 if infinite else round(params.gamma * GAMMA_SCALE),
        gamma_infinite=infinite,
        alpha_milli=round(params.alpha * ALPHA_SCALE),
        top_k=params.top_k,
        draft_len=params.draft_len,
        policy=_POLICY_TO_PB[params.policy],
        bonus=params.bonus,
        adapter_version=params.adapter_version,
        padded_frames=params.padded_frames,
        # Both 0 with the gate off: a session on the paper's rule has the bytes it had before the gate.
        certainty_ppm=round(params.certainty * GAMMA_SCALE),
        gamma_uncertain_ppm=round(params.gamma_uncertain * GAMMA_SCALE) if params.certainty else 0,
        gamma_form_ppm=None if params.gamma_form is None else round(params.gamma_form * GAMMA_SCALE),
    )


def params_from_proto(msg: pb.SessionParams) -> SessionParams:
    if msg.method not in _METHOD_FROM_PB:
        raise ProtocolError(f"unknown method {msg.method}")
    if msg.policy not in _POLICY_FROM_PB:
        raise ProtocolError(f"unknown candidate policy {msg.policy}")
    if msg.gamma_infinite and msg.gamma_ppm:
        raise ProtocolError("gamma_infinite and a finite gamma_ppm are both set")
    try:
        return SessionParams(
            method=_METHOD_FROM_PB[msg.method],
            sampling=msg.sampling,
            gamma=math.inf if msg.gamma_infinite else msg.gamma_ppm / GAMMA_SCALE,
            alpha=msg.alpha_milli / ALPHA_SCALE,
            top_k=msg.top_k,
            draft_len=msg.draft_len,
            policy=_POLICY_FROM_PB[msg.policy],
            bonus=msg.bonus,
            adapter_version=msg.adapter_version,
            padded_frames=msg.padded_frames,
            certainty=msg.certainty_ppm / GAMMA_SCALE,
            # Unused with the gate off, where it is not sent: the default keeps SessionParams() round-tripping.
            gamma_uncertain=msg.gamma_uncertain_ppm / GAMMA_SCALE
            if msg.certainty_ppm
            else SessionParams.gamma_uncertain,
            gamma_form=msg.gamma_form_ppm / GAMMA_SCALE if msg.HasField("gamma_form_ppm") else None,
        )
    except ConfigError as exc:
        raise ProtocolError(f"session parameters out of range: {exc}") from exc


def open_to_proto(prompt_ids: Sequence[int], params: SessionParams, resume_ids: Sequence[int] = ()) -> pb.Uplink:
    return pb.Uplink(
        open=pb.Open(prompt_ids=list(prompt_ids), params=params_to_proto(params), resume_ids=list(resume_ids))
    )


def round_to_proto(
    seq: int, commit: Sequence[int], draft: Sequence[int], literal: Sequence[int] = (), *, pad_to: int | None = None
) -> pb.Uplink:
    """A Round; with `pad_to` (the session's K), a PaddedRound of constant size instead."""
    if pad_to is None:
        return pb.Uplink(
            round=pb.Round(seq=seq, commit_ids=list(commit), draft_ids=list(draft), literal_ids=list(literal))
        )
    names = ("commit", "draft", "placeholder")
    lists = []
    for ids, slots, what in zip((commit, draft, literal), padded_slots(pad_to), names, strict=True):
        if len(ids) > slots:
            raise ProtocolError(f"a padded round has {slots} {what} slots; got {len(ids)} tokens")
        lists.append([*ids, *[PAD_ID] * (slots - len(ids))])
    padded = pb.PaddedRound(seq=seq, commit_ids=lists[0], draft_ids=lists[1], literal_ids=lists[2])
    return pb.Uplink(padded_round=padded)


# -- the witness exchange: a Close's checkpoint, and the cosignature that answers it -------------

HASH_BYTES = 32  # SHA-256, the audit log's Merkle hash
ED25519_KEY_BYTES = 32
ED25519_SIG_BYTES = 64
COSIGNATURE_BYTES = 4 + 8 + ED25519_SIG_BYTES  # key ID || big-endian Unix time || Ed25519 (C2SP)
MAX_PROOF_HASHES = 64  # an RFC 9162 consistency proof of a tree below 2^63 leaves is shorter
MAX_NAME_CHARS = 128  # a log origin or witness name (signed-note key names)
MAX_TREE_SIZE = 2**63 - 1


@dataclass(frozen=True)
class WitnessRequest:
    """A Close's signed checkpoint of the device's audit log and its proof from the last cosigned size."""

    origin: str
    log_key: bytes
    size: int
    root_hash: bytes
    signature: bytes
    old_size: int = 0
    consistency_proof: tuple[bytes, ...] = ()


@dataclass(frozen=True)
class CosignatureFrame:
    """The downlink that answers a Close's witness request: the witness's cosignature, in parts."""

    seq: int
    witness: str
    signature: bytes


def _name_problem(name: str, what: str) -> str | None:
    # The signed-note key-name rule, bounded: it must round-trip into a note's signature line.
    if not name or len(name) > MAX_NAME_CHARS or "+" in name or not name.isascii() or not name.isprintable():
        return f"the {what} must be 1 to {MAX_NAME_CHARS} printable ASCII characters without '+'"
    if any(c.isspace() for c in name):
        return f"the {what} contains a space"
    return None


def witness_violation(msg: pb.WitnessRequest) -> str | None:
    """What is wrong with a Close's witness request's shape, if anything: every field bounded, every
    hash and key exactly its size, the proof only as long as a real one. Whether its values are the
    log's own is for the device's recorder and `audit verify` to check against the log."""
    problem = _name_problem(msg.origin, "checkpoint origin")
    if problem is not None:
        return problem
    if len(msg.log_key) != ED25519_KEY_BYTES:
        return f"the log key is {len(msg.log_key)} bytes, not an Ed25519 key's {ED25519_KEY_BYTES}"
    if len(msg.root_hash) != HASH_BYTES:
        return f"the checkpoint root hash is {len(msg.root_hash)} bytes, not {HASH_BYTES}"
    if len(msg.signature) != ED25519_SIG_BYTES:
        return f"the checkpoint signature is {len(msg.signature)} bytes, not {ED25519_SIG_BYTES}"
    if not 1 <= msg.size <= MAX_TREE_SIZE or msg.old_size > msg.size:
        return f"checkpoint sizes out of order or range (old {msg.old_size}, new {msg.size})"
    if len(msg.consistency_proof) > MAX_PROOF_HASHES or any(len(h) != HASH_BYTES for h in msg.consistency_proof):
        return f"the consistency proof is at most {MAX_PROOF_HASHES} hashes of {HASH_BYTES} bytes"
    return None


def witness_from_proto(msg: pb.WitnessRequest) -> WitnessRequest:
    problem = witness_violation(msg)
    if problem is not None:
        raise ProtocolError(f"the Close's witness request is malformed: {problem}")
    return WitnessRequest(
        msg.origin, bytes(msg.log_key), msg.size, bytes(msg.root_hash), bytes(msg.signature), msg.old_size,
        tuple(bytes(h) for h in msg.consistency_proof),
    )  # fmt: skip


def witness_to_proto(request: WitnessRequest) -> pb.WitnessRequest:
    return pb.WitnessRequest(
        origin=request.origin, log_key=request.log_key, size=request.size, root_hash=request.root_hash,
        signature=request.signature, old_size=request.old_size, consistency_proof=list(request.consistency_proof),
    )  # fmt: skip


def cosignature_violation(msg: pb.Downlink) -> str | None:
    """What is wrong with a downlink's cosignature, if it carries one: it comes alone (no
    candidates, fusion vector or accepted tokens), a well-formed witness name and 76 bytes."""
    if not msg.HasField("cosignature"):
        return None
    if msg.candidates or msg.HasField("fusion") or msg.accepted:
        return "a cosignature downlink carries steering or accepted tokens"
    problem = _name_problem(msg.cosignature.witness, "witness name")
    if problem is not None:
        return problem
    if len(msg.cosignature.signature) != COSIGNATURE_BYTES:
        return f"the cosignature is {len(msg.cosignature.signature)} bytes, not {COSIGNATURE_BYTES}"
    return None


def close_to_proto(seq: int, witness: WitnessRequest | None = None) -> pb.Uplink:
    if witness is None:
        return pb.Uplink(close=pb.Close(seq=seq))
    return pb.Uplink(close=pb.Close(seq=seq, witness=witness_to_proto(witness)))


def verdict_to_proto(seq: int, verdict: Verdict) -> pb.Downlink:
    msg = pb.Downlink(seq=seq, accepted=verdict.accepted)
    if isinstance(verdict.steering, FusionVector):
        msg.fusion.values = verdict.steering.values
    elif verdict.steering is not None:
        for tokens, value in zip(verdict.steering.candidates, verdict.steering.values, strict=True):
            msg.candidates.add(token_ids=list(tokens), value=value)
    return msg


def vocabulary_violation(ids: Iterable[int], vocab_size: int | None, what: str) -> str | None:
    """What is wrong with `ids` for a vocabulary of `vocab_size` (None: no vocabulary to check), if
    anything: the first token ID outside it. The one vocabulary check of the parsers here and the
    session contract (`core.contract`)."""
    if vocab_size is None:
        return None
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    return None if bad is None else f"{what} token ID {bad} is outside the vocabulary of {vocab_size}"


def fusion_downlink_bytes(vocab_size: int) -> int:
    """An upper bound on one fusion downlink's serialized size (4 bytes per vocabulary entry plus
    the envelope), for transports whose message caps must let it through."""
    return 4 * vocab_size + 64


def fusion_violation(msg: pb.Downlink, *, fusion: bool, vocab_size: int) -> str | None:
    """What is wrong with a downlink's dense fusion vector, if anything: it may appear only in a
    fusion session, never beside candidates, with exactly one finite float32 per vocabulary entry.
    Shared by the device's parser and the session contract (`core.contract`)."""
    if not msg.HasField("fusion"):
        return None
    if not fusion:
        return "a dense fusion vector in a session that did not declare method fusion"
    if msg.candidates:
        return "a dense fusion vector and top-k candidates in one downlink"
    values = msg.fusion.values
    if len(values) != 4 * vocab_size:
        return f"a fusion vector of {len(values)} bytes; the vocabulary of {vocab_size} needs {4 * vocab_size}"
    if not np.isfinite(np.frombuffer(values, dtype="<f4")).all():
        return "a fusion vector with a non-finite value"
    return None


def verdict_from_proto(msg: pb.Downlink, *, max_top_k: int, vocab_size: int, fusion: bool = False) -> Verdict:
    """Parse a downlink on the device: bounded top-k, finite values, token IDs in the vocabulary;
    in a fusion session (`fusion`), a dense fusion vector of exactly the vocabulary's size instead."""
    problem = fusion_violation(msg, fusion=fusion, vocab_size=vocab_size)
    if problem is not None:
        raise ProtocolError(f"downlink refused: {problem}")
    if msg.HasField("cosignature"):
        raise ProtocolError("downlink refused: a cosignature answers only a Close, never a round")
    if msg.HasField("fusion"):
        return Verdict(accepted=msg.accepted, steering=FusionVector(bytes(msg.fusion.values)))
    if len(msg.candidates) > max_top_k:
        raise ProtocolError(f"downlink carries {len(msg.candidates)} candidates, more than k = {max_top_k}")
    candidates: list[tuple[int, ...]] = []
    values: list[float] = []
    for i, cand in enumerate(msg.candidates):
        if not 1 <= len(cand.token_ids) <= MAX_CANDIDATE_TOKENS:
            raise ProtocolError(f"downlink candidate {i} has {len(cand.token_ids)} tokens")
        problem = vocabulary_violation(cand.token_ids, vocab_size, f"downlink candidate {i}")
        if problem is not None:
            raise ProtocolError(problem)
        if not math.isfinite(cand.value):
            raise ProtocolError(f"downlink candidate {i} has a non-finite value")
        candidates.append(tuple(cand.token_ids))
        values.append(cand.value)
    steering = SteeringVector(tuple(candidates), tuple(values)) if candidates else None
    return Verdict(accepted=msg.accepted, steering=steering)


# -- Frames: the exact bytes on a network stream ------------------------------------------------
#
# A network transport encodes and decodes whole frames here, so no other module touches the stubs.
# Uplinks are decoded strictly: they must parse, carry no unknown field at any depth (Python
# protobuf would otherwise keep and forward them), and be byte-for-byte the deterministic
# serialization of what they parse to, so there is exactly one way to say anything on the uplink.

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Verifier"].full_name
SESSION_METHOD = f"/{SERVICE_NAME}/Session"


@dataclass(frozen=True)
class OpenFrame:
    prompt_ids: tuple[int, ...]
    params: SessionParams
    resume_ids: tuple[int, ...] = ()  # a resumed generation's committed tokens, as its last verifier saw them


@dataclass(frozen=True)
class RoundFrame:
    seq: int
    commit: tuple[int, ...]
    draft: tuple[int, ...]
    literal: tuple[int, ...] = ()  # a guard placeholder, appended after the commit unverified
    slots: tuple[int, int, int] | None = None  # a PaddedRound's (commit, draft, literal) slot counts


@dataclass(frozen=True)
class CloseFrame:
    seq: int
    witness: WitnessRequest | None = None


UplinkFrame = OpenFrame | RoundFrame | CloseFrame


def encode_open(prompt_ids: Sequence[int], params: SessionParams, resume_ids: Sequence[int] = ()) -> bytes:
    return open_to_proto(prompt_ids, params, resume_ids).SerializeToString(deterministic=True)


def encode_round(
    seq: int, commit: Sequence[int], draft: Sequence[int], literal: Sequence[int] = (), *, pad_to: int | None = None
) -> bytes:
    return round_to_proto(seq, commit, draft, literal, pad_to=pad_to).SerializeToString(deterministic=True)


def encode_close(seq: int, witness: WitnessRequest | None = None) -> bytes:
    return close_to_proto(seq, witness).SerializeToString(deterministic=True)


def encode_downlink(seq: int, verdict: Verdict) -> bytes:
    return verdict_to_proto(seq, verdict).SerializeToString(deterministic=True)


def encode_cosignature(seq: int, witness: str, signature: bytes) -> bytes:
    """The downlink answering Close `seq`'s witness request with the witness's cosignature."""
    msg = pb.Downlink(seq=seq, cosignature=pb.Cosignature(witness=witness, signature=signature))
    problem = cosignature_violation(msg)
    if problem is not None:
        raise ProtocolError(f"cosignature refused: {problem}")
    return msg.SerializeToString(deterministic=True)


def decode_cosignature(raw: bytes) -> CosignatureFrame | None:
    """The cosignature a downlink carries, checked for shape (None if it carries none)."""
    try:
        msg = pb.Downlink.FromString(raw)
    except DecodeError:
        return None
    if not msg.HasField("cosignature") or cosignature_violation(msg) is not None:
        return None
    return CosignatureFrame(msg.seq, msg.cosignature.witness, bytes(msg.cosignature.signature))


def carries_cosignature(raw: bytes) -> bool:
    """Whether a serialized downlink answers a Close (has a cosignature field), whatever its shape."""
    try:
        return pb.Downlink.FromString(raw).HasField("cosignature")
    except DecodeError:
        return False


def witness_of(raw: bytes) -> WitnessRequest | None:
    """The witness request a serialized Close uplink carries (None for any other uplink, or none)."""
    try:
        msg = pb.Uplink.FromString(raw)
    except DecodeError:
        return None
    if msg.WhichOneof("kind") != "close" or not msg.close.HasField("witness"):
        return None
    try:
        return witness_from_proto(msg.close.witness)
    except ProtocolError:
        return None


def unknown_fields(msg: Message, path: str = "") -> list[str]:
    """Every unknown field of `msg` at any depth, as 'Uplink.round field 9'."""
    here = path or msg.DESCRIPTOR.name
    # UnknownFieldSet iterates by __getitem__ and __len__, which the protobuf stubs do not call iteration.
    found = [f"{here} field {f.field_number}" for f in UnknownFieldSet(msg)]  # type: ignore[attr-defined]
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        for child in value if fd.is_repeated else [value]:
            found.extend(unknown_fields(child, f"{here}.{fd.name}"))
    return found


def _check_ids(ids: Sequence[int], vocab_size: int | None, what: str) -> None:
    problem = vocabulary_violation(ids, vocab_size, what)
    if problem is not None:
        raise ProtocolError(problem)


def decode_uplink(raw: bytes, *, vocab_size: int | None = None) -> UplinkFrame:
    """Parse one uplink frame strictly; raise `ProtocolError` naming what is wrong.

    With `vocab_size`, token IDs are bounds-checked before the canonical-encoding check, so a
    negative ID smuggled in as a ten-byte varint (it parses as 2^32 - 1) is named for what it is.
    """
    try:
        msg = pb.Uplink.FromString(raw)
    except DecodeError as exc:
        raise ProtocolError(f"the frame does not parse as {pb.Uplink.DESCRIPTOR.full_name}: {exc}") from None
    unknown = unknown_fields(msg)
    if unknown:
        raise ProtocolError(f"the frame carries unknown fields ({', '.join(unknown[:3])}); refused")
    kind = msg.WhichOneof("kind")
    if kind == "open":
        _check_ids(msg.open.prompt_ids, vocab_size, "prompt")
        _check_ids(msg.open.resume_ids, vocab_size, "resumed text")
    elif kind == "round":
        _check_ids(msg.round.commit_ids, vocab_size, "commit")
        _check_ids(msg.round.draft_ids, vocab_size, "draft")
        _check_ids(msg.round.literal_ids, vocab_size, "placeholder")
    elif kind == "padded_round":
        padded_frame(msg.padded_round, vocab_size)  # pads and token IDs checked before the encoding
    elif kind == "close" and msg.close.HasField("witness"):
        witness_from_proto(msg.close.witness)  # shape checked before the encoding, like token IDs
    if msg.SerializeToString(deterministic=True) != raw:
        raise ProtocolError("the frame is not the canonical (deterministic) serialization of its content")
    if kind == "open":
        return OpenFrame(tuple(msg.open.prompt_ids), params_from_proto(msg.open.params), tuple(msg.open.resume_ids))
    if kind == "round":
        return round_frame(msg.round)
    if kind == "padded_round":
        return padded_frame(msg.padded_round, vocab_size)
    if kind == "close":
        witness = witness_from_proto(msg.close.witness) if msg.close.HasField("witness") else None
        return CloseFrame(msg.close.seq, witness)
    raise ProtocolError("the frame carries no Open, Round, PaddedRound or Close")


def round_frame(msg: pb.Round) -> RoundFrame:
    return RoundFrame(msg.seq, tuple(msg.commit_ids), tuple(msg.draft_ids), tuple(msg.literal_ids))


def padded_frame(msg: pb.PaddedRound, vocab_size: int | None = None) -> RoundFrame:
    """A PaddedRound as the Round it stands for; padding must be trailing PAD_IDs only (any other
    value in a pad slot would be a covert channel)."""
    lists = []
    for ids, what in ((msg.commit_ids, "commit"), (msg.draft_ids, "draft"), (msg.literal_ids, "placeholder")):
        used = list(ids)
        while used and used[-1] == PAD_ID:
            used.pop()
        if PAD_ID in used:
            raise ProtocolError(f"the padded round's {what} slots hold a token after padding")
        _check_ids(used, vocab_size, what)
        lists.append(tuple(used))
    slots = (len(msg.commit_ids), len(msg.draft_ids), len(msg.literal_ids))
    return RoundFrame(msg.seq, lists[0], lists[1], lists[2], slots=slots)


def decode_downlink(raw: bytes, *, max_top_k: int, vocab_size: int, fusion: bool = False) -> tuple[int, Verdict]:
    """Parse one downlink frame on the device: (echoed seq, bounded verdict); `fusion`: the session
    declared method fusion, so a dense fusion vector is allowed."""
    try:
        msg = pb.Downlink.FromString(raw)
    except DecodeError as exc:
        raise ProtocolError(f"the downlink does not parse as {pb.Downlink.DESCRIPTOR.full_name}: {exc}") from None
    unknown = unknown_fields(msg)
    if unknown:
        raise ProtocolError(f"the downlink carries unknown fields ({', '.join(unknown[:3])})")
    verdict = verdict_from_proto(msg, max_top_k=max_top_k, vocab_size=vocab_size, fusion=fusion)
    # As the session contract (`core.contract`) judges it with an audit log: one encoding per content.
    if msg.SerializeToString(deterministic=True) != raw:
        raise ProtocolError("the downlink is not the canonical (deterministic) serialization of its content")
    return msg.seq, verdict

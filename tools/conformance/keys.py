"""The test-only keys every signed vector uses, and signed checkpoints of made-up logs.

Every seed is the SHA-256 of a public string: these keys sign test vectors only and protect
nothing; anyone can recompute them (README.md says so beside the key files).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from specsteer.audit import merkle
from specsteer.audit.cosignature import WitnessSigner
from specsteer.audit.note import Checkpoint, SigningKey, parse_note, sign_checkpoint
from specsteer.core import wire


def _seed(what: str) -> bytes:
    return hashlib.sha256(f"specsteer conformance v1: test-only {what} key".encode()).digest()


KEY_NAME = "conformance.invalid/TEST-ONLY-device"
TEST_KEY = SigningKey(KEY_NAME, _seed("device"))
OTHER_KEY = SigningKey(KEY_NAME, _seed("other"))  # the same name over another key: a forger's
WITNESS_NAME = "conformance.invalid/TEST-ONLY-witness"
TEST_WITNESS = WitnessSigner(WITNESS_NAME, _seed("witness"))
OTHER_WITNESS = WitnessSigner(WITNESS_NAME, _seed("other witness"))

DEVICE_KEYS = {"keys/test-device": TEST_KEY, "keys/other-device": OTHER_KEY}
WITNESS_KEYS = {"keys/test-witness": TEST_WITNESS, "keys/other-witness": OTHER_WITNESS}


def write_keys(folder: Path) -> None:
    """Every key pair as `STEM.key` (the signer key) and `STEM.pub` (what an auditor is given)."""
    pairs = [(stem, str(k), str(k.verifier)) for stem, k in DEVICE_KEYS.items()]
    pairs += [(stem, str(w), str(w.key)) for stem, w in WITNESS_KEYS.items()]
    for stem, private, public in pairs:
        (folder / stem).parent.mkdir(parents=True, exist_ok=True)
        (folder / f"{stem}.key").write_text(f"{private}\n", encoding="ascii")
        (folder / f"{stem}.pub").write_text(f"{public}\n", encoding="ascii")


def history(label: str, n: int) -> list[bytes]:
    """`n` leaf hashes of a made-up log (the witness judges roots and proofs, never the records)."""
    return [merkle.leaf_hash(f"{label} record {i}".encode()) for i in range(n)]


def signed_request(key: SigningKey, leaves: Sequence[bytes], size: int, old_size: int = 0) -> wire.WitnessRequest:
    """What a device holding `key` puts in its Close: its checkpoint of the first `size` leaves,
    signed, and the RFC 9162 proof from `old_size` (the last size cosigned for it, 0 if none)."""
    root = merkle.root(leaves[:size])
    (sig,) = parse_note(sign_checkpoint(Checkpoint(key.name, size, root), key)).signatures
    proof = tuple(merkle.consistency_proof(old_size, list(leaves[:size]))) if 0 < old_size < size else ()
    return wire.WitnessRequest(key.name, key.verifier.public_key, size, root, sig.signature, old_size, proof)

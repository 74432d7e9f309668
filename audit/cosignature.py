"""C2SP tlog-cosignature/v1 with Ed25519: a witness's timestamped signature of a log's checkpoint.

A cosignature is one more signature line on a checkpoint note, `— <witness name> <base64(sig)>`:

    sig        = key ID (4 bytes) || timestamp (8 bytes, big-endian Unix seconds) || Ed25519 (64 bytes)
    key ID     = SHA-256(name || 0x0A || 0x04 || public key)[:4]       (0x04: cosignature/v1)
    signed     = "cosignature/v1\\n" || "time <timestamp>\\n" || the checkpoint body

Keys use the signed-note encodings with algorithm byte 0x04 instead of 0x01:

    verifier key  <name>+<key ID, 8 hex>+<base64(0x04 || 32-byte public key)>
    signer key    PRIVATE+KEY+<name>+<key ID, 8 hex>+<base64(0x04 || 32-byte seed)>

The distinct algorithm byte keeps a witness key from ever verifying a log's own signature line (and
the reverse), since the key IDs differ even for one name and public key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import struct
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from specsteer.audit.errors import KeyFileError, NoteError
from specsteer.audit.files import read_key_file
from specsteer.audit.note import SIG_PREFIX, Checkpoint, parse_note

ALG_COSIGNATURE_V1 = 0x04
HEADER = "cosignature/v1\n"
SIGNATURE_BYTES = 4 + 8 + 64
MAX_TIMESTAMP = 2**63 - 1
_TIME = struct.Struct(">Q")
# How far a witness's clock may disagree with the device's: a cosignature dated outside the window
# of the exchange it answered, widened by this much on each side, vouches for nothing (section 8).
COSIGNATURE_SKEW_S = 600


def _valid_name(name: str) -> bool:
    return bool(name) and "+" not in name and not any(c.isspace() for c in name) and name.isprintable()


def cosigner_key_id(name: str, public_key: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([ALG_COSIGNATURE_V1]) + public_key).digest()[:4]


def signed_message(body: str, timestamp: int) -> bytes:
    """What a cosignature/v1 signs: the header line, the time line, then the checkpoint body."""
    return f"{HEADER}time {timestamp}\n{body}".encode()


def _material(b64: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise KeyFileError(f"the {what} is not valid base64") from None
    if len(raw) != 33 or raw[0] != ALG_COSIGNATURE_V1:
        raise KeyFileError(f"the {what} is not a cosignature/v1 Ed25519 key (algorithm byte 0x04 and 32 bytes)")
    return raw[1:]


@dataclass(frozen=True)
class Cosignature:
    """One verified cosignature: who, when, and of which checkpoint."""

    witness: str
    timestamp: int
    checkpoint: Checkpoint


@dataclass(frozen=True)
class WitnessKey:
    """A witness's public key and name; `str()` gives the vkey an auditor passes as `--witness-key`."""

    name: str
    public_key: bytes

    def __post_init__(self) -> None:
        if not _valid_name(self.name):
            raise KeyFileError(f"witness name {self.name!r} is empty or contains a space or '+'")
        if len(self.public_key) != 32:
            raise KeyFileError("an Ed25519 public key is 32 bytes")

    @property
    def id(self) -> bytes:
        return cosigner_key_id(self.name, self.public_key)

    def __str__(self) -> str:
        b64 = base64.b64encode(bytes([ALG_COSIGNATURE_V1]) + self.public_key).decode()
        return f"{self.name}+{self.id.hex()}+{b64}"

    @classmethod
    def parse(cls, text: str) -> WitnessKey:
        parts = text.strip().split("+")
        if len(parts) < 3:
            raise KeyFileError("a witness key reads <name>+<hex key ID>+<base64 key>")
        name, hex_id, b64 = parts[0], parts[1], "+".join(parts[2:])
        key = cls(name, _material(b64, "witness key"))
        if hex_id.lower() != key.id.hex() or len(hex_id) != 8:
            raise KeyFileError(f"witness key {name}: the key ID {hex_id} does not match the key")
        return key

    def verify(self, body: str, signature: bytes) -> int:
        """The timestamp of `signature` (the raw 76 bytes) over checkpoint `body`; NoteError if bogus."""
        if len(signature) != SIGNATURE_BYTES or signature[:4] != self.id:
            raise NoteError(f"the cosignature is not by witness key {self.name}+{self.id.hex()}")
        (timestamp,) = _TIME.unpack(signature[4:12])
        if timestamp > MAX_TIMESTAMP:
            raise NoteError(f"the cosignature by {self.name} has a timestamp above 2^63 - 1")
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature[12:], signed_message(body, timestamp))
        except InvalidSignature:
            raise NoteError(f"the cosignature by {self.name}+{self.id.hex()} does not verify") from None
        return timestamp


class WitnessSigner:
    """A witness's private key; `str()` gives the signer key (keep it secret)."""

    def __init__(self, name: str, seed: bytes) -> None:
        if len(seed) != 32:
            raise KeyFileError("an Ed25519 seed is 32 bytes")
        self._private = Ed25519PrivateKey.from_private_bytes(seed)
        self._seed = seed
        self.key = WitnessKey(name, self._private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))

    @property
    def name(self) -> str:
        return self.key.name

    @classmethod
    def generate(cls, name: str) -> WitnessSigner:
        return cls(name, os.urandom(32))

    @classmethod
    def parse(cls, text: str) -> WitnessSigner:
        parts = text.strip().split("+")
        if len(parts) < 5 or parts[0] != "PRIVATE" or parts[1] != "KEY":
            raise KeyFileError("a witness signer key reads PRIVATE+KEY+<name>+<hex key ID>+<base64 seed>")
        name, hex_id, b64 = parts[2], parts[3], "+".join(parts[4:])
        signer = cls(name, _material(b64, "witness signer key"))
        if hex_id.lower() != signer.key.id.hex() or len(hex_id) != 8:
            raise KeyFileError(f"witness signer key {name}: the key ID {hex_id} does not match the key")
        return signer

    def __str__(self) -> str:
        b64 = base64.b64encode(bytes([ALG_COSIGNATURE_V1]) + self._seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.key.id.hex()}+{b64}"

    def __repr__(self) -> str:  # never print the seed by accident
        return f"WitnessSigner({self.key})"

    def cosign(self, checkpoint: Checkpoint, timestamp: int) -> bytes:
        """The 76-byte cosignature/v1 of `checkpoint` at `timestamp` (Unix seconds)."""
        if not 0 <= timestamp <= MAX_TIMESTAMP:
            raise NoteError("a cosignature timestamp is a non-negative Unix time below 2^63")
        sig = self._private.sign(signed_message(checkpoint.body(), timestamp))
        return self.key.id + _TIME.pack(timestamp) + sig


def _when(timestamp: float) -> str:
    try:
        return f"{int(timestamp)} ({datetime.fromtimestamp(timestamp, UTC):%Y-%m-%d %H:%M:%S} UTC)"
    except (OverflowError, OSError, ValueError):
        return f"{int(timestamp)} (beyond the year 9999)"


def time_problem(timestamp: int, asked: float, answered: float) -> str | None:
    """Why a cosignature dated `timestamp` cannot be the witness's word on a checkpoint it was shown
    between `asked` and `answered` (Unix seconds, the device's clock); None if it can.

    The cosignature must be dated within [asked - COSIGNATURE_SKEW_S, answered + COSIGNATURE_SKEW_S],
    and never 0: "time 0" or a date centuries ahead verifies as a signature, but it says the witness
    saw the checkpoint when it could not have, so it vouches for nothing.
    """
    skew = COSIGNATURE_SKEW_S
    if timestamp <= 0:
        return "it is dated 0 (1970-01-01), not when the witness saw the checkpoint"
    if timestamp < asked - skew:
        return (
            f"it is dated {_when(timestamp)}, before the checkpoint existed ({_when(asked)}) by more than "
            f"the {skew // 60} minutes' clock skew allowed"
        )
    if timestamp > answered + skew:
        return (
            f"it is dated {_when(timestamp)}, after it was received ({_when(answered)}) by more than "
            f"the {skew // 60} minutes' clock skew allowed"
        )
    return None


def signature_line(witness: str, signature: bytes) -> str:
    return f"{SIG_PREFIX}{witness} {base64.b64encode(signature).decode()}\n"


def add_cosignature(note: str, witness: str, signature: bytes) -> str:
    """`note` (a signed checkpoint) with one more signature line: the witness's."""
    parse_note(note)  # refuse to extend anything that is not a signed note
    return note + signature_line(witness, signature)


def cosignatures(note: str, key: WitnessKey) -> list[Cosignature]:
    """Every cosignature line of `note` by `key` (name and key ID), verified; NoteError if one is bogus.

    Lines of other signers are ignored, as C2SP specifies; a line that claims `key` and does not
    verify rejects the note (a forged cosignature is never just skipped).
    """
    parsed = parse_note(note)
    checkpoint = Checkpoint.parse_body(parsed.text)
    out = []
    for sig in parsed.signatures:
        if sig.name != key.name or sig.key_id != key.id:
            continue
        timestamp = key.verify(parsed.text, sig.key_id + sig.signature)
        out.append(Cosignature(key.name, timestamp, checkpoint))
    return out


def load_witness_key(path: Path) -> WitnessKey:
    text = read_key_file(path, "witness key", private=False)
    if text.startswith("PRIVATE+KEY+"):
        raise KeyFileError(f"{path} is a witness's private key; give its public key (.pub)")
    return WitnessKey.parse(text)


def load_witness_signer(path: Path) -> WitnessSigner:
    """The witness's signing key from `path`: a regular file only its owner can read or write (0600)."""
    return WitnessSigner.parse(read_key_file(path, "witness signing key", private=True))


def write_witness_key_pair(name: str, out: Path) -> tuple[Path, Path]:
    """A new witness key pair in `out`: `NAME.witness.key` (0600 from the first byte) and
    `NAME.witness.pub` (what auditors pass as `--witness-key`); '/' in the name becomes '_'.
    An existing key file is never overwritten."""
    signer = WitnessSigner.generate(name)
    out.mkdir(parents=True, exist_ok=True)
    stem = name.replace("/", "_")
    private, public = out / f"{stem}.witness.key", out / f"{stem}.witness.pub"
    for path in (private, public):
        if path.exists():
            raise KeyFileError(f"{path} already exists; a witness key is never overwritten")
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(f"{signer}\n")
    public.write_text(f"{signer.key}\n", encoding="utf-8")
    return private, public

"""C2SP signed notes with Ed25519 keys, and C2SP tlog-checkpoint bodies.

Key encodings are the signed-note ones, so other tools (Go's sumdb/note, witnesses) read them:

    verifier key  <name>+<hex key ID>+<base64(0x01 || 32-byte public key)>
    signer key    PRIVATE+KEY+<name>+<hex key ID>+<base64(0x01 || 32-byte seed)>

key ID = the first 4 bytes of SHA-256(name || 0x0A || 0x01 || public key), big-endian.

A signed note is its text (non-empty lines, each ending in a newline), a blank line, and one
signature line per signer: `— <name> <base64(key ID || signature)>`; the signature covers the text
including its final newline. A checkpoint's text is three lines: origin, tree size in decimal and
the base64 root hash. Our origin is the log key's name, as the tlog-checkpoint spec recommends, so
a log's identity is its key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from specsteer.audit.errors import KeyFileError, NoteError
from specsteer.audit.files import read_key_file

ALG_ED25519 = 0x01
SIG_PREFIX = "— "  # U+2014 EM DASH and a space open every signature line
MAX_NOTE_BYTES = 64 * 1024  # checkpoints are ~200 bytes; anything huge is not ours
MAX_SIGNATURES = 100  # the reference implementation's cap


def _valid_name(name: str) -> bool:
    # The signed-note rule: non-empty, no Unicode spaces, no '+'.
    return bool(name) and "+" not in name and not any(c.isspace() for c in name) and name.isprintable()


def key_id(name: str, public_key: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([ALG_ED25519]) + public_key).digest()[:4]


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise NoteError(f"{what} is not valid base64") from None


@dataclass(frozen=True)
class VerifierKey:
    """A log's public key and its name; `str()` gives the signed-note verifier key."""

    name: str
    public_key: bytes

    def __post_init__(self) -> None:
        if not _valid_name(self.name):
            raise KeyFileError(f"key name {self.name!r} is empty or contains a space or '+'")
        if len(self.public_key) != 32:
            raise KeyFileError("an Ed25519 public key is 32 bytes")

    @property
    def id(self) -> bytes:
        return key_id(self.name, self.public_key)

    def __str__(self) -> str:
        b64 = base64.b64encode(bytes([ALG_ED25519]) + self.public_key).decode()
        return f"{self.name}+{self.id.hex()}+{b64}"

    @classmethod
    def parse(cls, text: str) -> VerifierKey:
        parts = text.strip().split("+")
        # The base64 may itself contain '+', so the name and ID are the first two fields only.
        if len(parts) < 3:
            raise KeyFileError("a verifier key reads <name>+<hex key ID>+<base64 key>")
        name, hex_id, b64 = parts[0], parts[1], "+".join(parts[2:])
        raw = _key_material(b64, "verifier key")
        key = cls(name, raw)
        if hex_id.lower() != key.id.hex() or len(hex_id) != 8:
            raise KeyFileError(f"verifier key {name}: the key ID {hex_id} does not match the key")
        return key

    def verify(self, message: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, message)
        except InvalidSignature:
            return False
        return True


def _key_material(b64: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise KeyFileError(f"the {what} is not valid base64") from None
    if len(raw) != 33 or raw[0] != ALG_ED25519:
        raise KeyFileError(f"the {what} is not an Ed25519 key (algorithm byte 0x01 and 32 bytes)")
    return raw[1:]


class SigningKey:
    """A log's Ed25519 private key; `str()` gives the signed-note signer key (keep it secret)."""

    def __init__(self, name: str, seed: bytes) -> None:
        if len(seed) != 32:
            raise KeyFileError("an Ed25519 seed is 32 bytes")
        self._private = Ed25519PrivateKey.from_private_bytes(seed)
        self._seed = seed
        public = self._private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.verifier = VerifierKey(name, public)

    @property
    def name(self) -> str:
        return self.verifier.name

    @classmethod
    def generate(cls, name: str) -> SigningKey:
        return cls(name, os.urandom(32))

    @classmethod
    def parse(cls, text: str) -> SigningKey:
        parts = text.strip().split("+")
        if len(parts) < 5 or parts[0] != "PRIVATE" or parts[1] != "KEY":
            raise KeyFileError("a signer key reads PRIVATE+KEY+<name>+<hex key ID>+<base64 seed>")
        name, hex_id, b64 = parts[2], parts[3], "+".join(parts[4:])
        key = cls(name, _key_material(b64, "signer key"))
        if hex_id.lower() != key.verifier.id.hex() or len(hex_id) != 8:
            raise KeyFileError(f"signer key {name}: the key ID {hex_id} does not match the key")
        return key

    def __str__(self) -> str:
        b64 = base64.b64encode(bytes([ALG_ED25519]) + self._seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.verifier.id.hex()}+{b64}"

    def __repr__(self) -> str:  # never print the seed by accident
        return f"SigningKey({self.verifier})"

    def sign(self, message: bytes) -> bytes:
        """A raw Ed25519 signature of `message` (a key-rotation handover, audit.rotation)."""
        return self._private.sign(message)

    def sign_note(self, text: str) -> str:
        _check_text(text)
        sig = self._private.sign(text.encode())
        line = base64.b64encode(self.verifier.id + sig).decode()
        return f"{text}\n{SIG_PREFIX}{self.name} {line}\n"


def load_signing_key(path: Path) -> SigningKey:
    """The log's signing key from `path`: a regular file only its owner can read or write (0600)."""
    return SigningKey.parse(read_key_file(path, "signing key", private=True))


def load_verifier_key(path: Path) -> VerifierKey:
    text = read_key_file(path, "verifier key", private=False)
    if text.startswith("PRIVATE+KEY+"):
        # An auditor should never hold the device's private key; refuse rather than derive.
        raise KeyFileError(f"{path} is a private signing key; give the public verifier key (.pub)")
    return VerifierKey.parse(text)


def write_key_pair(name: str, out: Path) -> tuple[Path, Path]:
    """A new log key pair in `out`: `NAME.key` (the signer key, 0600 from the first byte) and
    `NAME.pub` (the verifier key an auditor holds); '/' in the name becomes '_' in the file names.
    Returns (private, public). An existing key file is never overwritten."""
    key = SigningKey.generate(name)
    out.mkdir(parents=True, exist_ok=True)
    stem = name.replace("/", "_")
    private, public = out / f"{stem}.key", out / f"{stem}.pub"
    for path in (private, public):
        if path.exists():
            raise KeyFileError(f"{path} already exists; a log key is never overwritten")
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # private from the first byte
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(f"{key}\n")
    public.write_text(f"{key.verifier}\n", encoding="utf-8")
    return private, public


def _check_text(text: str) -> None:
    if not text.endswith("\n") or "\n\n" in text or text.startswith("\n"):
        raise NoteError("a note text is non-empty lines, each ending in a newline")
    if any(ord(c) < 0x20 and c != "\n" for c in text):
        raise NoteError("a note text has no control characters")


@dataclass(frozen=True)
class NoteSignature:
    name: str
    key_id: bytes
    signature: bytes


@dataclass(frozen=True)
class Note:
    text: str
    signatures: tuple[NoteSignature, ...]


def parse_note(note: str) -> Note:
    """Split a signed note into text and signature lines; signatures are not checked here."""
    if len(note.encode()) > MAX_NOTE_BYTES:
        raise NoteError(f"the note is larger than {MAX_NOTE_BYTES} bytes")
    if any((ord(c) < 0x20 and c != "\n") for c in note):
        raise NoteError("the note contains control characters")
    split = note.rfind("\n\n")
    if split < 0 or not note.endswith("\n"):
        raise NoteError("the note has no signature block after a blank line")
    text, sig_block = note[: split + 1], note[split + 2 :]
    sigs: list[NoteSignature] = []
    for line in sig_block[:-1].split("\n"):
        if not line.startswith(SIG_PREFIX):
            raise NoteError("a signature line does not start with an em dash and a space")
        name, _, b64 = line[len(SIG_PREFIX) :].partition(" ")
        raw = _b64decode(b64, "a signature")
        if not _valid_name(name) or len(raw) < 5:
            raise NoteError("a signature line is malformed")
        sigs.append(NoteSignature(name, raw[:4], raw[4:]))
    if len(sigs) > MAX_SIGNATURES:
        raise NoteError(f"the note has more than {MAX_SIGNATURES} signatures")
    return Note(text, tuple(sigs))


def open_note(note: str, key: VerifierKey) -> str:
    """Return the note's text if `key` signed it; raise `NoteError` saying what is wrong otherwise.

    Signatures by other keys are ignored (the spec lets witnesses co-sign), but a line that claims
    to be by `key` and does not verify rejects the whole note.
    """
    parsed = parse_note(note)
    ours = [s for s in parsed.signatures if s.name == key.name and s.key_id == key.id]
    if not ours:
        others = ", ".join(f"{s.name} (key ID {s.key_id.hex()})" for s in parsed.signatures)
        raise NoteError(f"no signature by the log key {key.name}+{key.id.hex()}; it is signed by {others}")
    for sig in ours:
        if not key.verify(parsed.text.encode(), sig.signature):
            raise NoteError(f"the signature by {key.name}+{key.id.hex()} does not verify: the note was altered")
    return parsed.text


_SIZE_RE = re.compile(r"0|[1-9][0-9]{0,19}")


@dataclass(frozen=True)
class Checkpoint:
    """A signed tree head: the log `origin` had `size` records with Merkle `root`."""

    origin: str
    size: int
    root: bytes

    def body(self) -> str:
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n"

    @classmethod
    def parse_body(cls, text: str) -> Checkpoint:
        lines = text.split("\n")
        if len(lines) < 4 or lines[-1] != "" or any(not line for line in lines[:-1]):
            raise NoteError("a checkpoint body is at least three non-empty lines")
        origin, size, root_b64 = lines[0], lines[1], lines[2]
        if len(lines) > 4:
            # Extension lines are allowed by the spec but unauditable; we never write them.
            raise NoteError("the checkpoint carries extension lines this log never writes")
        if not _SIZE_RE.fullmatch(size):
            raise NoteError(f"the checkpoint tree size {size!r} is not a decimal number")
        root = _b64decode(root_b64, "the checkpoint root hash")
        if len(root) != 32 or base64.b64encode(root).decode() != root_b64:
            raise NoteError("the checkpoint root hash is not a canonical base64 SHA-256 hash")
        return cls(origin, int(size), root)


def sign_checkpoint(checkpoint: Checkpoint, key: SigningKey) -> str:
    return key.sign_note(checkpoint.body())


def open_checkpoint(note: str, key: VerifierKey) -> Checkpoint:
    """Verify a checkpoint note against `key` and parse it; its origin must be the key's name."""
    checkpoint = Checkpoint.parse_body(open_note(note, key))
    if checkpoint.origin != key.name:
        raise NoteError(f"the checkpoint is for log {checkpoint.origin!r}, not {key.name!r}")
    return checkpoint

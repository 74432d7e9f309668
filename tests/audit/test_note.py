"""C2SP signed notes and checkpoints: the Go reference vector, key encodings, and tampering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specsteer.audit.errors import KeyFileError
from specsteer.audit.note import (
    Checkpoint,
    NoteError,
    SigningKey,
    VerifierKey,
    key_id,
    load_signing_key,
    load_verifier_key,
    open_checkpoint,
    open_note,
    sign_checkpoint,
    write_key_pair,
)

VECTOR = json.loads((Path(__file__).parents[1] / "assets" / "audit" / "signed_note_vector.json").read_text())


def test_reproduces_the_go_reference_note_byte_for_byte() -> None:
    skey = SigningKey.parse(VECTOR["skey"])
    assert str(skey.verifier) == VECTOR["vkey"]
    assert skey.sign_note(VECTOR["text"]) == VECTOR["note"]  # Ed25519 is deterministic
    assert str(skey) == VECTOR["skey"]


def test_opens_the_reference_note_and_ignores_an_unknown_cosigner() -> None:
    vkey = VerifierKey.parse(VECTOR["vkey"])
    assert vkey.id == key_id(vkey.name, vkey.public_key) == bytes.fromhex("c74f20a3")
    assert open_note(VECTOR["note"], vkey) == VECTOR["text"]
    assert open_note(VECTOR["doubly_signed_note"], vkey) == VECTOR["text"]


def test_an_altered_text_is_rejected() -> None:
    vkey = VerifierKey.parse(VECTOR["vkey"])
    with pytest.raises(NoteError, match="does not verify"):
        open_note(VECTOR["note"].replace("cryptography", "cryptographY"), vkey)


def test_a_note_signed_only_by_another_key_names_that_key() -> None:
    other = SigningKey.generate("PeterNeumann")  # same name, different key: a different key ID
    with pytest.raises(NoteError, match=r"no signature by the log key PeterNeumann\+c74f20a3.*key ID"):
        open_note(other.sign_note(VECTOR["text"]), VerifierKey.parse(VECTOR["vkey"]))


@pytest.mark.parametrize(
    "mangle",
    [
        lambda k: k.replace("+c74f20a3+", "+c74f20a4+"),  # wrong key ID
        lambda k: k[:-2] + "AA",  # different key bytes, so the ID no longer matches
        lambda k: k.replace("+ARpc", "+Apc"),  # not base64 of 33 bytes
        lambda k: "Peter Neumann" + k[len("PeterNeumann") :],  # a space in the name
        lambda k: k.split("+")[0],
    ],
)
def test_mangled_verifier_keys_are_refused(mangle: object) -> None:
    with pytest.raises(KeyFileError):
        VerifierKey.parse(mangle(VECTOR["vkey"]))  # type: ignore[operator]


def test_checkpoint_round_trip_and_origin_binding() -> None:
    key = SigningKey.generate("device.example/log")
    cp = Checkpoint("device.example/log", 42, bytes(range(32)))
    note = sign_checkpoint(cp, key)
    assert note.splitlines()[:3] == ["device.example/log", "42", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="]
    assert note.splitlines()[4].startswith("— device.example/log ")
    assert open_checkpoint(note, key.verifier) == cp
    foreign = sign_checkpoint(Checkpoint("elsewhere/log", 42, bytes(32)), key)
    with pytest.raises(NoteError, match=r"not 'device\.example/log'"):
        open_checkpoint(foreign, key.verifier)


@pytest.mark.parametrize(
    "body",
    [
        "o\n042\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
        "o\n-1\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
        "o\n1\nAAEC\n",
        "o\n1\n",
    ],
)
def test_malformed_checkpoint_bodies_are_refused(body: str) -> None:
    key = SigningKey.generate("o")
    with pytest.raises(NoteError):
        open_checkpoint(key.sign_note(body), key.verifier)


def test_an_auditor_key_file_must_be_public(tmp_path: Path) -> None:
    key = SigningKey.generate("d")
    (tmp_path / "d.key").write_text(str(key))
    with pytest.raises(KeyFileError, match="private signing key"):
        load_verifier_key(tmp_path / "d.key")
    assert "PRIVATE" not in repr(key)


def test_write_key_pair_is_what_audit_keygen_and_the_demo_write(tmp_path: Path) -> None:
    private, public = write_key_pair("acme.example/device-7", tmp_path / "keys")
    assert (private.name, public.name) == ("acme.example_device-7.key", "acme.example_device-7.pub")
    assert private.stat().st_mode & 0o077 == 0
    assert load_verifier_key(public) == load_signing_key(private).verifier
    with pytest.raises(KeyFileError, match="already exists"):
        write_key_pair("acme.example/device-7", tmp_path / "keys")

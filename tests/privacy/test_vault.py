"""The encrypted profile at rest: round trips, wrong keys, tampering, atomic writes, nothing in the clear."""

from __future__ import annotations

import base64
import json
import logging
import os
import stat
import tempfile
from pathlib import Path

import pytest

from specsteer.privacy import vault
from specsteer.privacy.vault import (
    EnvKeyProvider,
    PassphraseKeyProvider,
    ProfileVault,
    StaticKeyProvider,
    VaultError,
    WrongKeyError,
    is_vault,
)

# The cheapest scrypt cost the vault accepts keeps the suite fast; production uses 2^15.
FAST = {"n": 2**14}
MARKER = "PLAINTEXT-MARKER-7f3a9c"
PROFILE = json.dumps(
    {
        "user_id": "u04",
        "profile": [
            {
                "subject": "t4014: support Git version strings",
                "body": f"private body {MARKER}",
                "trailers": [f"Signed-off-by: Test User One <user.one@example.invalid> {MARKER}"],
            }
        ],
    }
).encode()


def provider(passphrase: str = "correct horse battery staple") -> PassphraseKeyProvider:
    return PassphraseKeyProvider(passphrase, **FAST)


def test_passphrase_round_trip_and_header(tmp_path: Path) -> None:
    path = tmp_path / "profile.vault"
    ProfileVault.seal(PROFILE, path, provider())
    assert ProfileVault.open(path, provider()) == PROFILE
    blob = path.read_bytes()
    assert is_vault(path) and MARKER.encode() not in blob
    size = int.from_bytes(blob[8:10], "big")
    header = json.loads(blob[10 : 10 + size])
    assert header["v"] == 1 and header["alg"] == "AES-256-GCM"
    assert header["kdf"]["name"] == "scrypt" and header["kdf"]["n"] == 2**14
    assert len(base64.b64decode(header["nonce"])) == 12
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_each_seal_uses_a_fresh_salt_and_nonce(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    ProfileVault.seal(PROFILE, a, provider())
    ProfileVault.seal(PROFILE, b, provider())
    assert a.read_bytes() != b.read_bytes()


def test_seal_without_replace_never_overwrites(tmp_path: Path) -> None:
    """`replace=False` refuses a target that exists, also one that appears while the key is derived
    (the check and the write are one step: the sealed file is linked in, never renamed over)."""
    path = tmp_path / "p.vault"
    path.write_bytes(b"someone else's vault")
    with pytest.raises(VaultError, match="already exists"):
        ProfileVault.seal(PROFILE, path, provider(), replace=False)
    assert path.read_bytes() == b"someone else's vault"

    late = tmp_path / "late.vault"

    class Racing(PassphraseKeyProvider):
        def new_key(self) -> tuple[bytes, dict[str, object]]:
            late.write_bytes(b"written meanwhile")
            return super().new_key()

    with pytest.raises(VaultError, match="already exists"):
        ProfileVault.seal(PROFILE, late, Racing("pw", **FAST), replace=False)
    assert late.read_bytes() == b"written meanwhile"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["late.vault", "p.vault"]  # no temporary left

    fresh = tmp_path / "fresh.vault"
    ProfileVault.seal(PROFILE, fresh, provider(), replace=False)
    assert ProfileVault.open(fresh, provider()) == PROFILE
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600


def test_wrong_passphrase_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "p.vault"
    ProfileVault.seal(PROFILE, path, provider())
    with pytest.raises(WrongKeyError, match="wrong passphrase"):
        ProfileVault.open(path, provider("Tr0ub4dor&3"))


def test_raw_key_providers(tmp_path: Path) -> None:
    key = os.urandom(32)
    path = tmp_path / "k.vault"
    ProfileVault.seal(PROFILE, path, StaticKeyProvider(key))
    assert ProfileVault.open(path, EnvKeyProvider(environ={vault.ENV_KEY: key.hex()})) == PROFILE
    assert ProfileVault.open(path, EnvKeyProvider(environ={vault.ENV_KEY: base64.b64encode(key).decode()})) == PROFILE
    with pytest.raises(WrongKeyError, match="different key"):
        ProfileVault.open(path, StaticKeyProvider(os.urandom(32)))
    with pytest.raises(WrongKeyError, match="not a passphrase"):
        ProfileVault.open(path, provider())
    with pytest.raises(VaultError, match="not set"):
        EnvKeyProvider(environ={})
    with pytest.raises(VaultError, match="32-byte"):
        EnvKeyProvider(environ={vault.ENV_KEY: "abcd"})


@pytest.mark.parametrize("where", ["ciphertext", "tag", "header-nonce", "header-kdf"])
def test_tampering_anywhere_fails_authentication(tmp_path: Path, where: str) -> None:
    path = tmp_path / "t.vault"
    ProfileVault.seal(PROFILE, path, provider())
    blob = bytearray(path.read_bytes())
    size = int.from_bytes(blob[8:10], "big")
    header = json.loads(blob[10 : 10 + size])
    if where == "ciphertext":
        blob[10 + size + 5] ^= 0x01
    elif where == "tag":
        blob[-1] ^= 0x80
    else:
        if where == "header-nonce":
            nonce = bytearray(base64.b64decode(header["nonce"]))
            nonce[0] ^= 1
            header["nonce"] = base64.b64encode(bytes(nonce)).decode()
        else:
            header["kdf"]["r"] = 9  # same key? no: a different cost derives a different key
        new = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
        blob = bytearray(blob[:8] + len(new).to_bytes(2, "big") + new + blob[10 + size :])
    path.write_bytes(bytes(blob))
    with pytest.raises(VaultError):
        ProfileVault.open(path, provider())


def test_forged_scrypt_cost_is_refused_before_deriving(tmp_path: Path) -> None:
    path = tmp_path / "dos.vault"
    ProfileVault.seal(PROFILE, path, provider())
    blob = path.read_bytes()
    size = int.from_bytes(blob[8:10], "big")
    header = json.loads(blob[10 : 10 + size])
    header["kdf"]["n"] = 2**40
    new = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    path.write_bytes(blob[:8] + len(new).to_bytes(2, "big") + new + blob[10 + size :])
    with pytest.raises(VaultError, match="outside"):
        ProfileVault.open(path, provider())


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"profile": []}', "not a SpecSteer profile vault"),
        (b"SSVAULT\x00", "truncated"),
        (b"SSVAULT\x00\x00\x05{bad}" + b"\x00" * 20, "damaged header"),
        (b'SSVAULT\x00\x00\x07{"v":2}' + b"\x00" * 20, "version 2"),
    ],
)
def test_malformed_files_get_one_clear_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "m.vault"
    path.write_bytes(content)
    with pytest.raises(VaultError, match=message):
        ProfileVault.open(path, provider())


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(VaultError, match="does not exist"):
        ProfileVault.open(tmp_path / "none.vault", provider())
    with pytest.raises(VaultError, match="directory"):
        ProfileVault.open(tmp_path, provider())


def test_weak_or_invalid_parameters_are_refused() -> None:
    with pytest.raises(VaultError, match="outside"):
        PassphraseKeyProvider("x", n=2**10)
    with pytest.raises(VaultError, match="power of two"):
        PassphraseKeyProvider("x", n=3 * 2**14)
    with pytest.raises(VaultError, match="empty"):
        PassphraseKeyProvider("", **FAST).new_key()
    with pytest.raises(VaultError, match="32 bytes"):
        StaticKeyProvider(b"short")


def test_passphrase_callable_is_asked_only_when_needed(tmp_path: Path) -> None:
    asked: list[int] = []

    def ask() -> str:
        asked.append(1)
        return "pw"

    p = PassphraseKeyProvider(ask, **FAST)
    assert asked == []
    ProfileVault.seal(PROFILE, tmp_path / "c.vault", p)
    assert asked == [1]


def test_seal_replaces_atomically_and_leaves_the_old_vault_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.vault"
    ProfileVault.seal(b"old", path, provider())

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(vault.os, "replace", broken_replace)
    with pytest.raises(VaultError, match="No space left"):
        ProfileVault.seal(PROFILE, path, provider())
    monkeypatch.undo()
    assert ProfileVault.open(path, provider()) == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.vault"]  # no temporary file left behind


def _files_containing(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_nothing_private_reaches_disk_logs_or_temp_in_the_clear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    vault_dir = tmp_path / "device"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)  # make tempfile re-read TMPDIR
    caplog.set_level(logging.DEBUG)
    path = vault_dir / "profile.vault"

    ProfileVault.seal(PROFILE, path, provider())
    ProfileVault.seal(PROFILE, path, provider())  # a re-seal goes through a temp file too
    assert ProfileVault.open(path, provider()) == PROFILE
    with pytest.raises(WrongKeyError) as wrong:
        ProfileVault.open(path, provider("nope"))
    sealed = path.read_bytes()
    path.write_bytes(sealed[:-1] + bytes([sealed[-1] ^ 1]))  # always a change (1 in 256 tags ended in \x00)
    with pytest.raises(VaultError) as tampered:
        ProfileVault.open(path, provider())

    needle = MARKER.encode()
    assert _files_containing(vault_dir, needle) == []
    assert _files_containing(scratch, needle) == []
    out, err = capfd.readouterr()
    assert MARKER not in out + err + caplog.text
    assert MARKER not in str(wrong.value) + str(tampered.value)
    assert sorted(p.name for p in vault_dir.iterdir()) == ["profile.vault"]

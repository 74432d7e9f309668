"""The private history at rest on the device: one AES-256-GCM file, written atomically.

File layout (format version 1)::

    magic        8 bytes   b"SSVAULT\\x00"
    header_len   2 bytes   big-endian length of the header that follows (at most 4096)
    header       JSON      canonical (sorted keys, no spaces), ASCII:
                           {"v": 1, "alg": "AES-256-GCM", "nonce": b64, "kdf": {...}, "kcv": b64}
    ciphertext   rest      AES-GCM(key, nonce, plaintext, associated_data = magic + header_len + header)

Binding the whole header as associated data means a changed KDF parameter, nonce or version is
detected exactly like a changed ciphertext byte. `kdf` is the key provider's own description
(`{"name": "scrypt", "n": ..., "r": ..., "p": ..., "salt": b64}` for a passphrase, `{"name": "raw",
"key_id": ...}` for a raw key). `kcv` is a key-check value, HMAC-SHA256(key, "specsteer-vault
key check")[:16]: it tells a wrong passphrase apart from a tampered file without weakening
anything (an attacker with the file can already test passphrases against the GCM tag).

The plaintext exists only in memory. `seal` writes the ciphertext to a temporary file in the
target's own folder (never $TMPDIR: a crash there would strand a file on another filesystem),
fsyncs it, renames it over the target and fsyncs the folder; the temporary file only ever holds
ciphertext. `seal(..., replace=False)` links the temporary file in instead of renaming it, so a
target that exists (even one created meanwhile) is refused, never overwritten. Error messages name
the file, never its content.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from specsteer.core.errors import ProfileError
from specsteer.core.fileio import atomic_write, fsync_folder
from specsteer.privacy.errors import VaultError, WrongKeyError

__all__ = [
    "ENV_KEY",
    "ENV_PASSPHRASE",
    "EnvKeyProvider",
    "KeyProvider",
    "PassphraseKeyProvider",
    "ProfileVault",
    "StaticKeyProvider",
    "VaultError",
    "WrongKeyError",
    "is_vault",
]

MAGIC = b"SSVAULT\x00"
VERSION = 1
ALG = "AES-256-GCM"
KEY_BYTES = 32
NONCE_BYTES = 12
MAX_HEADER = 4096
ENV_PASSPHRASE = "SPECSTEER_VAULT_PASSPHRASE"
ENV_KEY = "SPECSTEER_VAULT_KEY"
_KCV_LABEL = b"specsteer-vault key check"

# scrypt cost for new vaults: n = 2^17, r = 8, p = 1 (128 MiB), the cost RFC 7914 and OWASP's
# stronger setting use for interactive logins; the header records n, so vaults sealed at the old
# n = 2^15 still open (n is read from the header within the bounds below, never assumed).
SCRYPT_N = 2**17
SCRYPT_R = 8
SCRYPT_P = 1
# Bounds checked before deriving: the header is only authenticated after derivation, so a forged
# n = 2^40 must be refused up front rather than exhaust memory.
_SCRYPT_N_RANGE = (2**14, 2**22)
_SCRYPT_R_RANGE = (1, 32)
_SCRYPT_P_RANGE = (1, 16)


class KeyProvider(Protocol):
    """Where the vault key comes from: a passphrase, an OS keystore, a hardware-backed key, ..."""

    def new_key(self) -> tuple[bytes, dict[str, Any]]:
        """A key for sealing, and the JSON-safe parameters that let `key_for` find it again."""
        ...

    def key_for(self, params: Mapping[str, Any]) -> bytes:
        """The key for a vault sealed with `params` (raise `VaultError` if they are not this provider's)."""
        ...


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise VaultError(f"the vault header's {what} is not base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise VaultError(f"the vault header's {what} is not valid base64") from None


def _int_in(params: Mapping[str, Any], name: str, bounds: tuple[int, int]) -> int:
    value = params.get(name)
    lo, hi = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise VaultError(f"the vault's scrypt parameter {name} = {value!r} is outside [{lo}, {hi}]")
    return value


class PassphraseKeyProvider:
    """scrypt(passphrase, random 16-byte salt); the salt and cost are stored in the header.

    `passphrase` may be a callable, so an interactive prompt runs only when a key is needed.
    """

    def __init__(
        self,
        passphrase: str | bytes | Callable[[], str | bytes],
        *,
        n: int = SCRYPT_N,
        r: int = SCRYPT_R,
        p: int = SCRYPT_P,
    ) -> None:
        for name, value, bounds in (("n", n, _SCRYPT_N_RANGE), ("r", r, _SCRYPT_R_RANGE), ("p", p, _SCRYPT_P_RANGE)):
            _int_in({name: value}, name, bounds)
        if n & (n - 1):
            raise VaultError(f"the scrypt parameter n must be a power of two; got {n}")
        self._passphrase = passphrase
        self.n, self.r, self.p = n, r, p

    def _secret(self) -> bytes:
        value = self._passphrase() if callable(self._passphrase) else self._passphrase
        secret = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        if not secret:
            raise VaultError("the vault passphrase is empty")
        return secret

    def _derive(self, salt: bytes, n: int, r: int, p: int) -> bytes:
        return Scrypt(salt=salt, length=KEY_BYTES, n=n, r=r, p=p).derive(self._secret())

    def new_key(self) -> tuple[bytes, dict[str, Any]]:
        salt = secrets.token_bytes(16)
        key = self._derive(salt, self.n, self.r, self.p)
        return key, {"name": "scrypt", "n": self.n, "r": self.r, "p": self.p, "salt": _b64(salt)}

    def key_for(self, params: Mapping[str, Any]) -> bytes:
        if params.get("name") != "scrypt":
            raise WrongKeyError(f"the vault was sealed with a {params.get('name')!r} key, not a passphrase")
        n = _int_in(params, "n", _SCRYPT_N_RANGE)
        if n & (n - 1):
            raise VaultError(f"the vault's scrypt parameter n = {n} is not a power of two")
        salt = _unb64(params.get("salt"), "salt")
        if not 8 <= len(salt) <= 64:
            raise VaultError("the vault's scrypt salt has an implausible length")
        return self._derive(salt, n, _int_in(params, "r", _SCRYPT_R_RANGE), _int_in(params, "p", _SCRYPT_P_RANGE))


class StaticKeyProvider:
    """A raw 32-byte key held by the caller (an OS keystore or secure enclave adapter, or a test)."""

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise VaultError(f"a vault key is {KEY_BYTES} bytes; got {len(key)}")
        self._key = bytes(key)

    @property
    def key_id(self) -> str:
        # A public fingerprint so the error can say "wrong key" instead of "damaged file".
        return hashlib.sha256(b"specsteer-vault key id" + self._key).hexdigest()[:16]

    def new_key(self) -> tuple[bytes, dict[str, Any]]:
        return self._key, {"name": "raw", "key_id": self.key_id}

    def key_for(self, params: Mapping[str, Any]) -> bytes:
        if params.get("name") != "raw":
            raise WrongKeyError(f"the vault was sealed with a {params.get('name')!r} key, not a raw key")
        if params.get("key_id") != self.key_id:
            raise WrongKeyError("the vault was sealed with a different key")
        return self._key


class EnvKeyProvider(StaticKeyProvider):
    """A raw key from an environment variable, as 64 hex digits or base64 of 32 bytes."""

    def __init__(self, variable: str = ENV_KEY, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        text = env.get(variable, "").strip()
        if not text:
            raise VaultError(f"the environment variable {variable} holding the vault key is not set")
        key: bytes | None = None
        with contextlib.suppress(ValueError):
            key = bytes.fromhex(text)
        if key is None or len(key) != KEY_BYTES:
            try:
                key = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                key = None
        if key is None or len(key) != KEY_BYTES:
            raise VaultError(f"{variable} must hold a 32-byte key as 64 hex digits or base64")
        super().__init__(key)


def environment_key_provider(sealed: str) -> KeyProvider:
    """The key provider the environment names: a raw key (`ENV_KEY`) first, else a passphrase.

    `sealed` says what is sealed ("the profile is encrypted"); with neither variable set, the
    `ProfileError` tells the user which ones to set.
    """
    if os.environ.get(ENV_KEY):
        return EnvKeyProvider()
    passphrase = os.environ.get(ENV_PASSPHRASE)
    if not passphrase:
        raise ProfileError(f"{sealed}: set {ENV_PASSPHRASE} (or {ENV_KEY}) to open it")
    return PassphraseKeyProvider(passphrase)


def _kcv(key: bytes) -> bytes:
    return hmac.new(key, _KCV_LABEL, hashlib.sha256).digest()[:16]


def _encode_header(fields: Mapping[str, Any]) -> bytes:
    header = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    if len(header) > MAX_HEADER:
        raise VaultError("the vault header is too large (the key provider's parameters are too long)")
    return MAGIC + len(header).to_bytes(2, "big") + header


def is_vault(path: str | Path) -> bool:
    """Whether `path` starts with the vault magic (a cheap check before choosing a loader)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


class ProfileVault:
    """Seal and open the encrypted profile file."""

    @staticmethod
    def seal(plaintext: bytes, path: str | Path, provider: KeyProvider, *, replace: bool = True) -> None:
        """Encrypt `plaintext` to `path`, replacing it atomically; the file is created 0600.

        With `replace=False` an existing `path` (a file, a folder or a link, even one that appears
        while the key is derived) is refused with `VaultError` and left as it was.
        """
        target = Path(path)
        if not replace:
            _refuse_existing(target)
        key, kdf = provider.new_key()
        if len(key) != KEY_BYTES:
            raise VaultError(f"the key provider returned a {len(key)}-byte key; AES-256 needs {KEY_BYTES}")
        nonce = secrets.token_bytes(NONCE_BYTES)
        aad = _encode_header({"v": VERSION, "alg": ALG, "nonce": _b64(nonce), "kdf": kdf, "kcv": _b64(_kcv(key))})
        blob = aad + AESGCM(key).encrypt(nonce, bytes(plaintext), aad)
        _atomic_write(target, blob, replace=replace)

    @staticmethod
    def open(path: str | Path, provider: KeyProvider) -> bytes:
        """Decrypt the vault at `path`; `WrongKeyError` for a wrong key, `VaultError` for anything else."""
        source = Path(path)
        try:
            blob = source.read_bytes()
        except FileNotFoundError:
            raise VaultError(f"the vault {source} does not exist") from None
        except IsADirectoryError:
            raise VaultError(f"the vault {source} is a directory, not a file") from None
        except OSError as exc:
            raise VaultError(f"cannot read the vault {source}: {exc.strerror or type(exc).__name__}") from None
        aad, fields = _parse(blob, source)
        key = provider.key_for(fields["kdf"])
        if not hmac.compare_digest(_kcv(key), fields["kcv"]):
            raise WrongKeyError(f"wrong passphrase or key for the vault {source} (or its key parameters were altered)")
        try:
            return AESGCM(key).decrypt(fields["nonce"], blob[len(aad) :], aad)
        except InvalidTag:
            raise VaultError(f"the vault {source} was modified or damaged: it fails authentication") from None


def _parse(blob: bytes, source: Path) -> tuple[bytes, dict[str, Any]]:
    if not blob.startswith(MAGIC):
        raise VaultError(f"{source} is not a SpecSteer profile vault")
    if len(blob) < len(MAGIC) + 2:
        raise VaultError(f"the vault {source} is truncated")
    size = int.from_bytes(blob[len(MAGIC) : len(MAGIC) + 2], "big")
    end = len(MAGIC) + 2 + size
    if size > MAX_HEADER or len(blob) < end + 16:
        raise VaultError(f"the vault {source} is truncated or its header is damaged")
    try:
        header = json.loads(blob[len(MAGIC) + 2 : end].decode("ascii"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise VaultError(f"the vault {source} has a damaged header") from None
    if not isinstance(header, dict):
        raise VaultError(f"the vault {source} has a damaged header")
    if header.get("v") != VERSION:
        raise VaultError(f"the vault {source} is format version {header.get('v')!r}; this SDK reads version {VERSION}")
    if header.get("alg") != ALG or not isinstance(header.get("kdf"), dict):
        raise VaultError(f"the vault {source} has a damaged header")
    nonce = _unb64(header.get("nonce"), "nonce")
    kcv = _unb64(header.get("kcv"), "key check")
    if len(nonce) != NONCE_BYTES or len(kcv) != 16:
        raise VaultError(f"the vault {source} has a damaged header")
    return blob[:end], {"kdf": header["kdf"], "nonce": nonce, "kcv": kcv}


def _refuse_existing(target: Path) -> None:
    if target.exists() or target.is_symlink():
        raise VaultError(f"the vault {target} already exists; it was left as it was")


def _atomic_write(target: Path, data: bytes, *, replace: bool = True) -> None:
    folder = target.parent if str(target.parent) else Path(".")
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if replace:
            atomic_write(target, data, mode=0o600)
        else:
            _write_new(target, folder, data)
    except FileExistsError:
        raise VaultError(f"the vault {target} already exists; it was left as it was") from None
    except OSError as exc:
        raise VaultError(f"cannot write the vault {target}: {exc.strerror or type(exc).__name__}") from None


def _write_new(target: Path, folder: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `target`, then link it in as `target` only if no such
    name exists (`link` never replaces, unlike `rename`): the check and the write are one step."""
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{target.name}-", dir=folder)  # created 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, target)
        fsync_folder(folder)
    finally:
        Path(tmp).unlink(missing_ok=True)

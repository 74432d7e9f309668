"""Per-certificate revocation: a list of revoked device certificates, re-read when it changes.

`revoked_certificates` under `[tls]` names a text file, one revoked certificate a line: its SHA-256
fingerprint (64 hex digits, as `audit verify` and the transcript name a device certificate) or
`serial:<hex>` (its serial number, as a CA's records have it); `#` starts a comment. Unlike
`revoked_devices` (a name, read at start), it revokes one certificate of a device and leaves the
device's next certificate working, and it is checked at every new stream: the file's identity
(inode, size, modification time) is compared first and the file re-read when it changed, so an
entry added takes effect on the next stream, without a restart.

Fail closed: a list that cannot be read or parsed once the verifier runs refuses every new stream
(one sentence, UNAVAILABLE) until it is fixed; at start it is a `ConfigError`.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from specsteer.core.errors import ConfigError
from specsteer.server.errors import RevocationUnreadable

__all__ = ["RevocationList", "RevocationUnreadable"]

MAX_LIST_BYTES = 16 << 20  # ~200,000 entries
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SERIAL = re.compile(r"serial:([0-9a-f]{1,40})")


@dataclass(frozen=True)
class _Entries:
    fingerprints: frozenset[str]
    serials: frozenset[int]


def _parse(data: bytes, path: Path) -> _Entries:
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise ConfigError(f"the revocation list {path} is not ASCII text") from None
    fingerprints: set[str] = set()
    serials: set[int] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip().lower()
        if not line:
            continue
        match = _SERIAL.fullmatch(line)
        if match is None and _SHA256.fullmatch(line.replace(":", "")):
            fingerprints.add(line.replace(":", ""))  # colons between byte pairs, as openssl prints it
            continue
        if match is None:
            raise ConfigError(
                f"the revocation list {path}, line {number}: {raw.strip()[:80]!r} is neither a certificate's "
                "SHA-256 fingerprint (64 hex digits) nor serial:<hex>, so it would revoke nothing"
            )
        serials.add(int(match.group(1), 16))
    return _Entries(frozenset(fingerprints), frozenset(serials))


class RevocationList:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._entries = _Entries(frozenset(), frozenset())
        self._problem: str | None = None
        self.refresh()
        if self._problem is not None:
            raise ConfigError(self._problem)

    def _read(self) -> tuple[tuple[int, int, int], bytes]:
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not hang a stream
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ConfigError(f"the revocation list {self.path} is not a regular file")
            if info.st_size > MAX_LIST_BYTES:
                raise ConfigError(f"the revocation list {self.path} is larger than {MAX_LIST_BYTES} bytes")
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read(MAX_LIST_BYTES + 1)
            return (info.st_ino, info.st_size, info.st_mtime_ns), data
        finally:
            os.close(fd)

    def refresh(self) -> None:
        """Re-read the list if the file changed (by inode, size or modification time)."""
        with self._lock:
            try:
                info = os.stat(self.path)
                if (info.st_ino, info.st_size, info.st_mtime_ns) == self._stamp and self._problem is None:
                    return
                stamp, data = self._read()
                self._entries = _parse(data, self.path)
                self._stamp, self._problem = stamp, None
            except OSError as exc:
                self._problem = f"cannot read the revocation list {self.path}: {exc.strerror or exc}"
            except ConfigError as exc:
                self._problem = str(exc)

    def revoked(self, cert: x509.Certificate) -> str | None:
        """Why `cert` is revoked (one sentence), or None; `RevocationUnreadable` if the list is unusable."""
        self.refresh()
        with self._lock:
            if self._problem is not None:
                raise RevocationUnreadable(self._problem)
            entries = self._entries
        fingerprint = cert.fingerprint(hashes.SHA256()).hex()
        if fingerprint in entries.fingerprints:
            return f"the device certificate {fingerprint[:16]}… is revoked"
        if cert.serial_number in entries.serials:
            return f"the device certificate with serial {cert.serial_number:x} is revoked"
        return None

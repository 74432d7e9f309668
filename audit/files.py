"""Opening the files an auditor is handed: regular files only, never waiting, never unbounded.

A log directory (or a transcript, a witness state) comes from whoever wants it to pass, so a
FIFO in place of a file must not hang `audit verify`, a link to /dev/zero must not fill its
memory, and a huge sparse file must not be read whole. Files are opened non-blocking (opening a
FIFO does not wait for a writer), inside a log directory without following a final symbolic link
(the device never makes one), and checked with `fstat` on the open descriptor, so what is read
is what was checked. (`core.tls_identity.read_tls_file` does the same for TLS files, with
permission rules of its own and `ConfigError`.)

Key files are read the same way (`read_key_file`): a FIFO given as a key must not hang a start,
and a private key (the log's signing key, a witness's) must be readable and writable by its owner
only (mode 0600 or 0400): another user who can read it can sign as the log or the witness.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from specsteer.audit.errors import AuditError, KeyFileError

__all__ = ["MAX_KEY_FILE_BYTES", "open_regular", "read_key_file", "read_regular"]

MAX_KEY_FILE_BYTES = 4096  # a key line is about 100 bytes
# A private key file must not be readable or writable by its group or other users.
PRIVATE_KEY_FORBIDDEN_BITS = stat.S_IRGRP | stat.S_IWGRP | stat.S_IROTH | stat.S_IWOTH


@contextmanager
def open_regular(path: Path, what: str, *, follow: bool = True) -> Iterator[tuple[BinaryIO, int]]:
    """The open file and its size; `AuditError` in one sentence if it is no readable regular file.

    `follow=False` refuses a symbolic link (for files inside a log directory)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow and os.path.islink(path):
            raise AuditError(f"{what} {path} is a symbolic link, which an audit log never holds") from None
        raise AuditError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise AuditError(f"{what} {path} is not a regular file ({_kind(info.st_mode)})")
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle, info.st_size


def read_regular(path: Path, what: str, limit: int, *, follow: bool = True) -> bytes:
    """The whole content of a regular file of at most `limit` bytes (`AuditError` otherwise)."""
    with open_regular(path, what, follow=follow) as (handle, size):
        if size > limit:
            raise AuditError(f"{what} {path} is {size} bytes, more than its format allows ({limit})")
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise AuditError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise AuditError(f"{what} {path} grew past {limit} bytes while it was read")
    return data


def read_key_file(path: Path, what: str, *, private: bool) -> str:
    """The text of key file `path`, opened without blocking; `KeyFileError` in one sentence if it
    is no regular file, too large, not text, or (`private`) readable or writable by other users."""
    try:
        with open_regular(path, what) as (handle, size):
            mode = stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
            if private and mode & PRIVATE_KEY_FORBIDDEN_BITS:
                raise KeyFileError(
                    f"{what} {path} can be read or written by other users (mode {mode:04o}): chmod 600 {path}"
                )
            if size > MAX_KEY_FILE_BYTES:
                raise KeyFileError(f"{what} {path} is {size} bytes, more than any key file ({MAX_KEY_FILE_BYTES})")
            data = handle.read(MAX_KEY_FILE_BYTES + 1)
    except KeyFileError:
        raise
    except AuditError as exc:
        raise KeyFileError(str(exc)) from None
    except OSError as exc:
        raise KeyFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_KEY_FILE_BYTES:
        raise KeyFileError(f"{what} {path} grew past {MAX_KEY_FILE_BYTES} bytes while it was read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise KeyFileError(f"{what} {path} is not text") from None


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a file"

"""Durable file writes: a reader sees the old file or the new one, never half of either.

`atomic_writer` writes a temporary file in the target's folder (same filesystem, so the final
rename is atomic), fsyncs it, renames it over the target and fsyncs the folder, so the rename
itself survives a power cut. An exception (or Ctrl-C) before the rename leaves the old target
untouched and removes the temporary file. `append_line` is the durable append for logs of one
JSON object a line.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["append_line", "atomic_write", "atomic_writer", "create_private", "fsync_folder"]


@contextlib.contextmanager
def atomic_writer(path: str | Path, *, mode: int = 0o600) -> Iterator[BinaryIO]:
    """A binary handle whose content replaces `path` when the block ends without an exception.

    `mode` is the file's exact permission bits (not filtered by the umask): private by default,
    since keys, ledgers and vaults go through here. The folder must exist. Raises `OSError`.
    """
    target = Path(path)
    folder = target.parent
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{target.name}-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            if mode != 0o600:  # mkstemp already created it 0600
                os.fchmod(handle.fileno(), mode)
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        fsync_folder(folder)
    finally:
        Path(tmp).unlink(missing_ok=True)  # a no-op once the rename has moved it


def atomic_write(path: str | Path, data: bytes | str, *, mode: int = 0o600) -> None:
    """Replace `path` with `data` (a str is written as UTF-8) durably and atomically."""
    with atomic_writer(path, mode=mode) as handle:
        handle.write(data.encode("utf-8") if isinstance(data, str) else data)


def create_private(path: str | Path, data: bytes) -> None:
    """Write a new file private to its owner (0600 from its first byte); an existing one is refused."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
        handle.write(data)


def append_line(path: str | Path, line: str) -> None:
    """Append `line` and a newline to `path` (UTF-8), returning only once it is on disk."""
    with Path(path).open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def fsync_folder(folder: str | Path) -> None:
    """Make a rename or a new file in `folder` durable (a file's own fsync does not cover its name)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish_folder(built: Path, target: Path, is_complete: Callable[[Path], bool]) -> None:
    """Rename a fully written folder (beside `target`, so the rename is atomic) into place.

    A complete `target` already there means another process finished the same work first: it
    stays. One that is not complete (no marker, another format) is never trusted and is replaced.
    """
    if target.exists():
        if is_complete(target):
            return
        shutil.rmtree(target)
    try:
        os.rename(built, target)
    except OSError:
        if not is_complete(target):  # a failed rename is fine only if a concurrent writer won
            raise

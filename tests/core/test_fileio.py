"""specsteer.core.fileio: the one durable atomic write and the durable append."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import specsteer.core.fileio as fileio
from specsteer.core.fileio import append_line, atomic_write, atomic_writer


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_write_replaces_the_content_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    atomic_write(target, "néw\n")
    assert target.read_bytes() == "néw\n".encode()
    atomic_write(target, b"\x00\xffbytes")
    assert target.read_bytes() == b"\x00\xffbytes"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_writer_that_fails_leaves_the_old_content_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "ledger.json"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_writer(target) as handle:
        handle.write(b"half of the new")
        raise RuntimeError("the writer failed half way")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["ledger.json"]


def test_ctrl_c_before_the_rename_leaves_the_old_content_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "port"
    target.write_text("1\n")

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(fileio.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, "2\n")
    assert target.read_text() == "1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["port"]


def test_the_new_file_is_private_unless_asked_otherwise(tmp_path: Path) -> None:
    private, public = tmp_path / "device.key", tmp_path / "device.pem"
    atomic_write(private, b"key")
    atomic_write(public, b"cert", mode=0o644)
    assert (_mode(private), _mode(public)) == (0o600, 0o644)
    # Replacing a public file with a private one narrows it: the mode is the new file's.
    atomic_write(public, b"key now", mode=0o600)
    assert _mode(public) == 0o600


def test_the_content_and_the_folder_are_fsynced_before_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real = os.fsync

    def recording(fd: int) -> None:
        synced.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(fileio.os, "fsync", recording)
    atomic_write(tmp_path / "vault", b"sealed")
    assert synced == ["file", "folder"]


def test_a_missing_folder_is_an_os_error_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        atomic_write(tmp_path / "absent" / "file", b"x")
    assert not (tmp_path / "absent").exists()


def test_append_line_adds_one_line_a_call(tmp_path: Path) -> None:
    log = tmp_path / "rounds.jsonl"
    append_line(log, '{"round": 1}')
    append_line(log, '{"round": 2}')
    assert log.read_text(encoding="utf-8").splitlines() == ['{"round": 1}', '{"round": 2}']

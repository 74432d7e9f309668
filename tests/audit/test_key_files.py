"""Key files and the transcript folder, as the files a start is handed (issue #48, finding 8).

A private key (the log's signing key, the witness's) other users can read lets them sign as the
log or the witness; a FIFO given as a key must not hang the start; a transcript folder others may
write in lets them replace the server's witness statement. Each is refused in one sentence.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from specsteer.audit.cosignature import load_witness_key, load_witness_signer, write_witness_key_pair
from specsteer.audit.errors import AuditError, KeyFileError
from specsteer.audit.note import SigningKey, load_signing_key, load_verifier_key, write_key_pair
from specsteer.audit.transcript import ServerTranscript
from specsteer.core.errors import ConfigError
from specsteer.server.config import ServerConfig
from specsteer.server.preflight import check_before_loading
from specsteer.server.witness import load_witness


def _signing_key(tmp_path: Path) -> Path:
    private, _ = write_key_pair("device.test/log", tmp_path)
    return private


def _witness_key(tmp_path: Path) -> Path:
    private, _ = write_witness_key_pair("witness.test/w1", tmp_path)
    return private


@pytest.mark.parametrize("mode", [0o644, 0o666, 0o640, 0o604, 0o620], ids=oct)
def test_a_signing_key_others_may_read_or_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = _signing_key(tmp_path)
    path.chmod(mode)
    with pytest.raises(KeyFileError) as err:
        load_signing_key(path)
    assert str(err.value) == (
        f"signing key {path} can be read or written by other users (mode {mode:04o}): chmod 600 {path}"
    )


@pytest.mark.parametrize("mode", [0o644, 0o666], ids=oct)
def test_a_witness_signing_key_others_may_read_is_refused_at_start(tmp_path: Path, mode: int) -> None:
    path = _witness_key(tmp_path)
    path.chmod(mode)
    with pytest.raises(ConfigError, match=rf"mode {mode:04o}\): chmod 600 {path}$"):
        load_witness(path)
    with pytest.raises(KeyFileError, match=r"witness signing key .* can be read or written by other users"):
        load_witness_signer(path)


@pytest.mark.parametrize("mode", [0o600, 0o400], ids=oct)
def test_a_private_key_only_its_owner_reads_is_loaded(tmp_path: Path, mode: int) -> None:
    signing, witness = _signing_key(tmp_path), _witness_key(tmp_path)
    for path in (signing, witness):
        path.chmod(mode)
    assert isinstance(load_signing_key(signing), SigningKey)
    assert load_witness(witness).signer.name == "witness.test/w1"


def test_public_keys_may_be_world_readable(tmp_path: Path) -> None:
    _, log_pub = write_key_pair("device.test/log", tmp_path)
    _, witness_pub = write_witness_key_pair("witness.test/w1", tmp_path)
    for path in (log_pub, witness_pub):
        path.chmod(0o644)
    load_verifier_key(log_pub)
    load_witness_key(witness_pub)


def _returns_within(call: Callable[[], object], fifo: Path, seconds: float = 5.0) -> BaseException | None:
    """Run `call` (which reads `fifo`) in a thread; fail if it blocks. What it raised, if anything."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        # Unblock the reader (a writer that opens and closes gives it end-of-file), then fail.
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        thread.join(5)
        pytest.fail(f"reading the FIFO {fifo} blocked for {seconds} s")
    return outcome[0]


@pytest.mark.parametrize(
    ("what", "load"),
    [
        ("witness key (serve --witness-key)", lambda p: load_witness(p)),
        ("signing key", lambda p: load_signing_key(p)),
        ("witness public key", lambda p: load_witness_key(p)),
        ("verifier key", lambda p: load_verifier_key(p)),
    ],
)
def test_a_fifo_given_as_a_key_is_refused_at_once(tmp_path: Path, what: str, load: Callable[[Path], object]) -> None:
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo, 0o600)
    error = _returns_within(lambda: load(fifo), fifo)
    assert isinstance(error, (ConfigError, KeyFileError)), (what, error)
    assert f"{fifo} is not a regular file (a FIFO)" in str(error)


def test_a_fifo_given_as_the_witness_state_is_refused_at_once(tmp_path: Path) -> None:
    key = _witness_key(tmp_path)
    fifo = tmp_path / "state.fifo"
    os.mkfifo(fifo, 0o600)
    error = _returns_within(lambda: load_witness(key, fifo), fifo)
    assert isinstance(error, ConfigError) and "is not a regular file (a FIFO)" in str(error)


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o770, 0o1777, 0o757], ids=oct)
def test_a_transcript_folder_others_may_write_in_is_refused(tmp_path: Path, mode: int) -> None:
    folder = tmp_path / "transcripts"
    folder.mkdir()
    folder.chmod(mode)
    sentence = (
        f"the transcript folder {folder} can be written by other users (mode {mode:04o}), who could replace "
        f"the server's transcript: chmod go-w {folder}"
    )
    with pytest.raises(ConfigError) as err:
        check_before_loading(ServerConfig(port=0, transcript_dir=folder))
    assert str(err.value) == sentence
    with pytest.raises(AuditError) as err2:
        ServerTranscript.open(folder / "server-transcript.jsonl")
    assert str(err2.value) == sentence
    assert not (folder / "server-transcript.jsonl").exists()


def test_a_transcript_folder_the_server_makes_is_its_own(tmp_path: Path) -> None:
    folder = tmp_path / "new" / "transcripts"
    old = os.umask(0o002)  # a umask that would make a group-writable folder
    try:
        check_before_loading(ServerConfig(port=0, transcript_dir=folder))
    finally:
        os.umask(old)
    assert folder.stat().st_mode & 0o077 == 0
    ServerTranscript.open(folder / "server-transcript.jsonl").close()

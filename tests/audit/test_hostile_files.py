"""A log directory, transcript or witness state built to hang or exhaust `audit verify`.

Each case runs the real CLI in a child process with a time limit and a 1 GiB address-space limit,
so a hang or an unbounded read fails the test instead of the machine: the answer must be one line
on stderr (or the report) and exit 1, never a traceback.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from specsteer.audit.log import CHECKPOINTS_FILE, SEGMENTS_DIR, TORN_DIR, scan_log, segment_name
from tests.audit.helpers import BuiltLog, build_log

ROOT = Path(__file__).parents[2]
LIMIT = 1 << 30


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def _verify(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specsteer.audit.cli", "verify", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=20,
        cwd=ROOT,
        preexec_fn=_limit,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> BuiltLog:
    return build_log(tmp_path_factory.mktemp("hostile"), sessions=1)


def _fifo_checkpoints(log: Path) -> None:
    (log / CHECKPOINTS_FILE).unlink()
    os.mkfifo(log / CHECKPOINTS_FILE)


def _fifo_segment(log: Path) -> None:
    os.mkfifo(log / SEGMENTS_DIR / "seg-000000000999.log")


def _dev_zero_evidence(log: Path) -> None:
    (log / TORN_DIR).mkdir()
    os.symlink("/dev/zero", log / TORN_DIR / f"seg-000000000000.log.5.{'0' * 64}.bin")


def _folder_segment(log: Path) -> None:
    (log / SEGMENTS_DIR / "seg-000000000999.log").mkdir()


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "a FIFO as checkpoints.jsonl": (_fifo_checkpoints, "is not a regular file (a FIFO)"),
    "a FIFO as the last segment": (_fifo_segment, "is not a regular file (a FIFO)"),
    "/dev/zero linked as torn evidence": (_dev_zero_evidence, "is a symbolic link"),
    "a folder as a segment": (_folder_segment, "is not a regular file (a folder)"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_file_that_is_no_regular_file_is_one_line_not_a_hang(built: BuiltLog, tmp_path: Path, case: str) -> None:
    log = tmp_path / "log"
    shutil.copytree(built.directory, log, ignore=shutil.ignore_patterns("lock"))
    mutate, why = CASES[case]
    mutate(log)
    result = _verify(log, "--key", built.pub)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.count("\n") == 1 and why in result.stderr, result.stderr


@pytest.mark.parametrize("first", ["next", "999"])
def test_a_huge_sparse_segment_is_read_in_bounded_pieces(built: BuiltLog, tmp_path: Path, first: str) -> None:
    """2 GiB of holes (no disk used), more than the child's whole address space: as the last segment,
    a zero-filled torn tail; after a gap in the records, damage reported in bounded space."""
    log = tmp_path / "log"
    shutil.copytree(built.directory, log, ignore=shutil.ignore_patterns("lock"))
    index = len(scan_log(log).records) if first == "next" else 999
    with open(log / SEGMENTS_DIR / segment_name(index), "wb") as f:
        f.truncate(2 << 30)
    result = _verify(log, "--key", built.pub)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    expected = "(zero-filled) (2147483648 bytes from byte 0)" if first == "next" else "were not read"
    assert expected in result.stdout, result.stdout


def test_a_fifo_as_the_transcript_or_witness_state_is_one_line(built: BuiltLog, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    for option in ("--server-transcript", "--witness-state", "--checkpoint"):
        result = _verify(built.directory, "--key", built.pub, "--device", "alice", option, tmp_path / "fifo")
        assert result.returncode == 1 and "Traceback" not in result.stderr, (option, result.stderr[-2000:])
        assert "is not a regular file (a FIFO)" in result.stderr, (option, result.stderr)

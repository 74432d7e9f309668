"""A log written by the first version of the format still verifies, byte for byte."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest

from specsteer.audit import merkle
from specsteer.audit.errors import VerificationFailed
from specsteer.audit.log import scan_log
from specsteer.audit.note import load_verifier_key
from specsteer.audit.verify import verify

GOLDEN = Path(__file__).parents[1] / "assets" / "audit" / "golden"


def test_the_golden_log_verifies_and_its_root_is_unchanged(tmp_path: Path) -> None:
    expected = json.loads((GOLDEN / "expected.json").read_text())
    shutil.copytree(GOLDEN / "log", tmp_path / "log")
    report = verify(tmp_path / "log", key=load_verifier_key(GOLDEN / "device.pub"))
    assert (report.records, len(report.sessions)) == (expected["records"], expected["sessions"])
    leaves = [r.leaf for r in scan_log(tmp_path / "log").records]
    assert base64.b64encode(merkle.root(leaves)).decode() == expected["root"]
    assert [s.ended for s in report.sessions] == ["close", "fallback (verifier-unreachable)"]


def test_deleting_the_golden_logs_last_segment_is_caught_by_its_checkpoints(tmp_path: Path) -> None:
    shutil.copytree(GOLDEN / "log", tmp_path / "log")
    (tmp_path / "log" / "segments" / "seg-000000000008.log").unlink()
    with pytest.raises(VerificationFailed, match=r"\(checkpoints\)") as info:
        verify(tmp_path / "log", key=load_verifier_key(GOLDEN / "device.pub"))
    (check,) = [c for c in info.value.report.checks if not c.ok]
    assert "signs 14 records but the log holds only 8: records 8 to 13 were removed" in check.failures[-1]

"""A session record of a kind `verify` has no check for is refused by name, never read as another kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from specsteer.audit import records, verify
from specsteer.audit.errors import VerificationFailed
from specsteer.audit.log import AuditLog
from specsteer.audit.note import SigningKey
from specsteer.audit.recorder import EgressRecorder
from tests.audit.helpers import DEVICE, VOCAB


def test_a_session_record_of_an_unknown_kind_is_a_failure_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A kind the schema gains (here for this test only) before `verify` learns to check it: the
    # log accepts it, and `verify` used to read it as a guard decision (a KeyError on "decision").
    monkeypatch.setitem(records.SCHEMA, "session-note", dict(records._SESSION))
    key = SigningKey.generate("device.test/log")
    directory = tmp_path / "log"
    with AuditLog.open(directory, key, device=DEVICE) as log:
        rec = EgressRecorder(log)
        sid = rec.begin_session(vocab_size=VOCAB)
        position = log.append_session("session-note", sid, {})
        rec.on_fallback(sid, "verifier-unreachable")

    with pytest.raises(VerificationFailed) as info:
        verify.verify(directory, key=key.verifier)
    failed = {c.name: c.failures for c in info.value.report.checks if not c.ok}
    assert list(failed) == ["session structure"]
    (message,) = failed["session structure"]
    assert message.startswith(f"record {position} (session-note, n=1 of session {sid[:8]}")
    assert "unknown kind 'session-note'" in message


def test_every_session_kind_of_the_schema_has_its_check() -> None:
    assert set(verify._EXAMINE) | {records.KIND_BEGIN} == records.SESSION_KINDS

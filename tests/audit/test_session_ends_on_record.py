"""Every session the SDK opens ends on record, so `audit verify` holds even when one fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from specsteer.audit import records
from specsteer.audit.log import AuditLog, scan_log
from specsteer.audit.note import SigningKey
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.verify import verify
from specsteer.core.errors import ProtocolError
from specsteer.core.session_types import SessionParams
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import make_pki, remote, serve


def test_a_session_the_verifier_refuses_still_verifies(tmp_path: Path, char_tok) -> None:
    # Prepare: a real TLS verifier without federated adapters, and an audited device.
    specialist = Specialist(tiny_lm(char_tok, seed=1))
    cloud = CloudVerifier(tiny_lm(char_tok, seed=2), specialist.lm, seed=0)
    pki = make_pki(tmp_path)
    key = SigningKey.generate("device.test/ends")
    with serve(cloud, pki) as (_, port), AuditLog.open(tmp_path / "log", key) as log:
        verifier = remote(port, pki, vocab_size=specialist.lm.vocab_size, tap=EgressRecorder(log))
        # Execute: one good session, then one declaring an adapter version the verifier lacks.
        ok = generate(specialist, "Hello", SessionParams(), DecodeOptions(max_new_tokens=5), verifier)
        with pytest.raises(ProtocolError, match="adapter v3"):
            generate(specialist, "Hello", SessionParams(adapter_version=3), DecodeOptions(max_new_tokens=5), verifier)
        verifier.close()
    # Assert: both sessions are on record with an end, and the whole log verifies.
    assert ok.stats.fallback is None
    report = verify(tmp_path / "log", key=key.verifier).as_dict()
    assert report["ok"] and report["sessions"] == 2
    ends = [records.parse(r.data).fields for r in scan_log(tmp_path / "log").records]
    assert any(f.get("reason") == "protocol-error" for f in ends)

"""Issue 47, Build 6: a fleet's replicas name their transcripts, and `audit verify` takes their folder.

Each replica (`server serve --replica NAME`) writes `server-transcript.NAME.jsonl` with its name in
the header; a restarted replica appends to its own file and refuses another's. An auditor handed
the fleet's transcript folder compares every replica's transcript and is told which replicas it saw.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specsteer.audit.cli import main
from specsteer.audit.errors import AuditError
from specsteer.audit.note import load_verifier_key, write_key_pair
from specsteer.audit.transcript import ServerTranscript, read_transcript, transcript_files, transcript_name
from specsteer.audit.verify import verify
from specsteer.core.errors import ConfigError
from specsteer.core.session_types import SessionParams
from specsteer.sdk.audited import open_audit_tap
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.server.config import ServerConfig
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import make_pki, remote, serve


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "transcripts"
    folder.mkdir(mode=0o700)
    return folder


def test_a_replica_names_its_file_and_header_and_reopens_only_its_own(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    path = folder / transcript_name("r1")
    assert path.name == "server-transcript.r1.jsonl"
    with ServerTranscript.open(path, replica="r1") as t:
        t.begin_stream("s1", "alice", "a" * 64)
    assert json.loads(path.read_text().splitlines()[0]) == {"format": "specsteer-server-transcript/2", "replica": "r1"}
    assert read_transcript(path).replica == "r1" and not read_transcript(path).problems
    # A restart of r1 appends to its file; r2, or an unnamed server, must not write into it.
    with ServerTranscript.open(path, replica="r1"):
        pass
    for other in ("r2", None):
        with pytest.raises(AuditError, match=r"replica r1's transcript"):
            ServerTranscript.open(path, replica=other)
    with pytest.raises(AuditError, match="replica name"):
        transcript_name("../r1")
    with pytest.raises(ConfigError, match="replica must be"):
        ServerConfig(replica="r.1")


def test_a_folder_of_replica_transcripts_verifies_a_device_served_by_two_replicas(
    tmp_path: Path, char_tok, capsys
) -> None:
    # Prepare: two replicas (real TLS verifiers) writing into one transcript folder; alice's
    # audited sessions go to r0, then r1.
    specialist = Specialist(tiny_lm(char_tok, seed=1))
    generalist = tiny_lm(char_tok, seed=2)
    pki = make_pki(tmp_path)
    folder = _folder(tmp_path)
    private, public = write_key_pair("device.test/fleet", tmp_path / "keys")
    key = load_verifier_key(public)
    with open_audit_tap(tmp_path / "log", private, cert=pki.device_cert("alice")) as tap:
        for replica in ("r0", "r1"):
            cloud = CloudVerifier(generalist, specialist.lm, seed=0)
            with serve(cloud, pki, transcript_dir=folder, replica=replica) as (_, port):
                with remote(port, pki, vocab_size=specialist.lm.vocab_size, tap=tap) as verifier:
                    out = generate(specialist, "Hi", SessionParams(), DecodeOptions(max_new_tokens=4), verifier)
                assert out.stats.fallback is None
    assert [p.name for p in transcript_files(folder)] == ["server-transcript.r0.jsonl", "server-transcript.r1.jsonl"]
    # Execute + Assert: the folder verifies, and the report names both replicas.
    report = verify(tmp_path / "log", key=key, server_transcript=folder, device="alice")
    (check,) = [c for c in report.checks if c.name == "server transcript"]
    assert "2 server stream(s) of this device match" in check.summary
    assert any("replica r0 (1 stream(s) of this device), replica r1 (1 stream(s)" in n for n in check.notes)
    assert main(["verify", str(tmp_path / "log"), "--key", str(public), "--server-transcript", str(folder)]) == 0
    assert "replica r0" in capsys.readouterr().out
    # One replica's transcript alone is not the whole: the session r1 served has no stream there.
    from specsteer.audit.verify import inspect

    one = inspect(tmp_path / "log", key=key, server_transcript=transcript_files(folder)[0], device="alice")
    (check,) = [c for c in one.checks if c.name == "server transcript"]
    assert not check.ok and any("replica r0 (1" in n for n in check.notes), check.failures


def test_audit_verify_cli_takes_a_folder_and_refuses_one_without_transcripts(tmp_path: Path, capsys) -> None:
    # The CLI path: an empty folder is one sentence and exit 1, not "no stream reached the server".
    from tests.audit.helpers import build_log

    built = build_log(tmp_path, sessions=1)
    empty = _folder(tmp_path)
    pub = tmp_path / "device.pub"
    pub.write_text(f"{built.key.verifier}\n")
    assert main(["verify", str(built.directory), "--key", str(pub), "--server-transcript", str(empty)]) == 1
    err = capsys.readouterr().err
    assert "holds no server transcript" in err and "Traceback" not in err
    os.rmdir(empty)

"""`privacy leakage-report` against crafted audit logs: the wrong tokenizer, what the guard's
detectors find, counts across rejected drafts, transcripts that match nothing, the prompt."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerFast

from specsteer.audit.log import AuditLog
from specsteer.audit.note import SigningKey
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.transcript import ServerTranscript
from specsteer.core import wire
from specsteer.core.session_types import SessionParams, SteeringVector, Verdict
from specsteer.privacy.cli import main
from specsteer.privacy.errors import PrivacyError
from specsteer.privacy.report import leakage_report
from tests.privacy.test_protocol import FIXTURES

Round = tuple[list[int], list[int], int]  # commit, draft, accepted


def write_log(path: Path, vocab_size: int, prompt: Sequence[int], rounds: Sequence[Round]) -> None:
    """One session through the device's own recorder: the Open, each round and its verdict, the Close."""
    with AuditLog.open(path, SigningKey.generate("device.test/report")) as log:
        rec = EgressRecorder(log)
        sid = rec.begin_session(vocab_size=vocab_size, max_top_k=4)
        rec.on_uplink(sid, wire.encode_open(list(prompt), SessionParams(top_k=4, draft_len=32)))
        for seq, (commit, draft, accepted) in enumerate(rounds, start=1):
            rec.on_uplink(sid, wire.encode_round(seq, commit, draft, []))
            nxt = rounds[seq][0][:1] if seq < len(rounds) and rounds[seq][0] else [1]
            steer = SteeringVector((tuple(nxt),), (0.0,))
            rec.on_downlink(sid, wire.encode_downlink(seq, Verdict(accepted, steer)))
        rec.on_uplink(sid, wire.encode_close(len(rounds) + 1))


def sent(tok: PreTrainedTokenizerFast, text: str) -> list[Round]:
    """`text` uplinked in accepted drafts of 16 tokens."""
    ids = tok.encode(text, add_special_tokens=False)
    return [([], ids[i : i + 16], len(ids[i : i + 16])) for i in range(0, len(ids), 16)]


def test_a_log_of_another_tokenizer_is_refused(
    tmp_path: Path, char_tok: PreTrainedTokenizerFast, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log written by a 49,152-token Specialist decoded with the 100-token char tokenizer would
    be another text: refused in one sentence, exit 1, not a clean report."""
    write_log(tmp_path / "big", 49152, [5, 6], [([], [40000, 30000, 7], 3)])
    with pytest.raises(PrivacyError, match="vocabulary of 49152 tokens"):
        leakage_report(data=FIXTURES, audit_log=tmp_path / "big", tokenizer=char_tok)
    # A size within an embedding's padding, but an ID past the tokenizer's end.
    write_log(tmp_path / "ids", len(char_tok) + 64, [5], [([], [len(char_tok) + 3], 1)])
    with pytest.raises(PrivacyError, match="past this tokenizer"):
        leakage_report(data=FIXTURES, audit_log=tmp_path / "ids", tokenizer=char_tok)
    tok_dir = tmp_path / "tok"
    char_tok.save_pretrained(str(tok_dir))
    args = ["leakage-report", "--data", str(FIXTURES), "--audit-log", str(tmp_path / "big")]
    args += ["--tokenizer", str(tok_dir)]
    assert main(args) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    # The log's own tokenizer still gives a report.
    write_log(tmp_path / "ok", len(char_tok), [5], sent(char_tok, "hello there"))
    assert leakage_report(data=FIXTURES, audit_log=tmp_path / "ok", tokenizer=char_tok)["sessions"] == 1


def _user(tmp_path: Path) -> Path:
    history = [
        {"subject": "Deploy notes", "body": "the staging DB password: Tr0ub4dor&3x! (rotate monthly)."},
        {"subject": "HR form", "body": "my social security number 536-22-8471 for the payroll form"},
    ]
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps({"user_id": "u77", "profile": history}) + "\n")
    return path


def test_the_report_runs_the_guards_detectors(tmp_path: Path, char_tok: PreTrainedTokenizerFast) -> None:
    """A history password copied into an uplink and an SSN: the personal-data patterns alone
    see neither; the guard's detectors (history secrets, recognizers) see both, by kind."""
    write_log(
        tmp_path / "log", len(char_tok), [5], sent(char_tok, "the password is Tr0ub4dor&3x! and SSN 536-22-8471 ok")
    )
    r = leakage_report(data=_user(tmp_path), audit_log=tmp_path / "log", tokenizer=char_tok)
    assert r["detector_hits"] == {"national-id": 1, "secret": 1}


def test_a_transcript_that_drops_uplinks_is_said(
    tmp_path: Path, char_tok: PreTrainedTokenizerFast, capsys: pytest.CaptureFixture[str]
) -> None:
    """A transcript that matches none of the log's uplinks is refused (not an empty report, exit
    0); one that holds only some gives a note with the share."""
    write_log(tmp_path / "log", len(char_tok), [5], sent(char_tok, "hello there"))
    other = tmp_path / "other.jsonl"
    with ServerTranscript.open(other, durable=False) as server:
        server.begin_stream("s1", "device", "0" * 64)
        server.record_uplink("s1", b"not an uplink of this log")
    with pytest.raises(PrivacyError, match="holds none of the 3 uplinks"):
        leakage_report(data=FIXTURES, audit_log=tmp_path / "log", tokenizer=char_tok, server_transcript=other)
    tok_dir = tmp_path / "tok"
    char_tok.save_pretrained(str(tok_dir))
    args = ["leakage-report", "--data", str(FIXTURES), "--audit-log", str(tmp_path / "log")]
    assert main([*args, "--tokenizer", str(tok_dir), "--server-transcript", str(other)]) == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    # Only the Open arrived.
    some = tmp_path / "some.jsonl"
    with ServerTranscript.open(some, durable=False) as server:
        server.begin_stream("s1", "device", "0" * 64)
        server.record_uplink("s1", wire.encode_open([5], SessionParams(top_k=4, draft_len=32)))
    r = leakage_report(data=FIXTURES, audit_log=tmp_path / "log", tokenizer=char_tok, server_transcript=some)
    assert r["sessions"] == 1 and r["rounds"] == 0
    assert "holds 1 of the log's 3 uplinks (33%)" in " ".join(r["problems"])


def test_rejected_drafts_do_not_count_their_repeated_context_again(
    tmp_path: Path, char_tok: PreTrainedTokenizerFast
) -> None:
    """ "Test User One" went up once; two rejected drafts after it repeat it as their context: one
    name and one verbatim run, not three."""

    def enc(text: str) -> list[int]:
        return char_tok.encode(text, add_special_tokens=False)

    rounds = [([], enc("Thanks, Test User One"), 21), (enc("."), enc(" ok"), 0), (enc("!"), enc(" bye"), 0)]
    write_log(tmp_path / "log", len(char_tok), [5], rounds)
    trailers = ["Signed-off-by: Test User One <t@x.org>"]
    history = [{"subject": "x", "body": "Thanks, Test User One", "trailers": trailers}]
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"user_id": "u1", "profile": history}) + "\n")
    r = leakage_report(data=data, audit_log=tmp_path / "log", tokenizer=char_tok, ngram=8)
    assert r["identity_hits"] == {"name": 1} and r["detector_hits"].get("name") == 1
    assert r["verbatim_runs"]["runs"] == 1 and r["verbatim_runs"]["tokens"] == 21


def test_the_prompt_the_cloud_received_is_scanned(tmp_path: Path, char_tok: PreTrainedTokenizerFast) -> None:
    """The Open's prompt goes up as it is: an SSN in it is reported, apart from the device's text."""
    prompt = char_tok.encode("payroll: SSN 536-22-8471, fix the form", add_special_tokens=False)
    write_log(tmp_path / "log", len(char_tok), prompt, sent(char_tok, "done"))
    r = leakage_report(data=_user(tmp_path), audit_log=tmp_path / "log", tokenizer=char_tok)
    assert r["prompt_hits"] == {"national-id": 1} and r["detector_hits"] == {}
    # No device decision put it there: a prompt guard that was off, or missed it (#49, finding 6).
    assert r["prompt_decisions"] == {} and r["prompt_hits_unaccounted"] == {"national-id": 1}


def test_bits_about_the_session_is_not_a_number_for_one_session(
    tmp_path: Path, char_tok: PreTrainedTokenizerFast, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rounds of very different sizes in one session: "0.000 bits" would read as a closed channel."""
    rounds = [([], [10] * 8, 8), ([1], [11], 1), ([1], [12] * 8, 8)]
    write_log(tmp_path / "log", len(char_tok), [5], rounds)
    tok_dir = tmp_path / "tok"
    char_tok.save_pretrained(str(tok_dir))
    args = ["leakage-report", "--data", str(FIXTURES), "--audit-log", str(tmp_path / "log")]
    assert main([*args, "--tokenizer", str(tok_dir)]) == 0
    assert "bits about the session: n/a (one session)" in capsys.readouterr().out


def test_a_secret_split_over_two_rejected_drafts_is_found(tmp_path: Path, char_tok: PreTrainedTokenizerFast) -> None:
    """#49 finding 7a: "Fjordlys" in one rejected draft, "-2291" in a later one: neither is a span
    alone, but the cloud received the whole secret; the report counts it, and across sessions."""
    history = [{"subject": "Cabin", "body": "Wifi at the cabin: password is Fjordlys-2291. Router on."}]
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"user_id": "u1", "profile": history}) + "\n")
    ids = lambda text: char_tok.encode(text, add_special_tokens=False)  # noqa: E731
    write_log(tmp_path / "log", len(char_tok), [5], [([], ids("ok, Fjordlys"), 4), (ids(" "), ids("x-2291 y"), 1)])
    r = leakage_report(data=data, audit_log=tmp_path / "log", tokenizer=char_tok)
    assert r["detector_hits"] == {} and r["pattern_hits"] == {}  # no one view holds a span
    assert r["split_hits"] == {"secret": 1}
    # The clean control: the same rounds without the secret's pieces.
    write_log(tmp_path / "clean", len(char_tok), [5], [([], ids("ok, Fjord is"), 4), (ids(" "), ids("x-22 y"), 1)])
    assert leakage_report(data=data, audit_log=tmp_path / "clean", tokenizer=char_tok)["split_hits"] == {}

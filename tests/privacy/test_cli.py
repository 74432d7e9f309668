"""`privacy budget`, `privacy leakage-report` and `privacy seal`, through `main()` and their functions."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from transformers import PreTrainedTokenizerFast

from specsteer.audit.log import AuditLog
from specsteer.audit.note import SigningKey
from specsteer.audit.recorder import EgressRecorder
from specsteer.audit.transcript import ServerTranscript
from specsteer.core.session_types import SessionParams
from specsteer.privacy.cli import main
from specsteer.privacy.data import Canary, read_uplinks, write_canaries
from specsteer.privacy.guard import GuardPolicy
from specsteer.privacy.leakage import CanarySpace
from specsteer.privacy.report import leakage_report
from specsteer.privacy.vault import ENV_PASSPHRASE, PassphraseKeyProvider, ProfileVault
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.server.session import CloudVerifier
from tests.privacy.test_protocol import FIXTURES, build_guard, candidates, copying_pair, leaky_target, prompt_of
from tests.verifier_harness import make_pki, remote, serve

# -- budget ----------------------------------------------------------------------------------------


def write_ledger(folder: Path, *, history: list[list[float]], stored: float | None = None) -> float:
    from specsteer.federation.budget_ledger import epsilon_of

    folder.mkdir(parents=True, exist_ok=True)
    eps = epsilon_of([(h[0], h[1], int(h[2])) for h in history], 1e-5, "rdp")
    data = {
        "format": 1,
        "epsilon_budget": 8.0,
        "delta": 1e-5,
        "accountant": "rdp",
        "epsilon_spent": eps if stored is None else stored,
        "history": history,
        "rounds": [{"run_id": 1, "server_round": 1, "time": 1_700_000_000.0}] * (1 if history else 0),
        "refusals": 2,
    }
    (folder / "ledger.json").write_text(json.dumps(data))
    return eps


def test_budget_lists_every_device_with_recomputed_epsilon(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    eps_a = write_ledger(tmp_path / "devices" / "u00", history=[[1.1, 0.05, 40]])
    write_ledger(tmp_path / "devices" / "u01", history=[])
    assert main(["budget", "--state-dir", str(tmp_path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["devices"]
    assert [r["device"] for r in rows] == ["u00", "u01"]
    a = rows[0]
    assert a["recomputed"] and a["consistent"] and a["epsilon_spent"] == pytest.approx(eps_a)
    assert 0 < eps_a < 8 and a["epsilon_remaining"] == pytest.approx(8 - eps_a)
    assert a["dp_rounds"] == 1 and a["dp_steps"] == 40 and a["refusals"] == 2
    assert rows[1]["epsilon_spent"] == 0.0

    write_ledger(tmp_path / "device-u02", history=[[1.1, 0.05, 10]])  # a SuperNode's default folder
    assert main(["budget", "--state-dir", str(tmp_path), "--json"]) == 0
    assert [r["device"] for r in json.loads(capsys.readouterr().out)["devices"]] == ["device-u02", "u00", "u01"]

    assert main(["budget", "--state-dir", str(tmp_path), "--device", "u00"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("u00: ε ") and "of 8 spent" in line and "2 refusal(s)" in line


def test_budget_flags_a_stored_total_that_does_not_match_the_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_ledger(tmp_path, history=[[1.1, 0.05, 40]], stored=0.01)  # a device folder given directly
    assert main(["budget", "--state-dir", str(tmp_path)]) == 0
    assert "the ledger's stored total says 0.010" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "cannot read the privacy ledger"),
        ('{"format": 2}', "damaged: format 2"),
        ('{"format": 1, "epsilon_budget": -1}', "damaged: epsilon_budget"),
        (
            '{"format": 1, "epsilon_budget": 8, "delta": 1e-5, "epsilon_spent": 0, "accountant": "rdp",'
            ' "history": [[1, 2]], "rounds": []}',
            "history entry",
        ),
    ],
)
def test_budget_damaged_ledger_is_one_sentence_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    (tmp_path / "ledger.json").write_text(content)
    assert main(["budget", "--state-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_budget_without_ledgers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["budget", "--state-dir", str(tmp_path)]) == 1
    assert "no device privacy ledgers" in capsys.readouterr().err
    assert main(["budget", "--state-dir", str(tmp_path), "--device", "ghost"]) == 1
    assert "no device 'ghost'" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["leakage-report"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2


# -- leakage report ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory, char_tok: PreTrainedTokenizerFast) -> dict[str, Path]:
    """Two device audit logs of the same leaky text, guard off (the control) and guard on, written
    by the real device loop over mutual TLS to a real verifier that keeps a transcript; and the
    canary file. The Specialist copies the text; the cloud accepts every draft (`test_protocol`)."""
    root = tmp_path_factory.mktemp("leak")
    space = CanarySpace()
    secret = space.sample(np.random.default_rng(7))[0]
    canary = space.render(secret)
    write_canaries(root / "canaries.json", space, [Canary("u04", secret)])
    text, _, _ = leaky_target(0, canary)
    target = char_tok.encode(text, add_special_tokens=False)
    prompt = prompt_of(0)
    specialist, cloud = copying_pair(char_tok, target, prompt)
    params = SessionParams(top_k=candidates(char_tok, target))
    options = DecodeOptions(max_new_tokens=len(target) + 1)
    key = SigningKey.generate("device.test/privacy")
    pki = make_pki(root)
    verifier = CloudVerifier(cloud, cloud, seed=0, max_top_k=params.top_k)
    with serve(verifier, pki, transcript_dir=root / "transcript") as (_, port):
        for label, guard in (("off", None), ("on", build_guard(char_tok, 0, canary, GuardPolicy.PLACEHOLDER))):
            with (
                AuditLog.open(root / label, key) as log,
                remote(port, pki, vocab_size=specialist.vocab_size, tap=EgressRecorder(log)) as device,
            ):
                out = generate(Specialist(specialist), prompt, params, options, device, guard=guard)
            assert out.token_ids == target and out.stats.fallback is None
    return {
        "root": root,
        "canaries": root / "canaries.json",
        "transcript": root / "transcript" / "server-transcript.jsonl",
    }


def report(which: str, planted: dict[str, Path], tok: PreTrainedTokenizerFast, **kw: object) -> dict:
    return leakage_report(
        data=FIXTURES,
        audit_log=planted["root"] / which,
        tokenizer=tok,
        canaries=planted["canaries"],
        user="u04",
        **kw,  # type: ignore[arg-type]
    )


def test_leaky_control_shows_the_leak(planted: dict[str, Path], char_tok: PreTrainedTokenizerFast) -> None:
    r = report("off", planted, char_tok)
    assert r["sessions"] == 1 and r["rounds"] > 50
    assert r["identity_hits"]["email"] >= 2 and r["identity_hits"]["name"] >= 1
    assert r["pattern_hits"]["phone"] == 1 and r["pattern_hits"]["email"] >= 2
    assert r["verbatim_runs"]["runs"] >= 1 and r["verbatim_runs"]["tokens"] >= 50
    (c,) = r["canaries"]
    assert c["verbatim"] and c["exposure"] == pytest.approx(c["max_exposure"])
    assert r["guard_decisions"] == {}


def test_guard_on_report_shows_no_leak(planted: dict[str, Path], char_tok: PreTrainedTokenizerFast) -> None:
    r = report("on", planted, char_tok, server_transcript=planted["transcript"])
    assert r["identity_hits"] == {} and r["pattern_hits"] == {}
    assert r["verbatim_runs"]["runs"] == 0
    (c,) = r["canaries"]
    assert not c["verbatim"] and c["exposure"] < 4.0
    assert r["guard_decisions"]["placeholder/<SECRET>"] == 1
    assert r["guard_decisions"]["placeholder/<PHONE>"] == 1
    assert r["problems"] == []


def test_leakage_report_ranks_a_partly_leaked_canary_exactly(
    tmp_path: Path, char_tok: PreTrainedTokenizerFast, capsys: pytest.CaptureFixture[str]
) -> None:
    """Four of the six digits went up. The 100 secrets that start with them tie with the canary
    (rank 50.5 of 10^6, 14.27 bits); 2,000 sampled rivals would almost never hold one of them
    and would put the canary at the 19.93-bit maximum."""
    space = CanarySpace()
    write_canaries(tmp_path / "canaries.json", space, [Canary("u04", "402913")])
    # The real device loop writes the log: the Specialist copies a text that holds four of the digits.
    target = char_tok.encode("Fixed the flaky test; my PIN is 4029 (cut here).", add_special_tokens=False)
    prompt = "t4014: support Git version strings"
    specialist, cloud = copying_pair(char_tok, target, prompt)
    params = SessionParams(top_k=candidates(char_tok, target))
    pki = make_pki(tmp_path)
    with (
        serve(CloudVerifier(cloud, cloud, seed=0, max_top_k=params.top_k), pki) as (_, port),
        AuditLog.open(tmp_path / "log", SigningKey.generate("device.test/privacy")) as log,
        remote(port, pki, vocab_size=specialist.vocab_size, tap=EgressRecorder(log)) as device,
    ):
        out = generate(Specialist(specialist), prompt, params, DecodeOptions(max_new_tokens=len(target) + 1), device)
    assert out.token_ids == target
    exact = math.log2(space.size) - math.log2(1 + 99 / 2)
    r = leakage_report(
        data=FIXTURES, audit_log=tmp_path / "log", tokenizer=char_tok, canaries=tmp_path / "canaries.json", user="u04"
    )
    (c,) = r["canaries"]
    assert c["exposure"] == pytest.approx(exact) and not c["verbatim"]
    # The command line reports the same exact number.
    tok_dir = tmp_path / "tok"
    char_tok.save_pretrained(str(tok_dir))
    args = ["leakage-report", "--data", str(FIXTURES), "--audit-log", str(tmp_path / "log"), "--user", "u04"]
    args += ["--canaries", str(tmp_path / "canaries.json"), "--tokenizer", str(tok_dir), "--json"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["canaries"][0]["exposure"] == pytest.approx(exact)


def test_uplinks_the_server_never_received_are_not_counted(
    planted: dict[str, Path], tmp_path: Path, char_tok: PreTrainedTokenizerFast
) -> None:
    transcript = tmp_path / "partial.jsonl"
    full = read_uplinks(planted["root"] / "on")
    with ServerTranscript.open(transcript, durable=False) as server:
        server.begin_stream("s1", "device", "0" * 64)
        server.record_uplink("s1", b"not an uplink of this log")
    partial = read_uplinks(planted["root"] / "on", server_transcript=transcript)
    assert full.sessions and not partial.sessions


def test_leakage_report_cli(
    planted: dict[str, Path], tmp_path: Path, char_tok: PreTrainedTokenizerFast, capsys: pytest.CaptureFixture[str]
) -> None:
    tok_dir = tmp_path / "tok"
    char_tok.save_pretrained(str(tok_dir))
    args = ["leakage-report", "--data", str(FIXTURES), "--audit-log", str(planted["root"] / "off")]
    args += [
        "--canaries",
        str(planted["canaries"]),
        "--user",
        "u04",
        "--tokenizer",
        str(tok_dir),
    ]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["canaries"][0]["verbatim"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "identity hits" in out and "canary of u04: exposure" in out
    assert main([*args[:-4], "--user", "nobody", "--tokenizer", str(tok_dir)]) == 1
    assert "no user 'nobody'" in capsys.readouterr().err
    assert (
        main(["leakage-report", "--data", str(FIXTURES), "--audit-log", str(tmp_path), "--tokenizer", str(tok_dir)])
        == 1
    )
    assert "not an audit log" in capsys.readouterr().err


# -- seal ------------------------------------------------------------------------------------------


def test_seal_encrypts_a_profile_with_the_passphrase_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "me.json"
    profile.write_text(FIXTURES.read_text().splitlines()[0])
    out = tmp_path / "me.vault"
    monkeypatch.setenv(ENV_PASSPHRASE, "pw for the test")
    monkeypatch.setattr("specsteer.privacy.vault.SCRYPT_N", 2**14)
    assert main(["seal", str(profile), "--out", str(out)]) == 0
    assert "sealed 25 entries" in capsys.readouterr().err
    assert ProfileVault.open(out, PassphraseKeyProvider("pw for the test")) == profile.read_bytes()
    assert b"Test User One" not in out.read_bytes()


def test_seal_refuses_without_a_passphrase_or_with_a_bad_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(ENV_PASSPHRASE, raising=False)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    profile = tmp_path / "me.json"
    profile.write_text(FIXTURES.read_text().splitlines()[0])
    assert main(["seal", str(profile), "--out", str(tmp_path / "v")]) == 1
    assert "no passphrase" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("[1]")
    monkeypatch.setenv(ENV_PASSPHRASE, "x")
    assert main(["seal", str(tmp_path / "bad.json"), "--out", str(tmp_path / "v")]) == 1
    assert "Cannot read profile" in capsys.readouterr().err
    assert not (tmp_path / "v").exists()


def test_seal_refuses_an_existing_vault_unless_forced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Sealing over an existing vault destroyed it silently (the profile sealed in it, maybe under
    another passphrase, gone): refused in one sentence, exit 1, the file untouched; --force replaces it."""
    profile = tmp_path / "me.json"
    profile.write_text(FIXTURES.read_text().splitlines()[0])
    out = tmp_path / "me.vault"
    monkeypatch.setenv(ENV_PASSPHRASE, "pw for the test")
    monkeypatch.setattr("specsteer.privacy.vault.SCRYPT_N", 2**14)
    assert main(["seal", str(profile), "--out", str(out)]) == 0
    first = out.read_bytes()
    capsys.readouterr()
    assert main(["seal", str(profile), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == f"privacy: {out} already exists; give --force to replace it\n"
    assert out.read_bytes() == first
    monkeypatch.setenv(ENV_PASSPHRASE, "a new passphrase")
    assert main(["seal", str(profile), "--out", str(out), "--force"]) == 0
    assert out.read_bytes() != first
    assert ProfileVault.open(out, PassphraseKeyProvider("a new passphrase")) == profile.read_bytes()


def test_seal_refuses_a_vault_and_canaries_are_written_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Sealing a vault again made a file that opens to ciphertext, not a profile: refused; the
    canary file holds the secrets an exposure test looks for: written 0600."""
    profile = tmp_path / "me.json"
    profile.write_text(FIXTURES.read_text().splitlines()[0])
    monkeypatch.setenv(ENV_PASSPHRASE, "pw for the test")
    monkeypatch.setattr("specsteer.privacy.vault.SCRYPT_N", 2**14)
    assert main(["seal", str(profile), "--out", str(tmp_path / "me.vault")]) == 0
    capsys.readouterr()
    assert main(["seal", str(tmp_path / "me.vault"), "--out", str(tmp_path / "again.vault")]) == 1
    err = capsys.readouterr().err
    assert "already a sealed vault" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "again.vault").exists()
    write_canaries(tmp_path / "canaries.json", CanarySpace(), [Canary("u04", "402913")])
    assert (tmp_path / "canaries.json").stat().st_mode & 0o777 == 0o600


def test_leakage_report_reads_a_sealed_data_file_and_refuses_a_wrong_passphrase(
    planted: dict[str, Path],
    tmp_path: Path,
    char_tok: PreTrainedTokenizerFast,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue #49, finding 7: a `--data` file sealed with `privacy seal` failed with a raw "'utf-8'
    codec can't decode byte"; it is opened with the passphrase the environment gives, as every
    sealed file is, and a wrong passphrase is one sentence and exit 1."""
    monkeypatch.setattr("specsteer.privacy.vault.SCRYPT_N", 2**14)
    sealed = tmp_path / "data.vault"
    ProfileVault.seal(FIXTURES.read_bytes(), sealed, PassphraseKeyProvider("pw for the data", n=2**14))
    tok_dir = tmp_path / "tok"
    char_tok.save_pretrained(str(tok_dir))
    args = ["leakage-report", "--audit-log", str(planted["root"] / "off"), "--user", "u04"]
    args += ["--canaries", str(planted["canaries"]), "--tokenizer", str(tok_dir), "--json"]
    assert main([*args, "--data", str(FIXTURES)]) == 0
    plain = json.loads(capsys.readouterr().out)
    monkeypatch.setenv(ENV_PASSPHRASE, "pw for the data")
    assert main([*args, "--data", str(sealed)]) == 0
    assert json.loads(capsys.readouterr().out) == plain
    monkeypatch.setenv(ENV_PASSPHRASE, "not the passphrase")
    assert main([*args, "--data", str(sealed)]) == 1
    err = capsys.readouterr().err
    assert "sealed with another passphrase" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    monkeypatch.delenv(ENV_PASSPHRASE)
    assert main([*args, "--data", str(sealed)]) == 1
    err = capsys.readouterr().err
    assert ENV_PASSPHRASE in err and len(err.strip().splitlines()) == 1


def test_privacy_quiet_drops_what_seal_wrote_and_keeps_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #46: `--quiet` on privacy as on sdk and federation."""
    # Prepare
    profile = tmp_path / "me.json"
    profile.write_text(FIXTURES.read_text(encoding="utf-8").splitlines()[0], encoding="utf-8")
    monkeypatch.setenv(ENV_PASSPHRASE, "pw for the test")
    monkeypatch.setattr("specsteer.privacy.vault.SCRYPT_N", 2**14)
    # Execute / Assert
    assert main(["seal", str(profile), "--out", str(tmp_path / "a.vault")]) == 0
    assert capsys.readouterr().err.startswith("privacy: sealed 25 entries into ")
    assert main(["seal", str(profile), "--out", str(tmp_path / "b.vault"), "--quiet"]) == 0
    assert capsys.readouterr().err == "" and (tmp_path / "b.vault").is_file()
    assert main(["seal", str(profile), "--out", str(tmp_path / "b.vault"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "already exists; give --force" in err and err.count("\n") == 1

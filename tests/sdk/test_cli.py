"""`sdk generate` / `python -m demo` in-process: JSON output, and one clear sentence for every bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from demo.cli import main as demo_main
from specsteer.sdk.cli import main
from tests.tinymodels import save_tiny

STATS_KEYS = {
    "rounds",
    "drafted",
    "accepted",
    "acceptance_rate",
    "recoveries",
    "uplink_bytes",
    "downlink_bytes",
    "new_tokens",
    "seconds",
}


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory, char_tok) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("models")
    return save_tiny(root, char_tok, seed=1, name="s"), save_tiny(root, char_tok, seed=2, name="g")


@pytest.fixture
def models_args(model_dirs) -> list[str]:
    return ["--specialist", str(model_dirs[0]), "--generalist", str(model_dirs[1])]


def gen(*args: str) -> list[str]:
    return ["generate", "--max-new-tokens", "8", *args]


@pytest.mark.parametrize("method", ["specsteer", "slm", "slm-rag", "llm", "sd", "fusion"])
def test_generate_json_for_every_method(capsys, models_args, method) -> None:
    # Execute
    code = main(gen("--prompt", "Hello", "--method", method, "--json", *models_args))
    # Assert
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert set(out) >= {"text", "token_ids", "stats"}
    assert set(out["stats"]) >= STATS_KEYS
    assert out["stats"]["new_tokens"] == len(out["token_ids"]) <= 8
    assert (out["stats"]["uplink_bytes"] > 0) == (method not in ("slm", "slm-rag"))


def test_generate_under_the_form_rule_keeps_at_least_the_drafts_the_papers_rule_keeps(capsys, models_args) -> None:
    runs = {}
    for extra in ([], ["--gamma-form", "0"]):
        assert main(gen("--prompt", "Hello, world.", "--json", "--no-bonus", *extra, *models_args)) == 0
        runs[bool(extra)] = json.loads(capsys.readouterr().out)["stats"]
    assert runs[True]["accepted"] >= runs[False]["accepted"]


def test_generate_with_profile_and_sampling(capsys, models_args, tmp_path) -> None:
    fixtures = Path(__file__).parents[1] / "fixtures" / "users.jsonl"
    profile = tmp_path / "me.json"
    profile.write_text(fixtures.read_text().splitlines()[0])
    args = ["--prompt", "refs: speed up", "--sampling", "--seed", "3", "--temperature", "0.7", "--json"]
    code = main(gen(*args, *models_args, "--profile", str(profile)))
    assert code == 0
    assert json.loads(capsys.readouterr().out)["stats"]["new_tokens"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prompt", "Hi", "--specialist", "/nonexistent/model"], "does not exist"),
        (["--prompt", "   "], "prompt is empty"),
        (["--prompt", "Hi", "--gamma", "-1"], "gamma"),
        (["--prompt", "Hi", "--top-k", "0"], "top-k"),
        (["--prompt", "Hi", "--draft-len", "99"], "draft length"),
        (["--prompt", "Hi", "--alpha", "11"], "alpha"),
        (["--prompt", "Hi", "--temperature", "0", "--sampling"], "temperature"),
        # Settings the run would have dropped without a word: refused, naming them.
        (["--prompt", "Hi", "--temperature", "5"], "--temperature is for sampled decoding: add --sampling"),
        (["--prompt", "Hi", "--seed", "7"], "--seed is for sampled decoding: add --sampling"),
        (
            ["--prompt", "Hi", "--method", "llm", "--draft-len", "8"],
            "decides every token in the cloud: draft length K must be 0",
        ),
        (["--prompt", "Hi", "--method", "llm", "--alpha", "3"], "alpha must be 0"),
        (["--prompt", "Hi", "--connect-timeout", "5"], "--connect-timeout is for a remote verifier"),
        (["--prompt", "Hi", "--no-fallback"], "--no-fallback is for a remote verifier"),
        (["--prompt", "Hi", "--audit-key", "device.key"], "--audit-key is for a remote verifier"),
        (["--prompt", "Hi", "--max-new-tokens", "0"], "max-new-tokens"),
        (["--prompt", "Hi", "--method", "sd", "--sampling"], "greedy mode only"),
        (["--prompt", "Hi", "--method", "llm", "--gamma-form", "0.1"], "the form rule is part of specsteer's"),
        (["--prompt", "Hi", "--gamma-form", "2000"], "gamma_form must be in [0, 1000]"),
        (["--prompt", "Hi", "--no-repeat-ngram", "1"], "no_repeat_ngram must be 0 (off) or a length of 2"),
    ],
)
def test_bad_input_is_one_sentence_and_exit_1(capsys, models_args, args, message) -> None:
    extra = [] if "--specialist" in args else models_args
    code = main(gen(*args, *extra))
    err = capsys.readouterr().err
    assert code == 1
    assert message in err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("sdk: error: ")


def test_malformed_profile_is_a_clear_error(capsys, models_args, tmp_path) -> None:
    bad = tmp_path / "profile.json"
    bad.write_text('{"profile": [{"subject": 3}]}')
    code = main(gen("--prompt", "Hi", "--profile", str(bad), *models_args))
    err = capsys.readouterr().err
    assert code == 1 and "profile" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--method", "beam"], "invalid choice"), (["--gamma", "x"], "number"), (["--seed", "-1"], "at least 0")],
)
def test_usage_errors_exit_2(capsys, args, message) -> None:
    with pytest.raises(SystemExit) as exc:
        main(gen("--prompt", "Hi", *args))
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_demo_runs_the_shipped_demo_user(capsys, models_args, tmp_path) -> None:
    # Over TLS by default: a throwaway PKI and a `server serve` process on loopback; an audit log
    # of the session, verified at the end against the server's transcript.
    code = demo_main(["--max-new-tokens", "6", "--audit-dir", str(tmp_path / "audit"), *models_args])
    captured = capsys.readouterr()
    assert code == 0
    assert "Prompt (public)" in captured.out and "acceptance_rate" in captured.out
    assert "fallback: None" in captured.out  # the verifier answered: nothing was finished locally
    assert "mutual TLS" in captured.err and "verifier stopped" in captured.err
    assert "VERIFIED" in captured.out.upper() and "server transcript" in captured.out.lower()
    assert "cosignature(s) by demo-verifier/witness" in captured.out  # the verifier cosigned the log
    assert (tmp_path / "audit" / "log").is_dir() and (tmp_path / "audit" / "demo-device.pub").is_file()


def test_demo_in_process_keeps_the_old_path(capsys, models_args) -> None:
    code = demo_main(["--in-process", "--max-new-tokens", "6", "--json", *models_args])
    captured = capsys.readouterr()
    out = json.loads(captured.out.splitlines()[-1])
    assert code == 0 and out["stats"]["uplink_bytes"] > 0 and out["stats"]["fallback"] is None
    assert "mutual TLS" not in captured.err


def test_demo_query_out_of_range(capsys, models_args) -> None:
    assert demo_main(["--query", "7", *models_args]) == 1
    assert "queries 0 to 2" in capsys.readouterr().err


def test_demo_ends_on_the_steered_text_after_both_baselines(capsys, models_args) -> None:
    # Execute
    code = demo_main(["--in-process", "--max-new-tokens", "6", *models_args])
    out = capsys.readouterr().out
    # Assert: the device alone, then the cloud alone, then the product last, with its stats.
    assert code == 0
    device, cloud, steered = (
        out.index("Device alone (slm-rag"),
        out.index("Cloud alone (llm"),
        out.index("════ SpecSteer"),
    )
    assert device < cloud < steered
    assert out.count("ROUGE-L") == 3  # the demo user's real bodies are known
    assert out.index("acceptance_rate") > steered


def test_demo_json_carries_the_baselines_and_their_scores(capsys, models_args) -> None:
    code = demo_main(["--in-process", "--max-new-tokens", "6", "--json", *models_args])
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert code == 0 and set(out["baselines"]) == {"slm-rag", "llm"}
    assert all(0.0 <= b["rouge_l"] <= 1.0 for b in out["baselines"].values()) and 0.0 <= out["rouge_l"] <= 1.0
    no_baselines = demo_main(["--in-process", "--no-baselines", "--max-new-tokens", "4", "--json", *models_args])
    assert no_baselines == 0 and json.loads(capsys.readouterr().out.splitlines()[-1])["baselines"] == {}

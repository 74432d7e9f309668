"""bench.random_models: random-weight folders of a configuration that the project's loader reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import random_models
from specsteer.core.models import load_causal_lm


def test_a_written_folder_loads_as_a_model_of_that_configuration(tmp_path: Path, char_tok) -> None:
    tokenizer_dir = tmp_path / "tok"
    char_tok.save_pretrained(tokenizer_dir)
    assert random_models.main(["--tokenizer", str(tokenizer_dir), "--configs", "tiny", "--out", str(tmp_path)]) == 0
    lm = load_causal_lm(tmp_path / "tiny", progress=False)
    config = lm.model.config
    assert (config.hidden_size, config.num_hidden_layers, config.vocab_size) == (64, 2, 1024)
    # The tokenizer travels as the given files, unchanged, and loads with the model.
    assert (tmp_path / "tiny" / "tokenizer.json").read_bytes() == (tokenizer_dir / "tokenizer.json").read_bytes()
    assert len(lm.tokenizer) == len(char_tok)


def test_refusals_are_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert random_models.main(["--tokenizer", str(tmp_path), "--configs", "tiny", "--out", str(tmp_path)]) == 1
    assert "No tokenizer can be read from" in capsys.readouterr().err


def test_acceptance_writes_a_flat_specialist_and_a_calibrated_generalist(tmp_path: Path, char_tok) -> None:
    """The flat Specialist's logits spread 0.001; the other configuration's pass a uniform draft at
    the asked rate on the calibration text, and at 0 or 1 only in the limits."""
    import torch

    tokenizer_dir = tmp_path / "tok"
    char_tok.save_pretrained(tokenizer_dir)
    args = ["--tokenizer", str(tokenizer_dir), "--configs", "tiny", "--out", str(tmp_path)]
    assert random_models.main([*args, "--acceptance", "0.8"]) == 1  # which one is flat?
    assert random_models.main([*args, "--acceptance", "0.8", "--specialist", "tiny"]) == 0
    lm = load_causal_lm(tmp_path / "tiny", progress=False)
    with torch.no_grad():
        logits = lm.model(input_ids=torch.randint(0, 1024, (1, 32))).logits
    assert logits.std(dim=-1).mean().item() == pytest.approx(random_models.FLAT_LOGIT_STD, rel=0.2)

    contexts = random_models.calibration_contexts(char_tok, tail=16)
    assert len(contexts) == 3 and all(len(ids) == first + 1 + 16 for ids, first in contexts)
    for acceptance in (0.5, 0.8):
        model = load_causal_lm(tmp_path / "tiny", progress=False).model
        factor = random_models.calibrate_acceptance(model, contexts, acceptance, 0.5)
        assert factor > 1  # a flat model passes nearly everything: calibrating spreads it
        with torch.no_grad():
            rows = [model(input_ids=torch.tensor([ids])).logits[0, first:-1] for ids, first in contexts]
        assert random_models.uniform_draft_acceptance(torch.cat(rows), 0.5) == pytest.approx(acceptance, abs=1e-3)
    flat = torch.zeros(3, 1000)
    assert random_models.uniform_draft_acceptance(flat, 0.5) == 1.0
    peaked = flat + torch.eye(3, 1000) * 1e4  # all mass on one token: only a draft of it passes
    assert random_models.uniform_draft_acceptance(peaked, 0.5) == pytest.approx(1e-3)
    with pytest.raises(random_models.ConfigError, match="strictly between 0 and 1"):
        random_models.calibrate_acceptance(model, contexts, 1.0, 0.5)


def test_measure_names_a_written_generalist(tmp_path: Path, char_tok, capsys: pytest.CaptureFixture[str]) -> None:
    tokenizer_dir = tmp_path / "tok"
    char_tok.save_pretrained(tokenizer_dir)
    args = ["--tokenizer", str(tokenizer_dir), "--configs", "tiny", "--out", str(tmp_path), "--measure", "qwen3-32b"]
    assert random_models.main([*args, "--specialist", "tiny"]) == 1
    assert "--measure needs both --specialist and the Generalist it names" in capsys.readouterr().err


def test_the_ratio_test_passes_the_built_in_rate_while_fewer_drafts_are_accepted(tmp_path: Path, char_tok) -> None:
    """What a run measures against what was built in: sampled `specsteer` over a flat Specialist and
    a Generalist calibrated to 0.8 passes about 0.8 of the drafts the ratio test tries, while the
    drafts accepted per draft sent come out lower (a round's drafts after its first rejection are
    never tried)."""
    import torch

    char_tok.save_pretrained(tmp_path / "tok")
    torch.manual_seed(0)
    random_models.write_model("tiny", tmp_path / "tok", tmp_path / "s", torch.device("cpu"), flat=True)
    random_models.write_model("tiny", tmp_path / "tok", tmp_path / "g", torch.device("cpu"), acceptance=(0.8, 0.5))
    got = random_models.measured_acceptance(tmp_path / "s" / "tiny", tmp_path / "g" / "tiny")
    assert 0 < got["rejected"] <= got["rounds"]
    assert got["accepted"] + got["rejected"] <= got["drafted"]
    assert got["pass_rate"] == pytest.approx(0.8, abs=0.15)  # about 85 drafts tried: a binomial sd of 0.04
    assert got["per_draft"] < got["pass_rate"]

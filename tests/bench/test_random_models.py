"""bench.random_models: random-weight folders of a configuration that the project's loader reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import random_models
from core.models import load_causal_lm


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


def test_the_logit_spread_for_an_acceptance_gives_it_on_a_simulated_vocabulary() -> None:
    """A Generalist whose logits over 150k tokens are Gaussian of that spread, a uniform P_S^0: the
    sampling ratio test passes a uniformly drawn draft at the asked rate."""
    import torch

    gen = torch.Generator().manual_seed(0)
    for acceptance, gamma in ((0.8, 0.5), (0.5, 0.5), (0.95, 0.3)):
        spread = random_models.logit_std_for(acceptance, gamma)
        assert random_models.sampled_acceptance(spread, gamma) == pytest.approx(acceptance, abs=1e-9)
        logits = torch.randn(150_000, generator=gen, dtype=torch.float64) * spread
        log_ratio = torch.log_softmax(logits, 0) + torch.log(torch.tensor(150_000.0, dtype=torch.float64))
        passed = torch.clamp(torch.exp(log_ratio) / gamma, max=1.0).mean().item()  # over uniform drafts
        assert passed == pytest.approx(acceptance, abs=0.01)
    with pytest.raises(random_models.ConfigError, match="strictly between 0 and 1"):
        random_models.logit_std_for(1.0, 0.5)


def test_acceptance_writes_a_flat_specialist_and_a_generalist_of_the_spread(tmp_path: Path, char_tok) -> None:
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
    model = lm.model
    random_models.scale_logits(model, 1.0)
    with torch.no_grad():
        spread = model(input_ids=torch.randint(0, 1024, (1, 32))).logits.std(dim=-1).mean().item()
    assert spread == pytest.approx(1.0, rel=0.15)


def test_measure_names_a_written_generalist(tmp_path: Path, char_tok, capsys: pytest.CaptureFixture[str]) -> None:
    tokenizer_dir = tmp_path / "tok"
    char_tok.save_pretrained(tokenizer_dir)
    args = ["--tokenizer", str(tokenizer_dir), "--configs", "tiny", "--out", str(tmp_path), "--measure", "qwen3-32b"]
    assert random_models.main([*args, "--specialist", "tiny"]) == 1
    assert "--measure needs both --specialist and the Generalist it names" in capsys.readouterr().err

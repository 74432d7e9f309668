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

"""specsteer.core.models: the int8 load option (dynamic quantization of the Linear layers) next to fp32."""

from __future__ import annotations

import pytest
import torch

from specsteer.core.errors import ModelLoadError
from specsteer.core.models import load_causal_lm
from tests.tinymodels import save_tiny


def test_int8_load_quantizes_every_linear_and_keeps_the_distribution_close(tmp_path, char_tok) -> None:
    # Prepare
    folder = save_tiny(tmp_path, char_tok, seed=4)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    # Execute
    fp32 = load_causal_lm(folder)
    int8 = load_causal_lm(folder, quantize="int8")
    with torch.inference_mode():
        p = torch.log_softmax(fp32.model(ids).logits, -1).exp()
        q = torch.log_softmax(int8.model(ids).logits, -1).exp()
    # Assert: no fp32 Linear is left, the head's width is still read, and probabilities move little.
    assert not any(isinstance(m, torch.nn.Linear) for m in int8.model.modules())
    assert any(isinstance(m, torch.nn.Linear) for m in fp32.model.modules())
    assert int8.vocab_size == fp32.vocab_size
    assert float((p - q).abs().sum(-1).max()) < 0.25  # twice the total variation distance (a tiny random model)
    assert load_causal_lm(folder, quantize="fp32").model.lm_head.weight.dtype == torch.float32


def test_unknown_quantization_is_one_sentence(tmp_path, char_tok) -> None:
    folder = save_tiny(tmp_path, char_tok, seed=4)
    with pytest.raises(ModelLoadError, match="Unknown quantization 'int4'"):
        load_causal_lm(folder, quantize="int4")


def test_int8_vocab_size_never_unpacks_the_head(tmp_path, char_tok, monkeypatch: pytest.MonkeyPatch) -> None:
    # Unpacking an int8 head costs seconds on a real model; the cloud reads vocab_size every
    # session (and fusion every token), so it must come from the layer's shape alone.
    folder = save_tiny(tmp_path, char_tok, seed=4)
    expected = load_causal_lm(folder).vocab_size
    int8 = load_causal_lm(folder, quantize="int8")
    head = int8.model.get_output_embeddings()

    def unpacked() -> None:
        raise AssertionError("vocab_size unpacked the int8 head's weights")

    monkeypatch.setattr(head, "weight", unpacked)
    assert int8.vocab_size == expected

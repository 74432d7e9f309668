"""Shared fixtures: tiny tokenizers built once per session, and an offline, two-thread torch.

Tests that need the real embedded models are marked `slow` (registered in pyproject.toml);
`pytest -m "not slow"` is the fast tier, CI runs both.
"""

from __future__ import annotations

import os

# Before transformers is imported anywhere: a test must never reach for a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Training the BPE fixture in a Rust thread pool and then forking (e.g. subprocess tests) makes
# tokenizers warn and can deadlock; the fixtures are tiny, so parallelism buys nothing.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch
from transformers import PreTrainedTokenizerFast

from tests.tinymodels import SAMPLE_TEXTS, bpe_tokenizer, char_tokenizer, smollm2_tokenizer

# Tiny models gain nothing from many threads, and parallel CI jobs would oversubscribe the CPU.
torch.set_num_threads(2)


@pytest.fixture(scope="session")
def char_tok() -> PreTrainedTokenizerFast:
    """Character-level tokenizer: one token per printable ASCII char or newline; ids 0-3 are specials."""
    return char_tokenizer()


@pytest.fixture(scope="session")
def bpe_tok() -> PreTrainedTokenizerFast:
    """Byte-level BPE (400 tokens) trained on `SAMPLE_TEXTS`; no chat template."""
    return bpe_tokenizer(SAMPLE_TEXTS)


@pytest.fixture(scope="session")
def smol_tok(tmp_path_factory: pytest.TempPathFactory) -> PreTrainedTokenizerFast:
    """SmolLM2's real tokenizer with its ChatML template (read from the GGUF once per session, ~8 s)."""
    return smollm2_tokenizer(tmp_path_factory.mktemp("smollm2-tokenizer"))

"""Tiny, deterministic tokenizers and language models for the test suite.

Real Specialist/Generalist models take seconds to minutes to load, so every test except the
`slow` ones builds its models here: random Llama models with a few thousand parameters, over
tokenizers whose behaviour the tests can reason about exactly.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import string
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import gguf
import numpy as np
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoTokenizer,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

from specsteer.core.gguf_cache import locate_embedded_gguf
from specsteer.core.models import CausalLM

Model = TypeVar("Model", bound=PreTrainedModel)

PAD, EOS, BOS, UNK = "<pad>", "<eos>", "<bos>", "<unk>"
# Fixed ids 0..3 so tests can hard-code them.
SPECIAL_TOKENS: tuple[str, ...] = (PAD, EOS, BOS, UNK)
PAD_ID, EOS_ID, BOS_ID, UNK_ID = range(4)

# `string.printable` ends in "\t\n\r\x0b\x0c"; only "\n" of those is part of the alphabet, so that the
# alphabet stays the 95 printable ASCII characters plus newline the tests reason about.
CHAR_ALPHABET: tuple[str, ...] = (*(c for c in string.printable if c.isprintable()), "\n")

# A small fixed corpus so the BPE fixture is the same on every machine and run.
SAMPLE_TEXTS: tuple[str, ...] = (
    "The capital of France is Paris.",
    "The capital of Italy is Rome, and the capital of Spain is Madrid.",
    "I like to drink coffee in the morning and tea in the afternoon.",
    "My favourite programming language is Python because it is readable.",
    "Speculative decoding lets a small model draft tokens that a large model verifies.",
    "The quick brown fox jumps over the lazy dog.",
    "def add(a, b):\n    return a + b\n",
    "User: What is the weather like today?\nAssistant: It is sunny and warm.\n",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 2024.",
    "Punctuation! Questions? Quotes 'single' and \"double\"; colons: and (parentheses) [brackets] {braces}.",
)


def _as_hf_tokenizer(backend: Tokenizer) -> PreTrainedTokenizerFast:
    # clean_up_tokenization_spaces would rewrite " ," to "," on decode and break exact round trips.
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        eos_token=EOS,
        bos_token=BOS,
        unk_token=UNK,
        clean_up_tokenization_spaces=False,
    )


def char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character of printable ASCII plus newline; anything else is `<unk>`.

    Every string has exactly one tokenization, so a test can predict ids from text and the
    drafter/verifier never disagree about token boundaries.
    """
    vocab = {tok: i for i, tok in enumerate((*SPECIAL_TOKENS, *CHAR_ALPHABET))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # [\s\S] rather than "." so "\n" is split off like any other character instead of being dropped.
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    # Fuse concatenates the pieces as they are; the default decoder would join them with spaces.
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    return _as_hf_tokenizer(backend)


def bpe_tokenizer(texts: Sequence[str], vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on `texts`, GPT-2 style, without a chat template.

    Unlike the char tokenizer, a string can be spelled by several id sequences here, which is what
    real tokenizers do and what token-boundary handling must survive.
    """
    backend = Tokenizer(models.BPE(unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        # The full byte alphabet makes every input encodable, so `<unk>` never appears.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(list(texts), trainer=trainer)
    return _as_hf_tokenizer(backend)


def smollm2_tokenizer(cache_dir: Path) -> PreTrainedTokenizerFast:
    """SmolLM2's real tokenizer (ChatML template), read from the installed GGUF once, then from disk.

    Reading the GGUF metadata takes seconds; the saved folder loads in milliseconds.
    """
    folder = Path(cache_dir) / "smollm2-tokenizer"
    if not (folder / "tokenizer.json").is_file():
        gguf_path = locate_embedded_gguf("smollm2-135m-instruct")
        tokenizer = AutoTokenizer.from_pretrained(
            str(gguf_path.parent), gguf_file=gguf_path.name, local_files_only=True
        )
        # Save next to the target and rename, so parallel or interrupted runs never see half a folder.
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-smollm2-tokenizer-", dir=folder.parent))
        try:
            tokenizer.save_pretrained(str(tmp))
            os.replace(tmp, folder)
        except OSError:
            if not (folder / "tokenizer.json").is_file():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    return tokenizer


def tiny_llama(
    tokenizer: PreTrainedTokenizerFast,
    *,
    seed: int,
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int | None = None,
    intermediate: int | None = None,
    max_positions: int = 4096,
    initializer_range: float = 0.2,
    cls: type[LlamaForCausalLM] = LlamaForCausalLM,
) -> LlamaForCausalLM:
    """A random fp32 Llama over `tokenizer`'s vocabulary, identical for identical arguments.

    The default init (std 0.02) gives near-uniform logits where greedy decoding is decided by
    float noise; std 0.2 makes the distributions peaky, so greedy outputs are stable and differ
    between seeds.
    """
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=intermediate if intermediate is not None else 2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads if kv_heads is not None else heads,
        max_position_embeddings=max_positions,
        initializer_range=initializer_range,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    return _seeded(lambda: cls(config), seed)


def tiny_gemma(
    tokenizer: PreTrainedTokenizerFast, *, seed: int, window: int, initializer_range: float = 0.2
) -> Gemma3ForCausalLM:
    """A random fp32 Gemma 3 (the embedded Generalist's architecture: sliding-window and full-attention
    layers, one KV head) over `tokenizer`'s vocabulary, with a `window`-token sliding window."""
    config = Gemma3TextConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=window,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        max_position_embeddings=1024,
        initializer_range=initializer_range,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return _seeded(lambda: Gemma3ForCausalLM(config), seed)


def _seeded(build: Callable[[], Model], seed: int) -> Model:
    """`build()` with torch seeded to `seed`, in fp32 and eval mode. fork_rng keeps the caller's global
    torch RNG untouched, so building a model never changes what a later sampling test draws."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build()
    model.to(torch.float32)
    model.eval()
    return model


def tiny_lm(tokenizer: PreTrainedTokenizerFast, seed: int, name: str = "tiny", **llama_kwargs: int) -> CausalLM:
    """`tiny_llama` wrapped the way `core.models.load_causal_lm` returns real models."""
    return CausalLM.from_parts(name, tiny_llama(tokenizer, seed=seed, **llama_kwargs), tokenizer)


def perturbed_copy(lm: CausalLM, *, seed: int, scale: float = 0.3, name: str = "generalist") -> CausalLM:
    """A copy of `lm` with Gaussian noise (std `scale` times each weight tensor's own std) added
    to every weight: a Generalist that agrees with the Specialist often but not always, so
    drafts get accepted and rejected, and `sd`, recoveries and rollback all have work to do.
    (Two independent random models almost never agree: `sd` would accept nothing.)"""
    model = copy.deepcopy(lm.model)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for param in model.parameters():
            std = float(param.std()) if param.numel() > 1 else 0.0
            param.add_(torch.randn_like(param) * (scale * (std if std > 0 else 1.0)))
    model.eval()
    return CausalLM.from_parts(name, model, lm.tokenizer)


def scripted_lm(
    tokenizer: PreTrainedTokenizerFast, successors: dict[int, int], *, name: str = "scripted", strength: float = 4.0
) -> CausalLM:
    """A real one-layer Llama whose greedy choice after token a is `successors[a]`, whatever came before.

    Attention and MLP outputs are zeroed, so the residual stream is the current token's embedding
    (random directions) and the LM head maps each scripted token's direction to its successor: a
    bigram model with a real KV cache. Used as a Specialist that deterministically writes a given
    text (the leaky "verbatim copy" control) and, as its own cloud copy, a verifier that accepts it.
    """
    model = _bare_llama(tokenizer)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        emb = model.model.embed_tokens.weight
        emb.copy_(torch.randn_like(emb))
        head = model.lm_head.weight
        for a, b in successors.items():
            # After RMSNorm the hidden state is emb[a] / |emb[a]| * sqrt(hidden): logit_b = strength * sqrt(hidden).
            head[b] += strength * emb[a] / emb[a].norm()
    return CausalLM.from_parts(name, model, tokenizer)


def uniform_lm(
    tokenizer: PreTrainedTokenizerFast, ids: Sequence[int], *, name: str = "uniform", strength: float = 30.0
) -> CausalLM:
    """A real one-layer Llama whose next token is uniform over `ids` (logit `strength`, every other 0),
    whatever came before.

    Every token has one embedding, so every position has one hidden state. As the cloud's Generalist
    and generic Specialist at once, it accepts every draft (P_G = P_S^0: a log ratio of 0, up to float
    rounding) and sends all of `ids` as steering candidates (k >= len(set(ids))), each with v = 0:
    the device's recovery is its own choice whenever that is one of `ids`.
    """
    model = _bare_llama(tokenizer)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        emb = model.model.embed_tokens.weight
        u = torch.randn(emb.shape[1])
        emb.copy_(u.expand_as(emb))
        # The final RMSNorm makes the hidden state u / |u| * sqrt(hidden): this row gives `strength`.
        model.lm_head.weight[sorted(set(ids))] = strength * u / (u.norm() * math.sqrt(emb.shape[1]))
    return CausalLM.from_parts(name, model, tokenizer)


class _PositionalLlama(LlamaForCausalLM):
    """A Llama whose logits at sequence position p gain `strength` at token `script[p]` (`positional_lm`)."""

    script: dict[int, int]
    strength: float

    def forward(self, input_ids=None, past_key_values=None, **kwargs):  # type: ignore[no-untyped-def]
        start = 0 if past_key_values is None else past_key_values.get_seq_length()
        out = super().forward(input_ids=input_ids, past_key_values=past_key_values, **kwargs)
        start += input_ids.shape[1] - out.logits.shape[1]  # `logits_to_keep`: the last rows only
        for i in range(out.logits.shape[1]):
            token = self.script.get(start + i)
            if token is not None:
                out.logits[:, i, token] += self.strength
        return out


def positional_lm(
    tokenizer: PreTrainedTokenizerFast,
    script: Mapping[int, int],
    *,
    name: str = "positional",
    strength: float = 30.0,
) -> CausalLM:
    """A real one-layer Llama (with its KV cache) whose greedy choice after the first p + 1 tokens of
    its sequence is `script[p]`, whatever those tokens are (every other logit 0).

    Unlike `scripted_lm` it can write any text, repeated tokens included, from a known offset: a
    Specialist that copies a long private text token by token (the leaky "verbatim copy" control),
    through rollbacks and recoveries, since a position's choice never depends on what came before.
    """
    model = _bare_llama(tokenizer, cls=_PositionalLlama, max_positions=4096)
    assert isinstance(model, _PositionalLlama)
    model.script = dict(script)
    model.strength = strength
    return CausalLM.from_parts(name, model, tokenizer)


def _bare_llama(tokenizer: PreTrainedTokenizerFast, **llama_kwargs: Any) -> LlamaForCausalLM:
    """One layer whose attention and MLP add nothing (the residual stream is the current token's
    embedding) and whose LM head is zero: the scripted models above write their own head."""
    model = tiny_llama(tokenizer, seed=0, layers=1, hidden=64, **llama_kwargs)
    layer = model.model.layers[0]
    with torch.no_grad():
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight.zero_()
    return model


def save_tiny(
    tmp_path: Path,
    tokenizer: PreTrainedTokenizerFast,
    *,
    seed: int = 0,
    name: str = "tiny-llama",
    **llama_kwargs: int,
) -> Path:
    """Write a tiny model and its tokenizer as a Hugging Face folder `tmp_path/name`; return it."""
    folder = Path(tmp_path) / name
    model: PreTrainedModel = tiny_llama(tokenizer, seed=seed, **llama_kwargs)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


def _llama_cpp_permute(weight: np.ndarray, n_head: int) -> np.ndarray:
    # llama.cpp stores q/k rows interleaved for its rotary kernel; transformers' GGUF loader undoes
    # exactly this, so applying it here makes a GGUF that loads back to the original weights.
    return (
        weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def write_tiny_gguf(path: Path, model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast) -> Path:
    """Write `model` (from `tiny_llama`) with a byte-level BPE `tokenizer` as an F32 llama GGUF file.

    The tokenizer is stored as llama.cpp's "gpt2" type (token list + merges), which transformers
    rebuilds into the same byte-level BPE, so the file round-trips through `gguf_file=` loading.
    """
    config = model.config
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    if state["model"]["type"] != "BPE":
        raise ValueError("write_tiny_gguf needs a byte-level BPE tokenizer such as bpe_tokenizer()")
    vocab: dict[str, int] = state["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.__getitem__)
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["model"]["merges"]]
    specials = set(tokenizer.all_special_tokens)

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in specials else gguf.TokenType.NORMAL for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_pad_token_id(PAD_ID)
    writer.add_add_bos_token(False)

    weights = {k: v.detach().to(torch.float32).numpy() for k, v in model.state_dict().items()}
    writer.add_tensor("token_embd.weight", weights["model.embed_tokens.weight"])
    writer.add_tensor("output_norm.weight", weights["model.norm.weight"])
    writer.add_tensor("output.weight", weights["lm_head.weight"])
    for i in range(config.num_hidden_layers):
        hf = f"model.layers.{i}."
        blk = f"blk.{i}."
        q = _llama_cpp_permute(weights[hf + "self_attn.q_proj.weight"], config.num_attention_heads)
        k = _llama_cpp_permute(weights[hf + "self_attn.k_proj.weight"], config.num_key_value_heads)
        writer.add_tensor(blk + "attn_norm.weight", weights[hf + "input_layernorm.weight"])
        writer.add_tensor(blk + "attn_q.weight", q)
        writer.add_tensor(blk + "attn_k.weight", k)
        writer.add_tensor(blk + "attn_v.weight", weights[hf + "self_attn.v_proj.weight"])
        writer.add_tensor(blk + "attn_output.weight", weights[hf + "self_attn.o_proj.weight"])
        writer.add_tensor(blk + "ffn_norm.weight", weights[hf + "post_attention_layernorm.weight"])
        writer.add_tensor(blk + "ffn_gate.weight", weights[hf + "mlp.gate_proj.weight"])
        writer.add_tensor(blk + "ffn_up.weight", weights[hf + "mlp.up_proj.weight"])
        writer.add_tensor(blk + "ffn_down.weight", weights[hf + "mlp.down_proj.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)

"""The slot pool's own decoder forward (server.fused_decoder) held to transformers' logits on tiny
models of each family it serves, with the features that set them apart (Qwen2's q/k/v biases,
Qwen3's per-head norms, Llama's optional attention and MLP biases): sessions at different lengths
in one forward, padded blocks, idle slots; on the CPU here and on CUDA (fp32, CUDA graphs) where
there is a GPU (tools/gpu_check.sh runs it)."""

from __future__ import annotations

import shutil
from collections.abc import Callable

import pytest
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from specsteer.core.linear import onednn_available, use_linear_kernel
from specsteer.server.fused_decoder import FusedDecoder, fused_decoder_problem
from specsteer.server.slot_pool import SlotPool, folded_attention_bias, masked_attention
from specsteer.server.slot_sequence import SlotPools
from tests.server.test_slot_pool import ATOL, CUDA, DEVICES, assert_sessions_match_transformers, reference_logits
from tests.tinymodels import char_tokenizer, tiny_gemma, tiny_lm

PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18]]
SIZES = {
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "vocab_size": 120,
}


def _random(model: PreTrainedModel, seed: int) -> PreTrainedModel:
    """Every tensor random, biases and norm weights included (their initial zeros and ones would
    hide a bias or norm applied in the wrong place)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=gen) * (0.3 if parameter.dim() == 1 else 0.08))
            if parameter.dim() == 1:
                parameter.add_(1.0)
    return model.eval()


FAMILIES: dict[str, Callable[[], PreTrainedModel]] = {
    "llama": lambda: LlamaForCausalLM(LlamaConfig(**SIZES)),
    "llama-biases": lambda: LlamaForCausalLM(LlamaConfig(**SIZES, attention_bias=True, mlp_bias=True)),
    "llama-gqa-1": lambda: LlamaForCausalLM(LlamaConfig(**{**SIZES, "num_key_value_heads": 4})),
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**SIZES)),
    "qwen3": lambda: Qwen3ForCausalLM(Qwen3Config(**SIZES, head_dim=24)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fused_pool_gives_transformers_logits(family: str, device: str) -> None:
    model = _random(FAMILIES[family](), seed=len(family)).to(device)
    assert fused_decoder_problem(model.config) is None
    assert_sessions_match_transformers(model, SlotPool(model, slots=4, max_len=48, fused=True), PROMPTS)


def test_fusing_keeps_one_copy_of_the_weights_and_transformers_forward_intact() -> None:
    """The q/k/v and gate/up Linears become views into the fused matrices: no second copy, and
    transformers' own forward (prefill paths, the dynamic engine) reads the same numbers."""
    model = _random(FAMILIES["qwen2"](), seed=4)
    before = reference_logits(model, [3, 4, 5, 6])
    stored = sum(p.numel() for p in model.parameters())
    decoder = FusedDecoder(model)
    attention, mlp = model.model.layers[1].self_attn, model.model.layers[1].mlp
    fused = decoder.layers[1]
    assert attention.q_proj.weight.data_ptr() == fused.qkv.data_ptr()
    assert attention.v_proj.weight.untyped_storage().data_ptr() == fused.qkv.untyped_storage().data_ptr()
    assert fused.qkv_bias is not None and attention.k_proj.bias.untyped_storage().data_ptr() == (
        fused.qkv_bias.untyped_storage().data_ptr()
    )
    assert mlp.up_proj.weight.untyped_storage().data_ptr() == fused.gate_up.untyped_storage().data_ptr()
    assert sum(p.numel() for p in model.parameters()) == stored
    torch.testing.assert_close(reference_logits(model, [3, 4, 5, 6]), before, atol=0, rtol=0)


def test_families_it_does_not_serve_are_refused_in_one_sentence_and_the_pools_fall_back() -> None:
    gemma = tiny_gemma(char_tokenizer(), seed=1, window=64)
    problem = fused_decoder_problem(gemma.config)
    assert problem is not None and problem.startswith("the fused decoder serves llama, qwen2, qwen3 models, not gemma")
    with pytest.raises(ValueError, match="not gemma"):
        FusedDecoder(gemma)
    gelu = LlamaConfig(**SIZES, hidden_act="gelu")
    assert fused_decoder_problem(gelu) == "the fused decoder's MLP is SwiGLU; this model's activation is gelu"
    # The server's pools: fused where the family allows, transformers' forward elsewhere.
    pools = SlotPools(2, 32)
    llama = _random(FAMILIES["llama"](), seed=2)
    assert pools.sequence(llama, [5, 6], None).pool.fused
    assert not pools.sequence(LlamaForCausalLM(gelu).eval(), [5, 6], None).pool.fused
    assert not SlotPools(2, 32, forward="transformers").sequence(llama, [5, 6], None).pool.fused
    with pytest.raises(ValueError, match="one of fused, transformers; got 'triton'"):
        SlotPools(2, 32, forward="triton")


@pytest.fixture
def tokenizer_model() -> PreTrainedModel:
    tokenizer: PreTrainedTokenizerFast = char_tokenizer()
    return tiny_lm(tokenizer, seed=5, kv_heads=2).model


def test_fused_pool_serves_a_real_tokenizer_session_like_the_default(tokenizer_model: PreTrainedModel) -> None:
    """The tests' tiny Llama (the models every engine test uses) on both forwards: the same logits."""
    fused = SlotPool(tokenizer_model, slots=2, max_len=40, fused=True)
    plain = SlotPool(tokenizer_model, slots=2, max_len=40)
    for pool in (fused, plain):
        pool.claim()
    prompt = [7, 8, 9, 10]
    a = fused.forward({0: prompt}, bucket=1, n=4).clone()
    b = plain.forward({0: prompt}, bucket=1, n=4)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("cc") is None, reason="inductor needs a C compiler")
def test_compiled_regions_serve_every_layer_and_keep_the_logits() -> None:
    """`compiled=True`: inductor compiles each of the two regions once for all layers (not once per
    layer) and the logits stay transformers' through later shapes (dynamic recompiles). On the CPU
    here; the GPU script times it."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = _random(Qwen3ForCausalLM(Qwen3Config(**{**SIZES, "num_hidden_layers": 8}, head_dim=24)), seed=9)
    pool = SlotPool(model, slots=4, max_len=48, fused=True, compiled=True)
    # Each model adds variants: past torch's default of 8 a region would silently run eager.
    assert torch._dynamo.config.recompile_limit >= 64
    pool.forward({pool.claim(): [1, 2, 3]}, bucket=1, n=3)
    assert counters["stats"]["unique_graphs"] == 2  # one per region for 8 layers
    pool.release(0)
    assert_sessions_match_transformers(model, pool, PROMPTS)


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("cc") is None, reason="inductor needs a C compiler")
def test_transformers_forward_compiled_whole_keeps_the_logits_at_every_window() -> None:
    """`compiled=True` without the fused forward (`--kv-forward transformers --kv-compile`): inductor
    compiles transformers' whole forward, the window's width dynamic, and sessions of different
    lengths under windows of several widths still get transformers' logits."""
    torch._dynamo.reset()
    model = _random(FAMILIES["qwen2"](), seed=6)
    pool = SlotPool(model, slots=3, max_len=64, compiled=True)
    a, b = pool.claim(), pool.claim()
    pool.run({a: [5, 6, 7, 8]})
    pool.run({b: [9, 10, 11, 12, 13, 14]})
    a_logits, b_logits = pool.run({a: [20, 21], b: [22]})  # a window of 6 + 2 columns
    torch.testing.assert_close(a_logits.float(), reference_logits(model, [5, 6, 7, 8, 20, 21])[-2:], atol=ATOL, rtol=0)
    torch.testing.assert_close(
        b_logits.float(), reference_logits(model, [9, 10, 11, 12, 13, 14, 22])[-1:], atol=ATOL, rtol=0
    )
    wide = pool.forward({a: [30]}, bucket=1, n=1, window=40)[0].float()
    torch.testing.assert_close(wide, reference_logits(model, [5, 6, 7, 8, 20, 21, 30])[-1:], atol=ATOL, rtol=0)


def test_the_folded_bias_is_the_boolean_mask_aligned_for_the_kernels() -> None:
    """Built once a forward: the same attention as the boolean mask folded at every layer, stored
    with rows a multiple of 16 long (what CUDA's attention kernels take without a padded copy)."""
    torch.manual_seed(2)
    b, kv_heads, group, n, length, d = 3, 2, 3, 4, 21, 8
    mask = torch.rand(b, 1, n, length) > 0.5
    mask[..., 0] = True
    bias = folded_attention_bias(mask, group, torch.float32)
    assert bias.shape == (b, 1, group * n, length) and bias.stride(-2) == 32
    query = torch.randn(b, kv_heads * group, n, d)
    key, value = torch.randn(b, kv_heads, length, d), torch.randn(b, kv_heads, length, d)
    folded = query.reshape(b, kv_heads, group * n, d)
    got = torch.nn.functional.scaled_dot_product_attention(folded, key, value, attn_mask=bias, scale=0.4)
    want = masked_attention(query, key, value, mask, 0.4)
    torch.testing.assert_close(got.reshape(b, kv_heads * group, n, d).transpose(1, 2), want, atol=1e-6, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_in_bf16_the_fused_pool_picks_transformers_greedy_tokens(family: str, device: str) -> None:
    """bf16 may round differently when q/k/v are one GEMM: the rate at which the greedy tokens still
    agree with transformers' own bf16 forward (printed; the GPU script keeps its output). On the
    CPU it also runs every bf16 dtype path of the fused forward where CI can see it."""
    model = _random(FAMILIES[family](), seed=11).to(device, torch.bfloat16)
    pool = SlotPool(model, slots=2, max_len=80, fused=True)
    slot = pool.claim()
    ids = torch.randint(4, SIZES["vocab_size"], (64,), generator=torch.Generator().manual_seed(3)).tolist()
    got = pool.forward({slot: ids[:8]}, bucket=1, n=8).float().cpu()[0]
    rows = [got]
    for start in range(8, 64, 4):  # verify blocks of 4 after the prefill
        rows.append(pool.forward({slot: ids[start : start + 4]}, bucket=1, n=4).float().cpu()[0])
    fused = torch.cat(rows)
    want = reference_logits(model, ids)
    agree = (fused.argmax(-1) == want.argmax(-1)).float().mean().item()
    print(
        f"bf16 fused vs transformers ({family}, {device}): greedy tokens agree at {agree:.3f} of {len(ids)} positions"
    )
    assert agree >= 0.9


def test_a_gpu_pool_warms_every_shape_it_will_replay() -> None:
    """`graph_shapes` is `shape_for`'s set on a GPU (read on a CPU pool told it is on one)."""
    pool = SlotPool(_random(FAMILIES["llama"](), seed=3), slots=6, max_len=40)
    pool.device = torch.device("cuda")  # the policy alone; nothing runs
    shapes = pool.graph_shapes()
    assert shapes == [(b, n, 40) for b in (1, 2, 4, 6) for n in (1, 2, 4, 8, 16)]
    for _ in range(6):
        pool.claim()
    for bucket in range(1, 7):
        for n in range(1, 17):
            blocks = {bucket - 1: list(range(n))}
            assert pool.shape_for(blocks)[:3] in shapes


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("cc") is None, reason="inductor needs a C compiler")
def test_warming_up_compiles_beforehand_and_leaves_sessions_as_they_were() -> None:
    """After `warm_up`, forwards of the warmed shapes compile nothing, and a session open during the
    warm-up (every row idle) still gets transformers' logits."""
    from torch._dynamo.utils import counters

    model = _random(FAMILIES["qwen2"](), seed=6)
    pool = SlotPool(model, slots=4, max_len=48, fused=True, compiled=True)
    slot = pool.claim()
    prompt = [5, 6, 7, 8]
    pool.forward({slot: prompt}, bucket=1, n=4)
    assert pool.warm_up() == 0  # on a CPU forwards are exact: nothing to warm by default
    torch._dynamo.reset()
    counters.clear()
    assert pool.warm_up([(1, 2, 48), (4, 3, 48), (2, 1, 24)]) == 3
    compiled = counters["stats"]["unique_graphs"]
    assert compiled > 0 and pool.lengths[slot] == 4
    logits = pool.forward({slot: [9, 10]}, bucket=1, n=2).float()
    assert counters["stats"]["unique_graphs"] == compiled
    torch.testing.assert_close(logits[0], reference_logits(model, [*prompt, 9, 10])[-2:], atol=ATOL, rtol=0)


@CUDA
def test_on_cuda_the_warm_up_captures_every_graph_before_the_first_session() -> None:
    model = _random(FAMILIES["qwen3"](), seed=7).to("cuda")
    pool = SlotPool(model, slots=3, max_len=40, fused=True)
    assert pool.warm_up() == len(pool.graph_shapes()) == 15
    captured = len(pool.forward_graphs._graphs)
    assert captured == 15
    # Every graph's logits are views of the pool's one buffer (SlotPool._shared_logits).
    assert len({output.data_ptr() for _, _, output in pool.forward_graphs._graphs.values()}) == 1
    slot = pool.claim()
    logits = pool.run({slot: [5, 6, 7]})[0].float().cpu()
    assert len(pool.forward_graphs._graphs) == captured  # (1, 4): warmed, nothing captured now
    torch.testing.assert_close(logits, reference_logits(model, [5, 6, 7]), atol=ATOL, rtol=0)


@pytest.mark.skipif(not onednn_available(), reason="this torch build has no oneDNN inner product")
def test_on_the_cpu_the_fused_forward_runs_the_models_linear_kernel() -> None:
    """A model whose Linear layers run oneDNN (core.linear, what load_causal_lm gives on x86): the
    fused weights run it too (plain matrix products were slower there), with transformers' logits."""
    model = _random(FAMILIES["qwen3"](), seed=12)
    assert use_linear_kernel(model, "onednn") > 0
    pool = SlotPool(model, slots=4, max_len=48, fused=True)
    assert pool.decoder is not None and pool.decoder.shape.onednn
    assert_sessions_match_transformers(model, pool, PROMPTS)
    assert not FusedDecoder(_random(FAMILIES["qwen3"](), seed=12)).shape.onednn  # torch's kernel: F.linear

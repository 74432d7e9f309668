"""A Specialist as a device needs it when its forwards run elsewhere: tokenizer, chat template,
end-of-sequence ids and vocabulary width, loaded without torch or transformers.

`core.models.load_causal_lm(..., weights=False)` gives the same facts, but importing transformers
loads torch, and the two cost a device process about 380 MB of resident memory before any weight
is read: more than a third of the 1 GB a device drafting on onnxruntime-genai may use. Here the
tokenizer is Hugging Face's own Rust `tokenizers` library (the backend of transformers' fast
tokenizers, so the token IDs are the same), and the chat template is rendered by Jinja's
sandboxed environment as transformers renders it (`core.chat_template`). The model folder is the
one `load_causal_lm` would load (`model_folder`), so `DeviceLM.name` is its `CausalLM.name`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from specsteer.core.chat_template import ChatTemplate
from specsteer.core.errors import ModelLoadError, one_line
from specsteer.core.gguf_cache import cache_root, converted_embedded, converted_gguf
from specsteer.core.model_registry import EMBEDDED_MODELS, unknown_model

__all__ = ["DeviceLM", "FastTokenizer", "SpecialistLM", "load_device_lm", "model_folder"]


class SpecialistLM(Protocol):
    """What the device's Specialist reads of its model: a `CausalLM`, or a `DeviceLM` when another
    backend runs the forwards."""

    @property
    def name(self) -> str: ...

    @property
    def tokenizer(self) -> Any: ...

    @property
    def eos_ids(self) -> frozenset[int]: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def has_weights(self) -> bool: ...

    @property
    def has_chat_template(self) -> bool: ...


class FastTokenizer:
    """The slice of a transformers fast tokenizer the device uses, on `tokenizers.Tokenizer`."""

    def __init__(self, backend: Any, chat_template: ChatTemplate | None) -> None:
        self._backend = backend
        self._template = chat_template
        self.chat_template = chat_template.source if chat_template is not None else None

    def __len__(self) -> int:
        """The vocabulary's size, added tokens included, as `len()` of a transformers tokenizer."""
        return int(self._backend.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def __call__(
        self, text: str | list[str], *, add_special_tokens: bool = True, return_offsets_mapping: bool = False
    ) -> dict[str, Any]:
        """Token IDs (and character offsets) of one text, or of each text of a batch, as transformers returns them."""
        batch = isinstance(text, list)
        encodings = self._backend.encode_batch(text if batch else [text], add_special_tokens=add_special_tokens)
        ids = [list(e.ids) for e in encodings]
        out: dict[str, Any] = {"input_ids": ids if batch else ids[0]}
        if return_offsets_mapping:
            offsets = [[tuple(o) for o in e.offsets] for e in encodings]
            out["offset_mapping"] = offsets if batch else offsets[0]
        return out

    def decode(
        self, token_ids: Sequence[int], skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool = False
    ) -> str:
        if clean_up_tokenization_spaces:
            # transformers' clean-up rewrites spaces before punctuation; the SDK never asks for it.
            raise ValueError("FastTokenizer does not clean up tokenization spaces")
        return str(self._backend.decode(list(token_ids), skip_special_tokens=skip_special_tokens))

    def token_to_id(self, token: str) -> int | None:
        found = self._backend.token_to_id(token)
        return None if found is None else int(found)

    def apply_chat_template(
        self, messages: list[dict[str, str]], *, add_generation_prompt: bool = False, tokenize: bool = False
    ) -> str:
        if self._template is None:
            raise ValueError("this tokenizer has no chat template")
        if tokenize:
            raise ValueError("FastTokenizer renders chat templates to text only (tokenize=False)")
        return self._template.render(messages, add_generation_prompt=add_generation_prompt)


@dataclass(frozen=True)
class DeviceLM:
    """A Specialist without weights: it satisfies `SpecialistLM`, and a drafter runs its forwards."""

    name: str
    tokenizer: FastTokenizer
    eos_ids: frozenset[int]
    vocab_size: int
    folder: Path

    @property
    def has_weights(self) -> bool:
        return False

    @property
    def has_chat_template(self) -> bool:
        return self.tokenizer.chat_template is not None


def model_folder(spec: str | Path, cache_dir: Path | None = None, progress: bool = True) -> tuple[Path, str]:
    """The Hugging Face folder behind a model spec (a folder, a .gguf file or an embedded name), as
    `core.models.load_causal_lm` resolves it (a GGUF converted once into the cache), and the name
    it loads under."""
    cache = cache_root(cache_dir)
    if not str(spec).strip():
        raise ModelLoadError("No model given: pass a model folder, a .gguf file or an embedded model name.")
    if isinstance(spec, str) and spec in EMBEDDED_MODELS:
        entry = EMBEDDED_MODELS[spec]
        return converted_embedded(entry, cache, progress), entry.name
    path = Path(spec).expanduser()
    if not path.exists():
        if isinstance(spec, str) and not _looks_like_path(spec):
            raise unknown_model(f"{spec!r} is neither an existing path nor an embedded model name")
        raise ModelLoadError(f"Model path {path} does not exist.")
    if path.is_dir():
        return path, path.resolve().name
    if path.suffix.lower() == ".gguf":
        return converted_gguf(path.resolve(), cache, progress), path.resolve().name
    raise ModelLoadError(f"{path} is neither a model folder (with config.json) nor a .gguf file.")


def load_device_lm(spec: str | Path, *, cache_dir: Path | None = None, progress: bool = True) -> DeviceLM:
    """The tokenizer, chat template, end-of-sequence ids and vocabulary width of the model `spec`
    names, without torch; every failure is a `ModelLoadError` with one sentence."""
    folder, name = model_folder(spec, cache_dir, progress)
    from tokenizers import Tokenizer  # the Rust library only: no transformers, no torch

    config = _json(folder / "config.json", required=True)
    settings = _json(folder / "tokenizer_config.json", required=False)
    if not (folder / "tokenizer.json").is_file():
        raise ModelLoadError(f"{folder} has no tokenizer.json: the device needs a fast tokenizer's file.")
    try:
        backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
    except Exception as exc:  # the Rust library raises its own Exception type
        raise ModelLoadError(f"cannot read the tokenizer in {folder}: {one_line(exc)}.") from exc
    specials = {k: text for k, v in settings.items() if k.endswith("_token") and (text := _token_text(v))}
    template = ChatTemplate.from_folder(folder, settings, specials)
    tokenizer = FastTokenizer(backend, template)
    vocab = config.get("vocab_size", config.get("text_config", {}).get("vocab_size"))
    if not isinstance(vocab, int):
        raise ModelLoadError(f"the config in {folder} states no vocab_size.")
    eos_ids = _eos_ids(folder, config, tokenizer, specials.get("eos_token"))
    return DeviceLM(name, tokenizer, eos_ids, vocab, folder)


def _eos_ids(folder: Path, config: dict[str, Any], tokenizer: FastTokenizer, eos_token: str | None) -> frozenset[int]:
    """The tokenizer's end-of-sequence token and the generation config's (which transformers
    derives from config.json when the folder has none), as `core.models` collects them."""
    ids: set[int] = set()
    if eos_token is not None:
        found = tokenizer.token_to_id(eos_token)
        if found is not None:
            ids.add(found)
    generation = folder / "generation_config.json"
    value = (_json(generation, required=False) if generation.is_file() else config).get("eos_token_id")
    if isinstance(value, int):
        ids.add(value)
    elif isinstance(value, list | tuple):
        ids.update(v for v in value if isinstance(v, int))
    return frozenset(ids)


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json states it: a string or an AddedToken's dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _json(path: Path, *, required: bool) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise ModelLoadError(f"{path.parent} is not a model folder: it has no {path.name}.")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"cannot read {path}: {one_line(exc)}.") from exc
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path} does not hold a JSON object.")
    return data


def _looks_like_path(spec: str) -> bool:
    return (
        os.sep in spec
        or (os.altsep is not None and os.altsep in spec)
        or spec.startswith((".", "~"))
        or spec.lower().endswith(".gguf")
    )

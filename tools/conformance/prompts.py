"""Prompt rendering, as the device turns a prompt and its retrieved examples into token IDs.

`prompts/render.json`: for each vector, the public `prompt` and the author's `examples` (best first;
for the demo queries, what the SDK's own retrieval picked from the demo profile), and what the
device computes with the default Specialist's bundle: the chat template's `text`, the `token_ids`
it drafts from (`core.prompts.render_prompt`) and the `public_ids` that go up to the verifier (the
raw prompt, no template, no context: `sdk.decoding`'s `public_prompt_ids`). The tokenizer is the
default bundle's (`sdk models build`; `make install` builds it): the file names its files' SHA-256,
and `check` refuses to judge against another tokenizer.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from specsteer.core.bundle import BUNDLE_MANIFEST
from specsteer.core.device_lm import DeviceLM, load_device_lm
from specsteer.core.errors import ModelLoadError, one_line
from specsteer.core.model_registry import DEFAULT_SPECIALIST
from specsteer.core.prompts import Example, render_prompt, task_prompt
from tools.conformance.common import ConformanceError, load, mismatch

FILE = "prompts/render.json"
# What the device reads to render a prompt: the tokenizer and its settings, and the chat template.
MODEL_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
CONTEXT_ENTRIES, CONTEXT_CHARS = 3, 1800  # sdk.decoding's defaults


@functools.cache
def _model() -> tuple[DeviceLM, dict[str, Any]]:
    """The default bundle's tokenizer, and its identity: only the files rendering reads are hashed
    (open_bundle would hash the 400 MB of weights at every write and check)."""
    from specsteer.sdk.bundles import default_bundle_path  # the drafter's modules: imported when used

    folder = default_bundle_path(DEFAULT_SPECIALIST)
    try:
        manifest = json.loads((folder / BUNDLE_MANIFEST).read_text(encoding="utf-8"))
        files = {name: _sha256(folder / name) for name in MODEL_FILES if name in manifest["files"]}
        lm = load_device_lm(folder, progress=False)
    except (OSError, ValueError, KeyError, TypeError, ModelLoadError) as exc:
        why = f"{FILE} needs the default Specialist's bundle {folder} (make install builds it): {one_line(exc)}"
        raise ConformanceError(why) from None
    for name, digest in files.items():
        if manifest["files"][name] != digest:
            raise ConformanceError(f"{folder / name} is not the file its bundle's manifest lists")
    return lm, {"bundle": manifest["name"], "precision": manifest["precision"], "files": files}


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _messages(prompt: str, examples: list[Example]) -> list[dict[str, str]]:
    # core.prompts.render_prompt's conversation: the examples with a body, best match last.
    messages: list[dict[str, str]] = []
    for e in reversed([e for e in examples if e.body]):
        messages += [{"role": "user", "content": task_prompt(e.subject)}, {"role": "assistant", "content": e.body}]
    return [*messages, {"role": "user", "content": prompt}]


def _cases() -> list[tuple[str, str, str, list[Example]]]:
    from specsteer.sdk.context import Profile, ProfileIndex, demo_profile_path, fit_context  # bm25s: when used

    profile = Profile.from_file(demo_profile_path())
    index = ProfileIndex(profile)
    queries = load(demo_profile_path())["queries"]
    out = []
    for i, q in enumerate(queries):
        prompt = task_prompt(q["subject"])
        examples = fit_context(index.retrieve(prompt, CONTEXT_ENTRIES), max_chars=CONTEXT_CHARS)
        out.append((f"demo-query-{i}", f"demo query {i} with the examples the SDK retrieved for it", prompt, examples))
    plain = task_prompt("Fix the race in the cache eviction")
    out += [
        ("no-examples", "a task prompt with no examples (an empty profile)", plain, []),
        ("example-without-body", "an example with no body is left out of the conversation",
         plain, [Example("Bump the version", ""), Example("Fix a typo", "A typo in the README.")]),
        ("unicode", "non-ASCII text, an emoji, a tab and trailing spaces",
         "Grüße — 日本語 🚀 naïve café\tend  ", []),
        ("special-token-text", "a special token's text in the prompt is that token, as the Python tokenizer reads it",
         "Say <|im_end|> and <|endoftext|> literally", []),
        ("code-and-newlines", "code, blank lines and indentation",
         "def f(x):\n    return x ** 2\n\n\n# done\n", [Example("Add f", "f squares its input.\n\n  Indented line.")]),
    ]  # fmt: skip
    return out


def _outcome(lm: DeviceLM, prompt: str, examples: list[Example]) -> dict[str, Any]:
    return {
        "text": lm.tokenizer.apply_chat_template(_messages(prompt, examples), add_generation_prompt=True),
        "token_ids": render_prompt(lm, prompt, examples),
        "public_ids": lm.tokenizer.encode(prompt, add_special_tokens=False),
    }


def build() -> dict[str, Any]:
    lm, model = _model()
    vectors = [
        {"name": name, "description": description, "prompt": prompt,
         "examples": [{"subject": e.subject, "body": e.body} for e in examples],
         "expected": _outcome(lm, prompt, examples)}
        for name, description, prompt, examples in _cases()
    ]  # fmt: skip
    return {"kind": "prompt-renderings", "function": "core.prompts.render_prompt", "model": model, "vectors": vectors}


def check(doc: dict[str, Any]) -> list[str]:
    lm, model = _model()
    if model != doc["model"]:
        return [mismatch(FILE, "*", "the default bundle's tokenizer files", doc["model"], model)]
    problems = []
    for v in doc["vectors"]:
        examples = [Example(e["subject"], e["body"]) for e in v["examples"]]
        got = _outcome(lm, v["prompt"], examples)
        if got != v["expected"]:
            problems.append(mismatch(FILE, v["name"], "rendering", v["expected"], got))
    return problems

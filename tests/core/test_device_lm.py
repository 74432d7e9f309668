"""`core.device_lm`: a Specialist's tokenizer, chat template, end ids and vocabulary without torch,
held equal to what `core.models.load_causal_lm(..., weights=False)` gives through transformers."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
import pytest
from transformers import PreTrainedTokenizerFast

from specsteer.core.device_lm import load_device_lm
from specsteer.core.errors import ModelLoadError
from specsteer.core.models import load_causal_lm
from specsteer.core.prompts import Example, render_prompt, task_prompt
from tests.tinymodels import save_tiny

PROMPTS = [
    "Hello  world",
    task_prompt("csum-file: use idempotent git_hash_discard()"),
    "unicode é ü 🎉, tabs\tand\n\n\nnewlines  ",
]
EXAMPLES = [
    Example("fix: a thing", "Body with {braces}, 'quotes' and \"double\" ones.\n\n  indented"),
    Example("b", ""),
]

# A template that uses every extension and global transformers gives a template.
FEATURES = (
    "{% set ns = namespace(n=0) %}{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
    "{% set ns.n = ns.n + 1 %}<{{ m.role }}|{{ ns.n }}>{% generation %}{{ m.content | tojson }}{% endgeneration %}"
    "{% if loop.index > 20 %}{% break %}{% endif %}{% endfor %}"
    "{% if messages | length > 50 %}{{ raise_exception('too long') }}{% endif %}"
    "{{ dict(a=1) | tojson }}{{ bos_token }}{% if add_generation_prompt %}<assistant>{% endif %}"
)


@pytest.fixture(params=["char", "bpe", "smol", "features"])
def folder(request, tmp_path: Path, char_tok, bpe_tok, smol_tok) -> Path:
    tokenizer: PreTrainedTokenizerFast = {"char": char_tok, "bpe": bpe_tok, "smol": smol_tok, "features": bpe_tok}[
        request.param
    ]
    if request.param == "features":
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=bpe_tok.backend_tokenizer, bos_token="<s>", eos_token="</s>"
        )
        tokenizer.chat_template = FEATURES
    return save_tiny(tmp_path, tokenizer, seed=1)


def test_the_device_lm_is_what_transformers_loads(folder: Path) -> None:
    device, reference = load_device_lm(folder, progress=False), load_causal_lm(folder, progress=False, weights=False)
    assert (device.name, device.eos_ids, device.vocab_size) == (reference.name, reference.eos_ids, reference.vocab_size)
    assert device.has_chat_template == reference.has_chat_template and not device.has_weights
    for prompt in PROMPTS:
        ids = render_prompt(device, prompt, EXAMPLES)
        assert ids == render_prompt(reference, prompt, EXAMPLES)
        assert device.tokenizer.decode(ids, skip_special_tokens=True) == reference.tokenizer.decode(
            ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        got = device.tokenizer(prompt, add_special_tokens=False, return_offsets_mapping=True)
        want = reference.tokenizer(prompt, add_special_tokens=False, return_offsets_mapping=True)
        assert got["input_ids"] == list(want["input_ids"])
        assert got["offset_mapping"] == [tuple(o) for o in want["offset_mapping"]]
    batch = device.tokenizer(PROMPTS, add_special_tokens=False)["input_ids"]
    assert batch == [list(ids) for ids in reference.tokenizer(PROMPTS, add_special_tokens=False)["input_ids"]]


def with_template(base: PreTrainedTokenizerFast, template: str) -> PreTrainedTokenizerFast:
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=base.backend_tokenizer, bos_token="<s>", eos_token="</s>")
    tokenizer.chat_template = template
    return tokenizer


def test_a_template_that_raises_is_a_template_error(tmp_path: Path, bpe_tok) -> None:
    lm = load_device_lm(save_tiny(tmp_path, with_template(bpe_tok, "{{ raise_exception('no system role') }}")))
    with pytest.raises(jinja2.TemplateError, match="no system role"):
        render_prompt(lm, "hi")


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{{ messages.__class__.__mro__ }}", "unsafe"),
        ("{% set ns = namespace() %}{% set ns._x = 1 %}", "cannot set the attribute '_x'"),
    ],
)
def test_a_template_cannot_reach_python_internals(tmp_path: Path, bpe_tok, template: str, message: str) -> None:
    lm = load_device_lm(save_tiny(tmp_path, with_template(bpe_tok, template)), progress=False)
    with pytest.raises(jinja2.exceptions.SecurityError, match=message):
        render_prompt(lm, "hi")


def test_broken_folders_are_one_sentence(tmp_path: Path, bpe_tok) -> None:
    folder = save_tiny(tmp_path, bpe_tok, seed=1)
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_device_lm(tmp_path / "missing", progress=False)
    with pytest.raises(ModelLoadError, match="neither an existing path nor an embedded model name"):
        load_device_lm("no-such-model", progress=False)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ModelLoadError, match=r"has no tokenizer\.json"):
        load_device_lm(folder, progress=False)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "tokenizer.json").write_text(bpe_tok.backend_tokenizer.to_str())
    with pytest.raises(ModelLoadError, match="states no vocab_size"):
        load_device_lm(folder, progress=False)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match=r"cannot read .*config\.json"):
        load_device_lm(folder, progress=False)

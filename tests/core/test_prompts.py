"""The prompt templates: what each kind of model reads, with and without the author's examples."""

from __future__ import annotations

from typing import Any

import pytest
from transformers import PreTrainedTokenizerFast

from specsteer.core.models import CausalLM
from specsteer.core.prompts import CONTEXT_HEADER, Example, context_text, render_prompt, task_prompt

EXAMPLES = [
    Example("refs: speed up packed-refs reads", "Reading packed-refs scanned the whole file.\nNow it stops early."),
    Example("docs: fix a typo", "A one-letter fix."),
]


def _lm(tokenizer: PreTrainedTokenizerFast) -> CausalLM:
    # Only the tokenizer is read by render_prompt.
    return CausalLM(name="t", model=None, tokenizer=tokenizer, eos_ids=frozenset())  # type: ignore[arg-type]


def _text(lm: CausalLM, ids: list[int]) -> str:
    return str(lm.tokenizer.decode(ids))


def test_task_prompt_asks_for_the_body_alone_and_ends_on_the_subject() -> None:
    prompt = task_prompt("  refs: avoid rewriting packed-refs \n")
    assert prompt.endswith("Subject: refs: avoid rewriting packed-refs")
    assert "body text only" in prompt and "without the subject line" in prompt


def test_chat_model_reads_the_examples_as_earlier_turns_best_last(smol_tok: PreTrainedTokenizerFast) -> None:
    lm = _lm(smol_tok)
    prompt = task_prompt("refs: avoid rewriting packed-refs")
    messages: list[dict[str, Any]] = []
    for e in reversed(EXAMPLES):
        messages += [{"role": "user", "content": task_prompt(e.subject)}, {"role": "assistant", "content": e.body}]
    messages.append({"role": "user", "content": prompt})
    expected = smol_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    ids = render_prompt(lm, prompt, EXAMPLES)

    assert ids == smol_tok.encode(expected, add_special_tokens=False)
    text = _text(lm, ids)
    # The best example sits right before the question; no reference block inside the user turn.
    assert text.index(EXAMPLES[1].body) < text.index(EXAMPLES[0].body) < text.rindex(prompt)
    assert CONTEXT_HEADER not in text


def test_chat_model_without_examples_reads_one_user_turn(smol_tok: PreTrainedTokenizerFast) -> None:
    lm = _lm(smol_tok)
    prompt = task_prompt("refs: avoid rewriting packed-refs")
    expected = smol_tok.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )
    assert render_prompt(lm, prompt) == smol_tok.encode(expected, add_special_tokens=False)
    # An example with no body (nothing of the author's survived the budget) adds no turn.
    assert render_prompt(lm, prompt, [Example("only a subject", "")]) == render_prompt(lm, prompt)


def test_base_model_reads_the_examples_as_one_text_block(bpe_tok: PreTrainedTokenizerFast) -> None:
    lm = _lm(bpe_tok)
    assert not lm.has_chat_template
    prompt = "Write it."
    block = context_text(EXAMPLES)
    assert block == (
        f"Subject: {EXAMPLES[0].subject}\n\n{EXAMPLES[0].body}\n\n---\n\n"
        f"Subject: {EXAMPLES[1].subject}\n\n{EXAMPLES[1].body}"
    )
    assert render_prompt(lm, prompt, EXAMPLES) == bpe_tok.encode(
        f"{CONTEXT_HEADER}\n\n{block}\n\n---\n\n{prompt}\n\n", add_special_tokens=True
    )
    assert render_prompt(lm, prompt) == bpe_tok.encode(f"{prompt}\n\n", add_special_tokens=True)


@pytest.mark.parametrize("examples", [[], [Example("s", "")]])
def test_context_text_of_nothing_or_a_bare_subject(examples: list[Example]) -> None:
    assert context_text(examples) == ("" if not examples else "Subject: s")

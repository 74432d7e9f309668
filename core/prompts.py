"""Per-model prompt templates, and the public prompt of the product's own task.

A model with a chat template gets the prompt as a user turn, after the author's earlier examples
(on the device only) as earlier turns of the same conversation: the author's own answers to the
same task. An instruct model given those examples as one block of reference text in the user turn
imitates the block (it echoes a "Subject:" line and stops) instead of answering; as turns, it
answers in their style. A base model gets plain completion text. The same function serves the
device's P_S^c (with examples) and the cloud's P_S^0 and P_G (without), so the two sides can only
differ by the examples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specsteer.core.device_lm import SpecialistLM

__all__ = [
    "CONTEXT_HEADER",
    "ENTRY_SEP",
    "HEADER_GAP",
    "SUBJECT_PREFIX",
    "Example",
    "context_text",
    "render_prompt",
    "task_prompt",
]

# The base-model layout of the examples: a header, then "Subject: ..." + blank line + body per
# example, separated by a Markdown rule so a small LM sees clear entry boundaries.
CONTEXT_HEADER = "Earlier writing by the same author, for reference:"
SUBJECT_PREFIX = "Subject: "
HEADER_GAP = "\n\n"
ENTRY_SEP = "\n\n---\n\n"


@dataclass(frozen=True)
class Example:
    """One earlier answer of the same author to the task: a commit's subject and its (trimmed) body."""

    subject: str
    body: str


def task_prompt(subject: str) -> str:
    """The public prompt of the commit-message task: the subject line only, never the history.

    Instruct models answer "write the body of ..." with a description of the commit ("The commit
    message ... indicates that ...") or with the whole message, subject line first, unless told
    to reply with the body alone; "plain prose" keeps small models from answering in Markdown.
    """
    return (
        "Write the body of the git commit message whose subject line is below: a few sentences of plain prose "
        "that explain what the change does and why. Reply with the body text only, without the subject line, "
        f"headings, lists or code.\n\nSubject: {subject.strip()}"
    )


def context_text(examples: Sequence[Example]) -> str:
    """The examples as one block of text (the base-model layout)."""
    return ENTRY_SEP.join(
        f"{SUBJECT_PREFIX}{e.subject}{HEADER_GAP}{e.body}" if e.body else f"{SUBJECT_PREFIX}{e.subject}"
        for e in examples
    )


def render_prompt(lm: SpecialistLM, prompt: str, examples: Sequence[Example] = ()) -> list[int]:
    """Token IDs that put `prompt` (after the author's `examples`, best first, if any) in front of
    `lm`, ready to generate."""
    tokenizer = lm.tokenizer
    if lm.has_chat_template:
        messages: list[dict[str, str]] = []
        # Best match last: nearest the question it helps with.
        for e in reversed([e for e in examples if e.body]):
            messages += [{"role": "user", "content": task_prompt(e.subject)}, {"role": "assistant", "content": e.body}]
        messages.append({"role": "user", "content": prompt})
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = tokenizer.encode(text, add_special_tokens=False)
    else:
        user = f"{CONTEXT_HEADER}\n\n{context_text(examples)}\n\n---\n\n{prompt}" if examples else prompt
        ids = tokenizer.encode(f"{user}\n\n", add_special_tokens=True)
    return list(ids)

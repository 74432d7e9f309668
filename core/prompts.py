"""Per-model prompt templates, and the public prompt of the product's own task.

A model with a chat template gets the prompt (and, on the device, the private context) as one
user turn; a base model gets plain completion text. The same function serves the device's
P_S^c (with context) and the cloud's P_S^0 and P_G (without), so the two sides can only differ
by the context.
"""

from __future__ import annotations

from core.models import CausalLM

CONTEXT_HEADER = "Earlier writing by the same author, for reference:"


def task_prompt(subject: str) -> str:
    """The public prompt of the commit-message task: the subject line only, never the history.

    Ending on "Body:" gives a base model (the default Generalist) a place to continue from, and
    the asked-for "plain prose" keeps the small Specialist from answering with Markdown.
    """
    return (
        "Write the body of the git commit message whose subject line is below. Explain what the change does "
        f"and why, in a few sentences of plain prose.\n\nSubject: {subject.strip()}\n\nBody:"
    )


def render_prompt(lm: CausalLM, prompt: str, context: str | None = None) -> list[int]:
    """Token IDs that put `prompt` (and `context`, if any) in front of `lm`, ready to generate."""
    user = f"{CONTEXT_HEADER}\n\n{context}\n\n---\n\n{prompt}" if context else prompt
    tokenizer = lm.tokenizer
    if lm.has_chat_template:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": user}], add_generation_prompt=True, tokenize=False
        )
        ids = tokenizer.encode(text, add_special_tokens=False)
    else:
        ids = tokenizer.encode(f"{user}\n\n", add_special_tokens=True)
    return list(ids)

"""A model's chat template rendered as transformers renders it, without importing transformers.

transformers' `apply_chat_template` compiles the template in Jinja's immutable sandbox with
`trim_blocks` and `lstrip_blocks`, the loop-control extension and a `{% generation %}` tag, its own
`tojson` filter and the globals `raise_exception`, `strftime_now`, `dict` and `namespace`, and
renders it with the messages, `add_generation_prompt` and the tokenizer's special tokens. Importing
transformers loads torch, which a device drafting on onnxruntime-genai does not otherwise need, so
that environment is set up here the same way (jinja2 is the library; only its configuration is
repeated). `tests/core/test_device_lm.py` holds the two renderings equal on the embedded models.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from specsteer.core.errors import ModelLoadError, one_line

__all__ = ["ChatTemplate"]

# The special tokens transformers passes to a template (its `special_tokens_map`).
TEMPLATE_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` renders its body (transformers tracks assistant
    tokens with it; the device only needs the text)."""

    tags = {"generation"}  # noqa: RUF012 (jinja2 declares it an instance attribute)

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return str(caller())


class _Namespace(jinja2.utils.Namespace):
    """A template's `namespace()`, refusing underscore-prefixed names as transformers does."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: object) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a chat template cannot set the attribute {name!r}")


class _Dict:
    """A template's `dict()`, without attribute access to the type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    # Jinja's own tojson escapes HTML characters; transformers' does not.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class ChatTemplate:
    """One model's compiled chat template and the special tokens it is rendered with."""

    def __init__(self, source: str, special_tokens: dict[str, str]) -> None:
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
        )
        env.filters["tojson"] = _tojson
        env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
        env.globals.update(dict=_Dict(), namespace=_Namespace)
        self.source = source
        self._compiled = env.from_string(source)
        self._tokens = {k: v for k, v in special_tokens.items() if k in TEMPLATE_TOKENS}

    @classmethod
    def from_folder(cls, folder: Path, settings: dict[str, Any], special_tokens: dict[str, str]) -> ChatTemplate | None:
        """The template a model folder states (`chat_template.jinja`, else tokenizer_config.json's
        `chat_template`), or None for a model without one."""
        path = folder / "chat_template.jinja"
        try:
            source = path.read_text(encoding="utf-8") if path.is_file() else settings.get("chat_template")
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelLoadError(f"cannot read {path}: {one_line(exc)}.") from exc
        if not isinstance(source, str) or not source:
            return None  # a list of named templates is a tool-use layout the device never renders
        try:
            return cls(source, special_tokens)
        except jinja2.TemplateError as exc:
            raise ModelLoadError(f"the chat template in {folder} does not compile: {one_line(exc)}.") from exc

    def render(self, messages: list[dict[str, str]], *, add_generation_prompt: bool) -> str:
        chat = [dict(m) for m in messages]
        return str(
            self._compiled.render(
                messages=chat, tools=None, documents=None, add_generation_prompt=add_generation_prompt, **self._tokens
            )
        )

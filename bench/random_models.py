"""Random-weight model folders of the real configurations, with a given tokenizer: what the GPU
machine's end-to-end run loads (real weights cannot travel there; a dense model's speed does not
depend on its weight values, and the wire carries only token IDs).

    python -m bench.random_models --tokenizer DIR --configs qwen2.5-0.5b,qwen2.5-1.5b --out DIR [--device cuda]

Each configuration of `bench.gpu.CONFIGS` becomes OUT/NAME: `config.json` and safetensors weights
(float32, initialised on `--device`, transformers' own initialisation) and the tokenizer's files
copied from `--tokenizer` (a folder `core.models.load_causal_lm` reads, e.g. a converted model's).
Any folder a model loader takes is fine for `bench.speed --specialist/--generalist`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from bench.gpu import CONFIGS, hf_config
from core.cli import command_parser, reported
from core.device import resolve_device
from core.errors import ConfigError

__all__ = ["TOKENIZER_FILES", "write_model"]

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def write_model(name: str, tokenizer_dir: Path, out: Path, device: torch.device, context: int = 4096) -> Path:
    """OUT/NAME: configuration NAME with random weights and `tokenizer_dir`'s tokenizer."""
    if name not in CONFIGS:
        raise ConfigError(f"Unknown configuration {name!r}: use some of {', '.join(CONFIGS)}.")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"No tokenizer can be read from {tokenizer_dir}: {exc}") from None
    shape = CONFIGS[name]
    if len(tokenizer) > shape.vocab:
        raise ConfigError(f"The tokenizer has {len(tokenizer)} entries, more than {name}'s {shape.vocab} embeddings.")
    config = hf_config(shape, context)
    config.bos_token_id, config.eos_token_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    for file in TOKENIZER_FILES:
        if (tokenizer_dir / file).is_file():
            shutil.copyfile(tokenizer_dir / file, folder / file)
    return folder


def main(argv: Sequence[str] | None = None) -> int:
    p = command_parser("bench.random_models", __doc__.splitlines()[0])
    p.add_argument("--tokenizer", type=Path, required=True, help="a folder holding tokenizer.json (and its config)")
    p.add_argument("--configs", required=True, help=f"comma-separated names of {', '.join(CONFIGS)}")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cpu", help="where the weights are initialised: cpu (default) or cuda")
    args: argparse.Namespace = p.parse_args(argv)

    def command() -> int:
        device = resolve_device(args.device)
        for name in (n.strip() for n in args.configs.split(",") if n.strip()):
            print(f"bench.random_models: {write_model(name, args.tokenizer, args.out, device)}", flush=True)
        return 0

    return reported("bench.random_models", command)


if __name__ == "__main__":
    sys.exit(main())

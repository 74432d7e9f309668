"""Random-weight model folders of the real configurations, with a given tokenizer: what the GPU
machine's end-to-end run loads (real weights cannot travel there; a dense model's speed does not
depend on its weight values, and the wire carries only token IDs).

    python -m bench.random_models --tokenizer DIR --configs qwen2.5-0.5b,qwen2.5-1.5b --out DIR [--device cuda]
        [--acceptance 0.8 --specialist qwen2.5-0.5b [--gamma 0.5]] [--measure GENERALIST]

Each configuration of `bench.gpu.CONFIGS` becomes OUT/NAME: `config.json` and safetensors weights
(float32, initialised on `--device`, transformers' own initialisation) and the tokenizer's files
copied from `--tokenizer` (a folder `core.models.load_causal_lm` reads, e.g. a converted model's).
Any folder a model loader takes is fine for `bench.speed --specialist/--generalist`.

Acceptance, controlled: two random models disagree, so a Specialist's drafts almost never pass
the ratio test of a random Generalist, and a run at acceptance 0 checks little of the cost model.
With `--acceptance P`, the `--specialist` configuration is written *flat* (its next-token logits
scaled to a standard deviation of 0.001: P_S^0 is uniform within 0.1 %), and every other
configuration's logits are scaled (through the final norm's weight, which they are linear in) so
that where the run verifies (the demo queries' public prompts, rendered as the verifier renders
them, followed by uniformly drawn tokens) the sampling ratio test, accept with probability
min(1, P_G / (gamma P_S^0)), passes a uniformly drawn token with probability P on average
(`calibrate_acceptance`). Run in sampling mode
(`bench.speed --sampling`), the flat Specialist drafts uniformly drawn tokens, and the ratio test
passes about P of the drafts it tries (0.77 at P = 0.8 with `--measure` on this CPU, docs/gpu.md).
Fewer of the drafts sent are accepted (0.55 there): a round stops at its first rejection. The cost
model is fitted to the drafts a run accepts per round, whatever they are. (Greedy, a random
model's drafts fall into short loops of a few tokens, and whether those few pass is a coin toss
per model.) `--measure GENERALIST` then runs sampled (`--greedy`: greedy) `specsteer` in process
(the demo user's 3 queries, their tails drawn anew) and prints both rates it got.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from bench.gpu import CONFIGS, hf_config
from specsteer.core.cli import command_parser, reported
from specsteer.core.errors import ConfigError
from specsteer.core.placement import resolve_device
from specsteer.core.prompts import render_prompt, task_prompt

__all__ = [
    "FLAT_LOGIT_STD",
    "TOKENIZER_FILES",
    "calibrate_acceptance",
    "measured_acceptance",
    "scale_logits",
    "uniform_draft_acceptance",
    "write_model",
]

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")
FLAT_LOGIT_STD = 1e-3
DEMO_PROFILE = Path(__file__).resolve().parents[1] / "sdk" / "data" / "demo_profile.json"


def scale_logits(model: PreTrainedModel, std: float, seed: int = 0) -> float:
    """Scale `model`'s final norm weight so its next-token logits spread with standard deviation
    `std` (measured over the vocabulary at 64 positions of random tokens); returns the factor."""
    device = next(model.parameters()).device
    ids = torch.randint(0, model.config.vocab_size, (1, 64), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        measured = model(input_ids=ids.to(device)).logits.float().std(dim=-1).mean().item()
        factor = std / measured
        model.model.norm.weight.mul_(factor)
    return factor


def uniform_draft_acceptance(logits: torch.Tensor, gamma: float) -> float:
    """The sampling ratio test's mean pass rate for a uniformly drawn draft against a uniform P_S^0,
    over the positions of `logits` [T, V]: mean over positions and tokens of min(1, V P_G / gamma)."""
    vocab = logits.shape[-1]
    log_ratio = torch.log_softmax(logits, dim=-1) + math.log(vocab) - math.log(gamma)
    return torch.exp(log_ratio.clamp(max=0.0)).mean().item()


def calibrate_acceptance(
    model: PreTrainedModel, contexts: Sequence[tuple[list[int], int]], acceptance: float, gamma: float
) -> float:
    """Scale `model`'s logits (its final norm's weight) so that `uniform_draft_acceptance` over its
    next-token logits at the positions that verify drafts in `contexts` ((ids, first such
    position) pairs, `calibration_contexts`) is `acceptance`; returns the factor. Measured where
    the run verifies, not assumed: a random model's logits are not one Gaussian spread, and the
    tokens of its context stand out of them."""
    if not 0 < acceptance < 1 or not 0 < gamma < 1:
        raise ConfigError(f"--acceptance and --gamma must lie strictly between 0 and 1; got {acceptance}, {gamma}.")
    device = next(model.parameters()).device
    with torch.no_grad():
        rows = [model(input_ids=torch.tensor([ids], device=device)).logits[0, first:-1] for ids, first in contexts]
        logits = torch.cat(rows).float()
        high = 1.0  # scale 0 is uniform: every draft passes (1 / gamma > 1)
        while uniform_draft_acceptance(high * logits, gamma) > acceptance:
            high *= 2
            if high > 1e6:
                raise ConfigError(f"No scale of this model's logits brings acceptance down to {acceptance}.")
        low = 0.0
        for _ in range(50):
            mid = (low + high) / 2
            low, high = (mid, high) if uniform_draft_acceptance(mid * logits, gamma) > acceptance else (low, mid)
        factor = (low + high) / 2
        model.model.norm.weight.mul_(factor)
    return factor


def calibration_contexts(tokenizer: Any, tail: int = 48, seed: int = 0) -> list[tuple[list[int], int]]:
    """What the Generalist verifies in the run: each demo query's public prompt as the verifier
    renders it for its models (`render_prompt`: the chat template, where the tokenizer has one)
    followed by `tail` uniformly drawn tokens (a flat Specialist's drafts), with the position that
    verifies the first of them."""
    demo = json.loads(DEMO_PROFILE.read_text(encoding="utf-8"))
    lm = SimpleNamespace(tokenizer=tokenizer, has_chat_template=bool(getattr(tokenizer, "chat_template", None)))
    generator = torch.Generator().manual_seed(seed)
    contexts = []
    for query in demo["queries"]:
        prompt = render_prompt(lm, task_prompt(query["subject"]))
        drafts = torch.randint(0, len(tokenizer), (tail,), generator=generator).tolist()
        contexts.append((prompt + drafts, len(prompt) - 1))
    return contexts


def write_model(
    name: str,
    tokenizer_dir: Path,
    out: Path,
    device: torch.device,
    context: int = 4096,
    *,
    flat: bool = False,
    acceptance: tuple[float, float] | None = None,
) -> Path:
    """OUT/NAME: configuration NAME with random weights and `tokenizer_dir`'s tokenizer; its logits
    `flat`, or calibrated to an (acceptance, gamma) of a flat Specialist's drafts, if asked."""
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
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    if flat:
        scale_logits(model, FLAT_LOGIT_STD)
    elif acceptance is not None:
        calibrate_acceptance(model, calibration_contexts(tokenizer), *acceptance)
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    for file in TOKENIZER_FILES:
        if (tokenizer_dir / file).is_file():
            shutil.copyfile(tokenizer_dir / file, folder / file)
    return folder


def measured_acceptance(
    specialist_dir: Path, generalist_dir: Path, queries: int = 3, *, sampling: bool = True
) -> dict[str, float]:
    """`specsteer` (gamma 0.5, K = 4, sampled unless `sampling` is False) in process on the demo
    user's first `queries` queries, 32 tokens each: the drafts accepted per draft drafted
    (`per_draft`) and per draft the ratio test tried (`pass_rate`, what `calibrate_acceptance`
    builds in). A round stops at its first rejection, so at a pass rate p the drafts after it are
    never tried: with K = 4, per_draft is about (p + p^2 + p^3 + p^4) / 4, 0.59 at p = 0.8. The
    drafts tried are the accepted ones and one per rejection (`recoveries`; a rejection in a
    generation's last round, with no token left to recover, is not counted)."""
    from specsteer.core.models import load_causal_lm
    from specsteer.core.session_types import SessionParams
    from specsteer.sdk.context import Profile
    from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
    from specsteer.server.local import in_process_verifier

    demo = json.loads(DEMO_PROFILE.read_text(encoding="utf-8"))
    s_lm, g_lm = load_causal_lm(specialist_dir, progress=False), load_causal_lm(generalist_dir, progress=False)
    specialist = Specialist(s_lm, Profile.from_obj(demo, source=str(DEMO_PROFILE)))
    verifier = in_process_verifier(s_lm, g_lm, seed=0)
    rounds = drafted = accepted = rejected = 0
    for index, query in enumerate(demo["queries"][:queries]):
        stats = generate(
            specialist,
            task_prompt(query["subject"]),
            SessionParams(gamma=0.5, draft_len=4, sampling=sampling),
            # A seed per query: with one seed each query's draws were the same stream, so over a
            # small vocabulary one early end-of-text ended every query at the same token.
            DecodeOptions(max_new_tokens=32, seed=index),
            verifier,
        ).stats
        rounds += stats.rounds
        drafted += stats.drafted
        accepted += stats.accepted
        rejected += stats.recoveries
    return {
        "rounds": rounds,
        "drafted": drafted,
        "accepted": accepted,
        "rejected": rejected,
        "per_draft": accepted / max(drafted, 1),
        "pass_rate": accepted / max(accepted + rejected, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = command_parser("bench.random_models", __doc__.splitlines()[0])
    p.add_argument("--tokenizer", type=Path, required=True, help="a folder holding tokenizer.json (and its config)")
    p.add_argument("--configs", required=True, help=f"comma-separated names of {', '.join(CONFIGS)}")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cpu", help="where the weights are initialised: cpu (default) or cuda")
    p.add_argument("--acceptance", type=float, help="the sampling ratio test's pass rate to build in (see above)")
    p.add_argument("--specialist", help="with --acceptance: the configuration written flat")
    p.add_argument("--gamma", type=float, default=0.5, help="with --acceptance: the ratio test's gamma (0.5)")
    p.add_argument(
        "--measure", metavar="GENERALIST", help="then run specsteer in process, --specialist drafting for it"
    )
    p.add_argument("--greedy", action="store_true", help="with --measure: greedy, not sampled")
    args: argparse.Namespace = p.parse_args(argv)

    def command() -> int:
        device = resolve_device(args.device)
        names = list(dict.fromkeys(n.strip() for n in args.configs.split(",") if n.strip()))
        if args.acceptance is not None and args.specialist not in names:
            raise ConfigError("--acceptance needs --specialist, one of the --configs, to write flat.")
        for name in names:
            shaped = args.acceptance is not None
            flat = shaped and name == args.specialist
            acceptance = (args.acceptance, args.gamma) if shaped and not flat else None
            folder = write_model(name, args.tokenizer, args.out, device, flat=flat, acceptance=acceptance)
            note = " (flat)" if flat else f" (acceptance {args.acceptance} built in)" if acceptance else ""
            print(f"bench.random_models: {folder}{note}", flush=True)
        if args.measure is not None:
            if args.specialist not in names or args.measure not in names:
                raise ConfigError("--measure needs both --specialist and the Generalist it names among the --configs.")
            got = measured_acceptance(args.out / args.specialist, args.out / args.measure, sampling=not args.greedy)
            print(
                f"bench.random_models: specsteer accepted {got['accepted']} of {got['drafted']} drafts "
                f"({got['per_draft']:.2f}) in {got['rounds']} rounds; the ratio test passed {got['accepted']} "
                f"of the {got['accepted'] + got['rejected']} it tried ({got['pass_rate']:.2f})",
                flush=True,
            )
        return 0

    return reported("bench.random_models", command)


if __name__ == "__main__":
    sys.exit(main())

"""`sdk`: run SpecSteer and its baselines from the command line.

    sdk generate --prompt TEXT [--profile FILE] [--method specsteer] [--json] ...
    sdk generate --prompt TEXT --server HOST:PORT --pins FILE --cert FILE --key FILE ...
    sdk generate --prompt TEXT --client-config FILE      # the same, from a TOML [verifier] table
    sdk models build [MODEL] [--out DIR]                 # a model bundle for an app to ship (sdk.models_command)

`generate` writes the text to stdout as its tokens commit, and nothing else: progress and the
stats go to stderr (`--quiet`: neither, only the text and, on failure, one sentence); with
`--json`, stdout is one JSON object (text, token IDs, stats) once the generation ends.

With `--server` (or a client config) the cloud verifier is remote, over mutual TLS with pinned
anchors; only the Specialist is loaded here. Without it, the verifier runs in this process
(through the wire format). The repository's demo (`python -m demo`, not part of the wheel) is built
on this command line's options and runner.

This package never imports the cloud (docs/architecture.md): the in-process verifier is found
through the entry point the cloud side registers (`sdk.cloud_plugins`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

# Only what building the parser needs is imported here: torch and transformers (seconds, hundreds of
# MB) load inside the commands that run a model, so `sdk --help` and argparse's usage errors stay instant.
from specsteer.core.cli import Parser as _Parser
from specsteer.core.cli import command_parser, finite_float, number, reported, whole_number
from specsteer.core.errors import ConfigError
from specsteer.core.limits import WIRE_MAX_TOP_K
from specsteer.core.logs import configure_cli_logging
from specsteer.core.model_registry import DEFAULT_GENERALIST, DEFAULT_SPECIALIST
from specsteer.core.session_types import CandidatePolicy, Method, SessionParams
from specsteer.privacy.guard import PLACEHOLDER_LABELS
from specsteer.sdk.cloud_plugins import local_verifier_factory
from specsteer.sdk.context import Profile
from specsteer.sdk.drafters import DEFAULT_DRAFTER, DEFAULT_ONNX_PRECISION, DRAFTERS, ONNX_PRECISIONS
from specsteer.sdk.models_command import add_models_parser, run_models_command
from specsteer.sdk.prompt_guard import PROMPT_POLICIES
from specsteer.sdk.specialists import DEFAULT_CONTEXT_ENTRIES
from specsteer.sdk.uplink_guard import DEFAULT_GUARD_LABELS, DEFAULT_GUARD_SETTING, GUARD_SETTINGS, guard_setting

if TYPE_CHECKING:
    from specsteer.core.device_lm import SpecialistLM
    from specsteer.core.models import CausalLM
    from specsteer.sdk.client import ClientConfig, SpecSteerClient
    from specsteer.sdk.cloud_plugins import LocalVerifierFactory
    from specsteer.sdk.decoding import DecodeOptions, Drafter, Generation, Specialist
    from specsteer.sdk.transport import InProcessVerifier

logger = logging.getLogger("specsteer.sdk.cli")


def add_decoding_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", default="specsteer", choices=[m.value for m in Method], help="decoding method")
    p.add_argument(
        "--gamma", type=number(infinity=True), default=0.5, help="acceptance threshold (0 = accept all, inf = none)"
    )
    p.add_argument(
        "--certainty",
        type=number(),
        default=0.0,
        help="the certainty gate (docs/algorithm.md): where the cloud's top probability is below this, drafts are "
        "tested at --gamma-uncertain instead of --gamma (default 0: off, the paper's rule)",
    )
    p.add_argument(
        "--gamma-uncertain", type=number(), default=0.1, help="the gate's threshold where the cloud is uncertain"
    )
    p.add_argument(
        "--gamma-form",
        type=number(),
        default=None,
        help="the form rule (docs/algorithm.md): drafts of layout and punctuation only (no letter or digit) are "
        "tested at this gamma instead (default: off, the paper's rule)",
    )
    p.add_argument("--alpha", type=finite_float, default=None, help="steering strength (default 1.0; llm: 0)")
    p.add_argument("--top-k", type=whole_number(), default=10, help="steering candidates per recovery")
    p.add_argument(
        "--draft-len", type=whole_number(), default=None, help="K, tokens drafted per round (default 4; fusion, llm: 0)"
    )
    p.add_argument(
        "--policy",
        default="guardrail",
        choices=[c.value for c in CandidatePolicy],
        help="how the cloud picks steering candidates: the Generalist's top k (guardrail) or the k largest steering "
        "values (literal)",
    )
    p.add_argument("--no-bonus", action="store_true", help="no steered token after a fully accepted draft")
    p.add_argument("--sampling", action="store_true", help="sample instead of greedy decoding")
    p.add_argument(
        "--padded-frames",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="constant-size uplink rounds, hiding how many tokens each carries and where the guard held some "
        "(default on, or the client config's padded_frames; --no-padded-frames sends about 5x fewer uplink bytes)",
    )
    p.add_argument(
        "--temperature", type=finite_float, default=None, help="sampling temperature (with --sampling; default 1.0)"
    )
    p.add_argument(
        "--seed", type=whole_number(0), default=None, help="seed of the sampling draws (with --sampling; default 0)"
    )
    p.add_argument(
        "--max-new-tokens", type=whole_number(), default=128, help="most tokens to generate (default 128; demo 64)"
    )
    p.add_argument(
        "--no-repeat-ngram",
        type=whole_number(0),
        default=0,
        metavar="N",
        help="the device's repetition stop (docs/algorithm.md): no token that would repeat an N-token run of the "
        "generated text (default 0: off; 3 and 6 measured on the dev data: docs/results/README.md)",
    )
    p.add_argument(
        "--specialist",
        default=None,
        help=f"a model bundle, folder, .gguf file or embedded name (default {DEFAULT_SPECIALIST}, or the client "
        "config's [device] bundle or specialist)",
    )
    p.add_argument("--generalist", default=DEFAULT_GENERALIST, help="folder, .gguf file or embedded name")
    p.add_argument("--cache-dir", type=Path, default=None, help="where converted models are kept")
    p.add_argument(
        "--quantize", choices=["fp32", "int8"], default="fp32", help="models' Linear layers (int8: dynamic, AVX2)"
    )
    p.add_argument(
        "--drafter",
        choices=DRAFTERS,
        default=None,
        help=f"where the Specialist's forwards run (default {DEFAULT_DRAFTER}: onnxruntime-genai on the model's "
        "bundle, or converted once; torch: the loaded model; llamacpp: its GGUF, the [llamacpp] extra)",
    )
    p.add_argument(
        "--drafter-precision",
        choices=ONNX_PRECISIONS,
        default=None,
        help=f"the onnx drafter's weights (default {DEFAULT_ONNX_PRECISION})",
    )
    p.add_argument(
        "--context-entries",
        type=whole_number(),
        default=None,
        help=f"profile entries retrieved as context (default {DEFAULT_CONTEXT_ENTRIES})",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (text, token IDs, stats) at the end")
    p.add_argument(
        "--quiet", action="store_true", help="no progress and no stats on stderr: only the text (and errors)"
    )
    p.add_argument(
        "--guard",
        choices=GUARD_SETTINGS,
        default=None,
        help="egress guard for sensitive spans in the uplink (default placeholder; see docs/privacy.md)",
    )
    p.add_argument(
        "--prompt-guard",
        choices=PROMPT_POLICIES,
        default=None,
        help="what of the prompt's sensitive spans goes up: placeholders the device puts back in its text (redact, "
        "the default), nothing (refuse) or the spans as typed (allow)",
    )
    p.add_argument(
        "--placeholder-labels",
        choices=PLACEHOLDER_LABELS,
        default=None,
        help="what a held span goes up as: one <PRIVATE> for every kind (generic, the default) or one label per kind "
        "(by-kind: <EMAIL>, <PHONE>, ...)",
    )


def add_fault_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-fallback", action="store_true", help="fail instead of finishing locally if the verifier is lost"
    )
    p.add_argument(
        "--round-timeout",
        type=number(positive=True),
        default=None,
        help="seconds to wait for each verdict (default 30)",
    )
    p.add_argument(
        "--connect-timeout", type=number(positive=True), default=None, help="seconds to connect (default 10)"
    )


def _add_remote_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", metavar="HOST:PORT", help="the remote verifier (mutual TLS)")
    p.add_argument("--pins", type=Path, help="pin set: sha256/<base64 SPKI> lines and the anchor certificates")
    p.add_argument("--anchors", type=Path, help="anchor certificates, if not in the pins file")
    p.add_argument("--cert", type=Path, help="this device's client certificate (PEM)")
    p.add_argument("--key", type=Path, help="this device's private key (PEM)")
    p.add_argument("--server-name", help="verify the server certificate for this name instead of HOST")
    p.add_argument("--client-config", type=Path, help="TOML file with a [verifier] table (flags override it)")
    p.add_argument("--audit-log", type=Path, help="append every uplink and downlink to this tamper-evident log")
    p.add_argument("--audit-key", type=Path, help="the device's log signing key (`audit keygen` makes one)")
    p.add_argument(
        "--witness-key",
        type=Path,
        help="the verifier's witness key (`server witness-key`'s .pub): the audit log keeps and proves from "
        "only cosignatures that verify under it",
    )
    p.add_argument(
        "--witness-policy",
        type=Path,
        help="a witness policy (TOML, k of n witnesses): the log's checkpoints go to its witnesses over HTTPS "
        "after each generation",
    )
    p.add_argument(
        "--require-witness",
        action="store_true",
        default=None,
        help="exit 1 when the cloud misbehaves as the log's witness or the policy's quorum does not cosign",
    )
    add_fault_options(p)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("sdk", "SpecSteer on-device SDK")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    gen = sub.add_parser("generate", help="generate text for a prompt")
    gen.add_argument("--prompt", required=True, help="the public prompt (sent to the cloud as token IDs)")
    gen.add_argument("--profile", type=Path, help="the user's private history (JSON/JSONL; stays on the device)")
    gen.add_argument(
        "--federation-state",
        type=Path,
        help="this device's federation folder: use its newest global adapter (declared to the verifier) "
        "and its personal adapter",
    )
    add_decoding_options(gen)
    _add_remote_options(gen)
    add_models_parser(sub)
    return parser


def session_params(args: argparse.Namespace) -> SessionParams:
    """Map CLI options to session parameters. Left out, K and alpha take the method's own values
    (fusion and llm decide every token in the cloud, K = 0; llm has no alpha); given, they go to
    `SessionParams` as given, which refuses what the method cannot take rather than drop it."""
    method = Method(args.method)
    defaults = SessionParams()
    draft_len = args.draft_len
    if draft_len is None:
        draft_len = 0 if method in (Method.FUSION, Method.LLM) else defaults.draft_len
    alpha = args.alpha
    if alpha is None:
        alpha = 0.0 if method is Method.LLM else defaults.alpha
    return SessionParams(
        method=method,
        sampling=args.sampling,
        gamma=args.gamma,
        certainty=args.certainty,
        gamma_uncertain=args.gamma_uncertain,
        gamma_form=args.gamma_form,
        alpha=alpha,
        top_k=args.top_k,
        draft_len=draft_len,
        policy=CandidatePolicy(args.policy),
        bonus=not args.no_bonus,
        adapter_version=declared_adapter_version(args),
        padded_frames=args.padded_frames is not False,
    )


def declared_adapter_version(args: argparse.Namespace) -> int:
    """The federated global adapter version this device holds (0: none, the base weights)."""
    state = getattr(args, "federation_state", None)
    if state is None:
        return 0
    from specsteer.core.adapter_files import GLOBAL, latest_version

    return latest_version(Path(state) / GLOBAL) or 0


@dataclass
class LocalRun:
    """Specialist and, when the method needs it, an in-process cloud verifier."""

    specialist: Specialist
    verifier: InProcessVerifier | None


def build_local(
    specialist_lm: CausalLM,
    generalist_lm: CausalLM | None,
    profile: Profile | None,
    seed: int,
    context_entries: int,
    federation_state: Path | None = None,
    factory: LocalVerifierFactory | None = None,
    drafter: Drafter | Callable[[CausalLM], Drafter | None] | None = None,
) -> LocalRun:
    """The device's Specialist and, if a Generalist is given, the in-process verifier beside it.

    `drafter` is a drafter, or a function that makes one for the device's Specialist once its
    adapters are merged in (the ONNX drafter converts those weights).

    The verifier comes from `factory`, by default the one the cloud package registers
    (`sdk.cloud_plugins.local_verifier_factory`): device code never imports the server.
    """
    from specsteer.sdk.decoding import Specialist

    device_lm = device_specialist(specialist_lm, federation_state)
    if callable(drafter):
        drafter = drafter(device_lm)
    specialist = Specialist(device_lm, profile, context_entries=context_entries, drafter=drafter)
    if generalist_lm is None:
        return LocalRun(specialist, None)
    make = factory or local_verifier_factory()
    return LocalRun(specialist, make(specialist_lm, generalist_lm, seed=seed, federation_state=federation_state))


def device_specialist(base: CausalLM, federation_state: Path | None) -> CausalLM:
    """The base Specialist, or with the device's federated global + personal adapters merged in."""
    if federation_state is None:
        return base
    from specsteer.core.adapters import load_device_specialist

    return load_device_specialist(base, federation_state)[0]


def device_drafter(args: argparse.Namespace, lm: SpecialistLM) -> Drafter | None:
    """The `--drafter` for the device's Specialist `lm` (None: its torch model drafts); with
    --federation-state, `lm` has the adapters merged in and the drafter converts those weights."""
    from specsteer.sdk.drafters import drafter_for

    return drafter_for(
        getattr(args, "drafter", DEFAULT_DRAFTER),
        args.specialist,
        lm,
        precision=getattr(args, "drafter_precision", None),
        cache_dir=getattr(args, "cache_dir", None),
        from_weights=getattr(args, "federation_state", None) is not None,
    )


def client_config(args: argparse.Namespace) -> ClientConfig | None:
    """The remote verifier's settings from --client-config and flags, or None to run in-process."""
    from specsteer.sdk.client import ClientConfig

    flags = {
        "server": getattr(args, "server", None),
        "pins": getattr(args, "pins", None),
        "anchors": getattr(args, "anchors", None),
        "cert": getattr(args, "cert", None),
        "key": getattr(args, "key", None),
        "server_name": getattr(args, "server_name", None),
        "connect_timeout": args.connect_timeout,
        "round_timeout": args.round_timeout,
        "fallback": False if args.no_fallback else None,
        "guard": args.guard,
        "prompt_guard": getattr(args, "prompt_guard", None),
        "padded_frames": getattr(args, "padded_frames", None),
        "placeholder_labels": getattr(args, "placeholder_labels", None),
        # [device] and [audit]: a flag given wins over the file, as every other one does.
        "specialist": args.specialist,
        "drafter": args.drafter,
        "drafter_precision": args.drafter_precision,
        "federation_state": getattr(args, "federation_state", None),
        "context_entries": args.context_entries,
        "cache_dir": args.cache_dir,
        "audit_log": getattr(args, "audit_log", None),
        "audit_key": getattr(args, "audit_key", None),
        "witness_key": getattr(args, "witness_key", None),
        "witness_policy": getattr(args, "witness_policy", None),
        "require_witness": getattr(args, "require_witness", None),
    }
    path = getattr(args, "client_config", None)
    if path is not None:
        return ClientConfig.from_file(path, **flags)
    if flags["server"] is None:
        named = [f"--{k.replace('_', '-')}" for k in ("pins", "anchors", "cert", "key", "server_name") if flags[k]]
        if named:
            raise ConfigError(f"{named[0]} is for a remote verifier: add --server HOST:PORT")
        return None
    missing = [f"--{k}" for k in ("pins", "cert", "key") if flags[k] is None]
    if missing:
        raise ConfigError(f"--server needs {', '.join(missing)} (mutual TLS with pinned anchors)")
    return ClientConfig(**{k: v for k, v in flags.items() if v is not None})


def check_options(
    args: argparse.Namespace, prompt: str, *, remote: bool = False
) -> tuple[SessionParams, DecodeOptions]:
    from specsteer.sdk.decoding import DecodeOptions
    from specsteer.sdk.drafters import check_drafter_choice, check_drafter_installed

    with_device_defaults(args)  # what a flag left unset means, where no client config resolved it
    params = session_params(args)
    if remote and params.method.uses_cloud and params.top_k > WIRE_MAX_TOP_K:
        raise ConfigError(f"top-k must be at most {WIRE_MAX_TOP_K} with a remote verifier; got {params.top_k}")
    sampled = {"temperature": args.temperature, "seed": args.seed}
    given = [name for name, value in sampled.items() if value is not None]
    if given and not args.sampling:  # greedy decoding draws nothing: the setting would do nothing
        raise ConfigError(f"--{given[0]} is for sampled decoding: add --sampling")
    options = DecodeOptions(
        max_new_tokens=args.max_new_tokens,
        no_repeat_ngram=args.no_repeat_ngram,
        **{k: v for k, v in sampled.items() if v is not None},
    )
    if args.context_entries < 0:
        raise ConfigError(f"context-entries must be 0 or more; got {args.context_entries}")
    drafter = getattr(args, "drafter", DEFAULT_DRAFTER)
    precision, adapters = getattr(args, "drafter_precision", None), getattr(args, "federation_state", None) is not None
    check_drafter_choice(drafter, precision=precision, with_adapters=adapters, flags=True)
    if drafter != "torch":
        check_drafter_installed(drafter)
    if not prompt.strip():
        raise ConfigError("the prompt is empty")
    return params, options


def run_remote(args: argparse.Namespace, prompt: str, client: SpecSteerClient, out: TextIO | None = None) -> Generation:
    """One generation with the options `args` gives, on a client of a remote verifier: only the
    Specialist (and the private profile) live here.

    With `out`, the text is written to it as it commits (`TextStream`), ending with a newline."""
    params, options = check_options(args, prompt)
    stream = None if out is None else TextStream(client.specialist.decode, out)
    log(args, f"generating with {params.method.value} (mutual TLS, pinned)")
    result = client.generate(prompt, params, options, on_commit=stream)
    if stream is not None:
        stream.finish(result.text)
    return result  # a fallback is logged where it happens (`sdk.decoding.generate`)


def with_device_defaults(args: argparse.Namespace, config: ClientConfig | None = None) -> argparse.Namespace:
    """`args` with the device's settings resolved: from `config` (which already took the flags over
    its file) against a remote verifier, else the defaults where a flag was not given."""
    if config is not None:
        args.specialist = str(config.bundle or config.specialist)
        args.drafter, args.drafter_precision = config.drafter, config.drafter_precision
        args.federation_state, args.context_entries = config.federation_state, config.context_entries
        args.cache_dir = config.cache_dir
        return args
    args.specialist = args.specialist or DEFAULT_SPECIALIST
    args.drafter = args.drafter or DEFAULT_DRAFTER
    args.context_entries = DEFAULT_CONTEXT_ENTRIES if args.context_entries is None else args.context_entries
    return args


def remote_client(
    args: argparse.Namespace, prompt: str, profile: Profile | None, config: ClientConfig
) -> SpecSteerClient:
    """What `sdk generate --server` generates with: `SpecSteerClient.from_config` (the Specialist on its
    drafter, the audit log, the pinned channel), the options checked first."""
    from specsteer.sdk.client import SpecSteerClient

    check_options(with_device_defaults(args, config), prompt, remote=True)
    config.identity()  # a bad address, pin set or certificate fails now, before the model loads
    log(args, f"loading Specialist {args.specialist}")
    return SpecSteerClient.from_config(config, profile=profile, progress=not getattr(args, "quiet", False))


def run(args: argparse.Namespace, prompt: str, profile: Profile | None, out: TextIO | None = None) -> Generation:
    """One generation as the options say; with `out`, its text is written there as tokens commit."""
    config = client_config(args) if args.command == "generate" else None
    if config is not None:
        with remote_client(args, prompt, profile, config) as client:
            return run_remote(args, prompt, client, out)
    if getattr(args, "audit_log", None) is not None:
        raise ConfigError("--audit-log records what crosses the network: add --server HOST:PORT")
    remote_only = {
        "--audit-key": getattr(args, "audit_key", None) is not None,
        "--witness-key": getattr(args, "witness_key", None) is not None,
        "--witness-policy": getattr(args, "witness_policy", None) is not None,
        "--require-witness": bool(getattr(args, "require_witness", None)),
        "--no-fallback": getattr(args, "no_fallback", False),
        "--connect-timeout": getattr(args, "connect_timeout", None) is not None,
        "--round-timeout": getattr(args, "round_timeout", None) is not None,
    }
    for flag, given in remote_only.items():
        if given:  # in process there is no network to time out, fall back from or record
            raise ConfigError(f"{flag} is for a remote verifier: add --server HOST:PORT")
    from specsteer.core.models import load_causal_lm  # in process, the verifier's models are torch's
    from specsteer.sdk.decoding import generate

    params, options = check_options(args, prompt)
    # The in-process verifier is cloud code, found by entry point: a missing one fails before the models load.
    factory = local_verifier_factory() if params.method.uses_cloud else None
    quantize = getattr(args, "quantize", "fp32")
    log(args, f"loading Specialist {args.specialist}")
    s_lm = load_causal_lm(args.specialist, cache_dir=args.cache_dir, quantize=quantize)
    g_lm = None
    if params.method.uses_cloud:
        log(args, f"loading Generalist {args.generalist}")
        g_lm = load_causal_lm(args.generalist, cache_dir=args.cache_dir, quantize=quantize)
    federation_state = getattr(args, "federation_state", None)
    drafter = partial(device_drafter, args)
    local = build_local(s_lm, g_lm, profile, options.seed, args.context_entries, federation_state, factory, drafter)
    guard = guard_setting(
        profile,
        s_lm.tokenizer,
        args.guard or DEFAULT_GUARD_SETTING,
        args.placeholder_labels or DEFAULT_GUARD_LABELS,
    )
    log(args, f"generating with {params.method.value}")
    stream = None if out is None else TextStream(local.specialist.decode, out)
    result = generate(
        local.specialist,
        prompt,
        params,
        options,
        local.verifier,
        guard=guard,
        on_commit=stream,
        prompt_guard=args.prompt_guard or "redact",
    )
    if stream is not None:
        stream.finish(result.text)
    return result


class TextStream:
    """Writes a generation's text to `out` as its tokens commit: the `on_commit` of `generate`.

    Each commit's new text is written and flushed at once, so a terminal (or a pipe) sees the text
    grow while the generation runs. A token that ends inside a multi-byte character is held back
    until the character completes, as `sdk.client.GenerationStream` does.
    """

    def __init__(self, decode: Callable[[list[int]], str], out: TextIO) -> None:
        self._decode = decode
        self._out = out
        self._ids: list[int] = []
        self._written = ""

    def __call__(self, tokens: list[int]) -> None:
        self._ids.extend(tokens)
        text = self._decode(self._ids)
        if text.endswith("\ufffd") or not text.startswith(self._written):
            return
        self._write(text[len(self._written) :])
        self._written = text

    def finish(self, text: str) -> None:
        """The rest of the finished generation's `text` (what was held back), then a newline. A text
        whose prompt placeholders the device put back (`sdk.prompt_guard`) no longer continues what
        was streamed: it is written again whole, after the streamed one."""
        if text.startswith(self._written):
            self._write(text[len(self._written) :] + "\n")
        else:
            self._write(f"\n[with the prompt's private spans put back]\n{text}\n")

    def _write(self, piece: str) -> None:
        if piece:
            self._out.write(piece)
            self._out.flush()


def log(args: argparse.Namespace, message: str) -> None:
    """Progress of a command (INFO on `specsteer.sdk.cli`): on stderr, unless `--quiet`."""
    logger.info("%s", message)


def print_stats(result: Generation, out: TextIO) -> None:
    """The generation's stats, one `key: value` line each."""
    for key, value in result.stats.as_dict().items():
        print(f"  {key}: {value}", file=out)


def print_result(args: argparse.Namespace, result: Generation, extra: dict[str, object]) -> None:
    """The whole result at once, on stdout: one JSON object with `--json`, else the text and the stats
    (what `python -m demo` shows; `sdk generate` streams the text and puts its stats on stderr)."""
    if args.json:
        print(
            json.dumps(
                {**extra, "text": result.text, "token_ids": result.token_ids, "stats": result.stats.as_dict()},
                ensure_ascii=False,
            )
        )
        return
    print(result.text)
    print()
    print_stats(result, sys.stdout)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    configure_cli_logging("sdk", quiet=getattr(args, "quiet", False))

    def command() -> int:
        if args.command == "models":
            return run_models_command(args)
        profile = Profile.from_file(args.profile) if args.profile is not None else None
        if args.json:  # one object at the end, nothing streamed
            print_result(args, run(args, args.prompt, profile), {"method": args.method})
            return 0
        # The text to stdout as it commits; the stats after it to stderr, so `> body.txt` keeps the text alone.
        result = run(args, args.prompt, profile, out=sys.stdout)
        if not args.quiet:
            print("", file=sys.stderr)
            print_stats(result, sys.stderr)
        return 0

    return reported("sdk", command)


if __name__ == "__main__":
    sys.exit(main())

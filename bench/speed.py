"""Speed benchmark (the shape of the paper's Table 4) with its cost model: tokens/s over gRPC+TLS at several RTTs.

    python -m bench.speed [--rtts 0 20 50] [--queries 2] [--max-new-tokens 32] [--out docs/results]
        [--specialist SPEC] [--generalist SPEC] [--quantize fp32|int8] [--draft-len 4] [--tag speed]
        [--drafter torch|llamacpp]
    python -m bench.speed --compare-kernels | --compare-quantize | --compare-drafters

A real verifier (`server.main.create_server`, TLS + mutual TLS with a throwaway PKI) serves on
loopback; the device reaches it through `bench.netdelay.DelayRelay`, which adds each RTT in user
space (these kernels have no netem; see the module). Every method generates the same queries
of the demo user. Model specs are anything `core.models.load_causal_lm` takes (embedded name,
folder, .gguf).

Measured in the same run, before any generation (bare forwards, median): the device's draft step
on its private prompt (the retrieved examples included), each cloud model's n-token blocks on a
warm cache of the public prompt for every n from 1 to K_max+1, and the three once-a-session
prefills (the device's private prompt before Open, each cloud model's public prompt at Open). The
same forwards are timed again just before each RTT's rows, and those rows are held to them: this
machine's speed drifts over a run, and drift is not engine overhead. With those, every row gets
- its *floor*: the round cost if nothing but those forwards and the RTT took time
  (specsteer: K draft steps + Generalist block(K+1) + generic Specialist block(K+1) + RTT; sd the
  same without the generic Specialist, which it never reads; fusion: a draft step + both cloud
  1-token steps + RTT; llm: one Generalist step), and the *analytic bound*: the row's tokens over
  its sessions' prefills plus its measured rounds at the floor plus the draft steps beyond K (the
  egress guard's look-ahead to resolve its holds, and P_S^c after a fully accepted draft for the
  steered bonus token), with the fraction of it reached;
- the verify round's measured cloud time (the server's `round()` calls, timed) against the
  cloud blocks alone: the engine's overhead;
- the cost model's prediction: the same floor with the rounds predicted from the acceptance alone
  (i.i.d. per-token acceptance a fitted to the mean accepted per round: E(K) = 1 + a(1-a^K)/(1-a)
  tokens a round), as validation, and the K that maximizes predicted steady-state tokens/s at each
  RTT (that K is then also run);
- the uplink split into the rounds' bytes per committed token and the Open's bytes (the prompt's
  IDs, once a session).
SpecSteer also runs with the client's egress guard off, to show what the default guard costs.
Baselines in the same run: `llm` (the Generalist alone in the cloud, one RTT per answer) and
plain `transformers` `generate` (greedy, same model, same dtype), compared per Generalist step;
and, when `llama-cpp-python` is installed (extra `[llamacpp]`) and a model is a GGUF, llama.cpp's
tokens/s for the same file. Then the validated cost model, labelled a projection: the crossover
block/step ratio below which specsteer beats llm, and a paper-size 0.6B/32B pair.

`--drafter llamacpp` runs the device's forwards on llama.cpp over the Specialist's GGUF
(`sdk/llamacpp.py`), and its draft step and prefill are timed through it; `--compare-drafters` only
times those two on torch and on llama.cpp, taking turns in one process (TAG_drafters.*).

Device and verifier share this machine's cores. They compute at the same time only while the
cloud prefills at Open and the device drafts its first block (the device waits for every verdict),
so the sharing costs little, but it is stated.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from bench.netdelay import DelayRelay
from bench.plotting import figure
from core.kv import recording_cache
from core.linear import LINEAR_KERNELS, onednn_available, resolve_linear_kernel, use_linear_kernel
from core.models import DEFAULT_GENERALIST, DEFAULT_SPECIALIST, CausalLM, load_causal_lm, locate_embedded_gguf
from core.prompts import render_prompt, task_prompt
from core.session_types import Method, SessionParams
from core.wire import encode_open
from sdk.client import ClientConfig, SpecSteerClient
from sdk.context import Profile
from sdk.device import DecodeOptions, Drafter, Specialist, generate
from sdk.llamacpp import DRAFTERS, drafter_for
from sdk.transport import InProcessVerifier
from server.config import ServerConfig
from server.main import create_server
from server.pki import init_pki, issue_device
from server.session import CloudSession, CloudVerifier, reads_generic_specialist

DEMO = Path(__file__).resolve().parents[1] / "sdk" / "data" / "demo_profile.json"
PAPER_DRAFT_B, PAPER_TARGET_B = 0.6, 32.0
LLM = "llm (in cloud)"
HF_GENERATE = "transformers generate"


@dataclass(frozen=True)
class Run:
    label: str
    params: SessionParams
    guard: str = ClientConfig.guard  # the client's egress guard (default: the client's default)


def methods(k: int) -> tuple[Run, ...]:
    return (
        Run("fusion", SessionParams(method=Method.FUSION, draft_len=0)),
        Run(f"sd (K={k})", SessionParams(method=Method.SD, draft_len=k)),
        Run(f"specsteer gamma=0.5 (K={k})", SessionParams(gamma=0.5, draft_len=k)),
        # What the default egress guard costs: its holds draft look-ahead tokens and shorten drafts.
        Run(f"specsteer gamma=0.5 (K={k}, guard off)", SessionParams(gamma=0.5, draft_len=k), guard="off"),
    )


# --- costs: bare forwards, timed alone ---------------------------------------------------------


def bare_forward_time(lm: CausalLM, ids: Sequence[int], block: int, reps: int = 5) -> float:
    """Median seconds of one bare forward of `block` tokens on a warm KV cache of `ids` (the model
    alone: no log-softmax, no bookkeeping), rolled back after each rep so the context stays put."""
    ids = list(ids)
    cache = recording_cache(lm.model)
    with torch.inference_mode():
        lm.model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
        tokens = torch.tensor([(ids * (block // len(ids) + 1))[-block:]])  # ordinary text tokens
        times = []
        for _ in range(reps + 1):
            start = time.perf_counter()
            lm.model(input_ids=tokens, past_key_values=cache, use_cache=True)
            times.append(time.perf_counter() - start)
            cache.crop(-block)
    return statistics.median(times[1:])  # the first rep warms the allocator


def bare_prefill_time(lm: CausalLM, ids: Sequence[int], reps: int = 3) -> float:
    """Median seconds of one bare forward of all of `ids` on an empty KV cache (a prompt's prefill)."""
    tokens = torch.tensor([list(ids)])
    times = []
    with torch.inference_mode():
        for _ in range(reps + 1):
            cache = recording_cache(lm.model)
            start = time.perf_counter()
            lm.model(input_ids=tokens, past_key_values=cache, use_cache=True)
            times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


@dataclass(frozen=True)
class Costs:
    """Seconds. `g_blocks`/`s_blocks`: measured block cost by block size (1 = a step), on the
    cloud's prompt; `draft_step`: on the device's prompt (with the retrieved examples). The
    prefills are the once-a-session costs: the device's private prompt (before Open), and each
    cloud model's public prompt (at Open)."""

    draft_step: float
    g_blocks: dict[int, float]
    s_blocks: dict[int, float]
    device_prefill: float = 0.0
    g_prefill: float = 0.0
    s_prefill: float = 0.0

    @property
    def g_step(self) -> float:
        return self.g_blocks[1]

    @property
    def s_step(self) -> float:
        return self.s_blocks[1]

    def g_block(self, n: int) -> float:
        return self.g_blocks[n] if n in self.g_blocks else _line(self.g_blocks, n)

    def s_block(self, n: int) -> float:
        return self.s_blocks[n] if n in self.s_blocks else _line(self.s_blocks, n)

    def verify_block(self, k: int, *, generic: bool = True) -> float:
        """The cloud's floor for one round: both cloud models' K+1-token blocks (the Generalist's
        alone for `sd`, which never reads P_S^0)."""
        return self.g_block(k + 1) + (self.s_block(k + 1) if generic else 0.0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "draft_step": self.draft_step,
            "g_blocks": {str(n): v for n, v in self.g_blocks.items()},
            "s0_blocks": {str(n): v for n, v in self.s_blocks.items()},
            "device_prefill": self.device_prefill,
            "g_prefill": self.g_prefill,
            "s0_prefill": self.s_prefill,
        }


def _line(points: dict[int, float], n: int) -> float:
    """Least-squares line through the measured (block size, seconds) points, read at n."""
    xs, ys = list(points), list(points.values())
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    return max(my + slope * (n - mx), 0.0)


def drafter_times(drafter: Drafter, ids: Sequence[int], reps: int = 5) -> tuple[float, float]:
    """Median seconds of the device drafter's step on a warm cache of `ids`, and of its prefill of
    `ids`, through its own sequences (with the log-softmax the device reads, ~1 ms)."""
    prefills, steps = [], []
    for _ in range(3 + 1):
        seq = drafter.sequence(ids)
        start = time.perf_counter()
        seq.next_logprobs()
        prefills.append(time.perf_counter() - start)
    for _ in range(reps + 1):
        seq.push(ids[-1:])
        start = time.perf_counter()
        seq.next_logprobs()
        steps.append(time.perf_counter() - start)
        seq.truncate(len(ids))
    return statistics.median(steps[1:]), statistics.median(prefills[1:])


def measure_costs(
    s_lm: CausalLM,
    g_lm: CausalLM,
    device_ids: Sequence[int],
    prompt: str,
    sizes: Sequence[int],
    reps: int = 5,
    drafter: Drafter | None = None,
) -> Costs:
    """Every cost the model uses, timed alone: `device_ids` is the device's private prompt, `prompt`
    the public one the cloud renders for each of its models. The device's costs are its `drafter`'s
    when it has one."""
    g_ids, s_ids = render_prompt(g_lm, prompt), render_prompt(s_lm, prompt)
    if drafter is None:
        draft_step, device_prefill = bare_forward_time(s_lm, device_ids, 1, reps), bare_prefill_time(s_lm, device_ids)
    else:
        draft_step, device_prefill = drafter_times(drafter, device_ids, reps)
    return Costs(
        draft_step=draft_step,
        g_blocks={n: bare_forward_time(g_lm, g_ids, n, reps) for n in sizes},
        s_blocks={n: bare_forward_time(s_lm, s_ids, n, reps) for n in sizes},
        device_prefill=device_prefill,
        g_prefill=bare_prefill_time(g_lm, g_ids),
        s_prefill=bare_prefill_time(s_lm, s_ids),
    )


# --- the cost model ---------------------------------------------------------------------------


def expected_tokens(a: float, k: int) -> float:
    """Tokens a round commits with i.i.d. per-token acceptance a: the accepted prefix plus one
    recovery (on a rejection) or steered bonus token (on full acceptance)."""
    if a >= 1:
        return k + 1.0
    return 1 + a * (1 - a**k) / (1 - a)


def fit_acceptance(mean_accepted: float, k: int) -> float:
    """The i.i.d. per-token acceptance a with a(1-a^K)/(1-a) = mean accepted per full round."""
    target = min(max(mean_accepted, 0.0), k - 1e-9)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_tokens(mid, k) - 1 < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def round_floor(costs: Costs, k: int, rtt: float, *, generic: bool = True) -> float:
    """A speculative round at its floor: K draft steps, the cloud blocks, one RTT."""
    return k * costs.draft_step + costs.verify_block(k, generic=generic) + rtt


def predicted_tps(a: float, k: int, costs: Costs, rtt: float) -> float:
    return expected_tokens(a, k) / round_floor(costs, k, rtt)


def best_k(a: float, costs: Costs, rtt: float, k_max: int) -> int:
    return max(range(1, k_max + 1), key=lambda k: predicted_tps(a, k, costs, rtt))


def crossover_ratio(a: float, k: int, draft_ratio: float, s0_ratio: float, rtt_steps: float) -> float:
    """The block/step ratio r below which a speculative round beats the target alone, when a
    (K+1)-token block costs r steps for both cloud models (costs in units of a target step):
    E(K) / (K d + r (1 + s) + rtt) > 1  <=>  r < (E(K) - K d - rtt) / (1 + s)."""
    return (expected_tokens(a, k) - k * draft_ratio - rtt_steps) / (1 + s0_ratio)


def projected_speedup(a: float, k: int, draft_ratio: float, s0_ratio: float, r: float, rtt_steps: float) -> float:
    """Speedup over the target alone (which pays no per-token RTT), costs in target steps."""
    return expected_tokens(a, k) / (k * draft_ratio + r * (1 + s0_ratio) + rtt_steps)


# --- the cloud, timed -------------------------------------------------------------------------


class TimedCloud(CloudVerifier):
    """A `CloudVerifier` that records how long each session's `round()` takes (the verify round
    as the server runs it: both models' forwards plus everything else the round does)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.round_seconds: list[float] = []

    def open(self, prompt_ids: Sequence[int], params: SessionParams, **kwargs: Any) -> CloudSession:
        session = super().open(prompt_ids, params, **kwargs)
        # The server hands each received frame to `round_frame` (`round` is the in-process entry).
        inner: Callable[..., Any] = session.round_frame

        def timed(*args: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return inner(*args, **kw)
            finally:
                self.round_seconds.append(time.perf_counter() - start)

        session.round_frame = timed  # type: ignore[method-assign]
        return session


# --- baselines --------------------------------------------------------------------------------


def hf_generate(g_lm: CausalLM, prompt: str, new_tokens: int) -> float:
    """Seconds for plain `transformers` greedy `generate` of exactly `new_tokens` tokens."""
    ids = torch.tensor([render_prompt(g_lm, prompt)])
    eos = min(g_lm.eos_ids) if g_lm.eos_ids else 0
    start = time.perf_counter()
    with torch.inference_mode():
        g_lm.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=eos,
        )
    return time.perf_counter() - start


def gguf_of(spec: str) -> Path | None:
    """The GGUF file behind a model spec, if there is one (for the llama.cpp reference)."""
    path = Path(spec).expanduser()
    if path.suffix.lower() == ".gguf" and path.is_file():
        return path
    try:
        return locate_embedded_gguf(spec)
    except Exception:
        return None


def llamacpp_reference(gguf: Path, prompt: str, new_tokens: int, k: int, threads: int) -> dict[str, float] | None:
    """llama.cpp on the same GGUF: greedy tokens/s, a 1-token step and a K+1-token block with all
    logits. None when `llama-cpp-python` is not installed (extra `[llamacpp]`)."""
    try:
        from llama_cpp import Llama  # type: ignore[import-not-found]
    except ImportError:
        return None
    llm = Llama(model_path=str(gguf), n_ctx=2048, n_threads=threads, logits_all=True, verbose=False)
    ids = llm.tokenize(prompt.encode("utf-8"))
    llm.reset()
    llm.eval(ids)
    base = llm.n_tokens

    def timed(tokens: list[int]) -> float:
        times = []
        for _ in range(4):
            llm.n_tokens = base  # truncate the KV cache back to the prompt
            start = time.perf_counter()
            llm.eval(tokens)
            times.append(time.perf_counter() - start)
        return statistics.median(times[1:])

    step = timed(ids[-1:])
    block = timed((ids * (k + 1))[-(k + 1) :])
    llm.reset()
    start = time.perf_counter()
    out = llm.create_completion(prompt, max_tokens=new_tokens, temperature=0.0)
    seconds = time.perf_counter() - start
    made = int(out["usage"]["completion_tokens"])
    return {"tokens": made, "seconds": seconds, "tokens_per_second": made / seconds, "step": step, "block": block}


# --- the run ----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.speed", description=__doc__.splitlines()[0])
    p.add_argument("--rtts", type=float, nargs="+", default=[0.0, 20.0, 50.0], help="round-trip times, ms")
    p.add_argument("--queries", type=int, default=2, help="demo-user queries per method and RTT")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    p.add_argument("--tag", default="speed", help="output file stem: TAG.json, TAG.md, TAG.png")
    p.add_argument("--specialist", default=DEFAULT_SPECIALIST)
    p.add_argument("--generalist", default=DEFAULT_GENERALIST)
    p.add_argument("--quantize", choices=["fp32", "int8"], default="fp32", help="both models' Linear layers")
    p.add_argument(
        "--linear-kernel", choices=LINEAR_KERNELS, default=None, help="fp32 Linear kernel (core.linear; default auto)"
    )
    p.add_argument("--drafter", choices=DRAFTERS, default="torch", help="the device's forwards (sdk.llamacpp)")
    p.add_argument("--draft-len", type=int, default=4, help="K of the sd and specsteer rows")
    p.add_argument("--k-max", type=int, default=8, help="largest K the cost model considers")
    p.add_argument("--no-best-k", action="store_true", help="do not also run specsteer at the model's best K")
    p.add_argument("--no-llamacpp", action="store_true", help="skip the llama.cpp reference rows")
    p.add_argument(
        "--timeout", type=float, default=900.0, help="round/idle timeout, s (a fallback is not a measurement)"
    )
    p.add_argument("--reps", type=int, default=5, help="timed repetitions of each bare forward (median)")
    p.add_argument(
        "--baseline-reps", type=int, default=3, help="turns llm and transformers generate each take (median)"
    )
    p.add_argument(
        "--paper-target-step-ms",
        type=float,
        default=40.0,
        help="assumed decode step of a 32B target on a server GPU, for the projection only",
    )
    p.add_argument(
        "--gpu-block-ratio", type=float, default=1.1, help="assumed (K+1)-token block / step on a GPU (projection)"
    )
    p.add_argument(
        "--compare-quantize",
        action="store_true",
        help="only measure step and block costs of both models in fp32 and int8 (same run); write TAG_quantize.*",
    )
    p.add_argument(
        "--compare-kernels",
        action="store_true",
        help="only measure both models' step and block costs on torch's and oneDNN's Linear kernel (TAG_kernels.*)",
    )
    p.add_argument(
        "--compare-drafters",
        action="store_true",
        help="only measure the device's draft step and prefill on torch and on llama.cpp (TAG_drafters.*)",
    )
    p.add_argument(
        "--kernel-rounds", type=int, default=3, help="turns each variant takes in --compare-kernels/--compare-drafters"
    )
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    k = args.draft_len
    if args.compare_quantize:
        return compare_quantize(args, argv)
    if args.compare_kernels:
        return compare_kernels(args, argv)
    if args.compare_drafters:
        return compare_drafters(args, argv)

    demo = json.loads(DEMO.read_text(encoding="utf-8"))
    profile = Profile.from_obj(demo, source=str(DEMO))
    prompts = [task_prompt(q["subject"]) for q in demo["queries"][: args.queries]]
    s_lm = load_causal_lm(args.specialist, quantize=args.quantize, linear_kernel=args.linear_kernel)
    g_lm = load_causal_lm(args.generalist, quantize=args.quantize, linear_kernel=args.linear_kernel)
    options = DecodeOptions(max_new_tokens=args.max_new_tokens)
    drafter = drafter_for(args.drafter, args.specialist, s_lm)
    specialist = Specialist(s_lm, profile, drafter=drafter)
    log = _logger()

    sizes = range(1, max(k, args.k_max) + 2)  # every block a round can feed: no K's floor is interpolated
    device_ids = specialist.private_prompt_ids(prompts[0], with_context=True)
    costs = measure_costs(s_lm, g_lm, device_ids, prompts[0], sizes, args.reps, drafter)
    log(
        f"costs: draft step {costs.draft_step * 1e3:.0f} ms; Generalist "
        + ", ".join(f"{n}-token {v * 1e3:.0f} ms" for n, v in costs.g_blocks.items())
        + "; generic Specialist "
        + ", ".join(f"{n}-token {v * 1e3:.0f} ms" for n, v in costs.s_blocks.items())
        + f"; prefills: device {costs.device_prefill * 1e3:.0f} ms ({len(device_ids)} tokens), Generalist "
        f"{costs.g_prefill * 1e3:.0f} ms, generic Specialist {costs.s_prefill * 1e3:.0f} ms"
    )

    # llm: the Generalist alone, computed in the cloud; over a network it adds one RTT per answer.
    cloud_local = TimedCloud(g_lm, s_lm, seed=0)
    local = InProcessVerifier(cloud_local.open, vocab_size=s_lm.vocab_size)
    llm_params = SessionParams(method=Method.LLM, draft_len=0, alpha=0.0)
    # llm and generate take turns, and each keeps its median: a single pair of runs a minute long
    # reads this machine's drift (about 10 %) as a difference between them.
    llm_times, hf_times = [], []
    for _ in range(args.baseline_reps):
        llm_runs = [generate(specialist, q, llm_params, options, local) for q in prompts]
        llm_times.append(sum(r.stats.seconds for r in llm_runs))
        hf_times.append(sum(hf_generate(g_lm, q, r.stats.rounds) for q, r in zip(prompts, llm_runs, strict=True)))
    llm_steps = sum(r.stats.rounds for r in llm_runs)
    llm_seconds, hf_seconds = statistics.median(llm_times), statistics.median(hf_times)
    baseline = {
        "reps": args.baseline_reps,
        "llm_generalist_steps": llm_steps,
        "llm_seconds": llm_seconds,
        "llm_seconds_per_generalist_step": llm_seconds / max(1, llm_steps),
        "hf_generate_seconds": hf_seconds,
        "hf_generate_seconds_per_token": hf_seconds / max(1, llm_steps),
        "llm_vs_hf_generate": hf_seconds / llm_seconds if llm_seconds else None,
    }
    log(
        f"llm {llm_seconds / max(1, llm_steps) * 1e3:.0f} ms per Generalist step; transformers generate "
        f"{hf_seconds / max(1, llm_steps) * 1e3:.0f} ms per token; llm reaches {baseline['llm_vs_hf_generate']:.2f}x"
    )
    reference = {}
    if not args.no_llamacpp:
        for role, spec in (("specialist", args.specialist), ("generalist", args.generalist)):
            gguf = gguf_of(spec)
            ref = (
                llamacpp_reference(gguf, prompts[0], args.max_new_tokens, k, torch.get_num_threads()) if gguf else None
            )
            if ref is not None:
                reference[role] = {"gguf": str(gguf), **ref}
                log(f"llama.cpp {role} {gguf.name}: {ref['tokens_per_second']:.1f} tok/s")

    rows: list[dict] = []
    done: list[float] = []
    floors: dict[float, Costs] = {}
    write = _writer(args, argv, rows, costs, floors, baseline, reference, len(prompts), log)
    with tempfile.TemporaryDirectory(prefix="specsteer-bench-") as tmp:
        pki = init_pki(Path(tmp) / "pki")
        cert, key = issue_device(pki.directory, "bench")
        # Timeouts far above any round here: on a loaded box a 1.5B round takes tens of seconds, and a
        # timed-out round would end the session and finish locally (a fallback, not a measurement).
        config = ServerConfig(
            port=0,
            cert=pki.server_cert,
            key=pki.server_key,
            client_ca=pki.device_ca,
            seed=0,
            idle_timeout=args.timeout,
        )
        cloud = TimedCloud(g_lm, s_lm, max_top_k=config.max_top_k, seed=0)
        server, port = create_server(config, cloud=cloud)
        server.start()
        try:
            for rtt in args.rtts:
                floors[rtt] = measure_costs(s_lm, g_lm, device_ids, prompts[0], sizes, args.reps, drafter)
                log(
                    f"rtt {rtt:>4.0f} ms  floor re-timed: draft step {floors[rtt].draft_step * 1e3:.0f} ms, "
                    f"verify blocks at K={k} {floors[rtt].verify_block(k) * 1e3:.0f} ms"
                )
                # llm again, in this RTT's spell of the machine: compared with rows timed minutes later,
                # the start's llm would read the drift as a speedup or a slowdown.
                llm_rtt = [generate(specialist, q, llm_params, options, local) for q in prompts]
                log(f"rtt {rtt:>4.0f} ms  llm re-timed: {_tokens_per_second(llm_rtt):.2f} tok/s in process")
                with DelayRelay(port, rtt_ms=rtt) as relay:
                    client_config = ClientConfig(
                        server=f"127.0.0.1:{relay.port}",
                        pins=pki.pins,
                        cert=cert,
                        key=key,
                        round_timeout=args.timeout,
                        connect_timeout=args.timeout,
                    )
                    with contextlib.ExitStack() as clients:
                        by_guard: dict[str, SpecSteerClient] = {}
                        todo = list(methods(k))
                        while todo:
                            method = todo.pop(0)
                            if method.guard not in by_guard:
                                guarded = replace(client_config, guard=method.guard)
                                by_guard[method.guard] = clients.enter_context(
                                    SpecSteerClient.connect(specialist, guarded)
                                )
                            client = by_guard[method.guard]
                            before = relay.upstream_bytes + relay.downstream_bytes
                            timed_before = len(cloud.round_seconds)
                            runs = [client.generate(q, method.params, options) for q in prompts]
                            wire = relay.upstream_bytes + relay.downstream_bytes - before
                            opens = sum(
                                len(encode_open(specialist.public_prompt_ids(q), method.params)) for q in prompts
                            )
                            row = _row(method, rtt, runs, wire, cloud.round_seconds[timed_before:], opens)
                            rows.append(row)
                            log(
                                f"rtt {rtt:>4.0f} ms  {method.label:28s} {row['tokens_per_second']:.2f} tok/s, "
                                f"cloud {row['cloud_seconds_per_round'] * 1e3:.0f} ms/round, "
                                f"{row['fallbacks']} fallbacks"
                            )
                            default = method.guard == ClientConfig.guard
                            if method.label.startswith("specsteer") and method.params.draft_len == k and default:
                                a = fit_acceptance(row["accepted_per_round"], k)
                                kb = best_k(a, floors[rtt], rtt / 1000, args.k_max)
                                if kb != k and not args.no_best_k:
                                    params = replace(method.params, draft_len=kb)
                                    todo.append(Run(f"specsteer gamma=0.5 (K={kb}, best)", params))
                rows.append(_llm_row(rtt, llm_rtt, sum(r.stats.seconds for r in llm_rtt)))
                done.append(rtt)
                write(done)  # partial results survive a run cut short
        finally:
            server.stop(grace=0)
    return 0


def _writer(
    args: argparse.Namespace,
    argv: Sequence[str] | None,
    rows: list[dict],
    costs: Costs,
    floors: Mapping[float, Costs],
    baseline: dict,
    reference: dict,
    queries: int,
    log: Callable[[str], None],
) -> Callable[[list[float]], None]:
    def write(done: list[float]) -> None:
        table, model = _analyse([dict(r) for r in rows if r["rtt_ms"] in done], costs, args, done, floors)
        meta = {
            "command": "python -m bench.speed " + " ".join(argv if argv is not None else sys.argv[1:]),
            "queries": queries,
            "max_new_tokens": args.max_new_tokens,
            "costs_seconds": costs.as_dict(),
            "floors_by_rtt_seconds": {str(rtt): floors[rtt].as_dict() for rtt in done},
            "torch_threads": torch.get_num_threads(),
            "specialist": args.specialist,
            "generalist": args.generalist,
            "quantize": args.quantize,
            "linear_kernel": resolve_linear_kernel(args.linear_kernel) if args.quantize == "fp32" else None,
            "drafter": args.drafter,
            "draft_len": args.draft_len,
            "baseline": baseline,
            "llamacpp": reference,
            "cost_model": model,
            "paper_target_step_ms": args.paper_target_step_ms,
            "gpu_block_ratio": args.gpu_block_ratio,
            "rtts_done": done,
        }
        (args.out / f"{args.tag}.json").write_text(json.dumps({"meta": meta, "rows": table}, indent=2) + "\n")
        (args.out / f"{args.tag}.md").write_text(_markdown(table, meta, costs))
        _plot(table, args.out / f"{args.tag}.png")
        log(f"wrote {args.out}/{args.tag}.md, {args.tag}.json, {args.tag}.png (RTTs {done})")

    return write


def compare_quantize(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Step and block costs of each model in fp32, then int8 (loaded again and quantized), same run."""
    prompt = task_prompt(json.loads(DEMO.read_text(encoding="utf-8"))["queries"][0]["subject"])
    sizes = _compared_sizes(args)
    log = _logger()
    result: dict[str, dict[str, dict[str, float]]] = {}
    for spec in (args.specialist, args.generalist):
        result[spec] = {}
        for quantize in ("fp32", "int8"):
            lm = load_causal_lm(spec, quantize=quantize, linear_kernel=args.linear_kernel)
            ids = render_prompt(lm, prompt)
            result[spec][quantize] = {str(n): bare_forward_time(lm, ids, n, args.reps) for n in sizes}
            log(f"{spec} {quantize}: " + _costs_line(result[spec][quantize]))
            del lm
    title = f"fp32 (Linear kernel {resolve_linear_kernel(args.linear_kernel)}) vs int8 dynamic quantization"
    return _write_comparison(args, argv, "quantize", title, result, sizes)


def compare_kernels(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """Step and block costs of each fp32 model on torch's Linear kernel (MKL) and on oneDNN, same run.

    One loaded model switches kernel in place, and the kernels take turns over `--kernel-rounds`
    rounds (median of the rounds' medians), so both see the same spells of this machine's drift.
    """
    if not onednn_available():
        print("bench.speed: --compare-kernels needs oneDNN, which this torch build does not have.", file=sys.stderr)
        return 2
    prompt = task_prompt(json.loads(DEMO.read_text(encoding="utf-8"))["queries"][0]["subject"])
    sizes = _compared_sizes(args)
    log = _logger()
    result: dict[str, dict[str, dict[str, float]]] = {}
    for spec in (args.specialist, args.generalist):
        lm = load_causal_lm(spec, linear_kernel="torch")
        ids = render_prompt(lm, prompt)
        runs: dict[str, dict[str, list[float]]] = {k: {str(n): [] for n in sizes} for k in ("torch", "onednn")}
        for _ in range(args.kernel_rounds):
            for kernel, by_size in runs.items():
                use_linear_kernel(lm.model, kernel)
                for n in sizes:
                    by_size[str(n)].append(bare_forward_time(lm, ids, n, args.reps))
        result[spec] = {k: {n: statistics.median(v) for n, v in by.items()} for k, by in runs.items()}
        for kernel, costs in result[spec].items():
            log(f"{spec} {kernel}: " + _costs_line(costs))
        del lm
    title = "fp32 on torch's Linear kernel (MKL) vs oneDNN"
    return _write_comparison(args, argv, "kernels", title, result, sizes)


def compare_drafters(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    """The device's draft step and its private prompt's prefill on torch and on llama.cpp (the
    same GGUF), taking turns over `--kernel-rounds` rounds in one process."""
    demo = json.loads(DEMO.read_text(encoding="utf-8"))
    lm = load_causal_lm(args.specialist, linear_kernel=args.linear_kernel)
    drafter = drafter_for("llamacpp", args.specialist, lm)
    assert drafter is not None
    ids = Specialist(lm, Profile.from_obj(demo, source=str(DEMO))).private_prompt_ids(
        task_prompt(demo["queries"][0]["subject"]), with_context=True
    )
    log = _logger()
    turns: dict[str, dict[str, list[float]]] = {d: {"step": [], "prefill": []} for d in ("torch", "llamacpp")}
    for _ in range(args.kernel_rounds):
        for name, times in turns.items():
            if name == "torch":
                step, prefill = bare_forward_time(lm, ids, 1, args.reps), bare_prefill_time(lm, ids)
            else:
                step, prefill = drafter_times(drafter, ids, args.reps)
            times["step"].append(step)
            times["prefill"].append(prefill)
            log(f"{name}: step {step * 1e3:.0f} ms, prefill of {len(ids)} tokens {prefill * 1e3:.0f} ms")
    result = {d: {what: statistics.median(v) for what, v in by.items()} for d, by in turns.items()}
    command = "python -m bench.speed " + " ".join(argv if argv is not None else sys.argv[1:])
    t, f = result["torch"], result["llamacpp"]
    lines = [
        f"# The device's drafter: torch (Linear kernel {resolve_linear_kernel(args.linear_kernel)}) vs llama.cpp, "
        f"{args.specialist} (same run)",
        "",
        f"`{command}`: on the demo user's private prompt ({len(ids)} tokens with its retrieved examples); "
        f"{torch.get_num_threads()} threads; each the median of {args.kernel_rounds} alternating turns, each turn the "
        f"median of {args.reps} steps (3 prefills). llama.cpp's times include the log-softmax the device reads.",
        "",
        "| cost | torch ms | llama.cpp ms | torch / llama.cpp |",
        "|---|---|---|---|",
        f"| draft step | {t['step'] * 1e3:.0f} | {f['step'] * 1e3:.0f} | {t['step'] / f['step']:.2f}x |",
        f"| prefill | {t['prefill'] * 1e3:.0f} | {f['prefill'] * 1e3:.0f} | {t['prefill'] / f['prefill']:.2f}x |",
    ]
    out = args.out / f"{args.tag}_drafters"
    out.with_suffix(".json").write_text(
        json.dumps({"command": command, "prompt_tokens": len(ids), "seconds": result, "turns": turns}, indent=2) + "\n"
    )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    log(f"wrote {out}.md")
    return 0


def _compared_sizes(args: argparse.Namespace) -> list[int]:
    return sorted({1, 2, args.draft_len + 1, args.k_max + 1})


def _costs_line(costs: dict[str, float]) -> str:
    return ", ".join(f"{n}-token {v * 1e3:.0f} ms" for n, v in costs.items())


def _write_comparison(
    args: argparse.Namespace,
    argv: Sequence[str] | None,
    stem: str,
    title: str,
    result: dict[str, dict[str, dict[str, float]]],
    sizes: Sequence[int],
) -> int:
    """TAG_STEM.md and .json: each model's costs under two variants, their ratio and each block over its step."""
    command = "python -m bench.speed " + " ".join(argv if argv is not None else sys.argv[1:])
    a, b = next(iter(result.values())).keys()
    lines = [
        f"# Step and block cost, {title} (bare forwards, same run)",
        "",
        f"`{command}`, {torch.get_num_threads()} torch threads, median of {args.reps}.",
        "",
        f"| model | tokens | {a} ms | {b} ms | {b} / {a} | {a} block / step | {b} block / step |",
        "|---|---|---|---|---|---|---|",
    ]
    for spec, by in result.items():
        for n in map(str, sizes):
            x, y = by[a][n], by[b][n]
            lines.append(
                f"| {spec} | {n} | {x * 1e3:.0f} | {y * 1e3:.0f} | {y / x:.2f} "
                f"| {x / by[a]['1']:.2f} | {y / by[b]['1']:.2f} |"
            )
    out = args.out / f"{args.tag}_{stem}"
    out.with_suffix(".json").write_text(json.dumps({"command": command, "seconds": result}, indent=2) + "\n")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    _logger()(f"wrote {out}.md")
    return 0


def _logger() -> Callable[[str], None]:
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f} s] {msg}", flush=True)

    return log


def _row(method: Run, rtt: float, runs: list, wire_bytes: int, round_seconds: list[float], open_bytes: int) -> dict:
    """`open_bytes`: the Open messages' uplink (the prompt's token IDs, once a session)."""
    tokens = max(1, sum(r.stats.new_tokens for r in runs))  # a run may end at once on end-of-sequence
    seconds = sum(r.stats.seconds for r in runs)
    drafted = sum(r.stats.drafted for r in runs)
    rounds = max(1, sum(r.stats.rounds for r in runs))
    return {
        "method": method.label,
        "kind": method.params.method.value,
        "draft_len": method.params.draft_len,
        "guard": method.guard,
        "reads_generic_specialist": reads_generic_specialist(method.params),
        # Tokens the egress guard drafted past the draft to resolve a hold (then rolled back).
        "guard_lookahead_tokens": sum(int(r.stats.extra.get("guard_lookahead_tokens", 0)) for r in runs),
        # A fully accepted round's steered bonus reads P_S^c after the whole draft: one more draft
        # step. sd's bonus is P_G's own token, and alpha 0 ranks by v alone: neither reads P_S^c.
        "bonus_draft_steps": (
            sum(r.stats.bonus_tokens for r in runs) if reads_specialist_at_recovery(method.params) else 0
        ),
        "rtt_ms": rtt,
        "generations": len(runs),
        "tokens": tokens,
        "seconds": seconds,
        "rounds": rounds,
        "tokens_per_second": tokens / seconds,
        "tokens_per_round": tokens / rounds,
        "round_trips_per_token": rounds / tokens,
        "acceptance": sum(r.stats.accepted for r in runs) / drafted if drafted else None,
        "accepted_per_round": sum(r.stats.accepted for r in runs) / rounds,
        "cloud_seconds_per_round": statistics.fmean(round_seconds) if round_seconds else 0.0,
        "uplink_bytes_per_token": sum(r.stats.uplink_bytes for r in runs) / tokens,
        "uplink_open_bytes_per_generation": open_bytes / len(runs),
        "uplink_round_bytes_per_token": (sum(r.stats.uplink_bytes for r in runs) - open_bytes) / tokens,
        "downlink_bytes_per_token": sum(r.stats.downlink_bytes for r in runs) / tokens,
        "wire_bytes_per_token": wire_bytes / tokens,
        "fallbacks": sum(1 for r in runs if r.stats.fallback),
    }


def reads_specialist_at_recovery(params: SessionParams) -> bool:
    """Whether the device reads P_S^c to choose among the steering candidates (`sdk.device._recover`;
    the device-side twin of `server.session.reads_generic_specialist`)."""
    return params.method is Method.SPECSTEER and params.alpha > 0


def _tokens_per_second(runs: list) -> float:
    return sum(r.stats.new_tokens for r in runs) / max(1e-9, sum(r.stats.seconds for r in runs))


def _llm_row(rtt: float, runs: list, seconds: float) -> dict:
    tokens = max(1, sum(r.stats.new_tokens for r in runs))
    rounds = max(1, sum(r.stats.rounds for r in runs))
    total = seconds + len(runs) * rtt / 1000
    return {
        "method": LLM,
        "kind": "llm",
        "draft_len": 0,
        "guard": None,
        "reads_generic_specialist": False,  # llm without alpha: P_G alone
        "guard_lookahead_tokens": 0,
        "bonus_draft_steps": 0,
        "rtt_ms": rtt,
        "generations": len(runs),
        "tokens": tokens,
        "seconds": total,
        "rounds": rounds,
        "tokens_per_second": tokens / total,
        "tokens_per_round": tokens / rounds,
        "round_trips_per_token": len(runs) / tokens,
        "acceptance": None,
        "accepted_per_round": 0.0,
        "cloud_seconds_per_round": seconds / rounds,
        "uplink_bytes_per_token": None,
        "uplink_open_bytes_per_generation": None,
        "uplink_round_bytes_per_token": None,
        "downlink_bytes_per_token": None,
        "wire_bytes_per_token": None,
        "fallbacks": 0,
    }


def _floor(row: dict, costs: Costs) -> tuple[float, float, float]:
    """(once-a-session floor, round floor, cloud part of the round floor), seconds, for a row's
    method. Once a session: the device's prefill (methods that read its private prompt) and each
    cloud model's prefill at Open (the generic Specialist only where the session reads its P_S^0,
    by the server's own rule); `llm` pays its one RTT there."""
    rtt = row["rtt_ms"] / 1000
    if row["kind"] == "llm":
        return costs.g_prefill + rtt, costs.g_step, costs.g_step
    generic = row["reads_generic_specialist"]
    session = costs.device_prefill + costs.g_prefill + (costs.s_prefill if generic else 0.0)
    if row["kind"] == "fusion":
        cloud = costs.g_step + (costs.s_step if generic else 0.0)
        return session, costs.draft_step + cloud + rtt, cloud
    k = row["draft_len"]
    return session, round_floor(costs, k, rtt, generic=generic), costs.verify_block(k, generic=generic)


def _analyse(
    rows: list[dict],
    costs: Costs,
    args: argparse.Namespace,
    rtts: Sequence[float],
    floors: Mapping[float, Costs] | None = None,
) -> tuple[list[dict], dict]:
    """`costs`: timed at the start, beside `llm`; `floors`: the same forwards timed again just
    before each RTT's rows, so a machine that speeds up or slows down during the run does not
    show as engine overhead (each row is held to the costs of its own stretch of the run)."""
    k = args.draft_len
    floors = floors or {}
    steered = [r for r in rows if r["kind"] == "specsteer" and r["draft_len"] == k]
    pooled = sum(r["accepted_per_round"] * r["rounds"] for r in steered) / max(1, sum(r["rounds"] for r in steered))
    a = fit_acceptance(pooled, k) if steered else 0.0
    for rtt in rtts:
        at = [r for r in rows if r["rtt_ms"] == rtt]
        llm = next(r for r in at if r["method"] == LLM)
        fusion = next(r for r in at if r["kind"] == "fusion")
        for r in at:
            c = floors.get(rtt, costs)
            r["speedup_vs_llm"] = r["tokens_per_second"] / llm["tokens_per_second"]
            r["speedup_vs_fusion"] = r["tokens_per_second"] / fusion["tokens_per_second"]
            session, floor, cloud_floor = _floor(r, c)
            sessions = r["generations"] * session
            r["session_floor_seconds"] = session
            r["round_floor_seconds"] = floor
            # The bound: this row's generations at the floor, i.e. its sessions' prefills, its measured
            # rounds, each costing only its forwards and the RTT, and the draft steps beyond K a round:
            # the guard's look-ahead and, for a steered bonus, P_S^c after the whole draft.
            extra_steps = (r["guard_lookahead_tokens"] + r["bonus_draft_steps"]) * c.draft_step
            r["analytic_bound_tps"] = r["tokens"] / (sessions + r["rounds"] * floor + extra_steps)
            r["fraction_of_bound"] = r["tokens_per_second"] / r["analytic_bound_tps"]
            if r["kind"] == "llm":  # its rounds are timed with the session's prefill
                cloud_floor += c.g_prefill * r["generations"] / r["rounds"]
            r["cloud_round_vs_floor"] = r["cloud_seconds_per_round"] / cloud_floor if cloud_floor else None
            if r["kind"] in ("specsteer", "sd"):
                row_a = fit_acceptance(r["accepted_per_round"], r["draft_len"])
                r["fitted_acceptance"] = row_a
                # The model predicts the rounds from the acceptance alone: tokens / E(K) of them.
                rounds = r["tokens"] / expected_tokens(row_a, r["draft_len"])
                r["model_tps"] = r["tokens"] / (sessions + rounds * floor + extra_steps)
                r["measured_vs_model"] = r["tokens_per_second"] / r["model_tps"]
    g = costs.g_step
    d_ratio, s_ratio = costs.draft_step / g, costs.s_step / g
    cpu_ratio = costs.g_block(k + 1) / g
    best = {str(rtt): best_k(a, floors.get(rtt, costs), rtt / 1000, args.k_max) for rtt in rtts}
    paper_step = args.paper_target_step_ms / 1000
    paper_d = PAPER_DRAFT_B / PAPER_TARGET_B
    kk = range(1, args.k_max + 1)
    model = {
        "fitted_acceptance": a,
        "best_k_by_rtt": best,
        "predicted_tps_by_k_at_rtt0": {str(n): predicted_tps(a, n, costs, 0.0) for n in kk},
        "this_cpu": {"draft_ratio": d_ratio, "s0_ratio": s_ratio, "block_ratio_k_plus_1": cpu_ratio},
        "crossover_block_ratio": {
            str(rtt): max(crossover_ratio(a, n, d_ratio, s_ratio, rtt / 1000 / g) for n in kk) for rtt in rtts
        },
        "projection_paper_pair": {
            str(rtt): max(
                projected_speedup(a, n, paper_d, paper_d, args.gpu_block_ratio, rtt / 1000 / paper_step) for n in kk
            )
            for rtt in rtts
        },
        "projection_paper_pair_best_k": {
            str(rtt): max(
                kk,
                key=lambda n: projected_speedup(a, n, paper_d, paper_d, args.gpu_block_ratio, rtt / 1000 / paper_step),
            )
            for rtt in rtts
        },
    }
    return rows, model


def _markdown(rows: list[dict], meta: dict, costs: Costs) -> str:
    k = meta["draft_len"]
    b = meta["baseline"]
    m = meta["cost_model"]
    g = costs.g_step
    out = [
        f"# Speed over gRPC + TLS: {meta['specialist']} -> {meta['generalist']} ({meta['quantize']}"
        + (f", Linear kernel {meta['linear_kernel']}" if meta.get("linear_kernel") else "")
        + (f", device drafter {meta['drafter']})" if meta.get("drafter", "torch") != "torch" else ")"),
        "",
        f"`{meta['command']}` — {meta['queries']} demo queries × {meta['max_new_tokens']} new tokens per method "
        f"and RTT, {meta['torch_threads']} torch threads on 2 shared cores; RTT added by a user-space delay relay "
        "(no netem on these kernels).",
        "",
        "## Costs measured in this run (bare forwards on a warm KV cache, median)",
        "",
        "| block (tokens) | Generalist ms | generic Specialist ms | Generalist block / step |",
        "|---|---|---|---|",
    ]
    for n in sorted(costs.g_blocks):
        out.append(
            f"| {n} | {costs.g_blocks[n] * 1e3:.0f} | {costs.s_blocks[n] * 1e3:.0f} | {costs.g_blocks[n] / g:.2f} |"
        )
    out += [
        "",
        f"Device draft step {costs.draft_step * 1e3:.0f} ms (on its private prompt). Floor of a verify round at "
        f"K={k} (both cloud blocks alone): {costs.verify_block(k) * 1e3:.0f} ms, beside one `llm` step of "
        f"{g * 1e3:.0f} ms. Once a session: the device's prefill of its private prompt "
        f"{costs.device_prefill * 1e3:.0f} ms (before Open), the cloud's prefill at Open: Generalist "
        f"{costs.g_prefill * 1e3:.0f} ms, generic Specialist {costs.s_prefill * 1e3:.0f} ms.",
        "",
        "Each RTT's rows are held to the same forwards timed again just before them (the machine's speed "
        "drifts over a run): "
        + "; ".join(
            f"RTT {float(rtt):.0f} ms: draft step {f['draft_step'] * 1e3:.0f} ms, verify blocks at K={k} "
            f"{(f['g_blocks'][str(k + 1)] + f['s0_blocks'][str(k + 1)]) * 1e3:.0f} ms, Generalist step "
            f"{f['g_blocks']['1'] * 1e3:.0f} ms"
            for rtt, f in meta["floors_by_rtt_seconds"].items()
        )
        + ". `llm` runs again in each RTT's block, just after those forwards, and is held to them too.",
        "",
        f"Baselines, same run: `llm` {b['llm_seconds_per_generalist_step'] * 1e3:.0f} ms per Generalist step, "
        f"plain `transformers` `generate` {b['hf_generate_seconds_per_token'] * 1e3:.0f} ms per token "
        f"(greedy, same model and dtype, same number of tokens; each the median of {b.get('reps', 1)} turns, "
        "taken alternately): `llm` reaches "
        f"**{b['llm_vs_hf_generate']:.2f}×** of `generate`.",
    ]
    if meta["llamacpp"]:
        for role, ref in meta["llamacpp"].items():
            out.append(
                f"llama.cpp reference ({role}, `{Path(ref['gguf']).name}`, same GGUF): "
                f"{ref['tokens_per_second']:.1f} tok/s, step {ref['step'] * 1e3:.0f} ms, "
                f"{k + 1}-token block with all logits {ref['block'] * 1e3:.0f} ms."
            )
    else:
        out.append("llama.cpp reference: `llama-cpp-python` not installed in this run (extra `[llamacpp]`).")
    out += [
        "",
        "## Rows",
        "",
        "Floor: the round's forwards timed alone plus the RTT; bound = the row's tokens over its floor time "
        "(each session's prefills, its measured rounds at the floor, the draft steps the egress guard took "
        "to resolve its holds, the look-ahead column, and one draft step per steered bonus token, which reads "
        "P_S^c after the whole draft); cloud round / floor: the server's "
        "measured `round()` time over the cloud part of the floor (the prefill runs at Open, outside the rounds; "
        "`llm`'s steps include it, and so does its floor). Model tok/s: the cost model's prediction, the same "
        "floor with the rounds predicted from the fitted i.i.d. acceptance alone. Uplink: all of it per token, "
        "then the rounds' alone (the Open's prompt IDs are sent once a session, the Open B column).",
        "",
        "| RTT ms | method | tok/s | vs llm | vs fusion | acceptance | tokens/round | round trips/token | "
        "guard look-ahead tokens/token | "
        "uplink B/token | rounds' uplink B/token | Open B | downlink B/token | wire B/token (TLS) | "
        "cloud ms/round | cloud round / floor | bound tok/s | fraction of bound | model tok/s | measured / model |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(v: float | None, fmt: str = "{:.2f}") -> str:
        return "—" if v is None else fmt.format(v)

    for r in rows:
        out.append(
            f"| {r['rtt_ms']:.0f} | {r['method']} | {r['tokens_per_second']:.2f} | {r['speedup_vs_llm']:.2f}× | "
            f"{r['speedup_vs_fusion']:.2f}× | {f(r['acceptance'])} | {r['tokens_per_round']:.2f} | "
            f"{r['round_trips_per_token']:.2f} | {r['guard_lookahead_tokens'] / r['tokens']:.2f} | "
            f"{f(r['uplink_bytes_per_token'], '{:.1f}')} | "
            f"{f(r['uplink_round_bytes_per_token'], '{:.1f}')} | "
            f"{f(r['uplink_open_bytes_per_generation'], '{:.0f}')} | "
            f"{f(r['downlink_bytes_per_token'], '{:.1f}')} | {f(r['wire_bytes_per_token'], '{:.0f}')} | "
            f"{r['cloud_seconds_per_round'] * 1e3:.0f} | {f(r.get('cloud_round_vs_floor'))} | "
            f"{r['analytic_bound_tps']:.2f} | {r['fraction_of_bound']:.2f} | {f(r.get('model_tps'))} | "
            f"{f(r.get('measured_vs_model'))} |"
        )
    cpu = m["this_cpu"]
    out += [
        "",
        "## Cost model",
        "",
        f"Fitted i.i.d. acceptance (specsteer, K={k}, pooled over RTTs): a = {m['fitted_acceptance']:.3f}. "
        "K that maximizes predicted tokens/s: "
        + ", ".join(f"RTT {rtt} ms → K={kb}" for rtt, kb in m["best_k_by_rtt"].items())
        + ".",
        "",
        f"This CPU: draft step / Generalist step = {cpu['draft_ratio']:.3f}, generic Specialist step / "
        f"Generalist step = {cpu['s0_ratio']:.3f}, Generalist {k + 1}-token block / step = "
        f"{cpu['block_ratio_k_plus_1']:.2f}.",
        "",
        "**Projection** (the cost model with the fitted acceptance; not a measurement): specsteer beats `llm` "
        "when a (K+1)-token block costs less than r× a step, at the best K: "
        + ", ".join(f"RTT {rtt} ms: r < {v:.2f}" for rtt, v in m["crossover_block_ratio"].items())
        + f" (this CPU: {cpu['block_ratio_k_plus_1']:.2f}).",
        "",
        f"**Projection**, paper-size pair (0.6B drafter, 32B target, a {meta['paper_target_step_ms']:.0f} ms target "
        f"step, drafter and generic copy at 0.6/32 of it, block = {meta['gpu_block_ratio']:.2f}× a step, same "
        "acceptance): speedup over `llm` "
        + ", ".join(
            f"RTT {rtt} ms: {v:.2f}× (K={m['projection_paper_pair_best_k'][rtt]})"
            for rtt, v in m["projection_paper_pair"].items()
        )
        + ".",
    ]
    return "\n".join(out) + "\n"


def _plot(rows: list[dict], path: Path) -> None:
    with figure(path, (8, 4.5)) as ax:
        for method in dict.fromkeys(r["method"] for r in rows):
            mine = [r for r in rows if r["method"] == method]
            line = ax.plot(
                [r["rtt_ms"] for r in mine], [r["tokens_per_second"] for r in mine], marker="o", label=method
            )[0]
            if all("model_tps" in r for r in mine):
                ax.plot(
                    [r["rtt_ms"] for r in mine],
                    [r["analytic_bound_tps"] for r in mine],
                    linestyle=":",
                    color=line.get_color(),
                )
        ax.set_xlabel("round-trip time (ms)")
        ax.set_ylabel("tokens / s (dotted: analytic bound)")
        ax.set_title("Speed over gRPC + TLS")
        ax.legend(fontsize=8)


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["Costs", "TimedCloud", "expected_tokens", "fit_acceptance", "main", "measure_costs"]

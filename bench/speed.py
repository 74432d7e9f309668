"""Speed benchmark (the shape of the paper's Table 4) with its cost model: tokens/s over gRPC+TLS at several RTTs.

    python -m bench.speed [--rtts 0 20 50] [--queries 2] [--max-new-tokens 32] [--out docs/results]
        [--cloud-device cpu|cuda] [--cloud-dtype float32|bfloat16] [--kv dynamic|slots]
        [--specialist SPEC] [--generalist SPEC] [--quantize fp32|int8] [--draft-len 4] [--tag speed]
        [--drafter torch|llamacpp]
    python -m bench.speed --compare-kernels | --compare-quantize | --compare-drafters

A real verifier (`server.grpc_server.create_server`, TLS + mutual TLS with a throwaway PKI) serves on
loopback; the device reaches it through `bench.netdelay.DelayRelay`, which adds each RTT in user
space (these kernels have no netem; see the module). Every method generates the same queries
of the demo user. Model specs are anything `core.models.load_causal_lm` takes (embedded name,
folder, .gguf).

Measured in the same run, before any generation (bare forwards, median): the device's draft step
on its private prompt (the retrieved examples included; through the device's own sequence, its
log-softmax included, `bench.speed_timing`), each cloud model's n-token blocks on a
warm cache of the public prompt for every n from 1 to K_max+1, and the three once-a-session
prefills (the device's private prompt before Open, each cloud model's public prompt at Open). The
same forwards are timed again just before each RTT's rows, and those rows are held to them: this
machine's speed drifts over a run, and drift is not engine overhead. With those, every row gets
- the device's work around its forwards, each part timed alone on the device's own text
  (`bench.device_work`): choosing a token from a whole row (an argmax, or a sampled draw), one
  check of the egress guard, fusion's decoding of its dense vector and fused choice;
- the path's own round trip: gRPC health checks through the relay, over TLS, before each RTT's
  rows (the relay's RTT, plus what loopback, TLS and HTTP/2 take);
- its *floor*: the round cost if nothing but those forwards, the device's work and the path's
  round trip took time (specsteer: K draft steps and their choices + one guard check + Generalist
  block(K+1) + generic Specialist block(K+1) + the round trip; sd the same without the generic
  Specialist, which it never reads; fusion: a draft step + a guard check + both cloud 1-token steps
  + the round trip + its fusion; llm: one Generalist step), and the *analytic bound*: the row's
  tokens over its sessions' prefills and Closes (the device waits a round trip for the verifier to
  end the stream) plus its measured rounds at the floor plus the draft steps
  beyond K (the egress guard's look-ahead to resolve its holds, each with its choice and a check
  more, and P_S^c after a fully accepted draft for the steered bonus token), with the fraction of
  it reached;
- the verify round's measured cloud time (the server's `round()` calls, timed) against the
  cloud blocks alone: the engine's overhead;
- the round split: the device's own forwards a round (as the device timed them), and what
  neither they, the cloud's rounds, the cloud's prefills nor the RTT account for (the wire and
  each side's work around its forwards): where a row falls short of the model, the part to look at;
- the cost model's prediction: the same floor with the rounds predicted from the acceptance alone
  (i.i.d. per-token acceptance a fitted to the mean accepted per round: E(K) = 1 + a(1-a^K)/(1-a)
  tokens a round; fusion and llm one token a round), as validation of every method, and the K
  that maximizes predicted steady-state tokens/s at each RTT (that K is then also run);
- the uplink split into the rounds' bytes per committed token and the Open's bytes (the prompt's
  IDs, once a session).
SpecSteer also runs with the client's egress guard off, to show what the default guard costs
(`--methods` may leave out that row and sd; fusion and specsteer always run).
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from bench.cost_model import (
    Costs,
    best_k,
    crossover_ratio,
    expected_tokens,
    fit_acceptance,
    fusion_round,
    predicted_tps,
    projected_speedup,
    round_floor,
)
from bench.device_work import DeviceText, device_text, device_work_times
from bench.netdelay import DelayRelay
from bench.path_probe import PayloadServer, path_round_trip, payload_round_trip
from bench.plotting import plotted
from bench.quality import device_path
from bench.speed_baselines import gguf_of, hf_generate, llamacpp_reference
from bench.speed_compare import compare_drafters, compare_kernels, compare_quantize
from bench.speed_page import command_line, markdown, plot
from bench.speed_timing import DEMO, logger, measure_costs
from specsteer.core.cli import whole_number
from specsteer.core.linear import LINEAR_KERNELS, resolve_linear_kernel
from specsteer.core.models import DEFAULT_GENERALIST, DEFAULT_SPECIALIST, CausalLM, load_causal_lm
from specsteer.core.placement import DTYPE_CHOICES
from specsteer.core.prompts import task_prompt
from specsteer.core.session_types import Method, SessionParams
from specsteer.core.wire import encode_open, fusion_downlink_bytes
from specsteer.privacy.guard import EgressGuard
from specsteer.sdk.client import ClientConfig, SpecSteerClient
from specsteer.sdk.context import Profile
from specsteer.sdk.decoding import DecodeOptions, Drafter, Specialist, generate
from specsteer.sdk.drafters import DEFAULT_DRAFTER, DRAFTERS, ONNX_PRECISIONS, drafter_for
from specsteer.sdk.transport import InProcessVerifier
from specsteer.sdk.uplink_guard import guard_setting
from specsteer.server.config import SLOT_FORWARDS, ServerConfig
from specsteer.server.grpc_server import create_server
from specsteer.server.pki import init_pki, issue_device
from specsteer.server.session import CloudSession, CloudVerifier, reads_generic_specialist
from specsteer.server.slot_sequence import SlotPools

PAPER_DRAFT_B, PAPER_TARGET_B = 0.6, 32.0
LLM = "llm (in cloud)"
HF_GENERATE = "transformers generate"
# The cloud alone: the Generalist's P_G, one RTT per answer.
LLM_PARAMS = SessionParams(method=Method.LLM, draft_len=0, alpha=0.0)


@dataclass(frozen=True)
class Run:
    label: str
    params: SessionParams
    guard: str = ClientConfig.guard  # the client's egress guard (default: the client's default)


# The rows of an RTT, by the names --methods takes. fusion and specsteer always run: the cost model
# and every row's speedups read them.
METHOD_KEYS = ("fusion", "sd", "specsteer", "guard-off")
REQUIRED_METHODS = ("fusion", "specsteer")


def methods(k: int, sampling: bool = False, keys: Sequence[str] = METHOD_KEYS) -> tuple[Run, ...]:
    """The rows of one RTT named in `keys`; `sampling` samples fusion's and specsteer's tokens (sd
    is greedy only)."""
    rows = {
        "fusion": Run("fusion", SessionParams(method=Method.FUSION, draft_len=0, sampling=sampling)),
        "sd": Run(f"sd (K={k})", SessionParams(method=Method.SD, draft_len=k)),
        "specsteer": Run(f"specsteer gamma=0.5 (K={k})", SessionParams(gamma=0.5, draft_len=k, sampling=sampling)),
        # What the default egress guard costs: its holds draft look-ahead tokens and shorten drafts.
        "guard-off": Run(
            f"specsteer gamma=0.5 (K={k}, guard off)",
            SessionParams(gamma=0.5, draft_len=k, sampling=sampling),
            guard="off",
        ),
    }
    return tuple(run for key, run in rows.items() if key in keys)


def method_keys(text: str) -> tuple[str, ...]:
    """--methods: comma-separated names of `METHOD_KEYS`, fusion and specsteer among them."""
    keys = tuple(key.strip() for key in text.split(",") if key.strip())
    unknown = [key for key in keys if key not in METHOD_KEYS]
    if unknown:
        raise argparse.ArgumentTypeError(f"not rows bench.speed runs ({', '.join(METHOD_KEYS)}): {', '.join(unknown)}")
    missing = [key for key in REQUIRED_METHODS if key not in keys]
    if missing:
        raise argparse.ArgumentTypeError(
            f"bench.speed always runs {' and '.join(REQUIRED_METHODS)} (its cost model and speedups read them); "
            f"add {', '.join(missing)}"
        )
    return keys


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


# --- the run ----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.compare_quantize:
        return compare_quantize(args, argv)
    if args.compare_kernels:
        return compare_kernels(args, argv)
    if args.compare_drafters:
        return compare_drafters(args, argv)

    if args.device_threads is not None:
        torch.set_num_threads(args.device_threads)
    bench = _prepare(args)
    costs = bench.measure()
    _log_costs(bench, costs)
    baseline = _baselines(bench)
    reference = {} if args.no_llamacpp else _llamacpp_references(bench)
    rows: list[dict] = []
    done: list[float] = []
    floors: dict[float, Costs] = {}
    write = _writer(args, argv, rows, costs, floors, baseline, reference, len(bench.prompts), bench.log)
    with _tls_verifier(bench) as (cloud, port, client_config, payload_port):
        for rtt in args.rtts:
            floors[rtt] = bench.measure()
            rows += _rtt_rows(bench, rtt, floors[rtt], cloud, (port, payload_port), client_config)
            done.append(rtt)
            write(done)  # partial results survive a run cut short
    return 0


# --kv slots: sessions at once in this benchmark (one at a time, plus the llm baseline's), positions each.
KV_SLOTS, KV_MAX_LEN = 8, 2048


@dataclass(frozen=True)
class _Bench:
    """What every step of a run shares: the options, the loaded models and the demo user's device."""

    args: argparse.Namespace
    prompts: list[str]
    s_lm: CausalLM  # the device's Specialist (the CPU, float32)
    g_lm: CausalLM  # the cloud's Generalist, where --cloud-device puts it
    cloud_s: CausalLM  # the cloud's generic Specialist: `s_lm` itself unless the cloud sits elsewhere
    drafter: Drafter | None
    specialist: Specialist
    options: DecodeOptions
    sizes: range
    device_ids: list[int]
    text: DeviceText  # the device's own text, on which its work around its forwards is timed
    guard: EgressGuard | None  # the client's default egress guard for the demo user
    local: InProcessVerifier  # the cloud in this process, for `llm`
    log: Callable[[str], None]
    kv_slots: SlotPools | None  # the verifier's slot pools (--kv slots), shared by every cloud of the run

    def measure(self) -> Costs:
        """Every cost the model uses, timed alone now: the forwards (`measure_costs`) and the
        device's work around them (`bench.device_work`)."""
        costs = measure_costs(
            self.s_lm,
            self.g_lm,
            self.device_ids,
            self.prompts[0],
            self.sizes,
            self.args.reps,
            self.drafter,
            cloud_s=self.cloud_s,
            kv_slots=self.kv_slots,
        )
        work = device_work_times(
            self.text,
            sampling=self.args.sampling,
            guard=self.guard,
            tokenizer=self.s_lm.tokenizer,
            draft_len=self.args.draft_len,
            reps=max(self.args.reps, 20),
        )
        return replace(costs, **work.as_dict())


def _prepare(args: argparse.Namespace) -> _Bench:
    """Load both models and the demo user, and the device's own text its work is timed on."""
    demo = json.loads(DEMO.read_text(encoding="utf-8"))
    profile = Profile.from_obj(demo, source=str(DEMO))
    prompts = [task_prompt(q["subject"]) for q in demo["queries"][: args.queries]]
    s_lm = load_causal_lm(args.specialist, quantize=args.quantize, linear_kernel=args.linear_kernel)
    # The cloud's models where --cloud-device/--cloud-dtype put them (the device's stay on the CPU).
    on_cpu = args.cloud_device == "cpu" and args.cloud_dtype == "float32"
    cloud_kwargs = (
        {"quantize": args.quantize, "linear_kernel": args.linear_kernel}
        if on_cpu
        else {"device": args.cloud_device, "dtype": args.cloud_dtype}
    )
    g_lm = load_causal_lm(args.generalist, **cloud_kwargs)
    cloud_s = s_lm if on_cpu else load_causal_lm(args.specialist, **cloud_kwargs)
    drafter = drafter_for(args.drafter, args.specialist, s_lm, precision=args.drafter_precision)
    specialist = Specialist(s_lm, profile, drafter=drafter)
    log = logger()

    sizes = range(1, max(args.draft_len, args.k_max) + 2)  # every block a round can feed: no K's floor is interpolated
    device_ids = specialist.private_prompt_ids(prompts[0], with_context=True)
    pools = kv_slots(args)  # one set for the run: the costs are timed on the pools the verifier uses
    if pools is not None:  # as `server serve` does at start: no round captures a graph or compiles
        pools.warm_up([g_lm.model, cloud_s.model])
    text = device_text(specialist, prompts[0], args.max_new_tokens, sampling=args.sampling)
    guard = guard_setting(profile, s_lm.tokenizer, ClientConfig.guard)
    # llm: the Generalist alone, computed in the cloud; over a network it adds one RTT per answer.
    cloud_local = TimedCloud(g_lm, cloud_s, seed=0, kv_slots=pools)
    local = InProcessVerifier(cloud_local.open, vocab_size=s_lm.vocab_size)
    options = DecodeOptions(max_new_tokens=args.max_new_tokens)
    return _Bench(
        args,
        prompts,
        s_lm,
        g_lm,
        cloud_s,
        drafter,
        specialist,
        options,
        sizes,
        device_ids,
        text,
        guard,
        local,
        log,
        pools,
    )


def _log_costs(bench: _Bench, costs: Costs) -> None:
    bench.log(
        f"costs: draft step {costs.draft_step * 1e3:.0f} ms; Generalist "
        + ", ".join(f"{n}-token {v * 1e3:.0f} ms" for n, v in costs.g_blocks.items())
        + "; generic Specialist "
        + ", ".join(f"{n}-token {v * 1e3:.0f} ms" for n, v in costs.s_blocks.items())
        + f"; prefills: device {costs.device_prefill * 1e3:.0f} ms ({len(bench.device_ids)} tokens), Generalist "
        f"{costs.g_prefill * 1e3:.0f} ms, generic Specialist {costs.s_prefill * 1e3:.0f} ms; device work: "
        f"pick {costs.greedy_pick * 1e3:.2f} ms, sampled draw {costs.sampled_draw * 1e3:.2f} ms, "
        f"guard check {costs.guard_check * 1e3:.2f} ms, fusion {costs.fuse * 1e3:.2f} ms"
    )


def kv_slots(args: argparse.Namespace) -> SlotPools | None:
    """The cloud's slot pool when --kv slots (as `server serve --kv slots` builds it), else None."""
    if args.kv != "slots":
        return None
    return SlotPools(KV_SLOTS, KV_MAX_LEN, forward=args.kv_forward, compiled=args.kv_compile)


def _baselines(bench: _Bench) -> dict[str, Any]:
    """`llm` in process against plain `transformers` `generate` of as many tokens, in turns."""
    args, prompts = bench.args, bench.prompts
    # llm and generate take turns, and each keeps its median: a single pair of runs a minute long
    # reads this machine's drift (about 10 %) as a difference between them.
    llm_times, hf_times = [], []
    for _ in range(args.baseline_reps):
        llm_runs = [generate(bench.specialist, q, LLM_PARAMS, bench.options, bench.local) for q in prompts]
        llm_times.append(sum(r.stats.seconds for r in llm_runs))
        hf_times.append(sum(hf_generate(bench.g_lm, q, r.stats.rounds) for q, r in zip(prompts, llm_runs, strict=True)))
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
    bench.log(
        f"llm {llm_seconds / max(1, llm_steps) * 1e3:.0f} ms per Generalist step; transformers generate "
        f"{hf_seconds / max(1, llm_steps) * 1e3:.0f} ms per token; llm reaches {baseline['llm_vs_hf_generate']:.2f}x"
    )
    return baseline


def _llamacpp_references(bench: _Bench) -> dict[str, Any]:
    """llama.cpp's rows for each model that is a GGUF (none without `llama-cpp-python`)."""
    args = bench.args
    reference = {}
    for role, spec in (("specialist", args.specialist), ("generalist", args.generalist)):
        gguf = gguf_of(spec)
        if gguf is None:
            continue
        ref = llamacpp_reference(gguf, bench.prompts[0], args.max_new_tokens, args.draft_len, torch.get_num_threads())
        if ref is not None:
            reference[role] = {"gguf": str(gguf), **ref}
            bench.log(f"llama.cpp {role} {gguf.name}: {ref['tokens_per_second']:.1f} tok/s")
    return reference


@contextlib.contextmanager
def _tls_verifier(bench: _Bench) -> Iterator[tuple[TimedCloud, int, Callable[[int], ClientConfig], int]]:
    """A real verifier on loopback behind a throwaway PKI: its cloud, its port, the device's config
    for a given relay port, and the port of a `PayloadServer` with the verifier's certificate (for
    `fusion`'s vector on the path, `payload_round_trip`)."""
    args = bench.args
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
        cloud = TimedCloud(bench.g_lm, bench.cloud_s, max_top_k=config.max_top_k, seed=0, kv_slots=bench.kv_slots)
        server, port = create_server(config, cloud=cloud)
        server.start()
        payload = PayloadServer(pki.server_cert, pki.server_key, pki.device_ca)

        def client_config(relay_port: int) -> ClientConfig:
            return ClientConfig(
                server=f"127.0.0.1:{relay_port}",
                pins=pki.pins,
                cert=cert,
                key=key,
                round_timeout=args.timeout,
                connect_timeout=args.timeout,
            )

        try:
            yield cloud, port, client_config, payload.port
        finally:
            payload.close()
            server.stop(grace=0)


def _rtt_rows(
    bench: _Bench,
    rtt: float,
    floor: Costs,
    cloud: TimedCloud,
    ports: tuple[int, int],
    client_config: Callable[[int], ClientConfig],
) -> list[dict]:
    """One RTT's rows: every method through a relay adding `rtt`, then `llm` timed again in process.
    `ports`: the verifier's and the `PayloadServer`'s."""
    k = bench.args.draft_len
    bench.log(
        f"rtt {rtt:>4.0f} ms  floor re-timed: draft step {floor.draft_step * 1e3:.0f} ms, "
        f"verify blocks at K={k} {floor.verify_block(k) * 1e3:.0f} ms"
    )
    # llm again, in this RTT's spell of the machine: compared with rows timed minutes later,
    # the start's llm would read the drift as a speedup or a slowdown.
    llm_rtt = [generate(bench.specialist, q, LLM_PARAMS, bench.options, bench.local) for q in bench.prompts]
    bench.log(f"rtt {rtt:>4.0f} ms  llm re-timed: {_tokens_per_second(llm_rtt):.2f} tok/s in process")
    port, payload_port = ports
    vector = None
    if any(m.params.method is Method.FUSION for m in methods(k, bench.args.sampling, bench.args.methods)):
        size = fusion_downlink_bytes(bench.s_lm.vocab_size)
        with DelayRelay(payload_port, rtt_ms=rtt) as relay:
            vector = payload_round_trip(client_config(relay.port), size, reps=15)  # 1.5 s at RTT 100 ms
        bench.log(f"rtt {rtt:>4.0f} ms  the path's round trip with fusion's {size / 1e3:.0f} KB: {vector * 1e3:.2f} ms")
    with DelayRelay(port, rtt_ms=rtt) as relay:
        path = path_round_trip(client_config(relay.port))
        bench.log(f"rtt {rtt:>4.0f} ms  the path's own round trip (health checks via the relay): {path * 1e3:.2f} ms")
        rows = _method_rows(bench, rtt, (path, vector), floor, cloud, relay, client_config(relay.port))
    rows.append(_llm_row(rtt, llm_rtt, sum(r.stats.seconds for r in llm_rtt)))
    return rows


def _stream_seconds(runs: list, round_seconds: list[float], path: float) -> float | None:
    """A round's wait beyond the verifier's `round()` and the path's round trip (medians, so a
    session's first round, which waits for the Open's prefills, does not weigh): the gRPC stream's
    hand-offs that a health check does not pay (the client's request and reader threads, the
    server's scheduler) and the downlink's bytes. Part of the unmodelled column."""
    waits = [r.stats.extra["round_wait_median_ms"] / 1000 for r in runs if "round_wait_median_ms" in r.stats.extra]
    if not waits or not round_seconds:
        return None
    return statistics.median(waits) - statistics.median(round_seconds) - path


def _method_rows(
    bench: _Bench,
    rtt: float,
    paths: tuple[float, float | None],
    floor: Costs,
    cloud: TimedCloud,
    relay: DelayRelay,
    client_config: ClientConfig,
) -> list[dict]:
    """Each method's generations over one connection per egress-guard setting; specsteer again at
    the cost model's best K when that differs from `--draft-len`. `paths`: the path's round trip,
    and with `fusion`'s dense vector aboard (None where no row runs `fusion`)."""
    args, k = bench.args, bench.args.draft_len
    path, vector = paths
    rows: list[dict] = []
    with contextlib.ExitStack() as clients:
        by_guard: dict[str, SpecSteerClient] = {}
        todo = list(methods(k, args.sampling, args.methods))
        while todo:
            method = todo.pop(0)
            if method.guard not in by_guard:
                guarded = replace(client_config, guard=method.guard)
                by_guard[method.guard] = clients.enter_context(SpecSteerClient.connect(bench.specialist, guarded))
            client = by_guard[method.guard]
            before = relay.upstream_bytes + relay.downstream_bytes
            timed_before = len(cloud.round_seconds)
            runs = [client.generate(q, method.params, bench.options) for q in bench.prompts]
            wire = relay.upstream_bytes + relay.downstream_bytes - before
            opens = sum(len(encode_open(bench.specialist.public_prompt_ids(q), method.params)) for q in bench.prompts)
            row = _row(method, rtt, runs, wire, cloud.round_seconds[timed_before:], opens)
            row["path_rtt_ms"] = path * 1e3
            # A fusion round's downlink is the dense vector: its path is the round trip with one aboard.
            dense = method.params.method is Method.FUSION and vector is not None
            row["vector_path_rtt_ms"] = vector * 1e3 if dense else None
            _, round_path = _paths(row)
            row["stream_seconds_per_round"] = _stream_seconds(runs, cloud.round_seconds[timed_before:], round_path)
            rows.append(row)
            bench.log(
                f"rtt {rtt:>4.0f} ms  {method.label:28s} {row['tokens_per_second']:.2f} tok/s, "
                f"cloud {row['cloud_seconds_per_round'] * 1e3:.0f} ms/round, "
                f"{row['fallbacks']} fallbacks"
            )
            default = method.guard == ClientConfig.guard
            if method.label.startswith("specsteer") and method.params.draft_len == k and default:
                a = fit_acceptance(row["accepted_per_round"], k)
                kb = best_k(a, floor, path, args.k_max, sampling=args.sampling)
                if kb != k and not args.no_best_k:
                    params = replace(method.params, draft_len=kb)
                    todo.append(Run(f"specsteer gamma=0.5 (K={kb}, best)", params))
    return rows


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench.speed", description=__doc__.splitlines()[0])
    p.add_argument("--rtts", type=float, nargs="+", default=[0.0, 20.0, 50.0], help="round-trip times, ms")
    p.add_argument("--queries", type=int, default=2, help="demo-user queries per method and RTT")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--out", type=Path, default=Path("docs/results"))
    p.add_argument("--tag", default="speed", help="output file stem: TAG.json, TAG.md, TAG.png")
    p.add_argument("--specialist", default=DEFAULT_SPECIALIST)
    p.add_argument("--generalist", default=DEFAULT_GENERALIST)
    p.add_argument("--quantize", choices=["fp32", "int8"], default="fp32", help="both models' Linear layers")
    p.add_argument("--cloud-device", default="cpu", help="where the cloud's two models run: cpu (default), cuda")
    p.add_argument("--cloud-dtype", default="float32", choices=DTYPE_CHOICES, help="the cloud models' weights")
    p.add_argument(
        "--device-threads",
        type=whole_number(1),
        help="torch's CPU threads (default: torch's, every core); with the cloud on a GPU, leave the verifier "
        "a core or two: a device whose threads fill every core stalls whenever a verifier thread runs beside it",
    )
    p.add_argument("--kv", choices=("dynamic", "slots"), default="dynamic", help="the verifier's KV engine")
    p.add_argument("--kv-forward", choices=SLOT_FORWARDS, default="fused", help="--kv slots: the pool's forward")
    p.add_argument("--kv-compile", action="store_true", help="--kv slots: compile the pool's forward (inductor)")
    p.add_argument(
        "--linear-kernel", choices=LINEAR_KERNELS, default=None, help="fp32 Linear kernel (core.linear; default auto)"
    )
    p.add_argument(
        "--drafter", choices=DRAFTERS, default=DEFAULT_DRAFTER, help="the device's forwards (default: what ships)"
    )
    p.add_argument("--drafter-precision", choices=ONNX_PRECISIONS, default=None, help="onnx drafter: its default")
    p.add_argument("--draft-len", type=int, default=4, help="K of the sd and specsteer rows")
    p.add_argument(
        "--methods",
        type=method_keys,
        default=METHOD_KEYS,
        help=f"rows of each RTT besides llm, comma-separated, of {','.join(METHOD_KEYS)} (default all; "
        "fusion and specsteer always)",
    )
    p.add_argument(
        "--sampling", action="store_true", help="fusion and specsteer sample (bench.random_models --acceptance)"
    )
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
    return p


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
            "command": command_line(argv),
            "queries": queries,
            "max_new_tokens": args.max_new_tokens,
            "costs_seconds": costs.as_dict(),
            "floors_by_rtt_seconds": {str(rtt): floors[rtt].as_dict() for rtt in done},
            "torch_threads": torch.get_num_threads(),
            "specialist": args.specialist,
            "generalist": args.generalist,
            "quantize": args.quantize,
            "cloud_device": args.cloud_device,
            "cloud_dtype": args.cloud_dtype,
            "kv": args.kv,
            "kv_forward": args.kv_forward if args.kv == "slots" else None,
            "kv_compile": args.kv_compile if args.kv == "slots" else None,
            "linear_kernel": resolve_linear_kernel(args.linear_kernel) if args.quantize == "fp32" else None,
            "drafter": args.drafter,
            "drafter_precision": device_path(args.drafter, args.drafter_precision)["drafter_precision"],
            "guard": ClientConfig.guard,
            "draft_len": args.draft_len,
            "sampling": args.sampling,
            "methods": list(args.methods),
            "baseline": baseline,
            "llamacpp": reference,
            "cost_model": model,
            "paper_target_step_ms": args.paper_target_step_ms,
            "gpu_block_ratio": args.gpu_block_ratio,
            "rtts_done": done,
        }
        (args.out / f"{args.tag}.json").write_text(json.dumps({"meta": meta, "rows": table}, indent=2) + "\n")
        (args.out / f"{args.tag}.md").write_text(markdown(table, meta, costs))
        png = plotted(lambda: plot(table, args.out / f"{args.tag}.png"), f"{args.tag}.png")
        log(f"wrote {args.out}/{args.tag}.md, {args.tag}.json{png} (RTTs {done})")

    return write


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
        "sampling": method.params.sampling,
        "reads_generic_specialist": reads_generic_specialist(method.params),
        # Tokens the egress guard drafted past the draft to resolve a hold (then rolled back).
        "guard_lookahead_tokens": sum(int(r.stats.extra.get("guard_lookahead_tokens", 0)) for r in runs),
        # Its checks: one a round, and one more per look-ahead token (and after a replaced span).
        "guard_checks": sum(int(r.stats.extra.get("guard_checks", 0)) for r in runs),
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
        # The device's forwards after its prefill (draft steps, the guard's look-ahead, bonus reads),
        # as the device timed them: with the cloud's rounds, what the model's round floor covers.
        "device_seconds_per_round": sum(
            r.stats.extra.get("device_forwards_ms", 0.0) - r.stats.extra.get("device_prefill_ms", 0.0) for r in runs
        )
        / 1000
        / rounds,
        "device_prefill_seconds": sum(r.stats.extra.get("device_prefill_ms", 0.0) for r in runs) / 1000,
        "uplink_bytes_per_token": sum(r.stats.uplink_bytes for r in runs) / tokens,
        "uplink_open_bytes_per_generation": open_bytes / len(runs),
        "uplink_round_bytes_per_token": (sum(r.stats.uplink_bytes for r in runs) - open_bytes) / tokens,
        "downlink_bytes_per_token": sum(r.stats.downlink_bytes for r in runs) / tokens,
        "wire_bytes_per_token": wire_bytes / tokens,
        "fallbacks": sum(1 for r in runs if r.stats.fallback),
    }


def reads_specialist_at_recovery(params: SessionParams) -> bool:
    """Whether the device reads P_S^c to choose among the steering candidates (`sdk.decoding._recover`;
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
        "sampling": False,
        "reads_generic_specialist": False,  # llm without alpha: P_G alone
        "guard_lookahead_tokens": 0,
        "guard_checks": 0,
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
        "device_seconds_per_round": None,  # no device forwards: the Generalist decodes alone
        "device_prefill_seconds": None,
        "uplink_bytes_per_token": None,
        "uplink_open_bytes_per_generation": None,
        "uplink_round_bytes_per_token": None,
        "downlink_bytes_per_token": None,
        "wire_bytes_per_token": None,
        "fallbacks": 0,
    }


def _floor(row: dict, costs: Costs) -> tuple[float, float, float]:
    """(once-a-session floor, round floor, cloud part of the round floor), seconds, for a row's
    method. Once a session: the device's prefill (methods that read its private prompt), each cloud
    model's prefill at Open (the generic Specialist only where the session reads its P_S^0, by the
    server's own rule) less the first round's draft it overlaps, and the Close's round trip; `llm`
    pays its one RTT there. A round over
    the network pays the path's round trip as measured (`path_rtt_ms`; the relay's RTT in a row of an
    older run), a `fusion` round the round trip with its dense vector aboard (`vector_path_rtt_ms`)."""
    rtt = row["rtt_ms"] / 1000
    if row["kind"] == "llm":
        return costs.g_prefill + rtt, costs.g_step, costs.g_step
    c = _row_costs(row, costs)
    path, round_path = _paths(row)
    generic, sampling = row["reads_generic_specialist"], row.get("sampling", False)
    k = row["draft_len"]  # 0 for fusion: its first round sends no draft
    # The device sends Open and drafts its first round while the cloud prefills (it does not wait
    # for the Open): only the prefills' excess over that draft holds the first round up. The
    # session's end is a round trip: the device sends Close and waits for the verifier to end the
    # stream (`sdk.remote`), inside the generation's time.
    first_draft = k * (c.draft_step + c.choice(sampling)) + c.guard_check
    cloud_prefills = c.g_prefill + (c.s_prefill if generic else 0.0)
    session = c.device_prefill + max(cloud_prefills - first_draft, 0.0) + path
    if row["kind"] == "fusion":
        floor = fusion_round(c, round_path, generic=generic)
    else:
        floor = round_floor(c, k, round_path, generic=generic, sampling=sampling)
    return session, floor, c.verify_block(k, generic=generic)  # fusion's k is 0: both models' steps


def _paths(row: dict) -> tuple[float, float]:
    """(the path's round trip, a round's), seconds, as measured before the row's RTT: a `fusion`
    round brings its dense vector back, so its round trip is the one with a vector aboard
    (`vector_path_rtt_ms`); the relay's RTT in a row of an older run."""
    path = row["path_rtt_ms"] / 1000 if row.get("path_rtt_ms") is not None else row["rtt_ms"] / 1000
    vector = row.get("vector_path_rtt_ms")
    return path, (vector / 1000 if row["kind"] == "fusion" and vector is not None else path)


def _row_costs(row: dict, costs: Costs) -> Costs:
    """`costs` as a row pays them: no guard checks where its guard is off."""
    return replace(costs, guard_check=0.0) if row.get("guard") == "off" else costs


def _beyond_k(row: dict, costs: Costs) -> float:
    """Device seconds a row paid beyond its rounds' floors: a forward for each token the guard looked
    ahead and for each steered bonus (P_S^c after the whole draft), a choice for each look-ahead
    token, and the guard's checks past one a round."""
    c = _row_costs(row, costs)
    lookahead = row["guard_lookahead_tokens"]
    steps = (lookahead + row["bonus_draft_steps"]) * c.draft_step + lookahead * c.choice(row.get("sampling", False))
    checks = row.get("guard_checks", row["rounds"] + lookahead)  # a row of an older run: one a round and token
    return steps + max(0, checks - row["rounds"]) * c.guard_check


def _unmodelled(row: dict, costs: Costs, session: float, floor: float, cloud_floor: float) -> float | None:
    """A row's seconds a round that the model does not price: its measured time less the device's
    forwards (its prefills included) as the device timed them, the cloud's rounds as the server
    timed them, each session's cloud prefills at their floor and its Close's round trip, and the rest
    of its rounds' floors at their timed costs (the device's choices, guard checks and fusion, the
    path's round trip; the look-ahead's too). What is left is what neither side's timed parts cover (gRPC's and the
    session's handoffs beyond a health check's, steering, bookkeeping): where a row falls short of
    the cost model, this says how much of it is there (and the device and cloud columns, how much
    is theirs)."""
    if row["kind"] == "llm" or row.get("device_prefill_seconds") is None:
        return None  # llm's rounds are its whole time in process (nothing to split); a row of an older run
    c = _row_costs(row, costs)
    # The session's floor less the device's prefill: the cloud's (what the draft leaves) and the Close.
    untimed = row["seconds"] - row["device_prefill_seconds"] - row["generations"] * (session - c.device_prefill)
    forwards = row["draft_len"] * c.draft_step if row["kind"] != "fusion" else c.draft_step
    lookahead_forwards = (row["guard_lookahead_tokens"] + row["bonus_draft_steps"]) * c.draft_step
    priced = floor - forwards - cloud_floor + (_beyond_k(row, c) - lookahead_forwards) / row["rounds"]
    return untimed / row["rounds"] - row["device_seconds_per_round"] - row["cloud_seconds_per_round"] - priced


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
            # rounds, each costing only its timed parts and the path's round trip, and the device's
            # work beyond K a round: the guard's look-ahead and, for a steered bonus, P_S^c after the
            # whole draft.
            extra_steps = _beyond_k(r, c)
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
            else:  # fusion and llm: one token a round, whatever the acceptance
                rounds = r["tokens"]
            r["model_tps"] = r["tokens"] / (sessions + rounds * floor + extra_steps)
            r["measured_vs_model"] = r["tokens_per_second"] / r["model_tps"]
            r["unmodelled_seconds_per_round"] = _unmodelled(r, c, session, floor, cloud_floor)
    g = costs.g_step
    d_ratio, s_ratio = costs.draft_step / g, costs.s_step / g
    cpu_ratio = costs.g_block(k + 1) / g
    best = {
        str(rtt): best_k(a, floors.get(rtt, costs), _path(rows, rtt), args.k_max, sampling=args.sampling)
        for rtt in rtts
    }
    paper_step = args.paper_target_step_ms / 1000
    paper_d = PAPER_DRAFT_B / PAPER_TARGET_B
    kk = range(1, args.k_max + 1)
    model = {
        "fitted_acceptance": a,
        "best_k_by_rtt": best,
        "predicted_tps_by_k_at_rtt0": {
            str(n): predicted_tps(a, n, costs, _path(rows, 0.0), sampling=args.sampling) for n in kk
        },
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


def _path(rows: list[dict], rtt: float) -> float:
    """The path's measured round trip at `rtt` (ms) in seconds; the RTT itself where none was measured."""
    paths = [r["path_rtt_ms"] for r in rows if r["rtt_ms"] == rtt and r.get("path_rtt_ms") is not None]
    return (paths[0] if paths else rtt) / 1000


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "Costs",
    "TimedCloud",
    "best_k",
    "crossover_ratio",
    "expected_tokens",
    "fit_acceptance",
    "main",
    "measure_costs",
    "predicted_tps",
    "projected_speedup",
]

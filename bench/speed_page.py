"""The speed benchmark's page: TAG.md (costs, rows, cost model, projections) and the TAG.png plot."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from bench.cost_model import Costs
from bench.plotting import figure

__all__ = ["command_line", "markdown", "plot"]


def command_line(argv: Sequence[str] | None) -> str:
    """The command as the page quotes it (this process's arguments when `main` got none)."""
    return "python -m bench.speed " + " ".join(argv if argv is not None else sys.argv[1:])


def markdown(rows: list[dict], meta: dict, costs: Costs) -> str:
    """TAG.md of a run: its costs, baselines, one line a row, the fitted cost model and its projections."""
    k = meta["draft_len"]
    b = meta["baseline"]
    m = meta["cost_model"]
    g = costs.g_step
    paths = {r["rtt_ms"]: r["path_rtt_ms"] for r in rows if r.get("path_rtt_ms") is not None}
    vectors = {r["rtt_ms"]: r["vector_path_rtt_ms"] for r in rows if r.get("vector_path_rtt_ms") is not None}
    out = [
        f"# Speed over gRPC + TLS: {meta['specialist']} -> {meta['generalist']} ({meta['quantize']}"
        + (f", Linear kernel {meta['linear_kernel']}" if meta.get("linear_kernel") else "")
        # Every page says its device path; one written before issue #51 recorded none: torch, no precision.
        + f", device drafter {meta.get('drafter', 'torch')}"
        + (f" {meta['drafter_precision']}" if meta.get("drafter_precision") else "")
        + (f", guard {meta['guard']})" if meta.get("guard") else ")"),
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
        "The device's work around its forwards, each part timed alone on its own text (`bench.device_work`): "
        f"a greedy pick from a whole row {costs.greedy_pick * 1e3:.3f} ms, a sampled draw "
        f"{costs.sampled_draw * 1e3:.3f} ms, a check of the egress guard {costs.guard_check * 1e3:.3f} ms, "
        f"fusion's decoding of its vector and fused choice {costs.fuse * 1e3:.3f} ms.",
        "",
        "Each RTT's rows are held to the same forwards timed again just before them (the machine's speed "
        "drifts over a run): "
        + "; ".join(
            f"RTT {float(rtt):.0f} ms: draft step {f['draft_step'] * 1e3:.0f} ms, verify blocks at K={k} "
            f"{(f['g_blocks'][str(k + 1)] + f['s0_blocks'][str(k + 1)]) * 1e3:.0f} ms, Generalist step "
            f"{f['g_blocks']['1'] * 1e3:.0f} ms"
            + (f", the path's round trip {paths[float(rtt)]:.2f} ms" if float(rtt) in paths else "")
            + (f" ({vectors[float(rtt)]:.2f} ms with fusion's vector aboard)" if float(rtt) in vectors else "")
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
        "Floor: the round's forwards and the device's work around them, timed alone, plus the path's round "
        "trip (gRPC health checks through the relay, timed before the RTT's rows); bound = the row's tokens "
        "over its floor time (each session's prefills, its measured rounds at the floor, the draft steps the "
        "egress guard took to resolve its holds, the look-ahead column, with their choices and checks, and one "
        "draft step per steered bonus token, which reads P_S^c after the whole draft); cloud round / floor: the "
        "server's measured `round()` time over the cloud part of the floor (the prefill runs at Open, outside "
        "the rounds; `llm`'s steps include it, and so does its floor); device ms/round: the device's own "
        "forwards in the rounds, as it timed them; unmodelled ms/round: the row's time less the device's "
        "forwards (its prefills too), the cloud's rounds, the cloud's prefills at their floor, and the rest of "
        "the floor at its timed costs (the device's choices, checks and fusion, the path's round trip): what "
        "the model prices nowhere; stream ms/round: of that, a round's wait beyond the verifier's `round()` "
        "and the path's round trip (medians: the gRPC stream's hand-offs and the downlink's bytes). "
        "Model tok/s: the cost model's prediction, "
        "the same floor with the rounds predicted from the fitted i.i.d. acceptance alone. Uplink: all of it per "
        "token, then the rounds' alone (the Open's prompt IDs are sent once a session, the Open B column).",
        "",
        "| RTT ms | method | tok/s | vs llm | vs fusion | acceptance | tokens/round | round trips/token | "
        "guard look-ahead tokens/token | "
        "uplink B/token | rounds' uplink B/token | Open B | downlink B/token | wire B/token (TLS) | "
        "cloud ms/round | cloud round / floor | device ms/round | unmodelled ms/round | stream ms/round | "
        "bound tok/s | fraction of bound | model tok/s | measured / model |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(v: float | None, fmt: str = "{:.2f}", scale: float = 1.0) -> str:
        return "—" if v is None else fmt.format(v * scale)

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
            f"{f(r.get('device_seconds_per_round'), '{:.1f}', 1e3)} | "
            f"{f(r.get('unmodelled_seconds_per_round'), '{:.1f}', 1e3)} | "
            f"{f(r.get('stream_seconds_per_round'), '{:.1f}', 1e3)} | "
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


def plot(rows: list[dict], path: Path) -> None:
    """TAG.png: tokens/s by RTT for each method, with its analytic bound dotted where it has one."""
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

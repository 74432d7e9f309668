"""The speed benchmark's smoke run: a real TLS verifier on loopback, two RTTs, tiny models."""

from __future__ import annotations

import argparse
import json
import sys

import pytest
import torch

from bench import speed
from specsteer.core.linear import onednn_available
from tests.tinymodels import save_tiny, tiny_lm


def test_speed_smoke_has_every_rtt_method_baseline_and_bound(tmp_path, char_tok) -> None:
    # Prepare
    s_dir = save_tiny(tmp_path, char_tok, seed=1, name="s")
    g_dir = save_tiny(tmp_path, char_tok, seed=2, name="g")
    out = tmp_path / "results"
    args = ["--rtts", "0", "10", "--queries", "1", "--max-new-tokens", "5", "--k-max", "4"]
    args += ["--specialist", str(s_dir), "--generalist", str(g_dir), "--drafter", "torch", "--out", str(out)]
    # Execute
    assert speed.main(args) == 0
    # Assert
    data = json.loads((out / "speed.json").read_text())
    rows, meta = data["rows"], data["meta"]
    methods = {r["method"] for r in rows}
    assert {"llm (in cloud)", "fusion", "sd (K=4)", "specsteer gamma=0.5 (K=4)"} <= methods
    assert {r["guard"] for r in rows if r["kind"] == "specsteer"} == {"placeholder", "off"}
    assert {r["rtt_ms"] for r in rows} == {0.0, 10.0}
    assert all(r["fallbacks"] == 0 for r in rows)
    steered = [r for r in rows if r["kind"] == "specsteer"]
    assert all(r["analytic_bound_tps"] > 0 and r["fraction_of_bound"] > 0 for r in steered)
    assert all(r["wire_bytes_per_token"] > r["uplink_bytes_per_token"] for r in steered)
    # The Open's prompt IDs are counted apart from the rounds' uplink.
    assert all(0 < r["uplink_round_bytes_per_token"] < r["uplink_bytes_per_token"] for r in steered)
    assert all(r["uplink_open_bytes_per_generation"] > 0 for r in steered)
    assert all(meta["costs_seconds"][key] > 0 for key in ("device_prefill", "g_prefill", "s0_prefill"))
    assert all(r["cloud_seconds_per_round"] > 0 and r["cloud_round_vs_floor"] > 0 for r in steered)
    # A round's time, decomposed: the device's own forwards in it, and what no forward or RTT explains.
    assert all(r["device_seconds_per_round"] > 0 for r in rows if r["kind"] != "llm")
    assert all(r["unmodelled_seconds_per_round"] is None for r in rows if r["kind"] == "llm")
    floors = meta["floors_by_rtt_seconds"]
    for r in steered:  # the device's prefills as timed, the cloud's at the floor of the row's RTT
        floor = floors[str(r["rtt_ms"])]
        guard = floor["guard_check"] if r["guard"] != "off" else 0.0
        choice = floor["sampled_draw"] if r["sampling"] else floor["greedy_pick"]
        # ...less the first round's draft they overlap, with each session's Close, a round trip.
        first_draft = r["draft_len"] * (floor["draft_step"] + choice) + guard
        overlap = max(floor["g_prefill"] + floor["s0_prefill"] - first_draft, 0.0)
        prefills = r["device_prefill_seconds"] + r["generations"] * (overlap + r["path_rtt_ms"] / 1000)
        # ...and the rest of the floor at its timed costs: the device's choices and guard checks,
        # the path's round trip as measured through the relay.
        beyond = r["guard_lookahead_tokens"] * choice + max(0, r["guard_checks"] - r["rounds"]) * guard
        priced = r["draft_len"] * choice + guard + r["path_rtt_ms"] / 1000 + beyond / r["rounds"]
        split = r["device_seconds_per_round"] + r["cloud_seconds_per_round"] + priced
        assert r["unmodelled_seconds_per_round"] == pytest.approx((r["seconds"] - prefills) / r["rounds"] - split)
        assert r["path_rtt_ms"] > r["rtt_ms"]  # loopback, TLS and HTTP/2 on top of the relay's delay
        assert (r["guard_checks"] >= r["rounds"]) if r["guard"] != "off" else (r["guard_checks"] == 0)
    assert all(floor["guard_check"] > 0 and floor["greedy_pick"] > 0 for floor in floors.values())
    # fusion's rounds bring its dense vector back: their path was timed with one aboard.
    for r in rows:
        assert (r["vector_path_rtt_ms"] > r["rtt_ms"]) if r["kind"] == "fusion" else r.get("vector_path_rtt_ms") is None
    # Of the unmodelled time, the stream's: a round's wait beyond the verifier's round and the path.
    assert all(r["stream_seconds_per_round"] is not None for r in rows if r["kind"] != "llm")
    assert "stream ms/round" in (out / "speed.md").read_text()
    assert "unmodelled ms/round" in (out / "speed.md").read_text()
    assert meta["baseline"]["llm_vs_hf_generate"] > 0 and meta["baseline"]["reps"] == 3
    assert set(meta["cost_model"]["best_k_by_rtt"]) == set(meta["floors_by_rtt_seconds"]) == {"0.0", "10.0"}
    assert (out / "speed.png").stat().st_size > 1000 and "Projection" in (out / "speed.md").read_text()


def test_speed_smoke_on_the_slot_pool_with_the_cloud_in_bfloat16(
    tmp_path, char_tok, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The GPU run's options on the CPU: the cloud's own copies in bf16 (the device's stay fp32) and
    the slot pool as the verifier's KV engine, every method still served (tools/gpu_check.sh's
    end-to-end sweep runs the same with --cloud-device cuda). Without matplotlib (a GPU image may
    lack it) the run still writes its JSON and page, and says why there is no PNG."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an import of a package not installed finds
    s_dir = save_tiny(tmp_path, char_tok, seed=1, name="s")
    g_dir = save_tiny(tmp_path, char_tok, seed=2, name="g")
    out = tmp_path / "results"
    args = ["--rtts", "0", "--queries", "1", "--max-new-tokens", "5", "--k-max", "4", "--baseline-reps", "1"]
    args += [
        "--specialist",
        str(s_dir),
        "--generalist",
        str(g_dir),
        "--drafter",
        "torch",
        "--out",
        str(out),
        "--no-best-k",
    ]
    args += ["--cloud-dtype", "bfloat16", "--kv", "slots", "--sampling", "--methods", "fusion,specsteer"]
    threads = torch.get_num_threads()
    try:  # the GPU script leaves the verifier two cores (--device-threads, nproc - 2)
        assert speed.main([*args, "--device-threads", "1"]) == 0
    finally:
        torch.set_num_threads(threads)
    data = json.loads((out / "speed.json").read_text())
    meta, rows = data["meta"], data["rows"]
    assert meta["torch_threads"] == 1
    assert (meta["cloud_device"], meta["cloud_dtype"], meta["kv"]) == ("cpu", "bfloat16", "slots")
    assert (meta["kv_forward"], meta["kv_compile"], meta["sampling"]) == ("fused", False, True)
    # Only the rows issue 27 holds to the cost model (the GPU sweep's time is short).
    assert {r["method"] for r in rows} == {"llm (in cloud)", "fusion", "specsteer gamma=0.5 (K=4)"}
    assert meta["methods"] == ["fusion", "specsteer"]
    assert all(r["fallbacks"] == 0 for r in rows)
    assert not (out / "speed.png").exists() and "no speed.png: matplotlib is not installed" in capsys.readouterr().out
    # --sampling samples every row's tokens but sd's (exact greedy verification).
    assert [m.params.sampling for m in speed.methods(4, sampling=True)] == [True, False, True, True]


def test_methods_names_the_optional_rows_and_refuses_to_drop_the_ones_the_model_reads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert [m.label for m in speed.methods(3, keys=("specsteer", "fusion", "sd"))] == [
        "fusion",
        "sd (K=3)",
        "specsteer gamma=0.5 (K=3)",
    ]
    for given, said in (
        (
            "fusion,sd",
            "bench.speed always runs fusion and specsteer (its cost model and speedups read them); add specsteer",
        ),
        ("fusion,specsteer,beam", "not rows bench.speed runs (fusion, sd, specsteer, guard-off): beam"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            speed.main(["--methods", given])
        assert exit_info.value.code == 2 and said in capsys.readouterr().err


def test_only_a_steered_bonus_that_reads_the_device_model_is_charged_a_draft_step() -> None:
    # sd's bonus is P_G's own token; alpha 0 ranks the candidates by v alone; neither reads P_S^c.
    assert speed.reads_specialist_at_recovery(speed.SessionParams(gamma=0.5, draft_len=4))
    assert not speed.reads_specialist_at_recovery(speed.SessionParams(method=speed.Method.SD, draft_len=4, alpha=0.0))
    assert not speed.reads_specialist_at_recovery(speed.SessionParams(method=speed.Method.SD, draft_len=4))
    assert not speed.reads_specialist_at_recovery(speed.SessionParams(alpha=0.0, draft_len=4))


def test_cost_model_fits_and_predicts_consistently() -> None:
    # E(K) counts the accepted prefix plus one recovery/bonus token; the fit inverts it.
    assert speed.expected_tokens(0.0, 4) == 1.0
    assert speed.expected_tokens(1.0, 4) == 5.0
    for a in (0.2, 0.5, 0.8):
        assert speed.fit_acceptance(speed.expected_tokens(a, 4) - 1, 4) == pytest.approx(a, abs=1e-6)
    costs = speed.Costs(draft_step=0.01, g_blocks={1: 1.0, 5: 1.0, 9: 1.0}, s_blocks={1: 0.1, 5: 0.1, 9: 0.1})
    # With blocks as cheap as steps, longer drafts pay off at high acceptance; at zero, K=1 is best.
    assert speed.best_k(0.9, costs, 0.0, 8) > 4
    assert speed.best_k(0.0, costs, 0.0, 8) == 1
    # The crossover ratio is where the projected speedup crosses 1.
    r = speed.crossover_ratio(0.7, 4, 0.02, 0.02, 0.0)
    assert speed.projected_speedup(0.7, 4, 0.02, 0.02, r, 0.0) == pytest.approx(1.0)


def test_the_bound_charges_each_sessions_prefills_once_and_the_model_predicts_its_rounds() -> None:
    # Prepare: a Generalist step of 1 s, cheap blocks, and prefills that dwarf a round.
    costs = speed.Costs(
        draft_step=0.1,
        g_blocks={1: 1.0, 5: 1.5},
        s_blocks={1: 0.2, 5: 0.3},
        device_prefill=4.0,
        g_prefill=6.0,
        s_prefill=2.0,
    )
    a = 0.6
    e = speed.expected_tokens(a, 4)
    base = {"rtt_ms": 0.0, "generations": 2, "fallbacks": 0, "guard_lookahead_tokens": 0, "bonus_draft_steps": 0}
    steer = {**base, "method": "specsteer", "kind": "specsteer", "draft_len": 4, "tokens": 64, "rounds": 20}
    steer["reads_generic_specialist"] = True
    steer |= {"tokens_per_round": 3.2, "accepted_per_round": e - 1, "cloud_seconds_per_round": 1.8}
    guarded = {**steer, "method": "specsteer, guard", "guard_lookahead_tokens": 10}
    bonus = {**steer, "method": "specsteer, bonus", "bonus_draft_steps": 6}
    sd = {**steer, "method": "sd", "kind": "sd", "reads_generic_specialist": False}
    fusion = {**base, "method": "fusion", "kind": "fusion", "draft_len": 0, "tokens": 64, "rounds": 64}
    fusion["reads_generic_specialist"] = True
    fusion |= {"tokens_per_round": 1.0, "accepted_per_round": 0.0, "cloud_seconds_per_round": 1.2}
    llm = {**base, "method": speed.LLM, "kind": "llm", "draft_len": 0, "tokens": 64, "rounds": 64}
    llm["reads_generic_specialist"] = False
    llm |= {"tokens_per_round": 1.0, "accepted_per_round": 0.0, "cloud_seconds_per_round": 1.2}
    rows = [steer, guarded, bonus, sd, fusion, llm]
    for r in rows:
        r["tokens_per_second"] = 1.0
    args = argparse.Namespace(draft_len=4, k_max=6, paper_target_step_ms=40.0, gpu_block_ratio=1.1, sampling=False)
    # Execute
    out, _ = speed._analyse(rows, costs, args, [0.0])
    by = {r["method"]: r for r in out}
    # Assert: specsteer pays every prefill once a session; sd never reads P_S^0 (no prefill, no block);
    # llm pays only the Generalist's prefill.
    round_floor = 4 * 0.1 + 1.5 + 0.3
    # The cloud's prefills overlap the device's first draft (0.4 s): only the rest holds round 1 up.
    session = 4.0 + (6.0 + 2.0 - 0.4)
    steered = 2 * session + 20 * round_floor
    assert by["specsteer"]["analytic_bound_tps"] == pytest.approx(64 / steered)
    # The guard's look-ahead tokens are device draft steps the floor pays too.
    assert by["specsteer, guard"]["analytic_bound_tps"] == pytest.approx(64 / (steered + 10 * 0.1))
    # So is P_S^c after a fully accepted draft, which a steered bonus token reads.
    assert by["specsteer, bonus"]["analytic_bound_tps"] == pytest.approx(64 / (steered + 6 * 0.1))
    assert by["sd"]["analytic_bound_tps"] == pytest.approx(64 / (2 * (4.0 + 6.0 - 0.4) + 20 * (4 * 0.1 + 1.5)))
    # fusion's first round drafts nothing before it goes up: nothing overlaps its prefills.
    assert by["fusion"]["analytic_bound_tps"] == pytest.approx(64 / (2 * 12.0 + 64 * (0.1 + 1.0 + 0.2)))
    assert by[speed.LLM]["analytic_bound_tps"] == pytest.approx(64 / (2 * 6.0 + 64 * 1.0))
    # The model predicts the rounds from the acceptance: 64 / E(4) of them, at the same floor.
    assert by["specsteer"]["model_tps"] == pytest.approx(64 / (2 * session + 64 / e * round_floor))
    # fusion and llm commit one token a round: the model's rounds are their tokens, so every
    # method's measured tokens/s is held to the model.
    assert by["fusion"]["model_tps"] == pytest.approx(64 / (2 * 12.0 + 64 * (0.1 + 1.0 + 0.2)))
    assert by[speed.LLM]["model_tps"] == pytest.approx(64 / (2 * 6.0 + 64 * 1.0))
    assert all(r["measured_vs_model"] == pytest.approx(1.0 / r["model_tps"]) for r in out)
    # llm's timed steps include its prefill, and so does the floor they are compared with.
    assert by[speed.LLM]["cloud_round_vs_floor"] == pytest.approx(1.2 / (1.0 + 2 * 6.0 / 64))


def test_the_model_prices_the_devices_choices_guard_checks_fusion_and_the_paths_round_trip() -> None:
    # Prepare: the device's work around its forwards, timed alone, and a path that takes 21 ms where
    # the relay was asked for 20 (loopback, TLS and HTTP/2 on top).
    costs = speed.Costs(
        draft_step=0.1,
        g_blocks={1: 1.0, 5: 1.5},
        s_blocks={1: 0.2, 5: 0.3},
        greedy_pick=0.001,
        sampled_draw=0.01,
        guard_check=0.05,
        fuse=0.02,
    )
    base = {"rtt_ms": 20.0, "path_rtt_ms": 21.0, "generations": 1, "fallbacks": 0, "bonus_draft_steps": 0}
    base |= {"tokens": 40, "tokens_per_second": 1.0, "reads_generic_specialist": True, "guard": "placeholder"}
    steer = {**base, "method": "specsteer", "kind": "specsteer", "draft_len": 4, "rounds": 10, "sampling": True}
    steer |= {"guard_lookahead_tokens": 3, "guard_checks": 14, "accepted_per_round": 2.0, "cloud_seconds_per_round": 2}
    off = {**steer, "method": "guard off", "guard": "off", "guard_lookahead_tokens": 0, "guard_checks": 0}
    greedy = {**steer, "method": "greedy", "sampling": False}
    fusion = {**base, "method": "fusion", "kind": "fusion", "draft_len": 0, "rounds": 40, "sampling": True}
    fusion |= {"guard_lookahead_tokens": 0, "guard_checks": 40, "accepted_per_round": 0.0, "cloud_seconds_per_round": 1}
    fusion["vector_path_rtt_ms"] = 23.5  # the path's round trip with the dense vector aboard
    llm = {**base, "method": speed.LLM, "kind": "llm", "draft_len": 0, "rounds": 40, "guard": None, "sampling": False}
    llm |= {"guard_lookahead_tokens": 0, "guard_checks": 0, "accepted_per_round": 0.0, "cloud_seconds_per_round": 1}
    args = argparse.Namespace(draft_len=4, k_max=6, paper_target_step_ms=40.0, gpu_block_ratio=1.1, sampling=True)
    # Execute
    out, _ = speed._analyse([steer, off, greedy, fusion, llm], costs, args, [20.0])
    by = {r["method"]: r for r in out}
    # Assert: K forwards each with its sampled draw, one guard check, both blocks, the path's round trip.
    blocks, path = 1.5 + 0.3, 0.021
    sampled_round = 4 * (0.1 + 0.01) + 0.05 + blocks + path
    assert by["specsteer"]["round_floor_seconds"] == pytest.approx(sampled_round)
    # Beyond the floors: each look-ahead token's forward and draw, and the 4 checks past one a round.
    beyond = 3 * (0.1 + 0.01) + (14 - 10) * 0.05
    # The session's Close waits a round trip too.
    assert by["specsteer"]["analytic_bound_tps"] == pytest.approx(40 / (path + 10 * sampled_round + beyond))
    assert by["guard off"]["round_floor_seconds"] == pytest.approx(4 * (0.1 + 0.01) + blocks + path)
    assert by["greedy"]["round_floor_seconds"] == pytest.approx(4 * (0.1 + 0.001) + 0.05 + blocks + path)
    # fusion: its step, the check of the token it sends, both cloud steps, the path with its vector
    # aboard, and its fusion; its session's Close a plain round trip.
    fusion_round = 0.1 + 0.05 + 1.0 + 0.2 + 0.0235 + 0.02
    assert by["fusion"]["round_floor_seconds"] == pytest.approx(fusion_round)
    assert by["fusion"]["session_floor_seconds"] == pytest.approx(path)
    # llm runs in the cloud's process: no device work, the relay's RTT once a session.
    assert by[speed.LLM]["round_floor_seconds"] == pytest.approx(1.0)


def test_each_rtts_rows_are_held_to_the_floor_timed_just_before_them() -> None:
    # Prepare: the machine runs at half speed by the time the RTT 50 rows run; the rows measure
    # exactly the same rounds at both RTTs, each at its own floor's pace (a drift-free engine).
    fast = speed.Costs(draft_step=0.1, g_blocks={1: 1.0, 5: 1.5}, s_blocks={1: 0.2, 5: 0.3}, g_prefill=1.0)
    slow = speed.Costs(draft_step=0.2, g_blocks={1: 2.0, 5: 3.0}, s_blocks={1: 0.4, 5: 0.6}, g_prefill=2.0)
    common = {"generations": 1, "fallbacks": 0, "guard_lookahead_tokens": 0, "bonus_draft_steps": 0, "tokens": 32}
    common |= {"accepted_per_round": 2.2, "tokens_per_round": 3.2, "rounds": 10, "reads_generic_specialist": True}
    rows = []
    for rtt, pace in ((0.0, 1.0), (50.0, 2.0)):
        steer = {**common, "method": "specsteer", "kind": "specsteer", "draft_len": 4, "rtt_ms": rtt}
        steer |= {"cloud_seconds_per_round": 1.8 * pace, "tokens_per_second": 32 / (10 * (0.4 + 1.8) * pace)}
        fusion = {**common, "method": "fusion", "kind": "fusion", "draft_len": 0, "rtt_ms": rtt, "rounds": 32}
        fusion |= {"cloud_seconds_per_round": 1.2 * pace, "tokens_per_second": 0.5}
        llm = {**common, "method": speed.LLM, "kind": "llm", "draft_len": 0, "rtt_ms": rtt, "rounds": 32}
        llm |= {"cloud_seconds_per_round": 1.0 * pace, "tokens_per_second": 1.0 / pace}
        llm |= {"reads_generic_specialist": False}
        rows += [steer, fusion, llm]
    args = argparse.Namespace(draft_len=4, k_max=6, paper_target_step_ms=40.0, gpu_block_ratio=1.1, sampling=False)
    # Execute
    out, _ = speed._analyse(rows, fast, args, [0.0, 50.0], {0.0: fast, 50.0: slow})
    # Assert: the slow stretch is not read as engine overhead, for llm (timed again at each RTT) either.
    steered = {r["rtt_ms"]: r for r in out if r["kind"] == "specsteer"}
    assert steered[50.0]["cloud_round_vs_floor"] == pytest.approx(steered[0.0]["cloud_round_vs_floor"]) == 1.0
    assert steered[50.0]["round_floor_seconds"] == pytest.approx(2 * 2.2 + 0.05)
    llms = [r for r in out if r["kind"] == "llm"]
    assert all(r["cloud_round_vs_floor"] == pytest.approx(1.0 / (1.0 + 1.0 / 32)) for r in llms)
    assert steered[50.0]["speedup_vs_llm"] == pytest.approx(steered[0.0]["speedup_vs_llm"])


def test_llm_is_timed_again_in_each_rtts_block(tmp_path, char_tok, monkeypatch) -> None:
    # Each RTT's llm row comes from its own generations, not the start's: count llm generations.
    s_dir = save_tiny(tmp_path, char_tok, seed=1, name="s")
    g_dir = save_tiny(tmp_path, char_tok, seed=2, name="g")
    calls: list[str] = []
    real = speed.generate

    def counting(specialist, prompt, params, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(params.method.value)
        return real(specialist, prompt, params, *args, **kwargs)

    monkeypatch.setattr(speed, "generate", counting)
    argv = ["--rtts", "0", "5", "--queries", "1", "--max-new-tokens", "4", "--reps", "1", "--baseline-reps", "1"]
    argv += ["--k-max", "2", "--draft-len", "2", "--no-best-k", "--no-llamacpp", "--out", str(tmp_path / "out")]
    assert speed.main([*argv, "--specialist", str(s_dir), "--generalist", str(g_dir), "--drafter", "torch"]) == 0
    assert calls.count("llm") == 1 + 2  # the baseline against generate, then once per RTT


@pytest.mark.skipif(not onednn_available(), reason="this torch build has no oneDNN")
def test_compare_kernels_times_both_kernels_on_every_block_size_and_leaves_the_results(tmp_path, char_tok) -> None:
    s_dir = save_tiny(tmp_path, char_tok, seed=1, name="s")
    g_dir = save_tiny(tmp_path, char_tok, seed=2, name="g")
    out = tmp_path / "results"
    args = ["--compare-kernels", "--reps", "1", "--kernel-rounds", "2", "--draft-len", "2", "--k-max", "3"]
    assert (
        speed.main(
            [*args, "--specialist", str(s_dir), "--generalist", str(g_dir), "--drafter", "torch", "--out", str(out)]
        )
        == 0
    )
    seconds = json.loads((out / "speed_kernels.json").read_text())["seconds"]
    assert set(seconds) == {str(s_dir), str(g_dir)}
    for by_kernel in seconds.values():
        assert set(by_kernel) == {"torch", "onednn"}
        assert all(set(costs) == {"1", "2", "3", "4"} and min(costs.values()) > 0 for costs in by_kernel.values())
    page = (out / "speed_kernels.md").read_text()
    assert "| onednn / torch |" in page and page.count(f"| {g_dir} |") == 4


def test_on_the_slot_pool_the_cloud_costs_are_the_pools_forwards(char_tok) -> None:
    """`--kv slots`: the cost model reads the forwards the verifier pays (the pool's, not
    transformers' eager ones): a prefill and every block size, and the pool as it was after."""
    from bench.speed_timing import pool_forward_times
    from specsteer.server.slot_sequence import SlotPools

    lm = tiny_lm(char_tok, seed=4)
    pools = SlotPools(2, 64)
    pool = pools.pool(lm.model)
    times = pool_forward_times(pool, list(range(5, 25)), [1, 2, 5], reps=2)
    assert set(times) == {0, 1, 2, 5} and all(t > 0 for t in times.values())
    assert sorted(pool.free_slots()) == [0, 1]

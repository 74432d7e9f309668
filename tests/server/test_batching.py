"""Cross-session batching: concurrent sessions' forwards of one model merge into shared forwards,
and every session's verdicts and steering stay what they are when each session runs alone."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import pytest
import torch

from specsteer.core.errors import ConfigError
from specsteer.core.kv import TokenSequence
from specsteer.core.models import CausalLM
from specsteer.core.session_types import SessionParams, Verdict
from specsteer.sdk.decoding import DecodeOptions, Generation, Specialist, generate
from specsteer.sdk.transport import InProcessVerifier
from specsteer.server.batching import ForwardBatcher, Scheduler
from specsteer.server.cli import _overrides, build_parser, main
from specsteer.server.config import ServerConfig, load_config
from specsteer.server.metrics import Metrics
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_gemma, tiny_llama, tiny_lm
from tests.verifier_harness import make_pki, remote, serve

PROMPTS = (
    "Fix the parser",
    "Add a cache for lookups in the index",
    "Docs",
    "Refactor the scheduler so that batches of sessions share forward passes",
)
Round = tuple[list[int], list[int], Verdict]


def recording_open(cloud: CloudVerifier, log: list[Round], runner: Callable | None) -> Callable:
    """`cloud.open` with `runner`, logging every round's commit, draft and verdict."""

    def open_(prompt_ids, params):
        session = cloud.open(prompt_ids, params, runner=runner)
        inner = session.round

        def round_(commit, draft, *rest):
            verdict = inner(commit, draft, *rest)
            log.append((list(commit), list(draft), verdict))
            return verdict

        session.round = round_
        return session

    return open_


def run_one(cloud: CloudVerifier, s_lm: CausalLM, prompt: str, runner: Callable | None) -> tuple[Generation, list]:
    log: list[Round] = []
    verifier = InProcessVerifier(recording_open(cloud, log, runner), vocab_size=s_lm.vocab_size)
    out = generate(Specialist(s_lm), prompt, SessionParams(draft_len=4), DecodeOptions(max_new_tokens=16), verifier)
    return out, log


def run_concurrently(cloud: CloudVerifier, s_lm: CausalLM, batcher: ForwardBatcher) -> list[tuple[Generation, list]]:
    """One thread per prompt, each a scheduler-like job for the whole session (so batches wait for it)."""
    results: list = [None] * len(PROMPTS)
    errors: list[BaseException] = []
    started = threading.Barrier(len(PROMPTS))

    def one(i: int) -> None:
        try:
            with batcher.job():
                started.wait(30)  # every job counts before the first forward is submitted
                results[i] = run_one(cloud, s_lm, PROMPTS[i], batcher)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a session hung"
    assert not errors, errors
    return results


def assert_same_rounds(got: Sequence[Round], want: Sequence[Round]) -> None:
    assert len(got) == len(want)
    for (commit, draft, verdict), (w_commit, w_draft, w_verdict) in zip(got, want, strict=True):
        assert (commit, draft, verdict.accepted) == (w_commit, w_draft, w_verdict.accepted)
        if w_verdict.steering is None:
            assert verdict.steering is None
            continue
        assert verdict.steering is not None
        assert verdict.steering.candidates == w_verdict.steering.candidates
        assert verdict.steering.values == pytest.approx(w_verdict.steering.values, abs=1e-4)


def merged_forwards(metrics: Metrics) -> float:
    """How many forwards had more than one sequence."""
    return metrics.value("specsteer_batch_size_count") - metrics.value("specsteer_batch_size_bucket", {"le": "1.0"})


@pytest.fixture(scope="module")
def pairs(char_tok, bpe_tok, smol_tok) -> dict[str, tuple[CausalLM, CausalLM]]:
    """Specialist and Generalist per case: shared vocabulary (Llama), cross-vocabulary (SmolLM2's
    tokenizer and a BPE), and a Gemma 3 Generalist whose 40-token window the longer sessions outgrow."""
    s_char = tiny_lm(char_tok, seed=1, name="s")
    return {
        "shared": (s_char, tiny_lm(char_tok, seed=2, name="g", layers=3)),
        "cross": (tiny_lm(smol_tok, seed=5, name="s"), tiny_lm(bpe_tok, seed=6, name="g")),
        "gemma": (s_char, CausalLM.from_parts("g", tiny_gemma(char_tok, seed=7, window=40), char_tok)),
    }


@pytest.mark.parametrize("case", ["shared", "cross", "gemma"])
def test_concurrent_sessions_batched_verify_exactly_like_sequential_unbatched_ones(pairs, case) -> None:
    # Prepare
    s_lm, g_lm = pairs[case]
    cloud = CloudVerifier(g_lm, s_lm, seed=0)
    sequential = [run_one(cloud, s_lm, prompt, None) for prompt in PROMPTS]
    metrics = Metrics()
    batcher = ForwardBatcher(metrics, max_batch=3, max_wait=0.25)
    # Execute
    try:
        batched = run_concurrently(cloud, s_lm, batcher)
    finally:
        batcher.close()
    # Assert: the same text, rounds, verdicts and steering for every session.
    for (out, log), (want_out, want_log) in zip(batched, sequential, strict=True):
        assert out.token_ids == want_out.token_ids and out.stats.fallback is None
        assert_same_rounds(log, want_log)
    # ... while forwards really were shared, never by more than max_batch sequences.
    assert merged_forwards(metrics) > 0
    assert metrics.value("specsteer_batch_size_bucket", {"le": "3.0"}) == metrics.value("specsteer_batch_size_count")
    if case == "gemma":  # the sessions that outgrew the sliding window ran alone from then on
        assert metrics.value("specsteer_unmerged_forwards_total", {"reason": "window"}) > 0


def test_a_failing_row_neither_hangs_nor_corrupts_the_rest_of_its_batch(char_tok) -> None:
    # Prepare: three sessions' sequences, the middle one with an id outside the vocabulary.
    model = tiny_llama(char_tok, seed=3)
    metrics = Metrics()
    batcher = ForwardBatcher(metrics, max_batch=3, max_wait=5.0)
    prefixes = [[5, 6, 7], [8, 9, model.config.vocab_size + 1], [10, 11, 12, 13]]
    seqs = [TokenSequence(model, p, batcher) for p in prefixes]
    alone = [TokenSequence(model, p) for p in prefixes]
    results: dict[int, object] = {}

    def read(i: int, started: threading.Barrier) -> None:
        with batcher.job():
            started.wait(30)  # every job counts before the first forward is submitted
            try:
                results[i] = seqs[i].next_logprobs()
            except Exception as exc:
                results[i] = exc

    def all_at_once(indices: Sequence[int]) -> None:
        started = threading.Barrier(len(indices))
        threads = [threading.Thread(target=read, args=(i, started)) for i in indices]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads), "a forward hung"

    # Execute
    try:
        all_at_once([0, 1, 2])
        for i in (0, 2):
            seqs[i].push([20, 21])
            alone[i].push([20, 21])
        all_at_once([0, 2])  # the batcher still serves, and merges
    finally:
        batcher.close()
    # Assert: the bad row failed alone; the others match their own forwards, then and after.
    assert isinstance(results[1], IndexError)
    for i in (0, 2):
        torch.testing.assert_close(results[i], alone[i].next_logprobs(), atol=1e-5, rtol=0)
        torch.testing.assert_close(seqs[i].logprobs_at(len(prefixes[i])), alone[i].logprobs_at(len(prefixes[i])))
    assert metrics.value("specsteer_unmerged_forwards_total", {"reason": "error"}) == 3
    assert (
        metrics.value("specsteer_batch_size_bucket", {"le": "2.0"})
        - metrics.value("specsteer_batch_size_bucket", {"le": "1.0"})
        == 1
    )


def test_after_close_forwards_run_on_their_callers(char_tok) -> None:
    batcher = ForwardBatcher(Metrics(), max_batch=2)
    batcher.close()
    model = tiny_llama(char_tok, seed=3)
    got = TokenSequence(model, [5, 6], batcher).next_logprobs()
    torch.testing.assert_close(got, TokenSequence(model, [5, 6]).next_logprobs())


def test_scheduler_gives_batching_enough_workers_to_gather_batches() -> None:
    on, off = Metrics(), Metrics()
    batching = Scheduler(1, on, batching=True, max_batch=4)
    single = Scheduler(1, off)
    try:
        assert (batching.workers, single.workers) == (8, 1)
        assert batching.runner is batching.batcher and single.batcher is None
        assert (on.value("specsteer_batching_enabled"), off.value("specsteer_batching_enabled")) == (1, 0)
    finally:
        batching.shutdown()
        single.shutdown()


# -- over the network ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("batching"))


LIVE_PARAMS, LIVE_OPTIONS = SessionParams(draft_len=4), DecodeOptions(max_new_tokens=16)


def in_process_texts(g_lm: CausalLM, s_lm: CausalLM) -> list[list[int]]:
    """Each of PROMPTS generated against the default in-process verifier: the reference texts."""
    return [
        generate(
            Specialist(s_lm),
            p,
            LIVE_PARAMS,
            LIVE_OPTIONS,
            InProcessVerifier(CloudVerifier(g_lm, s_lm, seed=0).open, vocab_size=s_lm.vocab_size),
        ).token_ids
        for p in PROMPTS
    ]


def live_texts(cloud: CloudVerifier, s_lm: CausalLM, pki, **overrides) -> tuple[list[list[int] | None], Metrics]:
    """Each of PROMPTS generated by its own device thread, all at once, against one real server of
    `cloud` (mutual TLS on loopback, `overrides` in its config); the texts and the server's metrics."""
    got: dict[int, list[int]] = {}
    with serve(cloud, pki, **overrides) as (server, port):

        def one(i: int) -> None:
            with remote(port, pki, vocab_size=s_lm.vocab_size) as verifier:
                out = generate(Specialist(s_lm), PROMPTS[i], LIVE_PARAMS, LIVE_OPTIONS, verifier, fallback=False)
                got[i] = out.token_ids

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    return [got.get(i) for i in range(len(PROMPTS))], server.metrics


@pytest.mark.parametrize("batching", [True, False])
def test_live_verifier_serves_concurrent_devices_as_in_process_with_batching_on_or_off(pairs, pki, batching) -> None:
    s_lm, g_lm = pairs["shared"]
    local = in_process_texts(g_lm, s_lm)
    # One device thread per prompt against one server.
    got, metrics = live_texts(
        CloudVerifier(g_lm, s_lm, seed=0), s_lm, pki, batching=batching, max_batch=4, batch_wait_ms=50
    )
    assert got == local
    assert metrics.value("specsteer_batching_enabled") == (1 if batching else 0)
    assert metrics.value("specsteer_batch_size_count") > 0
    if not batching:
        assert merged_forwards(metrics) == 0


# -- configuration ---------------------------------------------------------------------------------


def test_batching_settings_from_toml_and_command_line(tmp_path) -> None:
    path = tmp_path / "server.toml"
    path.write_text("[batching]\nenabled = false\nmax_batch = 3\nmax_wait_ms = 2\n")
    config = load_config(path)
    assert (config.batching, config.max_batch, config.batch_wait_ms) == (False, 3, 2.0)
    defaults = ServerConfig()
    assert (defaults.batching, defaults.max_batch, defaults.batch_wait_ms) == (True, 8, 5.0)
    args = build_parser().parse_args(["serve", "--batching", "on", "--max-batch", "16", "--batch-wait-ms", "0"])
    config = load_config(path, _overrides(args))
    assert (config.batching, config.max_batch, config.batch_wait_ms) == (True, 16, 0.0)
    assert load_config(path, _overrides(build_parser().parse_args(["serve"]))).batching is False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[batching]\nenabled = "on"\n', "\\[batching\\] enabled must be true or false; got 'on'"),
        ("[batching]\nmax_batch = 0\n", "max_batch must be in \\[1, 64\\]; got 0"),
        ("[batching]\nmax_batch = 65\n", "max_batch must be in \\[1, 64\\]; got 65"),
        ("[batching]\nmax_batch = 2.5\n", "max_batch must be an integer"),
        ("[batching]\nmax_wait_ms = -1\n", "max_wait_ms must be a number of milliseconds in \\[0, 1000\\]"),
        ('[batching]\nmax_wait_ms = "5"\n', "max_wait_ms must be a number of milliseconds; got '5'"),
        ("[batching]\nsize = 3\n", "unknown key 'size' in \\[batching\\]"),
    ],
)
def test_bad_batching_settings_are_named(tmp_path, text, message) -> None:
    path = tmp_path / "server.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_serve_refuses_bad_batching_options(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as usage:
        main(["serve", "--batching", "maybe"])
    assert usage.value.code == 2 and "argument --batching: invalid choice: 'maybe'" in capsys.readouterr().err
    assert main(["serve", "--tls-dir", str(tmp_path), "--max-batch", "0"]) == 1
    assert "server: error: max_batch must be in [1, 64]; got 0" in capsys.readouterr().err

"""The device's llama.cpp drafter: the same distributions as the torch Specialist on the same
weights, through drafting, rollback and continuation scoring, and clear refusals.

The tests that run llama.cpp need the opt-in `[llamacpp]` extra (it compiles from source, so CI
does not install it) and skip without it; the refusals and the shared rollback bookkeeping run
everywhere.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from specsteer.core.errors import ConfigError
from specsteer.core.kv import CachedSequence, TokenSequence
from specsteer.core.models import CausalLM, load_causal_lm
from specsteer.core.session_types import SessionParams
from specsteer.sdk.cli import main as sdk_main
from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
from specsteer.sdk.llamacpp import check_drafter_installed, drafter_for, gguf_for
from specsteer.sdk.specialists import load_specialist
from specsteer.sdk.transport import InProcessVerifier
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_llama, write_tiny_gguf

HAS_LLAMACPP = importlib.util.find_spec("llama_cpp") is not None
needs_llamacpp = pytest.mark.skipif(not HAS_LLAMACPP, reason="the [llamacpp] extra is not installed")


# --- the shared rollback bookkeeping, with a backend that keeps only each feed's last row -------


class LastRowSequence(TokenSequence):
    """A Hugging Face sequence that, like llama.cpp's, returns the last row of each forward only."""

    def _forward(self, new: Sequence[int]) -> torch.Tensor:
        return super()._forward(new)[-1:]


def test_a_backend_keeping_last_rows_only_rolls_back_into_a_block_by_refeeding_one_token(bpe_tok) -> None:
    # Prepare
    model = tiny_llama(bpe_tok, seed=4)
    full, last = TokenSequence(model, [5, 6, 7]), LastRowSequence(model, [5, 6, 7])
    # Execute: a 3-token feed, then a rollback into its middle, where no row was kept.
    for seq in (full, last):
        seq.push([8, 9, 10])
        seq.next_logprobs()
        seq.truncate(5)
    # Assert: the same distribution after the rollback, at the cost of one more (1-token) forward.
    torch.testing.assert_close(last.next_logprobs(), full.next_logprobs(), atol=1e-5, rtol=0)
    assert (full.forward_passes, last.forward_passes) == (1, 2)
    assert last.cached == full.cached == 5


# --- refusals that need no llama.cpp -----------------------------------------------------------


def test_the_drafter_choice_is_torch_or_llamacpp_and_anything_else_is_refused(bpe_tok) -> None:
    lm = CausalLM.from_parts("tiny", tiny_llama(bpe_tok, seed=1), bpe_tok)
    assert drafter_for("torch", "tiny", lm) is None
    with pytest.raises(ConfigError, match="unknown drafter 'tflite'; choose one of: torch, llamacpp, onnx"):
        drafter_for("tflite", "tiny", lm)


def test_the_llamacpp_drafter_needs_a_gguf(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"needs a GGUF: pass a \.gguf file or an embedded model name"):
        gguf_for(str(tmp_path))
    with pytest.raises(ConfigError, match="no GGUF file at"):
        gguf_for(str(tmp_path / "missing.gguf"))


@pytest.mark.skipif(HAS_LLAMACPP, reason="checks the message a missing extra gives")
def test_without_the_extra_the_cli_says_how_to_install_it_before_loading_a_model(capsys) -> None:
    with pytest.raises(ConfigError, match=r"pip install 'specsteer-sdk\[llamacpp\]'"):
        check_drafter_installed("llamacpp")
    code = sdk_main(["generate", "--prompt", "hello", "--method", "slm", "--drafter", "llamacpp", "--specialist", "x"])
    assert code != 0
    assert "llama-cpp-python" in capsys.readouterr().err


def test_a_federated_specialist_cannot_draft_on_the_base_gguf(tmp_path: Path, capsys) -> None:
    # The personal adapters are merged into the torch model only: the GGUF would quietly drop them.
    argv = ["generate", "--prompt", "hello", "--method", "slm", "--drafter", "llamacpp", "--specialist", "x"]
    code = sdk_main([*argv, "--federation-state", str(tmp_path)])
    assert code != 0
    err = capsys.readouterr().err
    assert "without --federation-state's adapters: use --drafter onnx or torch" in err
    assert "Traceback" not in err


def test_a_specialist_without_weights_needs_a_drafter(tmp_path: Path, bpe_tok) -> None:
    folder = tmp_path / "tiny"
    tiny_llama(bpe_tok, seed=1).save_pretrained(str(folder))
    bpe_tok.save_pretrained(str(folder))
    weightless = load_causal_lm(folder, progress=False, weights=False)
    with pytest.raises(ConfigError, match="was loaded without weights: give it a drafter"):
        Specialist(weightless)


# --- llama.cpp on a tiny F32 GGUF: the torch model's own weights ---------------------------------


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory, bpe_tok) -> tuple[CausalLM, Path]:
    """A tiny llama as a torch model and as the F32 GGUF it was converted from."""
    folder = tmp_path_factory.mktemp("tiny-gguf")
    gguf = write_tiny_gguf(folder / "tiny.gguf", tiny_llama(bpe_tok, seed=1, kv_heads=2), bpe_tok)
    return load_causal_lm(str(gguf), cache_dir=folder / "cache", progress=False), gguf


def pair_sequences(tiny_pair, prefix: Sequence[int]) -> tuple[CachedSequence, TokenSequence]:
    lm, gguf = tiny_pair
    return drafter_for("llamacpp", str(gguf), lm).sequence(prefix), TokenSequence(lm.model, prefix)  # type: ignore[union-attr]


@needs_llamacpp
def test_llamacpp_rows_match_torch_through_drafting_and_rollbacks(tiny_pair) -> None:
    # Prepare
    fast, ref = pair_sequences(tiny_pair, [5, 6, 7, 8])
    # Execute: the device's pattern: prefill, 1-token drafts, a rollback, a multi-token recovery.
    rows: list[tuple[torch.Tensor, torch.Tensor]] = [(fast.next_logprobs(), ref.next_logprobs())]
    for token in (30, 31, 32):
        for seq in (fast, ref):
            seq.push([token])
        rows.append((fast.next_logprobs(), ref.next_logprobs()))
    for seq in (fast, ref):
        seq.truncate(6)  # one draft accepted
        seq.push([40, 41, 42])
    rows.append((fast.next_logprobs(), ref.next_logprobs()))
    for seq in (fast, ref):
        seq.truncate(8)  # into the 3-token feed, where llama.cpp kept no row
    rows.append((fast.next_logprobs(), ref.next_logprobs()))
    # Assert (llama.cpp keeps its KV cache in f16: agreement to about 1e-3, not float rounding)
    for got, want in rows:
        torch.testing.assert_close(torch.as_tensor(got), want, atol=1e-2, rtol=0)  # numpy rows: no torch on the device
        assert int(got.argmax()) == int(want.argmax())
    assert fast.ids == ref.ids == [5, 6, 7, 8, 30, 31, 40, 41]


@needs_llamacpp
def test_llamacpp_scores_multi_token_continuations_like_torch_and_keeps_its_cache(tiny_pair) -> None:
    fast, ref = pair_sequences(tiny_pair, [5, 6, 7, 8])
    continuations = [(30,), (31, 32), (33, 34, 35)]
    torch.testing.assert_close(
        torch.as_tensor(fast.score_continuations(continuations)),
        ref.score_continuations(continuations),
        atol=2e-2,
        rtol=0,
    )
    # The scoring left the cache at the sequence's own ids: the next step still matches.
    for seq in (fast, ref):
        seq.push([36])
    torch.testing.assert_close(torch.as_tensor(fast.next_logprobs()), ref.next_logprobs(), atol=1e-2, rtol=0)


@needs_llamacpp
def test_a_new_sequence_takes_the_context_over_and_the_old_one_refuses_to_run(tiny_pair) -> None:
    lm, gguf = tiny_pair
    drafter = drafter_for("llamacpp", str(gguf), lm)
    assert drafter is not None
    old = drafter.sequence([5, 6])
    old.next_logprobs()
    drafter.sequence([7, 8]).next_logprobs()
    old.push([9])
    with pytest.raises(RuntimeError, match="a newer sequence took over"):
        old.next_logprobs()


@needs_llamacpp
def test_a_sequence_past_the_context_is_refused_with_the_size(tiny_pair) -> None:
    lm, gguf = tiny_pair
    from specsteer.sdk.llamacpp import LlamaCppDrafter

    seq = LlamaCppDrafter(gguf, lm, context_tokens=16).sequence(list(range(5, 25)))
    with pytest.raises(ConfigError, match=r"needs 20 tokens but the llama\.cpp context holds 16"):
        seq.next_logprobs()


@needs_llamacpp
def test_a_specialist_with_merged_adapters_refuses_a_drafter_of_its_base_weights(tiny_pair) -> None:
    lm, gguf = tiny_pair
    drafter = drafter_for("llamacpp", str(gguf), lm)
    assert drafter is not None
    merged = CausalLM.from_parts(f"{lm.name}+personal", lm.model, lm.tokenizer)
    with pytest.raises(ConfigError, match=r"the drafter runs .* but the Specialist is .*\+personal"):
        Specialist(merged, drafter=drafter)


@needs_llamacpp
def test_a_drafter_of_another_vocabulary_is_refused(tiny_pair, char_tok) -> None:
    _, gguf = tiny_pair
    other = CausalLM.from_parts("char", tiny_llama(char_tok, seed=1), char_tok)
    with pytest.raises(ConfigError, match="the drafter must be the Specialist's own GGUF"):
        drafter_for("llamacpp", str(gguf), other)


@needs_llamacpp
def test_a_steered_generation_drafting_on_llamacpp_commits_what_the_torch_device_commits(tiny_pair, bpe_tok) -> None:
    # Prepare: the cloud on torch (a Generalist of other weights), the device on either backend.
    lm, gguf = tiny_pair
    generalist = CausalLM.from_parts("g", tiny_llama(bpe_tok, seed=9, kv_heads=2), bpe_tok)
    cloud = CloudVerifier(generalist, lm, seed=0)
    verifier = InProcessVerifier(cloud.open, vocab_size=lm.vocab_size)
    params, options = SessionParams(gamma=0.5, draft_len=3), DecodeOptions(max_new_tokens=24)
    prompt = "the cat sat on the mat"
    # The device's torch model without weights: the drafter runs them, the tokenizer stays.
    weightless = load_causal_lm(str(gguf), cache_dir=gguf.parent / "cache", progress=False, weights=False)
    # Execute
    fast = generate(Specialist(lm, drafter=drafter_for("llamacpp", str(gguf), lm)), prompt, params, options, verifier)
    lean_specialist = Specialist(weightless, drafter=drafter_for("llamacpp", str(gguf), weightless))
    lean = generate(lean_specialist, prompt, params, options, verifier)
    ref = generate(Specialist(lm), prompt, params, options, verifier)
    # Assert: same tokens, and the round trips really ran (drafts, rejections and recoveries).
    assert fast.token_ids == lean.token_ids == ref.token_ids
    assert fast.stats.rounds == ref.stats.rounds > 1
    assert fast.stats.recoveries == ref.stats.recoveries > 0
    assert fast.stats.accepted == ref.stats.accepted
    assert not weightless.has_weights


@needs_llamacpp
def test_a_remote_device_drafting_on_llamacpp_loads_no_torch_weights(tiny_pair, tmp_path: Path) -> None:
    _, gguf = tiny_pair
    cache = gguf.parent / "cache"
    lean = load_specialist(str(gguf), None, drafter="llamacpp", cache_dir=cache)
    full = load_specialist(str(gguf), None, drafter="torch", cache_dir=cache)
    assert lean.drafter is not None and not lean.lm.has_weights
    assert full.drafter is None and full.lm.has_weights
    assert lean.private_prompt_ids("hi", with_context=False) == full.private_prompt_ids("hi", with_context=False)


@needs_llamacpp
def test_the_cli_drafts_on_llamacpp_when_asked(tiny_pair, tmp_path: Path, capsys) -> None:
    _, gguf = tiny_pair
    argv = ["generate", "--prompt", "the cat sat", "--method", "slm", "--max-new-tokens", "8", "--json"]
    argv += ["--cache-dir", str(tmp_path)]
    assert sdk_main([*argv, "--specialist", str(gguf), "--drafter", "llamacpp"]) == 0
    fast = json.loads(capsys.readouterr().out)
    assert sdk_main([*argv, "--specialist", str(gguf)]) == 0
    ref = json.loads(capsys.readouterr().out)
    assert fast["text"] == ref["text"] and fast["text"]


@needs_llamacpp
def test_bench_compares_the_two_drafters_in_turns_and_leaves_the_results(
    tiny_pair, tmp_path: Path, monkeypatch
) -> None:
    from bench import speed

    _, gguf = tiny_pair
    monkeypatch.setenv("SPECSTEER_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "results"
    args = ["--compare-drafters", "--reps", "1", "--kernel-rounds", "2", "--specialist", str(gguf), "--out", str(out)]
    assert speed.main(args) == 0
    result = json.loads((out / "speed_drafters.json").read_text())
    assert set(result["seconds"]) == {"torch", "llamacpp"}
    assert all(len(times) == 2 and min(times) > 0 for by in result["turns"].values() for times in by.values())
    assert "| draft step |" in (out / "speed_drafters.md").read_text()

"""The device's onnxruntime-genai drafter: a tiny Llama converted at fp32 gives torch's distributions
through drafting, rollback and continuation scoring; the conversion is cached by content; a
Specialist with the federation's adapters merged in drafts on its own converted weights; and the
CLI drafts on it in a full generation with the text torch writes."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from specsteer.core.adapters import PERSONAL, load_device_specialist
from specsteer.core.errors import ConfigError
from specsteer.core.kv import CachedSequence, TokenSequence
from specsteer.core.models import CausalLM, load_causal_lm
from specsteer.sdk.cli import build_parser, check_options
from specsteer.sdk.cli import main as sdk_main
from specsteer.sdk.decoding import Specialist
from specsteer.sdk.drafters import check_drafter_installed, drafter_for
from tests.tinymodels import save_tiny, tiny_llama

og = pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai is not installed")

from specsteer.core import onnx_cache  # noqa: E402  (after the skip: its conversions need the runtime)
from specsteer.sdk.onnx_drafter import OnnxDrafter  # noqa: E402

PROMPTS = ([5, 6, 7, 8], [40, 41], [100, 7, 250, 3, 9, 9, 12], [300])


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, bpe_tok, cache: Path) -> tuple[CausalLM, OnnxDrafter, Path]:
    """A tiny Llama folder (grouped KV heads, as Qwen has), its torch model and its fp32 ONNX drafter."""
    folder = save_tiny(tmp_path_factory.mktemp("models"), bpe_tok, seed=3, kv_heads=2)
    lm = load_causal_lm(folder, progress=False)
    drafter = OnnxDrafter.for_specialist(str(folder), lm, precision="fp32", cache_dir=cache, progress=False)
    return lm, drafter, folder


def close(got: object, want: torch.Tensor, atol: float) -> None:
    """The drafter's numpy rows against torch's."""
    np.testing.assert_allclose(np.asarray(got), want.numpy(), atol=atol, rtol=0)


def greedy(seq: CachedSequence, steps: int) -> list[int]:
    """The device's local loop: draw the argmax, push it, `steps` times."""
    out = []
    for _ in range(steps):
        token = int(seq.next_logprobs().argmax())
        out.append(token)
        seq.push([token])
    return out


# --- refusals ----------------------------------------------------------------------------------


def test_the_drafter_choice_names_every_backend_and_refuses_a_precision_elsewhere(bpe_tok) -> None:
    lm = CausalLM.from_parts("tiny", tiny_llama(bpe_tok, seed=1), bpe_tok)
    with pytest.raises(ConfigError, match="unknown drafter 'tflite'; choose one of: torch, llamacpp, onnx"):
        drafter_for("tflite", "tiny", lm)
    with pytest.raises(ConfigError, match="a drafter precision is for the onnx drafter, not torch"):
        drafter_for("torch", "tiny", lm, precision="int4")
    with pytest.raises(ConfigError, match="runs the base GGUF, without the federation's adapters"):
        drafter_for("llamacpp", "tiny", lm, from_weights=True)


def test_a_missing_runtime_is_one_sentence_with_the_install_command(monkeypatch) -> None:
    monkeypatch.setattr(onnx_cache.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"needs onnxruntime-genai: pip install specsteer-sdk"):
        check_drafter_installed("onnx")


def test_the_cli_takes_a_precision_only_for_the_onnx_drafter_and_adapters_only_off_llamacpp(tmp_path: Path) -> None:
    def options(*extra: str) -> None:
        check_options(build_parser().parse_args(["generate", "--prompt", "hi", *extra]), "hi")

    with pytest.raises(ConfigError, match="--drafter-precision is for --drafter onnx, not torch"):
        options("--drafter", "torch", "--drafter-precision", "int8")
    options("--drafter-precision", "int8")  # onnx is the default drafter
    with pytest.raises(ConfigError, match="use --drafter onnx or torch"):
        options("--drafter", "llamacpp", "--federation-state", str(tmp_path))
    options("--drafter", "onnx", "--drafter-precision", "int8", "--federation-state", str(tmp_path))


def test_the_cli_and_the_library_check_one_drafter_rule() -> None:
    """Issue #46: `sdk generate`'s `check_options` wrote the drafter rules of `drafter_for` again.
    Both now call `check_drafter_choice`; only its wording follows the caller (flags or arguments)."""
    from specsteer.sdk.drafters import check_drafter_choice

    for flags, precision, adapters in [
        (False, "a drafter precision is for the onnx drafter, not llamacpp", "without the federation's adapters$"),
        (True, "--drafter-precision is for --drafter onnx, not llamacpp", "use --drafter onnx or torch$"),
    ]:
        with pytest.raises(ConfigError, match=precision):
            check_drafter_choice("llamacpp", precision="int8", flags=flags)
        with pytest.raises(ConfigError, match=adapters):
            check_drafter_choice("llamacpp", with_adapters=True, flags=flags)
        check_drafter_choice("onnx", precision="int8", with_adapters=True, flags=flags)
        check_drafter_choice("torch", with_adapters=True, flags=flags)
    cli = (Path(__file__).resolve().parents[2] / "sdk" / "cli.py").read_text(encoding="utf-8")
    assert "runs the base GGUF" not in cli and "is for --drafter onnx" not in cli


def test_a_drafter_of_another_vocabulary_is_refused(tiny, char_tok) -> None:
    _, drafter, _ = tiny
    other = CausalLM.from_parts("char", tiny_llama(char_tok, seed=1), char_tok)
    with pytest.raises(ConfigError, match="the drafter must run the Specialist's own weights"):
        OnnxDrafter(drafter.folder, other)


# --- the same distributions as torch -----------------------------------------------------------


def test_greedy_drafts_at_fp32_are_torchs_on_every_prompt(tiny) -> None:
    lm, drafter, _ = tiny
    for prompt in PROMPTS:
        fast, ref = drafter.sequence(prompt), TokenSequence(lm.model, prompt)
        assert greedy(fast, 12) == greedy(ref, 12)
        close(fast.next_logprobs(), ref.next_logprobs(), atol=1e-4)


def test_rows_match_torch_through_drafting_and_rollbacks(tiny) -> None:
    lm, drafter, _ = tiny
    fast, ref = drafter.sequence([5, 6, 7, 8]), TokenSequence(lm.model, [5, 6, 7, 8])
    rows = [(fast.next_logprobs(), ref.next_logprobs())]
    for token in (30, 31, 32):  # one-token drafts
        for seq in (fast, ref):
            seq.push([token])
        rows.append((fast.next_logprobs(), ref.next_logprobs()))
    for seq in (fast, ref):
        seq.truncate(6)  # one draft accepted, then a 3-token recovery
        seq.push([40, 41, 42])
    rows.append((fast.next_logprobs(), ref.next_logprobs()))
    for seq in (fast, ref):
        seq.truncate(8)  # into the 3-token feed, where the pruned head kept no row
    rows.append((fast.next_logprobs(), ref.next_logprobs()))
    for got, want in rows:
        close(got, want, atol=1e-4)
    assert fast.ids == ref.ids == [5, 6, 7, 8, 30, 31, 40, 41]


def test_a_rollback_then_a_new_extension_gives_a_fresh_runs_logits(tiny) -> None:
    _, drafter, _ = tiny
    rolled = drafter.sequence([9, 10, 11])
    rolled.next_logprobs()
    rolled.push([50, 51, 52, 53])
    rolled.next_logprobs()
    rolled.truncate(4)
    rolled.push([70, 71])
    after_rollback = rolled.next_logprobs().copy()
    fresh = drafter.sequence([9, 10, 11, 50, 70, 71]).next_logprobs()
    np.testing.assert_allclose(after_rollback, fresh, atol=1e-5, rtol=0)


def test_multi_token_continuations_score_like_torch_and_leave_the_cache_as_it_was(tiny) -> None:
    lm, drafter, _ = tiny
    fast, ref = drafter.sequence([5, 6, 7, 8]), TokenSequence(lm.model, [5, 6, 7, 8])
    continuations = [(30,), (31, 32), (33, 34, 35)]
    close(fast.score_continuations(continuations), ref.score_continuations(continuations), atol=1e-4)
    for seq in (fast, ref):
        seq.push([36])
    close(fast.next_logprobs(), ref.next_logprobs(), atol=1e-4)


def test_a_new_sequence_takes_over_and_the_old_one_refuses_to_run(tiny) -> None:
    _, drafter, _ = tiny
    old = drafter.sequence([5, 6])
    old.next_logprobs()
    drafter.sequence([7, 8]).next_logprobs()
    old.push([9])
    with pytest.raises(RuntimeError, match="a newer sequence took over"):
        old.next_logprobs()


def test_a_sequence_past_the_context_is_refused_with_the_size(tiny) -> None:
    lm, drafter, _ = tiny
    seq = OnnxDrafter(drafter.folder, lm, context_tokens=16).sequence(list(range(5, 25)))
    with pytest.raises(ConfigError, match=r"needs 20 tokens but the ONNX drafter holds 16"):
        seq.next_logprobs()


# --- the conversion cache ----------------------------------------------------------------------


def test_a_converted_model_is_reused_without_running_the_builder_again(tiny, cache: Path, monkeypatch) -> None:
    lm, drafter, folder = tiny

    def no_builder(*args: object, **kwargs: object) -> None:
        raise AssertionError("the builder ran again")

    monkeypatch.setattr(onnx_cache.subprocess, "run", no_builder)
    again = OnnxDrafter.for_specialist(str(folder), lm, precision="fp32", cache_dir=cache, progress=False)
    assert again.folder == drafter.folder
    marker = json.loads((drafter.folder / onnx_cache.ONNX_MARKER).read_text())
    assert marker["precision"] == "fp32"
    assert marker["fingerprint"] == onnx_cache.folder_fingerprint(folder)
    assert drafter.folder.stat().st_mode & 0o077 == 0  # private: a merged personal adapter lives here too


def fake_builder(calls: list[Path]) -> Callable[..., None]:
    """A `_convert` that writes only what a finished conversion leaves (the marker), recording each run."""

    def convert(source: Path, target: Path, fingerprint: str, precision: str, version: str, progress: bool) -> None:
        calls.append(target)
        shutil.rmtree(target, ignore_errors=True)  # as the real one replaces a folder without its marker
        target.mkdir(parents=True)
        marker = onnx_cache._marker(fingerprint, precision, version) | {"source": str(source)}
        (target / onnx_cache.ONNX_MARKER).write_text(json.dumps(marker))

    return convert


def test_an_interrupted_conversion_is_rebuilt_and_a_new_adapter_version_replaces_the_old(
    tmp_path: Path, monkeypatch
) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(onnx_cache, "_convert", fake_builder(calls))
    source = lambda: tmp_path  # noqa: E731
    # A folder without its marker is never read: it is converted again.
    leftover = tmp_path / "onnx" / "m+merged-int4-aaaaaaaaaaaaaaaa"
    leftover.mkdir(parents=True)
    assert onnx_cache.converted_onnx(source, "a" * 64, "int4", tmp_path, stem="m+merged") == leftover
    assert calls == [leftover] and (leftover / onnx_cache.ONNX_MARKER).is_file()
    # Two adapter versions at one precision: only the newest stays; other precisions are untouched.
    first = onnx_cache.converted_onnx(source, "b" * 64, "int4", tmp_path, stem="m+merged", keep_older=False)
    int8 = onnx_cache.converted_onnx(source, "b" * 64, "int8", tmp_path, stem="m+merged", keep_older=False)
    second = onnx_cache.converted_onnx(source, "c" * 64, "int4", tmp_path, stem="m+merged", keep_older=False)
    assert not first.exists() and second.is_dir() and int8.is_dir()
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == sorted([int8.name, second.name])


def test_an_unknown_precision_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown ONNX precision 'fp8'; choose one of: int4, int8, fp32"):
        onnx_cache.converted_onnx(lambda: tmp_path, "a" * 64, "fp8", tmp_path, stem="m")


# --- the federation's adapters -----------------------------------------------------------------


@pytest.fixture(scope="module")
def federated(tmp_path_factory: pytest.TempPathFactory, tiny) -> Path:
    """A device state folder with a personal LoRA adapter (random, large enough to change drafts)."""
    from specsteer.federation.adapters import write_adapter
    from specsteer.federation.task import SpecialistWithAdapters, TaskConfig

    _, _, folder = tiny
    sw = SpecialistWithAdapters(load_causal_lm(folder, progress=False), TaskConfig(lora_rank=2, lora_alpha=4))
    rng = np.random.default_rng(5)
    arrays = {k: rng.normal(scale=0.5, size=v.shape).astype(np.float32) for k, v in sw.get_adapter(PERSONAL).items()}
    state = tmp_path_factory.mktemp("device")
    write_adapter(state / PERSONAL, arrays, sw.lora_config_dict(), kind="personal", base=sw.fingerprint)
    return state


def test_a_federated_specialist_drafts_its_merged_weights_on_onnx(tiny, federated: Path, cache: Path) -> None:
    lm, _, _ = tiny
    merged, _ = load_device_specialist(lm, federated)
    drafter = OnnxDrafter.for_loaded(merged, precision="fp32", cache_dir=cache, progress=False)
    specialist = Specialist(merged, drafter=drafter)  # the drafter runs the merged model, by name too
    agree = total = 0
    differs_from_base = False
    for prompt in PROMPTS:
        fast, ref = greedy(specialist.sequence(prompt), 10), greedy(TokenSequence(merged.model, prompt), 10)
        agree += sum(a == b for a, b in zip(fast, ref, strict=True))
        total += len(ref)
        differs_from_base |= ref != greedy(TokenSequence(lm.model, prompt), 10)
    assert agree == total  # fp32: every greedy draft token is the torch merged model's
    assert differs_from_base  # the adapter really changes the drafts, so dropping it would fail


# --- the CLI -----------------------------------------------------------------------------------


def test_the_cli_generates_torchs_text_when_drafting_on_onnx(tiny, tmp_path_factory, bpe_tok, capsys) -> None:
    _, _, folder = tiny
    generalist = save_tiny(tmp_path_factory.mktemp("g"), bpe_tok, seed=9, kv_heads=2)
    argv = ["generate", "--prompt", "the cat sat on the mat", "--max-new-tokens", "16", "--draft-len", "3", "--json"]
    argv += ["--specialist", str(folder), "--generalist", str(generalist)]
    argv += ["--cache-dir", str(tmp_path_factory.mktemp("cli-cache"))]
    assert sdk_main([*argv, "--drafter", "torch"]) == 0
    ref = json.loads(capsys.readouterr().out)
    assert sdk_main([*argv, "--drafter", "onnx", "--drafter-precision", "fp32"]) == 0
    fast = json.loads(capsys.readouterr().out)
    assert fast["token_ids"] == ref["token_ids"] and fast["text"] == ref["text"]
    assert fast["stats"]["rounds"] == ref["stats"]["rounds"] > 1


def test_the_cli_drafts_a_federated_specialist_on_onnx_like_torch(tiny, federated, tmp_path_factory, capsys) -> None:
    _, _, folder = tiny
    argv = ["generate", "--prompt", "the cat sat", "--method", "slm", "--max-new-tokens", "12", "--json"]
    argv += ["--specialist", str(folder), "--federation-state", str(federated)]
    argv += ["--cache-dir", str(tmp_path_factory.mktemp("cli-fed-cache"))]
    assert sdk_main([*argv, "--drafter", "torch"]) == 0
    ref = json.loads(capsys.readouterr().out)
    assert sdk_main([*argv, "--drafter", "onnx", "--drafter-precision", "fp32"]) == 0
    fast = json.loads(capsys.readouterr().out)
    assert fast["token_ids"] == ref["token_ids"]


def test_a_sequence_is_allocated_for_the_capacity_asked_and_refuses_past_it(tiny) -> None:
    _, drafter, _ = tiny
    seq = drafter.sequence([5, 6, 7], capacity=6)
    seq.push([8, 9, 10])
    seq.next_logprobs()  # 6 tokens: exactly the capacity
    seq.push([11])
    with pytest.raises(ConfigError, match=r"needs 7 tokens but the ONNX drafter holds 6 \(the capacity it was opened"):
        seq.next_logprobs()
    # A capacity past the context is capped at the context.
    assert drafter.sequence([5], capacity=10**9) is not None and drafter._capacity == drafter.context_tokens


def test_generate_opens_the_drafters_sequence_for_its_budget(tiny) -> None:
    lm, drafter, _ = tiny
    asked: list[int | None] = []
    opened = drafter.sequence

    class Recording:
        model_name = drafter.model_name

        def sequence(self, prefix_ids, capacity=None):
            asked.append(capacity)
            return opened(prefix_ids, capacity)

    from specsteer.core.session_types import SessionParams
    from specsteer.sdk.decoding import CAPACITY_MARGIN, DecodeOptions, generate

    specialist = Specialist(lm, drafter=Recording())
    prompt_ids = specialist.private_prompt_ids("the cat", with_context=False)
    out = generate(specialist, "the cat", SessionParams(method="slm"), DecodeOptions(max_new_tokens=9))
    assert asked == [len(prompt_ids) + 9 + CAPACITY_MARGIN] and out.stats.new_tokens > 0


def test_a_device_without_torch_models_writes_what_the_torch_drafter_writes(tiny, cache: Path) -> None:
    """The documented device path (docs/device-runtime.md): a `DeviceLM` and the ONNX drafter, no
    torch model; at fp32 its greedy text is the torch Specialist's."""
    from specsteer.core.device_lm import load_device_lm
    from specsteer.core.session_types import SessionParams
    from specsteer.sdk.decoding import DecodeOptions, generate

    lm, _, folder = tiny
    device_lm = load_device_lm(folder, progress=False)
    drafter = OnnxDrafter.for_specialist(str(folder), device_lm, precision="fp32", cache_dir=cache, progress=False)
    params, options = SessionParams(method="slm"), DecodeOptions(max_new_tokens=12)
    lean = generate(Specialist(device_lm, drafter=drafter), "the cat sat", params, options)
    reference = generate(Specialist(lm), "the cat sat", params, options)
    assert lean.token_ids == reference.token_ids and lean.text == reference.text and lean.token_ids


def test_a_federated_device_converts_once_then_drafts_without_torch(tiny, federated, tmp_path, monkeypatch) -> None:
    """`sdk generate --server ... --federation-state DIR` on the default drafter: the first run merges
    and converts; later runs find the conversion by the adapter files and never load torch."""
    from specsteer.core import adapters
    from specsteer.core.device_lm import DeviceLM
    from specsteer.sdk.specialists import load_specialist
    from tests.sdk.test_import_cost import heavy_modules_after

    lm, _, folder = tiny
    settings = {"federation_state": federated, "precision": "fp32", "cache_dir": tmp_path}
    first = load_specialist(str(folder), None, **settings)  # merges (torch) and converts
    monkeypatch.setattr(adapters, "load_device_specialist", lambda *a, **k: pytest.fail("merged again"))
    again = load_specialist(str(folder), None, **settings)
    assert isinstance(again.lm, DeviceLM) and again.lm.name == first.lm.name == f"{lm.name}+personal"
    merged, _ = load_device_specialist(lm, federated)
    for prompt in PROMPTS:
        assert greedy(again.sequence(prompt), 8) == greedy(TokenSequence(merged.model, prompt), 8)
    probe = "from pathlib import Path\nfrom specsteer.sdk.specialists import load_specialist\n"
    probe += f"load_specialist({str(folder)!r}, None, federation_state=Path({str(federated)!r}), precision='fp32', "
    probe += f"cache_dir=Path({str(tmp_path)!r}))"
    assert heavy_modules_after(probe) == []


def test_the_adapter_key_is_the_adapter_files_content(federated: Path, tmp_path: Path) -> None:
    from specsteer.core.adapter_files import state_fingerprint

    copy = tmp_path / "copy"
    shutil.copytree(federated, copy)
    assert state_fingerprint(copy) == state_fingerprint(federated)  # content, not where it lives
    weights = copy / PERSONAL / "adapter_model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # a change, whatever the last byte was
    assert state_fingerprint(copy) != state_fingerprint(federated)
    shutil.rmtree(copy / PERSONAL)
    assert state_fingerprint(copy) != state_fingerprint(federated)

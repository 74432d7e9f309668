"""Model bundles: built once with the converter, loaded by a device that never imports torch, and
refused, in one sentence, when any file differs from what was built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specsteer.core.bundle import BUNDLE_MANIFEST, ONNX_FOLDER, open_bundle
from specsteer.core.errors import ConfigError, ModelLoadError
from specsteer.core.models import load_causal_lm
from specsteer.sdk.bundles import build_bundle, default_bundle_path, load_bundle
from tests.tinymodels import save_tiny

pytest.importorskip("onnxruntime_genai", reason="the device runtime is not installed")

ROOT = Path(__file__).resolve().parents[2]
PROMPT = [5, 6, 7, 8, 9]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory, bpe_tok) -> Path:
    return save_tiny(tmp_path_factory.mktemp("models"), bpe_tok, seed=3, kv_heads=2)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory, model: Path) -> Path:
    cache = tmp_path_factory.mktemp("cache")
    out = tmp_path_factory.mktemp("bundles") / "tiny-fp32"
    build_bundle(str(model), out, precision="fp32", cache_dir=cache, progress=False)
    return out


def greedy(drafter, steps: int) -> list[int]:
    seq = drafter.sequence(PROMPT)
    out = []
    for _ in range(steps):
        token = int(seq.next_logprobs().argmax())
        out.append(token)
        seq.push([token])
    return out


def test_a_bundle_lists_every_file_with_its_hash_and_the_base_models_identity(bundle: Path, model: Path) -> None:
    manifest = json.loads((bundle / BUNDLE_MANIFEST).read_text())
    assert manifest["format"] == 1 and manifest["precision"] == "fp32" and manifest["adapter"] is None
    assert manifest["base"]["name"] == model.name and len(manifest["base"]["weights_sha256"]) == 64
    assert {"config.json", "tokenizer.json", f"{ONNX_FOLDER}/genai_config.json"} <= set(manifest["files"])
    on_disk = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()} - {BUNDLE_MANIFEST}
    assert on_disk == set(manifest["files"])
    assert not any(name.endswith(".safetensors") for name in on_disk), "a bundle ships no torch weights"


def test_the_bundle_drafts_what_the_torch_model_drafts(bundle: Path, model: Path) -> None:
    lm, drafter = load_bundle(bundle)
    torch_lm = load_causal_lm(model, progress=False)
    assert lm.vocab_size == torch_lm.vocab_size and lm.name == model.name
    import torch

    ids = list(PROMPT)
    want = []
    with torch.no_grad():
        for _ in range(6):
            token = int(torch_lm.model(torch.tensor([ids])).logits[0, -1].argmax())
            want.append(token)
            ids.append(token)
    assert greedy(drafter, 6) == want


def test_a_bundles_graph_is_stamped_with_the_builders_wheel_not_the_checkout_it_was_built_in(bundle: Path) -> None:
    # The builder asks git beside its own files; in a virtual environment inside a checkout that is
    # the checkout's commit, and the same model built at two commits then hashes differently.
    import onnx
    import onnxruntime_genai

    graph = onnx.load(bundle / ONNX_FOLDER / "model.onnx", load_external_data=False)
    assert graph.producer_version == f"{onnxruntime_genai.__version__}+{onnxruntime_genai.__commit__[:7]}"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("flip", "is not the file the bundle was built with"),
        ("extra", "which its manifest does not list"),
        ("missing", "is missing"),
        ("link", "which is not a regular file"),
        ("format", "this SDK reads format 1"),
    ],
)
def test_a_bundle_that_differs_from_its_manifest_is_refused(
    bundle: Path, tmp_path: Path, damage: str, message: str
) -> None:
    import shutil

    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    tokenizer = copy / "tokenizer.json"
    if damage == "flip":
        data = bytearray(tokenizer.read_bytes())
        data[-2] ^= 0x01
        tokenizer.write_bytes(bytes(data))
    elif damage == "extra":
        (copy / ONNX_FOLDER / "model2.onnx").write_bytes(b"\0")
    elif damage == "missing":
        tokenizer.unlink()
    elif damage == "link":
        (copy / "notes.txt").symlink_to(tokenizer)
    else:
        manifest = json.loads((copy / BUNDLE_MANIFEST).read_text())
        (copy / BUNDLE_MANIFEST).write_text(json.dumps({**manifest, "format": 2}))
    with pytest.raises(ModelLoadError, match=message):
        load_bundle(copy)


def test_a_bundle_is_written_into_a_new_folder_and_a_personal_adapter_never_goes_in(
    bundle: Path, model: Path, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="already exists"):
        build_bundle(str(model), bundle, precision="fp32")
    with pytest.raises(ConfigError, match="only an embedded model has a default place"):
        build_bundle(str(model))
    state = tmp_path / "state"
    (state / "personal").mkdir(parents=True)
    with pytest.raises(ConfigError, match="personal adapter"):
        build_bundle(str(model), tmp_path / "b", precision="fp32", federation_state=state)


def test_the_default_bundle_lives_in_the_cache_by_name_and_precision(tmp_path: Path) -> None:
    assert default_bundle_path("qwen2.5-coder-0.5b-instruct", "int4", tmp_path) == (
        tmp_path / "bundles" / "qwen2.5-coder-0.5b-instruct-int4"
    )


def test_a_device_loads_and_drafts_a_bundle_without_importing_torch(bundle: Path) -> None:
    # A meta-path finder that refuses torch, transformers and peft, as a device install lacks them.
    script = textwrap.dedent(
        f"""
        import sys
        class NoConverter:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "transformers", "peft", "safetensors"):
                    raise ImportError(f"{{name}} is not installed on a device")
        sys.meta_path.insert(0, NoConverter())
        from specsteer.sdk.bundles import load_bundle
        lm, drafter = load_bundle({str(bundle)!r})
        seq = drafter.sequence({PROMPT!r})
        print(int(seq.next_logprobs().argmax()), lm.vocab_size)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120, env=os.environ.copy()
    )
    assert done.returncode == 0, done.stderr
    token, vocab = map(int, done.stdout.split())
    assert 0 <= token < vocab


def test_open_bundle_reports_a_folder_without_a_manifest(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="is no model bundle"):
        open_bundle(tmp_path)


def test_the_device_drafts_a_bundle_given_by_path_and_refuses_other_drafter_settings(bundle: Path) -> None:
    from specsteer.sdk.onnx_drafter import OnnxDrafter
    from specsteer.sdk.specialists import load_specialist

    specialist = load_specialist(bundle)
    assert isinstance(specialist.drafter, OnnxDrafter) and specialist.drafter.folder == bundle / ONNX_FOLDER
    assert not specialist.lm.has_weights
    with pytest.raises(ConfigError, match="is a model bundle"):
        load_specialist(bundle, drafter="torch")
    with pytest.raises(ConfigError, match="is a model bundle"):
        load_specialist(bundle, federation_state=bundle)
    with pytest.raises(ConfigError, match="is fp32, not int4"):
        load_specialist(bundle, precision="int4")


def test_an_embedded_name_uses_its_bundle_in_the_cache_and_converts_nothing(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from specsteer.core import onnx_cache
    from specsteer.sdk.specialists import load_specialist

    cached = default_bundle_path("qwen2.5-coder-0.5b-instruct", "fp32", tmp_path)
    cached.parent.mkdir(parents=True)
    shutil.copytree(bundle, cached)

    def no_conversion(*args: object, **kwargs: object) -> None:
        raise AssertionError("the device converted a model it has a bundle of")

    monkeypatch.setattr(onnx_cache, "_convert", no_conversion)
    specialist = load_specialist("qwen2.5-coder-0.5b-instruct", precision="fp32", cache_dir=tmp_path)
    assert specialist.drafter.folder == cached / ONNX_FOLDER

"""The TypeScript device's bundle fixture (sdk-js/test/fixtures/tiny-bundle) is a bundle the Python
device opens: its tests refuse tampered copies of exactly the format core/bundle.py writes."""

from __future__ import annotations

from pathlib import Path

from specsteer.core.bundle import BUNDLE_FORMAT, open_bundle

FIXTURE = Path(__file__).resolve().parent.parent / "sdk-js" / "test" / "fixtures" / "tiny-bundle"


def test_sdk_js_bundle_fixture_opens_in_the_python_device() -> None:
    bundle = open_bundle(FIXTURE)
    assert bundle.name == "tiny-fixture"
    assert BUNDLE_FORMAT == 1
    assert set(bundle.files) == {
        "config.json",
        "onnx/genai_config.json",
        "onnx/model.onnx",
        "tokenizer.json",
        "tokenizer_config.json",
    }

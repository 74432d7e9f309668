"""The TypeScript device's drafter is held to the Python ONNX drafter: the greedy drafts its slow test
(sdk-js/test/drafter.slow.ts) expects are what the Python device drafts on the default bundle."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specsteer.core.model_registry import DEFAULT_SPECIALIST
from specsteer.sdk.bundles import default_bundle_path, load_bundle

FIXTURE = Path(__file__).resolve().parent.parent / "sdk-js" / "test" / "fixtures" / "greedy-drafts.json"


@pytest.mark.slow
def test_the_typescript_drafters_expected_drafts_are_the_python_drafters() -> None:
    doc = json.loads(FIXTURE.read_text(encoding="utf-8"))
    folder = default_bundle_path(DEFAULT_SPECIALIST, doc["precision"])
    manifest = json.loads((folder / "specsteer-bundle.json").read_text(encoding="utf-8"))
    assert {k: manifest["files"][k] for k in doc["files"]} == doc["files"], "the default bundle is another model"
    _, drafter = load_bundle(folder, threads=2)
    for case in doc["drafts"]:
        seq = drafter.sequence(case["prefix_ids"])
        drafted: list[int] = []
        for _ in case["draft_ids"]:
            token = int(np.argmax(seq.next_logprobs()))
            drafted.append(token)
            seq.push([token])
        assert drafted == case["draft_ids"], f"{case['prompt']}: the Python drafter now drafts {drafted}"

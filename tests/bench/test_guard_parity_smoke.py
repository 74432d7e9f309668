"""bench.guard_parity on a small fixture: the guard benchmark's cases of every set run through the
Python device and the TypeScript device (node, the built package), both scored by the same
functions; the two devices agree case by case, and the page and JSON say so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench import guard_parity

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "users.jsonl"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("node") is None or not (guard_parity.ROOT / "sdk-js" / "dist" / "src").is_dir(),
        reason="the TypeScript package is not built (make test-js builds sdk-js/dist)",
    ),
]


def test_guard_parity_smoke(tmp_path: Path) -> None:
    # Six users: the benchmark's guards take the first four histories, its ordinary text the rest.
    lines = [line for line in FIXTURE.read_text(encoding="utf-8").splitlines() if line.strip()]
    data = tmp_path / "users.jsonl"
    data.write_text("\n".join(lines + lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    code = guard_parity.main(
        ["--data", str(data), "--per-category", "1", "--negatives", "6", "--developer-per-kind", "1",
         "--round3-per-category", "1", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    result = json.loads((out / "guard_parity.json").read_text(encoding="utf-8"))
    assert set(result["python"]["recall"]) == {"original", "adversarial", "identifiers", "round3"}
    assert result["agree"] == result["cases"] > 50, result["disagreements"]
    assert result["python"] == result["typescript"]
    caught = [r["caught"] for cats in result["python"]["recall"].values() for r in cats.values()]
    assert sum(caught) > 0.9 * len(caught)  # the guard catches nearly every span: the cases carry some
    assert "cases sent exactly the same tokens up in the clear" in (out / "guard_parity.md").read_text()

"""The real embedded models, offline, through the installed `sdk` command (slow tier)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

COMMON_WORDS = {"the", "a", "to", "of", "and", "is", "in", "this", "that", "it", "for", "be", "we", "file"}


def test_sdk_generate_json_on_embedded_defaults_is_coherent_offline() -> None:
    # Execute: the console script, offline, on the default SmolLM2 Specialist + Qwen2.5-Coder-1.5B Generalist.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    sdk = Path(sys.executable).with_name("sdk")
    profile = Path(__file__).parent / "fixtures" / "users.jsonl"
    one_user = profile.read_text(encoding="utf-8").splitlines()[0]
    user_file = Path(os.environ.get("PYTEST_TMP", "/tmp")) / "specsteer-slow-user.json"
    user_file.write_text(one_user, encoding="utf-8")
    subject = json.loads(one_user)["queries"][0]["subject"]
    prompt = (
        "Write the body of the git commit message whose subject line is below. Explain what the change does "
        f"and why, in a few sentences of plain prose.\n\nSubject: {subject}\n\nBody:"
    )
    proc = subprocess.run(
        [str(sdk), "generate", "--prompt", prompt, "--profile", str(user_file), "--max-new-tokens", "40", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=1500,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    stats = out["stats"]
    # Assert: plausible stats for a cross-vocabulary run.
    assert stats["new_tokens"] == len(out["token_ids"]) and 0 < stats["new_tokens"] <= 40
    assert 0 <= stats["accepted"] <= stats["drafted"] and stats["rounds"] >= 1
    assert stats["uplink_bytes"] > 0 and stats["downlink_bytes"] > 0
    assert 0 <= stats["draft_boundaries_shared"] <= stats["drafted"]
    # Assert: coherent English-like text, not token soup.
    words = re.findall(r"[A-Za-z']+", out["text"].lower())
    assert len(words) >= 8, out["text"]
    assert sum(w in COMMON_WORDS for w in words) >= 2, out["text"]
    assert len(set(words)) >= 5, out["text"]

"""The real embedded models, offline, through the installed `sdk` command (slow tier)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from specsteer.core.prompts import task_prompt

pytestmark = pytest.mark.slow

COMMON_WORDS = {"the", "a", "to", "of", "and", "is", "in", "this", "that", "it", "for", "be", "we", "file"}


def test_sdk_generate_json_on_embedded_defaults_is_coherent_offline() -> None:
    # Execute: the console script, offline, on the default Qwen2.5-Coder 0.5B Specialist + 1.5B Generalist.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    sdk = Path(sys.executable).with_name("sdk")
    profile = Path(__file__).parent / "fixtures" / "users.jsonl"
    one_user = profile.read_text(encoding="utf-8").splitlines()[0]
    user_file = Path(os.environ.get("PYTEST_TMP", "/tmp")) / "specsteer-slow-user.json"
    user_file.write_text(one_user, encoding="utf-8")
    subject = json.loads(one_user)["queries"][0]["subject"]
    prompt = task_prompt(subject)
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
    # Assert: plausible stats for a same-vocabulary run (no re-tokenized boundaries to count).
    assert stats["new_tokens"] == len(out["token_ids"]) and 0 < stats["new_tokens"] <= 40
    assert 0 <= stats["accepted"] <= stats["drafted"] and stats["rounds"] >= 1
    assert stats["uplink_bytes"] > 0 and stats["downlink_bytes"] > 0
    assert "draft_boundaries_shared" not in stats
    # Assert: coherent English-like text, not token soup.
    words = re.findall(r"[A-Za-z']+", out["text"].lower())
    assert len(words) >= 8, out["text"]
    assert sum(w in COMMON_WORDS for w in words) >= 2, out["text"]
    assert len(set(words)) >= 5, out["text"]

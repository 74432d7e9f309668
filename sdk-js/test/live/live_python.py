"""The Python side of sdk-js/test/live.slow.ts: a throwaway PKI and a tiny random verifier pair
over the default Specialist's tokenizer (`prepare`), and the Python device's greedy generation
against a running verifier over mutual TLS (`device`), each printing one JSON object.

    python live_python.py prepare OUT PROMPT     # OUT/pki, OUT/generalist, OUT/specialist; the prompt's IDs
    python live_python.py device OUT PORT PROMPT N
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from specsteer.core.model_registry import DEFAULT_SPECIALIST
from specsteer.sdk.bundles import default_bundle_path, load_bundle


def prepare(out: Path, prompt: str) -> dict[str, object]:
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from specsteer.core.device_lm import load_device_lm
    from specsteer.server import pki as pki_mod
    from tests.tinymodels import save_tiny

    folder = default_bundle_path(DEFAULT_SPECIALIST)
    p = pki_mod.init_pki(out / "pki")
    pki_mod.issue_device(p.directory, "alice")
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    # Small enough to write and load in a second or two: the table is most of it (151k rows).
    save_tiny(out, tokenizer, seed=1, name="generalist", hidden=16, layers=1, heads=2)
    save_tiny(out, tokenizer, seed=2, name="specialist", hidden=16, layers=1, heads=2)
    lm = load_device_lm(folder, progress=False)  # the tokenizer facts only: the drafter is not loaded here
    from specsteer.core.prompts import render_prompt
    from specsteer.sdk.decoding import vocabulary_width

    return {
        "bundle": str(folder),
        "pki": str(p.directory),
        "pins": str(p.pins),
        "cert": str(p.device_cert("alice")),
        "key": str(p.device_key("alice")),
        "private_ids": render_prompt(lm, prompt, ()),
        "public_ids": list(lm.tokenizer.encode(prompt, add_special_tokens=False)),
        "eos_ids": sorted(lm.eos_ids),
        "vocab_size": lm.vocab_size,
        "width": vocabulary_width(lm),
    }


def device(out: Path, port: int, prompt: str, n: int) -> dict[str, object]:
    from specsteer.core.session_types import SessionParams
    from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
    from specsteer.sdk.remote import RemoteVerifier, TlsIdentity

    pki = out / "pki"
    lm, drafter = load_bundle(default_bundle_path(DEFAULT_SPECIALIST), threads=2)
    identity = TlsIdentity.from_files(pki / "pins.txt", pki / "devices" / "alice.pem", pki / "devices" / "alice.key")
    with RemoteVerifier(f"127.0.0.1:{port}", identity, vocab_size=lm.vocab_size) as verifier:
        g = generate(
            Specialist(lm, drafter=drafter), prompt, SessionParams(), DecodeOptions(max_new_tokens=n), verifier
        )
    s = g.stats
    return {
        "token_ids": g.token_ids,
        "text": g.text,
        "stats": {"rounds": s.rounds, "drafted": s.drafted, "accepted": s.accepted, "fallback": s.fallback},
    }


if __name__ == "__main__":
    what, out = sys.argv[1], Path(sys.argv[2])
    if what == "prepare":
        result = prepare(out, sys.argv[3])
    else:
        result = device(out, int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    print(json.dumps(result))

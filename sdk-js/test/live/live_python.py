"""The Python side of sdk-js/test/live.slow.ts: a throwaway PKI and a tiny random verifier pair
over the default Specialist's tokenizer (`prepare`), and the Python device's greedy generation
against a running verifier over mutual TLS (`device`), each printing one JSON object.

    python live_python.py prepare OUT PROMPTS_JSON   # OUT/pki, generalist, specialist, keys; each prompt's IDs
    python live_python.py device OUT PORT PROMPTS_JSON N [GUARD]   # GUARD: an egress guard setting (placeholder)

`prepare` also makes the TypeScript device's audit-log key (`audit keygen`'s format) and the
verifier's witness key (`server witness-key`'s), and a second device certificate, `bob`, for the
Python device: the verifier's transcript then holds only the TypeScript device's (`alice`) streams
under alice, which `audit verify --server-transcript` compares with its log.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from specsteer.core.model_registry import DEFAULT_SPECIALIST
from specsteer.sdk.bundles import default_bundle_path, load_bundle


def prepare(out: Path, prompts: list[str]) -> dict[str, object]:
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from specsteer.core.device_lm import load_device_lm
    from specsteer.server import pki as pki_mod
    from tests.tinymodels import save_tiny

    folder = default_bundle_path(DEFAULT_SPECIALIST)
    from specsteer.audit.cosignature import write_witness_key_pair
    from specsteer.audit.note import write_key_pair

    p = pki_mod.init_pki(out / "pki")
    pki_mod.issue_device(p.directory, "alice")
    pki_mod.issue_device(p.directory, "bob")
    (out / "keys").mkdir(mode=0o700)
    audit_key, audit_pub = write_key_pair("device.example/alice", out / "keys")
    witness_key, witness_pub = write_witness_key_pair("verifier.example/witness", out / "keys")
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
        "audit_key": str(audit_key),
        "audit_pub": str(audit_pub),
        "witness_key": str(witness_key),
        "witness_pub": str(witness_pub),
        "private_ids": [render_prompt(lm, prompt, ()) for prompt in prompts],
        "public_ids": [list(lm.tokenizer.encode(prompt, add_special_tokens=False)) for prompt in prompts],
        "eos_ids": sorted(lm.eos_ids),
        "vocab_size": lm.vocab_size,
        "width": vocabulary_width(lm),
    }


def device(out: Path, port: int, prompts: list[str], n: int, guard_setting: str = "off") -> list[dict[str, object]]:
    from specsteer.core.session_types import SessionParams
    from specsteer.sdk.decoding import DecodeOptions, Specialist, generate
    from specsteer.sdk.remote import RemoteVerifier, TlsIdentity
    from specsteer.sdk.uplink_guard import guard_setting as guard_of_setting

    pki = out / "pki"
    lm, drafter = load_bundle(default_bundle_path(DEFAULT_SPECIALIST), threads=2)
    identity = TlsIdentity.from_files(pki / "pins.txt", pki / "devices" / "bob.pem", pki / "devices" / "bob.key")
    results: list[dict[str, object]] = []
    with RemoteVerifier(f"127.0.0.1:{port}", identity, vocab_size=lm.vocab_size) as verifier:
        for prompt in prompts:
            options = DecodeOptions(max_new_tokens=n)
            # The device's default guard (generic labels, no profile), built anew for each generation.
            guard = guard_of_setting(None, lm.tokenizer, guard_setting)
            g = generate(Specialist(lm, drafter=drafter), prompt, SessionParams(), options, verifier, guard=guard)
            s = g.stats
            counts = {k[len("guard_") :]: v for k, v in s.extra.items() if k.startswith("guard_")}
            decisions = {k: v for k, v in counts.items() if k not in ("checks", "lookahead_tokens")}
            stats = {"rounds": s.rounds, "drafted": s.drafted, "accepted": s.accepted, "fallback": s.fallback,
                     "guard": decisions}  # fmt: skip
            results.append({"token_ids": g.token_ids, "text": g.text, "stats": stats})
    return results


if __name__ == "__main__":
    what, out = sys.argv[1], Path(sys.argv[2])
    result: dict[str, object] | list[dict[str, object]]
    if what == "prepare":
        result = prepare(out, json.loads(sys.argv[3]))
    else:
        result = device(out, int(sys.argv[3]), json.loads(sys.argv[4]), int(sys.argv[5]), *sys.argv[6:7])
    print(json.dumps(result))

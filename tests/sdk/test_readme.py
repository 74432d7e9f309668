"""The README's Python snippets run as written: the in-process quick start, and the client against a
real verifier over mutual TLS on loopback.

Only the models are swapped: `load_causal_lm` is replaced for these tests by tiny random models
(the embedded models are too slow for the fast tier); the names the snippets ask for must still be
embedded models. The PKI, the TOML config, the profile file, the gRPC channel, the in-process
verifier (found by its entry point) and the remote verifier are all real.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import specsteer.sdk as sdk
from specsteer.core.model_registry import EMBEDDED_MODELS
from specsteer.core.models import CausalLM
from specsteer.server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import make_pki, serve

ROOT = Path(__file__).resolve().parents[2]


def readme_snippet(constructor: str = "SpecSteerClient.connect") -> str:
    """The README's ```python block that builds its client with `constructor`."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if constructor in b]
    assert blocks, f"the README has no ```python block using {constructor}"
    return blocks[0]


def test_the_readme_starts_with_what_runs_after_the_install_alone() -> None:
    # The first commands need no PKI, no config file and no running verifier; the first Python
    # snippet is the audited device an app embeds.
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first_commands = "".join(re.findall(r"```sh\n(.*?)```", text[: text.index("## The Python API")], flags=re.S))
    assert "make install" in first_commands and "sdk generate" in first_commands
    assert not any(setup in first_commands for setup in ("--server", "--pins", "device.toml", "pki"))
    first_python = re.findall(r"```python\n(.*?)```", text, flags=re.S)[0]
    assert "SpecSteerClient.from_config" in first_python


def test_the_in_process_snippet_generates(char_tok, tmp_path, monkeypatch, capsys) -> None:
    # Prepare: tiny models stand in for the embedded ones; the profile path is the repository's.
    lms = {"s": tiny_lm(char_tok, seed=11, name="s"), "g": tiny_lm(char_tok, seed=22, name="g")}
    loaded: list[str] = []

    def load(spec: str, **_: object) -> CausalLM:
        loaded.append(spec)
        return lms["s" if len(loaded) == 1 else "g"]

    monkeypatch.setattr(sdk, "load_causal_lm", load)
    monkeypatch.chdir(tmp_path)  # the snippet finds the demo profile from any working directory
    # Execute: the snippet, unchanged.
    exec(compile(readme_snippet("SpecSteerClient.in_process"), "README.md", "exec"), {"__name__": "readme"})
    # Assert: both names are embedded models, and text came out.
    assert len(loaded) == 2 and all(name in EMBEDDED_MODELS for name in loaded)
    assert capsys.readouterr().out.strip()


def test_the_readme_snippet_generates_over_tls(char_tok, tmp_path, monkeypatch, capsys) -> None:
    # Prepare: a verifier on loopback, the device's config file and its profile where the snippet looks.
    s_lm, g_lm = tiny_lm(char_tok, seed=11, name="s"), tiny_lm(char_tok, seed=22, name="g")
    pki = make_pki(tmp_path)
    loaded: list[str] = []

    def load(spec: str, **_: object) -> CausalLM:
        loaded.append(spec)
        return s_lm

    monkeypatch.setattr(sdk, "load_causal_lm", load)
    monkeypatch.chdir(tmp_path)
    shutil.copy(ROOT / "sdk" / "data" / "demo_profile.json", tmp_path / "profile.json")
    with serve(CloudVerifier(g_lm, s_lm, seed=0, max_top_k=64), pki) as (server, port):
        (tmp_path / "device.toml").write_text(
            "[verifier]\n"
            f'server = "127.0.0.1:{port}"\n'
            f'pins = "{pki.pins}"\n'
            f'cert = "{pki.device_cert("alice")}"\n'
            f'key = "{pki.device_key("alice")}"\n',
            encoding="utf-8",
        )
        # Execute: the snippet, unchanged.
        exec(compile(readme_snippet(), "README.md", "exec"), {"__name__": "readme"})
        rounds = server.metrics.value("specsteer_rounds_total")
    # Assert: it asked for an embedded model, printed text, and the text came through the verifier.
    assert loaded and loaded[0] in EMBEDDED_MODELS
    assert capsys.readouterr().out.strip()
    assert rounds > 0


@pytest.mark.parametrize(
    "constructor", ["SpecSteerClient.from_config", "SpecSteerClient.in_process", "SpecSteerClient.connect"]
)
def test_the_snippets_import_only_the_public_api(constructor: str) -> None:
    imported = re.findall(r"^from specsteer\.sdk import (.+)$", readme_snippet(constructor), flags=re.M)
    assert imported
    for name in (n.strip() for line in imported for n in line.split(",")):
        assert name in sdk.__all__


def test_the_first_snippet_runs_audited_from_any_directory_and_its_log_verifies(
    bpe_tok, tmp_path: Path, monkeypatch, capsys
) -> None:
    """The README's first Python snippet, unchanged, in an app folder of its own: it drafts from a
    model bundle, talks to a real verifier over mutual TLS, writes the audit log its config names,
    and `audit verify` (the auditor's command, with the device's public key) says VERIFIED."""
    from specsteer.audit.cli import main as audit_main
    from specsteer.audit.note import write_key_pair
    from specsteer.core.models import load_causal_lm
    from specsteer.sdk.bundles import build_bundle
    from tests.tinymodels import perturbed_copy, save_tiny

    pytest.importorskip("onnxruntime_genai")
    # Prepare: a model bundle (built with the converter, as a build machine would), the verifier's
    # models of the same vocabulary, a PKI, a device key, and an app folder elsewhere.
    model = save_tiny(tmp_path / "models", bpe_tok, seed=5, kv_heads=2)
    bundle = tmp_path / "app" / "models" / "tiny-fp32"
    build_bundle(str(model), bundle, precision="fp32", cache_dir=tmp_path / "cache", progress=False)
    s_lm = load_causal_lm(model, progress=False)
    g_lm = perturbed_copy(s_lm, seed=7)
    pki = make_pki(tmp_path)
    _, public_key = write_key_pair("alice", tmp_path / "app" / "keys")
    app = tmp_path / "app"
    shutil.copy(ROOT / "sdk" / "data" / "demo_profile.json", app / "profile.json")
    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    with serve(CloudVerifier(g_lm, s_lm, seed=0, max_top_k=64), pki) as (server, port):
        (app / "device.toml").write_text(
            "[verifier]\n"
            f'server = "127.0.0.1:{port}"\n'
            f'pins = "{pki.pins}"\n'
            f'cert = "{pki.device_cert("alice")}"\n'
            f'key = "{pki.device_key("alice")}"\n'
            "[device]\n"
            'bundle = "models/tiny-fp32"\n'
            "[audit]\n"
            'log = "audit-log"\n'
            'key = "keys/alice.key"\n',
            encoding="utf-8",
        )
        # Execute: the snippet, unchanged, with its two file names pointing into the app folder
        # from a working directory that is not the app's.
        monkeypatch.chdir(elsewhere)
        snippet = readme_snippet("SpecSteerClient.from_config")
        snippet = snippet.replace('"device.toml"', repr(str(app / "device.toml")))
        snippet = snippet.replace('"profile.json"', repr(str(app / "profile.json")))
        exec(compile(snippet, "README.md", "exec"), {"__name__": "readme"})
        rounds = server.metrics.value("specsteer_rounds_total")
    # Assert: text came through the verifier, and the log it wrote verifies under the device's key.
    assert capsys.readouterr().out.strip() and rounds > 0
    assert (app / "audit-log").is_dir() and not (elsewhere / "audit-log").exists()
    code = audit_main(["verify", str(app / "audit-log"), "--key", str(public_key)])
    out = capsys.readouterr().out
    assert code == 0 and "VERIFIED" in out, out

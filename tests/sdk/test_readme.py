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
    # The first screen needs no PKI, no config file and no running verifier.
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first_screen = text[: text.index("## The Python API")]
    code = "".join(re.findall(r"```\w*\n(.*?)```", first_screen, flags=re.S))
    assert "make install" in code and "sdk generate" in code
    assert not any(setup in code for setup in ("--server", "--pins", "device.toml", "pki"))
    assert text.index("SpecSteerClient.in_process") < text.index("SpecSteerClient.connect")


def test_the_in_process_snippet_generates(char_tok, monkeypatch, capsys) -> None:
    # Prepare: tiny models stand in for the embedded ones; the profile path is the repository's.
    lms = {"s": tiny_lm(char_tok, seed=11, name="s"), "g": tiny_lm(char_tok, seed=22, name="g")}
    loaded: list[str] = []

    def load(spec: str, **_: object) -> CausalLM:
        loaded.append(spec)
        return lms["s" if len(loaded) == 1 else "g"]

    monkeypatch.setattr(sdk, "load_causal_lm", load)
    monkeypatch.chdir(ROOT)
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


@pytest.mark.parametrize("constructor", ["SpecSteerClient.in_process", "SpecSteerClient.connect"])
def test_the_snippets_import_only_the_public_api(constructor: str) -> None:
    imported = re.findall(r"^from sdk import (.+)$", readme_snippet(constructor), flags=re.M)
    assert imported
    for name in (n.strip() for line in imported for n in line.split(",")):
        assert name in sdk.__all__

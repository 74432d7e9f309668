"""The README's Python API snippet runs as written, against a real verifier over mutual TLS on loopback.

Only the model is swapped: `load_causal_lm` is replaced for this test by a tiny random model (the
embedded Specialist is too slow for the fast tier); the name the snippet asks for must still be
an embedded model. The PKI, the TOML config, the profile file, the gRPC channel and the verifier
are all real.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import sdk
from core.models import EMBEDDED_MODELS, CausalLM
from server.session import CloudVerifier
from tests.tinymodels import tiny_lm
from tests.verifier_harness import make_pki, serve

ROOT = Path(__file__).resolve().parents[2]


def readme_snippet() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "the README has no ```python block"
    return blocks[0]


def test_the_readme_opens_with_the_python_api_then_the_cli() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.index("```python") < text.index("## The CLI")
    assert "SpecSteerClient" in readme_snippet()


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


@pytest.mark.parametrize("name", ["ClientConfig", "Profile", "SpecSteerClient", "load_causal_lm"])
def test_the_snippet_imports_only_the_public_api(name: str) -> None:
    assert name in readme_snippet()
    assert name in sdk.__all__

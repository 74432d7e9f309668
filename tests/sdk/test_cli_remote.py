"""`sdk generate --server ...` against a live verifier over mutual TLS, and its one-sentence errors."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from specsteer.sdk.cli import main
from specsteer.server.session import CloudVerifier
from tests.sdk.test_import_cost import HEAVY
from tests.tinymodels import save_tiny, tiny_lm
from tests.verifier_harness import free_port, make_pki, serve


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory, char_tok) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("models")
    return save_tiny(root, char_tok, seed=1, name="s"), save_tiny(root, char_tok, seed=2, name="g")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("cli"))


@pytest.fixture(scope="module")
def live(char_tok, pki):
    # The same weights as the saved folders (same seeds): the CLI's device loads one of them.
    cloud = CloudVerifier(tiny_lm(char_tok, seed=2), tiny_lm(char_tok, seed=1), seed=0, max_top_k=64)
    with serve(cloud, pki) as s:
        yield s


def base(model_dirs) -> list[str]:
    s, g = model_dirs
    return [
        "generate",
        "--prompt",
        "Hello there",
        "--max-new-tokens",
        "10",
        "--specialist",
        str(s),
        "--generalist",
        str(g),
    ]


def tls(pki, port: int) -> list[str]:
    cert, key = str(pki.device_cert("alice")), str(pki.device_key("alice"))
    return ["--server", f"127.0.0.1:{port}", "--pins", str(pki.pins), "--cert", cert, "--key", key]


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_generate_over_tls_equals_in_process(capsys, model_dirs, pki, live) -> None:
    # Execute
    assert main([*base(model_dirs), "--json"]) == 0
    local = _json(capsys)
    assert main([*base(model_dirs), "--json", *tls(pki, live[1])]) == 0
    net = _json(capsys)
    # Assert
    assert net["token_ids"] == local["token_ids"] and net["stats"]["fallback"] is None
    assert net["stats"]["uplink_bytes"] == local["stats"]["uplink_bytes"] > 0


def test_generate_from_a_client_config_file(capsys, model_dirs, pki, live, tmp_path) -> None:
    # Prepare: relative paths in the file resolve against the file's folder, not the working directory.
    folder = tmp_path / "device"
    folder.mkdir()

    def rel(path: Path) -> str:
        return os.path.relpath(path, folder)

    config = folder / "device.toml"
    config.write_text(
        "[verifier]\n"
        f'server = "127.0.0.1:{live[1]}"\n'
        f'pins = "{rel(pki.pins)}"\n'
        f'cert = "{rel(pki.device_cert("alice"))}"\n'
        f'key = "{pki.device_key("alice")}"\n'
        "round_timeout = 15\n"
    )
    # Execute / Assert
    assert main([*base(model_dirs), "--json", "--client-config", str(config)]) == 0
    assert _json(capsys)["stats"]["fallback"] is None
    config.write_text(config.read_text() + "colour = 'blue'\n")
    assert main([*base(model_dirs), "--client-config", str(config)]) == 1
    assert "unknown key 'colour'" in capsys.readouterr().err


def test_unreachable_verifier_falls_back_unless_told_not_to(capsys, model_dirs, pki) -> None:
    port = free_port()
    args = [*base(model_dirs), "--json", *tls(pki, port), "--connect-timeout", "3"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["stats"]["fallback"] == "verifier-unreachable"
    assert "finished the text on this device" in captured.err
    assert main([*args, "--no-fallback"]) == 1
    err = capsys.readouterr().err
    assert "unreachable" in err and "Traceback" not in err


def test_impostor_is_a_one_sentence_error(capsys, model_dirs, pki) -> None:
    plaintext = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = plaintext.add_insecure_port("127.0.0.1:0")
    plaintext.start()
    try:
        code = main([*base(model_dirs), *tls(pki, port)])
    finally:
        plaintext.stop(0)
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip().splitlines()[-1].startswith("sdk: error: refused the verifier at 127.0.0.1:")
    assert "does not speak TLS; nothing was sent" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--server", "127.0.0.1:1"], "--server needs --pins, --cert, --key"),
        (["--pins", "pins.txt"], "--pins is for a remote verifier"),
        (["--server", "nohost", "--pins", "{pins}", "--cert", "{cert}", "--key", "{key}"], "HOST:PORT"),
        (["--server", "127.0.0.1:1", "--pins", "/nonexistent", "--cert", "{cert}", "--key", "{key}"], "does not exist"),
        (["--server", "127.0.0.1:1", "--pins", "{cert}", "--cert", "{cert}", "--key", "{key}"], "0 pin(s); at least 2"),
        (["--server", "127.0.0.1:1", "--pins", "{pins}", "--cert", "{key}", "--key", "{key}"], "no PEM certificate"),
        (["--top-k", "100", "--server", "127.0.0.1:1", "--pins", "{pins}", "--cert", "{cert}", "--key", "{key}"], "64"),
        (["--client-config", "/nonexistent.toml"], "does not exist"),
    ],
)
def test_bad_remote_options_are_one_sentence_and_exit_1(capsys, model_dirs, pki, extra, message) -> None:
    paths = {"pins": pki.pins, "cert": pki.device_cert("alice"), "key": pki.device_key("alice")}
    code = main([*base(model_dirs), *(a.format(**paths) for a in extra)])
    err = capsys.readouterr().err
    assert code == 1, err
    assert message in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("sdk: error: ")
    assert "loading Specialist" not in err  # refused before any slow work


def test_the_default_device_process_never_imports_torch(model_dirs, pki, live, tmp_path) -> None:
    """`sdk generate --server ...` on the default drafter (onnxruntime-genai) runs in a process
    without torch or transformers, and writes what the torch drafter writes in this process."""
    argv = [*base(model_dirs), "--json", "--cache-dir", str(tmp_path), *tls(pki, live[1])]
    argv += ["--drafter-precision", "fp32"]  # fp32: the same greedy text as torch's
    code = (
        "import contextlib, io, json\n"
        "from specsteer.sdk.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    assert main({argv!r}) == 0\n"
        "print(out.getvalue().strip())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result, heavy = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert heavy == []
    assert result["stats"]["fallback"] is None and result["stats"]["device_step_ms"] > 0
    stats = result["stats"]  # all the Specialist's forwards: its prefill and at least one step more
    assert stats["device_forwards_ms"] >= stats["device_prefill_ms"] + stats["device_step_ms"] - 0.02
    with contextlib.redirect_stdout(io.StringIO()) as torch_out:
        assert main([*base(model_dirs), "--json", "--drafter", "torch", *tls(pki, live[1])]) == 0
    assert result["token_ids"] == json.loads(torch_out.getvalue())["token_ids"]

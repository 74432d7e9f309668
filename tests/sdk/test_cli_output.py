"""What `sdk generate` prints, where and when (issue #46, "A first run that talks").

The text goes to stdout as its tokens commit, and nothing else does: `sdk generate ... > body.txt`
keeps the text alone. Progress (one line per model loaded) and the stats go to stderr; `--quiet`
leaves only the text (or, with `--json`, the one JSON object); transformers' bars never show.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from types import FrameType

import pytest

import specsteer.sdk.decoding as device_module
from specsteer.sdk.cli import main
from tests.tinymodels import save_tiny


@pytest.fixture(scope="module")
def models_args(tmp_path_factory: pytest.TempPathFactory, char_tok: object) -> list[str]:
    root = tmp_path_factory.mktemp("models")
    s, g = save_tiny(root, char_tok, seed=1, name="s"), save_tiny(root, char_tok, seed=2, name="g")  # type: ignore[arg-type]
    return ["--specialist", str(s), "--generalist", str(g), "--max-new-tokens", "24", "--gamma", "0"]


def _inside_generation(frame: FrameType | None) -> bool:
    """Whether `sdk.decoding.generate` is on the stack: a write from there happens while it runs."""
    while frame is not None:
        if frame.f_code is device_module.generate.__code__:
            return True
        frame = frame.f_back
    return False


class Recorder(io.StringIO):
    """A stream that notes each write: which stream, what, and whether the generation was still running."""

    def __init__(self, name: str, events: list[tuple[str, str, bool]]) -> None:
        super().__init__()
        self.name = name
        self.events = events

    def write(self, text: str) -> int:
        self.events.append((self.name, text, _inside_generation(sys._getframe(1))))
        return super().write(text)


def test_generate_streams_the_text_to_stdout_and_puts_the_stats_on_stderr(
    models_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sdk generate` printed nothing until the generation ended, then the text and ~20 stats lines,
    all on stdout (so `> body.txt` captured the stats too)."""
    # Arrange
    events: list[tuple[str, str, bool]] = []
    out, err = Recorder("out", events), Recorder("err", events)
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    # Execute
    code = main(["generate", "--prompt", "Hello", "--drafter", "torch", *models_args])
    # Assert: several pieces of text written while the generation ran, before any stat.
    assert code == 0
    text_writes = [text for stream, text, during in events if stream == "out" and during and text]
    assert len(text_writes) >= 2, events
    stats = [i for i, (stream, text, _) in enumerate(events) if stream == "err" and "new_tokens:" in text]
    last_text = max(i for i, (stream, _, _) in enumerate(events) if stream == "out")
    assert stats and stats[0] > last_text
    # stdout is the text and a newline, nothing else; the stats and the progress are on stderr.
    assert "new_tokens" not in out.getvalue() and "loading" not in out.getvalue()
    assert out.getvalue().endswith("\n") and out.getvalue().strip()
    assert "acceptance_rate:" in err.getvalue() and "sdk: loading Specialist" in err.getvalue()


def test_generate_stdout_is_the_json_text(models_args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """The streamed text is the generation's text: the same as `--json` reports."""
    assert main(["generate", "--prompt", "Hello", "--drafter", "torch", "--json", *models_args]) == 0
    expected = json.loads(capsys.readouterr().out)["text"]
    assert main(["generate", "--prompt", "Hello", "--drafter", "torch", *models_args]) == 0
    captured = capsys.readouterr()
    assert captured.out == expected + "\n"


def test_one_progress_line_per_model_and_no_transformers_bars(
    models_args: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    """transformers' "Loading weights" bars leaked through beside the SDK's own lines."""
    assert main(["generate", "--prompt", "Hello", "--drafter", "torch", *models_args]) == 0
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "%|" not in err, err
    assert err.count("sdk: loading Specialist") == 1 and err.count("sdk: loading Generalist") == 1


def test_quiet_prints_the_text_alone(models_args: list[str], capfd: pytest.CaptureFixture[str]) -> None:
    """There was no `--quiet`: progress and stats were always printed."""
    code = main(["generate", "--prompt", "Hello", "--drafter", "torch", "--quiet", *models_args])
    captured = capfd.readouterr()
    assert code == 0 and captured.out.strip() and captured.err == ""


def test_quiet_json_is_one_object_on_stdout_and_nothing_else(
    models_args: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    code = main(["generate", "--prompt", "Hello", "--drafter", "torch", "--json", "--quiet", *models_args])
    captured = capfd.readouterr()
    assert code == 0 and captured.err == ""
    assert captured.out.count("\n") == 1 and captured.out.endswith("\n")
    result = json.loads(captured.out)
    assert set(result) >= {"text", "token_ids", "stats"}


def test_quiet_still_prints_an_error_as_one_sentence(
    models_args: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["generate", "--prompt", "Hi", "--quiet", "--specialist", str(tmp_path / "none")])
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("sdk: error: ") and "does not exist" in line

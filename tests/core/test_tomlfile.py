"""The one TOML-to-dataclass loader: both configs (device and verifier) read through it,
so unknown keys, wrong types and missing keys are refused alike, in one message style."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specsteer.core.errors import ConfigError
from specsteer.core.tomlfile import load_dataclass
from specsteer.sdk.client import ClientConfig
from specsteer.server.config import load_config


@dataclass(frozen=True)
class Settings:
    name: str
    folder: Path
    count: int = 1
    wait: float = field(default=1.0, metadata={"toml": "a number of seconds"})
    loud: bool = False
    tags: tuple[str, ...] = ()
    extra: Path | None = None


LAYOUT = {
    "main": {"name": "name", "folder": "folder", "count": "count", "tags": "tags"},
    "timing": {"wait": "wait", "loud": "loud", "extra_dir": "extra"},
}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "settings.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_file_then_overrides_make_the_dataclass(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[main]\nname = "n"\nfolder = "sub/dir"\ncount = 3\ntags = ["a", "b"]\n'
        '[timing]\nwait = 2\nextra_dir = "/abs"\n',
    )
    got = load_dataclass(Settings, path, LAYOUT, {"count": 7, "loud": None})
    # Relative paths are the file's folder's; an int is a float; None overrides nothing.
    assert got == Settings("n", tmp_path / "sub" / "dir", 7, 2.0, False, ("a", "b"), Path("/abs"))
    assert isinstance(got.wait, float)
    assert load_dataclass(Settings, None, LAYOUT, {"name": "x", "folder": Path("f")}).count == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[mian]\nname = "n"\n', "config file {p}: unknown section [mian]"),
        ("main = 3\n", "config file {p}: [main] must be a table"),
        ('[main]\nnmae = "n"\n', "config file {p}: unknown key 'nmae' in [main]"),
        ('[main]\nname = 3\nfolder = "f"\n', "config file {p}: [main] name must be a non-empty string; got 3"),
        ('[main]\nname = "n"\nfolder = ""\n', "config file {p}: [main] folder must be a path (a non-empty string)"),
        ('[main]\nname = "n"\nfolder = "f"\ncount = "3"\n', "[main] count must be an integer; got '3'"),
        ('[main]\nname = "n"\nfolder = "f"\ncount = true\n', "[main] count must be an integer; got True"),
        ('[main]\nname = "n"\nfolder = "f"\ntags = [1]\n', "[main] tags must be a list of strings; got [1]"),
        ('[timing]\nwait = "2"\n', "config file {p}: [timing] wait must be a number of seconds; got '2'"),
        ("[timing]\nwait = nan\n", "[timing] wait must be finite; got nan"),
        ("[timing]\nwait = inf\n", "[timing] wait must be finite; got inf"),
        ("[timing]\nloud = 1\n", "[timing] loud must be true or false; got 1"),
        ('[main]\nname = "n"\n', "config file {p} needs [main] folder"),
        ("", "config file {p} needs [main] name, [main] folder"),
    ],
)
def test_every_mistake_is_one_sentence_naming_file_section_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_dataclass(Settings, path, LAYOUT)
    assert message.format(p=path) in str(exc.value)


def test_an_unknown_override_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown setting 'colour'"):
        load_dataclass(Settings, None, LAYOUT, {"colour": "blue"})


def test_the_device_and_the_verifier_config_speak_alike(tmp_path: Path) -> None:
    device = write(tmp_path, '[verifier]\nserver = "h:1"\npins = "p"\ncert = "c"\nkey = "k"\nround_timeout = "30"\n')
    with pytest.raises(ConfigError) as exc:
        ClientConfig.from_file(device)
    assert str(exc.value) == f"config file {device}: [verifier] round_timeout must be a number of seconds; got '30'"
    server = tmp_path / "server.toml"
    server.write_text('[limits]\nidle_timeout = "30"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load_config(server)
    assert str(exc.value) == f"config file {server}: [limits] idle_timeout must be a number of seconds; got '30'"


def test_a_device_config_needs_its_four_keys_unless_flags_give_them(tmp_path: Path) -> None:
    path = write(tmp_path, '[verifier]\nserver = "h:1"\npins = "p"\n')
    with pytest.raises(ConfigError, match=r"needs \[verifier\] cert, \[verifier\] key$"):
        ClientConfig.from_file(path)
    config = ClientConfig.from_file(path, cert=Path("/c"), key=Path("/k"), server_name=None)
    assert (config.server, config.pins, config.cert) == ("h:1", tmp_path / "p", Path("/c"))

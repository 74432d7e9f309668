"""The device CLI reaches cloud code only through registered entry points (specsteer.sdk.cloud_plugins)."""

from __future__ import annotations

import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import specsteer.sdk.cloud_plugins
from specsteer.core.errors import ConfigError
from specsteer.sdk.cli import main
from specsteer.sdk.cloud_plugins import (
    CLOUD_EXTRA_HINT,
    LOCAL_VERIFIER_GROUP,
    local_verifier_factory,
)
from tests.tinymodels import save_tiny

ROOT = Path(__file__).resolve().parents[2]


def lookup_of(*entries: EntryPoint):
    def lookup(*, group: str) -> list[EntryPoint]:
        return [ep for ep in entries if ep.group == group]

    return lookup


def registered() -> list[EntryPoint]:
    """The entry points pyproject.toml registers, as pip would write them into the package metadata."""
    tables = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"]
    return [EntryPoint(name, value, group) for group, table in tables.items() for name, value in table.items()]


def test_pyproject_registers_the_real_verifier_factory_and_nothing_outside_the_wheel() -> None:
    from specsteer.server.local import in_process_verifier

    lookup = lookup_of(*registered())
    assert local_verifier_factory(lookup) is in_process_verifier
    # An installed wheel holds `specsteer` only: an entry point into the repository's demo or
    # benchmarks would be registered and then fail to load.
    assert all(ep.value.startswith("specsteer.") for ep in registered())


def test_no_registered_verifier_is_one_sentence_naming_the_extra() -> None:
    with pytest.raises(ConfigError) as err:
        local_verifier_factory(lookup_of())
    assert str(err.value) == f"the in-process verifier needs the cloud extra: {CLOUD_EXTRA_HINT}"


def test_a_verifier_that_does_not_import_is_one_sentence_naming_the_extra() -> None:
    broken = EntryPoint("in_process", "no_such_cloud_module:factory", LOCAL_VERIFIER_GROUP)
    with pytest.raises(ConfigError, match=r"needs the cloud extra: pip install 'specsteer-sdk\[cloud\]'"):
        local_verifier_factory(lookup_of(broken))


@pytest.fixture(scope="module")
def models_args(tmp_path_factory, char_tok) -> list[str]:
    root = tmp_path_factory.mktemp("models")
    s, g = save_tiny(root, char_tok, seed=1, name="s"), save_tiny(root, char_tok, seed=2, name="g")
    return ["--specialist", str(s), "--generalist", str(g)]


@pytest.fixture
def without_cloud(monkeypatch):
    """An install of the SDK alone: no cloud package registered its entry points."""
    monkeypatch.setattr(specsteer.sdk.cloud_plugins, "entry_points", lookup_of())


def test_generate_in_process_without_the_cloud_exits_1_before_loading(capsys, models_args, without_cloud) -> None:
    code = main(["generate", "--prompt", "Hello", "--max-new-tokens", "4", *models_args])
    err = capsys.readouterr().err
    assert code == 1
    assert f"sdk: error: the in-process verifier needs the cloud extra: {CLOUD_EXTRA_HINT}" in err
    assert "loading Specialist" not in err  # refused before any slow work


def test_device_only_method_needs_no_cloud(capsys, models_args, without_cloud) -> None:
    code = main(["generate", "--prompt", "Hello", "--method", "slm", "--max-new-tokens", "4", *models_args])
    assert code == 0, capsys.readouterr().err

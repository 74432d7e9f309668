"""`server serve --quantize` / `[models] quantize` and `sdk generate --quantize`: checked values, one sentence."""

from __future__ import annotations

import pytest

from specsteer.core.errors import ConfigError
from specsteer.server.cli import _overrides, build_parser
from specsteer.server.config import ServerConfig, load_config


def test_serve_flag_and_toml_key_reach_the_config(tmp_path) -> None:
    args = build_parser().parse_args(["serve", "--quantize", "int8"])
    assert load_config(None, _overrides(args)).quantize == "int8"
    toml = tmp_path / "server.toml"
    toml.write_text('[models]\nquantize = "int8"\n')
    assert load_config(toml).quantize == "int8"
    assert ServerConfig().quantize == "fp32"


def test_unknown_quantization_is_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="quantize must be fp32 or int8"):
        ServerConfig(quantize="int4")
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["serve", "--quantize", "int4"])
    assert exc.value.code == 2


def test_sdk_generate_has_the_flag() -> None:
    from specsteer.sdk.cli import build_parser as sdk_parser

    args = sdk_parser().parse_args(["generate", "--prompt", "hello", "--quantize", "int8"])
    assert args.quantize == "int8"

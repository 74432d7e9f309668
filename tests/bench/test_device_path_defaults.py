"""Benchmarks run what ships (issue #51): without flags each one drafts, at the precision and behind
the egress guard, that `sdk generate` and `SpecSteerClient` use; the results say which path ran."""

from __future__ import annotations

import argparse

import pytest

from bench import personal_loop, quality, speed, sweep
from specsteer.sdk.client import ClientConfig
from specsteer.sdk.drafters import DEFAULT_DRAFTER, DEFAULT_ONNX_PRECISION


@pytest.mark.parametrize(
    "parser",
    [quality.build_parser, sweep.build_parser, personal_loop.build_parser, speed._parser],
    ids=["quality", "sweep", "personal_loop", "speed"],
)
def test_every_benchmark_defaults_to_the_sdks_device_path(parser: type[argparse.ArgumentParser]) -> None:
    args = parser().parse_args([])
    shipped = ClientConfig  # its fields' defaults: what a device runs without settings
    assert args.drafter == shipped.drafter == DEFAULT_DRAFTER
    assert args.drafter_precision is None and shipped.drafter_precision is None
    if hasattr(args, "guard"):  # the speed benchmark times the client's own guard (ClientConfig.guard)
        assert args.guard == shipped.guard


def test_the_recorded_device_path_resolves_the_sdks_defaults() -> None:
    path = quality.device_path()
    assert path == {
        "drafter": DEFAULT_DRAFTER,
        "drafter_precision": DEFAULT_ONNX_PRECISION,
        "guard": ClientConfig.guard,
        "shipped": True,
    }
    assert not quality.device_path("torch")["shipped"]
    assert not quality.device_path(guard="off")["shipped"]
    counts = quality.rows_device_paths([{"config": "x"}, {**path, "config": "y"}])
    assert list(counts.values()) == [1, 1] and any("before issue #51" in label for label in counts)
    assert "the shipped default" in quality.device_path_line(counts)

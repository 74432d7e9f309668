"""`sdk models`: model bundles, built once on a build machine and shipped with an app.

    sdk models build [MODEL] [--out DIR] [--precision int4|int8|fp32] [--federation-state DIR]
    sdk models verify BUNDLE

`build` converts MODEL (an embedded name, the default Specialist unless given; a Hugging Face
folder; a .gguf file) with the `[convert]` extra into a bundle folder: the ONNX model, the
tokenizer and chat template, and a manifest of every file's SHA-256 and the base model's identity
(`core.bundle`). Without `--out`, an embedded model's bundle goes into the cache, where the
device finds it by name; built already, it is checked and kept. `verify` checks a bundle against
its manifest, as the device does on every load.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specsteer.core.cli import Parser
from specsteer.core.model_registry import DEFAULT_SPECIALIST, EMBEDDED_MODELS
from specsteer.core.onnx_cache import DEFAULT_ONNX_PRECISION, ONNX_PRECISIONS

__all__ = ["add_models_parser", "run_models_command"]


def add_models_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    models = sub.add_parser("models", help="build and check model bundles (the device's Specialist, converted once)")
    verbs = models.add_subparsers(dest="models_command", required=True, parser_class=Parser)
    build = verbs.add_parser("build", help="convert a Specialist into a bundle folder an app ships")
    build.add_argument(
        "model",
        nargs="?",
        default=DEFAULT_SPECIALIST,
        help=f"an embedded name, a Hugging Face folder or a .gguf file (default {DEFAULT_SPECIALIST})",
    )
    build.add_argument("--out", type=Path, help="the new bundle folder (default: the cache, for an embedded name)")
    build.add_argument(
        "--precision",
        choices=ONNX_PRECISIONS,
        default=DEFAULT_ONNX_PRECISION,
        help=f"the ONNX weights' precision (default {DEFAULT_ONNX_PRECISION})",
    )
    build.add_argument(
        "--federation-state",
        type=Path,
        help="merge this federation folder's newest global adapter in (a personal adapter is refused)",
    )
    build.add_argument("--cache-dir", type=Path, help="the conversion cache (default: $SPECSTEER_CACHE or ~/.cache)")
    build.add_argument("--quiet", action="store_true", help="print nothing but errors")
    verify = verbs.add_parser("verify", help="check a bundle's files against its manifest")
    verify.add_argument("bundle", type=Path, help="the bundle folder")


def run_models_command(args: argparse.Namespace) -> int:
    """`sdk models ...`; a `SpecSteerError` propagates to the CLI, which prints it as one sentence."""
    from specsteer.core.bundle import is_bundle, open_bundle
    from specsteer.sdk.bundles import build_bundle, default_bundle_path

    if args.models_command == "verify":
        bundle = open_bundle(args.bundle)
        print(f"{bundle.folder}: {bundle.name} ({bundle.precision}), {len(bundle.files)} files match the manifest")
        return 0
    out = args.out
    if out is None and args.model in EMBEDDED_MODELS and args.federation_state is None:
        cached = default_bundle_path(args.model, args.precision, args.cache_dir)
        if is_bundle(cached):
            bundle = open_bundle(cached)  # a damaged one is refused here, not rebuilt over
            if not args.quiet:
                print(f"{bundle.folder}: {bundle.name} ({bundle.precision}) is built already")
            return 0
    bundle = build_bundle(
        args.model,
        out,
        precision=args.precision,
        federation_state=args.federation_state,
        cache_dir=args.cache_dir,
        progress=not args.quiet,
    )
    if not args.quiet:
        size = sum((bundle.folder / name).stat().st_size for name in bundle.files)
        print(f"{bundle.folder}: {bundle.name} ({bundle.precision}), {len(bundle.files)} files, {size / 1e6:.0f} MB")
    return 0

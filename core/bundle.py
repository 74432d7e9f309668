"""A model bundle: the Specialist converted once, on a build machine, into the folder an app ships.

The device drafts on onnxruntime-genai and reads the tokenizer and chat template without torch,
so what it needs of a model is a handful of files: the int4 (or int8/fp32) ONNX graph and weights
with their `genai_config.json`, and the Hugging Face model's `config.json`, `tokenizer.json`,
`tokenizer_config.json`, `generation_config.json` (and a chat template file where the model keeps
one). `sdk models build` writes them into one folder with a manifest:

    specsteer-bundle.json      {"format": 1, "name": ..., "precision": ..., "base": {...},
                                "adapter": {...} | null, "builder": {...}, "files": {path: sha256}}
    config.json, tokenizer.json, tokenizer_config.json, generation_config.json, ...
    onnx/genai_config.json, onnx/model.onnx, onnx/model.onnx.data, ...

`open_bundle` refuses, with one sentence, a bundle whose manifest is not this format, a listed
file that is missing or whose SHA-256 differs, and a file the manifest does not list (a bundle is
exactly what was built: a swapped tokenizer or an added graph changes what the device sends).
Nothing here imports torch, transformers or the runtime.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsteer.core.errors import ModelLoadError, one_line

__all__ = [
    "BUNDLE_FORMAT",
    "BUNDLE_MANIFEST",
    "MODEL_FACT_FILES",
    "ONNX_FOLDER",
    "Bundle",
    "is_bundle",
    "open_bundle",
    "write_bundle",
]

BUNDLE_FORMAT = 1
BUNDLE_MANIFEST = "specsteer-bundle.json"
ONNX_FOLDER = "onnx"
# What the device reads of the Hugging Face model beside the ONNX graph (core.device_lm).
MODEL_FACT_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
)
_REQUIRED = ("config.json", "tokenizer.json", f"{ONNX_FOLDER}/genai_config.json")
_MANIFEST_CAP = 1 << 20  # a manifest lists a few dozen files: a larger one is not ours


@dataclass(frozen=True)
class Bundle:
    """A bundle folder whose every file matched its manifest when it was opened."""

    folder: Path
    name: str  # the name the Specialist loads under (with its adapter label, if one is merged)
    precision: str
    base: Mapping[str, Any]  # the base model's identity: its name and the digest of its weights
    adapter: Mapping[str, Any] | None
    files: Mapping[str, str]  # relative path -> sha256

    @property
    def onnx_folder(self) -> Path:
        return self.folder / ONNX_FOLDER


def is_bundle(path: str | Path) -> bool:
    return (Path(path).expanduser() / BUNDLE_MANIFEST).is_file()


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _listed_files(folder: Path) -> list[str]:
    """Every entry under `folder` as a relative POSIX path, the manifest left out; a link or
    anything but a regular file or folder is refused (the hashes must cover what is read)."""
    found: list[str] = []
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            path = Path(root) / name
            mode = path.lstat().st_mode
            relative = path.relative_to(folder).as_posix()
            if stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise ModelLoadError(f"the model bundle {folder} holds {relative}, which is not a regular file.")
            if stat.S_ISREG(mode) and relative != BUNDLE_MANIFEST:
                found.append(relative)
    return sorted(found)


def _read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / BUNDLE_MANIFEST
    try:
        with path.open("rb") as handle:
            raw = handle.read(_MANIFEST_CAP + 1)
        if len(raw) > _MANIFEST_CAP:
            raise ModelLoadError(f"{path} is larger than a bundle manifest can be.")
        manifest = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise ModelLoadError(f"{folder} is no model bundle: it has no {BUNDLE_MANIFEST}.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"cannot read the bundle manifest {path}: {one_line(exc)}.") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise ModelLoadError(f"{path} is bundle format {found!r}; this SDK reads format {BUNDLE_FORMAT}.")
    files = manifest.get("files")
    if not (
        isinstance(files, dict)
        and all(isinstance(k, str) and isinstance(v, str) and len(v) == 64 for k, v in files.items())
    ):
        raise ModelLoadError(f"{path} does not list its files as path: sha256.")
    for key in ("name", "precision"):
        if not isinstance(manifest.get(key), str) or not manifest[key]:
            raise ModelLoadError(f"{path} names no {key}.")
    if not isinstance(manifest.get("base"), dict) or not isinstance(manifest.get("adapter"), dict | None):
        raise ModelLoadError(f"{path} does not state the base model's identity.")
    return manifest


def open_bundle(path: str | Path) -> Bundle:
    """The bundle at `path`, every file checked against its manifest (`ModelLoadError` otherwise)."""
    folder = Path(path).expanduser()
    manifest = _read_manifest(folder)
    listed: dict[str, str] = manifest["files"]
    try:
        present = _listed_files(folder)
    except OSError as exc:
        raise ModelLoadError(f"cannot read the model bundle {folder}: {one_line(exc)}.") from exc
    extra = sorted(set(present) - set(listed))
    if extra:
        raise ModelLoadError(f"the model bundle {folder} holds {extra[0]}, which its manifest does not list.")
    for relative in _REQUIRED:
        if relative not in listed:
            raise ModelLoadError(f"the model bundle {folder} has no {relative}.")
    for relative, digest in sorted(listed.items()):
        file = folder / relative
        if relative not in present:
            raise ModelLoadError(f"the model bundle {folder} is missing {relative}.")
        try:
            actual = _sha256(file)
        except OSError as exc:
            raise ModelLoadError(f"cannot read {file}: {one_line(exc)}.") from exc
        if actual != digest:
            raise ModelLoadError(
                f"{relative} in the model bundle {folder} is not the file the bundle was built with "
                f"(sha256 {actual[:16]}..., manifest {digest[:16]}...)."
            )
    return Bundle(
        folder=folder,
        name=manifest["name"],
        precision=manifest["precision"],
        base=manifest["base"],
        adapter=manifest["adapter"],
        files=listed,
    )


def write_bundle(
    out: Path,
    *,
    model_folder: Path,
    onnx_folder: Path,
    name: str,
    precision: str,
    base: Mapping[str, Any],
    adapter: Mapping[str, Any] | None,
    builder: Mapping[str, Any],
    skip: Iterable[str] = (),
) -> Bundle:
    """Copy the device's files of `model_folder` and the converted `onnx_folder` into a new bundle
    at `out` (which must not exist), hash each and write the manifest last; `skip` names files of
    the ONNX folder that are the builder's bookkeeping, not the model."""
    out = Path(out).expanduser()
    if out.exists():
        raise ModelLoadError(f"{out} already exists: a bundle is written into a new folder.")
    tmp = out.with_name(f".tmp-{out.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    skipped = set(skip)
    try:
        (tmp / ONNX_FOLDER).mkdir(parents=True)
        for file in MODEL_FACT_FILES:
            if (model_folder / file).is_file():
                shutil.copyfile(model_folder / file, tmp / file)
        for item in sorted(onnx_folder.iterdir()):
            if item.is_file() and item.name not in skipped:
                shutil.copyfile(item, tmp / ONNX_FOLDER / item.name)
        files = {relative: _sha256(tmp / relative) for relative in _listed_files(tmp)}
        manifest = {
            "format": BUNDLE_FORMAT,
            "name": name,
            "precision": precision,
            "base": dict(base),
            "adapter": None if adapter is None else dict(adapter),
            "builder": dict(builder),
            "files": files,
        }
        (tmp / BUNDLE_MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.rename(tmp, out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelLoadError(f"cannot write the model bundle {out}: {one_line(exc)}.") from exc
    # The files were hashed as they were written: the bundle is what the manifest says, read once.
    return Bundle(out, name, precision, base, adapter, files)

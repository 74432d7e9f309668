"""The versioned folder: every vector file, the manifest that lists them, writing and replaying."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specsteer.audit import records
from specsteer.core.proto import verifier_pb2 as pb
from tools.conformance import (
    audit_logs,
    draws,
    frames,
    guard,
    prompts,
    retrieval,
    sessions,
    steering,
    witness,
    witness_frames,
)
from tools.conformance.common import VERSION, ConformanceError, dump, load

MANIFEST = "manifest.json"

# (file, builder, checker) of every JSON vector file; the audit cases come with their logs.
_FILES: tuple[tuple[str, Callable[[], dict[str, Any]], Callable[[dict[str, Any]], list[str]]], ...] = (
    (frames.UPLINK_FILE, frames.build_uplinks, frames.check_uplinks),
    (frames.DOWNLINK_FILE, frames.build_downlinks, frames.check_downlinks),
    (witness_frames.COSIGNATURE_FILE, witness_frames.build_cosignatures, witness_frames.check_cosignatures),
    (sessions.FILE, sessions.build, sessions.check),
    (steering.VERIFY_FILE, steering.build_verify, steering.check_verify),
    (steering.CANDIDATES_FILE, steering.build_candidates, steering.check_candidates),
    (steering.RECOVERY_FILE, steering.build_recovery, steering.check_recovery),
    (draws.FILE, draws.build, draws.check),
    (witness.FILE, witness.build, witness.check),
    (prompts.FILE, prompts.build, prompts.check),
    (retrieval.FILE, retrieval.build, retrieval.check),
    *guard.FILES,  # guard/spans.json, guard/rounds.json
)


def _formats() -> dict[str, Any]:
    """What the vectors were written for: a folder whose formats differ from the SDK's is another version."""
    return {"conformance": VERSION, "wire_package": pb.DESCRIPTOR.package, "audit_format": records.LOG_FORMAT}


def _files(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def write_folder(folder: Path) -> None:
    """Generate every vector into `folder`, replacing an earlier generation there (and nothing else)."""
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()) and not (folder / MANIFEST).is_file():
        raise ConformanceError(f"{folder} exists and holds no {MANIFEST}: it is not a conformance folder to replace")
    staging = folder.with_name(folder.name + ".writing")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        for name, build, _ in _FILES:
            dump(staging / name, build())
        dump(staging / audit_logs.FILE, audit_logs.build(staging))
        dump(staging / MANIFEST, {**_formats(), "generated_by": "python -m tools.conformance write",
                                  "files": _files(staging)})  # fmt: skip
    except BaseException:
        shutil.rmtree(staging)
        raise
    if folder.exists():
        shutil.rmtree(folder)
    staging.rename(folder)


def check_folder(folder: Path) -> list[str]:
    """Replay every vector in `folder` through the SDK; one line per disagreement (none: it conforms)."""
    folder = Path(folder)
    if not (folder / MANIFEST).is_file():
        raise ConformanceError(f"{folder} holds no {MANIFEST}: not a conformance folder")
    manifest = load(folder / MANIFEST)
    formats = {k: manifest.get(k) for k in _formats()}
    if formats != _formats():
        raise ConformanceError(
            f"{folder} holds vectors for {formats}, but this SDK speaks {_formats()}: write a new version's folder"
        )
    problems = []
    listed, present = manifest.get("files", {}), _files(folder)
    for name in sorted(set(listed) | set(present)):
        if name not in present:
            problems.append(f"{name}: listed in {MANIFEST} but missing")
        elif name not in listed:
            problems.append(f"{name}: not listed in {MANIFEST} (a stray file)")
        elif listed[name] != present[name]:
            problems.append(f"{name}: its bytes differ from the sha256 in {MANIFEST} (edited by hand?)")
    for name, _, check in _FILES:
        if (folder / name).is_file():
            problems += check(load(folder / name))
    if (folder / audit_logs.FILE).is_file():
        problems += audit_logs.check(folder, load(folder / audit_logs.FILE))
    return problems

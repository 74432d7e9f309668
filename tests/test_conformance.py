"""The conformance vectors for a second SDK (conformance/v1): CI replays every committed vector
through the Python SDK, and regenerating them gives the committed bytes."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tools.conformance.__main__ import main
from tools.conformance.folder import MANIFEST, check_folder, write_folder

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "conformance" / "v1"


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_every_committed_vector_agrees_with_the_sdk() -> None:
    assert check_folder(FOLDER) == []


def test_regenerating_the_vectors_gives_the_committed_bytes(tmp_path: Path) -> None:
    write_folder(tmp_path / "v1")
    fresh, committed = _tree(tmp_path / "v1"), _tree(FOLDER)
    assert sorted(fresh) == sorted(committed), "run `python -m tools.conformance write conformance/v1`"
    changed = [name for name in committed if fresh[name] != committed[name]]
    assert not changed, f"regenerated files differ: {changed}; run `python -m tools.conformance write conformance/v1`"


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "v1"
    shutil.copytree(FOLDER, folder)
    return folder


Edit = Callable[[Any], None]


def _case(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in doc["cases"] if c["name"] == name)


def _vector(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in doc["vectors"] if v["name"] == name)


def _edit(folder: Path, name: str, edit: Edit) -> None:
    path = folder / name
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc, indent=1) + "\n")


@pytest.mark.parametrize(
    ("name", "edit", "vector"),
    [
        ("wire/uplinks.json", lambda d: d["vectors"][0]["expected"].update(outcome="refused"), "open"),
        ("wire/sessions.json", lambda d: d["vectors"][0]["steps"][1]["expected"].append({}), "steered"),
        ("steering/recovery.json", lambda d: d["vectors"][0]["expected"].update(commit_ids=[3]), "recovery"),
        ("audit/cases.json", lambda d: d["cases"][3]["expected"].update(verdict="VERIFIED"), "byte-flipped"),
        ("wire/cosignatures.json", lambda d: d["vectors"][0]["expected"].update(outcome="refused"), "cosignature"),
        ("witness/decisions.json", lambda d: d["vectors"][0]["steps"][4]["expected"].update(category="witness-fork"),
         "one-witness"),
        ("audit/cases.json", lambda d: _case(d, "witness-rewritten")["expected"].update(verdict="VERIFIED"),
         "witness-rewritten"),
        ("guard/spans.json", lambda d: _vector(d, "trailer-email")["expected"]["spans"][0].update(end=30),
         "trailer-email"),
        ("guard/spans.json", lambda d: _vector(d, "ordinary-0")["expected"]["spans"].append(
            {"start": 0, "end": 7, "kind": "name", "text": "However", "placeholder": "<NAME>"}), "ordinary-0"),
        ("guard/spans.json", lambda d: _vector(d, "hazard-email-prefix")["expected"].update(hazard=None),
         "hazard-email-prefix"),
        ("guard/rounds.json", lambda d: _vector(d, "original-email-plain")["expected"]["rounds"][2].update(
            literal=[27, 30531, 29]), "original-email-plain"),
        ("guard/rounds.json", lambda d: _vector(d, "original-email-plain")["expected"]["rounds"][1].update(
            decisions=[]), "original-email-plain"),
    ],
)  # fmt: skip
def test_a_wrong_expectation_is_named_with_its_file_and_vector(
    tmp_path: Path, name: str, edit: Edit, vector: str
) -> None:
    folder = _copy(tmp_path)
    _edit(folder, name, edit)
    problems = check_folder(folder)
    assert any(p.startswith(f"{name}: vector {vector!r}:") for p in problems), problems
    assert f"{name}: its bytes differ from the sha256 in {MANIFEST} (edited by hand?)" in problems


def test_a_tampered_frame_is_caught_even_with_the_manifest_updated(tmp_path: Path) -> None:
    # The manifest only guards against edits by hand: the replay itself must catch a changed frame.
    folder = _copy(tmp_path)
    _edit(folder, "wire/downlinks.json", lambda d: d["vectors"][0].update(frame_hex="08011001"))
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"]["wire/downlinks.json"] = hashlib.sha256((folder / "wire/downlinks.json").read_bytes()).hexdigest()
    (folder / MANIFEST).write_text(json.dumps(manifest))
    (problem,) = check_folder(folder)
    assert problem.startswith("wire/downlinks.json: vector 'candidates': outcome: expected")


def test_the_command_exits_1_listing_mismatches_and_refuses_a_foreign_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(tmp_path)
    _edit(folder, "steering/verify.json", lambda d: d["vectors"][0]["expected"].update(accepted=4))
    assert main(["check", str(folder)]) == 1
    err = capsys.readouterr().err
    assert "steering/verify.json: vector 'greedy-partial': decision" in err and "disagree with the SDK" in err
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("not vectors")
    assert main(["write", str(other)]) == 1
    assert "is not a conformance folder to replace" in capsys.readouterr().err
    assert (other / "keep.txt").read_text() == "not vectors"


def test_a_folder_for_another_format_version_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _copy(tmp_path)
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["audit_format"] = "specsteer-audit-log/0"
    (folder / MANIFEST).write_text(json.dumps(manifest))
    assert main(["check", str(folder)]) == 1
    assert "write a new version's folder" in capsys.readouterr().err


def test_a_witness_step_whose_request_was_altered_is_caught(tmp_path: Path) -> None:
    # The consistent-growth step's checkpoint signature with one bit flipped: the witness refuses it,
    # and every later step is judged against the state that refusal left.
    folder = _copy(tmp_path)

    def flip(doc: Any) -> None:
        step = doc["vectors"][0]["steps"][2]
        raw = bytearray.fromhex(step["frame_hex"])
        raw[-1] ^= 1  # the last byte of the Close: inside its checkpoint's proof or signature
        step["frame_hex"] = raw.hex()

    _edit(folder, "witness/decisions.json", flip)
    problems = [p for p in check_folder(folder) if "sha256" not in p]
    assert problems and all(p.startswith("witness/decisions.json: vector 'one-witness': step ") for p in problems)
    assert "step 2 (consistent-growth) decision" in problems[0]


def test_only_the_witness_key_catches_the_key_holders_rewrite() -> None:
    """The witnessed cases keep the verdicts they exist to show, so regenerating cannot hide a regression."""
    doc = json.loads((FOLDER / "audit" / "cases.json").read_text())
    verdicts = {c["name"]: c["expected"]["verdict"] for c in doc["cases"] if c["name"].startswith("witness")}
    assert verdicts == {
        "witnessed": "VERIFIED",
        "witnessed-other-witness": "FAILED",
        "witness-rewritten": "FAILED",
        "witness-rewritten-no-witness-key": "VERIFIED",
        "witness-bogus-cosignature": "FAILED",
    }
    failed = {c["name"]: [k["name"] for k in c["expected"]["checks"] if not k["ok"]] for c in doc["cases"]}
    assert failed["witness-rewritten"] == failed["witness-bogus-cosignature"] == ["witness cosignatures"]


def test_the_guard_vectors_keep_what_they_exist_to_show() -> None:
    """Regenerating cannot quietly turn a held span into a pass: the sampled cases keep their span
    kinds, the ordinary text holds nothing, and the rounds exercise every decision."""
    spans = json.loads((FOLDER / "guard" / "spans.json").read_text())["vectors"]
    kinds = {s["kind"] for v in spans for s in v["expected"]["spans"]}
    assert {"email", "phone", "name", "secret", "private-ngram", "canary", "card", "iban"} <= kinds
    benign = [v for v in spans if v["name"].startswith(("developer-", "ordinary-"))]
    assert len(benign) >= 20 and all(v["expected"]["spans"] == [] for v in benign)
    assert all(v["expected"]["spans"] for v in spans if v["name"].startswith(("original-", "history-ngram-line")))
    rounds = json.loads((FOLDER / "guard" / "rounds.json").read_text())["vectors"]
    decisions = {d[0] for v in rounds for r in v["expected"]["rounds"] for d in r["decisions"]}
    assert decisions == {"cut", "placeholder", "keep-local"}

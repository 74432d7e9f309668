"""docs/audit-format.md's worked example, recomputed twice: by hand (hashlib and Ed25519, as an
independent verifier would) and by our code; a log built from it verifies."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from specsteer.audit import merkle, records
from specsteer.audit.log import scan_log
from specsteer.audit.note import Checkpoint, SigningKey, VerifierKey, open_checkpoint, sign_checkpoint
from specsteer.audit.verify import verify

DOC = Path(__file__).parents[2] / "docs" / "audit-format.md"


def _examples() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    return {m.group(1): m.group(2) for m in re.finditer(r"<!-- example:(\w+) -->\n```\n(.*?)```\n", text, re.S)}


def test_the_worked_example_by_hand() -> None:
    ex = _examples()
    assert set(ex) == {"signer", "verifier", "records", "leaves", "root", "frame", "checkpoint"}
    # The key: seed from the signer key, public key and key ID by the signed-note rules.
    _, _, name, key_id, b64 = ex["signer"].strip().split("+", 4)
    seed = base64.b64decode(b64)[1:]
    private = Ed25519PrivateKey.from_private_bytes(seed)
    public = private.public_key().public_bytes_raw()
    assert hashlib.sha256(name.encode() + b"\n\x01" + public).digest()[:4].hex() == key_id
    encoded = base64.b64encode(b"\x01" + public).decode()
    assert ex["verifier"].strip() == f"{name}+{key_id}+{encoded}"
    # Records: canonical JSON; leaves and root by RFC 9162.
    lines = [line.encode() for line in ex["records"].splitlines()]
    for line in lines:
        obj = json.loads(line)
        assert json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode() == line
    leaves = [hashlib.sha256(b"\x00" + line).digest() for line in lines]
    assert [x.hex() for x in leaves] == ex["leaves"].split()

    def node(a: bytes, b: bytes) -> bytes:
        return hashlib.sha256(b"\x01" + a + b).digest()

    root = node(node(leaves[0], leaves[1]), node(leaves[2], leaves[3]))
    assert root.hex() == ex["root"].strip()
    frame = len(lines[3]).to_bytes(4, "big") + lines[3] + leaves[3]
    assert frame.hex() == ex["frame"].strip()
    # The checkpoint: three lines, a blank line, one signature line over the text.
    text = f"{name}\n4\n{base64.b64encode(root).decode()}\n"
    signature = base64.b64encode(bytes.fromhex(key_id) + private.sign(text.encode())).decode()
    assert ex["checkpoint"] == text + "\n\u2014 " + f"{name} {signature}\n"


def test_the_worked_example_by_our_code(tmp_path: Path) -> None:
    ex = _examples()
    key = SigningKey.parse(ex["signer"])
    assert str(key.verifier) == ex["verifier"].strip() and VerifierKey.parse(ex["verifier"]) == key.verifier
    data = [line.encode() for line in ex["records"].splitlines()]
    parsed = [records.parse(d) for d in data]
    assert [r.index for r in parsed] == [0, 1, 2, 3]
    leaves = [merkle.leaf_hash(d) for d in data]
    assert merkle.root(leaves).hex() == ex["root"].strip()
    cp = Checkpoint(key.name, 4, merkle.root(leaves))
    assert sign_checkpoint(cp, key) == ex["checkpoint"] and open_checkpoint(ex["checkpoint"], key.verifier) == cp
    # A log directory holding exactly the example verifies, with the example's key.
    log = tmp_path / "log"
    (log / "segments").mkdir(parents=True)
    (log / "segments" / "seg-000000000000.log").write_bytes(b"".join(bytes.fromhex(_frame(d)) for d in data))
    (log / "checkpoints.jsonl").write_text(json.dumps({"note": ex["checkpoint"]}) + "\n")
    assert _frame(data[3]) == ex["frame"].strip()
    assert [s.leaf for s in scan_log(log).records] == leaves
    report = verify(log, key=key.verifier)
    assert report.verdict == "VERIFIED" and report.devices == (("alice", "ab" * 32),)


def _frame(record: bytes) -> str:
    return (len(record).to_bytes(4, "big") + record + merkle.leaf_hash(record)).hex()

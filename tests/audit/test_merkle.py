"""RFC 9162 Merkle hashing and proofs against the transparency-dev/merkle test vectors, plus properties."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsteer.audit import merkle

VECTORS = json.loads(
    (Path(__file__).parents[1] / "assets" / "audit" / "transparency_dev_merkle_vectors.json").read_text()
)
LEAVES = [merkle.leaf_hash(bytes.fromhex(x)) for x in VECTORS["leaf_inputs_hex"]]


def _b64(items: list[str] | None) -> list[bytes]:
    return [base64.b64decode(x) for x in items or []]


def test_hasher_vectors() -> None:
    leaf_empty, leaf, node = VECTORS["hasher"]
    assert merkle.leaf_hash(bytes.fromhex(leaf_empty["leaf_hex"])).hex() == leaf_empty["want_hex"]
    assert merkle.leaf_hash(bytes.fromhex(leaf["leaf_hex"])).hex() == leaf["want_hex"]
    got = merkle.node_hash(bytes.fromhex(node["left_hex"]), bytes.fromhex(node["right_hex"]))
    assert got.hex() == node["want_hex"]
    assert [h.hex() for h in LEAVES] == VECTORS["leaf_hashes_hex"]


@pytest.mark.parametrize("size", range(9))
def test_roots_of_every_prefix(size: int) -> None:
    assert merkle.root(LEAVES[:size]).hex() == VECTORS["root_hashes_hex"][size]


@pytest.mark.parametrize("probe", VECTORS["inclusion"], ids=lambda p: p["file"].removeprefix("testdata/"))
def test_inclusion_probe(probe: dict[str, Any]) -> None:
    args = (probe["leafIdx"], probe["treeSize"], base64.b64decode(probe["leafHash"]), _b64(probe["proof"]))
    root = base64.b64decode(probe["root"])
    if probe["wantErr"]:
        with pytest.raises(merkle.ProofError):
            merkle.verify_inclusion(*args, root)
    else:
        merkle.verify_inclusion(*args, root)


@pytest.mark.parametrize("probe", VECTORS["consistency"], ids=lambda p: p["file"].removeprefix("testdata/"))
def test_consistency_probe(probe: dict[str, Any]) -> None:
    args = (probe["size1"], probe["size2"], base64.b64decode(probe["root1"]), base64.b64decode(probe["root2"]))
    if probe["wantErr"]:
        with pytest.raises(merkle.ProofError):
            merkle.verify_consistency(*args, _b64(probe["proof"]))
    else:
        merkle.verify_consistency(*args, _b64(probe["proof"]))


def _happy(kind: str) -> list[dict[str, Any]]:
    roots = {base64.b64encode(bytes.fromhex(h)).decode() for h in VECTORS["root_hashes_hex"]}
    if kind == "inclusion":
        return [p for p in VECTORS[kind] if not p["wantErr"] and p["root"] in roots and p["treeSize"] <= 8]
    return [p for p in VECTORS[kind] if not p["wantErr"] and p["root2"] in roots and p["size1"] > 0 and p["size2"] <= 8]


def test_generated_proofs_equal_the_published_ones() -> None:
    inc, con = _happy("inclusion"), _happy("consistency")
    assert len(inc) >= 5 and len(con) >= 5  # the vectors' happy paths, so this test cannot pass vacuously
    for p in inc:
        assert merkle.inclusion_proof(p["leafIdx"], LEAVES[: p["treeSize"]]) == _b64(p["proof"]), p["file"]
    for p in con:
        assert merkle.consistency_proof(p["size1"], LEAVES[: p["size2"]]) == _b64(p["proof"]), p["file"]


leaf_lists = st.lists(st.binary(max_size=8), min_size=1, max_size=70).map(lambda xs: [merkle.leaf_hash(x) for x in xs])


@settings(max_examples=60, deadline=None)
@given(leaves=leaf_lists, data=st.data())
def test_every_generated_proof_verifies_and_any_bit_flip_fails(leaves: list[bytes], data: st.DataObject) -> None:
    n = len(leaves)
    root = merkle.root(leaves)
    i = data.draw(st.integers(0, n - 1))
    proof = merkle.inclusion_proof(i, leaves)
    merkle.verify_inclusion(i, n, leaves[i], proof, root)
    m = data.draw(st.integers(1, n))
    cproof = merkle.consistency_proof(m, leaves)
    merkle.verify_consistency(m, n, merkle.root(leaves[:m]), root, cproof)
    if proof:
        j = data.draw(st.integers(0, len(proof) - 1))
        bad = [*proof[:j], bytes([proof[j][0] ^ 1]) + proof[j][1:], *proof[j + 1 :]]
        with pytest.raises(merkle.ProofError):
            merkle.verify_inclusion(i, n, leaves[i], bad, root)
    if cproof:
        j = data.draw(st.integers(0, len(cproof) - 1))
        bad = [*cproof[:j], bytes([cproof[j][0] ^ 1]) + cproof[j][1:], *cproof[j + 1 :]]
        with pytest.raises(merkle.ProofError):
            merkle.verify_consistency(m, n, merkle.root(leaves[:m]), root, bad)


@settings(max_examples=40, deadline=None)
@given(leaves=leaf_lists)
def test_accumulator_roots_match_the_recursive_definition(leaves: list[bytes]) -> None:
    def mth(hs: list[bytes]) -> bytes:  # RFC 9162 §2.1.1 written out literally
        if len(hs) == 1:
            return hs[0]
        k = 1 << ((len(hs) - 1).bit_length() - 1)
        return merkle.node_hash(mth(hs[:k]), mth(hs[k:]))

    acc = merkle.Accumulator()
    for i, h in enumerate(leaves, start=1):
        acc.append(h)
        assert acc.root() == mth(leaves[:i])


def test_a_different_tree_of_the_same_size_fails_consistency() -> None:
    other = [*LEAVES[:3], merkle.leaf_hash(b"forged"), *LEAVES[4:]]
    proof = merkle.consistency_proof(5, LEAVES)
    with pytest.raises(merkle.ProofError, match="old root"):
        merkle.verify_consistency(5, 8, merkle.root(other[:5]), merkle.root(LEAVES), proof)
    with pytest.raises(merkle.ProofError, match="forked"):
        merkle.verify_consistency(8, 8, merkle.root(other), merkle.root(LEAVES), [])

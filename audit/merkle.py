"""RFC 9162 (Certificate Transparency v2) Merkle tree hashing and proofs, with SHA-256.

Pure functions over leaf *hashes* (32 bytes each), so a verifier never needs the leaf data of
records it is not looking at:

- `leaf_hash(d) = SHA-256(0x00 || d)`, `node_hash(l, r) = SHA-256(0x01 || l || r)` (§2.1.1);
- `root(leaf_hashes)`: MTH over a list (the empty tree hashes to SHA-256 of nothing);
- `inclusion_proof` / `verify_inclusion`: §2.1.3.1 PATH and the §2.1.3.2 verification algorithm;
- `consistency_proof` / `verify_consistency`: §2.1.4.1 PROOF and the §2.1.4.2 algorithm;
- `Accumulator`: an append-only compact range, for roots at many sizes in one pass (`roots_at`).

The verifiers raise `ProofError` (never return False), so a forgotten result cannot pass.
Checked against the transparency-dev/merkle test vectors (tests/assets/audit/).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from specsteer.audit.errors import ProofError

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly below n (n >= 2): where RFC 9162 splits a tree of n leaves."""
    return 1 << ((n - 1).bit_length() - 1)


def root(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH(D[n]) over leaf hashes; iterative through the accumulator so deep trees cost no recursion."""
    acc = Accumulator()
    for h in leaf_hashes:
        acc.append(h)
    return acc.root()


def _subtree_root(leaf_hashes: Sequence[bytes], start: int, end: int) -> bytes:
    acc = Accumulator()
    for i in range(start, end):
        acc.append(leaf_hashes[i])
    return acc.root()


def inclusion_proof(index: int, leaf_hashes: Sequence[bytes]) -> list[bytes]:
    """PATH(m, D[n]) for leaf `index` in the tree of all `leaf_hashes` (RFC 9162 §2.1.3.1)."""
    n = len(leaf_hashes)
    if not 0 <= index < n:
        raise ProofError(f"leaf {index} is not in a tree of {n} leaves")
    proof: list[bytes] = []
    start, end, m = 0, n, index
    # Walk down from the root; each level contributes the sibling subtree, collected leaf-first.
    while end - start > 1:
        k = _split(end - start)
        if m < k:
            proof.append(_subtree_root(leaf_hashes, start + k, end))
            end = start + k
        else:
            proof.append(_subtree_root(leaf_hashes, start, start + k))
            start, m = start + k, m - k
    proof.reverse()
    return proof


def consistency_proof(old_size: int, leaf_hashes: Sequence[bytes]) -> list[bytes]:
    """PROOF(m, D[n]) from the first `old_size` leaves to all of them (RFC 9162 §2.1.4.1)."""
    n = len(leaf_hashes)
    if not 0 < old_size <= n:
        raise ProofError(f"no consistency proof from size {old_size} to size {n}")
    proof: list[bytes] = []
    start, end, m, whole = 0, n, old_size, True
    while m != end - start:
        k = _split(end - start)
        if m <= k:
            proof.append(_subtree_root(leaf_hashes, start + k, end))
            end = start + k
        else:
            proof.append(_subtree_root(leaf_hashes, start, start + k))
            start, m, whole = start + k, m - k, False
    if not whole:
        # SUBPROOF(m, D[m], false) = {MTH(D[m])}: the old tree's last subtree is not a prefix root.
        proof.append(_subtree_root(leaf_hashes, start, end))
    proof.reverse()
    return proof


def _check_hash(value: bytes, what: str) -> None:
    if len(value) != HASH_SIZE:
        raise ProofError(f"{what} is {len(value)} bytes, not a {HASH_SIZE}-byte SHA-256 hash")


def verify_inclusion(index: int, tree_size: int, leaf: bytes, proof: Sequence[bytes], expected_root: bytes) -> None:
    """Raise `ProofError` unless `proof` shows leaf hash `leaf` at `index` under `expected_root` (§2.1.3.2)."""
    if not 0 <= index < tree_size:
        raise ProofError(f"leaf {index} is not in a tree of {tree_size} leaves")
    _check_hash(leaf, "the leaf hash")
    for i, p in enumerate(proof):
        _check_hash(p, f"proof element {i}")
    fn, sn, r = index, tree_size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofError("the inclusion proof is longer than the path to the root")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not (fn & 1 or fn == 0):
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("the inclusion proof is shorter than the path to the root")
    if r != expected_root:
        raise ProofError("the inclusion proof leads to a different root")


def verify_consistency(old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> None:
    """Raise `ProofError` unless `proof` shows the tree at `old_size` is a prefix of the one at `new_size`.

    RFC 9162 §2.1.4.2, with the reference implementation's edge cases: equal sizes need equal roots and
    an empty proof; a proof from the empty tree is refused.
    """
    if old_size > new_size:
        raise ProofError(f"the old size {old_size} is larger than the new size {new_size}")
    if old_size == 0:
        # Every tree extends the empty one; a proof for it proves nothing, so it is refused.
        raise ProofError("a consistency proof from the empty tree proves nothing")
    for i, p in enumerate(proof):
        _check_hash(p, f"proof element {i}")
    if old_size == new_size:
        # PROOF(n, D[n]) is empty: the same size must mean the same root, or history forked.
        if proof:
            raise ProofError("equal sizes need an empty consistency proof")
        if old_root != new_root:
            raise ProofError(f"two different roots for the same size {old_size}: the history forked")
        return
    if not proof:
        raise ProofError("the consistency proof is empty")
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the consistency proof is longer than needed")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while not (fn & 1 or fn == 0):
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("the consistency proof is shorter than needed")
    if fr != old_root:
        raise ProofError("the consistency proof does not lead to the old root")
    if sr != new_root:
        raise ProofError("the consistency proof does not lead to the new root")


class Accumulator:
    """Compact range [0, size): one subtree root per set bit of `size`, so append and root are O(log n)."""

    def __init__(self) -> None:
        self._peaks: list[bytes] = []  # perfect subtree roots, largest (leftmost) first
        self.size = 0

    def append(self, leaf: bytes) -> None:
        _check_hash(leaf, "the leaf hash")
        h = leaf
        n = self.size
        # Merge equal-sized perfect subtrees, as a binary counter carries.
        while n & 1:
            h = node_hash(self._peaks.pop(), h)
            n >>= 1
        self._peaks.append(h)
        self.size += 1

    def root(self) -> bytes:
        if not self._peaks:
            return EMPTY_ROOT
        # RFC 9162 splits at the largest power of two, so the peaks fold from the right.
        h = self._peaks[-1]
        for peak in reversed(self._peaks[:-1]):
            h = node_hash(peak, h)
        return h


def roots_at(leaves: Sequence[bytes], sizes: set[int]) -> dict[int, bytes]:
    """The tree's root at each of `sizes` that `leaves` cover, in one pass over them."""
    roots = {0: EMPTY_ROOT} if 0 in sizes else {}
    acc = Accumulator()
    for i, leaf in enumerate(leaves, start=1):
        acc.append(leaf)
        if i in sizes:
            roots[i] = acc.root()
    return roots

/**
 * RFC 9162 Merkle tree hashing and proofs with SHA-256 (audit/merkle.py), over leaf hashes. The
 * verifiers throw `ProofError` (never return false), so a forgotten result cannot pass.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { concatBytes, equalBytes } from "./bytes.js";

export class ProofError extends Error {
  override name = "ProofError";
}

export const HASH_SIZE = 32;
export const EMPTY_ROOT = sha256(new Uint8Array(0));

export function leafHash(data: Uint8Array): Uint8Array {
  return sha256(concatBytes(Uint8Array.of(0), data));
}

export function nodeHash(left: Uint8Array, right: Uint8Array): Uint8Array {
  return sha256(concatBytes(Uint8Array.of(1), left, right));
}

/** An append-only compact range: one perfect subtree root per set bit of the size. */
export class Accumulator {
  private peaks: Uint8Array[] = [];
  size = 0;

  append(leaf: Uint8Array): void {
    if (leaf.length !== HASH_SIZE) throw new ProofError(`the leaf hash is ${leaf.length} bytes`);
    let h = leaf;
    for (let n = this.size; n & 1; n >>= 1) h = nodeHash(this.peaks.pop()!, h);
    this.peaks.push(h);
    this.size += 1;
  }

  root(): Uint8Array {
    if (this.peaks.length === 0) return EMPTY_ROOT;
    // RFC 9162 splits at the largest power of two, so the peaks fold from the right.
    let h = this.peaks[this.peaks.length - 1]!;
    for (let i = this.peaks.length - 2; i >= 0; i--) h = nodeHash(this.peaks[i]!, h);
    return h;
  }
}

export function root(leafHashes: Uint8Array[]): Uint8Array {
  const acc = new Accumulator();
  for (const h of leafHashes) acc.append(h);
  return acc.root();
}

function checkHashes(proof: Uint8Array[]): void {
  proof.forEach((p, i) => {
    if (p.length !== HASH_SIZE) throw new ProofError(`proof element ${i} is ${p.length} bytes, not ${HASH_SIZE}`);
  });
}

/** Throw unless `proof` shows the tree at `oldSize` is a prefix of the one at `newSize` (§2.1.4.2). */
export function verifyConsistency(
  oldSize: bigint,
  newSize: bigint,
  oldRoot: Uint8Array,
  newRoot: Uint8Array,
  proof: Uint8Array[],
): void {
  if (oldSize > newSize) throw new ProofError(`the old size ${oldSize} is larger than the new size ${newSize}`);
  if (oldSize === 0n) throw new ProofError("a consistency proof from the empty tree proves nothing");
  checkHashes(proof);
  if (oldSize === newSize) {
    if (proof.length > 0) throw new ProofError("equal sizes need an empty consistency proof");
    if (!equalBytes(oldRoot, newRoot)) throw new ProofError(`two different roots for the same size ${oldSize}`);
    return;
  }
  if (proof.length === 0) throw new ProofError("the consistency proof is empty");
  const path = [...proof];
  if ((oldSize & (oldSize - 1n)) === 0n) path.unshift(oldRoot);
  let fn = oldSize - 1n;
  let sn = newSize - 1n;
  while (fn & 1n) [fn, sn] = [fn >> 1n, sn >> 1n];
  let fr = path[0]!;
  let sr = path[0]!;
  for (const c of path.slice(1)) {
    if (sn === 0n) throw new ProofError("the consistency proof is longer than needed");
    if (fn & 1n || fn === sn) {
      [fr, sr] = [nodeHash(c, fr), nodeHash(c, sr)];
      if (!(fn & 1n)) while (!(fn & 1n || fn === 0n)) [fn, sn] = [fn >> 1n, sn >> 1n];
    } else sr = nodeHash(sr, c);
    [fn, sn] = [fn >> 1n, sn >> 1n];
  }
  if (sn !== 0n) throw new ProofError("the consistency proof is shorter than needed");
  if (!equalBytes(fr, oldRoot)) throw new ProofError("the consistency proof does not lead to the old root");
  if (!equalBytes(sr, newRoot)) throw new ProofError("the consistency proof does not lead to the new root");
}

function splitPoint(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/** MTH of leaves [start, end): the root of that perfect or partial subtree. */
function subtreeRoot(leafHashes: Uint8Array[], start: number, end: number): Uint8Array {
  return root(leafHashes.slice(start, end));
}

/** PROOF(m, D[n]) from the first `oldSize` leaves to all of them (RFC 9162 §2.1.4.1), as
 * audit/merkle.py's `consistency_proof` writes it. */
export function consistencyProof(oldSize: number, leafHashes: Uint8Array[]): Uint8Array[] {
  const n = leafHashes.length;
  if (!(oldSize > 0 && oldSize <= n)) throw new ProofError(`no consistency proof from size ${oldSize} to size ${n}`);
  const proof: Uint8Array[] = [];
  let [start, end, m, whole] = [0, n, oldSize, true];
  while (m !== end - start) {
    const k = splitPoint(end - start);
    if (m <= k) {
      proof.push(subtreeRoot(leafHashes, start + k, end));
      end = start + k;
    } else {
      proof.push(subtreeRoot(leafHashes, start, start + k));
      [start, m, whole] = [start + k, m - k, false];
    }
  }
  // SUBPROOF(m, D[m], false) = {MTH(D[m])}: the old tree's last subtree is not a prefix root.
  if (!whole) proof.push(subtreeRoot(leafHashes, start, end));
  return proof.reverse();
}

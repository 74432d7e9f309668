/**
 * The device's draws (core/recovery.py's `device_rng`, `choose` and `inverse_cdf`): every token the
 * device writes in sampling mode, drawn as the Python device draws it.
 *
 * - `DeviceRng` is numpy's `Generator(PCG64(seed))` bit for bit: the seed through numpy's
 *   `SeedSequence` (entropy pooling, then `generate_state`: numpy/random/bit_generator.pyx), PCG64's
 *   seeding from those four 64-bit words (`pcg64_set_seed`), its 128-bit LCG step and XSL-RR output,
 *   and `random()` = (next 64 bits >> 11) · 2^-53. The same seed gives the same doubles on both
 *   devices (conformance/v1/steering/draws.json holds the first ones of several seeds).
 * - `choose` draws from softmax(scores / T) by inverting its cumulative distribution at one uniform,
 *   with numpy's float32 arithmetic (Math.fround at each float32 operation) and its float64 block
 *   sums (numpy's pairwise summation, `pairwiseSum`).
 *
 * One difference is left: the weights' exp. numpy's float32 `exp` is not correctly rounded: on x86
 * with AVX2 or AVX-512 it is a SIMD polynomial up to 2 ulp from the float32 nearest e^x, while
 * elsewhere numpy calls libm's `expf`; Math.fround(Math.exp(x)) is the nearest (but for a rare
 * double rounding). Measured on an AVX-512 machine (numpy 2.4.6, node 20; `python -m
 * tools.conformance.draws`): 36.4% of 4 million inputs in [-104, 0] differ, 35.6% by 1 ulp and 0.8%
 * by 2. A weight off by an ulp moves the cumulative sums by about 1e-7 of the total, so a draw
 * differs only when its uniform falls that near a boundary between two tokens: on rows of 151,936
 * scores, 0, 2 and 11 of 100,000 draws picked another token (the `random` recipe at T = 1 and 0.7,
 * normal(0, 3) logits). No vector's draw hangs on it (tools/conformance/draws.py checks each), and
 * numpy's own draws differ between machines in the same way.
 */

/** A source of uniform doubles in [0, 1): a `DeviceRng`, or a fixed list in a test. */
export interface UniformSource {
  random(): number;
}

const MASK64 = (1n << 64n) - 1n;
const MASK128 = (1n << 128n) - 1n;
// numpy/random/bit_generator.pyx: SeedSequence's hash constants.
const POOL_SIZE = 4;
const INIT_A = 0x43b0d7e5;
const MULT_A = 0x931e8875;
const INIT_B = 0x8b51f9dd;
const MULT_B = 0x58f38ded;
const MIX_MULT_L = 0xca01f9dd;
const MIX_MULT_R = 0x4973f715;
const XSHIFT = 16;
/** PCG64's 128-bit LCG multiplier (numpy/random/src/pcg64/pcg64.h, PCG_DEFAULT_MULTIPLIER_128). */
const PCG_MULTIPLIER = 0x2360ed051fc65da44385df649fccf645n;

/** The seed as numpy's SeedSequence reads an int: its 32-bit words, least significant first ([0] for 0). */
function seedWords(seed: bigint): number[] {
  if (seed === 0n) return [0];
  const words: number[] = [];
  for (let n = seed; n > 0n; n >>= 32n) words.push(Number(n & 0xffffffffn));
  return words;
}

/** SeedSequence(seed).generate_state(4, uint64): the four words PCG64 is seeded with. */
export function seedState(seed: bigint): bigint[] {
  const entropy = seedWords(seed);
  let hashConst = INIT_A;
  const hashmix = (value: number): number => {
    let v = (value ^ hashConst) >>> 0;
    hashConst = Math.imul(hashConst, MULT_A) >>> 0;
    v = Math.imul(v, hashConst) >>> 0;
    return (v ^ (v >>> XSHIFT)) >>> 0;
  };
  const mix = (x: number, y: number): number => {
    const r = (Math.imul(MIX_MULT_L, x) - Math.imul(MIX_MULT_R, y)) >>> 0;
    return (r ^ (r >>> XSHIFT)) >>> 0;
  };
  // mix_entropy: the entropy into the pool, every pool word mixed into every other, then the rest.
  const pool = new Array<number>(POOL_SIZE);
  for (let i = 0; i < POOL_SIZE; i++) pool[i] = hashmix(i < entropy.length ? entropy[i]! : 0);
  for (let src = 0; src < POOL_SIZE; src++) {
    for (let dst = 0; dst < POOL_SIZE; dst++) if (src !== dst) pool[dst] = mix(pool[dst]!, hashmix(pool[src]!));
  }
  for (let src = POOL_SIZE; src < entropy.length; src++) {
    for (let dst = 0; dst < POOL_SIZE; dst++) pool[dst] = mix(pool[dst]!, hashmix(entropy[src]!));
  }
  // generate_state: eight 32-bit words cycled out of the pool, read as four little-endian uint64s.
  let h = INIT_B;
  const words: number[] = [];
  for (let i = 0; i < 8; i++) {
    let v = (pool[i % POOL_SIZE]! ^ h) >>> 0;
    h = Math.imul(h, MULT_B) >>> 0;
    v = Math.imul(v, h) >>> 0;
    words.push((v ^ (v >>> XSHIFT)) >>> 0);
  }
  return [0, 1, 2, 3].map((k) => (BigInt(words[2 * k + 1]!) << 32n) | BigInt(words[2 * k]!));
}

/** A seed as the Python device takes it: a whole number, 0 or more (numpy's generators take no other). */
export function seedProblem(seed: unknown): string | null {
  if (typeof seed === "bigint") return seed >= 0n ? null : `seed must be a whole number, 0 or more; got ${seed}`;
  if (typeof seed === "number" && Number.isInteger(seed) && seed >= 0) return null;
  return `seed must be a whole number, 0 or more; got ${String(seed)}`;
}

/**
 * numpy's `Generator(PCG64(seed))` (core/recovery.py's `device_rng`): the device's randomness for
 * one generation in sampling mode. `random()` gives the doubles numpy's `Generator.random()` does,
 * in the same order.
 */
export class DeviceRng implements UniformSource {
  private state: bigint;
  private readonly inc: bigint;

  constructor(seed: number | bigint = 0) {
    const problem = seedProblem(seed);
    if (problem !== null) throw new RangeError(problem);
    const [s0, s1, i0, i1] = seedState(BigInt(seed));
    // pcg64_set_seed: initstate = (s0 << 64) | s1, initseq = (i0 << 64) | i1; pcg_setseq_128_srandom_r.
    this.inc = ((((i0! << 64n) | i1!) << 1n) | 1n) & MASK128;
    this.state = 0n;
    this.step();
    this.state = (this.state + ((s0! << 64n) | s1!)) & MASK128;
    this.step();
  }

  private step(): void {
    this.state = (this.state * PCG_MULTIPLIER + this.inc) & MASK128;
  }

  /** The next 64 bits: step, then XSL-RR (the high and low halves xored, rotated by the top 6 bits). */
  nextUint64(): bigint {
    this.step();
    const x = ((this.state >> 64n) ^ this.state) & MASK64;
    const rot = this.state >> 122n;
    return ((x >> rot) | (x << ((64n - rot) & 63n))) & MASK64;
  }

  /** A double in [0, 1): the top 53 bits of the next 64, times 2^-53 (numpy's `next_double`). */
  random(): number {
    return Number(this.nextUint64() >> 11n) * 2 ** -53;
  }
}

/** Weights are summed in blocks of this many, then cumulated within the one block a draw falls in
 * (core/recovery.py's `DRAW_BLOCK`). */
export const DRAW_BLOCK = 1024;

/**
 * The float64 sum of `n` float32 values from `start`, in numpy's order (its pairwise summation,
 * numpy/_core/src/umath/loops_utils.h.src, which `sum(dtype=float64)` uses): fewer than 8 in
 * sequence; up to 128 in eight interleaved accumulators, combined as ((r0+r1)+(r2+r3))+((r4+r5)+
 * (r6+r7)), then the rest in sequence; more split at half rounded down to a multiple of 8. numpy
 * adds the result to the reduction's identity, 0.
 */
export function pairwiseSum(xs: ArrayLike<number>, start: number, n: number): number {
  if (n < 8) {
    let res = 0;
    for (let i = 0; i < n; i++) res += xs[start + i]!;
    return res;
  }
  if (n <= 128) {
    const r = [0, 1, 2, 3, 4, 5, 6, 7].map((j) => xs[start + j]!);
    let i = 8;
    for (; i < n - (n % 8); i += 8) for (let j = 0; j < 8; j++) r[j] = r[j]! + xs[start + i + j]!;
    let res = (r[0]! + r[1]! + (r[2]! + r[3]!)) + (r[4]! + r[5]! + (r[6]! + r[7]!));
    for (; i < n; i++) res += xs[start + i]!;
    return res;
  }
  let n2 = Math.floor(n / 2);
  n2 -= n2 % 8;
  return pairwiseSum(xs, start, n2) + pairwiseSum(xs, start + n2, n - n2);
}

/** The float64 sum of each block of `DRAW_BLOCK` weights (the last may be shorter), as numpy sums them. */
export function blockSums(weights: Float32Array): Float64Array {
  const blocks = Math.ceil(weights.length / DRAW_BLOCK);
  const sums = new Float64Array(blocks);
  for (let b = 0; b < blocks; b++) {
    const start = b * DRAW_BLOCK;
    sums[b] = 0 + pairwiseSum(weights, start, Math.min(DRAW_BLOCK, weights.length - start));
  }
  return sums;
}

/**
 * The first index whose cumulative weight (summed in float64) exceeds `uniform` (in [0, 1)) times
 * the total: an entry of weight 0 is never drawn. Two levels as core/recovery.py's `inverse_cdf`:
 * the blocks' cumulative sums, then the cumulative sum inside the one block the target falls in; if
 * rounding between a block's sum and its own cumulative sum puts the target at the block's end, the
 * last entry with weight, there or before it.
 */
export function inverseCdf(weights: Float32Array, uniform: number): number {
  if (weights.length === 0) throw new RangeError("no weights to draw from");
  const ends = blockSums(weights);
  for (let b = 1; b < ends.length; b++) ends[b] = ends[b - 1]! + ends[b]!; // np.cumsum
  const target = uniform * ends[ends.length - 1]!;
  // searchsorted(ends, target, side="right"): the first end above the target (ends never decrease).
  let lo = 0;
  let hi = ends.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (ends[mid]! <= target) lo = mid + 1;
    else hi = mid;
  }
  const block = Math.min(lo, ends.length - 1);
  const start = block * DRAW_BLOCK;
  const stop = Math.min(start + DRAW_BLOCK, weights.length);
  const inBlock = target - (block > 0 ? ends[block - 1]! : 0);
  let acc = 0;
  for (let i = start; i < stop; i++) {
    acc += weights[i]!;
    if (acc > inBlock) {
      if (weights[i]! > 0) return i;
      break;
    }
  }
  for (let i = stop - 1; i >= 0; i--) if (weights[i]! > 0) return i;
  throw new RangeError("every weight is 0: nothing to draw");
}

/** Index of the largest score, the first on ties (greedy decoding, and `choose` without sampling). */
export function argmax(scores: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < scores.length; i++) if (scores[i]! > scores[best]!) best = i;
  return best;
}

/**
 * Greedy: the index of the largest score, the first on ties. Sampling: a draw from softmax(scores /
 * temperature) at one uniform from `rng`, as core/recovery.py's `choose`: the scores in float32,
 * divided by float32(temperature) unless it is 1 (a score pushed past float32's range is -inf:
 * weight 0), the weights exp(scaled - max) in float32 (the largest exactly 1), then `inverseCdf`.
 * If every scaled score is -inf there are no weights: the first of the largest scores, as greedy.
 * NaN is refused (a RangeError).
 */
export function choose(scores: ArrayLike<number>, sampling: boolean, temperature = 1, rng: UniformSource | null = null): number {
  const n = scores.length;
  if (n === 0) throw new RangeError("no scores to choose from");
  const x = Float32Array.from(scores);
  for (let i = 0; i < n; i++) if (Number.isNaN(x[i])) throw new RangeError("the scores hold NaN: no token can be ranked or drawn");
  if (!sampling) return argmax(x);
  if (rng === null) throw new RangeError("a sampled choice needs a source of uniforms");
  const t = Math.fround(temperature);
  const scaled = temperature === 1 ? x : x.map((s) => s / t); // Float32Array.map rounds each to float32
  let max = -Infinity;
  for (let i = 0; i < n; i++) if (scaled[i]! > max) max = scaled[i]!;
  if (!Number.isFinite(max)) return argmax(x);
  // numpy's float32 exp may be an ulp or two from this (the header says what that changes).
  const weights = new Float32Array(n);
  for (let i = 0; i < n; i++) weights[i] = Math.exp(Math.fround(scaled[i]! - max));
  return inverseCdf(weights, rng.random());
}

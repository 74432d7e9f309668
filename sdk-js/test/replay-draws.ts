/**
 * The replayer of conformance/v1/steering/draws.json (tools/conformance/draws.py): the device's
 * generator, `choose`, `inverseCdf` and draws in sequence (src/sampling.ts), every number compared
 * exactly: the doubles of a stream, the float64 block sums and every index.
 */
import { blockSums, choose, DeviceRng, inverseCdf, type UniformSource } from "../src/sampling.js";
import { RULED_OUT } from "../src/steering.js";
import type { Result } from "./replay-wire.js";
import { num, type Json } from "./vectors.js";

const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

/** Doubles compared bit for bit (JSON numbers are Python's repr: they parse back exactly). */
const sameDoubles = (got: ArrayLike<number>, want: number[]): boolean =>
  got.length === want.length && want.every((w, i) => Object.is(got[i], w));

/** A generator whose next draw is the given uniform. */
const fixed = (u: number): UniformSource => ({ random: () => u });

/** `recipe_scores`: float32(-scale · u · u) per entry (or 0, flat), then -inf and RULED_OUT by index. */
export function recipeScores(r: Json): Float32Array {
  const n: number = r.size;
  const x = new Float32Array(n);
  if (r.shape === "random") {
    const rng = new DeviceRng(BigInt(r.seed));
    for (let i = 0; i < n; i++) {
      const u = rng.random();
      x[i] = -r.scale * u * u;
    }
  } else if (r.shape !== "flat") throw new Error(`unknown recipe shape ${r.shape}`);
  for (let i = 0; i < n; i++) {
    if (i % r.minus_inf[0] === r.minus_inf[1] || i >= n - r.tail) x[i] = -Infinity;
    else if (i % r.ruled_out[0] === r.ruled_out[1]) x[i] = RULED_OUT;
  }
  return x;
}

/** `recipe_weights`: float32(((u·u)²)²) per entry, 0 by index and for the tail. */
export function recipeWeights(r: Json): Float32Array {
  const n: number = r.size;
  const rng = new DeviceRng(BigInt(r.seed));
  const w = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const u = rng.random();
    const a = u * u;
    const b = a * a;
    w[i] = i % r.zero[0] === r.zero[1] || i >= n - r.tail ? 0 : b * b;
  }
  return w;
}

function outcome(v: Json): Json {
  switch (v.type) {
    case "rng": {
      const rng = new DeviceRng(BigInt(v.seed));
      return { random: Array.from({ length: v.count }, () => rng.random()) };
    }
    case "choose": {
      const scores = v.recipe !== null ? recipeScores(v.recipe) : Float32Array.from(v.scores.map(num));
      if (!v.sampling) return { indices: [choose(scores, false, v.temperature)] };
      return { indices: v.uniforms.map((u: number) => choose(scores, true, v.temperature, fixed(u))) };
    }
    case "inverse-cdf": {
      const w = recipeWeights(v.recipe);
      return { block_sums: Array.from(blockSums(w)), indices: v.uniforms.map((u: number) => inverseCdf(w, u)) };
    }
    case "sequence": {
      const rng = new DeviceRng(BigInt(v.seed));
      return { indices: v.rows.map((row: (number | string)[]) => choose(row.map(num), true, v.temperature, rng)) };
    }
    default:
      throw new Error(`unknown vector type ${v.type}`);
  }
}

export function replayDraws(doc: Json): Result[] {
  return doc.vectors.map((v: Json): Result => {
    let got: Json;
    try {
      got = outcome(v);
    } catch (err) {
      return [v.name, false, String(err)];
    }
    const e = v.expected;
    const ok =
      v.type === "rng"
        ? sameDoubles(got.random, e.random)
        : same(got.indices, e.indices) && (v.type !== "inverse-cdf" || sameDoubles(got.block_sums, e.block_sums));
    return [v.name, ok, ok ? "" : JSON.stringify(got).slice(0, 600)];
  });
}

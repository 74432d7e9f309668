/** Reading conformance/v1 (the README's rules): JSON numbers, and "nan", "inf", "-inf" as strings. */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { join } from "node:path";

/** The repository's conformance/v1, seen from the compiled test (sdk-js/dist/test/). */
export const CONFORMANCE = fileURLToPath(new URL("../../../conformance/v1/", import.meta.url));

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Json = any;

export function load(file: string): Json {
  return JSON.parse(readFileSync(join(CONFORMANCE, file), "utf8"));
}

export function num(x: number | string): number {
  if (x === "nan") return NaN;
  if (x === "inf") return Infinity;
  if (x === "-inf") return -Infinity;
  if (typeof x !== "number") throw new Error(`not a number: ${String(x)}`);
  return x;
}

export function enc(x: number): number | string {
  if (Number.isNaN(x)) return "nan";
  if (x === Infinity) return "inf";
  if (x === -Infinity) return "-inf";
  return x;
}

/** Computed floats within 1e-5 (README: the same float32 operations in another order may differ). */
export function closeFloats(got: number[] | null, expected: (number | string)[] | null): boolean {
  if (got === null || expected === null) return got === expected;
  if (got.length !== expected.length) return false;
  return got.every((g, i) => {
    const e = num(expected[i]!);
    if (!Number.isFinite(e) || !Number.isFinite(g)) return Object.is(g, e) || (Number.isNaN(g) && Number.isNaN(e));
    return Math.abs(g - e) <= 1e-5;
  });
}

/** Counts of vectors replayed and passed, by file, printed at the end of the run. */
export const tally = new Map<string, { passed: number; failed: string[] }>();

export function record(file: string, name: string, ok: boolean, detail = ""): void {
  const t = tally.get(file) ?? { passed: 0, failed: [] };
  if (ok) t.passed += 1;
  else t.failed.push(`${name}${detail ? `: ${detail}` : ""}`);
  tally.set(file, t);
}

/**
 * The device's repetition stop, as core/repetition.py: no token that would complete an n-gram the
 * generated text already holds (the prompt and the retrieved history are not counted). A device
 * setting, never sent; the verifier's ratio test does not read the device's distribution, so it
 * stays exact for the stopped one (docs/algorithm.md, "The repetition stop").
 */
import type { DraftSequence } from "./session.js";

/** Why `n` is not a repetition stop's n-gram length (0: off), or null. */
export function noRepeatProblem(n: number): string | null {
  if (Number.isInteger(n) && (n === 0 || n >= 2)) return null;
  return `noRepeatNgram must be 0 (off) or a whole length of 2 tokens or more; got ${String(n)} (1 would forbid every token the text already holds)`;
}

/** The tokens that, appended to `tokens`, would complete an n-gram that `tokens` already holds
 * (ascending, no duplicates; none for n 0 or a text shorter than n). */
export function repeatingTokens(tokens: readonly number[], n: number): number[] {
  if (n < 2 || tokens.length < n) return [];
  const start = tokens.length - n + 1; // the last n - 1 tokens begin here
  const out = new Set<number>();
  for (let i = 0; i + n - 1 < tokens.length; i++) {
    let same = true;
    for (let j = 0; j < n - 1 && same; j++) same = tokens[i + j] === tokens[start + j];
    if (same) out.add(tokens[i + n - 1]!);
  }
  return [...out].sort((a, b) => a - b);
}

/** Whether appending `continuation` (a multi-token steering candidate: each token in turn) to
 * `tokens` repeats an n-gram of the text as it grows. */
export function completesRepeat(tokens: readonly number[], continuation: readonly number[], n: number): boolean {
  const text = [...tokens];
  for (const token of continuation) {
    if (repeatingTokens(text, n).includes(token)) return true;
    text.push(token);
  }
  return false;
}

/** Per steering candidate, whether appending it to `tokens` repeats an n-gram (`completesRepeat`):
 * the tokens that repeat after `tokens` are found once for all of them, and only a multi-token
 * candidate whose first token passes is followed further. */
export function repeatingCandidates(tokens: readonly number[], candidates: readonly (readonly number[])[], n: number): boolean[] {
  const first = new Set(repeatingTokens(tokens, n));
  return candidates.map((c) => first.has(c[0]!) || (c.length > 1 && completesRepeat([...tokens, c[0]!], c.slice(1), n)));
}

/** A drafter's sequence that also keeps its token IDs, which the stop reads (a backend's own
 * sequence need not expose them). */
export class TrackedSequence implements DraftSequence {
  readonly ids: number[];
  constructor(
    private readonly inner: DraftSequence,
    prefix: readonly number[],
  ) {
    this.ids = [...prefix];
  }
  get length(): number {
    return this.inner.length;
  }
  nextLogprobs(): Promise<Float32Array> {
    return this.inner.nextLogprobs();
  }
  push(tokens: number[]): void {
    this.inner.push(tokens);
    this.ids.push(...tokens);
  }
  truncate(n: number): void {
    this.inner.truncate(n);
    this.ids.length = n;
  }
}

/**
 * A drafter that writes a fixed text in a real tokenizer's vocabulary (the default bundle's), for
 * the guarded session's tests: its next token is the script's at its position, then
 * end-of-sequence, so a rolled-back or looked-ahead token is drafted again the same way.
 */
import { defaultBundlePath, promptRendererOf } from "../src/node/bundle.js";
import type { DraftSequence, SessionDrafter } from "../src/session.js";
import type { HfTokenizer } from "../src/guard/tokenizer.js";

export const DEFAULT_SPECIALIST = "qwen2.5-coder-0.5b-instruct";

/** The default bundle's tokenizer, as the device's guard reads it (`make install` builds the bundle). */
export async function defaultTokenizer(): Promise<HfTokenizer> {
  const folder = defaultBundlePath(DEFAULT_SPECIALIST, "int4");
  const renderer = await promptRendererOf(folder).catch((err: unknown) => {
    throw new Error(`the guard's tests need the default bundle at ${folder}: build it (make install): ${String(err)}`);
  });
  return renderer.guardTokenizer();
}

class ScriptSequence implements DraftSequence {
  private readonly ids: number[];
  constructor(
    prefix: number[],
    private readonly script: readonly number[],
    private readonly eos: number,
    private readonly rows: number,
  ) {
    this.ids = [...prefix];
    this.start = prefix.length;
  }
  private readonly start: number;
  get length(): number {
    return this.ids.length;
  }
  nextLogprobs(): Promise<Float32Array> {
    const row = new Float32Array(this.rows).fill(-20);
    row[this.script[this.ids.length - this.start] ?? this.eos] = -0.01;
    return Promise.resolve(row);
  }
  push(tokens: number[]): void {
    this.ids.push(...tokens);
  }
  truncate(n: number): void {
    this.ids.length = n;
  }
}

/** A drafter that writes `script` (token IDs) after any prompt, then `eos`. */
export function scriptedDrafter(script: readonly number[], eos: number, rows: number): SessionDrafter {
  return { sequence: (prefix: number[]) => new ScriptSequence(prefix, script, eos, rows) };
}

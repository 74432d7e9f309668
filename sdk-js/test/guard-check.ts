/** The guard tests' one check: a detector's spans and hazard on each text, as [start, end, kind]. */
import assert from "node:assert/strict";
import type { Detector } from "../src/guard/spans.js";

export type Triple = [number, number, string];
/** A text, the spans `find` gives, and the hazard (or null), each the Python detector's. */
export type Case = [text: string, find: Triple[], hazard: Triple | null];

export function checkDetector(detector: Detector, cases: Case[]): void {
  for (const [text, find, hazard] of cases) {
    assert.deepEqual(
      detector.find(text).map((s) => [s.start, s.end, s.kind]),
      find,
      `find ${JSON.stringify(text)}`,
    );
    const h = detector.hazard(text);
    assert.deepEqual(h === null ? null : [h.start, h.end, h.kind], hazard, `hazard ${JSON.stringify(text)}`);
  }
}

/** The replayer of conformance/v1/retrieval/rank.json. */
import { fitContext, ProfileIndex } from "../src/retrieval.js";
import type { Result } from "./replay-wire.js";
import { closeFloats, type Json } from "./vectors.js";

export function replayRetrieval(doc: Json): Result[] {
  const index = new ProfileIndex(doc.profile);
  return doc.vectors.map((v: Json): Result => {
    const scores = index.score(v.query);
    const order = index.ranking(v.query);
    const examples = fitContext(index.retrieve(v.query, v.n), v.max_chars);
    const e = v.expected;
    const ok =
      closeFloats(scores, e.scores) &&
      JSON.stringify(order) === JSON.stringify(e.order) &&
      JSON.stringify(examples) === JSON.stringify(e.examples);
    return [v.name, ok, ok ? "" : JSON.stringify({ order, scores: scores.slice(0, 8), examples }).slice(0, 600)];
  });
}

/**
 * The TypeScript device's side of bench/guard_parity.py: every case of a cases file run through the
 * device's decision path as bench/guard_recall.py's `run_text` runs it on the Python device (the
 * text drafted K tokens a round, the cloud accepting every draft, each round planned by
 * `planUplink` on a fresh session of the case's guard), writing which token indices went up in the
 * clear. Scoring is the Python bench's, on both devices' outcomes alike.
 *
 *     node dist/test/guard-parity.js CASES.json OUT.json
 */
import { readFileSync, writeFileSync } from "node:fs";
import { defaultBundlePath, promptRendererOf } from "../src/node/bundle.js";
import { EgressGuard } from "../src/guard/guard.js";
import type { Tokenizer } from "../src/guard/spans.js";
import { replaySession } from "./replay-guard.js";
import type { Json } from "./vectors.js";

/** Token indices of `ids` that went up in the clear (`run_text`'s `sent`): the session of
 * `replaySession`, the text ending in `eos`, no pending recovery, a fresh record of what went up. */
export async function runText(guard: EgressGuard, tokenizer: Tokenizer, ids: readonly number[], k: number, eos: number): Promise<number[]> {
  const all = [...ids, eos];
  const sent = new Set<number>();
  for (const r of await replaySession(guard.newSession(), tokenizer, all, eos, k, 0)) {
    if (r.keep_local) break;
    for (let i = r.at + r.kept - r.draft.length; i < r.at + r.kept; i++) sent.add(i);
  }
  sent.delete(all.length - 1);
  return [...sent].sort((a, b) => a - b);
}

async function main(): Promise<void> {
  const [casesFile, outFile] = process.argv.slice(2);
  if (casesFile === undefined || outFile === undefined) throw new Error("usage: guard-parity.js CASES.json OUT.json");
  const doc: Json = JSON.parse(readFileSync(casesFile, "utf8"));
  // The tokenizer is every precision's; the device's guard reads drafts through the renderer's.
  const tokenizer = (await promptRendererOf(defaultBundlePath(doc.bundle, "int4"))).guardTokenizer();
  const start = performance.now();
  const guards = doc.profiles.map((p: Json) =>
    EgressGuard.forProfile(p.history, tokenizer, { identities: p.identities, canaries: p.canaries }).forPrompt(doc.prompt),
  );
  const sent: number[][] = [];
  for (const c of doc.cases) sent.push(await runText(guards[c.profile], tokenizer, c.ids, doc.draft_len, doc.eos_id));
  writeFileSync(outFile, JSON.stringify({ sent, seconds: (performance.now() - start) / 1000 }));
}

await main();

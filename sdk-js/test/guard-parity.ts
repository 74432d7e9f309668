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
import { join } from "node:path";
import { defaultBundlePath } from "../src/node/bundle.js";
import { EgressGuard } from "../src/guard/guard.js";
import type { Tokenizer } from "../src/guard/spans.js";
import { HfTokenizer } from "../src/guard/tokenizer.js";
import { planUplink } from "../src/guard/uplink_guard.js";
import type { Json } from "./vectors.js";

/** Token indices of `ids` that went up in the clear (`run_text`'s `sent`). */
export async function runText(guard: EgressGuard, tokenizer: Tokenizer, ids: readonly number[], k: number, eos: number): Promise<number[]> {
  const session = guard.newSession(); // each text is a session of its own
  const all = [...ids, eos];
  const sent = new Set<number>();
  let p = 0;
  while (p < all.length) {
    const draft = all.slice(p, p + k);
    const script = all.slice(p + draft.length)[Symbol.iterator]();
    const plan = await planUplink(session, tokenizer, all.slice(0, p), [], draft, {
      more: async () => {
        const next = script.next();
        return next.done ? null : next.value;
      },
      eosIds: new Set([eos]),
      draftLen: k,
    });
    if (plan.keepLocal) break;
    for (let i = p + plan.kept - plan.draft.length; i < p + plan.kept; i++) sent.add(i);
    p += plan.kept;
  }
  sent.delete(all.length - 1);
  return [...sent].sort((a, b) => a - b);
}

async function main(): Promise<void> {
  const [casesFile, outFile] = process.argv.slice(2);
  if (casesFile === undefined || outFile === undefined) throw new Error("usage: guard-parity.js CASES.json OUT.json");
  const doc: Json = JSON.parse(readFileSync(casesFile, "utf8"));
  const folder = defaultBundlePath(doc.bundle, "int4") // the tokenizer is every precision's;
  const read = (name: string): Record<string, unknown> => JSON.parse(readFileSync(join(folder, name), "utf8"));
  const tokenizer = new HfTokenizer(read("tokenizer.json"), read("tokenizer_config.json"));
  const start = performance.now();
  const guards = doc.profiles.map((p: Json) =>
    EgressGuard.forProfile(p.history, tokenizer, { identities: p.identities, canaries: p.canaries }).forPrompt(doc.prompt),
  );
  const sent: number[][] = [];
  for (const c of doc.cases) sent.push(await runText(guards[c.profile], tokenizer, c.ids, doc.draft_len, doc.eos_id));
  writeFileSync(outFile, JSON.stringify({ sent, seconds: (performance.now() - start) / 1000 }));
}

await main();

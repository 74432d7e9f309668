/**
 * The TypeScript device generating against a live verifier, one query at a time, for
 * bench/sdk_js_live.py (which runs the Python device beside it on the same queries):
 *
 *   node dist/test/live-generate.js CONFIG.json < jobs.jsonl
 *
 * CONFIG.json: {bundle, target, pins, cert, key, eos_ids, vocab_size, width, threads,
 * round_timeout_ms, guard}. Loads the bundle as the device does (every file's hash checked, the tokenizer
 * and chat template, the int4 ONNX drafter) once, prints `{"ready": ...}`, then reads one job a
 * line from stdin, `{id, prompt, profile: [{subject, body}], context_entries, context_chars,
 * max_new_tokens, guard_items}`, and answers each with one JSON line. The device does its own retrieval
 * (`ProfileIndex`, `fitContext`) and rendering (`PromptRenderer`) from the prompt and the profile's
 * entries, as the Python device's `Specialist` does, and reports the IDs it rendered so the caller
 * can hold them to the Python device's. `guard` is the egress guard's setting (`placeholder`,
 * `keep-local` or `off`), built per job from `guard_items` (the profile file's raw entries, trailers
 * and all, read by `guardProfileOf` as the Python device reads them) as `sdk generate` builds it:
 * the prompt redacted, every round planned, the decisions reported. Greedy, `SessionParams()` defaults, over one
 * `GrpcTransport` (mutual TLS, the pins file's anchors only). Node-only: it lives in test/, never
 * in the React-Native-safe core.
 */
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { guardGeneration } from "../src/guard/guarded.js";
import { guardProfileOf, type ProfileItem } from "../src/guard/profile.js";
import { guardSetting } from "../src/guard/uplink_guard.js";
import { openBundleFolder, promptRendererOf } from "../src/node/bundle.js";
import { loadOnnxDrafter } from "../src/node/drafter.js";
import { GrpcTransport } from "../src/node/grpc.js";
import { fitContext, ProfileIndex, type ProfileEntry } from "../src/retrieval.js";
import { generate, type GuardedSession } from "../src/session.js";
import { DEFAULT_PARAMS } from "../src/wire.js";

interface Config {
  bundle: string;
  target: string;
  pins: string;
  cert: string;
  key: string;
  eos_ids: number[];
  vocab_size: number;
  width: number;
  threads: number;
  round_timeout_ms: number;
  guard: string;
}

interface Job {
  id: string;
  prompt: string;
  profile: ProfileEntry[];
  context_entries: number;
  context_chars: number;
  max_new_tokens: number;
  guard_items: ProfileItem[];
}

function emit(obj: unknown): void {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

async function main(): Promise<void> {
  const configFile = process.argv[2];
  if (configFile === undefined) throw new Error("usage: live-generate.js CONFIG.json < jobs.jsonl");
  const c = JSON.parse(readFileSync(configFile, "utf8")) as Config;
  const t = performance.now();
  await openBundleFolder(c.bundle); // the manifest's hashes, every file
  const renderer = await promptRendererOf(c.bundle);
  const drafter = await loadOnnxDrafter(c.bundle, { threads: c.threads });
  const tokenizer = renderer.guardTokenizer();
  const transport = new GrpcTransport({ target: c.target, pins: c.pins, cert: c.cert, key: c.key, connectTimeoutMs: 10_000 });
  emit({ ready: true, load_s: (performance.now() - t) / 1000 });
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (line.trim() === "") continue;
    const job = JSON.parse(line) as Job;
    const start = performance.now();
    // The device's own retrieval and rendering: what the Python `Specialist` does in `generate`.
    const index = new ProfileIndex(job.profile);
    const examples = job.profile.length > 0 ? fitContext(index.retrieve(job.prompt, job.context_entries), job.context_chars) : [];
    const privateIds = renderer.renderPrompt(job.prompt, examples);
    // The guard `sdk generate` runs: its profile from the raw entries, the prompt redacted.
    const guard = guardSetting(guardProfileOf(job.guard_items), tokenizer, c.guard);
    let session: GuardedSession | "off" = "off";
    let publicIds = renderer.publicPromptIds(job.prompt);
    if (guard !== null) ({ session, publicIds } = guardGeneration(guard, tokenizer, job.prompt));
    const g = await generate(
      drafter,
      privateIds,
      publicIds,
      DEFAULT_PARAMS,
      { guard: session, maxNewTokens: job.max_new_tokens, eosIds: new Set(c.eos_ids), vocabSize: c.vocab_size, width: c.width, roundTimeoutMs: c.round_timeout_ms },
      transport,
    );
    const wall = (performance.now() - start) / 1000;
    emit({
      id: job.id,
      token_ids: g.tokenIds,
      text: renderer.decode(g.tokenIds),
      private_ids: privateIds,
      public_ids: publicIds,
      examples: examples.map((e) => e.subject),
      stats: g.stats,
      // As the Python device's stats.extra names them (guard_prompt_redact, guard_placeholder, ...).
      guard: Object.fromEntries(Object.entries(g.stats.guardDecisions).map(([k, v]) => [k.replaceAll("-", "_"), v])),
      wall_s: wall,
    });
  }
  transport.close();
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});

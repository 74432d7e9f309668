/**
 * One TypeScript device drafting alone, for bench/sdk_js_device.py (which runs it as a child
 * beside the Python device's drafter, so each process's peak RSS is its own):
 *
 *   node dist/test/bench-draft.js BUNDLE IDS.json STEPS REPS THREADS
 *
 * Loads the bundle as the device does (every file's hash checked, the tokenizer and chat
 * template, the int4 ONNX drafter), prefills the token IDs of IDS.json, drafts one untimed
 * warm-up round, then REPS rounds of STEPS greedy draft steps, each round rolled back to the
 * prompt first. A draft step is one forward of the last drafted token over the cached prefix and
 * the argmax of its log-probabilities, as the session loop drafts. The first token of a round is
 * read from the prompt's kept row (no forward), so each round drafts STEPS + 1 tokens. Prints one
 * JSON line. Node-only: it lives in test/, never in the React-Native-safe core.
 */
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import ort from "onnxruntime-node";
import { openBundleFolder, promptRendererOf } from "../src/node/bundle.js";
import { loadOnnxDrafter } from "../src/node/drafter.js";
import { logSoftmax, type OnnxSequence } from "../src/drafter.js";

function argmax(row: Float32Array): number {
  let best = 0;
  for (let j = 1; j < row.length; j++) if (row[j]! > row[best]!) best = j;
  return best;
}

/** One round from the prompt: the token its kept row gives, then `steps` timed draft steps. */
async function round(seq: OnnxSequence, prompt: number, steps: number, stepMs: number[] | null): Promise<number[]> {
  seq.truncate(prompt);
  const drafted = [argmax(await seq.nextLogprobs())];
  for (let k = 0; k < steps; k++) {
    const start = performance.now();
    seq.push([drafted[drafted.length - 1]!]);
    drafted.push(argmax(await seq.nextLogprobs()));
    stepMs?.push(performance.now() - start);
  }
  return drafted;
}

/** The kernel's peak resident set of this process (kB -> MB), read at the end of the run. */
function vmHwmMb(): number | null {
  const line = readFileSync("/proc/self/status", "utf8")
    .split("\n")
    .find((l) => l.startsWith("VmHWM:"));
  return line === undefined ? null : Number(line.split(/\s+/)[1]) / 1024;
}

async function main(): Promise<void> {
  const [bundle, idsFile, stepsArg, repsArg, threadsArg] = process.argv.slice(2);
  if (bundle === undefined || idsFile === undefined) throw new Error("usage: bench-draft.js BUNDLE IDS.json STEPS REPS THREADS");
  const ids = JSON.parse(readFileSync(idsFile, "utf8")) as number[];
  const steps = Number(stepsArg ?? 32);
  const reps = Number(repsArg ?? 3);
  const threads = Number(threadsArg ?? 2);

  let t = performance.now();
  await openBundleFolder(bundle); // the manifest's hashes, every file
  const openMs = performance.now() - t;
  t = performance.now();
  await promptRendererOf(bundle); // the tokenizer and chat template a generation renders with
  const tokenizerMs = performance.now() - t;
  t = performance.now();
  const drafter = await loadOnnxDrafter(bundle, { threads });
  const drafterMs = performance.now() - t;
  const ready = Date.now() / 1000; // the parent counts load from its spawn to here

  const seq = drafter.sequence(ids);
  t = performance.now();
  await seq.nextLogprobs();
  const prefillMs = performance.now() - t;
  const warmup = await round(seq, ids.length, steps, null);
  const stepMs: number[] = [];
  const rounds: number[][] = [];
  for (let r = 0; r < reps; r++) rounds.push(await round(seq, ids.length, steps, stepMs));
  // The step's work outside the runtime, alone: log-softmax and argmax of one vocabulary row.
  const row = await seq.nextLogits();
  const rowMs: number[] = [];
  for (let i = 0; i < 60; i++) {
    const start = performance.now();
    argmax(logSoftmax(row));
    if (i >= 10) rowMs.push(performance.now() - start);
  }
  const same = rounds.every((d) => d.join(",") === warmup.join(","));
  process.stdout.write(
    JSON.stringify({
      runtime: `onnxruntime-node ${ort.env.versions.node ?? "?"} on Node ${process.versions.node}`,
      ready_unix: ready,
      load_ms: { open_verify: openMs, tokenizer: tokenizerMs, drafter: drafterMs },
      prefill_ms: prefillMs,
      step_ms: stepMs,
      row_ms: rowMs,
      vocab: row.length,
      drafted: warmup,
      rounds_agree: same,
      vm_hwm_mb: vmHwmMb(),
      // Where Node's share of the memory sits at the end (V8's heap holds the parsed tokenizer).
      node_memory_mb: Object.fromEntries(Object.entries(process.memoryUsage()).map(([k, v]) => [k, v / 2 ** 20])),
    }) + "\n",
  );
}

await main();

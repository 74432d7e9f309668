/**
 * Every file of conformance/v1 replayed through the TypeScript device, each vector's decision
 * compared with the Python SDK's (README's float rules). A file with no replayer fails the run:
 * nothing is skipped silently. The pass counts by file are printed at the end.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { load, record, tally } from "./vectors.js";
import {
  replayCandidates,
  replayCosignatures,
  replayDownlinks,
  replayRecovery,
  replaySessions,
  replayUplinks,
  replayVerify,
  type Result,
} from "./replay-wire.js";
import { replayWitness } from "./replay-witness.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const REPLAYERS: Record<string, (doc: any) => Result[]> = {
  "wire/uplinks.json": replayUplinks,
  "wire/downlinks.json": replayDownlinks,
  "wire/cosignatures.json": replayCosignatures,
  "wire/sessions.json": replaySessions,
  "steering/verify.json": replayVerify,
  "steering/candidates.json": replayCandidates,
  "steering/recovery.json": replayRecovery,
  "witness/decisions.json": replayWitness,
};

for (const [file, replay] of Object.entries(REPLAYERS)) {
  test(`conformance/v1/${file}`, () => {
    const doc = load(file);
    const results = replay(doc);
    assert.equal(results.length, doc.vectors.length);
    for (const [name, ok, detail] of results) record(file, name, ok, detail);
    const failed = results.filter(([, ok]) => !ok).map(([name, , detail]) => `${name}: ${detail}`);
    assert.deepEqual(failed, [], `${failed.length} of ${results.length} vectors differ`);
  });
}

after(() => {
  const lines = [...tally].map(([file, t]) => `  ${file}: ${t.passed}/${t.passed + t.failed.length} passed`);
  console.log(`conformance/v1 replay, by file:\n${lines.join("\n")}`);
});

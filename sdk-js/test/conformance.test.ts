/**
 * Every file of conformance/v1 replayed through the TypeScript device, each vector's decision
 * compared with the Python SDK's (README's float rules). A file with no replayer fails the run:
 * nothing is skipped silently; a file the TypeScript device cannot replay yet is named in
 * NOT_REPLAYED, shown as a skipped test with the reason and printed with the counts at the end.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { sha256 } from "@noble/hashes/sha2.js";
import { toHex } from "../src/bytes.js";
import { CONFORMANCE, load, record, tally } from "./vectors.js";
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
import { replayAudit } from "./replay-audit.js";
import { replayPrompts } from "./replay-prompts.js";
import { replayRetrieval } from "./replay-retrieval.js";
import { replayGuardRounds, replayGuardSpans } from "./replay-guard.js";
import { replayDraws } from "./replay-draws.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const REPLAYERS: Record<string, (doc: any) => Result[] | Promise<Result[]>> = {
  "wire/uplinks.json": replayUplinks,
  "wire/downlinks.json": replayDownlinks,
  "wire/cosignatures.json": replayCosignatures,
  "wire/sessions.json": replaySessions,
  "steering/verify.json": replayVerify,
  "steering/candidates.json": replayCandidates,
  "steering/recovery.json": replayRecovery,
  "steering/draws.json": replayDraws,
  "witness/decisions.json": replayWitness,
  "audit/cases.json": replayAudit,
  "prompts/render.json": replayPrompts,
  "retrieval/rank.json": replayRetrieval,
  "guard/spans.json": replayGuardSpans,
  "guard/rounds.json": replayGuardRounds,
};

// Files written for a part of the device the TypeScript SDK does not have yet: each is a skipped
// test naming why, never dropped from the count; it moves to REPLAYERS when its replayer lands.
const NOT_REPLAYED: Record<string, string> = {};

for (const [file, reason] of Object.entries(NOT_REPLAYED)) {
  test(`conformance/v1/${file}`, { skip: reason }, () => {});
}

for (const [file, replay] of Object.entries(REPLAYERS)) {
  test(`conformance/v1/${file}`, async () => {
    const doc = load(file);
    const results = await replay(doc);
    assert.equal(results.length, (doc.vectors ?? doc.cases).length);
    for (const [name, ok, detail] of results) record(file, name, ok, detail);
    const failed = results.filter(([, ok]) => !ok).map(([name, , detail]) => `${name}: ${detail}`);
    assert.deepEqual(failed, [], `${failed.length} of ${results.length} vectors differ`);
  });
}

after(() => {
  const lines = [...tally].map(([file, t]) => `  ${file}: ${t.passed}/${t.passed + t.failed.length} passed`);
  for (const [file, reason] of Object.entries(NOT_REPLAYED)) {
    const n = (load(file).vectors as unknown[]).length;
    lines.push(`  ${file}: 0/${n} replayed (skipped: ${reason})`);
  }
  console.log(`conformance/v1 replay, by file:\n${lines.join("\n")}`);
});

test("every file of conformance/v1/manifest.json is replayed, and each is the manifest's bytes", () => {
  const manifest = load("manifest.json");
  assert.equal(manifest.wire_package, "specsteer.v1");
  assert.equal(manifest.audit_format, "specsteer-audit-log/1");
  const cases = load("audit/cases.json").cases as { log: string; key: string | null; witness_keys?: string[] }[];
  // A log folder or key is replayed when an audit case or the witness file names it.
  const used = new Set<string>([...cases.map((c) => `${c.log}/`), "keys/"]);
  const unreplayed: string[] = [];
  for (const [file, digest] of Object.entries(manifest.files as Record<string, string>)) {
    assert.equal(toHex(sha256(readFileSync(join(CONFORMANCE, file)))), digest, `${file} differs from the manifest`);
    const replayed = file in REPLAYERS || file in NOT_REPLAYED || [...used].some((prefix) => file.startsWith(prefix));
    if (!replayed) unreplayed.push(file);
  }
  assert.deepEqual(unreplayed, [], "files of conformance/v1 that no TypeScript replayer reads");
  // A file named as not replayed must still be in the folder (a stale entry would hide nothing, but mislead).
  for (const file of Object.keys(NOT_REPLAYED)) assert.ok(file in manifest.files, `${file} is not in the manifest`);
});

/**
 * Writes an audit log with the TypeScript device, for tests/test_sdk_js_audit_log.py to check with
 * the Python `audit verify`: scripted sessions (test/fake-verifier.ts: fixed prompts, a
 * deterministic verifier, canonical frames) through `generate` and `EgressRecorder` into a log
 * directory on `fs`, signed with a key `audit keygen` wrote; with a witness signing key (`server
 * witness-key`'s NAME.witness.key) the scripted verifier cosigns each Close as the Python verifier
 * would. Prints one JSON object: records, sessions, each generation's stats.
 *
 *     node dist/test/write-log.js LOG_DIR LOG.key [WITNESS.witness.key] [--lost | --resumed | --reopen | --hold | --guarded] [--padded] [--rotate NEW.key]
 *
 * `--lost` adds a session whose verifier is lost after two rounds and no verifier takes it back;
 * `--resumed` one whose verifier is lost after two rounds and the generation resumes in a new
 * session (its Open carrying what went up and was committed); `--padded` runs every session
 * with padded frames (every round a PaddedRound); `--reopen` runs no session: it
 * opens the log (cutting a torn tail, with its `repair` record) and closes it; `--hold` opens it,
 * prints `{"held": true}` and keeps it open (its writer lock held) until stdin ends, then closes it
 * as `--reopen` does; a log another writer holds is refused (exit 1: "is open in another process");
 * `--rotate NEW.key`
 * hands the log to NEW.key (`AuditLog.rotateKey`) after the first session, and the rest run under it;
 * `--guarded` adds two sessions under the egress guard in the default tokenizer's vocabulary
 * (test/scripted-text.ts): a prompt with an email address (redacted) and a draft with one
 * (placeholder), then the same draft under keep-local.
 */
import { readFileSync } from "node:fs";
import { AuditLog } from "../src/audit/log.js";
import { EgressRecorder } from "../src/audit/recorder.js";
import { ALG_COSIGNATURE_V1, NoteSigner } from "../src/note.js";
import { loadSigningKey, logStorage } from "../src/node/files.js";
import { generate } from "../src/session.js";
import { guardGeneration } from "../src/guard/guarded.js";
import { guardForProfile } from "../src/guard/uplink_guard.js";
import { drafter, EOS, fakeVerifier, params, V } from "./fake-verifier.js";
import { defaultTokenizer, scriptedDrafter } from "./scripted-text.js";

const argv = process.argv.slice(2);
const rotateAt = argv.indexOf("--rotate");
const rotatePath = rotateAt < 0 ? undefined : argv[rotateAt + 1];
const args = argv.filter((a, i) => !a.startsWith("--") && (rotateAt < 0 || i !== rotateAt + 1));
const lost = process.argv.includes("--lost");
const resumed = process.argv.includes("--resumed");
const hold = process.argv.includes("--hold");
const reopen = hold || process.argv.includes("--reopen");
const sessionParams = { ...params, paddedFrames: process.argv.includes("--padded") };
const [dir, keyPath, witnessPath] = args;
if (dir === undefined || keyPath === undefined || (rotateAt >= 0 && rotatePath === undefined)) {
  console.error("usage: write-log.js LOG_DIR LOG.key [WITNESS.witness.key] [--lost | --resumed | --reopen | --hold | --guarded] [--padded] [--rotate NEW.key]");
  process.exit(2);
}
const witness = witnessPath === undefined ? null : NoteSigner.parse(readFileSync(witnessPath, "utf8"), ALG_COSIGNATURE_V1);
const log = AuditLog.open(logStorage(dir), loadSigningKey(keyPath), {
  device: { name: "alice", certSha256: "ab".repeat(32) },
  ...(witness === null ? {} : { witnessKey: witness.key }),
});
if (hold) {
  console.log(JSON.stringify({ held: true }));
  for await (const chunk of process.stdin) void chunk; // until the caller closes our stdin
}
const recorder = new EgressRecorder(log);
const options = { guard: "off" as const, maxNewTokens: 20, eosIds: new Set([EOS]), vocabSize: V, roundTimeoutMs: 2000, recorder };
const stats = [];
for (const [i, prompt] of (reopen ? [] : [[3, 1, 4], [7], [2, 7, 1, 8]]).entries()) {
  const g = await generate(drafter, prompt, prompt, sessionParams, options, fakeVerifier(witness));
  stats.push({ tokens: g.tokenIds.length, rounds: g.stats.rounds, fallback: g.stats.fallback, witness_faults: g.stats.witnessFaults });
  if (i === 0 && rotatePath !== undefined) log.rotateKey(loadSigningKey(rotatePath));
}
if (lost || resumed) {
  const verifier = fakeVerifier(witness, { breakAfter: 2, ...(lost ? { opens: 1 } : { faulty: 1 }) });
  const g = await generate(drafter, [5], [5], sessionParams, { ...options, eosIds: new Set<number>() }, verifier);
  stats.push({ tokens: g.tokenIds.length, rounds: g.stats.rounds, fallback: g.stats.fallback, witness_faults: g.stats.witnessFaults, resumed: g.stats.resumed });
}
if (process.argv.includes("--guarded")) {
  const tok = await defaultTokenizer();
  const eos = tok.encode("<|im_end|>")[0]!;
  const script = tok.encode("Please ask jane.doe@example.com about the failing test on the build machine.");
  const profile = { history: ["Fix the flaky timeout in the fetch test."], identities: {} };
  for (const policy of ["placeholder", "keep-local"] as const) {
    const guard = guardForProfile(profile, tok, policy, { labels: "by-kind" });
    const { session, publicIds } = guardGeneration(guard, tok, "Write the commit body for the report from jane.doe@example.com.");
    const verifier = fakeVerifier(witness, { vocabSize: tok.size, acceptAll: { steerTo: eos } });
    const opts = { ...options, guard: session, maxNewTokens: 64, eosIds: new Set([eos]), vocabSize: tok.size };
    const g = await generate(scriptedDrafter(script, eos, tok.size), publicIds, publicIds, { ...sessionParams, bonus: false }, opts, verifier);
    stats.push({ tokens: g.tokenIds.length, rounds: g.stats.rounds, fallback: g.stats.fallback, witness_faults: g.stats.witnessFaults, guard: g.stats.guardDecisions });
  }
}
log.close();
console.log(JSON.stringify({ records: log.size, stats, interrupted: log.interrupted.length }));

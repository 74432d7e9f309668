/**
 * The session loop with the egress guard (src/session.ts with src/guard/): a drafter writing a
 * text with an email address in the default tokenizer's vocabulary, against a scripted cloud that
 * accepts every draft (the leaky copy control; no bonus token, so it never has to steer). What the cloud receives must never carry the span;
 * the device's own text keeps it (placeholder) or the device finishes alone (keep-local); the
 * prompt goes up redacted; every decision is counted. As sdk/decoding.py's guarded generation.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { readFileSync } from "node:fs";
import { guardForProfile } from "../src/guard/uplink_guard.js";
import { guardGeneration } from "../src/guard/guarded.js";
import { guardProfileOf } from "../src/guard/profile.js";
import { restorePrompt } from "../src/guard/prompt_guard.js";
import { generate } from "../src/session.js";
import type { RoundFrame } from "../src/wire.js";
import { fakeVerifier, params } from "./fake-verifier.js";
import { defaultTokenizer, scriptedDrafter } from "./scripted-text.js";
import { load } from "./vectors.js";

const tok = await defaultTokenizer();
const EOS = tok.encode("<|im_end|>")[0]!;
const TEXT = "Please ask jane.doe@example.com about the failing test on the build machine.";
const SCRIPT = tok.encode(TEXT);
const PROFILE = { history: ["Fix the flaky timeout in the fetch test.", "Document the retry option."], identities: {} };

async function run(policy: "placeholder" | "keep-local", prompt = "Write the commit body.") {
  const guard = guardForProfile(PROFILE, tok, policy, { labels: "by-kind" });
  const { session, publicIds } = guardGeneration(guard, tok, prompt);
  const rounds: RoundFrame[] = [];
  const transport = fakeVerifier(null, { vocabSize: tok.size, acceptAll: { steerTo: EOS }, rounds });
  const options = { guard: session, maxNewTokens: 64, eosIds: new Set([EOS]), vocabSize: tok.size, roundTimeoutMs: 5000 };
  const g = await generate(scriptedDrafter(SCRIPT, EOS, tok.size), publicIds, publicIds, { ...params, draftLen: 4, bonus: false }, options, transport);
  // The cloud's text: every commit, placeholder and (all accepted) draft, in order.
  const cloud = tok.decode(rounds.flatMap((r) => [...r.commit, ...r.literal, ...r.draft]));
  return { g, cloud, rounds, session, publicIds };
}

test("placeholder: the cloud commits <EMAIL> where the device's text keeps the address, and no token of it goes up", async () => {
  const { g, cloud } = await run("placeholder");
  assert.equal(tok.decode(g.tokenIds), TEXT);
  assert.match(cloud, /^Please ask ?<EMAIL> about the failing test on the build machine\.$/);
  assert.ok(!cloud.includes("jane") && !cloud.includes("example"), cloud);
  assert.equal(g.stats.guardDecisions.placeholder, 1);
  assert.equal(g.stats.fallback, null);
  assert.ok(g.stats.guardChecks > 0);
});

test("keep-local: the session ends at the span on record and the device finishes the text alone", async () => {
  const { g, cloud } = await run("keep-local");
  assert.equal(g.stats.fallback, "guard-keep-local");
  assert.equal(g.stats.guardDecisions["keep-local"], 1);
  assert.equal(tok.decode(g.tokenIds), TEXT);
  assert.ok(cloud.length > 0 && TEXT.startsWith(cloud.trimEnd()), cloud);
  assert.ok(!cloud.includes("jane"), cloud);
});

test("the prompt goes up redacted, its decision counted, and the device's text gets the span back", async () => {
  const { g, session, publicIds } = await run("placeholder", "Write the commit body for the report from jane.doe@example.com.");
  assert.equal(tok.decode(publicIds), "Write the commit body for the report from <EMAIL_1>.");
  assert.equal(g.stats.guardDecisions["prompt-redact"], 1);
  assert.equal(restorePrompt(session.prompt, "Thanks, <EMAIL_1>."), "Thanks, jane.doe@example.com.");
});

test("a guard that is neither a guarded session nor \"off\" is refused before anything is sent", async () => {
  const rounds: RoundFrame[] = [];
  const transport = fakeVerifier(null, { vocabSize: tok.size, acceptAll: { steerTo: EOS }, rounds });
  for (const guard of [undefined, "placeholder", "keep-local", {}]) {
    const options = { guard, maxNewTokens: 8, eosIds: new Set([EOS]), vocabSize: tok.size } as unknown as Parameters<typeof generate>[4];
    await assert.rejects(generate(scriptedDrafter(SCRIPT, EOS, tok.size), [1], [1], params, options, transport), RangeError);
  }
  assert.deepEqual(rounds, []);
});

test("a profile's guard view (history, trailer identities) is the Python device's, as the guard vectors hold it", () => {
  // conformance/v1/guard/spans.json's "fixture-u0": the first five entries of tests/fixtures/users.jsonl's first user.
  const users = readFileSync(new URL("../../../tests/fixtures/users.jsonl", import.meta.url), "utf8").split("\n").filter((l) => l.trim());
  const entries = JSON.parse(users[0]!).profile.slice(0, 5);
  const expected = load("guard/spans.json").profiles["fixture-u0"];
  const got = guardProfileOf(entries);
  assert.deepEqual(got.history, expected.history);
  assert.deepEqual(got.identities, expected.identities);
  assert.ok(Object.keys(got.identities).length > 0);
});

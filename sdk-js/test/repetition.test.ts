/**
 * The device's repetition stop (src/repetition.ts, as core/repetition.py): the rule against brute
 * force, a recovery's candidates (left out unless every one repeats), fusion, and the drafter alone
 * under it (tests/sdk/test_repetition_stop.py holds the Python device to the same cases).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { create, toBinary } from "@bufbuild/protobuf";
import { CandidateSchema, DownlinkSchema, FusionVectorSchema } from "../src/gen/verifier_pb.js";
import { completesRepeat, noRepeatProblem, repeatingCandidates, repeatingTokens } from "../src/repetition.js";
import { generate, type GenerateOptions } from "../src/session.js";
import { applyDownlink } from "../src/steering.js";
import { VerifierLost, type Transport } from "../src/transport.js";
import { Method } from "../src/wire.js";
import { drafter, draftNext, EOS, params, V } from "./fake-verifier.js";

function bruteForce(tokens: number[], n: number): number[] {
  const out = new Set<number>();
  for (let i = 0; i + n <= tokens.length; i++) {
    const gram = tokens.slice(i, i + n);
    if (gram.slice(0, -1).join() === tokens.slice(tokens.length - n + 1).join()) out.add(gram[n - 1]!);
  }
  return [...out].sort((a, b) => a - b);
}

test("the stopped tokens are the next tokens of every earlier run of the last n - 1", () => {
  let x = 7; // a small LCG: runs over 4 tokens repeat often
  const next = (): number => (x = (x * 1103515245 + 12345) % 2 ** 31) % 4;
  for (const n of [2, 3, 5]) {
    for (let k = 0; k < 300; k++) {
      const tokens = Array.from({ length: next() * 8 }, next);
      assert.deepEqual(repeatingTokens(tokens, n), tokens.length < n ? [] : bruteForce(tokens, n), JSON.stringify(tokens));
    }
  }
  assert.deepEqual(repeatingTokens([1, 2, 1, 2], 0), []);
  const text = [5, 1, 2, 3, 1, 2];
  assert.ok(completesRepeat(text, [3], 3));
  assert.ok(!completesRepeat(text, [4, 1, 2], 3));
  assert.ok(completesRepeat([7, 8, 9, 7], [8, 9], 3)); // its second token repeats 7 8 9
  for (let k = 0; k < 300; k++) {
    const tokens = Array.from({ length: next() * 5 }, next);
    const candidates = Array.from({ length: 5 }, () => Array.from({ length: 1 + next() % 3 }, next));
    assert.deepEqual(repeatingCandidates(tokens, candidates, 3), candidates.map((c) => completesRepeat(tokens, c, 3)));
  }
  assert.equal(noRepeatProblem(6), null);
  for (const bad of [1, -1, 2.5]) assert.match(noRepeatProblem(bad)!, /noRepeatNgram must be 0 \(off\) or a whole length of 2/);
});

test("a recovery leaves out the candidates that repeat, unless every one does; fusion leaves out the stopped tokens", () => {
  const model = { nextLogprobs: () => new Float32Array(8).fill(-2), scoreContinuations: (c: number[][]) => c.map(() => -2) };
  const frame = (ids: number[][]): Uint8Array =>
    toBinary(DownlinkSchema, create(DownlinkSchema, { seq: 1, accepted: 0, candidates: ids.map((tokenIds, i) => create(CandidateSchema, { tokenIds, value: -i })) }));
  const noRepeat = { text: [4, 9, 4], n: 2 }; // 4 9 again
  const recovery = { ...params, bonus: false };
  assert.deepEqual(applyDownlink(frame([[9], [7], [3]]), [1], recovery, EOS, V, model).commitIds, [9]);
  assert.deepEqual(applyDownlink(frame([[9], [7], [3]]), [1], recovery, EOS, V, model, { noRepeat }).commitIds, [7]);
  assert.deepEqual(applyDownlink(frame([[9], [9, 3]]), [1], recovery, EOS, V, model, { noRepeat }).commitIds, [9]);
  const values = new Float32Array([0, -1, -2, -3, -4, -5, -6, -7]);
  const fused = toBinary(DownlinkSchema, create(DownlinkSchema, { seq: 1, accepted: 0, fusion: create(FusionVectorSchema, { values: new Uint8Array(values.buffer) }) }));
  const fusion = { ...params, method: Method.FUSION, draftLen: 0, alphaMilli: 0, topK: 10, bonus: false };
  assert.deepEqual(applyDownlink(fused, [], fusion, EOS, 8, model, { noRepeat: { text: [5, 0, 5, 1, 5], n: 2 } }).commitIds, [2]); // 5 0 and 5 1 again
});

test("the drafter alone under the stop: its greedy text with the stopped tokens left out, no n-gram twice", async () => {
  const unreachable: Transport = { open: () => Promise.reject(new VerifierLost("verifier-unreachable", "no verifier")) };
  const options: GenerateOptions = { guard: "off", maxNewTokens: 30, eosIds: new Set<number>(), vocabSize: V, roundTimeoutMs: 2000 };
  const plain = await generate(drafter, [7], [7], params, options, unreachable);
  assert.ok(plain.tokenIds.some((t, i) => bruteForce(plain.tokenIds.slice(0, i), 3).includes(t)), "the table must loop");
  const stopped = await generate(drafter, [7], [7], params, { ...options, noRepeatNgram: 3 }, unreachable);
  // The table's row: draftNext(last) at 0.85, every other token 0.01 (the first of them wins a tie).
  const want: number[] = [];
  let last = 7;
  while (want.length < 30) {
    const out = bruteForce(want, 3);
    const best = out.includes(draftNext(last)) ? [...Array(V).keys()].find((t) => !out.includes(t))! : draftNext(last);
    want.push((last = best));
  }
  assert.deepEqual(stopped.tokenIds, want);
  assert.ok(!stopped.tokenIds.some((t, i) => bruteForce(stopped.tokenIds.slice(0, i), 3).includes(t)));
  await assert.rejects(generate(drafter, [7], [7], params, { ...options, noRepeatNgram: 1 }, unreachable), RangeError);
});

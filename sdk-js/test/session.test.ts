/**
 * The session loop (src/session.ts) against an in-process fake verifier: every uplink is judged
 * by the wire rules (`decodeUplink`: canonical, in the vocabulary), the verifier greedily follows
 * its own "Generalist", and the device's text must be that Generalist's; a stream that breaks or
 * goes silent mid-generation leaves the drafter to finish, `stats.fallback` saying why.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { create, toBinary } from "@bufbuild/protobuf";
import { DownlinkSchema, CandidateSchema } from "../src/gen/verifier_pb.js";
import { FrameQueue, VerifierLost, type Transport, type VerifierStream } from "../src/transport.js";
import { generate } from "../src/session.js";
import { decodeUplink } from "../src/wire.js";
import { drafter, draftNext, EOS, params, targetNext, V } from "./fake-verifier.js";

/** A verifier that accepts the draft's prefix its Generalist agrees with and steers to its next token. */
function fakeVerifier(opts: { breakAfter?: number; silentAfter?: number } = {}): Transport & { log: string[] } {
  const log: string[] = [];
  return {
    log,
    open(): Promise<VerifierStream> {
      const q = new FrameQueue();
      let context: number[] = [];
      let rounds = 0;
      return Promise.resolve({
        send(frame: Uint8Array): void {
          if (q.done) throw new VerifierLost("verifier-lost", "gone");
          const f = decodeUplink(frame, V);
          log.push(f.kind);
          if (f.kind === "open") context = [...f.promptIds];
          if (f.kind !== "round") return;
          rounds += 1;
          if (opts.breakAfter !== undefined && rounds > opts.breakAfter) return q.fail(new VerifierLost("verifier-lost", "the stream broke"));
          if (opts.silentAfter !== undefined && rounds > opts.silentAfter) return;
          context.push(...f.commit);
          let accepted = 0;
          while (accepted < f.draft.length && f.draft[accepted] === targetNext(context[context.length - 1]!)) context.push(f.draft[accepted++]!);
          const next = targetNext(context[context.length - 1]!);
          const candidates = [create(CandidateSchema, { tokenIds: [next], value: -0.5 })];
          q.push(toBinary(DownlinkSchema, create(DownlinkSchema, { seq: f.seq, accepted, candidates })));
        },
        receive: (ms: number) => q.next(ms),
        close: () => Promise.resolve(),
        cancel: () => q.fail(new VerifierLost("verifier-lost", "cancelled")),
      });
    },
  };
}

function greedy(next: (x: number) => number, from: number, n: number): number[] {
  const out: number[] = [];
  let x = from;
  while (out.length < n && x !== EOS) out.push((x = next(x)));
  return out;
}

const options = { maxNewTokens: 20, eosIds: new Set([EOS]), vocabSize: V, roundTimeoutMs: 2000 };

test("the device's greedy text is the verifier's Generalist's, over canonical frames", async () => {
  const t = fakeVerifier();
  const g = await generate(drafter, [3, 1, 4], [1, 4], params, options, t);
  const want = greedy(targetNext, 4, 20);
  assert.equal(want[want.length - 1], EOS);
  assert.deepEqual(g.tokenIds, want.slice(0, -1));
  assert.equal(g.stats.fallback, null);
  assert.ok(g.stats.rounds > 1 && g.stats.recoveries > 0, JSON.stringify(g.stats));
  assert.equal(t.log[0], "open");
  assert.equal(t.log[t.log.length - 1], "close");
});

test("a verifier lost mid-generation: the drafter finishes, fallback verifier-lost", async () => {
  const whole = await generate(drafter, [7], [7], params, { ...options, eosIds: new Set<number>() }, fakeVerifier());
  const g = await generate(drafter, [7], [7], params, { ...options, eosIds: new Set<number>() }, fakeVerifier({ breakAfter: 2 }));
  assert.equal(g.stats.fallback, "verifier-lost");
  assert.equal(g.stats.rounds, 2);
  assert.equal(g.tokenIds.length, 20);
  // Up to where the lost round's draft begins, the text is the verified one; after it, the drafter's own.
  const head = whole.tokenIds.slice(0, 6);
  assert.deepEqual(g.tokenIds.slice(0, 6), head);
  const tail = g.tokenIds.slice(6);
  for (let i = 1; i < tail.length; i++) assert.equal(tail[i], draftNext(tail[i - 1]!));
});

test("a verifier that goes silent: fallback verifier-timeout", async () => {
  const g = await generate(drafter, [7], [7], params, { ...options, eosIds: new Set<number>(), roundTimeoutMs: 50 }, fakeVerifier({ silentAfter: 1 }));
  assert.equal(g.stats.fallback, "verifier-timeout");
  assert.equal(g.stats.rounds, 1);
  assert.ok(g.tokenIds.length > 0);
});

test("the verifier unreachable at Open: the drafter alone", async () => {
  const t: Transport = { open: () => Promise.reject(new VerifierLost("verifier-unreachable", "no verifier")) };
  const g = await generate(drafter, [7], [7], params, options, t);
  assert.equal(g.stats.fallback, "verifier-unreachable");
  assert.deepEqual(g.tokenIds, greedy(draftNext, 7, 20));
});

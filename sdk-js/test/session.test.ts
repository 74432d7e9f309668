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
import { toHex, fromHex } from "../src/bytes.js";
import { encodePaddedRound, generate } from "../src/session.js";
import { decodeUplink, type RoundFrame } from "../src/wire.js";
import { drafter, draftNext, EOS, params, targetNext, V } from "./fake-verifier.js";
import { load, type Json } from "./vectors.js";

/** A verifier that accepts the draft's prefix its Generalist agrees with and steers to its next token. */
/** `opens`: how many streams it takes before it is unreachable (default: any number); `breakAfter`
 * and `silentAfter` apply to the first `faulty` streams (default: all). */
function fakeVerifier(
  opts: { breakAfter?: number; silentAfter?: number; opens?: number; faulty?: number } = {},
): Transport & { log: string[]; sizes: number[]; resumes: number[][] } {
  const log: string[] = [];
  const sizes: number[] = []; // each uplink's byte length
  const resumes: number[][] = []; // each Open's resume_ids
  let opened = 0;
  return {
    log,
    sizes,
    resumes,
    open(): Promise<VerifierStream> {
      if (opts.opens !== undefined && opened >= opts.opens) return Promise.reject(new VerifierLost("verifier-unreachable", "no verifier answers"));
      const faulty = opened < (opts.faulty ?? Infinity);
      opened += 1;
      const q = new FrameQueue();
      let context: number[] = [];
      let rounds = 0;
      return Promise.resolve({
        send(frame: Uint8Array): void {
          if (q.done) throw new VerifierLost("verifier-lost", "gone");
          const f = decodeUplink(frame, V);
          log.push(f.kind);
          sizes.push(frame.length);
          if (f.kind === "open") {
            context = [...f.promptIds, ...f.resumeIds]; // the resumed text follows the prompt, unverified
            resumes.push(f.resumeIds);
          }
          if (f.kind !== "round" && f.kind !== "padded_round") return;
          rounds += 1;
          if (faulty && opts.breakAfter !== undefined && rounds > opts.breakAfter) return q.fail(new VerifierLost("verifier-lost", "the stream broke"));
          if (faulty && opts.silentAfter !== undefined && rounds > opts.silentAfter) return;
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

const options = { guard: "off" as const, maxNewTokens: 20, eosIds: new Set([EOS]), vocabSize: V, roundTimeoutMs: 2000 };

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

test("a verifier lost mid-generation and none to take it back: the drafter finishes, fallback verifier-lost", async () => {
  const whole = await generate(drafter, [7], [7], params, { ...options, eosIds: new Set<number>() }, fakeVerifier());
  const t = fakeVerifier({ breakAfter: 2, opens: 1 });
  const g = await generate(drafter, [7], [7], params, { ...options, eosIds: new Set<number>() }, t);
  assert.equal(g.stats.fallback, "verifier-lost");
  assert.equal(g.stats.resumed, 0);
  assert.deepEqual(t.resumes, [[]]);
  assert.equal(g.stats.rounds, 2);
  assert.equal(g.tokenIds.length, 20);
  // Up to where the lost round's draft begins, the text is the verified one; after it, the drafter's own.
  const head = whole.tokenIds.slice(0, 6);
  assert.deepEqual(g.tokenIds.slice(0, 6), head);
  const tail = g.tokenIds.slice(6);
  for (let i = 1; i < tail.length; i++) assert.equal(tail[i], draftNext(tail[i - 1]!));
});

test("a verifier that goes silent: fallback verifier-timeout", async () => {
  const g = await generate(drafter, [7], [7], params, { ...options, eosIds: new Set<number>(), roundTimeoutMs: 50, maxResumes: 0 }, fakeVerifier({ silentAfter: 1 }));
  assert.equal(g.stats.fallback, "verifier-timeout");
  assert.equal(g.stats.rounds, 1);
  assert.ok(g.tokenIds.length > 0);
});

test("a verifier lost mid-generation: the generation resumes in a new session whose Open carries what went up, and its text is the verifier's", async () => {
  const opts = { ...options, eosIds: new Set<number>() };
  const whole = await generate(drafter, [7], [7], params, opts, fakeVerifier());
  const t = fakeVerifier({ breakAfter: 2, faulty: 1 });
  const g = await generate(drafter, [7], [7], params, opts, t);
  assert.deepEqual(g.tokenIds, whole.tokenIds);
  assert.equal(g.stats.fallback, null);
  assert.deepEqual([g.stats.resumed, g.stats.resumeReasons], [1, "verifier-lost"]);
  assert.equal(t.log.filter((k) => k === "open").length, 2);
  assert.equal(t.log[t.log.length - 1], "close");
  // The resumed Open carries the text the first session committed, as its verifier saw it: a prefix of the answer.
  const [first, resumed] = t.resumes;
  assert.deepEqual(first, []);
  assert.ok(resumed!.length > 0 && resumed!.every((x, i) => x === whole.tokenIds[i]), `${resumed}`);
  // A verifier that keeps failing: three resumes, then the drafter finishes alone.
  const flaky = fakeVerifier({ breakAfter: 1 });
  const h = await generate(drafter, [7], [7], params, opts, flaky);
  assert.deepEqual([h.stats.resumed, h.stats.fallback], [3, "verifier-lost"]);
  assert.equal(h.stats.resumeReasons, "verifier-lost,verifier-lost,verifier-lost");
  assert.equal(h.tokenIds.length, 20);
});

/** Every PaddedRound of conformance/v1 the Python device encoded and the rules accept, decoded. */
function pythonPaddedRounds(): [hex: string, frame: RoundFrame][] {
  const hexes: string[] = [
    ...load("wire/uplinks.json").vectors.filter((v: Json) => v.expected.outcome === "valid").map((v: Json) => v.frame_hex),
    ...load("wire/sessions.json")
      .vectors.filter((v: Json) => v.name === "padded")
      .flatMap((v: Json) => v.steps.filter((s: Json) => s.dir === "up" && s.expected.length === 0).map((s: Json) => s.frame_hex)),
  ];
  const out: [string, RoundFrame][] = [];
  for (const hex of hexes) {
    const f = decodeUplink(fromHex(hex));
    if (f.kind === "padded_round") out.push([hex, f]);
  }
  return out;
}

test("a padded round is byte for byte the Python device's (conformance/v1's PaddedRounds)", () => {
  const vectors = pythonPaddedRounds();
  assert.ok(vectors.length >= 4, `only ${vectors.length} padded rounds in conformance/v1`);
  for (const [hex, f] of vectors) {
    assert.deepEqual(f.literal, [], "this device sends no literals");
    assert.deepEqual([f.slots![0], f.slots![2]], [8, 16]);
    assert.equal(toHex(encodePaddedRound(f.seq, f.commit, f.draft, f.slots![1])), hex);
  }
});

test("a padded round refuses lists longer than their slots", () => {
  assert.throws(() => encodePaddedRound(1, [1, 2, 3, 4, 5, 6, 7, 8, 9], [1], 4), /8 commit slots; got 9 tokens/);
  assert.throws(() => encodePaddedRound(1, [], [1, 2, 3, 4, 5], 4), (e) => e instanceof RangeError && /4 draft slots; got 5/.test(e.message));
  // Full slots are fine: 8 commit, K draft.
  assert.equal(decodeUplink(encodePaddedRound(3, [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4], 4), V).kind, "padded_round");
});

test("a padded session: every round a PaddedRound of one byte length, the text the unpadded session's", async () => {
  const plain = fakeVerifier();
  const want = await generate(drafter, [3, 1, 4], [1, 4], params, options, plain);
  const t = fakeVerifier();
  const g = await generate(drafter, [3, 1, 4], [1, 4], { ...params, paddedFrames: true }, options, t);
  assert.deepEqual(g.tokenIds, want.tokenIds);
  assert.equal(g.stats.fallback, null);
  assert.deepEqual([g.stats.rounds, g.stats.recoveries], [want.stats.rounds, want.stats.recoveries]);
  assert.ok(g.stats.rounds > 1 && g.stats.recoveries > 0, JSON.stringify(g.stats));
  assert.deepEqual(t.log, ["open", ...new Array<string>(g.stats.rounds).fill("padded_round"), "close"]);
  const rounds = t.sizes.slice(1, -1);
  assert.equal(new Set(rounds).size, 1, `round sizes ${rounds.join(", ")}`);
  // Unpadded, the size says how many tokens a round carries (what the padding hides).
  assert.ok(new Set(plain.sizes.slice(1, -1)).size > 1, `unpadded round sizes ${plain.sizes.join(", ")}`);
  assert.equal(g.stats.uplinkBytes, t.sizes.reduce((a, b) => a + b, 0));
});

test("the verifier unreachable at Open: the drafter alone", async () => {
  const t: Transport = { open: () => Promise.reject(new VerifierLost("verifier-unreachable", "no verifier")) };
  const g = await generate(drafter, [7], [7], params, options, t);
  assert.equal(g.stats.fallback, "verifier-unreachable");
  assert.deepEqual(g.tokenIds, greedy(draftNext, 7, 20));
});


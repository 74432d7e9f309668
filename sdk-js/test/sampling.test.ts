/**
 * Sampling in the session loop (src/session.ts with src/sampling.ts) against in-process fake
 * verifiers: a seed gives one text and another seed another, the draws come in the Python device's
 * order (drafts, then the recovery among candidates, then the drafter alone), greedy decoding is
 * what it was, a bad seed or temperature is refused before a stream opens, and nothing -inf or
 * ruled out is ever drawn. That one seed draws what numpy draws is conformance/v1/steering/draws.json's.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { create, toBinary } from "@bufbuild/protobuf";
import { CandidateSchema, DownlinkSchema, FusionVectorSchema } from "../src/gen/verifier_pb.js";
import { choose, DeviceRng, inverseCdf } from "../src/sampling.js";
import { generate, type DraftSequence, type GenerateOptions } from "../src/session.js";
import { applyDownlink, RULED_OUT } from "../src/steering.js";
import { FrameQueue, VerifierLost, type Transport, type VerifierStream } from "../src/transport.js";
import { decodeUplink, Method, type RoundFrame } from "../src/wire.js";
import { drafter, draftNext, EOS, fakeVerifier, params, TableSequence, targetNext, V } from "./fake-verifier.js";

const sampled = { ...params, sampling: true };
const options: GenerateOptions = { guard: "off", maxNewTokens: 20, eosIds: new Set<number>(), vocabSize: V, roundTimeoutMs: 2000 };
const unreachable: Transport = { open: () => Promise.reject(new VerifierLost("verifier-unreachable", "no verifier")) };

/** The steered candidates a round's answer offers: the Generalist's next token, two others, and one it rules out. */
const offered = (next: number): [number, number][] => [
  [next, -0.3],
  [(next + 1) % 14, -0.8],
  [(next + 2) % 14, -1.5],
  [(next + 3) % 14, RULED_OUT],
];

/** A verifier that accepts the draft's prefix its Generalist agrees with, then offers `offered`'s
 * four candidates; `rounds` records every round as received (its commit: the device's recovery). */
function steeringVerifier(rounds: RoundFrame[] = []): Transport {
  return {
    open(): Promise<VerifierStream> {
      const q = new FrameQueue();
      let context: number[] = [];
      return Promise.resolve({
        send(frame: Uint8Array): void {
          const f = decodeUplink(frame, V);
          if (f.kind === "open") context = [...f.promptIds];
          if (f.kind === "close") return q.end();
          if (f.kind !== "round") return;
          rounds.push(f);
          context.push(...f.commit);
          let accepted = 0;
          while (accepted < f.draft.length && f.draft[accepted] === targetNext(context[context.length - 1]!)) context.push(f.draft[accepted++]!);
          const candidates = offered(targetNext(context[context.length - 1]!)).map(([t, value]) => create(CandidateSchema, { tokenIds: [t], value }));
          q.push(toBinary(DownlinkSchema, create(DownlinkSchema, { seq: f.seq, accepted, candidates })));
        },
        receive: (ms: number) => q.next(ms),
        close: () => Promise.resolve(),
        cancel: () => q.fail(new VerifierLost("verifier-lost", "cancelled")),
      });
    },
  };
}

test("a sampled generation: one seed, one text; another seed, another text", async () => {
  const copying = () => fakeVerifier(null, { acceptAll: { steerTo: 2 } }); // the text is the drafter's own draws
  const texts = new Map<number, string>();
  for (const seed of [0, 1, 2, 3]) {
    const a = await generate(drafter, [3, 1, 4], [1, 4], sampled, { ...options, seed }, copying());
    const b = await generate(drafter, [3, 1, 4], [1, 4], sampled, { ...options, seed }, copying());
    assert.deepEqual(a.tokenIds, b.tokenIds);
    assert.equal(a.tokenIds.length, 20);
    assert.equal(a.stats.fallback, null);
    texts.set(seed, a.tokenIds.join(","));
  }
  assert.equal(new Set(texts.values()).size, 4, [...texts.values()].join("\n"));
  // A bigint seed is the same seed.
  const big = await generate(drafter, [3, 1, 4], [1, 4], sampled, { ...options, seed: 2n }, copying());
  assert.equal(big.tokenIds.join(","), texts.get(2));
});

test("the draws come in the Python device's order: a draft's tokens, no draw for one candidate, then the drafter alone", async () => {
  const seed = 5;
  const temperature = 1.3;
  const g = await generate(drafter, [7], [7], { ...sampled, draftLen: 3 }, { ...options, seed, temperature }, fakeVerifier(null, { acceptAll: { steerTo: 9 } }));
  // Replayed by hand: each round drafts 3 tokens, every one accepted, then the one steered candidate (9).
  const rng = new DeviceRng(seed);
  const seq = new TableSequence([7]);
  const want: number[] = [];
  while (want.length < 20) {
    for (let i = 0; i < 3 && want.length < 20; i++) {
      const t = choose(await seq.nextLogprobs(), true, temperature, rng);
      want.push(t);
      seq.push([t]);
    }
    if (want.length < 20) {
      want.push(9);
      seq.push([9]);
    }
  }
  assert.deepEqual(g.tokenIds, want);
  // The drafter alone (no verifier): one draw a token, from the same generator.
  const alone = await generate(drafter, [7], [7], sampled, { ...options, seed, temperature }, unreachable);
  assert.equal(alone.stats.fallback, "verifier-unreachable");
  const rng2 = new DeviceRng(seed);
  const seq2 = new TableSequence([7]);
  const local: number[] = [];
  while (local.length < 20) {
    const t = choose(await seq2.nextLogprobs(), true, temperature, rng2);
    local.push(t);
    seq2.push([t]);
  }
  assert.deepEqual(alone.tokenIds, local);
});

test("a sampled recovery draws among the candidates, never the one ruled out", async () => {
  const picks = new Map<string, number>(); // which of the offered candidates each recovery took
  for (let seed = 0; seed < 12; seed++) {
    const rounds: RoundFrame[] = [];
    const g = await generate(drafter, [7], [7], sampled, { ...options, seed }, steeringVerifier(rounds));
    assert.equal(g.stats.fallback, null);
    assert.ok(g.stats.recoveries + g.stats.bonusTokens > 0);
    // Every round after the first commits the last round's recovery: one of the three allowed candidates.
    const context = [7];
    for (const [i, r] of rounds.entries()) {
      if (i > 0) {
        assert.equal(r.commit.length, 1);
        const next = targetNext(context[context.length - 1]!);
        const k = offered(next).findIndex(([t]) => t === r.commit[0]);
        assert.ok(k >= 0 && k < 3, `round ${i + 1} committed ${r.commit[0]}, not an allowed candidate of ${next}`);
        picks.set(String(k), (picks.get(String(k)) ?? 0) + 1);
        context.push(r.commit[0]!);
      }
      let accepted = 0;
      while (accepted < r.draft.length && r.draft[accepted] === targetNext(context[context.length - 1]!)) context.push(r.draft[accepted++]!);
    }
  }
  // Not one-hot: over twelve seeds the recoveries took more than the best candidate.
  assert.ok(picks.size >= 2, JSON.stringify([...picks]));
});

test("greedy decoding is what it was: the Generalist's text, whatever the seed and temperature", async () => {
  const want: number[] = [];
  for (let x = 4; want.length < 20 && x !== EOS; ) want.push((x = targetNext(x)));
  const opts = { ...options, eosIds: new Set([EOS]) };
  for (const extra of [{}, { seed: 9 }, { seed: 3n, temperature: 0.2 }]) {
    const g = await generate(drafter, [3, 1, 4], [1, 4], params, { ...opts, ...extra }, fakeVerifier(null));
    assert.deepEqual(g.tokenIds, want.slice(0, -1));
  }
  // Sampling at a temperature near 0 is greedy on these rows (0.85 against 0.01: e^(-4.4 / 0.05)).
  const cold = await generate(drafter, [7], [7], sampled, { ...options, temperature: 0.05 }, unreachable);
  const greedy = await generate(drafter, [7], [7], params, options, unreachable);
  assert.deepEqual(cold.tokenIds, greedy.tokenIds);
  let x = 7;
  assert.deepEqual(greedy.tokenIds, Array.from({ length: 20 }, () => (x = draftNext(x))));
});

test("a bad seed or temperature is refused before anything runs", async () => {
  let opened = 0;
  let sequences = 0;
  const counting: Transport = {
    open: () => {
      opened += 1;
      return Promise.reject(new VerifierLost("verifier-unreachable", "no verifier"));
    },
  };
  const counted = {
    sequence: (prefix: number[]): DraftSequence => {
      sequences += 1;
      return new TableSequence([...prefix]);
    },
  };
  const bad: [Partial<GenerateOptions>, RegExp][] = [
    [{ seed: -1 }, /seed must be a whole number, 0 or more; got -1/],
    [{ seed: 1.5 }, /seed must be a whole number/],
    [{ seed: NaN }, /seed must be a whole number/],
    [{ seed: Infinity }, /seed must be a whole number/],
    [{ seed: -2n }, /seed must be a whole number/],
    [{ temperature: 0 }, /temperature must be a finite positive number; got 0/],
    [{ temperature: -0.5 }, /temperature must be a finite positive number/],
    [{ temperature: Infinity }, /temperature must be a finite positive number/],
    [{ temperature: NaN }, /temperature must be a finite positive number/],
  ];
  for (const p of [sampled, params]) {
    for (const [extra, message] of bad) {
      await assert.rejects(generate(counted, [7], [7], p, { ...options, ...extra }, counting), (e) => e instanceof RangeError && message.test(e.message));
    }
  }
  assert.deepEqual([opened, sequences], [0, 0]);
  assert.throws(() => new DeviceRng(-1), RangeError);
});

/** A drafter whose odd tokens are impossible (-inf) and whose even ones share the rest unevenly. */
class HoledSequence implements DraftSequence {
  constructor(private ids: number[]) {}
  get length(): number {
    return this.ids.length;
  }
  nextLogprobs(): Promise<Float32Array> {
    const last = this.ids[this.ids.length - 1]!;
    const row = new Float32Array(V).map((_, j) => (j % 2 === 1 ? -Infinity : -1 - ((j + last) % 5)));
    row[13] = RULED_OUT;
    return Promise.resolve(row);
  }
  push(tokens: number[]): void {
    this.ids.push(...tokens);
  }
  truncate(n: number): void {
    this.ids.length = n;
  }
}

test("draws never pick an entry of weight 0: -inf, or ruled out", async () => {
  const holed = { sequence: (prefix: number[]) => new HoledSequence([...prefix]) };
  const seen = new Set<number>();
  for (let seed = 0; seed < 20; seed++) {
    for (const temperature of [1, 0.7, 1.3]) {
      const g = await generate(holed, [2], [2], sampled, { ...options, seed, temperature }, unreachable);
      for (const t of g.tokenIds) seen.add(t);
    }
  }
  assert.ok([...seen].every((t) => t % 2 === 0), `drew ${[...seen].sort((a, b) => a - b).join(", ")}`);
  assert.ok(seen.size >= 5, `only ${[...seen].join(", ")} drawn`);
  // choose and inverseCdf directly, on random rows with holes, at the extreme uniforms too.
  const rng = new DeviceRng(77);
  for (let k = 0; k < 300; k++) {
    const n = 1 + Math.floor(rng.random() * 3000);
    const row = Float32Array.from({ length: n }, () => (rng.random() < 0.4 ? -Infinity : rng.random() < 0.1 ? RULED_OUT : -20 * rng.random()));
    row[Math.floor(rng.random() * n)] = -0.5; // at least one finite score
    for (const t of [1, 0.7, 1.3]) {
      const i = choose(row, true, t, rng);
      assert.ok(row[i]! > RULED_OUT, `drew ${i}: ${row[i]}`);
    }
    const w = row.map((s) => (s > RULED_OUT ? Math.exp(s) : 0));
    for (const u of [0, 1 - 2 ** -53]) assert.ok(w[inverseCdf(w, u)]! > 0);
  }
});

test("a fusion vector's padded columns (past the vocabulary's width) are never taken, greedy or drawn", () => {
  // A cloud that puts its largest value on a padded row (index 7 of 8; the tokens are 0..5).
  const values = new Float32Array([-3, -2, -1, -4, -5, -6, -7, 0]);
  const raw = toBinary(DownlinkSchema, create(DownlinkSchema, { seq: 1, accepted: 0, fusion: create(FusionVectorSchema, { values: new Uint8Array(values.buffer) }) }));
  const fusionParams = { ...params, method: Method.FUSION, draftLen: 0, alphaMilli: 0, topK: 10, bonus: false };
  const model = { nextLogprobs: () => new Float32Array(8).fill(-2), scoreContinuations: () => [] };
  const greedy = applyDownlink(raw, [], fusionParams, EOS, 8, model, { width: 6 });
  assert.deepEqual(greedy.commitIds, [2]);
  for (let seed = 0; seed < 20; seed++) {
    const drawn = applyDownlink(raw, [], fusionParams, EOS, 8, model, { rng: new DeviceRng(seed), temperature: 1, width: 6 });
    assert.ok(drawn.commitIds![0]! < 6, `seed ${seed} drew padded column ${drawn.commitIds![0]}`);
  }
});

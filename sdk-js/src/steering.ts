/**
 * SpecSteer's decision rules (core/steering.py, core/recovery.py, sdk/decoding.py's `_recover`):
 * the ratio test, the top-k steering vector and the device's recovery, greedy or sampled
 * (src/sampling.ts's `choose`). Float32 inputs and outputs are rounded with Math.fround at each
 * float32 operation, as numpy and torch compute them.
 */
import { ProtocolError } from "./errors.js";
import { GAMMA_SCALE } from "./limits.js";
import { repeatingCandidates, repeatingTokens } from "./repetition.js";
import { argmax, choose, type UniformSource } from "./sampling.js";
import { decodeDownlink, Method, type Verdict } from "./wire.js";

/** log of the smallest normal float32: a probability of 0 enters a score as this. */
export const LOGP_FLOOR = Math.log(1.1754943508222875e-38);
/** The most negative finite float32: the value of a token the Generalist rules out. */
export const RULED_OUT = -3.4028234663852886e38;

export function gammaOf(ppm: number, infinite: boolean): number {
  return infinite ? Infinity : ppm / GAMMA_SCALE;
}

/** log(gamma), with gamma = 0 -> -inf (accept all) and gamma = inf -> +inf (reject all). */
export function logGamma(gamma: number): number {
  return gamma === 0 ? -Infinity : Math.log(gamma);
}

/** min(1, exp(ratio) / gamma) without overflow; 0 for a unit P_G rules out. */
export function acceptanceProbability(logRatio: number, logGammaValue: number): number {
  if (Number.isNaN(logRatio) || logRatio === -Infinity) return 0;
  const excess = logRatio - logGammaValue;
  if (Number.isNaN(excess)) return 0;
  return excess >= 0 ? 1 : Math.exp(excess);
}

/** How many leading units pass the ratio test: greedy accepts while ratio > log gamma (strictly). */
export function verifyRatios(logRatios: number[], gamma: number, sampling: boolean, uniforms: number[] | null = null): number {
  const threshold = logGamma(gamma);
  if (sampling && (uniforms === null || uniforms.length < logRatios.length)) {
    throw new RangeError("sampling mode needs one uniform draw per unit");
  }
  for (let i = 0; i < logRatios.length; i++) {
    const ratio = logRatios[i]!;
    if (Number.isNaN(ratio) || ratio === -Infinity) return i;
    if (sampling) {
      if (!(uniforms![i]! < acceptanceProbability(ratio, threshold))) return i;
    } else if (!(ratio > threshold)) return i;
  }
  return logRatios.length;
}

function refuseNaN(xs: ArrayLike<number>, what: string): void {
  for (let i = 0; i < xs.length; i++) {
    if (Number.isNaN(xs[i])) throw new RangeError(`the ${what} hold NaN: no token can be ranked`);
  }
}

function floored(x: number): number {
  return x === -Infinity ? Math.fround(LOGP_FLOOR) : Math.fround(x);
}

/** v(y) = log P_G(y) - alpha log P_S^0(y) in float32, finite: RULED_OUT where P_G is 0. */
export function steeringValues(logpG: number[], logpS0: number[], alpha: number): number[] {
  const a = Math.fround(alpha);
  return logpG.map((g, i) => {
    if (g === -Infinity) return RULED_OUT;
    return alpha === 0 ? Math.fround(g) : Math.fround(Math.fround(g) - Math.fround(a * floored(logpS0[i]!)));
  });
}

/** The k largest entries, best first; ties broken by the lower index. */
export function topIndices(scores: number[], k: number): number[] {
  refuseNaN(scores, "scores");
  return scores
    .map((s, i) => [s, i] as const)
    .sort((x, y) => (y[0] !== x[0] ? (y[0] > x[0] ? 1 : -1) : x[1] - y[1]))
    .slice(0, Math.min(k, scores.length))
    .map(([, i]) => i);
}

/** The verifier's same-vocabulary top-k steering vector: (token IDs best first, their values). */
export function steeringCandidates(
  logpG: number[],
  logpS0: number[] | null,
  alpha: number,
  k: number,
  policy: "guardrail" | "literal",
): { tokenIds: number[]; values: number[] } {
  if (logpS0 === null && alpha !== 0) throw new RangeError("P_S^0 is needed when alpha != 0");
  refuseNaN(logpG, "log-probabilities");
  if (alpha !== 0) refuseNaN(logpS0!, "log-probabilities");
  const values = steeringValues(logpG, logpS0 ?? logpG, alpha);
  const ids = topIndices(policy === "guardrail" ? logpG.map(Math.fround) : values, k);
  return { tokenIds: ids, values: ids.map((i) => values[i]!) };
}

/** z(c) = v(c) + alpha log P_S^c(c) in float32 (-inf in log P_S^c enters as LOGP_FLOOR). */
export function recoveryScores(values: ArrayLike<number>, logpSc: ArrayLike<number>, alpha: number): number[] {
  refuseNaN(values, "steering values");
  const v = Array.from(values, Math.fround);
  if (alpha === 0) return v;
  refuseNaN(logpSc, "log-probabilities");
  const a = Math.fround(alpha);
  return v.map((x, i) => Math.fround(x + Math.fround(a * floored(logpSc[i]!))));
}

/** What the device's own model says, for a recovery: the next-token row and candidates' sequences. */
export interface DeviceScores {
  nextLogprobs(): ArrayLike<number>;
  scoreContinuations(candidates: number[][]): number[];
}

export interface RecoveryParams {
  method: Method;
  alphaMilli: number;
  topK: number;
  draftLen: number;
  bonus: boolean;
}

/** How the device picks its recovery: for a fusion vector, the columns that are tokens
 * (`vocabulary_width`: the padded rows past it are never taken, greedy or drawn); in sampling mode,
 * the generation's generator and temperature (`rng` absent: greedy). */
export interface RecoveryDraw {
  rng?: UniformSource;
  temperature?: number;
  width?: number;
  /** The repetition stop (src/repetition.ts): the generated text and the n-gram length. A fusion
   * recovery does not take a token that repeats; a candidate that repeats is left out unless every
   * candidate does (a recovery must commit a token). */
  noRepeat?: { text: readonly number[]; n: number };
}

export type RoundOutcome = {
  keptIds: number[];
  continue: "recovery" | "bonus" | "none";
  commitIds: number[] | null;
  scores: number[] | null;
};

/**
 * What the device does with a round's downlink: keep the accepted prefix; stop at an accepted
 * end-of-sequence; else recover after a rejection (or an empty draft), and after a full acceptance
 * take the steered bonus token if the session asked for one (`sd` always does). The recovery is
 * sdk/decoding.py's `_recover`: one candidate is taken as it is (nothing drawn); otherwise greedy
 * takes the largest score z = v + alpha log P_S^c (the first on ties), and with `draw` (sampling)
 * one uniform from `draw.rng` picks it from softmax(z / T) (`choose`; alpha 0: z is v alone). A
 * fusion vector is scored over the vocabulary and picked (greedy or drawn) from its first `draw.width` entries.
 */
export function applyDownlink(
  raw: Uint8Array,
  draft: number[],
  params: RecoveryParams,
  eosId: number,
  vocabSize: number,
  model: DeviceScores,
  draw?: RecoveryDraw,
): RoundOutcome {
  const verdict: Verdict = decodeDownlink(raw, {
    maxTopK: params.topK,
    vocabSize,
    fusion: params.method === Method.FUSION,
  });
  if (!(verdict.accepted >= 0 && verdict.accepted <= draft.length)) {
    throw new ProtocolError("accepted-over-draft", `accepted ${verdict.accepted} of a ${draft.length}-token draft`);
  }
  const kept = draft.slice(0, verdict.accepted);
  const rejected = verdict.accepted < draft.length || draft.length === 0;
  const none: RoundOutcome = { keptIds: kept, continue: "none", commitIds: null, scores: null };
  if (kept.includes(eosId) || !(rejected || params.bonus || params.method === Method.SD)) return none;
  if (verdict.steering === null) {
    throw new ProtocolError("recovery-without-candidates", "no steering candidates where a recovery is needed");
  }
  const alpha = params.alphaMilli / 1000;
  const how = rejected ? "recovery" : "bonus";
  // Greedy: the largest score, the first on ties; sampling: one draw from softmax(scores / T).
  const pick = (xs: ArrayLike<number>): number =>
    draw?.rng === undefined ? argmax(xs) : choose(xs, true, draw.temperature ?? 1, draw.rng);
  if (verdict.steering.kind === "fusion") {
    const scores = recoveryScores(verdict.steering.values, model.nextLogprobs(), alpha);
    const allowed = scores.slice(0, draw?.width ?? scores.length);
    const stopped = draw?.noRepeat === undefined ? [] : repeatingTokens(draw.noRepeat.text, draw.noRepeat.n);
    for (const t of stopped) if (t < allowed.length) allowed[t] = -Infinity;
    return { keptIds: kept, continue: how, commitIds: [pick(allowed)], scores };
  }
  const { candidates } = verdict.steering;
  let values: readonly number[] = verdict.steering.values;
  const repeats = draw?.noRepeat === undefined ? [] : repeatingCandidates(draw.noRepeat.text, candidates, draw.noRepeat.n);
  if (repeats.includes(true) && repeats.includes(false)) values = values.map((v, i) => (repeats[i] ? -Infinity : v));
  // alpha 0: recoveryScores is v itself, P_S^c never read (0 * -inf would be NaN).
  const scores = recoveryScores(values, model.scoreContinuations(candidates), alpha);
  // One candidate is taken as it is (no draw).
  return { keptIds: kept, continue: how, commitIds: candidates[candidates.length === 1 ? 0 : pick(scores)]!, scores };
}

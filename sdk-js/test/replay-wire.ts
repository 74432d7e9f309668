/** Replayers of conformance/v1's wire and steering files: each returns one [name, ok, detail] per vector. */
import { fromHex, toHex } from "../src/bytes.js";
import { SessionState, type Violation } from "../src/contract.js";
import { ProtocolError } from "../src/errors.js";
import { CandidatePolicy, Method } from "../src/gen/verifier_pb.js";
import {
  acceptanceProbability,
  applyDownlink,
  gammaOf,
  logGamma,
  steeringCandidates,
  verifyRatios,
  type RecoveryParams,
} from "../src/steering.js";
import { decodeDownlink, decodeUplink, type UplinkFrame, type Verdict } from "../src/wire.js";
import { closeFloats, enc, num, type Json } from "./vectors.js";

export type Result = [name: string, ok: boolean, detail: string];

const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

function refused(err: unknown): Json {
  if (err instanceof ProtocolError) return { outcome: "refused", category: err.category };
  throw err;
}

function frameJson(f: UplinkFrame): Json {
  if (f.kind === "open") {
    const p = f.params;
    return {
      kind: "open",
      prompt_ids: f.promptIds,
      params: {
        method: `METHOD_${Method[p.method]}`,
        sampling: p.sampling,
        gamma_ppm: p.gammaPpm,
        gamma_infinite: p.gammaInfinite,
        alpha_milli: p.alphaMilli,
        top_k: p.topK,
        draft_len: p.draftLen,
        policy: `CANDIDATE_POLICY_${CandidatePolicy[p.policy]}`,
        bonus: p.bonus,
        adapter_version: p.adapterVersion,
        padded_frames: p.paddedFrames,
      },
    };
  }
  if (f.kind === "close") {
    if (f.witness === null) return { kind: "close", seq: f.seq };
    const w = f.witness;
    return {
      kind: "close",
      seq: f.seq,
      witness: {
        origin: w.origin,
        log_key_hex: toHex(w.logKey),
        size: Number(w.size),
        root_hash_hex: toHex(w.rootHash),
        signature_hex: toHex(w.signature),
        old_size: Number(w.oldSize),
        consistency_proof_hex: w.consistencyProof.map(toHex),
      },
    };
  }
  return { kind: f.kind, seq: f.seq, commit_ids: f.commit, draft_ids: f.draft, literal_ids: f.literal, slots: f.slots };
}

export function replayUplinks(doc: Json): Result[] {
  return doc.vectors.map((v: Json): Result => {
    let got: Json;
    try {
      got = { outcome: "valid", frame: frameJson(decodeUplink(fromHex(v.frame_hex), v.vocab_size)) };
    } catch (err) {
      got = refused(err);
    }
    return [v.name, same(got, v.expected), JSON.stringify(got)];
  });
}

function verdictJson(d: Verdict): Json {
  const s = d.steering;
  return {
    seq: d.seq,
    accepted: d.accepted,
    candidates: s?.kind === "candidates" ? s.candidates.map((ids, i) => ({ token_ids: ids, value: enc(s.values[i]!) })) : [],
    fusion_values: s?.kind === "fusion" ? Array.from(s.values, enc) : null,
  };
}

export function replayDownlinks(doc: Json): Result[] {
  return doc.vectors.map((v: Json): Result => {
    let got: Json;
    try {
      const verdict = decodeDownlink(fromHex(v.frame_hex), { maxTopK: v.max_top_k, vocabSize: v.vocab_size, fusion: v.fusion });
      got = { outcome: "valid", downlink: verdictJson(verdict) };
    } catch (err) {
      got = refused(err);
    }
    return [v.name, same(got, v.expected), JSON.stringify(got)];
  });
}

const violations = (found: Violation[]): Json => found.map((x) => ({ area: x.area, breach: x.breach, category: x.category }));

function apply(state: SessionState, step: Json): Violation[] {
  let examined;
  if (step.dir === "up") examined = state.examineUplink(fromHex(step.frame_hex));
  else if (step.dir === "down") examined = state.examineDownlink(fromHex(step.frame_hex));
  else if (step.dir === "guard") examined = state.examineGuard(step.decision, step.count, step.placeholder);
  else if (step.dir === "fallback") examined = state.examineFallback(step.reason);
  else throw new Error(`unknown step ${String(step.dir)}`);
  examined[1]();
  return examined[0];
}

export function replaySessions(doc: Json): Result[] {
  return doc.vectors.map((v: Json): Result => {
    const state = new SessionState(v.vocab_size, v.max_top_k);
    const problems: string[] = [];
    v.steps.forEach((step: Json, i: number) => {
      const got = violations(apply(state, step));
      if (!same(got, step.expected)) problems.push(`step ${i}: ${JSON.stringify(got)}`);
    });
    const end = { phase: state.phase, rounds: state.rounds };
    if (!same(end, v.expected_end)) problems.push(`end ${JSON.stringify(end)}`);
    return [v.name, problems.length === 0, problems.join("; ")];
  });
}

export function replayCosignatures(doc: Json): Result[] {
  return doc.vectors.map((v: Json): Result => {
    const state = new SessionState(doc.vocab_size, doc.max_top_k);
    for (const step of doc.before) {
      if (apply(state, step).length > 0) return [v.name, false, "the session before the cosignature breaks the contract"];
    }
    const [found] = state.examineDownlink(fromHex(v.frame_hex));
    let got: Json;
    if (found.length > 0) got = { outcome: "refused", categories: found.map((x) => x.category) };
    else {
      const d = decodeCosignature(fromHex(v.frame_hex));
      got = { outcome: "valid", cosignature: d };
    }
    return [v.name, same(got, v.expected), JSON.stringify(got)];
  });
}

import { DownlinkSchema } from "../src/gen/verifier_pb.js";
import { parse } from "../src/wire.js";

function decodeCosignature(raw: Uint8Array): Json {
  const msg = parse(DownlinkSchema, raw);
  if (msg?.cosignature === undefined) return null;
  return { seq: msg.seq, witness: msg.cosignature.witness, signature_hex: toHex(msg.cosignature.signature) };
}

export function replayVerify(doc: Json): Result[] {
  return doc.vectors.map((v: Json): Result => {
    const ratios = v.log_ratios.map(num);
    const gamma = gammaOf(v.gamma_ppm, v.gamma_infinite);
    const uniforms = v.uniforms === null ? null : v.uniforms.map(num);
    const lg = logGamma(gamma);
    const accepted = verifyRatios(ratios, gamma, v.sampling, uniforms);
    const e = v.expected;
    let ok = accepted === e.accepted && Object.is(lg, num(e.log_gamma));
    const probs = ratios.map((r: number) => acceptanceProbability(r, lg));
    if (v.sampling) ok &&= closeFloats(probs, e.acceptance_probabilities);
    return [v.name, ok, JSON.stringify({ accepted, log_gamma: enc(lg), probs })];
  });
}

export function replayCandidates(doc: Json): Result[] {
  return doc.vectors.map((v: Json): Result => {
    const got = steeringCandidates(
      v.logp_g.map(num),
      v.logp_s0 === null ? null : v.logp_s0.map(num),
      v.alpha_milli / 1000,
      v.top_k,
      v.policy,
    );
    const ok = same(got.tokenIds, v.expected.token_ids) && closeFloats(got.values, v.expected.values);
    return [v.name, ok, JSON.stringify(got)];
  });
}

const METHODS: Record<string, Method> = {
  specsteer: Method.SPECSTEER,
  sd: Method.SD,
  fusion: Method.FUSION,
  llm: Method.LLM,
};

export function replayRecovery(doc: Json): Result[] {
  return doc.vectors.map((v: Json): Result => {
    const p = v.params;
    const method = METHODS[p.method];
    if (method === undefined) return [v.name, false, `unknown method ${p.method}`];
    const params: RecoveryParams = { method, alphaMilli: p.alpha_milli, topK: p.top_k, draftLen: p.draft_len, bonus: p.bonus };
    const continuations = new Map<string, number>(v.logp_sc_candidates.map((c: Json) => [c.token_ids.join(","), num(c.logp_sc)]));
    const model = {
      nextLogprobs: () => v.logp_sc_next.map(num),
      scoreContinuations: (cands: number[][]) =>
        cands.map((c) => {
          const x = continuations.get(c.join(","));
          if (x === undefined) throw new Error(`no log P_S^c for candidate ${c.join(",")}`);
          return x;
        }),
    };
    let got: Json;
    try {
      const r = applyDownlink(fromHex(v.downlink_hex), v.draft_ids, params, v.eos_id, v.logp_sc_next.length, model);
      got = { outcome: "valid", kept_ids: r.keptIds, continue: r.continue, commit_ids: r.commitIds, scores: r.scores };
    } catch (err) {
      got = refused(err);
    }
    const e = v.expected;
    let ok: boolean;
    if (e.outcome === "valid" && got.outcome === "valid") {
      ok =
        same([got.kept_ids, got.continue, got.commit_ids], [e.kept_ids, e.continue, e.commit_ids]) &&
        closeFloats(got.scores, e.scores);
    } else ok = same(got, e);
    return [v.name, ok, JSON.stringify(got)];
  });
}

/**
 * Wire frames, decoded and judged exactly as core/wire.py does: the frames are the generated
 * specsteer.v1 messages of the one verifier.proto (src/gen, built by `npm run gen`).
 *
 * An uplink must parse, carry no field the schema lacks at any depth, and be byte for byte the
 * deterministic serialization of what it parses to, so there is one way to say anything; a downlink
 * is bounded before the device acts on it. Each refusal is a `ProtocolError` with its category.
 */
import { fromBinary, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { equalBytes } from "./bytes.js";
import { ProtocolError } from "./errors.js";
import {
  CandidatePolicy,
  DownlinkSchema,
  Method,
  UplinkSchema,
  type Downlink,
  type PaddedRound,
  type SessionParams as PbSessionParams,
  type Uplink,
  type WitnessRequest as PbWitnessRequest,
} from "./gen/verifier_pb.js";
import {
  ALPHA_MAX,
  ALPHA_SCALE,
  COSIGNATURE_BYTES,
  ED25519_KEY_BYTES,
  ED25519_SIG_BYTES,
  GAMMA_MAX,
  GAMMA_SCALE,
  HASH_BYTES,
  MAX_ADAPTER_VERSION,
  MAX_CANDIDATE_TOKENS,
  MAX_DRAFT_LEN,
  MAX_LITERAL_TOKENS,
  MAX_NAME_CHARS,
  MAX_PROMPT_TOKENS,
  MAX_PROOF_HASHES,
  MAX_TREE_SIZE,
  PAD_ID,
} from "./limits.js";

export { Method, CandidatePolicy };

/** Session parameters in wire units, as the Open carries them (bounded by `paramsProblem`). */
export interface WireParams {
  method: Method;
  sampling: boolean;
  gammaPpm: number;
  gammaInfinite: boolean;
  alphaMilli: number;
  topK: number;
  draftLen: number;
  policy: CandidatePolicy;
  bonus: boolean;
  adapterVersion: number;
  paddedFrames: boolean;
}

/** The Python device's `SessionParams()` defaults (core/session_types.py): specsteer, greedy, gamma 0.5,
 * alpha 1, top-k 10, 4-token drafts, the guardrail candidate policy, bonus token, no adapter, no padding. */
export const DEFAULT_PARAMS: Readonly<WireParams> = Object.freeze({
  method: Method.SPECSTEER,
  sampling: false,
  gammaPpm: 500_000,
  gammaInfinite: false,
  alphaMilli: 1000,
  topK: 10,
  draftLen: 4,
  policy: CandidatePolicy.GUARDRAIL,
  bonus: true,
  adapterVersion: 0,
  paddedFrames: false,
});

export interface WitnessRequest {
  origin: string;
  logKey: Uint8Array;
  size: bigint;
  rootHash: Uint8Array;
  signature: Uint8Array;
  oldSize: bigint;
  consistencyProof: Uint8Array[];
}

export interface RoundFrame {
  kind: "round" | "padded_round";
  seq: number;
  commit: number[];
  draft: number[];
  literal: number[];
  /** A PaddedRound's (commit, draft, literal) slot counts; null for a plain Round. */
  slots: [number, number, number] | null;
}

export type UplinkFrame =
  | { kind: "open"; promptIds: number[]; params: WireParams; resumeIds: number[] }
  | RoundFrame
  | { kind: "close"; seq: number; witness: WitnessRequest | null };

export type Steering =
  | { kind: "candidates"; candidates: number[][]; values: number[] }
  | { kind: "fusion"; values: Float32Array }
  | null;

export interface Verdict {
  seq: number;
  accepted: number;
  steering: Steering;
}

/** Parse `raw` as message `schema`, or null when the bytes are not that message. */
export function parse<Desc extends DescMessage>(schema: Desc, raw: Uint8Array): MessageShape<Desc> | null {
  try {
    return fromBinary(schema, raw) as MessageShape<Desc>;
  } catch {
    return null;
  }
}

/** Every unknown field of a parsed message at any depth, as "Uplink.round field 9". */
export function unknownFields(msg: object, path = ""): string[] {
  const here = path || ((msg as { $typeName?: string }).$typeName ?? "message").split(".").pop()!;
  const found: string[] = [];
  for (const u of (msg as { $unknown?: { no: number }[] }).$unknown ?? []) found.push(`${here} field ${u.no}`);
  for (const [key, value] of Object.entries(msg)) {
    if (key.startsWith("$")) continue;
    const children = Array.isArray(value) ? value : [value];
    for (const child of children) {
      if (child === null || typeof child !== "object" || child instanceof Uint8Array) continue;
      if ("$typeName" in child) found.push(...unknownFields(child, `${here}.${key}`));
      else if ("case" in child && child.value !== null && typeof child.value === "object") {
        found.push(...unknownFields(child.value as object, `${here}.${String(child.case)}`));
      }
    }
  }
  return found;
}

/** Whether `raw` is exactly the deterministic serialization of what it parsed to. */
export function isCanonical<Desc extends DescMessage>(schema: Desc, msg: MessageShape<Desc>, raw: Uint8Array): boolean {
  return equalBytes(toBinary(schema, msg), raw);
}

/** The signed-note key-name rule, bounded: 1 to 128 printable ASCII characters, no space or '+'. */
export function nameProblem(name: string, what: string): string | null {
  if (name.length === 0 || name.length > MAX_NAME_CHARS || name.includes("+") || !/^[\x20-\x7e]*$/.test(name)) {
    return `the ${what} must be 1 to ${MAX_NAME_CHARS} printable ASCII characters without '+'`;
  }
  if (name.includes(" ")) return `the ${what} contains a space`;
  return null;
}

/** What is wrong with a Close's witness request's shape, as [category, sentence], if anything. */
export function witnessViolation(w: PbWitnessRequest): [string, string] | null {
  const name = nameProblem(w.origin, "checkpoint origin");
  if (name !== null) return ["witness-origin", name];
  if (w.logKey.length !== ED25519_KEY_BYTES) {
    return ["witness-log-key-size", `the log key is ${w.logKey.length} bytes, not ${ED25519_KEY_BYTES}`];
  }
  if (w.rootHash.length !== HASH_BYTES) {
    return ["witness-root-size", `the checkpoint root hash is ${w.rootHash.length} bytes, not ${HASH_BYTES}`];
  }
  if (w.signature.length !== ED25519_SIG_BYTES) {
    return ["witness-signature-size", `the checkpoint signature is ${w.signature.length} bytes, not ${ED25519_SIG_BYTES}`];
  }
  if (w.size < 1n || w.size > MAX_TREE_SIZE || w.oldSize > w.size) {
    return ["witness-sizes", `checkpoint sizes out of order or range (old ${w.oldSize}, new ${w.size})`];
  }
  if (w.consistencyProof.length > MAX_PROOF_HASHES || w.consistencyProof.some((h) => h.length !== HASH_BYTES)) {
    return ["witness-proof-shape", `the consistency proof is at most ${MAX_PROOF_HASHES} hashes of ${HASH_BYTES} bytes`];
  }
  return null;
}

/** A Close's witness request as the device keeps it; a malformed one is a `ProtocolError`. */
export function witnessFromProto(w: PbWitnessRequest): WitnessRequest {
  const problem = witnessViolation(w);
  if (problem !== null) throw new ProtocolError(problem[0], `the Close's witness request is malformed: ${problem[1]}`);
  return {
    origin: w.origin,
    logKey: w.logKey,
    size: w.size,
    rootHash: w.rootHash,
    signature: w.signature,
    oldSize: w.oldSize,
    consistencyProof: [...w.consistencyProof],
  };
}

/** Why declared parameters are out of their bounds (core/session_types.py), if they are. */
export function paramsProblem(p: PbSessionParams): string | null {
  if (![Method.SPECSTEER, Method.SD, Method.FUSION, Method.LLM].includes(p.method)) return `unknown method ${p.method}`;
  if (![CandidatePolicy.GUARDRAIL, CandidatePolicy.LITERAL].includes(p.policy)) {
    return `unknown candidate policy ${p.policy}`;
  }
  if (p.gammaInfinite && p.gammaPpm) return "gamma_infinite and a finite gamma_ppm are both set";
  if (!p.gammaInfinite && p.gammaPpm / GAMMA_SCALE > GAMMA_MAX) return "gamma out of range";
  if (p.alphaMilli / ALPHA_SCALE > ALPHA_MAX) return "alpha out of range";
  if (p.topK < 1) return "top-k out of range";
  if (p.draftLen > MAX_DRAFT_LEN) return "draft length K out of range";
  const drafts = p.method === Method.SPECSTEER || p.method === Method.SD;
  if (drafts && p.draftLen === 0) return "a drafting method needs K >= 1: out of range";
  if (!drafts && p.draftLen !== 0) return "fusion and llm decide every token in the cloud: K out of range";
  if (p.method === Method.LLM && p.alphaMilli !== 0) return "llm takes alpha 0: out of range";
  if (p.method === Method.SD && p.sampling) return "sd runs greedy only: out of range";
  if (p.adapterVersion > MAX_ADAPTER_VERSION) return "adapter version out of range";
  return null;
}

export function wireParams(p: PbSessionParams): WireParams {
  const problem = paramsProblem(p);
  if (problem !== null) throw new ProtocolError("params-out-of-range", `session parameters out of range: ${problem}`);
  return {
    method: p.method,
    sampling: p.sampling,
    gammaPpm: p.gammaPpm,
    gammaInfinite: p.gammaInfinite,
    alphaMilli: p.alphaMilli,
    topK: p.topK,
    draftLen: p.draftLen,
    policy: p.policy,
    bonus: p.bonus,
    adapterVersion: p.adapterVersion,
    paddedFrames: p.paddedFrames,
  };
}

export function vocabularyProblem(ids: Iterable<number>, vocabSize: number | null, what: string): string | null {
  if (vocabSize === null) return null;
  for (const t of ids) {
    if (!(t >= 0 && t < vocabSize)) return `${what} token ID ${t} is outside the vocabulary of ${vocabSize}`;
  }
  return null;
}

function checkIds(ids: number[], vocabSize: number | null, what: string): void {
  const problem = vocabularyProblem(ids, vocabSize, what);
  if (problem !== null) throw new ProtocolError("out-of-vocabulary", problem);
}

/** A PaddedRound as the Round it stands for: padding only trails (a pad slot is no covert channel). */
export function paddedFrame(msg: PaddedRound, vocabSize: number | null): RoundFrame {
  const lists: number[][] = [];
  for (const [ids, what] of [
    [msg.commitIds, "commit"],
    [msg.draftIds, "draft"],
    [msg.literalIds, "placeholder"],
  ] as const) {
    const used = [...ids];
    while (used.length > 0 && used[used.length - 1] === PAD_ID) used.pop();
    if (used.includes(PAD_ID)) {
      throw new ProtocolError("token-after-padding", `the padded round's ${what} slots hold a token after padding`);
    }
    checkIds(used, vocabSize, what);
    lists.push(used);
  }
  return {
    kind: "padded_round",
    seq: msg.seq,
    commit: lists[0]!,
    draft: lists[1]!,
    literal: lists[2]!,
    slots: [msg.commitIds.length, msg.draftIds.length, msg.literalIds.length],
  };
}

/** One uplink frame as the verifier judges it on arrival (core.wire.decode_uplink plus the prompt limit). */
export function decodeUplink(raw: Uint8Array, vocabSize: number | null = null): UplinkFrame {
  const msg = parse(UplinkSchema, raw);
  if (msg === null) throw new ProtocolError("not-protobuf", "the frame does not parse as specsteer.v1.Uplink");
  const unknown = unknownFields(msg);
  if (unknown.length > 0) {
    throw new ProtocolError("unknown-field", `the frame carries unknown fields (${unknown.slice(0, 3).join(", ")})`);
  }
  const kind = msg.kind;
  // Token IDs and shapes are judged before the encoding, so a smuggled value is named for what it is.
  if (kind.case === "open") {
    checkIds(kind.value.promptIds, vocabSize, "prompt");
    checkIds(kind.value.resumeIds, vocabSize, "resumed text");
  } else if (kind.case === "round") {
    checkIds(kind.value.commitIds, vocabSize, "commit");
    checkIds(kind.value.draftIds, vocabSize, "draft");
    checkIds(kind.value.literalIds, vocabSize, "placeholder");
  } else if (kind.case === "paddedRound") paddedFrame(kind.value, vocabSize);
  else if (kind.case === "close" && kind.value.witness !== undefined) witnessFromProto(kind.value.witness);
  if (!isCanonical(UplinkSchema, msg, raw)) {
    throw new ProtocolError("non-canonical", "the frame is not the canonical (deterministic) serialization of its content");
  }
  switch (kind.case) {
    case "open": {
      const params = wireParams(kind.value.params ?? ({} as PbSessionParams));
      if (kind.value.promptIds.length > MAX_PROMPT_TOKENS) {
        throw new ProtocolError(
          "prompt-too-long",
          `the prompt has ${kind.value.promptIds.length} tokens; the verifier takes at most ${MAX_PROMPT_TOKENS}`,
        );
      }
      return { kind: "open", promptIds: [...kind.value.promptIds], params, resumeIds: [...kind.value.resumeIds] };
    }
    case "round":
      return {
        kind: "round",
        seq: kind.value.seq,
        commit: [...kind.value.commitIds],
        draft: [...kind.value.draftIds],
        literal: [...kind.value.literalIds],
        slots: null,
      };
    case "paddedRound":
      return paddedFrame(kind.value, vocabSize);
    case "close":
      return {
        kind: "close",
        seq: kind.value.seq,
        witness: kind.value.witness === undefined ? null : witnessFromProto(kind.value.witness),
      };
    default:
      throw new ProtocolError("no-kind", "the frame carries no Open, Round, PaddedRound or Close");
  }
}

/** What is wrong with a downlink's cosignature, as [category, sentence], if it carries one. */
export function cosignatureViolation(msg: Downlink): [string, string] | null {
  if (msg.cosignature === undefined) return null;
  if (msg.candidates.length > 0 || msg.fusion !== undefined || msg.accepted) {
    return ["cosignature-not-alone", "a cosignature downlink carries steering or accepted tokens"];
  }
  const name = nameProblem(msg.cosignature.witness, "witness name");
  if (name !== null) return ["cosignature-witness-name", name];
  if (msg.cosignature.signature.length !== COSIGNATURE_BYTES) {
    return ["cosignature-size", `the cosignature is ${msg.cosignature.signature.length} bytes, not ${COSIGNATURE_BYTES}`];
  }
  return null;
}

export function fusionValues(bytes: Uint8Array): Float32Array {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(bytes.length / 4);
  for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(4 * i, true);
  return out;
}

/** What is wrong with a downlink's dense fusion vector, as [category, sentence], if anything. */
export function fusionViolation(msg: Downlink, fusion: boolean, vocabSize: number): [string, string] | null {
  if (msg.fusion === undefined) return null;
  if (!fusion) return ["fusion-undeclared", "a dense fusion vector in a session that did not declare method fusion"];
  if (msg.candidates.length > 0) return ["fusion-with-candidates", "a dense fusion vector and top-k candidates in one downlink"];
  const n = msg.fusion.values.length;
  if (n !== 4 * vocabSize) return ["fusion-size", `a fusion vector of ${n} bytes; the vocabulary needs ${4 * vocabSize}`];
  if (!fusionValues(msg.fusion.values).every(Number.isFinite)) {
    return ["non-finite-value", "a fusion vector with a non-finite value"];
  }
  return null;
}

/** One downlink as the device judges it before acting on it (core.wire.decode_downlink). */
export function decodeDownlink(raw: Uint8Array, opts: { maxTopK: number; vocabSize: number; fusion?: boolean }): Verdict {
  const msg = parse(DownlinkSchema, raw);
  if (msg === null) throw new ProtocolError("not-protobuf", "the downlink does not parse as specsteer.v1.Downlink");
  const unknown = unknownFields(msg);
  if (unknown.length > 0) {
    throw new ProtocolError("unknown-field", `the downlink carries unknown fields (${unknown.slice(0, 3).join(", ")})`);
  }
  const fusion = fusionViolation(msg, opts.fusion ?? false, opts.vocabSize);
  if (fusion !== null) throw new ProtocolError(fusion[0], `downlink refused: ${fusion[1]}`);
  if (msg.cosignature !== undefined) {
    throw new ProtocolError("cosignature-not-a-verdict", "a cosignature answers only a Close, never a round");
  }
  let steering: Steering = null;
  if (msg.fusion !== undefined) steering = { kind: "fusion", values: fusionValues(msg.fusion.values) };
  else {
    if (msg.candidates.length > opts.maxTopK) {
      throw new ProtocolError("too-many-candidates", `downlink carries ${msg.candidates.length} candidates, more than k = ${opts.maxTopK}`);
    }
    const candidates: number[][] = [];
    const values: number[] = [];
    msg.candidates.forEach((c, i) => {
      if (c.tokenIds.length < 1 || c.tokenIds.length > MAX_CANDIDATE_TOKENS) {
        throw new ProtocolError("candidate-length", `downlink candidate ${i} has ${c.tokenIds.length} tokens`);
      }
      checkIds(c.tokenIds, opts.vocabSize, `downlink candidate ${i}`);
      if (!Number.isFinite(c.value)) throw new ProtocolError("non-finite-value", `downlink candidate ${i} has a non-finite value`);
      candidates.push([...c.tokenIds]);
      values.push(c.value);
    });
    if (candidates.length > 0) steering = { kind: "candidates", candidates, values };
  }
  if (!isCanonical(DownlinkSchema, msg, raw)) {
    throw new ProtocolError("non-canonical", "the downlink is not the canonical (deterministic) serialization of its content");
  }
  return { seq: msg.seq, accepted: msg.accepted, steering };
}

export const MAX_SLOTS = { commit: MAX_CANDIDATE_TOKENS, literal: MAX_LITERAL_TOKENS } as const;

/** A padded session's (commit, draft, literal) slot counts: every round fills exactly these. */
export function paddedSlots(draftLen: number): [number, number, number] {
  return [MAX_CANDIDATE_TOKENS, draftLen, MAX_LITERAL_TOKENS];
}

export type { Uplink, Downlink };

/**
 * The device's session loop (sdk/decoding.py's `generate`, `_steered_loop`, `_local_loop`): Open
 * with the public prompt's token IDs, then rounds of Draft - Verify - Recover until the token
 * budget is spent or an end-of-sequence token is committed, then Close. A verifier
 * lost mid-generation (the stream broke or a round timed out) ends the session and the drafter
 * finishes the text alone, `stats.fallback` saying why, as the Python device does without a
 * resumable verifier. With `options.recorder` (src/audit/recorder.ts) the session writes the audit
 * log as sdk/remote.py's does: `session-begin` once the stream is open, every uplink checked and
 * logged before it is sent, every downlink logged on receipt, a `fallback` record when the verifier
 * is lost (or why the session ended without a Close), and a Close that asks the verifier, the
 * log's witness, to cosign the log's checkpoint, whose answer is logged and kept. With
 * `params.paddedFrames` every round goes up as a constant-size PaddedRound (`encodePaddedRound`).
 * With a guard (`options.guard`, src/guard/) every round's uplink is planned by `planUplink` first,
 * as sdk/decoding.py's `_Uplink.plan`: a draft cut before a sensitive span, the span sent as
 * placeholder IDs (`Round.literal_ids`) while the device's text keeps it, or, under keep-local,
 * the session ended on record and the text finished on the device; every decision is logged before
 * the round it shapes, and the prompt's own decision right after the Open.
 * Greedy by default; with `params.sampling` every token the device writes is drawn (src/sampling.ts)
 * as the Python device draws it, from one generator per generation seeded by `options.seed`.
 */
import { create, toBinary } from "@bufbuild/protobuf";
import { EgressBlocked, type EgressRecorder } from "./audit/recorder.js";
import { ProtocolError } from "./errors.js";
import { CloseSchema, OpenSchema, PaddedRoundSchema, RoundSchema, SessionParamsSchema, UplinkSchema, WitnessRequestSchema } from "./gen/verifier_pb.js";
import { applyDownlink } from "./steering.js";
import { argmax, choose, DeviceRng, seedProblem } from "./sampling.js";
import type { EgressGuard } from "./guard/guard.js";
import { promptDecisions, type PromptPlan } from "./guard/prompt_guard.js";
import type { Tokenizer } from "./guard/spans.js";
import { localSpan, planUplink, type GuardDecisionRecord, type UplinkPlan } from "./guard/uplink_guard.js";
import { VerifierLost, VerifierRefused, type Transport, type VerifierStream } from "./transport.js";
import { decodeDownlink, Method, paddedSlots, type WireParams, type WitnessRequest } from "./wire.js";
import { PAD_ID, WIRE_MAX_TOP_K } from "./limits.js";
import { noRepeatProblem, repeatingTokens, TrackedSequence } from "./repetition.js";

/** The drafter's sequence as the loop uses it (`OnnxSequence`, or any backend's). */
export interface DraftSequence {
  readonly length: number;
  /** log P(next token | every token pushed), one row of the model's table. */
  nextLogprobs(): Promise<Float32Array>;
  push(tokens: number[]): void;
  /** Roll back to the first `n` tokens. */
  truncate(n: number): void;
}

export interface SessionDrafter {
  sequence(prefix: number[]): DraftSequence;
}

/** One generation's egress guard (src/guard/guarded.ts's `guardGeneration` makes it). */
export interface GuardedSession {
  /** The session's guard (`sessionGuard`): one per generation, it records what went up. */
  guard: EgressGuard;
  /** The drafter's tokenizer: the guard reads the drafts' text through it. */
  tokenizer: Tokenizer;
  /** What of the prompt went up: its decisions go on record right after the Open. */
  prompt: PromptPlan;
}

export interface GenerateOptions {
  /** The egress guard: a `GuardedSession`, or "off" (sdk/uplink_guard.py's setting of that name),
   * said explicitly, since an unguarded device sends its drafts as they are. */
  guard: GuardedSession | "off";
  maxNewTokens: number;
  eosIds: ReadonlySet<number>;
  /** Rows of the model's table (downlink IDs are bounded by it): the Python device's `vocab_size`. */
  vocabSize: number;
  /** The columns that are tokens (`vocabulary_width`); the padded rows past it are never drafted. */
  width?: number;
  /** Bound on each round trip, in ms (sdk/remote.py's `round_timeout`, 30 s). */
  roundTimeoutMs?: number;
  /** Called with each batch of committed tokens (end-of-sequence left out). */
  onCommit?: (ids: number[]) => void;
  /** The audit log's recorder: every frame of the session is logged through it (docs/audit-format.md). */
  recorder?: EgressRecorder;
  /** Lost sessions one generation may resume in a new one (sdk/decoding.py's `MAX_RESUMES`, 3); 0: none. */
  maxResumes?: number;
  /** Bound on all the tries of one resume, in ms (sdk/remote.py's `connect_timeout`, 10 s). */
  resumeWithinMs?: number;
  /** Sampling (`params.sampling`): the seed of the generation's generator (sdk/decoding.py's
   * `DecodeOptions.seed`, default 0): numpy's `Generator(PCG64(seed))`, so one seed draws the same
   * tokens as the Python device from the same rows. A whole number, 0 or more. Never sent. */
  seed?: number | bigint;
  /** Sampling: the temperature the device's draws divide their scores by (`DecodeOptions.temperature`,
   * default 1): finite and above 0. Device-only, never sent: the cloud's ratio test does not use it.
   * Greedy decoding ignores it (but refuses a bad one). */
  temperature?: number;
  /** The device's repetition stop (`DecodeOptions.no_repeat_ngram`, default 0: off): no drafted,
   * recovered or local token completes an n-gram the generated text already holds. Never sent. */
  noRepeatNgram?: number;
}

/** sdk/decoding.py's `MAX_RESUMES`, and sdk/remote.py's `RESUME_ATTEMPTS` and `RESUME_BACKOFF`:
 * each resume dials up to four times, at once and after 0.25, 0.5 and 1 s, all within one
 * connect timeout from the first. */
export const MAX_RESUMES = 3;
export const RESUME_ATTEMPTS = 4;
export const RESUME_BACKOFF_MS = 250;

export interface GenerationStats {
  rounds: number;
  drafted: number;
  accepted: number;
  recoveries: number;
  bonusTokens: number;
  uplinkBytes: number;
  downlinkBytes: number;
  newTokens: number;
  /** Why the drafter finished the text alone (`verifier-lost`, `verifier-timeout`, ...), or null. */
  fallback: string | null;
  fallbackDetail: string | null;
  /** What the cloud did wrong in answering this session's Close as the log's witness (with a recorder). */
  witnessFaults: string[];
  /** How often the generation resumed in a new session after its verifier was lost, and why (comma-joined). */
  resumed: number;
  resumeReasons: string | null;
  /** The guard's decisions by name ("cut", "placeholder", "keep-local", "prompt-redact", ...), counted. */
  guardDecisions: Record<string, number>;
  /** Tokens drafted past a draft to resolve the guard's holds, and the guard's checks. */
  guardLookaheadTokens: number;
  guardChecks: number;
}

export interface Generation {
  /** The drafter's vocabulary, without the final end-of-sequence token. */
  tokenIds: number[];
  stats: GenerationStats;
}

/** Encode the Open, a Round and the Close as the Python device does (canonical protobuf). The
 * Open carries `resumeIds` only when a generation resumes after its verifier was lost: what the
 * lost session had sent up and had committed, as its verifier saw it (core/wire.py's `encode_open`). */
export function encodeOpen(promptIds: number[], p: WireParams, resumeIds: number[] = []): Uint8Array {
  const params = create(SessionParamsSchema, { ...p });
  const open = create(OpenSchema, { promptIds, params, resumeIds });
  return toBinary(UplinkSchema, create(UplinkSchema, { kind: { case: "open", value: open } }));
}

export function encodeRound(seq: number, commitIds: number[], draftIds: number[], literalIds: number[] = []): Uint8Array {
  const round = create(RoundSchema, { seq, commitIds, draftIds, literalIds });
  return toBinary(UplinkSchema, create(UplinkSchema, { kind: { case: "round", value: round } }));
}

/**
 * A round of a padded session as the Python device encodes it (core/wire.py's `encode_round` with
 * `pad_to` = K): every list filled to its slot count, (8 commit, K draft, 16 literal), with PAD_ID
 * after the real tokens, so every round of the session has one byte length and its size says
 * nothing of how many tokens it carries (the literals: the guard's placeholder IDs). A list longer
 * than its slots is refused (a RangeError).
 */
export function encodePaddedRound(
  seq: number,
  commitIds: number[],
  draftIds: number[],
  draftLen: number,
  literalIds: number[] = [],
): Uint8Array {
  const fill = (ids: number[], slots: number, what: string): number[] => {
    if (ids.length > slots) throw new RangeError(`a padded round has ${slots} ${what} slots; got ${ids.length} tokens`);
    return [...ids, ...new Array<number>(slots - ids.length).fill(PAD_ID)];
  };
  const [commitSlots, draftSlots, literalSlots] = paddedSlots(draftLen);
  const round = create(PaddedRoundSchema, {
    seq,
    commitIds: fill(commitIds, commitSlots, "commit"),
    draftIds: fill(draftIds, draftSlots, "draft"),
    literalIds: fill(literalIds, literalSlots, "placeholder"),
  });
  return toBinary(UplinkSchema, create(UplinkSchema, { kind: { case: "paddedRound", value: round } }));
}

export function encodeClose(seq: number, witness: WitnessRequest | null = null): Uint8Array {
  const close = create(CloseSchema, { seq });
  if (witness !== null) close.witness = create(WitnessRequestSchema, { ...witness, consistencyProof: [...witness.consistencyProof] });
  return toBinary(UplinkSchema, create(UplinkSchema, { kind: { case: "close", value: close } }));
}

/** Why a session ended without its Close, for its `fallback` record (sdk/remote.py's `_end_reason`). */
function endReason(e: unknown): string {
  if (e instanceof VerifierLost) return e.reason;
  if (e instanceof EgressBlocked) return "egress-refused";
  if (e instanceof VerifierRefused) return "verifier-refused";
  return "protocol-error";
}

class State {
  generated: number[] = [];
  constructor(
    readonly eos: ReadonlySet<number>,
    readonly budget: number,
    readonly onCommit?: (ids: number[]) => void,
  ) {}

  get ended(): boolean {
    return this.generated.length > 0 && this.eos.has(this.generated[this.generated.length - 1]!);
  }

  get remaining(): number {
    return this.ended ? 0 : this.budget - this.generated.length;
  }

  commit(tokens: number[]): number[] {
    const kept: number[] = [];
    for (const t of tokens) {
      if (this.remaining <= 0) break;
      kept.push(t);
      this.generated.push(t);
    }
    if (kept.length > 0 && this.onCommit) this.onCommit(kept.filter((t) => !this.eos.has(t)));
    return kept;
  }
}

/** Sum of log P over each candidate's tokens after the sequence's current tokens; the sequence
 * is rolled back after scoring the longer ones. In float32 and in core/sequence.py's order: the
 * tail's terms summed first, then added to the first token's (which matters from three tokens on). */
async function scoreContinuations(seq: DraftSequence, candidates: number[][]): Promise<number[]> {
  const base = await seq.nextLogprobs();
  const at = seq.length;
  const scores: number[] = [];
  for (const c of candidates) {
    let s = base[c[0]!]!;
    if (c.length > 1) {
      let tail = 0;
      for (let j = 1; j < c.length; j++) {
        seq.push([c[j - 1]!]);
        tail = Math.fround(tail + (await seq.nextLogprobs())[c[j]!]!);
      }
      seq.truncate(at);
      s = Math.fround(s + tail);
    }
    scores.push(s);
  }
  return scores;
}

/**
 * One generation: greedy, or sampled when `params.sampling` (every draft token, look-ahead token,
 * recovery, fusion and local token drawn by `choose` from one `DeviceRng(options.seed)` at
 * `options.temperature`, in the order the Python device draws them; one candidate is taken as it
 * is). `privateIds` is the rendered prompt the drafter reads (template and private context);
 * `publicIds` the raw prompt's IDs, the only prompt that goes up. A bad seed or temperature is a
 * RangeError before anything runs.
 */
export async function generate(
  drafter: SessionDrafter,
  privateIds: number[],
  publicIds: number[],
  params: WireParams,
  options: GenerateOptions,
  transport: Transport,
): Promise<Generation> {
  const guarded = options.guard === "off" ? null : options.guard;
  if (options.guard !== "off" && (typeof options.guard !== "object" || options.guard === null || !("guard" in options.guard))) {
    throw new RangeError(
      `egress guard ${JSON.stringify(options.guard)}: pass a GuardedSession (guardGeneration) or "off" to send drafts unguarded`,
    );
  }
  const seedError = seedProblem(options.seed ?? 0);
  if (seedError !== null) throw new RangeError(seedError);
  const temperature = options.temperature ?? 1;
  if (!(typeof temperature === "number" && temperature > 0 && Number.isFinite(temperature))) {
    throw new RangeError(`temperature must be a finite positive number; got ${String(temperature)}`);
  }
  const noRepeat = options.noRepeatNgram ?? 0;
  const noRepeatError = noRepeatProblem(noRepeat);
  if (noRepeatError !== null) throw new RangeError(noRepeatError);
  if (params.method !== Method.SPECSTEER && params.method !== Method.SD && params.method !== Method.FUSION) {
    throw new RangeError(`method ${params.method} is not a Draft-Verify-Recover method this loop runs`);
  }
  const width = options.width ?? options.vocabSize;
  // sdk/decoding.py's `device_rng(options.seed)`: every draw of this generation, in order.
  const rng = params.sampling ? new DeviceRng(options.seed ?? 0) : null;
  const seq = new TrackedSequence(drafter.sequence(privateIds), privateIds);
  /** What the device has generated so far, as its sequence holds it (drafts and look-ahead included). */
  const generatedIds = (): number[] => seq.ids.slice(privateIds.length);
  /** The tokens the repetition stop rules out next (none when it is off). */
  const stopped = (): number[] => (noRepeat === 0 ? [] : repeatingTokens(generatedIds(), noRepeat));
  /** The token the device writes from one row of its model, its padded columns left out and the
   * repetition stop's tokens given probability 0 (`_draw_token`). */
  const drawToken = (row: Float32Array): number => {
    let scores = row.subarray(0, width);
    const out = stopped();
    if (out.length > 0) {
      scores = scores.slice();
      for (const t of out) if (t < scores.length) scores[t] = -Infinity;
    }
    return rng === null ? argmax(scores) : choose(scores, true, temperature, rng);
  };
  const timeout = options.roundTimeoutMs ?? 30_000;
  const state = new State(options.eosIds, options.maxNewTokens, options.onCommit);
  const stats: GenerationStats = {
    rounds: 0,
    drafted: 0,
    accepted: 0,
    recoveries: 0,
    bonusTokens: 0,
    uplinkBytes: 0,
    downlinkBytes: 0,
    newTokens: 0,
    fallback: null,
    fallbackDetail: null,
    witnessFaults: [],
    resumed: 0,
    resumeReasons: null,
    guardDecisions: {},
    guardLookaheadTokens: 0,
    guardChecks: 0,
  };
  const recorder = options.recorder;
  let sid: string | null = null;
  const faultsBefore = recorder?.faults.length ?? 0;
  await seq.nextLogprobs(); // the private prompt's prefill, before a verifier session is held
  let stream: VerifierStream | null = null;
  // The one path of an uplink: logged (fsync'ed) before it is sent, refused unsent if it breaks
  // the contract; a downlink is logged as received, before it is parsed.
  const send = (frame: Uint8Array): void => {
    if (recorder !== undefined && sid !== null) recorder.onUplink(sid, frame);
    stream!.send(frame);
  };
  const receive = async (ms: number): Promise<Uint8Array> => {
    const frame = await stream!.receive(ms);
    if (recorder !== undefined && sid !== null) recorder.onDownlink(sid, frame);
    return frame;
  };
  const maxResumes = options.maxResumes ?? MAX_RESUMES;
  // The committed text as the verifier saw it: commits and accepted drafts, in order. A resumed Open
  // carries exactly this, so nothing goes up that had not gone up already.
  const sentText: number[] = [];
  /** A new session continuing this generation after `lost`, its Open carrying `resumeIds`; false
   * when none can be had (the loss then stands, and the drafter finishes alone). */
  const resume = async (lost: VerifierLost, resumeIds: number[]): Promise<boolean> => {
    if (stats.resumed >= maxResumes) return false;
    stream?.cancel();
    if (recorder !== undefined && sid !== null && !recorder.ended(sid)) recorder.onFallback(sid, lost.reason); // ended by the loss
    // Behind a proxy another replica answers the next dial; a replica killed mid-round leaves it to another.
    const deadline = Date.now() + (options.resumeWithinMs ?? 10_000);
    for (let attempt = 1, wait = RESUME_BACKOFF_MS; ; attempt++, wait *= 2) {
      try {
        stream = await transport.open(deadline);
        if (recorder !== undefined) sid = recorder.beginSession(options.vocabSize, Math.min(params.topK, WIRE_MAX_TOP_K));
        const open = encodeOpen(publicIds, params, resumeIds);
        send(open);
        stats.uplinkBytes += open.length;
        stats.resumed += 1;
        stats.resumeReasons = stats.resumeReasons === null ? lost.reason : `${stats.resumeReasons},${lost.reason}`;
        return true;
      } catch (e) {
        if (!(e instanceof VerifierLost)) throw e;
        stream?.cancel();
        if (recorder !== undefined && sid !== null && !recorder.ended(sid)) recorder.onFallback(sid, e.reason);
      }
      if (attempt === RESUME_ATTEMPTS || deadline - Date.now() <= wait) return false;
      await new Promise<void>((done) => setTimeout(done, wait));
    }
  };
  /** The guard's decisions, on record before what they shape (a tap that refuses stops the generation). */
  const decide = (records: readonly GuardDecisionRecord[]): void => {
    for (const [decision, count, placeholder] of records) {
      if (recorder !== undefined && sid !== null) recorder.onGuardDecision(sid, decision, count, placeholder);
      stats.guardDecisions[decision] = (stats.guardDecisions[decision] ?? 0) + count;
    }
  };
  /** What of `pending + draft` goes up (everything, unguarded). `seq` holds both at its end. */
  const planRound = async (pending: number[], draft: number[]): Promise<UplinkPlan> => {
    const tokens = [...pending, ...draft];
    if (guarded === null) {
      return { commit: pending, literal: [], draft, tokens, pending: pending.length, kept: tokens.length, decisions: [], keepLocal: false, lookahead: 0, checks: 0 };
    }
    const start = seq.length - tokens.length;
    const limit = start + pending.length + state.remaining; // look-ahead stays within the token budget
    const plan = await planUplink(guarded.guard, guarded.tokenizer, state.generated.slice(0, state.generated.length - pending.length), pending, draft, {
      more: async () => {
        if (seq.length >= limit) return null;
        const token = drawToken(await seq.nextLogprobs());
        seq.push([token]);
        return token;
      },
      eosIds: state.eos,
      draftLen: params.draftLen,
    });
    decide(plan.decisions);
    stats.guardLookaheadTokens += plan.lookahead;
    stats.guardChecks += plan.checks;
    if (!plan.keepLocal && start + plan.kept < seq.length) seq.truncate(start + plan.kept); // withheld draft and look-ahead
    return plan;
  };
  try {
    stream = await transport.open();
    if (recorder !== undefined) sid = recorder.beginSession(options.vocabSize, Math.min(params.topK, WIRE_MAX_TOP_K));
    const open = encodeOpen(publicIds, params);
    send(open);
    stats.uplinkBytes += open.length;
    if (guarded !== null) decide(promptDecisions(guarded.prompt));
    let roundSeq = 0;
    let pending: number[] = [];
    while (state.remaining > 0) {
      const drafted: number[] = [];
      const n = Math.min(params.draftLen, state.remaining);
      for (let i = 0; i < n; i++) {
        const token = drawToken(await seq.nextLogprobs());
        drafted.push(token);
        seq.push([token]);
        if (state.eos.has(token)) break;
      }
      const plan = await planRound(pending, drafted);
      if (plan.keepLocal) {
        // Drafted and looked-ahead tokens are the drafter's own draws, as the local loop makes them.
        state.commit(plan.tokens.slice(plan.pending));
        if (recorder !== undefined && sid !== null) recorder.onFallback(sid, "guard-keep-local");
        stats.fallback = "guard-keep-local";
        break;
      }
      state.commit(localSpan(plan));
      let { commit, literal } = plan;
      const draft = plan.draft;
      roundSeq += 1;
      let down: Uint8Array;
      for (;;) {
        // The bytes sent are the bytes `send` logs: the recorder's contract sees the PaddedRound itself.
        const up = params.paddedFrames
          ? encodePaddedRound(roundSeq, commit, draft, params.draftLen, literal)
          : encodeRound(roundSeq, commit, draft, literal);
        try {
          send(up);
          stats.uplinkBytes += up.length;
          down = await receive(timeout);
          sentText.push(...commit, ...literal);
          break;
        } catch (e) {
          if (e instanceof VerifierLost && (await resume(e, [...sentText, ...commit, ...literal]))) {
            // The round's commit and placeholder are in the new session's Open; its draft goes again as round 1.
            sentText.push(...commit, ...literal);
            [commit, literal, roundSeq] = [[], [], 1];
            continue;
          }
          if (e instanceof VerifierLost) state.commit(draft); // P_S^c's own draws, as the local loop makes them
          throw e;
        }
      }
      stats.downlinkBytes += down.length;
      const verdict = decodeDownlink(down, { maxTopK: params.topK, vocabSize: options.vocabSize, fusion: params.method === Method.FUSION });
      if (verdict.seq !== roundSeq) {
        throw new ProtocolError("wrong-seq", `the verifier answered round ${verdict.seq} where round ${roundSeq} was asked`);
      }
      if (verdict.steering?.kind === "candidates") {
        const bad = verdict.steering.candidates.flat().find((t) => t >= width);
        if (bad !== undefined) throw new ProtocolError("padded-row", `the verifier proposed token ID ${bad}, past the vocabulary of ${width}`);
      }
      stats.rounds += 1;
      stats.drafted += draft.length;
      if (verdict.accepted > draft.length) {
        throw new ProtocolError("accepted-over-draft", `accepted ${verdict.accepted} of a ${draft.length}-token draft`);
      }
      stats.accepted += verdict.accepted;
      seq.truncate(seq.length - draft.length + verdict.accepted);
      state.commit(draft.slice(0, verdict.accepted));
      sentText.push(...draft.slice(0, verdict.accepted));
      pending = [];
      if (state.remaining <= 0) continue;
      // What the device's model says at the recovery point, read before the (synchronous) rules.
      const row = await seq.nextLogprobs();
      const candidates = verdict.steering?.kind === "candidates" ? verdict.steering.candidates : [];
      const scores = params.alphaMilli !== 0 && candidates.length > 1 ? await scoreContinuations(seq, candidates) : candidates.map(() => 0);
      const outcome = applyDownlink(
        down,
        draft,
        params,
        [...state.eos][0] ?? -1,
        options.vocabSize,
        { nextLogprobs: () => row, scoreContinuations: () => scores },
        {
          ...(rng === null ? { width } : { rng, temperature, width }),
          ...(noRepeat === 0 ? {} : { noRepeat: { text: generatedIds(), n: noRepeat } }),
        },
      );
      if (outcome.continue === "none" || outcome.commitIds === null) continue;
      pending = state.commit(outcome.commitIds); // uplinked with the next round
      seq.push(pending);
      if (outcome.continue === "recovery") stats.recoveries += 1;
      else stats.bonusTokens += 1;
    }
    // With an audit log the Close asks the verifier, the log's witness, to cosign the log's
    // checkpoint; its answer is one more downlink. The text is complete: a Close or an answer that
    // fails is the cloud's to answer for (recorder.faults), never a fallback.
    const request = recorder !== undefined && sid !== null ? recorder.witnessRequest(sid) : null;
    const close = encodeClose(roundSeq + 1, request);
    let sent = false;
    try {
      send(close);
      sent = true;
    } catch (e) {
      if (!(e instanceof VerifierLost)) throw e;
    }
    if (sent) stats.uplinkBytes += close.length;
    if (sent && request !== null) {
      try {
        await receive(Math.min(timeout, 5000));
      } catch (e) {
        if (!(e instanceof VerifierLost || e instanceof ProtocolError)) throw e;
      }
    }
    await stream.close(Math.min(timeout, 5000));
  } catch (e) {
    stream?.cancel();
    if (recorder !== undefined && sid !== null && !recorder.ended(sid)) {
      // The session ends on record: a lost verifier the drafter takes over from, or why it stopped.
      recorder.onFallback(sid, endReason(e));
    }
    if (!(e instanceof VerifierLost)) throw e;
    stats.fallback = e.reason;
    stats.fallbackDetail = e.message;
  }
  if (recorder !== undefined) {
    recorder.unanswered();
    stats.witnessFaults = recorder.faults.slice(faultsBefore);
  }
  // The drafter alone: after a lost verifier, the rest of the budget.
  while (state.remaining > 0) {
    const token = drawToken(await seq.nextLogprobs());
    seq.push(state.commit([token]));
  }
  const ids = state.ended ? state.generated.slice(0, -1) : state.generated;
  stats.newTokens = ids.length;
  return { tokenIds: ids, stats };
}

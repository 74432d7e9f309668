/**
 * The session contract (core/contract.py): the state machine over a session's frames that the
 * device's recorder enforces before an uplink leaves, the verifier on arrival, and `audit verify`
 * when it replays a log. `examineUplink`/`examineDownlink` return the violations and a commit that
 * advances the state; every violation carries its conformance category.
 *
 * A resumed Open (`resume_ids`, a generation continuing after its verifier was lost) may carry only
 * what an earlier session of the same log, with the same prompt, already sent up and had committed
 * (`SessionState.sentText`): so a resume can carry no token the device had not sent before.
 */
import { DownlinkSchema, Method, UplinkSchema } from "./gen/verifier_pb.js";
import { ProtocolError } from "./errors.js";
import { MAX_CANDIDATE_TOKENS, MAX_GUARD_SPANS, MAX_LITERAL_TOKENS, MAX_RESUME_TOKENS, MAX_VOCAB_SIZE, WIRE_MAX_TOP_K } from "./limits.js";
import {
  cosignatureViolation,
  fusionViolation,
  isCanonical,
  paddedFrame,
  paddedSlots,
  paramsProblem,
  parse,
  unknownFields,
  vocabularyProblem,
  witnessViolation,
} from "./wire.js";

export type Area = "uplinks" | "downlinks" | "session structure";
export type Breach = "malformed" | "order";
export type Phase = "begun" | "open" | "closed" | "fell back";

export interface Violation {
  area: Area;
  breach: Breach;
  category: string;
  message: string;
}

function violation(area: Area, category: string, message: string, breach?: Breach): Violation {
  return { area, category, message, breach: breach ?? (area === "session structure" ? "order" : "malformed") };
}

interface RoundLike {
  seq: number;
  commit: number[];
  draft: number[];
  literal: number[];
  slots: [number, number, number] | null;
}

/** Any single token may be committed after a dense fusion vector. */
const ANY_ONE_TOKEN = "any-one-token";

export const GUARD_DECISIONS = new Set(["cut", "placeholder", "keep-local", "prompt-redact", "prompt-allow", "redact", "filter"]);
/** The prompt guard's decisions (sdk/prompt_guard.py): recorded right after the Open, before any round. */
export const PROMPT_DECISIONS = new Set(["prompt-redact", "prompt-allow"]);

const key = (ids: readonly number[]): string => ids.join(",");

export class RoundContract {
  phase: Phase = "begun";
  draftLen = 0;
  padded = false;
  lastSeq = 0;
  awaiting: number | null = null;
  awaitingDraft = 0;
  candidates: Set<string> | typeof ANY_ONE_TOKEN | null = null;
  mustCommit = false;
  rounds = 0;
  awaitingCosignature: number | null = null;

  constructor(
    readonly vocabSize: number | null,
    public placeholders: number | null,
  ) {}

  get ended(): boolean {
    return this.phase === "closed" || this.phase === "fell back";
  }

  afterEnd(what: string): Violation {
    if (this.phase === "closed") return violation("session structure", "after-end", `${what} after Close`);
    return violation("session structure", "after-end", `${what} after the session ${this.phase}`);
  }

  openViolations(): Violation[] {
    return this.phase === "begun" ? [] : [violation("session structure", "second-open", "a second Open on one stream")];
  }

  afterOpen(draftLen: number, padded: boolean): void {
    if (this.phase === "begun") [this.phase, this.draftLen, this.padded] = ["open", draftLen, padded];
  }

  roundViolations(frame: RoundLike): Violation[] {
    const out: Violation[] = [];
    if (this.phase === "begun") out.push(violation("session structure", "no-session", "no session is open: send Open first"));
    else if (this.ended) out.push(this.afterEnd("a Round"));
    if (frame.seq !== this.lastSeq + 1) {
      out.push(violation("session structure", "round-seq", `round seq ${frame.seq} where ${this.lastSeq + 1} was expected`));
    }
    if (this.awaiting !== null) {
      out.push(violation("session structure", "round-unanswered", `Round ${frame.seq} was sent before round ${this.awaiting} was answered`));
    }
    if (this.phase === "open") {
      out.push(...this.padding(frame));
      if (frame.draft.length > this.draftLen) {
        out.push(violation("uplinks", "draft-too-long", `the draft has ${frame.draft.length} tokens, more than the declared K`));
      }
    }
    if (frame.commit.length > MAX_CANDIDATE_TOKENS) out.push(violation("uplinks", "commit-too-long", "a commit has at most 8 tokens"));
    if (frame.literal.length > MAX_LITERAL_TOKENS) {
      out.push(violation("uplinks", "placeholder-too-long", "a placeholder has at most 16 tokens"));
    }
    for (const [ids, what] of [
      [frame.commit, "commit"],
      [frame.draft, "draft"],
      [frame.literal, "placeholder"],
    ] as const) {
      const problem = vocabularyProblem(ids, this.vocabSize, what);
      if (problem !== null) out.push(violation("uplinks", "out-of-vocabulary", problem));
    }
    if (frame.literal.length > 0 && this.placeholders !== null && this.placeholders < 1) {
      out.push(violation("uplinks", "placeholder-undeclared", `Round ${frame.seq} carries a placeholder no guard decision declared`));
    }
    if (frame.commit.length > 0) {
      if (this.candidates === null) {
        out.push(violation("uplinks", "commit-without-candidates", "a commit with no steering candidates outstanding", "order"));
      } else if (this.candidates === ANY_ONE_TOKEN ? frame.commit.length !== 1 : !this.candidates.has(key(frame.commit))) {
        out.push(violation("uplinks", "commit-not-a-candidate", "the commit is not one of the last steering candidates", "order"));
      }
    } else if (this.mustCommit && frame.literal.length === 0) {
      out.push(violation("uplinks", "recovery-missing", "the last round rejected the draft: commit a recovery token", "order"));
    }
    return out;
  }

  private padding(frame: RoundLike): Violation[] {
    const expected = this.padded ? paddedSlots(this.draftLen) : null;
    if (frame.slots === null && expected === null) return [];
    if (frame.slots !== null && expected !== null && frame.slots.every((n, i) => n === expected[i])) return [];
    if (frame.slots === null) return [violation("uplinks", "not-padded", `Round ${frame.seq} is not padded`)];
    if (expected === null) return [violation("uplinks", "padding-undeclared", `PaddedRound ${frame.seq} undeclared`)];
    return [violation("uplinks", "padded-slots", `a padded round fills exactly (${expected.join(", ")}) slots`)];
  }

  afterRound(frame: RoundLike): void {
    this.lastSeq = Math.max(this.lastSeq, frame.seq);
    [this.awaiting, this.awaitingDraft] = [frame.seq, frame.draft.length];
    this.candidates = null;
    this.mustCommit = false;
    this.rounds += 1;
    if (frame.literal.length > 0 && this.placeholders) this.placeholders -= 1;
  }

  cosignatureViolations(seq: number): Violation[] {
    if (this.awaitingCosignature === null) {
      return [violation("session structure", "cosignature-unasked", `downlink seq ${seq} carries a cosignature no Close asked for`)];
    }
    if (seq !== this.awaitingCosignature) {
      return [violation("session structure", "cosignature-seq", `cosignature seq ${seq} does not answer the Close ${this.awaitingCosignature}`)];
    }
    return [];
  }

  answerViolations(seq: number, accepted: number): Violation[] {
    if (this.awaiting === null) return [violation("session structure", "answer-unmatched", `downlink seq ${seq} answers no outstanding round`)];
    if (seq !== this.awaiting) {
      return [violation("session structure", "answer-unmatched", `downlink seq ${seq} does not answer the outstanding round ${this.awaiting}`)];
    }
    if (accepted > this.awaitingDraft) {
      return [violation("downlinks", "accepted-over-draft", `accepted ${accepted} of a ${this.awaitingDraft}-token draft`)];
    }
    return [];
  }

  afterAnswer(seq: number, accepted: number, candidates: number[][], fusionVector: boolean): void {
    const drafted = this.awaitingDraft;
    if (this.awaiting !== null && seq === this.awaiting) this.awaiting = null;
    this.candidates = fusionVector ? ANY_ONE_TOKEN : candidates.length > 0 ? new Set(candidates.map(key)) : null;
    this.mustCommit = this.candidates !== null && (accepted < drafted || drafted === 0);
  }

  closeViolations(seq: number): Violation[] {
    const out: Violation[] = [];
    if (this.phase === "begun") out.push(violation("session structure", "no-session", "no session is open: nothing to Close"));
    else if (this.phase === "closed") out.push(this.afterEnd("a Close"));
    if (seq !== this.lastSeq + 1) {
      out.push(violation("session structure", "close-seq", `Close seq ${seq} where ${this.lastSeq + 1} was expected`));
    }
    return out;
  }

  afterClose(seq: number, witness: boolean): void {
    if (this.phase !== "fell back") this.phase = "closed";
    if (witness) this.awaitingCosignature = seq;
  }
}

type Examined = [Violation[], () => void];

/** What one session has declared and done so far, followed from its recorded bytes. */
export class SessionState {
  topK = 0;
  uplinkBytes = 0;
  downlinkBytes = 0;
  fallbackReason: string | null = null;
  fusion = false;
  readonly guard = new Map<string, number>();
  readonly contract: RoundContract;
  /** What the Open declared, and the committed text as this session's verifier saw it (`sentText`). */
  prompt: number[] = [];
  resumed: number[] = [];
  committed: number[] = [];
  /** The last round's commit and placeholder, and its draft, until its answer. */
  unanswered: { prefix: number[]; draft: number[] } | null = null;

  constructor(
    readonly vocabSize: number,
    readonly maxTopK: number,
  ) {
    this.contract = new RoundContract(vocabSize, 0);
  }

  get phase(): Phase {
    return this.contract.phase;
  }

  get rounds(): number {
    return this.contract.rounds;
  }

  get ended(): boolean {
    return this.contract.ended;
  }

  get k(): number {
    return Math.min(this.topK, this.maxTopK);
  }

  static beginViolations(vocabSize: number, maxTopK: number): Violation[] {
    if (maxTopK > WIRE_MAX_TOP_K) return [violation("downlinks", "too-many-candidates", `the session allows k = ${maxTopK}, above the protocol maximum k`)];
    if (vocabSize < 1 || maxTopK < 1) return [violation("session structure", "empty-vocabulary", "the session declares an empty vocabulary or k < 1")];
    if (vocabSize > MAX_VOCAB_SIZE) return [violation("session structure", "vocabulary-too-large", "the session declares a vocabulary above the protocol maximum")];
    return [];
  }

  /** What a session resuming this one may carry: the committed text as this session's verifier saw
   * it, with and without the commit and placeholder of a round left unanswered. Nothing for a
   * session that closed: the device resumes only a session it lost (core/contract.py's `sent_text`). */
  sentText(): number[][] {
    if (this.phase === "closed") return [];
    const text = [...this.resumed, ...this.committed];
    if (this.unanswered === null || this.unanswered.prefix.length === 0) return [text];
    return [text, [...text, ...this.unanswered.prefix]];
  }

  /** `earlier`: the log's other sessions so far, which a resumed Open must continue. */
  examineUplink(payload: Uint8Array, earlier: Iterable<SessionState> = []): Examined {
    const out: Violation[] = [];
    const count = (): void => {
      this.uplinkBytes += payload.length;
    };
    const msg = parse(UplinkSchema, payload);
    if (msg === null) return [[violation("uplinks", "not-protobuf", "the bytes do not parse as an Uplink message")], count];
    const unknown = unknownFields(msg);
    if (unknown.length > 0) out.push(violation("uplinks", "unknown-field", `unknown field(s) outside the schema: ${unknown.join(", ")}`));
    if (!isCanonical(UplinkSchema, msg, payload)) {
      out.push(violation("uplinks", "non-canonical", "the bytes are not the deterministic serialization of what they parse to"));
    }
    const kind = msg.kind;
    switch (kind.case) {
      case undefined:
        out.push(violation("uplinks", "no-kind", "the Uplink carries no Open, Round or Close"));
        return [out, count];
      case "open": {
        if (this.ended) out.push(this.contract.afterEnd("an uplink open"));
        else out.push(...this.contract.openViolations());
        let [topK, draftLen, padded, fusion] = [0, 0, false, false];
        const params = kind.value.params;
        const problem = params === undefined ? paramsProblem({ method: 0, policy: 0 } as never) : paramsProblem(params);
        if (problem !== null || params === undefined) {
          out.push(violation("uplinks", "params-out-of-range", `declared parameters out of bounds: ${problem}`));
        } else {
          [topK, draftLen, padded, fusion] = [params.topK, params.draftLen, params.paddedFrames, params.method === Method.FUSION];
          if (topK > this.vocabSize) {
            out.push(violation("uplinks", "top-k-over-vocabulary", `declared top-k ${topK} exceeds the vocabulary of ${this.vocabSize}`));
          }
        }
        if (kind.value.promptIds.length === 0) out.push(violation("uplinks", "empty-prompt", "the Open carries no prompt tokens"));
        const outside = vocabularyProblem(kind.value.promptIds, this.vocabSize, "prompt");
        if (outside !== null) out.push(violation("uplinks", "out-of-vocabulary", outside));
        const [prompt, resumed] = [[...kind.value.promptIds], [...kind.value.resumeIds]];
        if (resumed.length > 0) {
          const outsideResumed = vocabularyProblem(resumed, this.vocabSize, "resumed text");
          if (outsideResumed !== null) out.push(violation("uplinks", "out-of-vocabulary", outsideResumed));
          if (resumed.length > MAX_RESUME_TOKENS) {
            out.push(violation("uplinks", "resume-too-long", `the resumed text has ${resumed.length} tokens; a session holds at most ${MAX_RESUME_TOKENS}`));
          } else if (![...earlier].some((s) => s !== this && key(s.prompt) === key(prompt) && s.sentText().some((t) => key(t) === key(resumed)))) {
            out.push(
              violation(
                "uplinks",
                "resume-not-sent",
                `the Open resumes ${resumed.length} token(s) that no earlier session of this log with the same prompt sent up and committed: a resume may carry nothing that had not gone up`,
              ),
            );
          }
        }
        return [
          out,
          () => {
            count();
            if (this.phase === "begun") [this.topK, this.fusion, this.prompt, this.resumed] = [topK, fusion, prompt, resumed];
            this.contract.afterOpen(draftLen, padded);
          },
        ];
      }
      case "round":
      case "paddedRound": {
        let frame: RoundLike;
        if (kind.case === "round") {
          const r = kind.value;
          frame = { seq: r.seq, commit: [...r.commitIds], draft: [...r.draftIds], literal: [...r.literalIds], slots: null };
        } else {
          const p = kind.value;
          try {
            frame = paddedFrame(p, null);
          } catch (err) {
            // A token after padding: checked as an empty round from here.
            if (!(err instanceof ProtocolError)) throw err;
            out.push(violation("uplinks", err.category, err.message));
            frame = { seq: p.seq, commit: [], draft: [], literal: [], slots: [p.commitIds.length, p.draftIds.length, p.literalIds.length] };
          }
        }
        out.push(...this.contract.roundViolations(frame));
        return [
          out,
          () => {
            count();
            // A round out of turn is not the text.
            if (this.contract.awaiting === null) this.unanswered = { prefix: [...frame.commit, ...frame.literal], draft: frame.draft };
            this.contract.afterRound(frame);
          },
        ];
      }
      case "close": {
        const close = kind.value;
        out.push(...this.contract.closeViolations(close.seq));
        const witness = close.witness !== undefined;
        const problem = close.witness === undefined ? null : witnessViolation(close.witness);
        if (problem !== null) out.push(violation("uplinks", problem[0], `the Close's witness request is malformed: ${problem[1]}`));
        return [
          out,
          () => {
            count();
            this.contract.afterClose(close.seq, witness);
            if (this.phase === "closed") [this.committed, this.resumed, this.unanswered] = [[], [], null]; // never resumed
          },
        ];
      }
    }
  }

  examineDownlink(payload: Uint8Array): Examined {
    const out: Violation[] = [];
    const count = (): void => {
      this.downlinkBytes += payload.length;
    };
    const msg = parse(DownlinkSchema, payload);
    if (msg === null) return [[violation("downlinks", "not-protobuf", "the bytes do not parse as a Downlink message")], count];
    const unknown = unknownFields(msg);
    if (unknown.length > 0) out.push(violation("downlinks", "unknown-field", `unknown field(s) outside the schema: ${unknown.join(", ")}`));
    if (!isCanonical(DownlinkSchema, msg, payload)) {
      out.push(violation("downlinks", "non-canonical", "the bytes are not the deterministic serialization of what they parse to"));
    }
    if (msg.cosignature !== undefined) {
      const problem = cosignatureViolation(msg);
      if (problem !== null) out.push(violation("downlinks", problem[0], problem[1]));
      out.push(...this.contract.cosignatureViolations(msg.seq));
      return [
        out,
        () => {
          count();
          this.contract.awaitingCosignature = null;
        },
      ];
    }
    const n = msg.candidates.length;
    if (n > WIRE_MAX_TOP_K) out.push(violation("downlinks", "too-many-candidates", `${n} candidates, above the protocol maximum k`));
    else if (this.phase !== "begun" && n > this.k) {
      out.push(violation("downlinks", "too-many-candidates", `${n} candidates, above the session's k = ${this.k}`));
    }
    msg.candidates.forEach((c, i) => {
      if (c.tokenIds.length < 1 || c.tokenIds.length > MAX_CANDIDATE_TOKENS) {
        out.push(violation("downlinks", "candidate-length", `candidate ${i} has ${c.tokenIds.length} tokens`));
      }
      const problem = vocabularyProblem(c.tokenIds, this.vocabSize, `candidate ${i}`);
      if (problem !== null) out.push(violation("downlinks", "out-of-vocabulary", problem));
      if (!Number.isFinite(c.value)) out.push(violation("downlinks", "non-finite-value", `candidate ${i} has a non-finite value`));
    });
    const fusion = fusionViolation(msg, this.fusion, this.vocabSize);
    if (fusion !== null) out.push(violation("downlinks", fusion[0], fusion[1]));
    out.push(...this.contract.answerViolations(msg.seq, msg.accepted));
    return [
      out,
      () => {
        count();
        if (this.unanswered !== null && this.contract.awaiting === msg.seq) {
          this.committed.push(...this.unanswered.prefix, ...this.unanswered.draft.slice(0, msg.accepted));
          this.unanswered = null;
        }
        this.contract.afterAnswer(msg.seq, msg.accepted, msg.candidates.map((c) => [...c.tokenIds]), msg.fusion !== undefined);
      },
    ];
  }

  examineFallback(reason: string): Examined {
    const out = this.ended ? [violation("session structure", "after-end", `a fallback after the session ${this.phase}`)] : [];
    return [
      out,
      () => {
        if (!this.ended) [this.contract.phase, this.fallbackReason] = ["fell back", reason];
      },
    ];
  }

  examineGuard(decision: string, count: number, placeholder: string): Examined {
    const out = this.ended ? [violation("session structure", "after-end", `a guard decision after the session ${this.phase}`)] : [];
    if (!GUARD_DECISIONS.has(decision)) out.push(violation("session structure", "guard-decision", `guard decision ${decision} is none of the decisions`));
    if (!(count >= 0 && count <= MAX_GUARD_SPANS)) out.push(violation("session structure", "guard-count", `a guard decision counts ${count} spans`));
    if (PROMPT_DECISIONS.has(decision) && (this.phase !== "open" || this.rounds > 0)) {
      // Made before the Open goes up and recorded right after it: one after a round could not have shaped the Open.
      const when = this.phase === "begun" ? "before the Open" : `after round ${this.rounds}`;
      out.push(violation("session structure", "prompt-decision-order", `a prompt guard decision (${decision}) ${when}: it belongs right after the Open`));
    }
    return [
      out,
      () => {
        const k = `${decision}\u0000${placeholder}`;
        this.guard.set(k, (this.guard.get(k) ?? 0) + count);
        if (decision === "placeholder" && this.contract.placeholders !== null) this.contract.placeholders += count;
      },
    ];
  }
}

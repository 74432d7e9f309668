/**
 * A scripted in-process verifier for the audit tests (test/audit-log.test.ts, test/write-log.ts):
 * a table "drafter" and a "Generalist" that accepts the draft's prefix it agrees with and steers to
 * its own next token, and that, as the log's witness, cosigns the checkpoint a Close carries.
 * Every frame is a real canonical one (`decodeUplink` judges each uplink).
 */
import { create, toBinary } from "@bufbuild/protobuf";
import { CandidateSchema, CosignatureSchema, DownlinkSchema } from "../src/gen/verifier_pb.js";
import { checkpointBody, cosign, type NoteSigner } from "../src/note.js";
import type { DraftSequence } from "../src/session.js";
import { FrameQueue, VerifierLost, type Transport, type VerifierStream } from "../src/transport.js";
import { decodeUplink, DEFAULT_PARAMS, type RoundFrame, type WireParams } from "../src/wire.js";

export const V = 16;
export const EOS = 15;
export const draftNext = (x: number): number => (x * 5 + 3) % 14;
export const targetNext = (x: number): number => (x === 6 ? 2 : x === 11 ? EOS : draftNext(x));

export class TableSequence implements DraftSequence {
  constructor(private ids: number[]) {}
  get length(): number {
    return this.ids.length;
  }
  nextLogprobs(): Promise<Float32Array> {
    const row = new Float32Array(V).fill(Math.log(0.01));
    row[draftNext(this.ids[this.ids.length - 1]!)] = Math.log(0.85);
    return Promise.resolve(row);
  }
  push(tokens: number[]): void {
    this.ids.push(...tokens);
  }
  truncate(n: number): void {
    this.ids.length = n;
  }
}
export const drafter = { sequence: (prefix: number[]) => new TableSequence([...prefix]) };

export const params: WireParams = { ...DEFAULT_PARAMS, topK: 4 };

/** What a scripted verifier is told to be beyond the table above. */
export interface FakeVerifierOptions {
  breakAfter?: number;
  cosignAs?: NoteSigner;
  silentWitness?: boolean;
  opens?: number;
  faulty?: number;
  /** The vocabulary uplinks are judged against (default V: the table's). */
  vocabSize?: number;
  /** Accept every draft whole, steering to `steerTo` where a recovery is needed (a copying cloud,
   * for drafts in a real tokenizer's vocabulary). */
  acceptAll?: { steerTo: number };
  /** Every round as received (commit, literal, draft). */
  rounds?: RoundFrame[];
}

/** A verifier that follows its Generalist and, as the log's witness, cosigns the checkpoint a Close
 * carries (`cosignAs` another key: a bad answer). */
export function fakeVerifier(witness: NoteSigner | null, opts: FakeVerifierOptions = {}): Transport {
  let opened = 0; // `opens`: streams it takes before it is unreachable; `breakAfter` breaks the first `faulty` ones
  return {
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
          const f = decodeUplink(frame, opts.vocabSize ?? V);
          if (f.kind === "open") context = [...f.promptIds, ...f.resumeIds];
          if (f.kind === "close") {
            if (f.witness !== null && witness !== null && !opts.silentWitness) {
              const body = checkpointBody({ origin: f.witness.origin, size: f.witness.size, root: f.witness.rootHash });
              const by = opts.cosignAs ?? witness;
              const signature = cosign(by, body, BigInt(Math.floor(Date.now() / 1000)));
              const cosignature = create(CosignatureSchema, { witness: by.key.name, signature });
              q.push(toBinary(DownlinkSchema, create(DownlinkSchema, { seq: f.seq, cosignature })));
            }
            q.end();
            return;
          }
          if (f.kind !== "round" && f.kind !== "padded_round") return;
          rounds += 1;
          if (faulty && opts.breakAfter !== undefined && rounds > opts.breakAfter) return q.fail(new VerifierLost("verifier-lost", "the stream broke"));
          opts.rounds?.push(f);
          if (opts.acceptAll !== undefined) {
            const candidates = [create(CandidateSchema, { tokenIds: [opts.acceptAll.steerTo], value: -0.5 })];
            q.push(toBinary(DownlinkSchema, create(DownlinkSchema, { seq: f.seq, accepted: f.draft.length, candidates })));
            return;
          }
          context.push(...f.commit, ...f.literal);
          let accepted = 0;
          while (accepted < f.draft.length && f.draft[accepted] === targetNext(context[context.length - 1]!)) context.push(f.draft[accepted++]!);
          const candidates = [create(CandidateSchema, { tokenIds: [targetNext(context[context.length - 1]!)], value: -0.5 })];
          q.push(toBinary(DownlinkSchema, create(DownlinkSchema, { seq: f.seq, accepted, candidates })));
        },
        receive: (ms: number) => q.next(ms),
        close: () => Promise.resolve(),
        cancel: () => q.fail(new VerifierLost("verifier-lost", "cancelled")),
      });
    },
  };
}


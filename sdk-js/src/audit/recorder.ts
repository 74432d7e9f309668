/**
 * The audit side of the device's one egress choke point (audit/recorder.py's `EgressRecorder`):
 * every uplink is checked against the session contract (src/contract.ts) and logged, durably,
 * before it is sent; every downlink is logged as received, then checked. An uplink that breaks
 * the contract throws `EgressBlocked`: it is neither logged nor sent (fail closed).
 *
 *     const recorder = new EgressRecorder(AuditLog.open(storage, signer, { device, witnessKey }));
 *     const sid = recorder.beginSession(vocabSize, maxTopK);
 *     recorder.onUplink(sid, frame);      // before sending
 *     recorder.onDownlink(sid, received); // on receipt, before parsing
 *     recorder.onFallback(sid, "verifier-lost");
 *
 * The witness exchange (docs/audit-format.md §8): `witnessRequest(sid)` signs a checkpoint of the
 * log as it stands and proves it consistent with the last cosigned one; the Close carries it, and
 * only the request issued for that session may ride on its Close. The verifier's answer is logged
 * like any downlink and a checkpoint signed over it; only a cosignature that verifies under the
 * log's witness key and is dated within the exchange (±`COSIGNATURE_SKEW_S`) is kept in
 * checkpoints.jsonl and proved from by the next Close. What the cloud did wrong in answering
 * Closes is kept in `faults`, once each.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { randomBytes } from "@noble/hashes/utils.js";
import { equalBytes, toBase64, toHex } from "../bytes.js";
import { SessionState, type Violation } from "../contract.js";
import { ProtocolError, SpecSteerError } from "../errors.js";
import { DownlinkSchema, UplinkSchema } from "../gen/verifier_pb.js";
import { MAX_VOCAB_SIZE, WIRE_MAX_TOP_K } from "../limits.js";
import { consistencyProof } from "../merkle.js";
import { checkpointBody, NoteError, parseNote, verifyCosignature } from "../note.js";
import { parse, witnessFromProto, type WitnessRequest } from "../wire.js";
import { addCosignature, AuditError, type AuditLog } from "./log.js";

export const COSIGNATURE_SKEW_S = 600;
const IDENT = /^[a-z][a-z0-9-]{0,63}$/;
const PLACEHOLDER = /^[<[{]?[A-Z][A-Z_]{0,23}(?:_[0-9]{1,3})?[>\]}]?$/;

/** The recorder refused an uplink: it was not logged and must not be sent. */
export class EgressBlocked extends SpecSteerError {
  override name = "EgressBlocked";
}

const describe = (violations: Violation[]): string => violations.map((v) => v.message).join("; ");

function sameWitness(a: WitnessRequest, b: WitnessRequest): boolean {
  return (
    a.origin === b.origin &&
    equalBytes(a.logKey, b.logKey) &&
    a.size === b.size &&
    equalBytes(a.rootHash, b.rootHash) &&
    equalBytes(a.signature, b.signature) &&
    a.oldSize === b.oldSize &&
    a.consistencyProof.length === b.consistencyProof.length &&
    a.consistencyProof.every((p, i) => equalBytes(p, b.consistencyProof[i]!))
  );
}

/** The witness request a serialized Uplink's Close carries, if any (shape checked by the contract). */
function witnessOf(payload: Uint8Array): WitnessRequest | null {
  const msg = parse(UplinkSchema, payload);
  if (msg?.kind.case !== "close" || msg.kind.value.witness === undefined) return null;
  return witnessFromProto(msg.kind.value.witness);
}

function when(t: number): string {
  return new Date(t * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** Why a cosignature dated `timestamp` is not the witness's word on a checkpoint shown to it between
 * `asked` and `answered` (Unix seconds, the device's clock), or null (audit/cosignature.py's `time_problem`). */
export function timeProblem(timestamp: bigint, asked: number, answered: number): string | null {
  const t = Number(timestamp);
  if (timestamp <= 0n) return "it is dated 0 (1970-01-01), not when the witness saw the checkpoint";
  if (t < asked - COSIGNATURE_SKEW_S) {
    return `it is dated ${when(t)}, before the checkpoint existed (${when(asked)}) by more than the ${COSIGNATURE_SKEW_S / 60} minutes' clock skew allowed`;
  }
  if (t > answered + COSIGNATURE_SKEW_S) {
    return `it is dated ${when(t)}, after it was received (${when(answered)}) by more than the ${COSIGNATURE_SKEW_S / 60} minutes' clock skew allowed`;
  }
  return null;
}

interface Issued {
  request: WitnessRequest;
  note: string;
}

/** Records uplinks before they are sent and downlinks on receipt, for any number of sessions. */
export class EgressRecorder {
  private readonly sessions = new Map<string, SessionState>();
  private readonly witness = new Map<string, Issued>();
  private readonly asked = new Map<string, number>(); // per session: its Close's record time
  private readonly closeAt = new Map<string, number>(); // per session: its Close's record, until answered
  /** The cloud's misbehaviour in answering Closes, once each (as the Python device's `faults`). */
  readonly faults: string[] = [];

  constructor(readonly log: AuditLog) {}

  /** Start a session: the Specialist's vocabulary size and the largest k the device accepts. */
  beginSession(vocabSize: number, maxTopK: number = WIRE_MAX_TOP_K): string {
    if (!(Number.isInteger(vocabSize) && vocabSize >= 1 && vocabSize <= MAX_VOCAB_SIZE)) {
      throw new AuditError(`vocabulary size must be in [1, ${MAX_VOCAB_SIZE}]; got ${vocabSize}`);
    }
    if (!(Number.isInteger(maxTopK) && maxTopK >= 1 && maxTopK <= WIRE_MAX_TOP_K)) {
      throw new AuditError(`the session's k cap must be in [1, ${WIRE_MAX_TOP_K}]; got ${maxTopK}`);
    }
    // Random and device-local: it never goes on the wire (globalThis.crypto: Node, or React
    // Native with a getRandomValues polyfill).
    const sid = toHex(randomBytes(16));
    this.log.appendSession("session-begin", sid, { vocab_size: vocabSize, max_top_k: maxTopK });
    this.sessions.set(sid, new SessionState(vocabSize, maxTopK));
    return sid;
  }

  private state(sid: string): SessionState {
    const s = this.sessions.get(sid);
    if (s === undefined) throw new AuditError(`session ${sid} was not begun by this recorder`);
    return s;
  }

  private afterEnd(state: SessionState, wasEnded: boolean): void {
    if (state.ended && !wasEnded) this.log.checkpoint();
  }

  /** Sign a checkpoint of the log as it stands and prove it consistent with the last cosigned one:
   * every field is the log's own, so the Close that carries it says nothing the log does not. */
  witnessRequest(sid: string): WitnessRequest {
    this.state(sid);
    const log = this.log;
    const note = log.checkpoint();
    const size = log.size;
    const oldSize = log.cosigned?.size ?? 0;
    const proof = oldSize > 0 && oldSize < size ? consistencyProof(oldSize, log.leafHashes.slice(0, size)) : [];
    const sigs = parseNote(note).signatures;
    const request: WitnessRequest = {
      origin: log.key.key.name,
      logKey: log.key.key.publicKey,
      size: BigInt(size),
      rootHash: log.root(),
      signature: sigs[0]!.signature,
      oldSize: BigInt(oldSize),
      consistencyProof: proof,
    };
    this.witness.set(sid, { request, note });
    return request;
  }

  /** Check and log one serialized Uplink; its record index once it is durable. Throws
   * `EgressBlocked` (and logs nothing) if the bytes break the contract: do not send them then. */
  onUplink(sid: string, payload: Uint8Array): number {
    const state = this.state(sid);
    const [violations, commit] = state.examineUplink(payload, this.sessions.values());
    if (violations.length > 0) throw new EgressBlocked(`uplink blocked for session ${sid.slice(0, 8)}…: ${describe(violations)}`);
    const witness = witnessOf(payload);
    const issued = this.witness.get(sid);
    if (witness !== null && (issued === undefined || !sameWitness(witness, issued.request))) {
      // Only the log's own checkpoint may ride on a Close: anything else could carry text.
      throw new EgressBlocked(`uplink blocked for session ${sid.slice(0, 8)}…: the Close carries a witness request this recorder did not issue for it`);
    }
    const wasEnded = state.ended;
    const index = this.log.appendSession("uplink", sid, payloadFields("up", payload), payload);
    commit();
    if (witness !== null) {
      this.asked.set(sid, this.timeOf(index));
      this.closeAt.set(sid, index);
    }
    this.afterEnd(state, wasEnded);
    return index;
  }

  private timeOf(index: number): number {
    const last = this.log.lastAppended;
    return last !== null && last.index === index ? last.time : Date.now() / 1000;
  }

  /** Log one received Downlink as received, then check it; `ProtocolError` if it breaks the contract. */
  onDownlink(sid: string, payload: Uint8Array): number {
    const state = this.state(sid);
    const index = this.log.appendSession("downlink", sid, payloadFields("down", payload));
    const [violations, commit] = state.examineDownlink(payload);
    const msg = parse(DownlinkSchema, payload);
    const cosignature = msg?.cosignature;
    const openClose = this.closeAt.has(sid);
    if (cosignature !== undefined && (violations.length > 0 || !openClose)) {
      // A cosignature nobody asked for (a second answer), or one of the wrong shape: the cloud's.
      this.witness.delete(sid);
      this.closeAt.delete(sid);
      this.faults.push(
        openClose
          ? `the verifier answered the Close with a malformed cosignature (audit record ${index})`
          : `the verifier sent a cosignature that answers no open Close (audit record ${index})`,
      );
    }
    if (violations.length > 0) throw new ProtocolError(violations[0]!.category, `downlink rejected (audit record ${index}): ${describe(violations)}`);
    commit();
    if (cosignature === undefined || msg === null) return index;
    this.closeAt.delete(sid);
    const issued = this.witness.get(sid);
    this.witness.delete(sid);
    if (issued === undefined) return index;
    // The exchange's window on the log's own clock: from the Close's record to this answer's.
    const answered = this.timeOf(index);
    const asked = this.asked.get(sid) ?? answered;
    this.asked.delete(sid);
    const problem = this.cosignatureProblem(issued.request, cosignature.witness, cosignature.signature, asked, answered);
    if (problem === null) this.log.storeCosigned(addCosignature(issued.note, cosignature.witness, cosignature.signature));
    // Kept on record either way (the downlink above); never proved from unless it verified.
    this.log.checkpoint(); // the answer is the session's last record: sign over it
    if (problem !== null && this.log.witnessKey !== null) {
      const message = `the verifier answered the Close with an invalid cosignature (audit record ${index}): ${problem}`;
      this.faults.push(message);
      throw new ProtocolError("cosignature-invalid", `${message}; it is kept on record, and the next Close proves from the last valid one`);
    }
    return index;
  }

  private cosignatureProblem(request: WitnessRequest, witness: string, signature: Uint8Array, asked: number, answered: number): string | null {
    const key = this.log.witnessKey;
    if (key === null) return "the device holds no witness key to check it with";
    if (witness !== key.name) return `it names witness ${JSON.stringify(witness)}, not ${JSON.stringify(key.name)}`;
    let timestamp: bigint;
    try {
      timestamp = verifyCosignature(key, checkpointBody({ origin: request.origin, size: request.size, root: request.rootHash }), signature);
    } catch (err) {
      if (err instanceof NoteError) return err.message;
      throw err;
    }
    return timeProblem(timestamp, asked, answered);
  }

  /** Closes that asked for a cosignature and got no answer, once the session is over: each is
   * reported once, as withheld. */
  unanswered(): string[] {
    const out: string[] = [];
    for (const [sid, index] of this.closeAt) {
      if (this.sessions.get(sid)?.ended) {
        out.push(`the verifier withheld its cosignature of the Close (audit record ${index})`);
        this.closeAt.delete(sid);
        this.witness.delete(sid);
      }
    }
    this.faults.push(...out);
    return out;
  }

  /** The device finished this session locally; `reason` is a short identifier, never free text. */
  onFallback(sid: string, reason: string): number {
    if (!IDENT.test(reason)) throw new AuditError(`a fallback reason is a short lowercase identifier such as 'verifier-unreachable'; got ${JSON.stringify(reason)}`);
    const state = this.state(sid);
    const [violations, commit] = state.examineFallback(reason);
    if (violations.length > 0) throw new AuditError(describe(violations));
    const wasEnded = state.ended;
    const index = this.log.appendSession("fallback", sid, { reason });
    commit();
    this.afterEnd(state, wasEnded);
    return index;
  }

  /** The egress guard's decision (what it did, how many spans, which label; never the span), before
   * the uplink it shaped. */
  onGuardDecision(sid: string, decision: string, count: number, placeholder: string): number {
    if (!PLACEHOLDER.test(placeholder)) throw new AuditError(`a placeholder is a short label such as '[EMAIL]'; got ${JSON.stringify(placeholder)}`);
    const state = this.state(sid);
    const [violations, commit] = state.examineGuard(decision, count, placeholder);
    if (violations.length > 0) throw new AuditError(describe(violations));
    const index = this.log.appendSession("guard-decision", sid, { decision, count, placeholder });
    commit();
    return index;
  }

  /** Whether the session's record is over (its Close or a fallback is logged). */
  ended(sid: string): boolean {
    return this.state(sid).ended;
  }
}

function payloadFields(dir: "up" | "down", payload: Uint8Array): Record<string, string | number> {
  return { dir, len: payload.length, sha256: toHex(sha256(payload)), bytes: toBase64(payload) };
}

/**
 * The verifier as a device log's witness (server/witness.py), C2SP tlog-witness's checks: trust
 * the device's log key at first sight, then cosign only a checkpoint signed by that key, not
 * smaller than the last cosigned one and consistent with it. A refusal changes nothing it holds.
 */
import { equalBytes, utf8 } from "./bytes.js";
import { ProofError, verifyConsistency } from "./merkle.js";
import { checkpointBody, cosign, NoteError, NoteKey, type NoteSigner } from "./note.js";
import type { WitnessRequest } from "./wire.js";

export type WitnessDecision =
  | { decision: "cosigned"; witness: string; timestamp: bigint; signature: Uint8Array }
  | { decision: "refused"; category: string; reason: string };

interface WitnessedLog {
  key: string;
  size: bigint;
  root: Uint8Array;
  time: bigint;
}

export class Witness {
  readonly logs = new Map<string, WitnessedLog>();

  constructor(private readonly signer: NoteSigner) {}

  /** Check `request` from `device` (the name its TLS certificate proved) at Unix time `now`. */
  cosign(device: string, request: WitnessRequest, now: bigint): WitnessDecision {
    const refuse = (category: string, reason: string): WitnessDecision => ({ decision: "refused", category, reason });
    let key: NoteKey;
    try {
      key = new NoteKey(request.origin, request.logKey);
    } catch (err) {
      if (err instanceof NoteError) return refuse("witness-bad-signature", `the log key is unusable: ${err.message}`);
      throw err;
    }
    const body = checkpointBody({ origin: request.origin, size: request.size, root: request.rootHash });
    if (!key.verify(utf8.encode(body), request.signature)) {
      return refuse("witness-bad-signature", "the checkpoint's signature does not verify under the log key it names");
    }
    const last = this.logs.get(device);
    if (last === undefined) {
      for (const [other, entry] of this.logs) {
        if (other !== device && entry.key === key.toString()) {
          return refuse("witness-key-pinned-elsewhere", `the log key is pinned for device ${other}`);
        }
      }
    } else {
      if (last.key !== key.toString()) return refuse("witness-key-changed", "not the key pinned for this device");
      if (request.size < last.size) return refuse("witness-rollback", `smaller than the last cosigned size ${last.size}`);
      if (request.size === last.size) {
        if (!equalBytes(request.rootHash, last.root)) return refuse("witness-fork", `a second root for the cosigned size ${last.size}`);
      } else if (request.oldSize !== last.size) {
        return refuse("witness-conflict", `the proof starts at size ${request.oldSize}, but the last cosigned size is ${last.size}`);
      } else {
        try {
          verifyConsistency(last.size, request.size, last.root, request.rootHash, request.consistencyProof);
        } catch (err) {
          if (err instanceof ProofError) return refuse("witness-inconsistent", `not consistent with the last cosigned one: ${err.message}`);
          throw err;
        }
      }
    }
    // A cosignature/v1 says "the largest consistent tree I have seen at this time": never go back.
    const timestamp = last !== undefined && last.time > now ? last.time : now;
    const signature = cosign(this.signer, body, timestamp);
    this.logs.set(device, { key: key.toString(), size: request.size, root: request.rootHash, time: timestamp });
    return { decision: "cosigned", witness: this.signer.key.name, timestamp, signature };
  }
}

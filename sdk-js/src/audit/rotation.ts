/**
 * Log-key rotation (docs/audit-format.md §5.1, audit/rotation.py): a `key-rotation` record at
 * position P, signed by the key in force, hands the log to a new key of the same name. The
 * checkpoint of size P+1 is the old key's last; every checkpoint of size P+2 or more is the new
 * key's. Pure: the writer (log.ts) refuses a log whose chain has a problem, `verifyLog` reports it.
 */
import { fromBase64, utf8 } from "../bytes.js";
import { NoteError, NoteKey } from "../note.js";
import type { LogRecord } from "./records.js";

export const ROTATION_HEADER = "specsteer-key-rotation/1\n";

/** What the key in force signs to hand the log to `next` at record `position` (audit/rotation.py's
 * `handover_message`): both keys and the position, so the signature fits one handover only. */
export function handoverMessage(old: NoteKey, next: NoteKey, position: number): Uint8Array {
  return utf8.encode(`${ROTATION_HEADER}${old.toString()}\n${next.toString()}\n${position}\n`);
}

/** The log key in force at each size: the header's, then each valid rotation's. */
export class KeyChain {
  constructor(
    readonly initial: NoteKey,
    readonly rotations: { position: number; key: NoteKey }[] = [],
  ) {}

  /** The key that signs a checkpoint of `size` records (`KeyChain.key_for`). */
  keyFor(size: number): NoteKey {
    let key = this.initial;
    for (const r of this.rotations) if (size > r.position + 1) key = r.key;
    return key;
  }

  get current(): NoteKey {
    return this.rotations[this.rotations.length - 1]?.key ?? this.initial;
  }
}

/** The chain of `initial` through the log's rotation records, and what is wrong with any of them (a
 * rotation that does not verify hands nothing over), as audit/rotation.py's `key_chain`. */
export function keyChain(
  initial: NoteKey,
  parsed: Iterable<{ position: number; record: LogRecord | null }>,
): { chain: KeyChain; problems: string[] } {
  const chain = new KeyChain(initial);
  const problems: string[] = [];
  for (const { position, record } of parsed) {
    if (record === null || record.kind !== "key-rotation") continue;
    const old = chain.current;
    const where = `record ${position} (key-rotation)`;
    let next: NoteKey;
    try {
      next = NoteKey.parse(String(record.fields.key));
    } catch (err) {
      if (!(err instanceof NoteError)) throw err;
      problems.push(`${where}: the new key or its signature is unreadable: ${err.message}`);
      continue;
    }
    const signature = fromBase64(String(record.fields.signature));
    if (signature === null) {
      problems.push(`${where}: the new key or its signature is unreadable: the signature is not base64`);
      continue;
    }
    if (next.name !== old.name) {
      problems.push(`${where}: the new key is named '${next.name}', not the log's '${old.name}'`);
      continue;
    }
    if (!old.verify(handoverMessage(old, next, position), signature)) {
      problems.push(`${where}: the handover to ${next.toString()} is not signed by the key in force (${old.toString()}): nothing is handed over`);
      continue;
    }
    chain.rotations.push({ position, key: next });
  }
  return { chain, problems };
}

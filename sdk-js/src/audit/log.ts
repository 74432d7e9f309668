/**
 * Writing the device's audit log (docs/audit-format.md §1-5, audit/log.py's `AuditLog`): framed
 * canonical records in segments, an RFC 9162 Merkle tree over them, C2SP signed checkpoints in
 * checkpoints.jsonl, and the witness's cosigned checkpoints beside them (§8). The bytes are the
 * Python device's: `audit verify` (Python or `verifyLog`) reads a TypeScript device's log as it
 * reads a Python one.
 *
 * Storage is `LogStorage`, a narrow interface an app implements over its own files
 * (`logStorage(dir)` in src/node/files.ts on Node's fs; `MemoryLogStorage` here for tests). Each
 * append must be durable (fsync'ed) before it returns, as the Python writer's is, so an
 * acknowledged record survives a crash.
 *
 * A crash can tear only the last write (one frame, or one checkpoints.jsonl line): `open` cuts
 * such a tail, keeps the cut bytes as torn/<file>.<offset>.<sha256>.bin and appends a `repair`
 * record, as audit/log.py does; damage anywhere else, or to a record a checkpoint signed, is
 * refused.
 *
 * `rotateKey` hands the log to a new key of the same name (§5.1, audit/rotation.py): a
 * `key-rotation` record signed by the key in force, a checkpoint over it by that key (its last),
 * then every checkpoint by the new key. `open` follows the chain from the header's key through
 * each rotation and takes the log back only with the key in force at its end; a rotation whose
 * signature does not verify is refused, not skipped, so a forged handover cannot take the log.
 *
 * One writer at a time: `open` takes the storage's writer lock (`LogStorage.lock`) before it reads
 * or creates anything and holds it until `close`, so a second process (or a second `open` in this
 * one) is refused rather than interleaving its appends with ours.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { concatBytes, toBase64, toHex, utf8 } from "../bytes.js";
import { UplinkSchema } from "../gen/verifier_pb.js";
import { WIRE_MAX_TOP_K } from "../limits.js";
import { Accumulator, leafHash, root as merkleRoot } from "../merkle.js";
import {
  checkpointBody,
  noteCosignatures,
  NoteError,
  NoteKey,
  NoteSigner,
  openCheckpoint,
  parseCheckpointBody,
  parseNote,
  SIG_PREFIX,
  type Checkpoint,
} from "../note.js";
import { parse } from "../wire.js";
import { encode, LOG_FORMAT, parseRecord, RecordError, seconds, type Fields, type LogRecord } from "./records.js";
import { handoverMessage, KeyChain, keyChain } from "./rotation.js";
import { scanLog, tornEvidence, type LogFiles, type LogScan } from "./scan.js";

/** The log's files as the writer needs them: everything `LogFiles` reads, plus two durable appends. */
export interface LogStorage extends LogFiles {
  /** Whether the log exists (its segments/ folder); `create` makes it. */
  exists(): boolean;
  /** Create the log's folders (segments/), private to the app. */
  create(): void;
  /** Append `data` to segments/`name` (created if missing); durable before it returns. */
  appendSegment(name: string, data: Uint8Array): void;
  /** Append `data` (whole lines) to checkpoints.jsonl (created if missing); durable before it returns. */
  appendCheckpoints(data: Uint8Array): void;
  /** Write torn/`name` (a new file, the torn/ folder created if missing); durable before it returns. */
  keepTorn(name: string, data: Uint8Array): void;
  /** Cut `file` (`segments/<name>` or `checkpoints.jsonl`) to `length` bytes; durable before it returns. */
  truncate(file: string, length: number): void;
  /**
   * Take the log's writer lock, creating the log's folder if need be, and return its release; throw
   * an `AuditError` when another writer holds it. `AuditLog.open` takes it first and releases it on
   * `close`. On Node, `logStorage(dir)` locks dir/lock as the Python writer does, so the two devices
   * exclude each other too. Optional: a storage that only one writer can ever reach (one process
   * owns the app's files, or `MemoryLogStorage`) may leave it out.
   */
  lock?(): () => void;
}

/** The device's mutual-TLS certificate as the log binds it (a `device-cert` record, §3). */
export interface DeviceIdentity {
  /** The certificate's common name. */
  name: string;
  /** SHA-256 of the certificate's DER, lowercase hex. */
  certSha256: string;
}

export class AuditError extends Error {
  override name = "AuditError";
}

/** The log was opened with the key its latest rotation handed it over from (audit/errors.py's
 * `LogHandedOver`): `position` is the rotation's record, `newKey` the key that writes to it now. */
export class LogHandedOverError extends AuditError {
  override name = "LogHandedOverError";
  constructor(
    message: string,
    readonly position: number,
    readonly newKey: NoteKey,
  ) {
    super(message);
  }
}

export const DEFAULT_SEGMENT_RECORDS = 4096;
export const INTERRUPTED = "interrupted";

export function segmentName(first: number): string {
  return `seg-${String(first).padStart(12, "0")}.log`;
}

/** A record's `time`: UTC, microseconds (the clock gives milliseconds; the rest are zeros). */
export function recordTime(date: Date = new Date()): string {
  return date.toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

/** One checkpoints.jsonl line as Python's json.dumps({"note": note}, ensure_ascii=True) writes it. */
export function checkpointLine(note: string): string {
  const escaped = JSON.stringify(note).replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
  return `{"note": ${escaped}}\n`;
}

export { handoverMessage, ROTATION_HEADER } from "./rotation.js";

/** A witness's cosignature line appended to a signed checkpoint (audit/cosignature.py's `add_cosignature`). */
export function addCosignature(note: string, witness: string, signature: Uint8Array): string {
  parseNote(note);
  return `${note}${SIG_PREFIX}${witness} ${toBase64(signature)}\n`;
}

interface SessionEntry {
  nextN: number;
  ended: boolean;
}

export interface OpenOptions {
  /** Binds the log key to the device's mTLS certificate (record 1; again when it changes). */
  device?: DeviceIdentity;
  /** The verifier's witness key (algorithm 0x04): only cosignatures under it are kept and proved from. */
  witnessKey?: NoteKey;
  segmentRecords?: number;
  /** The clock of the records' `time` (tests). */
  clock?: () => Date;
}

function isClose(payload: Uint8Array | null): boolean {
  return payload !== null && parse(UplinkSchema, payload)?.kind.case === "close";
}

/** The device's log, one writer at a time. `AuditLog.open` creates it or takes an intact one back. */
export class AuditLog {
  private readonly leaves: Uint8Array[] = [];
  private readonly acc = new Accumulator();
  private readonly sessions = new Map<string, SessionEntry>();
  private segFirst = 0;
  private closed = false;
  /** The storage's writer lock's release, held from `open` to `close` (null: the storage has none). */
  private release: (() => void) | null = null;
  private broken: string | null = null;
  private latest: { size: number; note: string } | null = null;
  /** (size, root) of the largest checkpoint the witness cosigned, if any: the next Close proves from it. */
  cosigned: { size: number; root: Uint8Array } | null = null;
  device: DeviceIdentity | null = null;
  /** Index and time (Unix seconds) of the newest record. */
  lastAppended: { index: number; time: number } | null = null;
  /** Sessions a dead writer left open, closed on open with a `fallback` record (`interrupted`). */
  readonly interrupted: string[] = [];
  /** The key in force at each size, from the key record 0 declares (set once the header is written or read). */
  private chain: KeyChain | null = null;

  private constructor(
    readonly storage: LogStorage,
    private signer: NoteSigner,
    readonly witnessKey: NoteKey | null,
    readonly segmentRecords: number,
    private readonly clock: () => Date,
  ) {}

  /** The signing key in force: the one `open` was given, or the last `rotateKey`'s. */
  get key(): NoteSigner {
    return this.signer;
  }

  /** The key that signs a checkpoint of `size` records: the header's, then each rotation's from
   * size P+2 on (the checkpoint of size P+1 is the old key's last), as `KeyChain.key_for`. */
  private keyFor(size: number): NoteKey {
    return this.chain!.keyFor(size);
  }

  static open(storage: LogStorage, key: NoteSigner, options: OpenOptions = {}): AuditLog {
    const segmentRecords = options.segmentRecords ?? DEFAULT_SEGMENT_RECORDS;
    if (!(segmentRecords >= 1)) throw new AuditError("segmentRecords must be at least 1");
    if (options.witnessKey !== undefined && options.witnessKey.alg !== 0x04) {
      throw new AuditError("the witness key is a cosignature/v1 key (algorithm 0x04: a `server witness-key` .pub)");
    }
    const log = new AuditLog(storage, key, options.witnessKey ?? null, segmentRecords, options.clock ?? (() => new Date()));
    const release = storage.lock?.() ?? null;
    try {
      // Decided under the lock: another writer may have created the log since we were called.
      if (!storage.exists()) {
        storage.create();
        log.appendHeader();
      } else log.recover();
      const device = options.device;
      if (device !== undefined && (log.device === null || log.device.name !== device.name || log.device.certSha256 !== device.certSha256)) {
        log.append("device-cert", { device: device.name, cert_sha256: device.certSha256 });
        log.device = device;
      }
      if (log.latest === null || log.latest.size !== log.size) log.checkpoint();
    } catch (err) {
      release?.();
      throw err;
    }
    log.release = release;
    return log;
  }

  private recover(): void {
    const scan = scanLog(this.storage);
    if (scan.problems.length > 0) throw new AuditError(`the audit log is damaged: ${scan.problems[0]}`);
    if (scan.records.length === 0 && scan.checkpoints.length === 0) {
      // A crash while creating the log, before its header was acknowledged: finish creating it.
      for (const torn of scan.torn) this.cut(torn.file, torn.offset);
      this.appendHeader();
      this.recordRepairs([]);
      return;
    }
    if (scan.records.length === 0) throw new AuditError("the audit log has no header record");
    const names = this.storage.segmentNames().filter((n) => /^seg-[0-9]{12}\.log$/.test(n)).sort();
    const parsed: LogRecord[] = [];
    for (const stored of scan.records) {
      let rec;
      try {
        rec = parseRecord(stored.data);
      } catch (err) {
        if (!(err instanceof RecordError)) throw err;
        throw new AuditError(`record ${stored.position} is not a valid record: ${err.message}`);
      }
      if (rec.index !== stored.position) throw new AuditError(`record ${stored.position} says it is record ${rec.index}`);
      if (stored.position === 0) {
        if (rec.kind !== "log-header") throw new AuditError("the audit log's record 0 is not its header");
        try {
          this.chain = new KeyChain(NoteKey.parse(String(rec.fields.key)));
        } catch (err) {
          if (!(err instanceof NoteError)) throw err;
          throw new AuditError(`the audit log's header key is unusable: ${err.message}`);
        }
      }
      parsed.push(rec);
      this.leaves.push(stored.leaf);
      this.acc.append(stored.leaf);
      if (rec.kind === "device-cert") this.device = { name: String(rec.fields.device), certSha256: String(rec.fields.cert_sha256) };
      this.track(rec.kind, rec.session, rec.payload);
    }
    // A rotation that does not verify is refused, not skipped, so a forged handover cannot take the log.
    const { chain, problems } = keyChain(this.chain!.initial, parsed.map((record) => ({ position: record.index, record })));
    if (problems.length > 0) throw new AuditError(`the audit log's key rotation does not verify: ${problems[0]}`);
    this.chain = chain;
    // Only the key at the end of the chain may write: the header's key once rotated away is refused.
    if (chain.current.toString() !== this.key.key.toString()) this.refuseOtherKey(scan);
    this.segFirst = Number(/^seg-([0-9]{12})\.log$/.exec(names[names.length - 1]!)![1]);
    const repaired = parsed.filter((r) => r.kind === "repair");
    this.loadCheckpoints(scan);
    // Only now, with the log known to be ours and otherwise intact, is a torn tail cut.
    for (const torn of scan.torn) this.cut(torn.file, torn.offset);
    this.recordRepairs(repaired);
    for (const [session, entry] of this.sessions) {
      if (!entry.ended) {
        // The writer that ran this session is gone, so it ended here.
        this.appendSession("fallback", session, { reason: INTERRUPTED });
        this.interrupted.push(session);
      }
    }
  }

  /** Refuse a key that is not the one in force; the key the last rotation handed over from first
   * finishes that handover if a crash cut it short between its record and its checkpoint (size P+1,
   * which only the old key can sign), as audit/log.py's `_refuse_other_key` does. */
  private refuseOtherKey(scan: LogScan): never {
    const chain = this.chain!;
    let refused = `the audit log belongs to key ${chain.current.toString()}, not ${this.key.key.toString()}`;
    const last = chain.rotations[chain.rotations.length - 1];
    if (last === undefined || this.keyFor(last.position + 1).toString() !== this.key.key.toString()) throw new AuditError(refused);
    this.loadCheckpoints(scan); // the old key signs over intact, checkpointed records only
    if (this.size === last.position + 1 && (this.latest === null || this.latest.size !== this.size)) {
      // A torn checkpoint line must go before a line is appended after it; the new key's next open records the repair.
      for (const torn of scan.torn) this.cut(torn.file, torn.offset);
      this.checkpoint();
      refused += `: the interrupted handover at record ${last.position} is now complete`;
    } else refused += `: it was handed over at record ${last.position}`;
    throw new LogHandedOverError(`${refused}; open it with the new key`, last.position, last.key);
  }

  /** Check every stored checkpoint against the records (each under the key in force at its size). */
  private loadCheckpoints(scan: LogScan): void {
    for (const stored of scan.checkpoints) {
      let size: number;
      try {
        const cp = this.openOwn(stored.note);
        size = Number(cp.size);
        const tornSegment = scan.torn.find((t) => t.file.startsWith("segments/"));
        if (size > this.size && tornSegment !== undefined) {
          throw new AuditError(
            `checkpoint ${stored.number} signs ${size} records but only ${this.size} are intact: the damage at byte ` +
              `${tornSegment.offset} of ${tornSegment.file} is to a signed record, not a torn write, so the log is left as it is`,
          );
        }
        if (size > this.size || !equalRoot(merkleRoot(this.leaves.slice(0, size)), cp.root)) {
          throw new AuditError(`checkpoint ${stored.number} (size ${size}) does not match the stored records`);
        }
      } catch (err) {
        if (!(err instanceof NoteError)) throw err;
        throw new AuditError(`checkpoint ${stored.number} of the audit log does not verify: ${err.message}`);
      }
      if (this.latest === null || size >= this.latest.size) this.latest = { size, note: stored.note };
      if (this.cosignedByWitness(stored.note) && (this.cosigned === null || size > this.cosigned.size)) {
        this.cosigned = { size, root: merkleRoot(this.leaves.slice(0, size)) };
      }
    }
  }

  /** A checkpoint note of this log, verified under the key in force at its size. */
  private openOwn(note: string): Checkpoint {
    const size = Number(parseCheckpointBody(parseNote(note).text).size);
    return openCheckpoint(note, this.keyFor(size));
  }

  private appendHeader(): void {
    this.chain = new KeyChain(this.key.key);
    this.append("log-header", { format: LOG_FORMAT, origin: this.key.key.name, key: this.key.key.toString(), max_top_k: WIRE_MAX_TOP_K });
  }

  /** Cut a torn tail back to the last complete write, keeping the cut bytes under torn/. */
  private cut(file: string, offset: number): void {
    const whole = file === "checkpoints.jsonl" ? this.storage.readCheckpoints()! : this.storage.readSegment(file.slice("segments/".length));
    const tail = whole.slice(offset);
    const base = file.slice(file.lastIndexOf("/") + 1);
    // The content hash in the name keeps two cuts at one offset (two crashes) apart.
    this.storage.keepTorn(`${base}.${offset}.${toHex(sha256(tail))}.bin`, tail);
    this.storage.truncate(file, offset);
  }

  /** A `repair` record for every cut kept under torn/ that the log does not mention yet (driven by
   * the evidence, so a crash between a cut and its record is caught up on the next open). */
  private recordRepairs(logged: { fields: Fields }[]): void {
    const done = new Set(logged.map((r) => `${r.fields.file}|${r.fields.offset}|${r.fields.cut_sha256}`));
    for (const ev of tornEvidence(this.storage)) {
      if (!ev.intact) throw new AuditError(`torn/${ev.name} does not hash to the value in its name`);
      if (!done.has(`${ev.file}|${ev.offset}|${ev.sha256}`)) {
        this.append("repair", { file: ev.file, offset: ev.offset, cut_bytes: ev.length, cut_sha256: ev.sha256 });
      }
    }
  }

  private cosignedByWitness(note: string): boolean {
    if (this.witnessKey === null) return false;
    try {
      return noteCosignatures(note, this.witnessKey).length > 0;
    } catch {
      return false;
    }
  }

  private track(kind: string, session: string | null, payload: Uint8Array | null): void {
    if (session === null) return;
    if (kind === "session-begin") {
      this.sessions.set(session, { nextN: 1, ended: false });
      return;
    }
    const entry = this.sessions.get(session) ?? { nextN: 0, ended: false };
    this.sessions.set(session, entry);
    entry.nextN += 1;
    if (kind === "fallback" || (kind === "uplink" && isClose(payload))) entry.ended = true;
  }

  get size(): number {
    return this.leaves.length;
  }

  get leafHashes(): readonly Uint8Array[] {
    return this.leaves;
  }

  root(): Uint8Array {
    return this.acc.root();
  }

  get latestCheckpoint(): string | null {
    return this.latest?.note ?? null;
  }

  /** Write one record; its index is returned once the storage holds it durably. */
  append(kind: string, fields: Fields): number {
    if (this.closed) throw new AuditError("the audit log is closed");
    if (this.broken !== null) throw new AuditError(`the audit log refuses appends after a failed write (${this.broken}); reopen it`);
    const index = this.size;
    const time = recordTime(this.clock());
    const text = encode({ index, kind, time, ...fields });
    const data = utf8.encode(text);
    parseRecord(data); // the log never holds a record it would reject
    const leaf = leafHash(data);
    if (index - this.segFirst >= this.segmentRecords) this.segFirst = index;
    const frame = new Uint8Array(4 + data.length + 32);
    new DataView(frame.buffer).setUint32(0, data.length, false);
    frame.set(data, 4);
    frame.set(leaf, 4 + data.length);
    try {
      this.storage.appendSegment(segmentName(this.segFirst), frame);
    } catch (err) {
      // The segment may now end in a partial frame: only a reopen may deal with it.
      this.broken = (err as Error).message;
      throw new AuditError(`cannot write the audit log: ${this.broken}`);
    }
    this.leaves.push(leaf);
    this.acc.append(leaf);
    this.lastAppended = { index, time: seconds(time) };
    return index;
  }

  /** Append a session record, numbering it (`n`) and tracking whether the session has ended. */
  appendSession(kind: string, session: string, fields: Fields, payload: Uint8Array | null = null): number {
    let n = 0;
    if (kind === "session-begin") {
      if (this.sessions.has(session)) throw new AuditError(`session ${session} already exists in this log`);
    } else {
      const entry = this.sessions.get(session);
      if (entry === undefined) throw new AuditError(`session ${session} was never begun in this log`);
      n = entry.nextN;
    }
    const index = this.append(kind, { session, n, ...fields });
    this.track(kind, session, payload);
    return index;
  }

  /** Sign and store a checkpoint of the current size (or return the latest if nothing changed). */
  checkpoint(): string {
    if (this.latest !== null && this.latest.size === this.size) return this.latest.note;
    if (this.keyFor(this.size).toString() !== this.key.key.toString()) {
      // Only after a rotation cut short before the old key's checkpoint over it, with the new key
      // holding the log: that size is the old key's to sign, so it stays unsigned and the next
      // record's checkpoint is the new key's first.
      if (this.latest === null) throw new AuditError(`a checkpoint of ${this.size} records is not ${this.key.key.toString()}'s to sign`);
      return this.latest.note;
    }
    const note = this.key.signNote(checkpointBody({ origin: this.key.key.name, size: BigInt(this.size), root: this.root() }));
    this.storeNote(note);
    this.latest = { size: this.size, note };
    return note;
  }

  /** Hand the log to `next` (same name, another key): a `key-rotation` record signed by the key in
   * force, a checkpoint over it signed by that key (its last), then every checkpoint by `next`.
   * Returns the record's index. Reopen the log with `next` from now on. */
  rotateKey(next: NoteSigner): number {
    if (next.key.name !== this.key.key.name) {
      throw new AuditError(`the new log key is named ${next.key.name}; the log's name is ${this.key.key.name}`);
    }
    if (next.key.toString() === this.key.key.toString()) throw new AuditError("the new log key is the key in force");
    const position = this.size;
    const signature = toBase64(this.key.sign(handoverMessage(this.key.key, next.key, position)));
    const index = this.append("key-rotation", { key: next.key.toString(), signature });
    try {
      this.checkpoint(); // the old key's last word covers the handover
    } finally {
      // The durable record hands the log over whether or not this checkpoint was stored.
      this.chain!.rotations.push({ position, key: next.key });
      this.signer = next;
    }
    return index;
  }

  private storeNote(note: string): void {
    this.storage.appendCheckpoints(utf8.encode(checkpointLine(note)));
  }

  /** Keep a checkpoint the witness cosigned (the log's note plus the witness's line): only one whose
   * cosignature verifies under the log's witness key, over one of this log's checkpoints. */
  storeCosigned(note: string): void {
    const cp = this.openOwn(note);
    const size = Number(cp.size);
    if (size > this.size || !equalRoot(merkleRoot(this.leaves.slice(0, size)), cp.root)) {
      throw new AuditError(`the cosigned checkpoint of size ${size} is not one of this log's`);
    }
    if (!this.cosignedByWitness(note)) throw new AuditError(`the checkpoint of size ${size} carries no valid cosignature by the witness key`);
    this.storeNote(note);
    if (this.cosigned === null || size > this.cosigned.size) this.cosigned = { size, root: cp.root };
  }

  /** Whether `session` has ended (its Close or a fallback is on record). */
  ended(session: string): boolean {
    return this.sessions.get(session)?.ended ?? false;
  }

  /** Sign the last checkpoint, refuse further appends and let another writer have the log. */
  close(): void {
    if (this.closed) return;
    try {
      if (this.broken === null) this.checkpoint();
    } finally {
      this.closed = true;
      this.release?.();
      this.release = null;
    }
  }
}

function equalRoot(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** A log held in memory (tests; an app that ships its log elsewhere). Segments and checkpoints are
 * plain byte arrays a test may alter. */
export class MemoryLogStorage implements LogStorage {
  readonly segments = new Map<string, Uint8Array>();
  checkpoints: Uint8Array | null = null;
  readonly torn = new Map<string, Uint8Array>();
  private made = false;

  exists(): boolean {
    return this.made;
  }
  create(): void {
    this.made = true;
  }
  appendSegment(name: string, data: Uint8Array): void {
    this.segments.set(name, concatBytes(this.segments.get(name) ?? new Uint8Array(0), data));
  }
  appendCheckpoints(data: Uint8Array): void {
    this.checkpoints = concatBytes(this.checkpoints ?? new Uint8Array(0), data);
  }
  keepTorn(name: string, data: Uint8Array): void {
    this.torn.set(name, data.slice());
  }
  truncate(file: string, length: number): void {
    if (file === "checkpoints.jsonl") this.checkpoints = this.checkpoints!.slice(0, length);
    else this.segments.set(file.slice("segments/".length), this.readSegment(file.slice("segments/".length)).slice(0, length));
  }
  segmentNames(): string[] {
    return [...this.segments.keys()];
  }
  readSegment(name: string): Uint8Array {
    const seg = this.segments.get(name);
    if (seg === undefined) throw new Error(`no segment ${name}`);
    return seg;
  }
  readCheckpoints(): Uint8Array | null {
    return this.checkpoints;
  }
  tornFiles(): { name: string; data: Uint8Array }[] {
    return [...this.torn].map(([name, data]) => ({ name, data }));
  }
}


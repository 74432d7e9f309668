/**
 * Reading a log directory (docs/audit-format.md §1-2, audit/log.py's scan) through `LogFiles`, the
 * storage an app provides (Node's fs in src/node/; an app's own storage on a phone). Nothing is
 * repaired: damage, torn tails and stray files are reported.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { equalBytes, toHex } from "../bytes.js";
import { leafHash } from "../merkle.js";

/** The files of one log directory, read-only. */
export interface LogFiles {
  /** The names in segments/ (any file, stray ones included). */
  segmentNames(): string[];
  readSegment(name: string): Uint8Array;
  /** checkpoints.jsonl's bytes, or null when there is none. */
  readCheckpoints(): Uint8Array | null;
  /** Every file under torn/ with its bytes. */
  tornFiles(): { name: string; data: Uint8Array }[];
}

export interface StoredRecord {
  position: number;
  segment: string;
  offset: number;
  data: Uint8Array;
  leaf: Uint8Array;
}

export interface TornTail {
  file: string;
  offset: number;
  length: number;
  reason: string;
}

export interface LogScan {
  records: StoredRecord[];
  problems: string[];
  torn: TornTail[];
  checkpoints: { number: number; note: string }[];
}

const SEGMENT_RE = /^seg-([0-9]{12})\.log$/;
const MAX_RECORD_BYTES = 2 * (1 << 20);
const MAX_PROBLEMS = 100;

function frameAt(seg: Uint8Array, offset: number): [end: number, data: Uint8Array, trailer: Uint8Array] | null {
  if (seg.length - offset < 4) return null;
  const length = new DataView(seg.buffer, seg.byteOffset + offset, 4).getUint32(0, false);
  const end = offset + 4 + length + 32;
  if (length > MAX_RECORD_BYTES || end > seg.length) return null;
  return [end, seg.subarray(offset + 4, offset + 4 + length), seg.subarray(offset + 4 + length, end)];
}

/** Why the bytes from `offset` on are one torn final write, or null when they are damage. */
function tornReason(seg: Uint8Array, offset: number): string | null {
  if (seg.subarray(offset).every((b) => b === 0)) return "a final write that never reached the disk (zero-filled)";
  if (seg.length - offset < 4) return "an incomplete frame header";
  const length = new DataView(seg.buffer, seg.byteOffset + offset, 4).getUint32(0, false);
  if (length > MAX_RECORD_BYTES) return null;
  const end = offset + 4 + length + 32;
  if (end > seg.length) return "an incomplete frame";
  if (end === seg.length) return "a final frame whose checksum does not match";
  return null;
}

export function scanLog(files: LogFiles): LogScan {
  const scan: LogScan = { records: [], problems: [], torn: [], checkpoints: [] };
  const names = [...files.segmentNames()].sort();
  const segments = names.filter((n) => SEGMENT_RE.test(n));
  for (const stray of names.filter((n) => !SEGMENT_RE.test(n))) scan.problems.push(`segments/${stray} is not a segment of this log`);
  segments.forEach((name, i) => {
    const first = Number(SEGMENT_RE.exec(name)![1]);
    if (first !== scan.records.length) {
      scan.problems.push(`segment ${name} starts at record ${first} but the log before it holds ${scan.records.length} records`);
    }
    const last = i === segments.length - 1;
    const seg = files.readSegment(name);
    if (seg.length === 0 && !last) scan.problems.push(`segment ${name} is empty but is not the last segment`);
    let offset = 0;
    while (offset < seg.length) {
      const frame = frameAt(seg, offset);
      const position = scan.records.length;
      if (frame === null || !equalBytes(leafHash(frame[1]), frame[2])) {
        // A crash tears only the final write of the last segment, in a log with no damage before it.
        const reason = last && scan.problems.length === 0 ? tornReason(seg, offset) : null;
        if (reason !== null) {
          scan.torn.push({ file: `segments/${name}`, offset, length: seg.length - offset, reason });
          return;
        }
        if (frame === null || scan.problems.length >= MAX_PROBLEMS) {
          scan.problems.push(`record ${position} (${name} at byte ${offset}): the rest of the segment cannot be read`);
          return;
        }
        scan.records.push({ position, segment: name, offset, data: frame[1], leaf: leafHash(frame[1]) });
        scan.problems.push(`record ${position} (${name} at byte ${offset}): checksum mismatch, its bytes were altered`);
        offset = frame[0];
        continue;
      }
      scan.records.push({ position, segment: name, offset, data: frame[1], leaf: frame[2] });
      offset = frame[0];
    }
  });
  const raw = files.readCheckpoints();
  if (raw !== null) {
    let offset = 0;
    let number = 0;
    while (offset < raw.length) {
      const nl = raw.indexOf(0x0a, offset);
      if (nl < 0) {
        // The newline is the last byte written: a line without one is a checkpoint torn by a crash.
        scan.torn.push({ file: "checkpoints.jsonl", offset, length: raw.length - offset, reason: "an incomplete checkpoint line" });
        break;
      }
      let note: string | null = null;
      try {
        const obj: unknown = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(raw.subarray(offset, nl)));
        if (obj !== null && typeof obj === "object" && Object.keys(obj).join() === "note" && typeof (obj as { note: unknown }).note === "string") {
          note = (obj as { note: string }).note;
        }
      } catch {
        note = null;
      }
      if (note === null) scan.problems.push(`checkpoint ${number} (checkpoints.jsonl at byte ${offset}) is not a valid entry`);
      else scan.checkpoints.push({ number, note });
      number += 1;
      offset = nl + 1;
    }
  }
  return scan;
}

const EVIDENCE_RE = /^([A-Za-z0-9._-]{1,64})\.([0-9]{1,19})\.([0-9a-f]{64})\.bin$/;

export interface TornEvidence {
  name: string;
  file: string;
  offset: number;
  sha256: string;
  length: number;
  intact: boolean;
}

export function tornEvidence(files: LogFiles): TornEvidence[] {
  return files
    .tornFiles()
    .sort((a, b) => (a.name < b.name ? -1 : 1))
    .map(({ name, data }) => {
      const m = EVIDENCE_RE.exec(name);
      if (m === null) return { name, file: "", offset: 0, sha256: "", length: data.length, intact: false };
      return { name, file: m[1]!, offset: Number(m[2]), sha256: m[3]!, length: data.length, intact: toHex(sha256(data)) === m[3] };
    });
}

/**
 * The audit log's records (docs/audit-format.md §3, audit/records.py): one canonical JSON object
 * each, exactly the fields of its kind, payloads as canonical base64 with their length and SHA-256.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { fromBase64, toHex } from "../bytes.js";

export const LOG_FORMAT = "specsteer-audit-log/1";
const MAX_PAYLOAD_BYTES = 1 << 20;
const MAX_JSON_INT = 2 ** 53 - 1;

export class RecordError extends Error {
  override name = "RecordError";
}

type Check = (v: unknown) => boolean;
const str = (re: RegExp): Check => (v) => typeof v === "string" && re.test(v);
const int =
  (lo: number, hi = MAX_JSON_INT): Check =>
  (v) =>
    typeof v === "number" && Number.isInteger(v) && v >= lo && v <= hi;
const constant =
  (value: string): Check =>
  (v) =>
    v === value;

/** Python's str.isprintable(): no control, format, surrogate, private or separator character but the space. */
function printable(s: string): boolean {
  for (const ch of s) if (ch !== " " && /[\p{C}\p{Z}]/u.test(ch)) return false;
  return true;
}

const text =
  (maxLen: number): Check =>
  (v) =>
    typeof v === "string" && v.length > 0 && [...v].length <= maxLen && printable(v);
const b64: Check = (v) => typeof v === "string" && v.length <= 4 * (Math.floor(MAX_PAYLOAD_BYTES / 3) + 1);

const HEX64 = /^[0-9a-f]{64}$/;
const IDENT = /^[a-z][a-z0-9-]{0,63}$/;
const COMMON: Record<string, Check> = {
  index: int(0),
  kind: str(/^[a-z-]+$/),
  time: str(/^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$/),
};
const SESSION: Record<string, Check> = { session: str(/^[0-9a-f]{32}$/), n: int(0) };
const PAYLOAD: Record<string, Check> = { len: int(0, MAX_PAYLOAD_BYTES), sha256: str(HEX64), bytes: b64 };

export const SCHEMA: Record<string, Record<string, Check>> = {
  "log-header": { format: constant(LOG_FORMAT), origin: text(256), key: text(512), max_top_k: int(1, 2 ** 32 - 1) },
  "session-begin": { ...SESSION, vocab_size: int(1, 2 ** 32), max_top_k: int(1, 2 ** 32 - 1) },
  uplink: { ...SESSION, dir: constant("up"), ...PAYLOAD },
  downlink: { ...SESSION, dir: constant("down"), ...PAYLOAD },
  fallback: { ...SESSION, reason: str(IDENT) },
  "guard-decision": {
    ...SESSION,
    decision: str(IDENT),
    count: int(0),
    placeholder: str(/^[<[{]?[A-Z][A-Z_]{0,23}(?:_[0-9]{1,3})?[>\]}]?$/),
  },
  repair: { file: str(/^[A-Za-z0-9._-]{1,64}$/), offset: int(0), cut_bytes: int(1), cut_sha256: str(HEX64) },
  "device-cert": { device: text(128), cert_sha256: str(HEX64) },
  "key-rotation": { key: text(512), signature: b64 },
};

export const SESSION_KINDS = new Set(["session-begin", "uplink", "downlink", "fallback", "guard-decision"]);

export type Fields = Record<string, string | number>;

export interface LogRecord {
  index: number;
  kind: string;
  fields: Fields;
  session: string | null;
  /** The wire bytes of an uplink or downlink, checked against `len` and `sha256`. */
  payload: Uint8Array | null;
}

/** Python's json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=True) of a flat record. */
export function encode(fields: Fields): string {
  const keys = Object.keys(fields).sort();
  const body = keys.map((k) => `${JSON.stringify(k)}:${JSON.stringify(fields[k])}`).join(",");
  return `{${body}}`.replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** A record's `time` as Unix seconds. */
export function seconds(time: string): number {
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{6})Z$/.exec(time);
  if (m === null) return NaN;
  const [y, mo, d, h, mi, s, us] = m.slice(1).map(Number) as [number, number, number, number, number, number, number];
  return Date.UTC(y, mo - 1, d, h, mi, s) / 1000 + us / 1e6;
}

/** Parse and check one record's bytes; throw `RecordError` naming what is wrong. */
export function parseRecord(data: Uint8Array): LogRecord {
  let obj: unknown;
  try {
    if (data.some((b) => b > 0x7f)) throw new Error("not ASCII");
    obj = JSON.parse(new TextDecoder().decode(data));
  } catch (err) {
    throw new RecordError(`not a JSON record (${(err as Error).message})`);
  }
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) throw new RecordError("not a JSON object");
  const fields = obj as Fields;
  const kind = fields.kind;
  const schema = typeof kind === "string" ? SCHEMA[kind] : undefined;
  if (schema === undefined || typeof kind !== "string") throw new RecordError(`unknown record kind ${String(kind)}`);
  const all = { ...COMMON, ...schema };
  const extra = Object.keys(fields).filter((k) => !(k in all));
  if (extra.length > 0) throw new RecordError(`unexpected field(s) ${extra.sort().join(", ")} in a ${kind} record`);
  for (const [name, valid] of Object.entries(all)) {
    if (!(name in fields)) throw new RecordError(`a ${kind} record lacks its ${name} field`);
    if (!valid(fields[name])) throw new RecordError(`field ${name} of a ${kind} record is out of range or malformed`);
  }
  // Duplicate keys, floats and any other spelling re-encode to other bytes: one spelling per record.
  if (encode(fields) !== new TextDecoder().decode(data)) throw new RecordError("the record is not in canonical form");
  if (kind === "session-begin" && fields.n !== 0) throw new RecordError("a session-begin record has n = 0");
  let payload: Uint8Array | null = null;
  if (kind === "uplink" || kind === "downlink") {
    payload = fromBase64(fields.bytes as string);
    if (payload === null) throw new RecordError("the payload base64 is not canonical");
    if (payload.length !== fields.len) throw new RecordError("the payload length differs from the record's");
    if (toHex(sha256(payload)) !== fields.sha256) throw new RecordError("the payload does not hash to the recorded sha256");
  }
  const session = typeof fields.session === "string" ? fields.session : null;
  return { index: fields.index as number, kind, fields, session, payload };
}

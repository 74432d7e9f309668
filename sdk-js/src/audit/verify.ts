/**
 * `audit verify` in TypeScript (docs/audit-format.md, audit/verify.py, audit/witnessing.py): the
 * named checks, in the Python tool's order, and the verdict VERIFIED, UNPROVEN or FAILED. It follows
 * the log key through its rotations (§5.1) from the auditor's key. Not yet here: the server
 * transcript (§7), the auditor's previous checkpoint and the witness's state file.
 */
import { equalBytes, toHex, utf8 } from "../bytes.js";
import { SessionState, type Area, type Violation } from "../contract.js";
import { ProtocolError } from "../errors.js";
import { DownlinkSchema } from "../gen/verifier_pb.js";
import { WIRE_MAX_TOP_K } from "../limits.js";
import { Accumulator, EMPTY_ROOT, ProofError, verifyConsistency } from "../merkle.js";
import {
  ALG_COSIGNATURE_V1,
  checkpointBody,
  noteCosignatures,
  NoteError,
  NoteKey,
  openCheckpoint,
  parseCheckpointBody,
  parseNote,
  verifyCosignature,
  type Checkpoint,
} from "../note.js";
import { cosignatureViolation, decodeUplink, parse, type WitnessRequest } from "../wire.js";
import { parseRecord, RecordError, seconds, type LogRecord } from "./records.js";
import { keyChain, type KeyChain } from "./rotation.js";
import { scanLog, tornEvidence, type LogFiles, type LogScan } from "./scan.js";

export interface Check {
  name: string;
  ok: boolean;
  failures: string[];
  notes: string[];
}

export interface Report {
  verdict: "VERIFIED" | "UNPROVEN" | "FAILED";
  records: number;
  sessions: number;
  checks: Check[];
  unwitnessed: string | null;
}

interface Parsed {
  position: number;
  record: LogRecord | null;
}

const COSIGNATURE_SKEW_S = 600;

function rootsAt(leaves: Uint8Array[], sizes: Set<number>): Map<number, Uint8Array> {
  const acc = new Accumulator();
  const out = new Map<number, Uint8Array>();
  if (sizes.has(0)) out.set(0, EMPTY_ROOT);
  leaves.forEach((leaf, i) => {
    acc.append(leaf);
    if (sizes.has(i + 1)) out.set(i + 1, acc.root());
  });
  return out;
}

const check = (name: string, failures: string[], notes: string[] = []): Check => ({ name, ok: failures.length === 0, failures, notes });

function integrity(scan: LogScan, parsed: Parsed[], files: LogFiles, signedSize: number, parseFailures: string[]): Check {
  const failures = [...scan.problems];
  const intact = scan.records.length;
  for (const torn of scan.torn) {
    if (torn.file.startsWith("segments") && signedSize > intact) failures.push(`record ${intact} is damaged, yet a signed checkpoint covers it`);
    else failures.push(`${torn.file} ends in ${torn.reason}: a torn write`);
  }
  const evidence = tornEvidence(files);
  const byKey = new Map(evidence.filter((e) => e.file).map((e) => [`${e.file}|${e.offset}|${e.sha256}`, e]));
  const logged = new Set<string>();
  for (const p of parsed) {
    const r = p.record;
    if (r === null) continue;
    if (r.index !== p.position) failures.push(`record ${p.position} says it is record ${r.index}`);
    if (r.kind === "log-header" && p.position !== 0) failures.push(`record ${p.position} is a second log header`);
    if (r.kind === "repair") {
      const f = r.fields;
      const k = `${f.file}|${f.offset}|${f.cut_sha256}`;
      logged.add(k);
      const ev = byKey.get(k);
      if (ev === undefined) failures.push(`record ${p.position}: the evidence of a repair was removed`);
      else if (!ev.intact || ev.length !== f.cut_bytes) failures.push(`record ${p.position}: the repair's evidence does not hash to its value`);
    }
  }
  for (const ev of evidence) {
    if (!ev.intact) failures.push(`torn/${ev.name}: kept torn bytes that do not hash to the value in their name`);
    else if (!logged.has(`${ev.file}|${ev.offset}|${ev.sha256}`)) failures.push(`torn/${ev.name}: no repair record says so`);
  }
  if (parsed.length === 0) failures.push("the log holds no records");
  else if (parsed[0]!.record?.kind !== "log-header") failures.push("record 0 is not the log header");
  return check("log integrity", [...failures, ...parseFailures]);
}

function logKey(parsed: Parsed[], auditorKey: NoteKey | null): [Check, NoteKey | null] {
  const header = parsed[0]?.record ?? null;
  let declared: NoteKey | null = null;
  const failures: string[] = [];
  if (header !== null && header.kind === "log-header") {
    try {
      declared = NoteKey.parse(String(header.fields.key));
    } catch (err) {
      if (!(err instanceof NoteError)) throw err;
      failures.push(`record 0: the declared log key is unusable: ${err.message}`);
    }
    if (declared !== null) {
      if (header.fields.origin !== declared.name) failures.push("record 0: its origin is not the key's name");
      if ((header.fields.max_top_k as number) > WIRE_MAX_TOP_K) failures.push("record 0 declares a maximum k above 64");
    }
  }
  if (auditorKey !== null) {
    if (declared !== null && declared.toString() !== auditorKey.toString()) failures.push("record 0 declares another key than the auditor's");
    return [check("log key", failures), auditorKey];
  }
  if (declared === null) return [check("log key", [...failures, "no key to check signatures with"]), null];
  return [check("log key", failures, ["no --key given: the key declared in the log header was trusted"]), declared];
}

/** The "log key" check with the chain's handovers noted and its broken rotations failed (`_log_key`). */
function withRotations(keyCheck: Check, chain: KeyChain, problems: string[]): Check {
  if (problems.length === 0 && chain.rotations.length === 0) return keyCheck;
  const notes = [...keyCheck.notes, ...chain.rotations.map((r) => `record ${r.position}: the log key was handed over to ${r.key.toString()}`)];
  return check(keyCheck.name, [...keyCheck.failures, ...problems], notes);
}

function checkpoints(scan: LogScan, chain: KeyChain | null, leaves: Uint8Array[]): [Check, [number, Checkpoint][]] {
  const failures: string[] = [];
  const valid: [number, Checkpoint][] = [];
  if (chain === null) return [check("checkpoints", ["no usable log key"]), valid];
  for (const stored of scan.checkpoints) {
    try {
      // Each under the key in force at its size (§5.1).
      const size = Number(parseCheckpointBody(parseNote(stored.note).text).size);
      valid.push([stored.number, openCheckpoint(stored.note, chain.keyFor(size))]);
    } catch (err) {
      if (!(err instanceof NoteError)) throw err;
      failures.push(`checkpoint ${stored.number}: ${err.message}`);
    }
  }
  const n = leaves.length;
  const roots = rootsAt(leaves, new Set(valid.map(([, c]) => Number(c.size)).filter((s) => s <= n)));
  const bySize = new Map<bigint, Set<string>>();
  for (const [, c] of valid) bySize.set(c.size, (bySize.get(c.size) ?? new Set()).add(toHex(c.root)));
  for (const [size, distinct] of bySize) if (distinct.size > 1) failures.push(`two checkpoints sign size ${size} with different roots: a fork`);
  for (const [number, c] of valid) {
    if (c.size > BigInt(n)) failures.push(`checkpoint ${number} signs ${c.size} records but the log holds only ${n}`);
    else if (!equalBytes(roots.get(Number(c.size))!, c.root)) failures.push(`checkpoint ${number} (size ${c.size}) does not match the records`);
  }
  // Order: log-signed checkpoints never shrink; a cosigned one repeats an earlier checkpoint.
  const notes = new Map(scan.checkpoints.map((s) => [s.number, s.note]));
  let top: [number, bigint] | null = null;
  const signed = new Set<string>();
  for (const [number, c] of valid) {
    const extra = parseNote(notes.get(number)!).signatures.length > 1;
    const id = `${c.size}|${toHex(c.root)}`;
    if (extra) {
      if (!signed.has(id)) failures.push(`checkpoint ${number} carries other signatures but repeats no earlier checkpoint`);
      continue;
    }
    if (top !== null && c.size < top[1]) {
      failures.push(`checkpoint ${number} (size ${c.size}) comes after checkpoint ${top[0]} (size ${top[1]})`);
      continue;
    }
    if (top === null || c.size > top[1]) top = [number, c.size];
    signed.add(id);
  }
  if (scan.checkpoints.length === 0) failures.push("the log has no signed checkpoint, so nothing in it is signed");
  const latest = valid.reduce((m, [, c]) => (c.size > m ? c.size : m), 0n);
  if (valid.length > 0 && latest < BigInt(n)) failures.push(`records ${latest} to ${n - 1} are not covered by any signed checkpoint`);
  return [check("checkpoints", failures), valid];
}

function sessions(parsed: Parsed[]): [Check[], number] {
  const found: Record<Area, string[]> = { uplinks: [], downlinks: [], "session structure": [] };
  let headerK = WIRE_MAX_TOP_K;
  const head = parsed[0]?.record;
  if (head?.kind === "log-header") headerK = Math.min(headerK, head.fields.max_top_k as number);
  const states = new Map<string, SessionState>();
  const nextN = new Map<string, number>();
  const report = (where: string, vs: Violation[]): void => {
    for (const v of vs) found[v.area].push(`${where}: ${v.message}`);
  };
  for (const p of parsed) {
    const rec = p.record;
    if (rec === null || rec.session === null) continue;
    const sid = rec.session;
    const n = rec.fields.n as number;
    const where = `record ${p.position} (${rec.kind}, n=${n} of session ${sid.slice(0, 8)})`;
    if (rec.kind === "session-begin") {
      if (states.has(sid)) {
        found["session structure"].push(`${where}: begins a second time`);
        continue;
      }
      const [vocab, k] = [rec.fields.vocab_size as number, rec.fields.max_top_k as number];
      report(where, SessionState.beginViolations(vocab, k));
      if (k > headerK) found.downlinks.push(`${where}: allows k = ${k}, above the log's maximum ${headerK}`);
      states.set(sid, new SessionState(vocab, k));
      nextN.set(sid, 1);
      continue;
    }
    const state = states.get(sid);
    if (state === undefined) {
      found["session structure"].push(`${where}: belongs to a session that never began`);
      continue;
    }
    const expected = nextN.get(sid)!;
    if (n !== expected) found["session structure"].push(`${where}: expected n=${expected}`);
    if (n >= expected) nextN.set(sid, n + 1);
    let examined;
    if (rec.kind === "uplink") examined = state.examineUplink(rec.payload!, states.values());
    else if (rec.kind === "downlink") examined = state.examineDownlink(rec.payload!);
    else if (rec.kind === "fallback") examined = state.examineFallback(String(rec.fields.reason));
    else if (rec.kind === "guard-decision") {
      examined = state.examineGuard(String(rec.fields.decision), rec.fields.count as number, String(rec.fields.placeholder));
    } else {
      found["session structure"].push(`${where}: a session record of unknown kind`);
      continue;
    }
    report(where, examined[0]);
    examined[1](); // always advance, so one bad record does not hide the next
  }
  for (const [sid, state] of states) {
    if (!state.ended) found["session structure"].push(`session ${sid.slice(0, 8)} has neither a Close nor a recorded fallback`);
  }
  return [[check("uplinks", found.uplinks), check("downlinks", found.downlinks), check("session structure", found["session structure"])], states.size];
}

interface Request {
  position: number;
  request: WitnessRequest;
  earlier: Set<bigint>;
  own: number;
}

interface Answer {
  position: number;
  request: WitnessRequest;
  witness: string;
  signature: Uint8Array;
  close: number;
}

function witnessOf(payload: Uint8Array): WitnessRequest | null {
  try {
    const frame = decodeUplink(payload);
    return frame.kind === "close" ? frame.witness : null;
  } catch (err) {
    if (err instanceof ProtocolError) return null;
    throw err;
  }
}

function cosignatureOf(payload: Uint8Array): { witness: string; signature: Uint8Array } | null {
  const msg = parse(DownlinkSchema, payload);
  if (msg?.cosignature === undefined || cosignatureViolation(msg) !== null) return null;
  return { witness: msg.cosignature.witness, signature: msg.cosignature.signature };
}

function exchanges(parsed: Parsed[]): [Request[], Answer[]] {
  const requests: Request[] = [];
  const answers: Answer[] = [];
  const pending = new Map<string, [WitnessRequest, number]>();
  const cosigned = new Set<bigint>();
  const last = new Map<string, number>();
  for (const p of parsed) {
    const rec = p.record;
    if (rec === null || rec.session === null) continue;
    const own = (last.get(rec.session) ?? -1) + 1;
    last.set(rec.session, p.position);
    if (rec.payload === null) continue;
    if (rec.kind === "uplink") {
      const request = witnessOf(rec.payload);
      if (request !== null) {
        requests.push({ position: p.position, request, earlier: new Set(cosigned), own });
        pending.set(rec.session, [request, p.position]);
      }
    } else {
      const answer = cosignatureOf(rec.payload);
      const asked = pending.get(rec.session);
      pending.delete(rec.session);
      if (answer !== null && asked !== undefined) {
        answers.push({ position: p.position, request: asked[0], ...answer, close: asked[1] });
        cosigned.add(asked[0].size);
      }
    }
  }
  return [requests, answers];
}

/** Where a Close's witness request says anything the log itself does not. */
function requestFailures(parsed: Parsed[], chain: KeyChain | null, leaves: Uint8Array[]): string[] {
  const [requests] = exchanges(parsed);
  const sizes = new Set<number>();
  for (const q of requests) sizes.add(Number(q.request.size)).add(Number(q.request.oldSize));
  const roots = rootsAt(leaves, sizes);
  const failures: string[] = [];
  for (const q of requests) {
    const r = q.request;
    const where = `record ${q.position} (the Close's witness request)`;
    const key = chain?.keyFor(Number(r.size)) ?? null; // the key in force at the request's size
    if (key === null || r.origin !== key.name || !equalBytes(r.logKey, key.publicKey)) {
      failures.push(`${where}: names a log and key that are not this log's`);
      continue;
    }
    if (r.size > BigInt(q.position)) {
      failures.push(`${where}: signs more records than were logged before it`);
      continue;
    }
    if (r.size < BigInt(q.own)) {
      failures.push(`${where}: signs fewer records than its session's own`);
      continue;
    }
    const root = roots.get(Number(r.size));
    const body = checkpointBody({ origin: r.origin, size: r.size, root: r.rootHash });
    if (root === undefined || !equalBytes(root, r.rootHash)) failures.push(`${where}: its root is not the log's`);
    else if (!key.verify(utf8.encode(body), r.signature)) failures.push(`${where}: its signature does not verify`);
    if (r.oldSize !== 0n && !q.earlier.has(r.oldSize)) {
      failures.push(`${where}: proves from a size no earlier cosignature covers`);
      continue;
    }
    if (r.oldSize > 0n && r.oldSize < r.size) {
      try {
        verifyConsistency(r.oldSize, r.size, roots.get(Number(r.oldSize))!, r.rootHash, r.consistencyProof);
      } catch (err) {
        if (!(err instanceof ProofError)) throw err;
        failures.push(`${where}: its consistency proof is not the log's: ${err.message}`);
      }
    } else if (r.consistencyProof.length > 0) failures.push(`${where}: carries a consistency proof where none is needed`);
  }
  return failures;
}

function timeProblem(timestamp: bigint, asked: number, answered: number): string | null {
  const t = Number(timestamp);
  if (timestamp <= 0n) return "it is dated 0";
  if (t < asked - COSIGNATURE_SKEW_S) return `it is dated ${t}, before the checkpoint existed`;
  if (t > answered + COSIGNATURE_SKEW_S) return `it is dated ${t}, after it was received`;
  return null;
}

function witnessCheck(
  parsed: Parsed[],
  scan: LogScan,
  leaves: Uint8Array[],
  keys: NoteKey[],
  logKeyUsed: NoteKey | null,
): [Check, string | null] {
  const [requests, answers] = exchanges(parsed);
  const failures: string[] = [];
  // What the cloud did wrong in answering Closes (§8.2): named, vouching for nothing, never the log's failure.
  const cloud: string[] = [];
  const answered = new Set(answers.map((a) => a.close));
  const withheld = requests.some((q) => !answered.has(q.position));
  for (const q of requests) {
    if (!answered.has(q.position)) cloud.push(`record ${q.position}: the Close asked the verifier to cosign size ${q.request.size} and no cosignature came back (withheld, or the stream was cut)`);
  }
  const spoilt = new Set<NoteKey>(); // keys whose answers the cloud spoilt: their absence is its doing
  const times = new Map<number, number>();
  for (const p of parsed) if (p.record !== null) times.set(p.position, seconds(String(p.record.fields.time)));
  const lastTime = times.size > 0 ? Math.max(...times.values()) : Infinity;
  type Found = { where: string; key: NoteKey; cp: Checkpoint; when: bigint };
  const found: Found[] = [];
  const dated = new Map<string, [number, number]>();
  const candidates: (Found & { window: [number, number] | null })[] = [];
  const id = (k: NoteKey, c: Checkpoint, t: bigint): string => `${k.toString()}|${c.size}|${toHex(c.root)}|${t}`;
  for (const key of keys) {
    for (const a of answers) {
      if (a.witness !== key.name || !equalBytes(a.signature.slice(0, 4), key.id)) continue;
      const cp: Checkpoint = { origin: a.request.origin, size: a.request.size, root: a.request.rootHash };
      let when: bigint;
      try {
        when = verifyCosignature(key, checkpointBody(cp), a.signature);
      } catch (err) {
        if (!(err instanceof NoteError)) throw err;
        spoilt.add(key);
        cloud.push(`record ${a.position}: the verifier answered the Close with an invalid cosignature (${err.message})`);
        continue;
      }
      const window: [number, number] = [times.get(a.close) ?? -Infinity, times.get(a.position) ?? Infinity];
      if (timeProblem(when, window[0], window[1]) !== null) spoilt.add(key);
      if (!dated.has(id(key, cp, when))) dated.set(id(key, cp, when), window);
      candidates.push({ where: `record ${a.position}`, key, cp, when, window });
    }
    for (const stored of scan.checkpoints) {
      try {
        for (const c of noteCosignatures(stored.note, key)) {
          candidates.push({ where: `checkpoint ${stored.number}`, key, cp: c.checkpoint, when: c.timestamp, window: null });
        }
      } catch (err) {
        if (!(err instanceof NoteError)) throw err;
        failures.push(`checkpoint ${stored.number}: ${err.message}: a forged or altered cosignature`);
      }
    }
  }
  for (const c of candidates) {
    const window = c.window ?? dated.get(id(c.key, c.cp, c.when)) ?? [times.get(Number(c.cp.size) - 1) ?? -Infinity, lastTime];
    const problem = timeProblem(c.when, window[0], window[1]);
    // An answer on the wire is the cloud's word; a line the device kept is the device's.
    if (problem !== null) (c.window !== null ? cloud : failures).push(`${c.where}: the cosignature vouches for nothing: ${problem}`);
    else found.push(c);
  }
  const n = leaves.length;
  const roots = rootsAt(leaves, new Set(found.map((f) => Number(f.cp.size)).filter((s) => s <= n)));
  for (const f of found) {
    if (logKeyUsed !== null && f.cp.origin !== logKeyUsed.name) failures.push(`${f.where}: cosigned another log`);
    else if (f.cp.size > BigInt(n)) failures.push(`${f.where}: cosigned size ${f.cp.size}, but the log holds only ${n}`);
    else if (!equalBytes(roots.get(Number(f.cp.size))!, f.cp.root)) failures.push(`${f.where}: the cosigned records were rewritten`);
  }
  const latestSizes: bigint[] = [];
  for (const key of keys) {
    const mine = found.filter((f) => f.key === key);
    if (mine.length === 0) {
      latestSizes.push(0n);
      const message = `no checkpoint of this log carries a valid cosignature by witness ${key.name}+${toHex(key.id)}`;
      // An answer the cloud spoilt or withheld is its doing: the sessions stay unwitnessed (UNPROVEN).
      (withheld || spoilt.has(key) ? cloud : failures).push(message);
      continue;
    }
    latestSizes.push(mine.reduce((m, f) => (f.cp.size > m ? f.cp.size : m), 0n));
  }
  let unwitnessed: string | null = null;
  const notes: string[] = cloud.map((c) => `the cloud: ${c}`);
  if (keys.length > 0) {
    const cosignedSize = latestSizes.reduce((m, s) => (s < m ? s : m), latestSizes[0] ?? 0n);
    const exchange = new Set(requests.filter((r) => r.request.size === cosignedSize).map((r) => r.position));
    for (const a of answers) if (exchange.has(a.close)) exchange.add(a.position);
    const tail = parsed.filter((p) => BigInt(p.position) >= cosignedSize && !exchange.has(p.position));
    const tailSessions = new Set(tail.map((p) => p.record?.session).filter((s) => s));
    if (tailSessions.size > 0) {
      unwitnessed = `unwitnessed tail: ${tailSessions.size} session(s) lie after the last checkpoint the witness cosigned (size ${cosignedSize})`;
      notes.push(unwitnessed);
    }
  }
  return [check("witness cosignatures", failures, notes), unwitnessed];
}

/** Every check of `audit verify` over a log; `key` is the auditor's log key (null: trust the header's). */
export function verifyLog(files: LogFiles, key: NoteKey | null, witnessKeys: NoteKey[] = []): Report {
  const scan = scanLog(files);
  const parseFailures: string[] = [];
  const parsed: Parsed[] = scan.records.map((s) => {
    try {
      return { position: s.position, record: parseRecord(s.data) };
    } catch (err) {
      if (!(err instanceof RecordError)) throw err;
      parseFailures.push(`record ${s.position}: ${err.message}`);
      return { position: s.position, record: null };
    }
  });
  const leaves = scan.records.map((s) => s.leaf);
  const [declaredCheck, used] = logKey(parsed, key);
  const rotated = used === null ? null : keyChain(used, parsed);
  const keyCheck = rotated === null ? declaredCheck : withRotations(declaredCheck, rotated.chain, rotated.problems);
  const chain = rotated?.chain ?? null;
  const [cpCheck, valid] = checkpoints(scan, chain, leaves);
  const signedSize = valid.reduce((m, [, c]) => Math.max(m, Number(c.size)), 0);
  const checks = [integrity(scan, parsed, files, signedSize, parseFailures), keyCheck, cpCheck];
  const [sessionChecks, sessionCount] = sessions(parsed);
  const requests = requestFailures(parsed, chain, leaves);
  for (const c of sessionChecks) {
    if (c.name === "uplinks" && requests.length > 0) checks.push(check(c.name, [...c.failures, ...requests], c.notes));
    else checks.push(c);
  }
  let unwitnessed: string | null = null;
  if (witnessKeys.length > 0) {
    const [c, why] = witnessCheck(parsed, scan, leaves, witnessKeys, used);
    checks.push(c);
    unwitnessed = why;
  }
  const ok = checks.every((c) => c.ok);
  const verdict = !ok ? "FAILED" : key !== null && unwitnessed === null ? "VERIFIED" : "UNPROVEN";
  return { verdict, records: scan.records.length, sessions: sessionCount, checks, unwitnessed };
}

export function parseWitnessKey(text: string): NoteKey {
  return NoteKey.parse(text, ALG_COSIGNATURE_V1);
}

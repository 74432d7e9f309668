/**
 * The audit log's writer (src/audit/log.ts, recorder.ts) and the session loop that writes it:
 * the bytes of docs/audit-format.md's worked example (records, leaves, root, checkpoint) exactly;
 * scripted sessions against an in-process verifier that is also the log's witness, whose log
 * `verifyLog` finds VERIFIED with the witness's key, and FAILED once one byte is changed; a lost
 * verifier on record as a fallback; the recorder refusing what the contract forbids. The Python
 * `audit verify` reads these logs too: tests/test_sdk_js_audit_log.py.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { AuditLog, LogHandedOverError, MemoryLogStorage, checkpointLine, handoverMessage } from "../src/audit/log.js";
import { EgressBlocked, EgressRecorder } from "../src/audit/recorder.js";
import { scanLog } from "../src/audit/scan.js";
import { parseRecord } from "../src/audit/records.js";
import { verifyLog } from "../src/audit/verify.js";
import { concatBytes, fromBase64, toBase64, toHex, utf8 } from "../src/bytes.js";
import { ALG_COSIGNATURE_V1, NoteKey, NoteSigner, openCheckpoint } from "../src/note.js";
import { encodeClose, encodeOpen, encodeRound, generate } from "../src/session.js";
import { create, toBinary } from "@bufbuild/protobuf";
import { CandidateSchema, DownlinkSchema } from "../src/gen/verifier_pb.js";
import { decodeUplink } from "../src/wire.js";
import { drafter, EOS, fakeVerifier, params, V } from "./fake-verifier.js";

const doc = readFileSync(fileURLToPath(new URL("../../../docs/audit-format.md", import.meta.url)), "utf8");
function example(name: string): string {
  const m = new RegExp(`<!-- example:${name} -->\\n\`\`\`\\n([\\s\\S]*?)\`\`\``).exec(doc);
  assert.ok(m, `docs/audit-format.md has no example:${name}`);
  return m[1]!;
}

test("the worked example of docs/audit-format.md, byte for byte", () => {
  const signer = NoteSigner.parse(example("signer"));
  assert.equal(signer.key.toString(), example("verifier").trim());
  const storage = new MemoryLogStorage();
  const clock = (): Date => new Date(Date.UTC(2026, 0, 1));
  const log = AuditLog.open(storage, signer, { device: { name: "alice", certSha256: "ab".repeat(32) }, clock });
  const sid = "0123456789abcdef0123456789abcdef";
  log.appendSession("session-begin", sid, { vocab_size: 49152, max_top_k: 10 });
  log.appendSession("fallback", sid, { reason: "verifier-unreachable" });
  const note = log.checkpoint();
  const scan = scanLog(storage);
  assert.deepEqual(scan.records.map((r) => utf8.decode(r.data)).join("\n") + "\n", example("records"));
  assert.deepEqual(scan.records.map((r) => toHex(r.leaf)).join("\n") + "\n", example("leaves"));
  assert.equal(toHex(log.root()) + "\n", example("root"));
  assert.equal(note, example("checkpoint"));
  const seg = storage.readSegment("seg-000000000000.log");
  assert.equal(toHex(seg.subarray(scan.records[3]!.offset)) + "\n", example("frame"));
  // checkpoints.jsonl: Python's json.dumps({"note": note}) (ensure_ascii), one line each.
  const lines = utf8.decode(storage.readCheckpoints()!)!.split("\n");
  assert.equal(lines[lines.length - 2], checkpointLine(note).trimEnd());
  assert.match(lines[lines.length - 2]!, /^\{"note": "example\.org\/device-1\\n4\\n.*\\n\\n\\u2014 example\.org\/device-1 .*\\n"\}$/);
});

const witness = new NoteSigner("verifier.example/witness", new Uint8Array(32).fill(7), ALG_COSIGNATURE_V1);
const options = { guard: "off" as const, maxNewTokens: 20, eosIds: new Set([EOS]), vocabSize: V, roundTimeoutMs: 2000 };
const signer = new NoteSigner("device.example/alice", new Uint8Array(32).fill(3));
const device = { name: "alice", certSha256: "cd".repeat(32) };

function records(storage: MemoryLogStorage) {
  return scanLog(storage).records.map((r) => parseRecord(r.data));
}

test("scripted sessions write a log the verifier finds VERIFIED with the witness; one byte changed FAILS", async () => {
  const storage = new MemoryLogStorage();
  const log = AuditLog.open(storage, signer, { device, witnessKey: witness.key });
  const recorder = new EgressRecorder(log);
  const a = await generate(drafter, [3, 1, 4], [1, 4], params, { ...options, recorder }, fakeVerifier(witness));
  const b = await generate(drafter, [7], [7], params, { ...options, recorder }, fakeVerifier(witness));
  log.close();
  assert.equal(a.stats.fallback, null);
  assert.deepEqual([a.stats.witnessFaults, b.stats.witnessFaults], [[], []]);
  const recs = records(storage);
  const kinds = recs.map((r) => (r.kind === "uplink" ? `up:${decodeUplink(r.payload!, V).kind}` : r.kind));
  // Per session: begin, Open, (Round, verdict) per round, Close, the witness's answer.
  assert.deepEqual(kinds.slice(0, 4), ["log-header", "device-cert", "session-begin", "up:open"]);
  const closes = recs.filter((r) => r.kind === "uplink" && decodeUplink(r.payload!, V).kind === "close");
  assert.equal(closes.length, 2);
  assert.equal(kinds.filter((k) => k === "session-begin").length, 2);
  assert.equal(kinds[kinds.length - 1], "downlink"); // the second Close's cosignature
  const roundsA = a.stats.rounds;
  assert.equal(kinds.slice(0, 4 + 2 * roundsA + 2).filter((k) => k === "up:round").length, roundsA);
  // The second Close proves consistency from the first one's cosigned checkpoint.
  const second = decodeUplink(closes[1]!.payload!, V);
  assert.ok(second.kind === "close" && second.witness !== null && second.witness.oldSize > 0n && second.witness.consistencyProof.length > 0);
  const text = utf8.decode(storage.readCheckpoints()!)!;
  assert.equal(text.split("\n").filter((l) => l.includes("verifier.example/witness")).length, 2, "both cosignatures kept");

  const report = verifyLog(storage, signer.key, [witness.key]);
  assert.equal(report.verdict, "VERIFIED", JSON.stringify(report.checks.filter((c) => !c.ok)));
  assert.equal(report.sessions, 2);
  assert.equal(report.records, recs.length);

  // One byte of a payload changed (inside its base64): the record's checksum and hash fail.
  const seg = storage.segments.get("seg-000000000000.log")!;
  const at = scanLog(storage).records[5]!.offset + 4 + utf8.decode(scanLog(storage).records[5]!.data)!.indexOf('"bytes":"') + 10;
  const tampered = seg.slice();
  tampered[at] = tampered[at] === 0x41 ? 0x42 : 0x41;
  storage.segments.set("seg-000000000000.log", tampered);
  assert.equal(verifyLog(storage, signer.key, [witness.key]).verdict, "FAILED");
});

test("a padded session's log: its PaddedRounds logged as sent, VERIFIED with the witness", async () => {
  const storage = new MemoryLogStorage();
  const log = AuditLog.open(storage, signer, { device, witnessKey: witness.key });
  const recorder = new EgressRecorder(log);
  const g = await generate(drafter, [3, 1, 4], [1, 4], { ...params, paddedFrames: true }, { ...options, recorder }, fakeVerifier(witness));
  log.close();
  assert.deepEqual([g.stats.fallback, g.stats.witnessFaults], [null, []]);
  const ups = records(storage).filter((r) => r.kind === "uplink").map((r) => r.payload!);
  const kinds = ups.map((p) => decodeUplink(p, V).kind);
  assert.deepEqual(kinds, ["open", ...new Array<string>(g.stats.rounds).fill("padded_round"), "close"]);
  assert.equal(new Set(ups.slice(1, -1).map((p) => p.length)).size, 1);
  const report = verifyLog(storage, signer.key, [witness.key]);
  assert.equal(report.verdict, "VERIFIED", JSON.stringify(report.checks.filter((c) => !c.ok)));
  assert.equal(report.sessions, 1);
});

test("a verifier lost mid-generation: the log says so (fallback verifier-lost), the drafter finishes", async () => {
  const storage = new MemoryLogStorage();
  const log = AuditLog.open(storage, signer, { device, witnessKey: witness.key });
  const recorder = new EgressRecorder(log);
  await generate(drafter, [3], [3], params, { ...options, recorder }, fakeVerifier(witness));
  const g = await generate(drafter, [7], [7], params, { ...options, eosIds: new Set<number>(), recorder }, fakeVerifier(witness, { breakAfter: 2, opens: 1 }));
  assert.equal(g.stats.fallback, "verifier-lost");
  assert.equal(g.tokenIds.length, 20);
  const recs = records(storage);
  const last = recs[recs.length - 1]!;
  assert.deepEqual([last.kind, last.fields.reason], ["fallback", "verifier-lost"]);
  // Signed at the session's end: nothing unsigned. The witness cosigned the first session only, so
  // the second is the unwitnessed tail: UNPROVEN with the witness key, not FAILED.
  assert.equal(verifyLog(storage, signer.key).verdict, "VERIFIED");
  const report = verifyLog(storage, signer.key, [witness.key]);
  assert.equal(report.verdict, "UNPROVEN", JSON.stringify(report.checks.filter((c) => !c.ok)));
});

test("a cosignature by another key is the cloud's fault: kept on record only, never proved from", async () => {
  const storage = new MemoryLogStorage();
  const log = AuditLog.open(storage, signer, { device, witnessKey: witness.key });
  const recorder = new EgressRecorder(log);
  const other = new NoteSigner("verifier.example/witness", new Uint8Array(32).fill(9), ALG_COSIGNATURE_V1);
  const g = await generate(drafter, [7], [7], params, { ...options, recorder }, fakeVerifier(witness, { cosignAs: other }));
  assert.equal(g.stats.witnessFaults.length, 1);
  assert.match(g.stats.witnessFaults[0]!, /invalid cosignature/);
  assert.equal(log.cosigned, null);
  const silent = await generate(drafter, [7], [7], params, { ...options, recorder }, fakeVerifier(witness, { silentWitness: true }));
  assert.match(silent.stats.witnessFaults[0]!, /withheld/);
  const report = verifyLog(storage, signer.key, [witness.key]);
  assert.equal(report.verdict, "UNPROVEN", JSON.stringify(report.checks.filter((c) => !c.ok)));
});

test("the recorder refuses what the contract forbids: nothing logged, nothing sent", () => {
  const storage = new MemoryLogStorage();
  const log = AuditLog.open(storage, signer);
  const recorder = new EgressRecorder(log);
  const sid = recorder.beginSession(V, 4);
  const size = log.size;
  assert.throws(() => recorder.onUplink(sid, encodeRound(1, [], [1, 2])), EgressBlocked); // a round before the Open
  recorder.onUplink(sid, encodeOpen([1, 2], params));
  const forged = { origin: "device.example/alice", logKey: signer.key.publicKey, size: 1n, rootHash: new Uint8Array(32), signature: new Uint8Array(64), oldSize: 0n, consistencyProof: [] };
  assert.throws(() => recorder.onUplink(sid, encodeClose(1, forged)), /did not issue/);
  assert.equal(log.size, size + 1); // the Open only
});

test("a log reopened from its storage goes on; a session its writer left open is closed as interrupted", () => {
  const storage = new MemoryLogStorage();
  const first = AuditLog.open(storage, signer, { device });
  const sid = new EgressRecorder(first).beginSession(V, 4);
  const again = AuditLog.open(storage, signer, { device });
  assert.deepEqual(again.interrupted, [sid]);
  assert.equal(again.size, first.size + 1);
  assert.throws(() => AuditLog.open(storage, new NoteSigner("device.example/alice", new Uint8Array(32).fill(4))), /belongs to key/);
  const report = verifyLog(storage, signer.key);
  assert.equal(report.verdict, "VERIFIED", JSON.stringify(report.checks.filter((c) => !c.ok)));
  assert.equal(new NoteKey(signer.key.name, signer.key.publicKey).toString(), signer.key.toString());
});

test("a torn final write is cut on open, kept under torn/ and recorded; damage a checkpoint signed is refused", () => {
  const storage = new MemoryLogStorage();
  AuditLog.open(storage, signer, { device }).close();
  const name = "seg-000000000000.log";
  const whole = storage.readSegment(name);
  // A crash mid-append: the next frame's first 20 bytes reached the disk.
  const frame = storage.readSegment(name).slice(scanLog(storage).records[1]!.offset);
  storage.segments.set(name, concatBytes(whole, frame.slice(0, 20)));
  assert.equal(verifyLog(storage, signer.key).verdict, "FAILED"); // a torn tail fails until the device reopens the log
  const log = AuditLog.open(storage, signer, { device });
  log.close();
  const recs = records(storage);
  assert.deepEqual(recs.map((r) => r.kind), ["log-header", "device-cert", "repair"]);
  assert.deepEqual([recs[2]!.fields.offset, recs[2]!.fields.cut_bytes], [whole.length, 20]);
  assert.deepEqual([...storage.torn.keys()], [`${name}.${whole.length}.${recs[2]!.fields.cut_sha256}.bin`]);
  const report = verifyLog(storage, signer.key);
  assert.equal(report.verdict, "VERIFIED", JSON.stringify(report.checks.filter((c) => !c.ok)));

  // The last record's trailer altered: a checkpoint covers it, so it is damage, not a crash.
  const signed = storage.readSegment(name).slice();
  signed[signed.length - 1] = signed[signed.length - 1]! ^ 1;
  storage.segments.set(name, signed);
  assert.throws(() => AuditLog.open(storage, signer, { device }), /signed record, not a torn write/);
});

test("a rotated log goes on under the new key; the old key and a handover the old key did not sign are refused", () => {
  const next = new NoteSigner("device.example/alice", new Uint8Array(32).fill(5));
  const storage = new MemoryLogStorage();
  const log = AuditLog.open(storage, signer, { device });
  const position = log.rotateKey(next);
  // The checkpoint covering the handover is the old key's last; the next one is the new key's.
  assert.equal(Number(openCheckpoint(log.latestCheckpoint!, signer.key).size), position + 1);
  assert.equal(log.key, next);
  new EgressRecorder(log).beginSession(V, 4);
  log.close();
  assert.equal(Number(openCheckpoint(log.latestCheckpoint!, next.key).size), position + 2);
  const rotation = records(storage)[position]!;
  assert.deepEqual(Object.keys(rotation.fields).sort(), ["index", "key", "kind", "signature", "time"]);
  assert.equal(rotation.fields.key, next.key.toString());
  assert.ok(signer.key.verify(handoverMessage(signer.key, next.key, position), fromBase64(String(rotation.fields.signature))!));
  assert.throws(() => log.rotateKey(new NoteSigner("device.example/bob", new Uint8Array(32).fill(6))), /named device\.example\/bob/);

  // Reopened with the new key it goes on (the open session closed as interrupted); with the old, refused.
  const again = AuditLog.open(storage, next, { device });
  assert.equal(again.interrupted.length, 1);
  again.close();
  assert.throws(() => AuditLog.open(storage, signer, { device }), /belongs to key device\.example\/alice\+[0-9a-f]{8}\+/);
  const report = verifyLog(storage, signer.key); // the auditor's key is the first one: verify follows the chain
  assert.equal(report.verdict, "VERIFIED");
  assert.deepEqual(report.checks.find((c) => c.name === "log key")!.notes, [`record ${position}: the log key was handed over to ${next.key.toString()}`]);

  // A handover signed by the new key itself (not the key in force) hands nothing over: refused with either key.
  const forged = new MemoryLogStorage();
  const bad = AuditLog.open(forged, signer, { device });
  const at = bad.size;
  bad.append("key-rotation", { key: next.key.toString(), signature: toBase64(next.sign(handoverMessage(signer.key, next.key, at))) });
  bad.close();
  assert.throws(() => AuditLog.open(forged, next, { device }), /record 2 \(key-rotation\): the handover .* is not signed by the key in force/);
  assert.throws(() => AuditLog.open(forged, signer, { device }), /key rotation does not verify/);
  const failed = verifyLog(forged, signer.key);
  assert.equal(failed.verdict, "FAILED");
  assert.match(failed.checks.find((c) => c.name === "log key")!.failures.join("\n"), /is not signed by the key in force .*: nothing is handed over/);
});

/** A store that dies on one checkpoint write: a crash inside `rotateKey`, after its record. */
class CrashingCheckpoints extends MemoryLogStorage {
  crashNext = false;
  override appendCheckpoints(data: Uint8Array): void {
    if (this.crashNext) throw new Error("power lost");
    super.appendCheckpoints(data);
  }
}

function rotatedThenCrashed(next: NoteSigner): { storage: CrashingCheckpoints; position: number } {
  const storage = new CrashingCheckpoints();
  const log = AuditLog.open(storage, signer, { device });
  const position = log.size;
  storage.crashNext = true;
  assert.throws(() => log.rotateKey(next), /power lost/);
  storage.crashNext = false;
  assert.equal(records(storage)[position]!.kind, "key-rotation"); // the handover is durable, its checkpoint is not
  return { storage, position };
}

function checkpointSizes(storage: MemoryLogStorage, key: NoteKey): number[] {
  return scanLog(storage)
    .checkpoints.map((c) => {
      try {
        return Number(openCheckpoint(c.note, key).size);
      } catch {
        return -1;
      }
    })
    .filter((size) => size >= 0);
}

test("a rotation cut short before the old key's checkpoint: the new key writes on from the next size, the old key finishes the handover", () => {
  const next = new NoteSigner("device.example/alice", new Uint8Array(32).fill(5));
  const cut = rotatedThenCrashed(next);
  const log = AuditLog.open(cut.storage, next, { device });
  assert.equal(log.size, cut.position + 1);
  new EgressRecorder(log).beginSession(V, 4);
  log.close();
  AuditLog.open(cut.storage, next, { device }).close(); // opens again (today's writer signed size P+1 with the new key)
  assert.equal(verifyLog(cut.storage, signer.key).verdict, "VERIFIED");
  const byNew = checkpointSizes(cut.storage, next.key);
  assert.ok(byNew.length > 0 && byNew.every((size) => size > cut.position + 1), `new-key checkpoints: ${byNew.join(",")}`);
  assert.throws(() => AuditLog.open(cut.storage, signer, { device }), (err: unknown) => {
    assert.ok(err instanceof LogHandedOverError && err.position === cut.position && err.newKey.toString() === next.key.toString());
    return /handed over at record \d+; open it with the new key/.test(err.message);
  });

  const again = rotatedThenCrashed(next);
  assert.throws(() => AuditLog.open(again.storage, signer, { device }), /the interrupted handover at record \d+ is now complete/);
  assert.equal(Math.max(...checkpointSizes(again.storage, signer.key)), again.position + 1);
  const reopened = AuditLog.open(again.storage, next, { device });
  const recorder = new EgressRecorder(reopened);
  recorder.onFallback(recorder.beginSession(V, 4), "verifier-unreachable");
  reopened.close();
  assert.ok(checkpointSizes(again.storage, next.key).every((size) => size > again.position + 1));
  assert.equal(verifyLog(again.storage, signer.key).verdict, "VERIFIED");
});

test("a resumed Open may carry only what a lost session with the same prompt sent up and had committed", () => {
  const answer = (seq: number, accepted: number, ids: number[]): Uint8Array =>
    toBinary(DownlinkSchema, create(DownlinkSchema, { seq, accepted, candidates: ids.map((t) => create(CandidateSchema, { tokenIds: [t], value: -0.5 })) }));
  const rec = new EgressRecorder(AuditLog.open(new MemoryLogStorage(), signer, { device }));
  const lost = rec.beginSession(V, 4);
  rec.onUplink(lost, encodeOpen([1, 2], params));
  rec.onUplink(lost, encodeRound(1, [], [5, 6, 7]));
  rec.onDownlink(lost, answer(1, 1, [3, 7]));
  rec.onUplink(lost, encodeRound(2, [7], [8, 9])); // unanswered: its commit went up, its draft was never accepted
  rec.onFallback(lost, "verifier-lost");
  const resumed = rec.beginSession(V, 4);
  const refused: [number[], number[]][] = [
    [[1, 2], [5, 7, 8]], // a drafted token the verifier never accepted
    [[1, 2], [5, 6]], // a drafted token it rejected
    [[1, 3], [5, 7]], // another prompt's generation
  ];
  for (const [prompt, resume] of refused) {
    assert.throws(() => rec.onUplink(resumed, encodeOpen(prompt, params, resume)), /resumes 2 token\(s\)|resumes 3 token\(s\)/, `${prompt} / ${resume}`);
  }
  rec.onUplink(resumed, encodeOpen([1, 2], params, [5, 7])); // the accepted 5, then the commit 7
  const other = rec.beginSession(V, 4);
  rec.onUplink(other, encodeOpen([1, 2], params, [5])); // without the unanswered round's commit: also sent
});

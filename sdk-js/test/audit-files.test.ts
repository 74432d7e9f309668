/**
 * The audit log on Node's files (`logStorage`, src/node/files.ts): one writer at a time. `open`
 * takes dir/lock and holds it until `close`; a second writer is refused without touching the log,
 * a failed open lets the lock go, and a closed log can be opened again. Across processes, and
 * against the Python writer: tests/test_sdk_js_audit_log.py.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { AuditError, AuditLog } from "../src/audit/log.js";
import { scanLog } from "../src/audit/scan.js";
import { NoteSigner } from "../src/note.js";
import { logStorage } from "../src/node/files.js";

const signer = new NoteSigner("device.example/alice", new Uint8Array(32).fill(3));
const other = new NoteSigner("device.example/alice", new Uint8Array(32).fill(4));

function withDir(body: (dir: string) => void): void {
  const root = mkdtempSync(join(tmpdir(), "specsteer-log-"));
  try {
    body(join(root, "log"));
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

test("a second writer is refused while the log is open, and takes it once the first closes", () => {
  withDir((dir) => {
    const first = AuditLog.open(logStorage(dir), signer);
    const records = scanLog(logStorage(dir)).records.length;
    assert.throws(() => AuditLog.open(logStorage(dir), signer), (err: unknown) => {
      assert.ok(err instanceof AuditError);
      assert.equal(err.message, `the audit log ${dir} is open in another process`);
      return true;
    });
    assert.equal(scanLog(logStorage(dir)).records.length, records, "the refused writer wrote nothing");
    const sid = "0123456789abcdef0123456789abcdef";
    first.appendSession("session-begin", sid, { vocab_size: 49152, max_top_k: 10 });
    first.appendSession("fallback", sid, { reason: "verifier-unreachable" });
    first.close();
    const second = AuditLog.open(logStorage(dir), signer);
    second.close();
    assert.equal(scanLog(logStorage(dir)).records.length, records + 2);
  });
});

test("an open that fails lets the lock go", () => {
  withDir((dir) => {
    AuditLog.open(logStorage(dir), signer).close();
    assert.throws(() => AuditLog.open(logStorage(dir), other), AuditError); // not the log's key
    AuditLog.open(logStorage(dir), signer).close(); // the failed open held nothing
  });
});

test("a lock that is not a regular file is refused", () => {
  withDir((dir) => {
    mkdirSync(join(dir, "lock"), { recursive: true });
    assert.throws(() => AuditLog.open(logStorage(dir), signer), /lock is not a regular file/);
  });
});

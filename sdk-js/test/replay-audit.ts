/** The replayer of conformance/v1/audit/cases.json: each log verified as `audit verify --json` would. */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseWitnessKey, verifyLog } from "../src/audit/verify.js";
import { NoteKey } from "../src/note.js";
import { logDirectory } from "../src/node/files.js";
import type { Result } from "./replay-wire.js";
import { CONFORMANCE, type Json } from "./vectors.js";

const read = (file: string): string => readFileSync(join(CONFORMANCE, file), "utf8");

export function replayAudit(doc: Json): Result[] {
  return doc.cases.map((c: Json): Result => {
    const key = c.key === null ? null : NoteKey.parse(read(c.key));
    const witnessKeys = (c.witness_keys ?? []).map((f: string) => parseWitnessKey(read(f)));
    const report = verifyLog(logDirectory(join(CONFORMANCE, c.log)), key, witnessKeys);
    const got = {
      verdict: report.verdict,
      records: report.records,
      sessions: report.sessions,
      checks: report.checks.map((x) => ({ name: x.name, ok: x.ok })),
    };
    const e = c.expected;
    const expected = { verdict: e.verdict, records: e.records, sessions: e.sessions, checks: e.checks.map((x: Json) => ({ name: x.name, ok: x.ok })) };
    const ok = JSON.stringify(got) === JSON.stringify(expected);
    const failures = report.checks.filter((x) => !x.ok).map((x) => `${x.name}: ${x.failures.join(" | ")}`);
    return [c.name, ok, ok ? "" : `${JSON.stringify(got)} ${failures.join("; ")}`];
  });
}

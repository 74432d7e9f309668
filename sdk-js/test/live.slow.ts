/**
 * The TypeScript device against the live Python verifier (`server serve`) over mutual TLS with
 * pinned anchors: a throwaway PKI and a tiny random verifier pair over the default Specialist's
 * tokenizer (test/live/live_python.py prepare), the default bundle's int4 ONNX drafter on both
 * devices. Greedy, the TypeScript device's token IDs must be the Python device's on the same
 * prompt; the TypeScript device writes its audit log meanwhile, and the Python `audit verify`
 * finds it VERIFIED with the verifier's transcript (`--server-transcript`) and its witness's key
 * (the verifier cosigns each Close). Then the verifier is killed mid-generation and comes back on
 * the same port: the TypeScript device resumes the generation in a new session and writes the
 * uninterrupted text, its log VERIFIED with both verifiers' transcripts; then it is killed for good
 * and the TypeScript device finishes alone, `fallback: "verifier-lost"`, and its log says so. Python:
 * $SPECSTEER_PYTHON, else the repository's .venv.
 */
import assert from "node:assert/strict";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { AuditLog } from "../src/audit/log.js";
import { EgressRecorder } from "../src/audit/recorder.js";
import { parseRecord } from "../src/audit/records.js";
import { scanLog } from "../src/audit/scan.js";
import { defaultBundlePath, modelFactsOf } from "../src/node/bundle.js";
import { deviceIdentity, loadSigningKey, loadWitnessKey, logStorage } from "../src/node/files.js";
import { loadOnnxDrafter } from "../src/node/drafter.js";
import { GrpcTransport, loadPinSet } from "../src/node/grpc.js";
import type { OnnxDrafter } from "../src/drafter.js";
import { generate } from "../src/session.js";
import { guardGeneration } from "../src/guard/guarded.js";
import { guardSetting } from "../src/guard/uplink_guard.js";
import { defaultTokenizer } from "./scripted-text.js";
import { DEFAULT_PARAMS } from "../src/wire.js";

const repo = fileURLToPath(new URL("../../..", import.meta.url));
const here = fileURLToPath(new URL("../../test/live", import.meta.url));
const python = process.env.SPECSTEER_PYTHON ?? join(repo, ".venv", "bin", "python");
const env = { ...process.env, PYTHONPATH: repo, GRPC_VERBOSITY: "NONE" };
const PROMPTS = [
  "Write a haiku about the sea.",
  "Explain what a Merkle tree is in two sentences.",
  "Write a Python function that reverses a string.",
];
const N = 24;
// A prompt with an email address, which the drafts are likely to repeat: the guarded case.
const GUARDED = "Write a two-line note asking jane.doe@example.com to review the patch, signed with her address.";

interface Prepared {
  bundle: string;
  pins: string;
  cert: string;
  key: string;
  audit_key: string;
  audit_pub: string;
  witness_key: string;
  witness_pub: string;
  private_ids: number[][];
  public_ids: number[][];
  eos_ids: number[];
  vocab_size: number;
  width: number;
}

const out = mkdtempSync(join(tmpdir(), "specsteer-live-"));
let prep: Prepared;
let drafter: OnnxDrafter;

function py(...args: string[]): Promise<unknown> {
  return new Promise((resolve, reject) => {
    execFile(python, [join(here, "live_python.py"), ...args], { env, encoding: "utf8", maxBuffer: 1 << 24 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`live_python.py ${args[0]} failed: ${stderr.slice(-2000)}`));
      else resolve(JSON.parse(stdout));
    });
  });
}

/** A verifier on port `at` (0: any free one), its transcript in `transcript` and its witness's record
 * of what it cosigned in `witnessState` (under `out`; one per log: the logs here share a device key). */
async function serve(at = 0, transcript = "transcript", witnessState = "witness-state.json"): Promise<{ proc: ChildProcess; port: number }> {
  const portFile = join(out, `port-${Date.now()}`);
  const proc = spawn(
    join(dirname(python), "server"),
    ["serve", "--generalist", join(out, "generalist"), "--specialist", join(out, "specialist"), "--tls-dir", join(out, "pki"), "--port", String(at), "--port-file", portFile,
     "--witness-key", prep.witness_key, "--witness-state", join(out, witnessState), "--transcript-dir", join(out, transcript)],
    { env, cwd: out, stdio: "ignore" },
  );
  for (let i = 0; i < 1200 && !existsSync(portFile); i++) await new Promise((r) => setTimeout(r, 100));
  const port = Number(readFileSync(portFile, "utf8").trim());
  assert.ok(port > 0, "the verifier did not start");
  return { proc, port };
}

const running: ChildProcess[] = [];
let verifier: { proc: ChildProcess; port: number };
before(async () => {
  // The Python preparation and the ONNX graph's load overlap; then one verifier serves both cases.
  const [p] = await Promise.all([py("prepare", out, JSON.stringify([...PROMPTS, GUARDED])), loadOnnxDrafter(defaultBundlePath("qwen2.5-coder-0.5b-instruct", "int4"), { threads: 2 }).then((d) => (drafter = d))]);
  prep = p as Prepared;
  verifier = await serve();
  running.push(verifier.proc);
});
after(() => {
  for (const p of running) p.kill("SIGKILL");
  rmSync(out, { recursive: true, force: true });
});

function transport(port: number): GrpcTransport {
  return new GrpcTransport({ target: `127.0.0.1:${port}`, pins: prep.pins, cert: prep.cert, key: prep.key, connectTimeoutMs: 5000 });
}

/** The TypeScript device's audit log at `dir`: bound to alice's certificate, proving from the witness's cosignatures. */
function auditLog(dir: string): AuditLog {
  return AuditLog.open(logStorage(dir), loadSigningKey(prep.audit_key), { device: deviceIdentity(prep.cert), witnessKey: loadWitnessKey(prep.witness_pub) });
}

/** The Python `audit verify --json` (the console script beside $SPECSTEER_PYTHON): exit status and report. */
function auditVerify(...args: string[]): Promise<{ code: number; report: { verdict: string; checks: { name: string; ok: boolean; summary: string; failures: string[]; notes: string[] }[] } }> {
  return new Promise((resolve) => {
    execFile(join(dirname(python), "audit"), ["verify", ...args, "--json"], { env, encoding: "utf8", maxBuffer: 1 << 24 }, (err, stdout) => {
      resolve({ code: err === null ? 0 : Number(err.code), report: JSON.parse(stdout) });
    });
  });
}

const options = () => ({ guard: "off" as const, maxNewTokens: N, eosIds: new Set(prep.eos_ids), vocabSize: prep.vocab_size, width: prep.width, roundTimeoutMs: 20_000 });

test("greedy over mutual TLS: the TypeScript device's token IDs are the Python device's", async () => {
  const { port } = verifier;
  type Result = { token_ids: number[]; stats: { rounds: number; fallback: string | null } };
  const want = (await py("device", out, String(port), JSON.stringify(PROMPTS), String(N))) as Result[];
  const t = transport(port);
  const logDir = join(out, "ts-log");
  const log = auditLog(logDir);
  const recorder = new EgressRecorder(log);
  for (const [i, w] of want.entries()) {
    const g = await generate(drafter, prep.private_ids[i]!, prep.public_ids[i]!, DEFAULT_PARAMS, { ...options(), recorder }, t);
    assert.deepEqual(g.stats.witnessFaults, []);
    console.log(`live ${i}: TypeScript ${g.tokenIds.length} tokens in ${g.stats.rounds} rounds (${g.stats.accepted}/${g.stats.drafted} accepted, ${g.stats.recoveries} recoveries), Python ${w.token_ids.length} in ${w.stats.rounds}`);
    assert.equal(w.stats.fallback, null);
    assert.equal(g.stats.fallback, null);
    assert.deepEqual(g.tokenIds, w.token_ids, PROMPTS[i]);
    assert.equal(g.stats.rounds, w.stats.rounds);
  }
  t.close();
  log.close();
  // The Python auditor, with the device's key, the verifier's transcript and its witness's key.
  const started = Date.now();
  const { code, report } = await auditVerify(logDir, "--key", prep.audit_pub, "--witness-key", prep.witness_pub, "--server-transcript", join(out, "transcript"), "--device", "alice");
  console.log(`audit verify (Python) on the TypeScript device's log: ${report.verdict}, exit ${code}, ${log.size} records, ${Date.now() - started} ms`);
  assert.equal(report.verdict, "VERIFIED", JSON.stringify(report.checks.filter((c) => !c.ok)));
  assert.equal(code, 0);
  const transcript = report.checks.find((c) => c.name.includes("transcript"));
  assert.ok(transcript?.ok, "the server transcript was compared");
  const witness = report.checks.find((c) => c.name === "witness cosignatures");
  assert.ok(witness?.ok && /^3 cosignature\(s\) by verifier\.example\/witness/.test(witness.summary), JSON.stringify(witness));
  console.log(`  ${transcript.summary}\n  ${witness.summary}`);
});

test("guarded greedy over mutual TLS: the TypeScript device's token IDs and guard decisions are the Python device's", async () => {
  const { port } = verifier;
  type Result = { token_ids: number[]; stats: { rounds: number; fallback: string | null; guard: Record<string, number> } };
  const [want] = (await py("device", out, String(port), JSON.stringify([GUARDED]), String(N), "placeholder")) as Result[];
  const tokenizer = await defaultTokenizer();
  const guard = guardSetting(null, tokenizer, "placeholder")!; // the device's default: generic labels, no profile
  const { session, publicIds } = guardGeneration(guard, tokenizer, GUARDED);
  const t = transport(port);
  const g = await generate(drafter, prep.private_ids[PROMPTS.length]!, publicIds, DEFAULT_PARAMS, { ...options(), guard: session }, t);
  t.close();
  const decisions = Object.fromEntries(Object.entries(g.stats.guardDecisions).map(([k, v]) => [k.replaceAll("-", "_"), v]));
  console.log(`live guarded: TypeScript ${g.tokenIds.length} tokens in ${g.stats.rounds} rounds, decisions ${JSON.stringify(decisions)}; Python ${want!.token_ids.length} in ${want!.stats.rounds}, ${JSON.stringify(want!.stats.guard)}`);
  assert.equal(tokenizer.decode(publicIds), "Write a two-line note asking <PRIVATE_1> to review the patch, signed with her address.");
  assert.deepEqual(g.tokenIds, want!.token_ids);
  assert.deepEqual(decisions, want!.stats.guard);
  assert.equal(decisions.prompt_redact, 1);
  assert.equal(g.stats.rounds, want!.stats.rounds);
});

test("the verifier killed mid-generation comes back on its port: the TypeScript device resumes, writes the uninterrupted text, and its log VERIFIES", async () => {
  // A verifier of this test's own (its transcript holds this log's streams only), then its successor on the same port.
  const first = await serve(0, "transcript-resume-1", "witness-state-resume.json");
  running.push(first.proc);
  const opts = options();
  const t = transport(first.port);
  const logDir = join(out, "ts-log-resumed");
  const log = auditLog(logDir);
  const recorder = new EgressRecorder(log);
  const reference = await generate(drafter, prep.private_ids[1]!, prep.public_ids[1]!, DEFAULT_PARAMS, { ...opts, recorder }, t);
  // The same generation again; once 8 tokens are committed the verifier is killed and started anew on its port.
  let committed = 0;
  const second: { started: Promise<{ proc: ChildProcess; port: number }> | null } = { started: null };
  const onCommit = (ids: number[]): void => {
    committed += ids.length;
    if (second.started === null && committed >= 8) {
      first.proc.kill("SIGKILL");
      second.started = serve(first.port, "transcript-resume-2", "witness-state-resume.json"); // the same witness, restarted
    }
  };
  const g = await generate(drafter, prep.private_ids[1]!, prep.public_ids[1]!, DEFAULT_PARAMS, { ...opts, onCommit, recorder, resumeWithinMs: 30_000 }, t);
  t.close();
  log.close();
  assert.ok(second.started !== null, "the verifier was killed");
  running.push((await second.started).proc);
  console.log(`live resume: ${g.tokenIds.length} tokens, resumed ${g.stats.resumed} (${g.stats.resumeReasons}), fallback ${g.stats.fallback}`);
  assert.deepEqual([reference.stats.witnessFaults, g.stats.witnessFaults], [[], []]);
  assert.equal(g.stats.fallback, null, g.stats.fallbackDetail ?? "");
  assert.equal(g.stats.resumed, 1);
  assert.deepEqual(g.tokenIds, reference.tokenIds);
  // Three sessions on record: the reference, the lost one (fallback verifier-lost) and the one that resumed it.
  const records = scanLog(logStorage(logDir)).records.map((r) => parseRecord(r.data));
  assert.deepEqual(records.filter((r) => r.kind === "fallback").map((r) => r.fields.reason), ["verifier-lost"]);
  assert.equal(records.filter((r) => r.kind === "session-begin").length, 3);
  const { code, report } = await auditVerify(logDir, "--key", prep.audit_pub, "--witness-key", prep.witness_pub,
    "--server-transcript", join(out, "transcript-resume-1"), "--server-transcript", join(out, "transcript-resume-2"), "--device", "alice");
  console.log(`audit verify (Python) on the resumed generation's log: ${report.verdict}, exit ${code}`);
  assert.equal(report.verdict, "VERIFIED", JSON.stringify(report.checks.filter((c) => !c.ok)));
  assert.equal(code, 0);
});

test("the verifier killed mid-generation and none to take it back: the TypeScript device finishes alone, fallback verifier-lost", async () => {
  const { proc, port } = verifier;
  const t = transport(port);
  let killed = false;
  const onCommit = (): void => {
    if (!killed) {
      killed = true;
      proc.kill("SIGKILL");
    }
  };
  const logDir = join(out, "ts-log-lost");
  const log = auditLog(logDir);
  const recorder = new EgressRecorder(log);
  const g = await generate(drafter, prep.private_ids[0]!, prep.public_ids[0]!, DEFAULT_PARAMS, { ...options(), eosIds: new Set<number>(), onCommit, recorder, resumeWithinMs: 2000 }, t);
  t.close();
  log.close();
  // The log says so: its session ends with a fallback record, `verifier-lost`.
  const records = scanLog(logStorage(logDir)).records.map((r) => parseRecord(r.data));
  const last = records[records.length - 1]!;
  assert.deepEqual([last.kind, last.fields.reason], ["fallback", "verifier-lost"]);
  assert.ok(killed);
  assert.equal(g.stats.fallback, "verifier-lost", g.stats.fallbackDetail ?? "");
  assert.equal(g.stats.resumed, 0); // it tried (within resumeWithinMs): nothing answers on the dead port
  assert.equal(g.tokenIds.length, N);
});

test("the model facts the package reads from the default bundle are the Python device's", async () => {
  const facts = await modelFactsOf(defaultBundlePath("qwen2.5-coder-0.5b-instruct", "int4"));
  assert.deepEqual([[...facts.eosIds].sort((a, b) => a - b), facts.vocabSize, facts.width], [prep.eos_ids, prep.vocab_size, prep.width]);
});

test("the pins file is read as sdk/pinning.py reads it: refusals fail closed", () => {
  const text = readFileSync(prep.pins, "latin1");
  const pinLines = text.split("\n").filter((l) => l.startsWith("sha256/"));
  assert.equal(loadPinSet(prep.pins).pins.length, pinLines.length);
  const write = (name: string, body: string): string => {
    const p = join(out, name);
    writeFileSync(p, body);
    return p;
  };
  const certs = text.slice(text.indexOf("-----BEGIN"));
  assert.throws(() => loadPinSet(write("one-pin.txt", text.replace(pinLines[1]!, ""))), /at least 2 are required/);
  assert.throws(() => loadPinSet(write("no-certs.txt", pinLines.join("\n") + "\n")), /names no anchor certificate/);
  const other = pinLines[0]!.slice(0, 10) + (pinLines[0]![10] === "A" ? "B" : "A") + pinLines[0]!.slice(11);
  assert.throws(() => loadPinSet(write("unpinned.txt", other + "\n" + pinLines[1] + "\n" + certs)), /is not pinned/);
  assert.throws(() => loadPinSet(write("bad-pin.txt", "sha256/short\n" + text)), /is not a pin/);
});

/**
 * An app embedding `@specsteer/device` on Node: it opens the default model bundle (every file's
 * hash checked), builds the transport to the verifier with mutual TLS and pinned anchors, runs one
 * greedy session with the user's history kept on the device (retrieval and the chat template
 * here, only the raw prompt goes up) and every frame written to its audit log, then checks that
 * log as an auditor would (`verifyLog`, the TypeScript twin of `audit verify`).
 *
 *   npm run build   # compiles this file to dist/examples/node-device/main.js
 *   node dist/examples/node-device/main.js --target 127.0.0.1:50051 --pins PKI/pins.txt \
 *     --cert PKI/devices/alice.pem --key PKI/devices/alice.key \
 *     --audit-dir LOG --audit-key KEYS/NAME.key [--witness-pub KEYS/W.witness.pub] \
 *     [--profile history.json] --subject "the commit's subject line" [--max-new-tokens 64] [--no-padded-frames]
 *     [--guard placeholder|keep-local|off] [--prompt-guard redact|refuse|allow]
 *
 * The PKI is `server pki init` + `server pki issue-device`'s; the audit key `audit keygen`'s; the
 * witness key the verifier's `server witness-key` .pub (the verifier started with `--witness-key`
 * cosigns each Close). `--profile` is a JSON file `{"profile": [{"subject", "body"}, ...]}` (the
 * demo profile's layout). Imports go through the package's own name, as an app's would: the type
 * check maps them to src/ (tsconfig.json's `paths`), Node resolves them to dist/ (the package's
 * `exports`).
 *
 * Padded frames are on, as in the Python client (sdk/client.py's `padded_frames = True`): every
 * round goes up as a PaddedRound of one size, so a round's size says nothing of how many tokens it
 * carries; `--no-padded-frames` sends about 5x fewer uplink bytes. (`DEFAULT_PARAMS` mirrors the
 * Python `SessionParams()`, whose `padded_frames` is False, so an app turns padding on itself.)
 *
 * The egress guard is on, as in the Python client (`sdk generate --guard placeholder`, generic
 * labels): every draft is checked before it goes up against personal-data patterns, secrets, the
 * user's history and the names and emails of its trailers; a sensitive span goes up as
 * `<PRIVATE>` while the text shown here keeps it, and the prompt goes up redacted
 * (`--prompt-guard`); every decision is on the audit log.
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import {
  AuditLog,
  DEFAULT_GUARD_SETTING,
  DEFAULT_PARAMS,
  EgressRecorder,
  ProfileIndex,
  fitContext,
  generate,
  guardGeneration,
  guardProfileOf,
  guardSetting,
  restorePrompt,
  taskPrompt,
  verifyLog,
  type ProfileEntry,
} from "@specsteer/device";
import {
  GrpcTransport,
  defaultBundlePath,
  deviceIdentity,
  loadOnnxDrafter,
  loadSigningKey,
  loadWitnessKey,
  logDirectory,
  logStorage,
  modelFactsOf,
  openBundleFolder,
  promptRendererOf,
} from "@specsteer/device/node";

function json(path: string): Record<string, unknown> {
  return JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;
}

async function main(): Promise<void> {
  const { values: o } = parseArgs({
    options: {
      target: { type: "string" },
      pins: { type: "string" },
      cert: { type: "string" },
      key: { type: "string" },
      "audit-dir": { type: "string" },
      "audit-key": { type: "string" },
      "witness-pub": { type: "string" },
      profile: { type: "string" },
      subject: { type: "string" },
      bundle: { type: "string" },
      "max-new-tokens": { type: "string", default: "64" },
      threads: { type: "string", default: "2" },
      "no-padded-frames": { type: "boolean", default: false },
      guard: { type: "string", default: DEFAULT_GUARD_SETTING },
      "prompt-guard": { type: "string", default: "redact" },
    },
  });
  const required = ["target", "pins", "cert", "key", "audit-dir", "audit-key", "subject"] as const;
  const missing = required.filter((k) => o[k] === undefined);
  if (missing.length > 0) throw new Error(`missing --${missing.join(", --")} (see the header of examples/node-device/main.ts)`);

  // 1. The model bundle: refused unless every file matches its manifest.
  const bundle = o.bundle ?? defaultBundlePath("qwen2.5-coder-0.5b-instruct", "int4");
  const opened = await openBundleFolder(bundle);
  const renderer = await promptRendererOf(bundle);
  const drafter = await loadOnnxDrafter(bundle, { threads: Number(o.threads) });
  const facts = await modelFactsOf(bundle); // end-of-sequence IDs, vocabulary rows and width, as the Python device reads them
  console.log(`bundle ${opened.name} (${opened.precision}): ${Object.keys(opened.files).length} files checked`);

  // 2. The private prompt: the user's history never leaves the device; only the raw prompt goes up.
  const prompt = taskPrompt(o.subject!);
  const history = o.profile === undefined ? [] : ((json(o.profile).profile ?? []) as ProfileEntry[]);
  const examples = fitContext(new ProfileIndex(history).retrieve(prompt, 3), 1800);
  const privateIds = renderer.renderPrompt(prompt, examples);
  // The egress guard of this user (null with --guard off): what of the prompt and the drafts goes up.
  const tokenizer = renderer.guardTokenizer();
  const guard = guardSetting(guardProfileOf(history), tokenizer, o.guard!);
  const guarded = guard === null ? null : guardGeneration(guard, tokenizer, prompt, o["prompt-guard"]);
  const publicIds = guarded?.publicIds ?? renderer.publicPromptIds(prompt);

  // 3. The transport (mutual TLS, trusting the pins file's anchors only) and the audit log, bound to the device's certificate.
  const transport = new GrpcTransport({ target: o.target!, pins: o.pins!, cert: o.cert!, key: o.key!, connectTimeoutMs: 10_000 });
  const signer = loadSigningKey(o["audit-key"]!);
  const witnessKey = o["witness-pub"] === undefined ? undefined : loadWitnessKey(o["witness-pub"]);
  const log = AuditLog.open(logStorage(o["audit-dir"]!), signer, { device: deviceIdentity(o.cert!), witnessKey });
  const recorder = new EgressRecorder(log);

  // 4. One session: every uplink logged (durably) before it leaves, every downlink on receipt.
  const started = Date.now();
  const g = await generate(
    drafter,
    privateIds,
    publicIds,
    { ...DEFAULT_PARAMS, paddedFrames: !o["no-padded-frames"] },
    { guard: guarded?.session ?? "off", maxNewTokens: Number(o["max-new-tokens"]), eosIds: facts.eosIds, vocabSize: facts.vocabSize, width: facts.width, roundTimeoutMs: 120_000, recorder },
    transport,
  );
  transport.close();
  log.close();
  const s = g.stats;
  console.log(`${examples.length} example(s) retrieved; ${privateIds.length} private prompt tokens, ${publicIds.length} sent`);
  console.log(`--- text (${g.tokenIds.length} tokens, ${s.rounds} rounds, ${s.accepted}/${s.drafted} drafts accepted, ${s.recoveries} recoveries, ${((Date.now() - started) / 1000).toFixed(1)} s) ---`);
  const text = renderer.decode(g.tokenIds);
  console.log(guarded === null ? text : restorePrompt(guarded.session.prompt, text));
  if (guarded !== null) console.log(`egress guard: ${JSON.stringify(s.guardDecisions)}`);
  if (s.fallback !== null) console.log(`the drafter finished alone: ${s.fallback} (${s.fallbackDetail ?? ""})`);
  if (s.witnessFaults.length > 0) console.log(`the witness's faults: ${s.witnessFaults.join("; ")}`);

  // 5. The log, checked as an auditor would.
  const report = verifyLog(logDirectory(o["audit-dir"]!), signer.key, witnessKey === undefined ? [] : [witnessKey]);
  console.log(`audit log: ${report.verdict}, ${report.records} records, ${report.sessions} session(s)`);
  for (const c of report.checks.filter((x) => !x.ok)) console.log(`  ${c.name}: ${c.failures.join("; ")}`);
  process.exitCode = report.verdict === "FAILED" ? 1 : 0;
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : String(err));
  process.exit(1);
});

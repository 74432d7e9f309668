/**
 * An app on React Native embedding `@specsteer/device`: what it wires, in one function. It is
 * type-checked here without Node's types (tsconfig.core.json), against onnxruntime-react-native's
 * types; it is not run (there is no phone on these machines). The app supplies what only it can:
 *
 * - `fs`: its file module with react-native-fs's `readDir`, `readFile`, `hash` and `exists` (the
 *   bundle was downloaded into the app's storage, or shipped as an asset and copied there);
 * - `transport`: its gRPC bridge behind `Transport` (one bidirectional stream of serialized
 *   frames per session, mutual TLS with the device's certificate, the verifier pinned to the pins
 *   file's anchors as `src/node/grpc.ts` does on Node);
 * - `logStorage`: the audit log on its files (`LogStorage`: durable appends, fsync'ed);
 * - `logKey`: the log's signing key (`audit keygen`'s NAME.key text) from the platform's keystore.
 *
 * The user's history stays on the phone: retrieval and the chat template run here, only the raw
 * prompt's token IDs go up (redacted by the egress guard), every draft passes the guard before it
 * leaves (a sensitive span goes up as `<PRIVATE>`, the text shown keeps it), and every frame and
 * guard decision is logged before it leaves.
 */
import {
  AuditLog,
  DEFAULT_PARAMS,
  EgressRecorder,
  NoteSigner,
  ProfileIndex,
  fitContext,
  generate,
  guardGeneration,
  guardProfileOf,
  guardSetting,
  restorePrompt,
  taskPrompt,
  type DeviceIdentity,
  type LogStorage,
  type ProfileEntry,
  type Transport,
} from "@specsteer/device";
import { deviceModelFacts, devicePromptRenderer, loadDeviceDrafter, openDeviceBundle, type DeviceFileModule } from "@specsteer/device/react-native";

export interface PhoneDevice {
  fs: DeviceFileModule;
  bundleFolder: string;
  transport: Transport;
  logStorage: LogStorage;
  logKey: string;
  /** The device's mutual-TLS certificate, as the log binds it (its common name and DER SHA-256). */
  identity: DeviceIdentity;
}

/** One commit body for `subject`, written with the user's `history` kept on the phone. */
export async function writeCommitBody(device: PhoneDevice, subject: string, history: ProfileEntry[]): Promise<{ text: string; fallback: string | null }> {
  const bundle = await openDeviceBundle(device.bundleFolder, device.fs); // every file's hash checked first
  const [renderer, facts, drafter] = await Promise.all([
    devicePromptRenderer(bundle, device.fs),
    deviceModelFacts(bundle, device.fs),
    loadDeviceDrafter(bundle, device.fs, { executionProviders: ["xnnpack", "cpu"] }),
  ]);
  const prompt = taskPrompt(subject);
  const examples = fitContext(new ProfileIndex(history).retrieve(prompt, 3), 1800);
  // The egress guard of this user, as the Python client's default (placeholder, generic labels).
  const tokenizer = renderer.guardTokenizer();
  const guard = guardSetting(guardProfileOf(history), tokenizer, "placeholder")!;
  const { session, publicIds } = guardGeneration(guard, tokenizer, prompt);
  const log = AuditLog.open(device.logStorage, NoteSigner.parse(device.logKey), { device: device.identity });
  try {
    const g = await generate(
      drafter,
      renderer.renderPrompt(prompt, examples), // private: the history rides here, on the phone only
      publicIds, // what goes up: the prompt, its sensitive spans as placeholders
      { ...DEFAULT_PARAMS, paddedFrames: true }, // as the Python client: every round one size
      { guard: session, maxNewTokens: 128, eosIds: facts.eosIds, vocabSize: facts.vocabSize, width: facts.width, recorder: new EgressRecorder(log) },
      device.transport,
    );
    return { text: restorePrompt(session.prompt, renderer.decode(g.tokenIds)), fallback: g.stats.fallback };
  } finally {
    log.close();
  }
}

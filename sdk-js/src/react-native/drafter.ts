/**
 * The ONNX drafter on `onnxruntime-react-native`: its `InferenceSession` is onnxruntime-common's, the
 * API src/drafter.ts runs on, so the drafter is the Node one unchanged. Type-checked here against
 * the package's types (tsconfig.core.json, no Node types); not run: there is no phone on these
 * machines, and the package loads its native library through React Native.
 */
import { InferenceSession } from "onnxruntime-react-native";
import type { Bundle } from "../bundle.js";
import { decoderShape, OnnxDrafter } from "../drafter.js";
import type { DeviceFileModule } from "./files.js";

export interface DeviceDrafterOptions {
  /** Intra-op threads (0: the runtime's choice). */
  threads?: number;
  /** Execution providers in order of preference, e.g. ["xnnpack", "cpu"] or ["coreml", "cpu"]. */
  executionProviders?: InferenceSession.SessionOptions["executionProviders"];
}

/** The drafter of an opened bundle (`openDeviceBundle` first: that checks every file's hash). */
export async function loadDeviceDrafter(bundle: Bundle, fs: DeviceFileModule, options: DeviceDrafterOptions = {}): Promise<OnnxDrafter> {
  const shape = decoderShape(JSON.parse(await fs.readFile(`${bundle.where}/onnx/genai_config.json`, "utf8")));
  const session = await InferenceSession.create(`${bundle.where}/onnx/model.onnx`, {
    intraOpNumThreads: options.threads ?? 0,
    graphOptimizationLevel: "all",
    executionProviders: options.executionProviders ?? ["cpu"],
  });
  return new OnnxDrafter(session, shape);
}

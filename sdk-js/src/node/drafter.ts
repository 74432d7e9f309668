/** The ONNX drafter of a model bundle on `onnxruntime-node` (the CPU library its package carries). */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import ort from "onnxruntime-node";
import { decoderShape, OnnxDrafter } from "../drafter.js";

/** The drafter of a bundle folder (open it with `openBundleFolder` first: that checks the hashes). */
export async function loadOnnxDrafter(bundle: string, options: { threads?: number } = {}): Promise<OnnxDrafter> {
  const onnx = join(bundle, "onnx");
  const shape = decoderShape(JSON.parse(await readFile(join(onnx, "genai_config.json"), "utf8")));
  const session = await ort.InferenceSession.create(join(onnx, "model.onnx"), {
    intraOpNumThreads: options.threads ?? 0,
    graphOptimizationLevel: "all",
  });
  return new OnnxDrafter(session, shape);
}

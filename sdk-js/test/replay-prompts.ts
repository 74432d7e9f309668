/** The replayer of conformance/v1/prompts/render.json, on the default bundle's tokenizer and template. */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { defaultBundlePath, promptRendererOf } from "../src/node/bundle.js";
import { PromptRenderer } from "../src/prompt.js";
import type { Result } from "./replay-wire.js";
import type { Json } from "./vectors.js";

/** The renderer of the default bundle, its files checked against the hashes the vectors name. */
export async function defaultRenderer(model: Json): Promise<PromptRenderer> {
  const folder = defaultBundlePath(model.bundle, model.precision);
  for (const [name, digest] of Object.entries(model.files as Record<string, string>)) {
    let actual: string;
    try {
      actual = createHash("sha256").update(readFileSync(join(folder, name))).digest("hex");
    } catch {
      throw new Error(`prompts/render.json needs ${join(folder, name)}: build the default bundle (make install)`);
    }
    if (actual !== digest) throw new Error(`${join(folder, name)} is not the file the prompt vectors were written with`);
  }
  return promptRendererOf(folder);
}

export async function replayPrompts(doc: Json): Promise<Result[]> {
  const renderer = await defaultRenderer(doc.model);
  return doc.vectors.map((v: Json): Result => {
    const text = renderer.renderChat(PromptRenderer.messages(v.prompt, v.examples), true);
    const got = { text, token_ids: renderer.renderPrompt(v.prompt, v.examples), public_ids: renderer.publicPromptIds(v.prompt) };
    const ok = JSON.stringify(got) === JSON.stringify(v.expected);
    return [v.name, ok, ok ? "" : JSON.stringify(got).slice(0, 400)];
  });
}

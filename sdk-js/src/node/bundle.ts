/** A model bundle folder on Node's file system (`BundleFiles`), and where `sdk models build` puts the default one. */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { lstat, open, readdir, readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { isAbsolute, join, relative, sep } from "node:path";
import { BUNDLE_MANIFEST, openBundle, type Bundle, type BundleEntry, type BundleFiles } from "../bundle.js";
import { modelFacts, type ModelFacts } from "../model_facts.js";
import { PromptRenderer } from "../prompt.js";

async function walk(root: string, dir: string, out: BundleEntry[]): Promise<void> {
  for (const name of await readdir(dir)) {
    const path = join(dir, name);
    const st = await lstat(path); // a link is reported, never followed: the hashes must cover what is read
    const rel = relative(root, path).split(sep).join("/");
    if (st.isDirectory()) {
      out.push({ path: rel, kind: "dir" });
      await walk(root, path, out);
    } else out.push({ path: rel, kind: st.isFile() ? "file" : "other" });
  }
}

export function bundleFolder(folder: string): BundleFiles {
  return {
    where: folder,
    list: async () => {
      const out: BundleEntry[] = [];
      await walk(folder, folder, out);
      return out;
    },
    readManifest: async (cap) => {
      const path = join(folder, BUNDLE_MANIFEST);
      const st = await lstat(path).catch(() => null);
      if (st === null) return null;
      const handle = await open(path, "r");
      try {
        const buf = new Uint8Array(cap + 1);
        const { bytesRead } = await handle.read(buf, 0, cap + 1, 0);
        return buf.subarray(0, bytesRead);
      } finally {
        await handle.close();
      }
    },
    sha256: (path) =>
      new Promise((resolve, reject) => {
        // Streamed through Node's native SHA-256: the int4 weights are hundreds of megabytes.
        const hash = createHash("sha256");
        createReadStream(join(folder, path))
          .on("data", (chunk) => hash.update(chunk))
          .on("error", reject)
          .on("end", () => resolve(hash.digest("hex")));
      }),
  };
}

/** `$SPECSTEER_CACHE`, else `$XDG_CACHE_HOME/specsteer` (if absolute), else `~/.cache/specsteer` (core/gguf_cache.py). */
export function cacheRoot(env: Record<string, string | undefined> = process.env): string {
  if (env.SPECSTEER_CACHE) return env.SPECSTEER_CACHE.replace(/^~(?=$|\/)/, homedir());
  const xdg = env.XDG_CACHE_HOME;
  if (xdg && isAbsolute(xdg)) return join(xdg, "specsteer");
  return join(homedir(), ".cache", "specsteer");
}

/** Where `sdk models build` writes an embedded model's bundle (sdk/bundles.py, default_bundle_path). */
export function defaultBundlePath(name: string, precision = "int4", env: Record<string, string | undefined> = process.env): string {
  const stem = name.replace(/[^A-Za-z0-9._+-]/g, "_") || "model";
  return join(cacheRoot(env), "bundles", `${stem}-${precision}`);
}

export function openBundleFolder(folder: string): Promise<Bundle> {
  return openBundle(bundleFolder(folder));
}

async function readJson(folder: string, name: string): Promise<Record<string, unknown>> {
  return JSON.parse(await readFile(join(folder, name), "utf8")) as Record<string, unknown>;
}

/** The prompt renderer of a bundle folder (open it with `openBundleFolder` first: that checks the hashes). */
export async function promptRendererOf(folder: string): Promise<PromptRenderer> {
  const template = await readFile(join(folder, "chat_template.jinja"), "utf8").catch(() => null);
  const config = await readJson(folder, "tokenizer_config.json").catch(() => ({}));
  return new PromptRenderer({ tokenizerJson: await readJson(folder, "tokenizer.json"), tokenizerConfig: config, chatTemplate: template });
}

/** The end-of-sequence IDs, vocabulary rows and width of a bundle folder (open it with `openBundleFolder` first). */
export async function modelFactsOf(folder: string): Promise<ModelFacts> {
  const generationConfig = await readJson(folder, "generation_config.json").catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") return null;
    throw err;
  });
  return modelFacts({
    config: await readJson(folder, "config.json"),
    tokenizerConfig: await readJson(folder, "tokenizer_config.json").catch(() => ({})),
    tokenizer: await readJson(folder, "tokenizer.json"),
    generationConfig,
  });
}

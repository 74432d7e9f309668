/**
 * The model bundle the Python side builds (`sdk models build`, core/bundle.py): a folder with
 * `specsteer-bundle.json` listing every file's SHA-256 and the base model's identity. A bundle
 * opens only if it is exactly what was built: every listed file present with its hash, no
 * unlisted file, no link or other non-regular entry, the required files listed, the format known.
 * The files are reached through `BundleFiles` (Node fs in src/node/; an app's asset store on a phone).
 */

export const BUNDLE_FORMAT = 1;
export const BUNDLE_MANIFEST = "specsteer-bundle.json";
const REQUIRED = ["config.json", "tokenizer.json", "onnx/genai_config.json"];
const MANIFEST_CAP = 1 << 20;

/** A bundle refused, in one sentence (fail closed: nothing of it is loaded). */
export class BundleError extends Error {
  override name = "BundleError";
}

export interface BundleEntry {
  /** The path relative to the bundle folder, with "/" separators. */
  path: string;
  kind: "file" | "dir" | "other";
}

/** The files of one bundle folder, read-only. */
export interface BundleFiles {
  /** Where the bundle is, for messages. */
  readonly where: string;
  /** Every entry under the folder, at any depth, links reported as "other" (never followed). */
  list(): Promise<BundleEntry[]>;
  /** The manifest's bytes (at most `cap` + 1 of them), or null when it does not exist. */
  readManifest(cap: number): Promise<Uint8Array | null>;
  /** The hex SHA-256 of a listed regular file. */
  sha256(path: string): Promise<string>;
}

export interface Bundle {
  where: string;
  name: string;
  precision: string;
  base: Record<string, unknown>;
  adapter: Record<string, unknown> | null;
  files: Record<string, string>;
}

function isRecord(x: unknown): x is Record<string, unknown> {
  return x !== null && typeof x === "object" && !Array.isArray(x);
}

function readManifestJson(raw: Uint8Array | null, where: string): Record<string, unknown> {
  if (raw === null) throw new BundleError(`${where} is no model bundle: it has no ${BUNDLE_MANIFEST}.`);
  if (raw.length > MANIFEST_CAP) throw new BundleError(`${where}/${BUNDLE_MANIFEST} is larger than a bundle manifest can be.`);
  let manifest: unknown;
  try {
    manifest = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(raw));
  } catch (err) {
    throw new BundleError(`cannot read the bundle manifest ${where}/${BUNDLE_MANIFEST}: ${(err as Error).message}.`);
  }
  if (!isRecord(manifest) || manifest.format !== BUNDLE_FORMAT) {
    const found = isRecord(manifest) ? JSON.stringify(manifest.format ?? null) : "null";
    throw new BundleError(`${where}/${BUNDLE_MANIFEST} is bundle format ${found}; this SDK reads format ${BUNDLE_FORMAT}.`);
  }
  const files = manifest.files;
  if (!isRecord(files) || !Object.values(files).every((v) => typeof v === "string" && /^[0-9a-f]{64}$/.test(v))) {
    throw new BundleError(`${where}/${BUNDLE_MANIFEST} does not list its files as path: sha256.`);
  }
  for (const key of ["name", "precision"]) {
    if (typeof manifest[key] !== "string" || manifest[key] === "") throw new BundleError(`${where}/${BUNDLE_MANIFEST} names no ${key}.`);
  }
  if (!isRecord(manifest.base) || !(manifest.adapter === null || isRecord(manifest.adapter))) {
    throw new BundleError(`${where}/${BUNDLE_MANIFEST} does not state the base model's identity.`);
  }
  return manifest;
}

/** The bundle behind `files`, every file checked against its manifest (`BundleError` otherwise). */
export async function openBundle(files: BundleFiles): Promise<Bundle> {
  const where = files.where;
  const manifest = readManifestJson(await files.readManifest(MANIFEST_CAP), where);
  const listed = manifest.files as Record<string, string>;
  const entries = await files.list();
  const odd = entries.find((e) => e.kind === "other");
  if (odd !== undefined) throw new BundleError(`the model bundle ${where} holds ${odd.path}, which is not a regular file.`);
  const present = new Set(entries.filter((e) => e.kind === "file" && e.path !== BUNDLE_MANIFEST).map((e) => e.path));
  const extra = [...present].filter((p) => !(p in listed)).sort();
  if (extra.length > 0) throw new BundleError(`the model bundle ${where} holds ${extra[0]}, which its manifest does not list.`);
  for (const required of REQUIRED) {
    if (!(required in listed)) throw new BundleError(`the model bundle ${where} has no ${required}.`);
  }
  for (const [path, digest] of Object.entries(listed).sort(([a], [b]) => (a < b ? -1 : 1))) {
    if (!present.has(path)) throw new BundleError(`the model bundle ${where} is missing ${path}.`);
    const actual = await files.sha256(path);
    if (actual !== digest) {
      throw new BundleError(
        `${path} in the model bundle ${where} is not the file the bundle was built with ` +
          `(sha256 ${actual.slice(0, 16)}..., manifest ${digest.slice(0, 16)}...).`,
      );
    }
  }
  return {
    where,
    name: manifest.name as string,
    precision: manifest.precision as string,
    base: manifest.base as Record<string, unknown>,
    adapter: manifest.adapter as Record<string, unknown> | null,
    files: listed,
  };
}

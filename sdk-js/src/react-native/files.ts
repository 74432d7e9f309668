/**
 * A model bundle on a phone, read through the app's file module. `DeviceFileModule` is the part of
 * react-native-fs's API the device needs (`readDir`, `readFile(path, "utf8")`, `hash(path,
 * "sha256")`): an app passes that module as it is, or wraps expo-file-system or its own native
 * module to the same four calls. No import of React Native here, so Node's tests run this file.
 */
import { BUNDLE_MANIFEST, openBundle, type Bundle, type BundleEntry, type BundleFiles } from "../bundle.js";
import { utf8 } from "../bytes.js";
import { modelFacts, type ModelFacts } from "../model_facts.js";
import { PromptRenderer } from "../prompt.js";

/** One entry of a folder listing, as react-native-fs's `ReadDirItem` has it. */
export interface DeviceDirItem {
  name: string;
  path: string;
  isFile(): boolean;
  isDirectory(): boolean;
}

/** What the device needs of the app's file module (react-native-fs's signatures). */
export interface DeviceFileModule {
  readDir(path: string): Promise<DeviceDirItem[]>;
  readFile(path: string, encoding: "utf8"): Promise<string>;
  /** Hashed natively: the int4 graph is hundreds of megabytes and never passes through JavaScript. */
  hash(path: string, algorithm: "sha256"): Promise<string>;
  exists(path: string): Promise<boolean>;
}

async function walk(fs: DeviceFileModule, root: string, rel: string, out: BundleEntry[]): Promise<void> {
  for (const item of await fs.readDir(rel === "" ? root : `${root}/${rel}`)) {
    const path = rel === "" ? item.name : `${rel}/${item.name}`;
    if (item.isDirectory()) {
      out.push({ path, kind: "dir" });
      await walk(fs, root, path, out);
    } else out.push({ path, kind: item.isFile() ? "file" : "other" });
  }
}

/** The bundle folder `folder` (an absolute path in the app's storage) as `BundleFiles`. */
export function deviceBundleFiles(folder: string, fs: DeviceFileModule): BundleFiles {
  const root = folder.replace(/\/+$/, "");
  return {
    where: root,
    list: async () => {
      const out: BundleEntry[] = [];
      await walk(fs, root, "", out);
      return out;
    },
    readManifest: async (cap) => {
      const path = `${root}/${BUNDLE_MANIFEST}`;
      if (!(await fs.exists(path))) return null;
      return utf8.encode(await fs.readFile(path, "utf8")).subarray(0, cap + 1);
    },
    sha256: async (path) => (await fs.hash(`${root}/${path}`, "sha256")).toLowerCase(),
  };
}

/** The text of a file the bundle's manifest lists, or null when it lists none of that name. */
async function readListed(bundle: Bundle, fs: DeviceFileModule, name: string): Promise<string | null> {
  return name in bundle.files ? fs.readFile(`${bundle.where}/${name}`, "utf8") : null;
}

async function readJson(bundle: Bundle, fs: DeviceFileModule, name: string): Promise<unknown> {
  const text = await readListed(bundle, fs, name);
  return text === null ? null : JSON.parse(text);
}

/** The bundle at `folder`, every file checked against its manifest (`BundleError` otherwise). */
export function openDeviceBundle(folder: string, fs: DeviceFileModule): Promise<Bundle> {
  return openBundle(deviceBundleFiles(folder, fs));
}

/** The prompt renderer of an opened bundle (`openDeviceBundle` first: that checks the hashes). */
export async function devicePromptRenderer(bundle: Bundle, fs: DeviceFileModule): Promise<PromptRenderer> {
  return new PromptRenderer({
    tokenizerJson: (await readJson(bundle, fs, "tokenizer.json")) as object, // a required file of every bundle
    tokenizerConfig: ((await readJson(bundle, fs, "tokenizer_config.json")) ?? {}) as Record<string, unknown>,
    chatTemplate: await readListed(bundle, fs, "chat_template.jinja"),
  });
}

/** The end-of-sequence IDs, vocabulary rows and width of an opened bundle (`openDeviceBundle` first). */
export async function deviceModelFacts(bundle: Bundle, fs: DeviceFileModule): Promise<ModelFacts> {
  return modelFacts({
    config: await readJson(bundle, fs, "config.json"),
    tokenizerConfig: (await readJson(bundle, fs, "tokenizer_config.json")) ?? {},
    tokenizer: await readJson(bundle, fs, "tokenizer.json"),
    generationConfig: await readJson(bundle, fs, "generation_config.json"),
  });
}

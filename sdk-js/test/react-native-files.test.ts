/**
 * The React Native adapter's bundle reader (src/react-native/files.ts) over a module with
 * react-native-fs's four calls, here on Node's fs: the Python-built tiny bundle opens as
 * `openBundleFolder` opens it, a changed file and a link are refused, and the prompt renderer reads
 * the same token IDs. (The drafter half, on onnxruntime-react-native, is type-checked only.)
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { cpSync, createReadStream, existsSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { access, lstat, readdir, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { BundleError } from "../src/bundle.js";
import { defaultBundlePath, modelFactsOf, openBundleFolder, promptRendererOf } from "../src/node/bundle.js";
import { deviceModelFacts, devicePromptRenderer, openDeviceBundle, type DeviceFileModule } from "../src/react-native/files.js";

const FIXTURE = fileURLToPath(new URL("../../test/fixtures/tiny-bundle", import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), "specsteer-rn-bundle-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

/** react-native-fs's readDir, readFile, hash and exists, on Node (a link is neither file nor folder, as lstat says). */
const nodeAsPhone: DeviceFileModule = {
  readDir: async (path) =>
    Promise.all(
      (await readdir(path)).map(async (name) => {
        const st = await lstat(join(path, name));
        return { name, path: join(path, name), isFile: () => st.isFile(), isDirectory: () => st.isDirectory() };
      }),
    ),
  readFile: (path) => readFile(path, "utf8"),
  hash: (path) =>
    new Promise((resolve, reject) => {
      const hash = createHash("sha256"); // upper case, as some native modules give it
      createReadStream(path)
        .on("data", (chunk) => hash.update(chunk))
        .on("error", reject)
        .on("end", () => resolve(hash.digest("hex").toUpperCase()));
    }),
  exists: (path) =>
    access(path).then(
      () => true,
      () => false,
    ),
};

function copy(name: string): string {
  const dir = join(scratch, name);
  cpSync(FIXTURE, dir, { recursive: true });
  return dir;
}

async function sameAsOnNode(dir: string): Promise<void> {
  const onPhone = await openDeviceBundle(dir, nodeAsPhone);
  const onNode = await openBundleFolder(dir);
  assert.deepEqual({ ...onPhone, where: "" }, { ...onNode, where: "" });
}

test("a bundle read through the app's file module opens as the Node reader opens it", async () => {
  await sameAsOnNode(copy("same"));
});

// `make install` builds the default bundle (so CI has it); the tiny fixture's tokenizer renders nothing.
const DEFAULT = defaultBundlePath("qwen2.5-coder-0.5b-instruct");
test("the default bundle through the app's file module: the same files, model facts and prompt token IDs", { skip: !existsSync(DEFAULT) && "no default bundle (make install builds it)" }, async () => {
  await sameAsOnNode(DEFAULT);
  const prompt = "Write the commit body.";
  const onPhone = await openDeviceBundle(DEFAULT, nodeAsPhone);
  assert.deepEqual(await deviceModelFacts(onPhone, nodeAsPhone), await modelFactsOf(DEFAULT));
  const phoneRenderer = await devicePromptRenderer(onPhone, nodeAsPhone);
  const nodeRenderer = await promptRendererOf(DEFAULT);
  const examples = [{ subject: "Fix the build", body: "The build broke on a missing header." }];
  assert.deepEqual(phoneRenderer.renderPrompt(prompt, examples), nodeRenderer.renderPrompt(prompt, examples));
  assert.deepEqual(phoneRenderer.publicPromptIds(prompt), nodeRenderer.publicPromptIds(prompt));
  assert.ok(phoneRenderer.renderPrompt(prompt).length > 5);
});

test("through the app's file module, a changed file, an unlisted file and a link are refused", async () => {
  const cases: [string, (dir: string) => void, RegExp][] = [
    ["changed", (dir) => writeFileSync(join(dir, "tokenizer.json"), '{"swapped": true}\n'), /tokenizer\.json .* is not the file the bundle was built with/],
    ["unlisted", (dir) => writeFileSync(join(dir, "onnx", "extra.onnx"), "\0"), /holds onnx\/extra\.onnx, which its manifest does not list/],
    ["link", (dir) => symlinkSync(join(dir, "config.json"), join(dir, "notes.txt")), /holds notes\.txt, which is not a regular file/],
    ["no-manifest", (dir) => rmSync(join(dir, "specsteer-bundle.json")), /specsteer-bundle\.json/],
  ];
  for (const [name, damage, message] of cases) {
    const dir = copy(name);
    damage(dir);
    await assert.rejects(openDeviceBundle(dir, nodeAsPhone), (err: unknown) => {
      assert.ok(err instanceof BundleError, `${name}: ${String(err)}`);
      assert.match(err.message, message, name);
      return true;
    });
  }
});

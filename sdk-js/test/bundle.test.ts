/**
 * The model bundle as the Python device refuses it (core/bundle.py): the committed tiny fixture was
 * written by the Python `write_bundle` (tests/test_sdk_js_bundle_fixture.py holds it to that), and
 * each tampered copy is refused with its sentence. The default bundle `make install` builds is
 * opened too, where this machine has it.
 */
import assert from "node:assert/strict";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { BundleError } from "../src/bundle.js";
import { defaultBundlePath, openBundleFolder } from "../src/node/bundle.js";

const FIXTURE = fileURLToPath(new URL("../../test/fixtures/tiny-bundle/", import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), "specsteer-bundle-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

let copies = 0;
function copy(): string {
  const dir = join(scratch, `b${copies++}`);
  cpSync(FIXTURE, dir, { recursive: true });
  return dir;
}

function editManifest(dir: string, edit: (m: Record<string, unknown>) => void): void {
  const path = join(dir, "specsteer-bundle.json");
  const manifest = JSON.parse(readFileSync(path, "utf8"));
  edit(manifest);
  writeFileSync(path, JSON.stringify(manifest));
}

async function refused(dir: string, pattern: RegExp): Promise<void> {
  await assert.rejects(openBundleFolder(dir), (err: unknown) => {
    assert.ok(err instanceof BundleError, String(err));
    assert.match(err.message, pattern);
    return true;
  });
}

test("the Python-built tiny bundle opens, every file hashed against its manifest", async () => {
  const bundle = await openBundleFolder(copy());
  assert.equal(bundle.name, "tiny-fixture");
  assert.equal(bundle.precision, "int4");
  assert.equal(bundle.adapter, null);
  assert.deepEqual(Object.keys(bundle.files).sort(), [
    "config.json",
    "onnx/genai_config.json",
    "onnx/model.onnx",
    "tokenizer.json",
    "tokenizer_config.json",
  ]);
});

test("a changed file is refused", async () => {
  const dir = copy();
  writeFileSync(join(dir, "tokenizer.json"), '{"swapped": true}\n');
  await refused(dir, /tokenizer\.json in the model bundle .* is not the file the bundle was built with/);
});

test("a missing listed file is refused", async () => {
  const dir = copy();
  unlinkSync(join(dir, "onnx", "model.onnx"));
  await refused(dir, /is missing onnx\/model\.onnx\.$/);
});

test("an unlisted file is refused", async () => {
  const dir = copy();
  writeFileSync(join(dir, "onnx", "extra.onnx"), "another graph");
  await refused(dir, /holds onnx\/extra\.onnx, which its manifest does not list/);
});

test("a link is refused, even to a listed file's own bytes", async () => {
  const dir = copy();
  unlinkSync(join(dir, "config.json"));
  symlinkSync(join(FIXTURE, "config.json"), join(dir, "config.json"));
  await refused(dir, /holds config\.json, which is not a regular file/);
});

test("another bundle format, no manifest, or a required file unlisted is refused", async () => {
  const other = copy();
  editManifest(other, (m) => (m.format = 2));
  await refused(other, /is bundle format 2; this SDK reads format 1/);
  const none = copy();
  unlinkSync(join(none, "specsteer-bundle.json"));
  await refused(none, /is no model bundle: it has no specsteer-bundle\.json/);
  const required = copy();
  unlinkSync(join(required, "config.json"));
  editManifest(required, (m) => delete (m.files as Record<string, string>)["config.json"]);
  await refused(required, /has no config\.json\./);
});

const DEFAULT = defaultBundlePath("qwen2.5-coder-0.5b-instruct");
test(`the default Specialist's bundle (${DEFAULT}) opens`, { skip: existsSync(DEFAULT) ? false : "not built on this machine (make install builds it)" }, async () => {
  const bundle = await openBundleFolder(DEFAULT);
  assert.equal(bundle.name, "qwen2.5-coder-0.5b-instruct");
  assert.ok("onnx/model.onnx.data" in bundle.files);
});

/**
 * The onnxruntime-node drafter drafts the Python ONNX drafter's greedy tokens on the default bundle
 * (test/fixtures/greedy-drafts.json, which tests/test_sdk_js_drafts.py recomputes in Python).
 * Slow (the 400 MB int4 graph loads and prefills): `make test-slow` runs it (`npm run test:slow`).
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { defaultBundlePath, openBundleFolder } from "../src/node/bundle.js";
import { loadOnnxDrafter } from "../src/node/drafter.js";

const doc = JSON.parse(readFileSync(fileURLToPath(new URL("../../test/fixtures/greedy-drafts.json", import.meta.url)), "utf8"));

test("greedy drafts equal the Python ONNX drafter's on the default bundle", async () => {
  const folder = defaultBundlePath(doc.bundle, doc.precision);
  const bundle = await openBundleFolder(folder); // every file hashed: the graph is the one the drafts came from
  for (const [name, digest] of Object.entries(doc.files)) assert.equal(bundle.files[name], digest, `${name} differs`);
  const drafter = await loadOnnxDrafter(folder, { threads: 2 });
  for (const c of doc.drafts) {
    const drafted = await drafter.sequence(c.prefix_ids).greedy(c.draft_ids.length);
    assert.deepEqual(drafted, c.draft_ids, `${c.prompt}: drafted ${drafted.join(",")}`);
  }
});

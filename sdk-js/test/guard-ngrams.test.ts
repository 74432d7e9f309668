/**
 * The guard's tokenizer (src/guard/tokenizer.ts) and verbatim n-gram detectors (src/guard/ngrams.ts).
 * Every expected value was taken from the Python SDK's output (privacy/ngrams.py over the default
 * bundle's tokenizer, `tokenizers.Tokenizer` of core/device_lm.py), its code-point offsets
 * converted to UTF-16 indices.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import test from "node:test";
import { Tokenizer as HfBackend } from "@huggingface/tokenizers";
import { isCodeName, namesCodeOnly, proseWords, RewrittenVerbatimDetector, runWords, VerbatimNgramDetector } from "../src/guard/ngrams.js";
import { decode, type Span } from "../src/guard/spans.js";
import { HfTokenizer } from "../src/guard/tokenizer.js";
import { defaultBundlePath } from "../src/node/bundle.js";
import { CONFORMANCE } from "./vectors.js";

const BUNDLE = defaultBundlePath("qwen2.5-coder-0.5b-instruct");
const skip = !existsSync(join(BUNDLE, "tokenizer.json")) && "no default bundle (make install builds it)";
const read = (name: string): object => JSON.parse(readFileSync(join(BUNDLE, name), "utf8")) as object;
let loaded: HfTokenizer | null = null;
const tokenizer = (): HfTokenizer => (loaded ??= new HfTokenizer(read("tokenizer.json"), read("tokenizer_config.json")));

test("words, names of code and function words, as privacy/ngrams.py counts them", () => {
  assert.equal(runWords("lives under my desk"), 4);
  assert.equal(runWords("給与の書類"), 5);
  assert.equal(runWords(", 2018-07-13"), 0);
  assert.equal(runWords("/check-non-portable-shell"), 1);
  assert.equal(proseWords("between `files_ref_store` and `packed_ref_store` is"), 0);
  assert.equal(proseWords("it is in the box"), 5);
  assert.ok(namesCodeOnly("the `packed_ref_store` is"));
  assert.ok(!namesCodeOnly("lives under my desk"));
  for (const name of ["strlen(prefix)", "a::b", "refIterator", "`word`,", "commit_stack_push()"]) assert.ok(isCodeName(name), name);
  for (const word of ["jane.doe", "McDonald", "Homebrew-installed"]) assert.ok(!isCodeName(word), word);
});

test("the tokenizer: IDs, offsets of byte-level tokens (split characters, spaces, added tokens), decoding", { skip }, () => {
  const tok = tokenizer();
  assert.equal(tok.size, 151936);
  const text = "héllo 😀 wörld 中文字符 \n\n x<tool_call>y<|im_end|>";
  const { ids, offsets } = tok.encodeWithOffsets(text);
  assert.deepEqual(ids, [71, 18503, 385, 90316, 289, 9416, 507, 72858, 16744, 48391, 4710, 856, 151657, 88, 151645]);
  assert.deepEqual(ids, tok.encode(text));
  assert.deepEqual(offsets, [[0, 1], [1, 3], [3, 5], [5, 8], [8, 10], [10, 12], [12, 14], [14, 16], [16, 17], [17, 19], [19, 22], [22, 24], [24, 35], [35, 36], [36, 46]]);
  // Three tokens of one character's four bytes: each covers the whole character.
  assert.deepEqual(tok.encodeWithOffsets("a𪚥b"), { ids: [64, 100130, 248, 98, 65], offsets: [[0, 1], [1, 3], [1, 3], [1, 3], [3, 4]] });
  assert.equal(decode(tok, ids), "héllo 😀 wörld 中文字符 \n\n x<tool_call>y"); // special tokens skipped
  assert.equal(decode(tok, [100130]), "\ufffd");
  assert.equal(decode(tok, [151645, 151657]), "<tool_call>");
  // Built on a tokenizer already loaded, the same.
  assert.deepEqual(new HfTokenizer(new HfBackend(read("tokenizer.json"), read("tokenizer_config.json"))).encode(text), ids);
});

test("verbatim runs of the history, on IDs and text; hazards at the start of one; rewritten copies", { skip }, () => {
  const tok = tokenizer();
  const conformance = JSON.parse(readFileSync(join(CONFORMANCE, "guard", "spans.json"), "utf8")) as {
    profiles: Record<string, { history: string[] }>;
  };
  const history = conformance.profiles["fixture-u0"]!.history;
  const verbatim = VerbatimNgramDetector.fromTexts(history, tok).forPrompt("Write the commit body.");
  const rewritten = RewrittenVerbatimDetector.fromTexts(history, tok).forPrompt("Write the commit body.");
  assert.deepEqual([verbatim.size, rewritten.size], [464, 433]);
  const at = (s: Span | null): [number, number] | null => (s === null ? null : [s.start, s.end]);
  const cases: [string, [number, number][], [number, number] | null, [number, number][], [number, number][], [number, number] | null][] = [
    // text, find, hazard, findIds, rewritten find, rewritten hazard
    ["As I wrote before: On macOS we opportunistically use Homebrew-installed versions of and so on.", [[18, 83]], null, [[5, 18]], [[18, 83]], null],
    ["🎉 make variables to disable Homebrew usage (NO_HOMEBREW) and to allow", [[7, 70]], [49, 70], [[2, 18]], [[2, 70]], [45, 70]],
    ["Note: On macOS we opportunistically use", [], [5, 39], [], [], [8, 39]],
    ["ON MACOS WE OPPORTUNISTICALLY USE HOMEBREW-INSTALLED VERSIONS OF", [], null, [], [[0, 64]], [29, 64]],
    ["On  macOS  we  opportunistically  use  Homebrew-installed  versions", [], null, [], [[0, 67]], [26, 67]],
    ["Calling commit_stack_push() to add commits is simpler", [[0, 53]], [20, 53], [[0, 10]], [[0, 53]], [20, 53]],
    ["We opportunistically use Homebrew here.", [], null, [], [], null],
    ["Write the commit body.", [], null, [], [], null],
    ["", [], null, [], [], null],
  ];
  for (const [text, find, hazard, runs, rewrittenFind, rewrittenHazard] of cases) {
    assert.deepEqual(verbatim.find(text).map(at), find, text);
    assert.deepEqual(at(verbatim.hazard(text)), hazard, text);
    assert.deepEqual(verbatim.findIds(tok.encode(text)), runs, text);
    assert.deepEqual(rewritten.find(text).map(at), rewrittenFind, text);
    assert.deepEqual(at(rewritten.hazard(text)), rewrittenHazard, text);
  }
  assert.ok(verbatim.find(cases[0]![0]).every((s) => s.kind === "private-ngram"));
});

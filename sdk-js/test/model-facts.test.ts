/**
 * The model facts of a bundle (src/model_facts.ts) as core/device_lm.py and sdk/decoding.py's
 * `vocabulary_width` read them; the default bundle's are held to the Python device's in live.slow.ts.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { BundleError } from "../src/bundle.js";
import { modelFacts } from "../src/model_facts.js";

const tokenizer = {
  model: { vocab: { a: 0, b: 1, c: 2, "</s>": 3 } },
  added_tokens: [
    { id: 4, content: "<|end|>" },
    { id: 5, content: "<|pad|>" },
  ],
};

test("end-of-sequence IDs: the tokenizer's eos token and the generation config's, config.json's when there is none", () => {
  const facts = modelFacts({ config: { vocab_size: 8, eos_token_id: 1 }, tokenizerConfig: { eos_token: "<|end|>" }, tokenizer, generationConfig: { eos_token_id: [3, 4] } });
  assert.deepEqual([...facts.eosIds].sort(), [3, 4]); // config.json's 1 is not read when a generation config exists
  const noGeneration = modelFacts({ config: { vocab_size: 8, eos_token_id: 1 }, tokenizerConfig: { eos_token: { content: "</s>" } }, tokenizer, generationConfig: null });
  assert.deepEqual([...noGeneration.eosIds].sort(), [1, 3]);
  const unknownToken = modelFacts({ config: { vocab_size: 8 }, tokenizerConfig: { eos_token: "<eos>" }, tokenizer, generationConfig: {} });
  assert.deepEqual([...unknownToken.eosIds], []);
});

test("the width is the tokenizer's vocabulary with its added tokens, at most the table's rows", () => {
  const padded = modelFacts({ config: { vocab_size: 8 }, tokenizerConfig: {}, tokenizer, generationConfig: null });
  assert.deepEqual([padded.vocabSize, padded.width], [8, 6]); // rows 6 and 7 are no tokens
  const nested = modelFacts({ config: { text_config: { vocab_size: 5 } }, tokenizerConfig: {}, tokenizer, generationConfig: null });
  assert.deepEqual([nested.vocabSize, nested.width], [5, 5]);
  assert.throws(() => modelFacts({ config: {}, tokenizerConfig: {}, tokenizer, generationConfig: null }), (err: unknown) => err instanceof BundleError && /states no vocab_size/.test(err.message));
});

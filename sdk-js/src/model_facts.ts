/**
 * What the session loop needs of the model beyond its weights, read from a bundle's files as the
 * Python device reads them: the end-of-sequence IDs and the table's rows (core/device_lm.py's
 * `eos_ids`, `vocab_size`) and the columns that are tokens (sdk/decoding.py's `vocabulary_width`).
 * Pure: the platform adapters read the files (`modelFactsOf` on Node, `deviceModelFacts` on a phone).
 */
import { BundleError } from "./bundle.js";

export interface ModelFacts {
  /** The tokenizer's end-of-sequence token and the generation config's (config.json's when the bundle has none). */
  eosIds: Set<number>;
  /** Rows of the model's table (`vocab_size`): downlink token IDs are bounded by it. */
  vocabSize: number;
  /** The rows that are tokens: the tokenizer's vocabulary with its added tokens, at most `vocabSize`. */
  width: number;
}

/** The parsed JSON of a bundle's files; `generationConfig` null where the bundle has none. */
export interface ModelFactsFiles {
  config: unknown;
  tokenizerConfig: unknown;
  tokenizer: unknown;
  generationConfig: unknown;
}

const record = (x: unknown): Record<string, unknown> => (x !== null && typeof x === "object" && !Array.isArray(x) ? (x as Record<string, unknown>) : {});

/** A special token as tokenizer_config.json states it: a string or an AddedToken's object. */
function tokenText(value: unknown): string | null {
  if (typeof value === "string") return value;
  const content = record(value).content;
  return typeof content === "string" ? content : null;
}

export function modelFacts(files: ModelFactsFiles): ModelFacts {
  const config = record(files.config);
  const vocabSize = config.vocab_size ?? record(config.text_config).vocab_size;
  if (!Number.isInteger(vocabSize) || (vocabSize as number) < 1) throw new BundleError("the model's config.json states no vocab_size.");
  const tokenizer = record(files.tokenizer);
  const vocab = record(record(tokenizer.model).vocab);
  const added = Array.isArray(tokenizer.added_tokens) ? tokenizer.added_tokens.map(record) : [];
  // `Tokenizer.token_to_id`: an added token's content first, then the model's vocabulary.
  const ids = new Map<string, number>(Object.entries(vocab).filter((e): e is [string, number] => Number.isInteger(e[1])));
  for (const t of added) if (typeof t.content === "string" && Number.isInteger(t.id)) ids.set(t.content, t.id as number);
  const eosIds = new Set<number>();
  const eosToken = tokenText(record(files.tokenizerConfig).eos_token);
  const eosId = eosToken === null ? undefined : ids.get(eosToken);
  if (eosId !== undefined) eosIds.add(eosId);
  const value = (files.generationConfig === null ? config : record(files.generationConfig)).eos_token_id;
  for (const id of Array.isArray(value) ? value : [value]) if (Number.isInteger(id)) eosIds.add(id as number);
  const width = Math.min(new Set(ids.values()).size, vocabSize as number);
  return { eosIds, vocabSize: vocabSize as number, width };
}

/**
 * What every egress-guard detector shares (privacy/spans.py): the kinds of span, `Span`, the
 * `Detector` interface, the slice of a tokenizer the guard uses, and how overlapping spans merge.
 */

export const EMAIL = "email";
export const PHONE = "phone";
export const CARD = "card";
export const IP = "ip";
export const URL_CREDENTIALS = "url-credentials";
export const IBAN = "iban";
export const PRIVATE_NGRAM = "private-ngram";
export const CANARY = "canary";
export const NAME = "name";
export const ADDRESS = "address";
/** A key, token or password: a vendor pattern, a keyword's value, a random word, the history's. */
export const SECRET = "secret";
export const NATIONAL_ID = "national-id";
/** GDPR Art. 9 data: health, sexual life, religion, political opinion, ethnicity, union. */
export const SPECIAL_CATEGORY = "special-category";

/** Every kind, the most specific first: overlapping spans merge under the most specific one. */
export const KINDS: readonly string[] = [
  CANARY,
  CARD,
  IBAN,
  NATIONAL_ID,
  URL_CREDENTIALS,
  SECRET,
  EMAIL,
  PHONE,
  IP,
  ADDRESS,
  SPECIAL_CATEGORY,
  NAME,
  PRIVATE_NGRAM,
];

/** A sensitive span `[start, end)` in UTF-16 indices of the inspected text. */
export class Span {
  constructor(
    readonly start: number,
    readonly end: number,
    readonly kind: string,
  ) {
    if (!(0 <= start && start <= end)) {
      throw new RangeError(`a span needs 0 <= start <= end; got [${start}, ${end})`);
    }
  }
}

/** Python's ordering of `Span` (a frozen, ordered dataclass): start, then end, then kind. */
export function compareSpans(a: Span, b: Span): number {
  return a.start - b.start || a.end - b.end || (a.kind < b.kind ? -1 : a.kind > b.kind ? 1 : 0);
}

/** The slice of the Specialist's tokenizer the guard uses. */
export interface Tokenizer {
  /** Token IDs of `text`, no special tokens added. */
  encode(text: string): number[];
  /** The text of `ids` as the device shows it (special tokens skipped). */
  decode(ids: readonly number[]): string;
  /** Token IDs of `text` with each token's `[start, end)` in UTF-16 indices of `text`
   * (a Hugging Face fast tokenizer's `return_offsets_mapping`). */
  encodeWithOffsets(text: string): { ids: number[]; offsets: [number, number][] };
  /** How many IDs the vocabulary has, added tokens included. */
  readonly size: number;
}

/** A detector: `find` complete spans; `hazard` the start of a possible span at the text's end. */
export interface Detector {
  find(text: string): Span[];
  /** The earliest span `[start, text.length)` that more text could turn into a complete match. */
  hazard(text: string): Span | null;
  /** This detector for one session with `prompt` as the public prompt (default: itself). */
  forPrompt(prompt: string): Detector;
}

/** Spans sorted, overlapping ones merged into one named after the most specific kind (`KINDS`). */
export function mergeSpans(spans: Iterable<Span>): Span[] {
  const rank = (k: string): number => (KINDS.includes(k) ? KINDS.indexOf(k) : KINDS.length);
  const out: Span[] = [];
  for (const s of [...spans].sort(compareSpans)) {
    const last = out[out.length - 1];
    if (last !== undefined && s.start < last.end) {
      const kind = rank(s.kind) < rank(last.kind) ? s.kind : last.kind;
      out[out.length - 1] = new Span(last.start, Math.max(last.end, s.end), kind);
    } else {
      out.push(s);
    }
  }
  return out;
}

/** `text` with lone surrogates replaced by U+FFFD (neither a tokenizer nor UTF-8 takes one). */
export function cleanText(text: string): string {
  return text.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd");
}

/** Refuse token IDs outside the tokenizer's vocabulary: the guard fails closed on them. */
export function checkIds(tokenizer: Tokenizer, ids: readonly number[]): void {
  for (const id of ids) {
    if (!Number.isInteger(id) || id < 0 || id >= tokenizer.size) {
      throw new RangeError(`token ID ${id} is outside the tokenizer's vocabulary of ${tokenizer.size} IDs`);
    }
  }
}

/** The text of `ids` exactly as the device shows it; an ID outside the vocabulary is refused. */
export function decode(tokenizer: Tokenizer, ids: readonly number[]): string {
  if (ids.length === 0) return "";
  checkIds(tokenizer, ids);
  return tokenizer.decode(ids);
}

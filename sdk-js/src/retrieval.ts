/**
 * Retrieval over the user's profile (sdk/context.py): BM25 as bm25s computes it (Lucene variant,
 * k1 1.5, b 0.75; its tokenizer: lowercase, words of two or more word characters, English
 * stopwords, no stemming), ranked by score with ties in profile order, then `fitContext`: the
 * examples fitted to a character budget. `retrieval/rank.json` holds it to the Python device.
 * Lengths count code points, as Python's do.
 */
import type { Example } from "./prompt.js";

export interface ProfileEntry {
  subject: string;
  body: string;
}

const STOPWORDS_EN = new Set([
  "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not",
  "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was",
  "will", "with",
]); // prettier-ignore
// Python's (?u)\b\w\w+\b: \w is a letter, a number or "_" (str.isalnum), and JavaScript's \b is
// ASCII-only even with the u flag, so the boundaries are spelled as lookarounds.
const WORD = /(?<![\p{L}\p{N}_])[\p{L}\p{N}_]{2,}(?![\p{L}\p{N}_])/gu;
const K1 = 1.5;
const B = 0.75;

export function bm25Tokens(text: string): string[] {
  return (text.toLowerCase().match(WORD) ?? []).filter((t) => !STOPWORDS_EN.has(t));
}

export class ProfileIndex {
  // Each term's float32 score in each document that holds it (bm25s's precomputed sparse matrix).
  private readonly scores = new Map<string, [doc: number, score: number][]>();

  constructor(readonly entries: ProfileEntry[]) {
    const docs = entries.map((e) => bm25Tokens(`${e.subject}\n${e.body}`));
    if (!docs.some((d) => d.length > 0)) return; // no vocabulary: every score is 0
    const n = docs.length;
    const avg = docs.reduce((s, d) => s + d.length, 0) / n;
    const df = new Map<string, number>();
    for (const d of docs) for (const t of new Set(d)) df.set(t, (df.get(t) ?? 0) + 1);
    docs.forEach((d, doc) => {
      const tf = new Map<string, number>();
      for (const t of d) tf.set(t, (tf.get(t) ?? 0) + 1);
      for (const [t, f] of tf) {
        const dfT = df.get(t)!;
        const idf = Math.fround(Math.log(1 + (n - dfT + 0.5) / (dfT + 0.5)));
        const tfc = f / (K1 * (1 - B + (B * d.length) / avg) + f);
        const list = this.scores.get(t) ?? [];
        list.push([doc, Math.fround(idf * tfc)]);
        this.scores.set(t, list);
      }
    });
  }

  /** Every entry's BM25 score for `query` (float32 sums, query terms in order, repeats counted). */
  score(query: string): number[] {
    const out = new Array<number>(this.entries.length).fill(0);
    for (const t of bm25Tokens(query)) {
      for (const [doc, s] of this.scores.get(t) ?? []) out[doc] = Math.fround(out[doc]! + s);
    }
    return out;
  }

  /** The indices of all entries, best first; ties keep profile order. */
  ranking(query: string): number[] {
    const s = this.score(query);
    return s.map((_, i) => i).sort((a, b) => s[b]! - s[a]! || a - b);
  }

  retrieve(query: string, n = 3): ProfileEntry[] {
    if (!Number.isInteger(n) || n < 0) throw new RangeError(`the number of entries to retrieve must be a non-negative integer, not ${n}`);
    if (n === 0 || this.entries.length === 0) return [];
    return this.ranking(query).slice(0, n).map((i) => this.entries[i]!);
  }
}

const TRIM_MARK = "\u2026";
const MIN_BODY_CHARS = 120;
const LINE_CUT_MIN_FRACTION = 0.6;
const SUBJECT_PREFIX = "Subject: ";
const HEADER_GAP = "\n\n";
const ENTRY_SEP = "\n\n---\n\n";

const cps = (s: string): string[] => Array.from(s);
const len = (s: string): number => cps(s).length;
// Python's str.split() and str.rstrip() whitespace (its separators U+001C to U+001F included).
// eslint-disable-next-line no-control-regex
const WS = /[\s\x1c-\x1f\x85]/u;

function rstrip(s: string): string {
  const c = cps(s);
  while (c.length > 0 && WS.test(c[c.length - 1]!)) c.pop();
  return c.join("");
}

function shareBudget(lengths: number[], budget: number): number[] {
  const caps = new Array<number>(lengths.length).fill(0);
  let remaining = Math.max(budget, 0);
  const order = lengths.map((_, i) => i).sort((a, b) => lengths[a]! - lengths[b]! || a - b);
  order.forEach((i, pos) => {
    const share = Math.floor(remaining / (order.length - pos));
    caps[i] = Math.min(lengths[i]!, share);
    remaining -= caps[i]!;
  });
  return caps;
}

function trim(text: string, limit: number): string {
  const c = cps(text);
  if (c.length <= limit) return text;
  const budget = limit - 1;
  if (budget <= 0) return "";
  const window = c.slice(0, budget + 1);
  let cut = window.lastIndexOf("\n");
  if (cut < Math.ceil(budget * LINE_CUT_MIN_FRACTION)) cut = Math.max(window.lastIndexOf(" "), window.lastIndexOf("\t"));
  if (cut <= 0) cut = budget;
  const head = rstrip(c.slice(0, cut).join(""));
  return head ? head + TRIM_MARK : "";
}

/** The retrieved entries as the Specialist's examples, their text layout at most `maxChars` long. */
export function fitContext(entries: ProfileEntry[], maxChars = 1800): Example[] {
  if (!Number.isInteger(maxChars) || maxChars <= 0) throw new RangeError(`max_chars must be a positive integer, not ${maxChars}`);
  const subjects = entries.map((e) => e.subject.split(new RegExp(WS.source, "gu")).filter((w) => w !== "").join(" "));
  const bodies = entries.map((e) => rstrip(e.body.replace(/^\n+|\n+$/g, "")));
  const fixed = (k: number): number =>
    subjects.slice(0, k).reduce((s, x) => s + len(SUBJECT_PREFIX) + len(x) + len(HEADER_GAP), 0) + (k - 1) * len(ENTRY_SEP);
  let k = entries.length;
  while (k > 0 && fixed(k) > maxChars) k -= 1;
  if (k === 0) return [];
  let caps = shareBudget(bodies.slice(0, k).map(len), maxChars - fixed(k));
  while (k > 1 && caps.some((cap, i) => cap < Math.min(len(bodies[i]!), MIN_BODY_CHARS))) {
    k -= 1;
    caps = shareBudget(bodies.slice(0, k).map(len), maxChars - fixed(k));
  }
  return subjects.slice(0, k).map((subject, i) => ({ subject, body: trim(bodies[i]!, caps[i]!) }));
}

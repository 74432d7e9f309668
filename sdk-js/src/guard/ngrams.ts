/**
 * Port of privacy/ngrams.py. Verbatim private n-grams: runs of Specialist tokens that copy a
 * passage of the user's private history and are not in the public prompt (`VerbatimNgramDetector`).
 *
 * Python keeps the n-grams as sorted uint64 hashes (a rolling polynomial hash, for numpy); here an
 * n-gram is the exact string of its IDs ("12,345,6"), in a `Set`. The decisions are the same but
 * where Python's 64-bit hashes collide (there Python over-redacts, never under-): JavaScript has no
 * uint64 arithmetic to vectorize, and a `Set` of strings is as fast, needs no collision argument,
 * and makes a prefix of an n-gram (the hazard's) just the string of its first IDs.
 */
import { FUNCTION_WORDS } from "./data/ngrams.js";
import { LETTER, S, splitWords } from "./pyre.js";
import { unitOffset } from "./pystr.js";
import { cleanText, decode, PRIVATE_NGRAM, Span, type Detector, type Tokenizer } from "./spans.js";

type Ids = readonly number[];

function keyOf(ids: Ids, start = 0, end = ids.length): string {
  return ids.slice(start, end).join(",");
}

/** Every window of `n` IDs inside one sequence (none straddles two), as ID lists. */
function windowsOfMany(sequences: readonly Ids[], n: number): number[][] {
  const out: number[][] = [];
  for (const s of sequences) for (let i = 0; i + n <= s.length; i++) out.push(s.slice(i, i + n));
  return out;
}

/** Token IDs of each non-empty text (a lone surrogate, which JSON lets through, replaced first). */
function encodeAll(tokenizer: Tokenizer, texts: Iterable<string>): number[][] {
  const batch = [...texts].filter((t) => t).map(cleanText);
  return batch.length === 0 ? [[]] : batch.map((t) => tokenizer.encode(t));
}

function sameIds(a: Ids, b: Ids): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

const LEADING_SPACE = new RegExp(`^${S}+`, "u");

export interface VerbatimOptions {
  /** Words (`runWords`) a run needs to count as a passage; 0 counts every run of `n` tokens. */
  minWords?: number;
  /** Tokens that count as a passage whatever they read (default `2 n`, at least `n`). */
  longRun?: number;
  /** The shortest opening of a private n-gram the hazard holds. */
  hazardTokens?: number;
}

export interface VerbatimTextsOptions extends VerbatimOptions {
  n?: number;
  /** Texts whose n-grams are not private (boilerplate common outside the user's history). */
  publicTexts?: Iterable<string>;
}

/**
 * Runs of `n`+ Specialist tokens that occur in the private history and not in the public prompt.
 *
 * Matching works on token IDs (`findIds`, what goes on the wire) and on text (`find`, which
 * re-tokenizes and maps back to characters). A run counts when it copies a passage: `minWords`
 * words, or `longRun` tokens of anything (a date or one hyphenated identifier is a public form
 * ordinary text repeats). Hazard: a copy's first `n - 1` tokens would go up before the n-gram is
 * complete, so trailing tokens that start a private n-gram (`hazardTokens` to `n - 1` of them)
 * are held until the copy diverges, turns into a span, or the text ends.
 */
export class VerbatimNgramDetector implements Detector {
  readonly n: number;
  readonly tokenizer: Tokenizer;
  readonly minWords: number;
  readonly longRun: number;
  readonly hazardTokens: number;
  /** The private n-grams (keys of their IDs), the public ones removed. */
  private readonly ngrams: ReadonlyMap<string, Ids>;
  /** The opening lengths paired with each n-gram (`forPrompt` keeps them for the n-grams it keeps). */
  private readonly prefixLengths: readonly number[];
  /** Openings of `hazardTokens`+ tokens of the private n-grams, by length. */
  private readonly prefixSets = new Map<number, Set<string>>();

  /**
   * `history`: the history's n-grams (ID lists of length `n`); `exclude`: n-grams that are not
   * private; `prefixLengths`: the lengths of opening the hazard may hold (`fromTexts` gives them).
   */
  constructor(
    history: Iterable<Ids>,
    tokenizer: Tokenizer,
    n: number,
    exclude: Iterable<Ids> = [],
    options: VerbatimOptions & { prefixLengths?: readonly number[] } = {},
  ) {
    const minWords = options.minWords ?? 3;
    if (n < 2) throw new RangeError(`a verbatim n-gram needs n >= 2 tokens; got ${n}`);
    if (minWords < 0) throw new RangeError(`min_words must be >= 0; got ${minWords}`);
    this.n = n;
    this.tokenizer = tokenizer;
    this.minWords = minWords;
    this.longRun = options.longRun === undefined ? 2 * n : Math.max(options.longRun, n);
    this.hazardTokens = options.hazardTokens ?? 4;
    this.prefixLengths = options.prefixLengths ?? [];
    const excluded = new Set<string>();
    for (const ids of exclude) excluded.add(keyOf(ids));
    const ngrams = new Map<string, Ids>();
    for (const ids of history) {
      const key = keyOf(ids);
      if (!excluded.has(key)) ngrams.set(key, ids);
    }
    this.ngrams = ngrams;
    // Only openings of `hazardTokens`+ tokens: a shorter one could never be a passage anyway.
    for (const j of this.prefixLengths) {
      if (j < this.hazardTokens) continue;
      const set = new Set<string>();
      for (const ids of ngrams.values()) set.add(keyOf(ids, 0, j));
      this.prefixSets.set(j, set);
    }
  }

  /** Index the private history (e.g. each entry's subject and body) once per device. */
  static fromTexts(history: Iterable<string>, tokenizer: Tokenizer, options: VerbatimTextsOptions = {}): VerbatimNgramDetector {
    const n = options.n ?? 8;
    const hazardTokens = options.hazardTokens ?? 4;
    const texts = [...history];
    // An entry's first word has no space before it, so other tokens than the same word inside a
    // sentence (" Diagnosed" is not "Di" + "agnosed"): the opening with a space is indexed too,
    // where its tokens differ (only its first windows do, the tokens realign after the first word).
    const encoded = encodeAll(tokenizer, texts);
    const openings = encodeAll(
      tokenizer,
      texts.filter((t) => t).map((t) => {
        const rest = t.replace(LEADING_SPACE, "");
        return " " + rest.slice(0, unitOffset(rest, 24 * n));
      }),
    );
    const count = Math.min(openings.length, encoded.length);
    for (let i = 0; i < count; i++) {
      const [o, e] = [openings[i]!, encoded[i]!];
      if (o.length > 0 && !sameIds(o.slice(1, n + 2), e.slice(0, n + 1))) encoded.push(o.slice(0, n + 2));
    }
    const prefixLengths: number[] = [];
    if (hazardTokens) for (let j = Math.max(1, hazardTokens); j < n; j++) prefixLengths.push(j);
    return new VerbatimNgramDetector(
      windowsOfMany(encoded, n),
      tokenizer,
      n,
      windowsOfMany(encodeAll(tokenizer, options.publicTexts ?? []), n),
      { minWords: options.minWords, longRun: options.longRun, hazardTokens, prefixLengths },
    );
  }

  forPrompt(prompt: string): VerbatimNgramDetector {
    // With a space before it too, as the history's openings are indexed (`fromTexts`).
    const exclude = windowsOfMany(encodeAll(this.tokenizer, [prompt, " " + prompt.replace(LEADING_SPACE, "")]), this.n);
    return new VerbatimNgramDetector(this.ngrams.values(), this.tokenizer, this.n, exclude, {
      minWords: this.minWords,
      longRun: this.longRun,
      hazardTokens: this.hazardTokens,
      prefixLengths: this.prefixLengths,
    });
  }

  /** How many private n-grams (Python's `len`). */
  get size(): number {
    return this.ngrams.size;
  }

  /** Maximal runs `[a, b)` of token positions covered by private n-grams that copy a passage. */
  findIds(ids: readonly number[]): [number, number][] {
    const runs: [number, number][] = [];
    for (let i = 0; i + this.n <= ids.length; i++) {
      if (!this.ngrams.has(keyOf(ids, i, i + this.n))) continue;
      const last = runs[runs.length - 1];
      if (last !== undefined && i <= last[1]) last[1] = i + this.n;
      else runs.push([i, i + this.n]);
    }
    return runs.filter(([a, b]) => this.minWords === 0 || this.isPassageText(decode(this.tokenizer, ids.slice(a, b)), b - a));
  }

  /**
   * Whether a run of `tokens` tokens reading `text` copies a passage of the user's own words:
   * `minWords` words but names of code (and, where it names code, function words: `proseWords`),
   * or `longRun` tokens of anything but names of code ("between `files_ref_store` and
   * `packed_ref_store`" repeats the codebase's names, not the user).
   */
  isPassageText(text: string, tokens: number): boolean {
    if (this.minWords === 0) return true;
    if (proseWords(text) >= this.minWords) return true;
    if (tokens < this.longRun) return false;
    const rest = withoutCodeNames(text);
    // Only the names' tokens are discounted: a long copy of digits or prose is still one.
    return rest === text || this.tokenizer.encode(rest).length >= this.longRun;
  }

  find(text: string): Span[] {
    // Same length: a lone surrogate becomes U+FFFD, so the offsets still index `text`.
    const { ids, offsets } = this.tokenizer.encodeWithOffsets(cleanText(text));
    return this.findIds(ids).map(([a, b]) => new Span(offsets[a]![0], offsets[b - 1]![1], PRIVATE_NGRAM));
  }

  /** The earliest of the trailing runs of `hazardTokens` to `n - 1` tokens that starts a private n-gram. */
  hazard(text: string): Span | null {
    if (this.prefixSets.size === 0 || !text) return null;
    // Enough characters (code points, as Python counts) for n - 1 tokens and one more, whose start
    // may be cut mid-word.
    const tailStart = unitOffset(text, Math.max(0, [...text].length - 24 * this.n));
    let { ids, offsets } = this.tokenizer.encodeWithOffsets(cleanText(text.slice(tailStart)));
    if (tailStart) [ids, offsets] = [ids.slice(1), offsets.slice(1)];
    for (const j of [...this.prefixSets.keys()].sort((a, b) => b - a)) {
      if (j > ids.length) continue;
      if (!this.prefixSets.get(j)!.has(keyOf(ids, ids.length - j))) continue;
      const start = tailStart + offsets[offsets.length - j]![0];
      // An opening of nothing but names of code and the words between them ("the
      // `packed_ref_store` is") is the codebase's vocabulary: it goes up; a copy that turns to
      // the user's words is held from there.
      if (this.minWords && namesCodeOnly(text.slice(start))) continue;
      return new Span(start, text.length, PRIVATE_NGRAM);
    }
    return null;
  }
}

/**
 * A passage of the history copied in another case or spacing (ALL CAPITALS, two spaces between
 * words tokenize to other IDs): the same runs matched on lower-cased text with white space
 * collapsed, on both sides, and mapped back to the text as written.
 */
export class RewrittenVerbatimDetector implements Detector {
  constructor(readonly inner: VerbatimNgramDetector) {}

  static fromTexts(
    history: Iterable<string>,
    tokenizer: Tokenizer,
    options: { n?: number; publicTexts?: Iterable<string> } = {},
  ): RewrittenVerbatimDetector {
    const normal = [...history].map((t) => normalized(t).text);
    const publicTexts = [...(options.publicTexts ?? [])].map((t) => normalized(t).text);
    return new RewrittenVerbatimDetector(VerbatimNgramDetector.fromTexts(normal, tokenizer, { n: options.n, publicTexts }));
  }

  forPrompt(prompt: string): RewrittenVerbatimDetector {
    return new RewrittenVerbatimDetector(this.inner.forPrompt(normalized(prompt).text));
  }

  get size(): number {
    return this.inner.size;
  }

  hazard(text: string): Span | null {
    const { text: normal, where } = normalized(text);
    const h = normal ? this.inner.hazard(normal) : null;
    return h === null ? null : new Span(h.start < where.length ? where[h.start]! : text.length, text.length, h.kind);
  }

  find(text: string): Span[] {
    const { text: normal, where } = normalized(text);
    if (!normal) return [];
    const spans = this.inner.find(normal).map((s) => {
      const last = where[s.end - 1]!;
      return new Span(where[s.start]!, last + (text.codePointAt(last)! > 0xffff ? 2 : 1), PRIVATE_NGRAM);
    });
    // Lower case hides a camelCase name ("refIterator" reads "refiterator", a word): the run is
    // judged again as written, with the token count of its normalized form.
    return spans.filter((s) => {
      const written = text.slice(s.start, s.end);
      return this.inner.isPassageText(written, this.inner.tokenizer.encode(normalized(written).text).length);
    });
  }
}

const SPACE_RUN = new RegExp(`${S}+`, "gu");

/**
 * `text` lower-cased (character by character, as Python's `text[i].lower()`) with each run of
 * white space one space, and for each UTF-16 unit of the result the index in `text` of the
 * character it comes from.
 */
function normalized(text: string): { text: string; where: number[] } {
  const out: string[] = [];
  const where: number[] = [];
  const lower = (from: number, to: number): void => {
    for (let i = from; i < to; ) {
      const ch = String.fromCodePoint(text.codePointAt(i)!);
      const low = ch.toLowerCase();
      out.push(low);
      for (let k = 0; k < low.length; k++) where.push(i);
      i += ch.length;
    }
  };
  let last = 0;
  for (const m of text.matchAll(SPACE_RUN)) {
    lower(last, m.index);
    out.push(" ");
    where.push(m.index);
    last = m.index + m[0].length;
  }
  lower(last, text.length);
  return { text: out.join(""), where };
}

// Scripts written without spaces between words: each character counts as a word of its own.
const UNSPACED = /[\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]/gu;
const LETTERS = new RegExp(LETTER, "gu");

/**
 * Words in `text`: pieces between white space with at least two letters (a number, a date or
 * punctuation is none; "non-portable-shell" is one), plus one per character of a script written
 * without spaces (Han, kana, Thai).
 */
export function runWords(text: string): number {
  let words = 0;
  for (const piece of splitWords(text)) {
    const unspaced = piece.match(UNSPACED)?.length ?? 0;
    words += unspaced ? unspaced : (piece.match(LETTERS)?.length ?? 0) >= 2 ? 1 : 0;
  }
  return words;
}

// Names of code: what a codebase calls its things, the same for every contributor, so a draft
// that repeats them says nothing about the user. A piece between spaces is one when it is a
// snake_case or _private name, a lower-case-initial camelCase name, a call ("f()",
// "strlen(prefix)"), a scoped name ("a::b", "a->b"), or one word in backticks; quotes, brackets
// and trailing punctuation around it are allowed. A dotted name alone ("jane.doe") is not one:
// those are an address's parts as often; nor PascalCase alone ("McDonald"): names of people have it.
// (Python's pattern is `re.ASCII`: its `\w` is [A-Za-z0-9_], its `\s` the six ASCII spaces.)
const CODE_PIECE =
  /^(?<open>["'([{<*`]*)(?<name>[A-Za-z_$][A-Za-z0-9_$]*(?:(?:::|->|\.)[A-Za-z_$][A-Za-z0-9_$]*)*)(?<call>\([^()\t\n\v\f\r ]*\))?(?<close>["')\]}>.,;:!?*`]*)$/u;
const CAMEL = /^[a-z][a-z0-9]*[A-Z]/u;
const LETTER_OR_DIGIT = /[\p{L}\p{N}]/u;
const BARE = /^["'`([{<*)\]}>.,;:!?]+|["'`([{<*)\]}>.,;:!?]+$/gu;

let functionWordSet: ReadonlySet<string> | null = null;

/**
 * English function words (privacy/data/function_words.txt): a run of them with names of code
 * ("between X and Y is") holds no words of the user's.
 */
export function functionWords(): ReadonlySet<string> {
  functionWordSet ??= new Set(FUNCTION_WORDS);
  return functionWordSet;
}

/** Whether a piece of text between spaces is a name of code (see `CODE_PIECE`). */
export function isCodeName(piece: string): boolean {
  const g = CODE_PIECE.exec(piece)?.groups;
  if (g === undefined) return false;
  const name = g.name!;
  return (
    (g.open!.endsWith("`") && g.close!.startsWith("`")) ||
    g.call !== undefined ||
    (name.includes("_") && /[A-Za-z]/u.test(name)) ||
    name.includes("::") ||
    name.includes("->") ||
    CAMEL.test(name)
  );
}

/** `text` without its names of code (`isCodeName`), its other pieces joined by one space. */
export function withoutCodeNames(text: string): string {
  return splitWords(text)
    .filter((p) => !isCodeName(p))
    .join(" ");
}

/** The pieces of `text` but names of code; where it names code, but function words too. */
function proseRest(text: string): string[] {
  const pieces = splitWords(text);
  let rest = pieces.filter((p) => !isCodeName(p));
  if (rest.length < pieces.length) rest = rest.filter((p) => !functionWords().has(bare(p)));
  return rest;
}

/**
 * `runWords` of `text` without its names of code; where it names code, without its function
 * words too: "between `a_b` and `c_d` is" relates the codebase's names, and holds none of the
 * user's words. Prose that names no code counts as `runWords` counts it.
 */
export function proseWords(text: string): number {
  return runWords(proseRest(text).join(" "));
}

/**
 * Whether `text` holds nothing but names of code, and (with one at least) function words and
 * punctuation: an opening that goes up whatever follows it (`VerbatimNgramDetector.hazard`).
 */
export function namesCodeOnly(text: string): boolean {
  return !proseRest(text).some((p) => LETTER_OR_DIGIT.test(p));
}

function bare(piece: string): string {
  return piece.replace(BARE, "").toLowerCase();
}

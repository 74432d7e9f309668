/**
 * Registered strings: planted canaries and the user's own identities (`CanaryDetector`), and the
 * identities a history's commit trailers name (`identitiesFromTrailers`); port of
 * privacy/canaries.py.
 *
 * A registered string is also found in the forms it takes on the way out (./registered.js: name
 * variants, a canary's bare secret, hex and base64), on the folded text (`fold`).
 */

import anyAscii from "any-ascii";
import { ARABIC_NAMED } from "./data/char_names.js";
import { LATIN_LETTERS } from "./data/registered.js";
import { DIGIT_WORD_PREFIXES, fold } from "./normalize.js";
import { LETTER, S, S_IN, W, W_IN, fullMatch, matchAt, splitWords } from "./pyre.js";
import {
  cpLen,
  firstChar,
  isAlnum,
  isAlpha,
  isAscii,
  isUpper,
  reversed,
  rot13,
  rstrip,
  splitLines,
  strip,
  tailStart,
} from "./pystr.js";
import {
  WORD_NAMES,
  commonEnglishWords,
  encodings,
  nameHandles,
  nameVariants,
  secretCores,
  soundKey,
  transliterate,
  transliterations,
  unambiguousFirstNames,
  unambiguousSurnames,
  widenEncoded,
} from "./registered.js";
import { CANARY, EMAIL, KINDS, NAME, Span, mergeSpans, type Detector } from "./spans.js";

const TRAILER_RE = new RegExp(
  String.raw`^${S}*[A-Za-z][A-Za-z-]*${S}*:${S}*(?<name>[^<>]*?)${S}*` +
    String.raw`(?:<(?<email>[^<>${S_IN}]+@[^<>${S_IN}]+)>)?${S}*(?=\n?$)`,
  "u",
);

// A trailer that names a person: Signed-off-by, Co-authored-by, Reviewed-by, ... and Cc (as git
// writes it; "CC: clang 17" is a build setting).
const IDENTITY_KEY_RE = new RegExp(String.raw`^${S}*(?:[A-Za-z][A-Za-z-]*-[Bb][Yy]|Cc)${S}*:`, "u");
const KEY_VALUE_RE = new RegExp(String.raw`^${S}*[A-Za-z][A-Za-z0-9-]*${S}*:${S}*[^${S_IN}]`, "u");
// Lines git lets stand in a trailer block: a cherry-pick note, a maintainer's bracketed note.
const BLOCK_NOTE_RE = new RegExp(
  String.raw`^${S}*(?:\(cherry picked from commit [0-9a-f]+\)|\[[^\]]*\])${S}*(?=\n?$)`,
  "u",
);
const PARAGRAPH_BREAK = /\n[ \t]*\n/gu;

/**
 * A commit body without its trailer block, and the block's lines.
 *
 * The block is the body's last paragraph when every line of it is a `Key: value` line (or a note
 * git lets stand there: "(cherry picked from commit ...)", "[name: fixed typo]") and one at least
 * names a person (`Signed-off-by:`, `Co-authored-by:`, `Cc:`, ...): what `git log --format=%B`
 * exports, where the trailers are part of the body. A last paragraph of other `Key: value` lines
 * ("Note: ...", "CC: clang 17") is the body's own text.
 */
export function splitTrailers(body: string): [string, string[]] {
  const text = rstrip(body.replaceAll("\r\n", "\n"));
  const breaks = [...text.matchAll(PARAGRAPH_BREAK)];
  const last = breaks[breaks.length - 1];
  const start = last !== undefined ? last.index + last[0].length : 0;
  const lines = splitLines(text.slice(start)).filter((line) => strip(line) !== "");
  if (lines.length === 0 || !lines.every((line) => KEY_VALUE_RE.test(line) || BLOCK_NOTE_RE.test(line))) {
    return [body, []];
  }
  if (!lines.some((line) => IDENTITY_KEY_RE.test(line))) return [body, []];
  return [last !== undefined ? rstrip(text.slice(0, last.index)) : "", lines];
}

/**
 * Names and emails in trailer lines such as `Signed-off-by: Name <email>`, as {string: kind}.
 *
 * Names shorter than two words are skipped: a single first name ("Jeff") is too common a word to
 * redact everywhere, and the guard would then hold at every capitalized word.
 */
export function identitiesFromTrailers(trailers: Iterable<string>): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of trailers) {
    const m = TRAILER_RE.exec(line);
    if (m === null) continue;
    const name = strip(m.groups!.name!);
    const email = m.groups!.email;
    if (email) out.set(email, EMAIL);
    // Only a trailer that names a person gives a name ("Fixes: 1c2d (net: ...)" gives none).
    // One word is a name where it is no word of Latin letters ("王秀英", "Дмитрий"): a Chinese or
    // Korean name is one word, and there is no English word it could be. One word of Latin
    // letters is a name too where it is capitalized and no common word ("Reviewed-by:
    // Oluwaseun <...>"; not "Reviewed-by: Bot", "Tested-by: CI").
    const words = splitWords(name).length;
    const oneWord =
      words === 1 &&
      (([...name].some((c) => isAlpha(c) && !isAscii(c)) && cpLen(name) >= 2) || latinOneWordName(name));
    if ((words >= 2 || oneWord) && !name.includes("@") && IDENTITY_KEY_RE.test(line)) out.set(name, NAME);
  }
  return out;
}

function latinOneWordName(word: string): boolean {
  const lower = word.toLowerCase();
  return (
    cpLen(word) >= 4 &&
    isAlpha(word) &&
    isUpper(firstChar(word)) &&
    !isUpper(word) &&
    !commonEnglishWords().has(lower) &&
    !WORD_NAMES.has(lower) &&
    !lower.includes("bot")
  );
}

// Letters of the scripts whose names a Latin-script history quotes as they are written: Cyrillic,
// Greek, Hebrew, Arabic, Devanagari and the other Brahmic scripts, Thai, kana, CJK ideographs, Hangul.
const SCRIPTS = {
  cased: "\u0370-\u03ff\u0400-\u04ff",
  abjad: "\u0590-\u05ff\u0600-\u06ff",
  brahmic: "\u0900-\u0dff\u0e00-\u0e7f",
  syllabic: "\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af",
} as const;
// Two or three words (one would be a quoted word as often as a name), each capitalized where the
// script has case; a CJK, kana or Hangul name is one word of two to four characters.
const ISLAND: Record<keyof typeof SCRIPTS, RegExp> = {
  cased: new RegExp(
    `(?<!${LETTER})[${SCRIPTS.cased}]+(?:[ \\t]+[${SCRIPTS.cased}]+){1,2}(?!${LETTER})`,
    "gu",
  ),
  abjad: new RegExp(
    `(?<!${LETTER})[${SCRIPTS.abjad}]{2,}(?:[ \\t]+[${SCRIPTS.abjad}]{2,}){1,2}(?!${LETTER})`,
    "gu",
  ),
  brahmic: new RegExp(
    `(?<!${LETTER})[${SCRIPTS.brahmic}]{2,}(?:[ \\t]+[${SCRIPTS.brahmic}]{2,}){1,2}(?!${LETTER})`,
    "gu",
  ),
  syllabic: new RegExp(`(?<!${LETTER})[${SCRIPTS.syllabic}]{2,4}(?!${LETTER})`, "gu"),
};

/**
 * Names a Latin-script text quotes in another script (issue #49, finding 3: "Paired with Алексей
 * Морозов", "Thanks to 박지훈"): a short island of another script's words in a sentence of Latin
 * letters is a name far more often than anything else, so it is registered as one. A text mostly
 * in that script (a Russian commit message) registers nothing: its words are prose.
 */
export function namesInProse(text: string): Set<string> {
  const out = new Set<string>();
  // By words, not letters: a Devanagari syllable is several code points.
  const latin = (text.match(/[A-Za-z]{2,}/g) ?? []).length;
  for (const group of Object.keys(SCRIPTS) as (keyof typeof SCRIPTS)[]) {
    const islands = (text.match(new RegExp(`[${SCRIPTS[group]}]+`, "gu")) ?? []).length;
    if (islands === 0 || islands * 2 > latin) continue;
    for (const m of text.matchAll(ISLAND[group])) {
      const words = splitWords(m[0]);
      if (group === "cased" && !words.every((w) => isUpper(firstChar(w)) && cpLen(w) >= 2)) continue;
      // Within a line of Latin words: a line all in the other script is a quotation, not a name.
      const a = text.lastIndexOf("\n", m.index - 1) + 1;
      const b = text.indexOf("\n", m.index + m[0].length);
      const line = text.slice(a, b >= 0 ? b : text.length);
      if ((line.match(/[A-Za-z]/g) ?? []).length >= 6) out.add(m[0]);
    }
  }
  return out;
}

function normalize(text: string): string {
  return splitWords(fold(text).text).join(" ");
}

const SEPARATOR = `[${S_IN}.\\-_/,:|]{0,2}`;
const LOOSE_TAIL = new RegExp(`[a-z0-9](?:[${S_IN}.\\-_/,:|]{0,2}[a-z0-9])*[${S_IN}.\\-_/,:|]{0,2}`, "u");
const HOLD_START = new RegExp(`(?<!${W})${W}|(?<=${S})[^${W_IN}${S_IN}]|^[^${W_IN}${S_IN}]`, "gu");
const ALNUM_START = /(?<![a-z0-9])[a-z0-9]/gu;
const PARTIAL_WORD = new RegExp(`(?<=[${S_IN}.\\-_/,:|])[a-z]+$`, "u");
const SEPARATORS = new RegExp(`[${S_IN}.\\-_/,:|]`, "gu");
const TRAILING_RUN = new RegExp(`[^${S_IN}]+$`, "u");
const CYRILLIC_GREEK = "[\\u0370-\\u03ff\\u0400-\\u04ff]";
const CYRILLIC_GREEK_TAIL = new RegExp(
  `(?<!${LETTER})(?:(?<first>${CYRILLIC_GREEK}+)[ \\t]+)?(?<last>${CYRILLIC_GREEK}+)[ \\t]?$`,
  "du",
);
const LATIN_TAIL = new RegExp(
  `(?<!${LETTER})(?:(?<first>[A-Z][${W_IN}'-]*)[ \\t]+)?(?<last>[A-Z][${W_IN}'-]*)[ \\t]?$`,
  "du",
);
// The letters whose Unicode name holds "LATIN": ASCII's, and the rest as registered.ts reads them.
const LATIN_CLASS = "A-Za-z" + LATIN_LETTERS.map(([a, b]) => (a === b ? `\\u{${a.toString(16)}}` : `\\u{${a.toString(16)}}-\\u{${b.toString(16)}}`)).join("");
const NOT_LATIN_LETTER = new RegExp(`(?![${LATIN_CLASS}])\\p{L}`, "u");

/** Pairs of strings as a set (Python's set of tuples). */
class PairSet {
  private readonly keys = new Set<string>();
  readonly pairs: [string, string][] = [];

  add(a: string, b: string): void {
    const key = `${a}\u0000${b}`;
    if (this.keys.has(key)) return;
    this.keys.add(key);
    this.pairs.push([a, b]);
  }

  has(a: string, b: string): boolean {
    return this.keys.has(`${a}\u0000${b}`);
  }

  get size(): number {
    return this.pairs.length;
  }
}

/** Options of `CanaryDetector`. */
export interface CanaryOptions {
  /** The shortest prefix (in characters, starting at a word) of a string or variant that makes
   * the end of a text a hazard; a secret's prefix holds from its first character. */
  minPrefix?: number;
  /** `false` matches the registered strings only (what a leakage report counts). */
  variants?: boolean;
  /** Words the history writes in lower case: no name alone, no login. */
  commonWords?: Iterable<string>;
}

/**
 * Registered strings and the forms they take on the way out, matched on the folded text.
 *
 * - the string itself, in any case, with any white space between words;
 * - a registered name's variants ("Doe, Jane", "J. Doe", "jane.doe"), its logins ("jdoeson",
 *   "janed"), backwards and in ROT13, and its first name or surname alone where that is
 *   unambiguous, with a possessive or plural "s";
 * - a canary's secret without its template phrase ("482913" of "my PIN is 482913"), also with
 *   separators between its characters ("4 8 2 9 1 3", "48-29-13");
 * - the hex and base64 encodings of every registered string and secret; the whole encoded word
 *   around a match is the span.
 */
export class CanaryDetector implements Detector {
  /** The registered strings, normalized, with their kinds (and transliterations of names). */
  readonly strings = new Map<string, string>();
  readonly exact: Map<string, string>;
  readonly firstNames: ReadonlySet<string>;
  /** The canaries' secret cores (and each reversed): what the uplink record registers. */
  readonly cores: ReadonlySet<string>;
  readonly encoded: Map<string, string>;
  readonly minPrefix: number;
  private readonly sounds = new Set<string>();
  private readonly soundPairs = new PairSet();
  private readonly latinPairs = new PairSet();
  private readonly firstRe: RegExp | null;
  private readonly exactRe: RegExp | null;
  private readonly coreRe: RegExp | null;
  private readonly encodedRe: RegExp | null;
  private readonly pieceKinds: Map<string, string>;
  private readonly pieceRe: RegExp | null;
  private readonly prefixes = new Map<string, string>();
  private readonly nonLatin: boolean;
  private readonly corePrefixes = new Set<string>();
  private readonly maxCore: number;
  private readonly encodedPrefixes = new Set<string>();
  private readonly maxLen: number;

  constructor(
    strings: ReadonlyMap<string, string> | Readonly<Record<string, string>> | Iterable<string>,
    options: CanaryOptions = {},
  ) {
    const minPrefix = options.minPrefix ?? 3;
    const variants = options.variants ?? true;
    const items: [string, string][] =
      strings instanceof Map
        ? [...(strings as ReadonlyMap<string, string>)]
        : Symbol.iterator in strings
          ? [...(strings as Iterable<string>)].map((s): [string, string] => [s, CANARY])
          : Object.entries(strings as Readonly<Record<string, string>>);
    const raw = new Map<string, string>();
    for (const [s, kind] of items) {
      if (!KINDS.includes(kind)) throw new RangeError(`unknown kind ${JSON.stringify(kind)} for a registered string`);
      if (strip(s) === "") continue;
      raw.set(strip(s), kind);
      this.strings.set(normalize(s), kind);
      if (kind === NAME && variants) {
        // The name as it is written in Latin letters, registered with it (issue #49); a Latin
        // name's letters that folding keeps ("ø", "æ", "ł") as ASCII too ("Øystein Brænne" is
        // typed "Oystein Braenne").
        const latin = transliterations(s);
        for (const t of latin) setDefault(this.strings, normalize(t), NAME);
        if (!isAscii(s) && latin.size === 0) setDefault(this.strings, normalize(anyAscii(s)), NAME);
      }
    }
    const exact = new Map(this.strings);
    let cores = new Set<string>();
    let firsts = new Set<string>();
    let encoded = new Map<string, string>();
    if (variants) {
      const names = [...this.strings].filter(([, kind]) => kind === NAME).map(([n]) => n);
      for (const n of names) for (const v of nameVariants(n)) setDefault(exact, v, NAME);
      const common = new Set([...(options.commonWords ?? [])].map((w) => w.toLowerCase()));
      firsts = new Set(unambiguousFirstNames(names, common));
      // The surname alone names the person as well ("Reviewed by Vanterpool"), by the same rule:
      // not a word the history writes in lower case.
      for (const s of unambiguousSurnames(names, common)) firsts.add(s);
      for (const n of names) for (const handle of nameHandles(n, common)) setDefault(exact, handle, NAME);
      const rawCores = new Map<string, string>();
      for (const [s, kind] of raw) if (kind === CANARY) for (const c of secretCores(s)) rawCores.set(c, CANARY);
      cores = new Set([...rawCores.keys()].map(normalize).filter((c) => !c.includes(" ")));
      // A secret written backwards ("319284" for "482913") is still the secret: the reversed core
      // is a core too (found with separators, held from its first digit).
      for (const c of [...cores]) cores.add(reversed(c));
      // A name backwards or in ROT13 reads as plainly ("loopretnav sileam").
      for (const n of names) for (const other of [reversed(n), rot13(n)]) setDefault(exact, normalize(other), NAME);
      encoded = encodings(new Map([...raw, ...rawCores]));
    }
    this.exact = exact;
    this.firstNames = variants ? firsts : new Set();
    // A name written in Cyrillic or Greek ("Алиса Уокер", "Алиса" alone where "Alice" is
    // unambiguous): by the sound of its romanization (`soundKey`).
    if (variants) {
      for (const n of this.firstNames) {
        const k = soundKey(n);
        if (cpLen(k) >= 3) this.sounds.add(k);
      }
      for (const [n, kind] of this.strings) {
        const words = splitWords(n);
        if (kind === NAME && words.length >= 2) {
          this.soundPairs.add(soundKey(words[0]!), soundKey(words[words.length - 1]!));
        }
      }
    }
    // A name registered in another script, written in Latin letters the way a colleague spells it
    // ("Alexei" or "Aleksey" for "Алексей", "Mohammed Al-Qahtani" for "محمد القحطاني", "Verma"
    // for "वर्मा"): two capitalized words whose sounds (`latinKey`) are those of its
    // romanization's first and last word, in either order.
    if (variants) {
      for (const [sRaw, kind] of raw) {
        if (kind !== NAME || !NOT_LATIN_LETTER.test(sRaw)) continue;
        for (const t of new Set([...transliterations(sRaw), ...arabicRomanizations(sRaw)])) {
          const words = splitWords(t.replaceAll("-", ""));
          if (words.length < 2) continue;
          const k1 = latinKey(words[0]!);
          const k2 = latinKey(words[words.length - 1]!);
          if (cpLen(k1) >= 2 && cpLen(k2) >= 2) {
            this.latinPairs.add(k1, k2);
            this.latinPairs.add(k2, k1);
          }
        }
      }
    }
    // With a possessive or plural "s" ("Vanterpool's", "die Vanterpools").
    this.firstRe = alternation(this.firstNames, namePattern);
    this.cores = cores;
    this.encoded = encoded;
    this.minPrefix = minPrefix;
    this.exactRe = alternation(exact.keys(), wordPattern);
    this.coreRe = alternation(cores, loosePattern, "[a-z0-9]");
    this.encodedRe = alternation(encoded.keys(), encodedPattern);
    // An encoding longer than the device's look-ahead reaches the guard in pieces after a
    // fail-closed hold: any 16 characters of one are a span too (a piece of a name's form is a
    // name, not a canary).
    this.pieceKinds = new Map();
    for (const [e, kind] of encoded) {
      for (let i = 0; i < e.length - 15; i += 2) this.pieceKinds.set(e.slice(i, i + 16), kind);
    }
    this.pieceRe = alternation(this.pieceKinds.keys(), encodedPattern);
    this.nonLatin = [...exact].some(([n, kind]) => kind === NAME && NON_LATIN.test(n));
    for (const [norm, kind] of [...exact, ...[...this.firstNames].map((n): [string, string] => [n, NAME])]) {
      // A name in a script without case is held from its first character: a CJK or Hangul
      // character is a syllable, and folding drops the vowel signs of Devanagari or Arabic.
      const shortest = matchAt(NON_LATIN, norm) !== null ? 1 : minPrefix;
      for (let length = Math.min(shortest, norm.length); length < norm.length; length++) {
        setDefault(this.prefixes, norm.slice(0, length), kind);
      }
    }
    for (const c of cores) for (let n = 1; n < c.length; n++) this.corePrefixes.add(c.slice(0, n));
    this.maxCore = Math.max(0, ...[...cores].map(cpLen));
    for (const e of encoded.keys()) {
      for (let n = Math.min(6, e.length); n < e.length; n++) this.encodedPrefixes.add(e.slice(0, n));
    }
    this.maxLen = Math.max(0, ...[...exact.keys(), ...encoded.keys()].map(cpLen)) + 2 * this.maxCore;
  }

  find(text: string): Span[] {
    const f = fold(text);
    const t = f.text;
    const out: Span[] = [];
    if (this.exactRe !== null) {
      for (const m of t.matchAll(this.exactRe)) {
        const kind = this.exact.get(splitWords(m[0]).join(" ")) ?? CANARY;
        out.push(new Span(...f.span(m.index, m.index + m[0].length), kind));
      }
    }
    if (this.firstRe !== null) {
      // A first name alone is a name only where it is written as one: "Jane", "JANE", not "jane".
      for (const m of t.matchAll(this.firstRe)) {
        const [a, b] = f.span(m.index, m.index + m[0].length);
        // ... or as a login in any case: "maelis@host", "/home/maelis".
        const login = text.slice(b, b + 1) === "@" || (a > 0 && text[a - 1] === "/");
        if (isUpper(firstChar(text.slice(a))) || login) out.push(new Span(a, b, NAME));
      }
    }
    if (this.sounds.size > 0 || this.soundPairs.size > 0) out.push(...this.transliterated(text));
    if (this.latinPairs.size > 0) {
      for (const m of text.matchAll(LATIN_PAIR)) {
        const [one, two] = [m[1]!, m[2]!];
        if (this.latinPairs.has(latinKey(one), latinKey(two))) {
          out.push(new Span(m.indices![1]![0], m.indices![2]![1], NAME));
        }
      }
    }
    if (this.coreRe !== null) {
      for (const m of t.matchAll(this.coreRe)) out.push(new Span(...f.span(m.index, m.index + m[0].length), CANARY));
    }
    for (const pattern of [this.encodedRe, this.pieceRe]) {
      if (pattern === null) continue;
      for (const m of t.matchAll(pattern)) {
        const kind = this.encoded.get(m[0]) ?? this.pieceKinds.get(m[0]) ?? CANARY;
        out.push(new Span(...f.span(...widenEncoded(t, m.index, m.index + m[0].length)), kind));
      }
    }
    return mergeSpans(out);
  }

  /** Registered names written in Cyrillic or Greek (see the constructor). */
  private transliterated(text: string): Span[] {
    const out: Span[] = [];
    const words = [...text.matchAll(OTHER_SCRIPT_WORD)].map((m): [RegExpMatchArray, string] => [
      m,
      soundKey(transliterate(m[0])),
    ]);
    for (let i = 0; i < words.length; i++) {
      const [m, key] = words[i]!;
      if (!isUpper(firstChar(m[0])) || !key) continue;
      const end = m.index! + m[0].length;
      if (this.sounds.has(key)) out.push(new Span(m.index!, end, NAME));
      const next = words[i + 1];
      if (next !== undefined) {
        const [nxt, key2] = next;
        if (this.soundPairs.has(key, key2) && strip(text.slice(end, nxt.index), " \t,.") === "") {
          out.push(new Span(m.index!, nxt.index! + nxt[0].length, NAME));
        }
      }
    }
    return out;
  }

  hazard(text: string): Span | null {
    // A character still incomplete (a token ends inside its UTF-8 bytes: "\ufffd") cannot be
    // judged yet; where a name in another script is registered it may be that name's first.
    if (text.endsWith("\ufffd") && this.nonLatin) {
      const stripped = rstrip(text, "\ufffd");
      const before = this.hazard(stripped);
      return new Span(before !== null ? before.start : stripped.length, text.length, NAME);
    }
    if (this.sounds.size > 0 || this.soundPairs.size > 0) {
      // A capitalized Cyrillic or Greek word at the end may still become a registered name.
      // (A first name's word followed by the start of its surname: from the first name.)
      const from = tailStart(text, 60);
      const m = CYRILLIC_GREEK_TAIL.exec(text.slice(from));
      if (m !== null) {
        const { first, last } = m.groups as { first?: string; last: string };
        const key = soundKey(transliterate(last));
        if (first !== undefined && isUpper(firstChar(first))) {
          const firstKey = soundKey(transliterate(first));
          if (key && this.soundPairs.pairs.some(([a, b]) => a === firstKey && b.startsWith(key))) {
            return new Span(from + m.index, text.length, NAME);
          }
        }
        const firsts = [...this.sounds, ...this.soundPairs.pairs.map(([a]) => a)];
        if (isUpper(firstChar(last)) && key && firsts.some((k) => k.startsWith(key))) {
          return new Span(from + m.indices!.groups!.last![0], text.length, NAME);
        }
      }
    }
    const latin = this.latinPairs.size > 0 ? this.latinHazard(text) : null;
    const registered = this.registeredHazard(text);
    if (latin !== null && (registered === null || latin.start < registered.start)) return latin;
    return registered;
  }

  /** A capitalized word at the end whose sound begins a registered pair's first word (or a
   * pair's first word, then the start of its second): it may still become the name. */
  private latinHazard(text: string): Span | null {
    const from = tailStart(text, 60);
    const m = LATIN_TAIL.exec(text.slice(from));
    if (m === null) return null;
    const { first, last } = m.groups as { first?: string; last: string };
    if (!isAscii(last)) return null;
    const key = latinKey(last);
    if (first !== undefined && key) {
      const firstKey = latinKey(first);
      if (this.latinPairs.pairs.some(([a, b]) => a === firstKey && b.startsWith(key))) {
        return new Span(from + m.index, text.length, NAME);
      }
    }
    if (cpLen(last) >= 2 && key && this.latinPairs.pairs.some(([a]) => a.startsWith(key))) {
      return new Span(from + m.indices!.groups!.last![0], text.length, NAME);
    }
    return null;
  }

  private registeredHazard(text: string): Span | null {
    if (this.prefixes.size === 0 && this.corePrefixes.size === 0 && this.encodedPrefixes.size === 0) return null;
    const offset = tailStart(text, 2 * this.maxLen + 8);
    const f = fold(text.slice(offset));
    const t = f.text;
    let best: number | null = null;
    let kindAt = CANARY;
    if (this.prefixes.size > 0) {
      for (const m of t.matchAll(HOLD_START)) {
        let candidate = splitWords(t.slice(m.index)).join(" ");
        // A trailing space is kept: "test user " is still a prefix of "test user one".
        if ((t.endsWith(" ") || t.endsWith("\n")) && candidate) candidate += " ";
        const kind = this.prefixes.get(candidate);
        if (kind !== undefined) {
          best = m.index;
          kindAt = kind;
          break;
        }
      }
    }
    if (this.corePrefixes.size > 0) {
      // "4 8 2" at the end may still become "4 8 2 9 1 3": from the earliest start that fits.
      const from = this.maxCore > 0 ? tailStart(t, 3 * this.maxCore + 3) : t.length;
      for (const m of t.slice(from).matchAll(ALNUM_START)) {
        const start = m.index + from;
        let rest = t.slice(start);
        // A number word half written after digits ("8 3 3 ne" of "huit trois trois neuf") may
        // be the next digit: judged without it.
        const partial = PARTIAL_WORD.exec(rest);
        if (partial !== null && DIGIT_WORD_PREFIXES.has(partial[0]) && /\p{Nd}/u.test(rest.slice(0, partial.index))) {
          rest = rest.slice(0, partial.index);
        }
        if (fullMatch(LOOSE_TAIL, rest) !== null && this.corePrefixes.has(rest.replace(SEPARATORS, ""))) {
          if (best === null || start < best) {
            best = start;
            kindAt = CANARY;
          }
          break;
        }
      }
    }
    if (this.encodedPrefixes.size > 0) {
      // Any trailing run without spaces (a string reversed or in ROT13 keeps its symbols).
      const run = TRAILING_RUN.exec(t);
      if (run !== null) {
        const word = run[0];
        for (let i = 0; i < word.length; i++) {
          if (this.encodedPrefixes.has(word.slice(i))) {
            const start = run.index + i;
            if (best === null || start < best) {
              best = start;
              kindAt = CANARY;
            }
            break;
          }
        }
      }
    }
    return best === null ? null : new Span(offset + f.rawStart(best), text.length, kindAt);
  }

  forPrompt(): Detector {
    return this;
  }
}

// Two capitalized words of Latin letters (a hyphen inside: "Ji-hoon", "Al-Qahtani").
const LATIN_WORD = "((?:[ae]l-[A-Z]|[A-Z])[A-Za-z'-]*[a-z])";
const LATIN_PAIR = new RegExp(`(?<![${W_IN}-])(?=${LATIN_WORD}[ \\t]+${LATIN_WORD}(?![${W_IN}-]))`, "dgu");

const NON_LATIN = /[\u0900-\u0e7f\u0590-\u06ff\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]/u;

/**
 * The sound of a name's word in Latin letters, as its romanizations share it: without hyphens or
 * an Arabic article ("Al-Qahtani", "Almutairi": "al" before a consonant), an "m" before a
 * consonant read as the "n" it is in Hindi's anusvara ("Ankit", "amkit"), then `soundKey`.
 */
export function latinKey(word: string): string {
  let w = word
    .toLowerCase()
    .replace(/'s$/u, "")
    .replaceAll("-", "")
    .replaceAll("'", ""); // "Varma's" is Varma
  if (cpLen(w) > 5) w = w.replace(/^(?:al|el)(?=[^aeiouy])/u, "");
  w = w.replace(/(?<=[aeiou])m(?=[kgtdcjsz])/gu, "n");
  // Without vowels a doubled consonant is one ("mhmd" of "محمد", "Mohammed"); a "." keeps apart
  // the letters of two Arabic ones ("z.h" of "زه" is no "zh").
  return soundKey(w).replaceAll(".", "").replace(/([^\n])\1+/gu, "$1");
}

const ARABIC = new RegExp(`[${ARABIC_NAMED}]`, "u");

/**
 * An Arabic-script name in Latin letters for `latinKey` (vowels are what romanizations disagree
 * on, and the key has none): anyAscii of each word, without its article "ال".
 */
export function arabicRomanizations(name: string): Set<string> {
  if (!ARABIC.test(name)) return new Set();
  const words = splitWords(name).map((w) =>
    [...(w.startsWith("ال") && cpLen(w) > 3 ? w.slice(2) : w)].map((c) => anyAscii(c)).join("."),
  );
  return words.every((w) => w !== "") ? new Set([words.join(" ")]) : new Set();
}

// A word in Cyrillic or Greek letters (with their accents).
const OTHER_SCRIPT_WORD = /[\u0300-\u036f\u0370-\u03ff\u0400-\u04ff]+/gu;

/** A registered string's pattern: whether it must start at a word boundary, and the rest. */
interface Branch {
  bounded: boolean;
  body: string;
}

function wordPattern(norm: string): Branch {
  const body = norm
    .split(" ")
    .map((w) => literal(w))
    .join(`${S}+`);
  // Word boundaries only where the string itself starts or ends with a word character, so
  // "user.one@example.invalid" still matches inside "<user.one@example.invalid>".
  const head = firstChar(norm);
  const end = [...norm].pop() ?? "";
  const right = isAlnum(end) || end === "_" ? `(?!${W})` : "";
  return { bounded: isAlnum(head) || head === "_", body: `${body}${right}` };
}

function namePattern(norm: string): Branch {
  return { bounded: true, body: `${literal(norm)}(?:'?s)?(?!${W})` };
}

function loosePattern(core: string): Branch {
  return { bounded: true, body: `${[...core].map((c) => literal(c)).join(SEPARATOR)}(?![a-z0-9])` };
}

function encodedPattern(encoded: string): Branch {
  return { bounded: false, body: literal(encoded) };
}

/**
 * One pattern for all `strings`, the longest first (an alternation takes the first that fits),
 * each bounded one only where `boundary` (a character class) does not precede. The boundary is
 * tested once per position, not once per branch (hundreds of name variants made a lookbehind in
 * every branch 10 ms a text): where it precedes, only the unbounded branches are tried, in the
 * same order, so the first branch that fits is the one Python's alternation takes.
 */
function alternation(strings: Iterable<string>, pattern: (s: string) => Branch, boundary = W): RegExp | null {
  const branches = [...new Set(strings)]
    .map((s): [string, number] => [s, cpLen(s)])
    .sort((a, b) => b[1] - a[1])
    .map(([s]) => pattern(s));
  if (branches.length === 0) return null;
  const all = branches.map((b) => b.body).join("|");
  const free = branches.filter((b) => !b.bounded).map((b) => b.body);
  if (free.length === branches.length) return new RegExp(all, "gu");
  const source = `(?<!${boundary})(?:${all})` + (free.length > 0 ? `|(?<=${boundary})(?:${free.join("|")})` : "");
  return new RegExp(source, "gu");
}

/** A literal for a pattern outside a class: pyre's `escapeRe` escapes "-", which the `u` flag
 * refuses there. */
function literal(text: string): string {
  return text.replace(/[\\^$.*+?()[\]{}|/]/g, "\\$&");
}

function setDefault<K, V>(map: Map<K, V>, key: K, value: V): void {
  if (!map.has(key)) map.set(key, value);
}

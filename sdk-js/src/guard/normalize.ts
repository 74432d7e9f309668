/**
 * One normal form for every detector: what a text says, not how its characters are spelled
 * (port of privacy/normalize.py).
 *
 * A leak need not use the characters a pattern expects: "ｊａｎｅ＠ｅｘａｍｐｌｅ．ｃｏｍ" (full width),
 * "jаne@exаmple.com" (Cyrillic "а"), "ja\u200bne" (a zero-width space) or "JANE" all read as the
 * plain text to a person. So the detectors never match the raw text: they match `fold(text).text`
 * and map what they find back to the raw text with `Folded.span`, so the cut falls on the
 * characters that were actually drafted.
 *
 * The fold, character by character (so every folded character knows where it came from):
 * 1. compatibility decomposition (NFKD): full-width and ligature forms, mathematical letters,
 *    circled digits, non-breaking and ideographic spaces become their plain forms;
 * 2. combining marks and invisible format characters (Mn, Me, Cf) are dropped;
 * 3. confusables: look-alikes of ASCII letters and punctuation in other scripts become the ASCII
 *    character they imitate (`CONFUSABLES`, after Unicode's confusables for Latin);
 * 4. digits of every script become ASCII digits, ahead of any look-alike punctuation;
 * 5. case: lower case;
 * 6. letters spaced out one by one ("j o h n @ e x a m p l e . c o m", five or more single
 *    characters, two of them letters, with gaps of up to eight spaces or tabs) are joined; a gap
 *    more than twice the narrowest stays one space (it separates words), and one at the very end
 *    of the text is dropped;
 * 7. digits written as number words ("six six zero four", "sechs null", "cinq zéro"; English,
 *    French, German, Spanish, Italian, Portuguese, Dutch) become the digit where two or more follow
 *    each other (a lone "one" stays a word); words of the spelling alphabet ("alpha bravo seven
 *    x-ray") become their letters, joined, in a run of three or more spelled characters with two
 *    of its words at least.
 *
 * Offsets: the folded text is a JavaScript string; `starts`/`ends` hold, for each of its UTF-16
 * units, the raw UTF-16 range of the character it came from (Python holds the same per code point).
 */

import { LETTER, NOT_S, END, S_IN } from "./pyre.js";
import { CONFUSABLE_PAIRS, DIGIT_ZEROS } from "./data/normalize.js";

/** Look-alikes of ASCII letters, digits and punctuation (after NFKD), from Unicode's confusables
 * for Latin: the characters an attacker reaches for because a reader cannot tell them apart. */
export const CONFUSABLES: ReadonlyMap<string, string> = new Map(Object.entries(CONFUSABLE_PAIRS));

const DROP = /^[\p{Mn}\p{Me}\p{Cf}]$/u;
const ZS = /^\p{Zs}/u;

/** Python's `unicodedata.digit(ch)` for a decimal digit (category Nd), else null. */
function decimalDigit(cp: number): number | null {
  // DIGIT_ZEROS is sorted: the last zero at or below `cp`, and `cp` within its ten.
  let lo = 0;
  let hi = DIGIT_ZEROS.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (DIGIT_ZEROS[mid]! <= cp) lo = mid + 1;
    else hi = mid;
  }
  const zero = lo > 0 ? DIGIT_ZEROS[lo - 1]! : -1;
  return zero >= 0 && cp - zero < 10 ? cp - zero : null;
}

const charCache = new Map<string, string>();

/** One character outside ASCII, folded (steps 1-5). */
function foldChar(ch: string): string {
  const cached = charCache.get(ch);
  if (cached !== undefined) return cached;
  const digit = decimalDigit(ch.codePointAt(0)!);
  let out: string;
  if (digit !== null) {
    out = String(digit);
  } else {
    const parts: string[] = [];
    for (const d of ch.normalize("NFKD")) {
      if (DROP.test(d)) continue;
      let c = CONFUSABLES.get(d) ?? d;
      if (ZS.test(c)) c = " ";
      parts.push(c);
    }
    out = parts.join("").toLowerCase();
  }
  if (charCache.size >= 4096) charCache.clear();
  charCache.set(ch, out);
  return out;
}

/** `text` folded, and for each folded UTF-16 unit the raw `[start, end)` it came from. */
export class Folded {
  constructor(
    readonly raw: string,
    readonly text: string,
    readonly starts: readonly number[],
    readonly ends: readonly number[],
  ) {}

  /** The raw range of folded `[start, end)` (an empty range maps to an empty raw range). */
  span(start: number, end: number): [number, number] {
    if (start >= this.text.length) return [this.raw.length, this.raw.length];
    const a = this.starts[start]!;
    const b = end > start ? this.ends[end - 1]! : a;
    return [a, b];
  }

  /** Python's `raw_start`: where folded index `start` begins in the raw text. */
  rawStart(start: number): number {
    return start < this.text.length ? this.starts[start]! : this.raw.length;
  }
}

const foldCache = new Map<string, Folded>();

/** The normal form every detector matches on (see the module comment); cached per text. */
export function fold(text: string): Folded {
  const hit = foldCache.get(text);
  if (hit !== undefined) {
    // Least recently used goes first: a hit moves to the end.
    foldCache.delete(text);
    foldCache.set(text, hit);
    return hit;
  }
  const parts: string[] = [];
  const starts: number[] = [];
  const ends: number[] = [];
  let i = 0;
  for (const ch of text) {
    const f = ch.charCodeAt(0) < 0x80 ? (ch === "\t" ? " " : ch.toLowerCase()) : foldChar(ch);
    parts.push(f);
    for (let k = 0; k < f.length; k++) {
      starts.push(i);
      ends.push(i + ch.length);
    }
    i += ch.length;
  }
  const folded = digitWords(joinSpaced(new Folded(text, parts.join(""), starts, ends)));
  if (foldCache.size >= 256) foldCache.delete(foldCache.keys().next().value!);
  foldCache.set(text, folded);
  return folded;
}

// Five or more single characters, each followed by a gap of spaces (tabs are spaces by now):
// "j o h n @ e x a m p l e", "j   o   h   n". A run that reaches the end of the text takes its
// trailing gap along: the text is still being drafted, and the next character may go on with the
// run ("t o r v a l d . " + "s"), so the gap must not end the word a hazard is holding.
const SPACED = new RegExp(
  `(?<!${NOT_S})(?:${NOT_S} {1,8}){4,}(?:${NOT_S} {1,8}${END}|${NOT_S}(?!${NOT_S}))`,
  "gu",
);
const SPACED_LETTER = new RegExp(`^\\p{L}$`, "u");

/** `f` with letters spaced out one by one joined (step 6 of the module comment). */
function joinSpaced(f: Folded): Folded {
  const runs = [...f.text.matchAll(SPACED)].filter(
    (m) => m[0].split(" ").filter((c) => SPACED_LETTER.test(c)).length >= 2,
  );
  if (runs.length === 0) return f;
  const n = f.text.length;
  const keep: boolean[] = new Array<boolean>(n).fill(true);
  for (const m of runs) {
    const at = m.index!;
    const gaps = [...m[0].matchAll(/ +/g)];
    const narrow = Math.min(...gaps.filter((g) => at + g.index! + g[0].length < n).map((g) => g[0].length));
    for (const g of gaps) {
      const a = at + g.index!;
      const b = a + g[0].length;
      // The narrowest gaps separate letters (an uneven hand may add a space here and there); one
      // more than twice as wide separates words and stays one space. A gap at the very end is
      // dropped whatever its width (see `SPACED`).
      const stop = g[0].length <= 2 * narrow || b === n ? b : b - 1;
      for (let i = a; i < stop; i++) keep[i] = false;
    }
  }
  let text = "";
  const starts: number[] = [];
  const ends: number[] = [];
  for (let i = 0; i < n; i++) {
    if (!keep[i]) continue;
    text += f.text[i]!;
    starts.push(f.starts[i]!);
    ends.push(f.ends[i]!);
  }
  return new Folded(f.raw, text, starts, ends);
}

// Number words of the digits, as folded (accents gone: "zéro" is "zero", "fünf" is "funf").
const DIGIT_WORD_TABLE = new Map<string, string>();
for (const digits of [
  "zero one two three four five six seven eight nine", // English
  "zero un deux trois quatre cinq six sept huit neuf", // French
  "null eins zwei drei vier funf sechs sieben acht neun", // German
  "cero uno dos tres cuatro cinco seis siete ocho nueve", // Spanish
  "zero uno due tre quattro cinque sei sette otto nove", // Italian
  "zero um dois tres quatro cinco seis sete oito nove", // Portuguese
  "nul een twee drie vier vijf zes zeven acht negen", // Dutch
]) {
  digits.split(" ").forEach((w, i) => {
    if (!DIGIT_WORD_TABLE.has(w)) DIGIT_WORD_TABLE.set(w, String(i));
  });
}
for (const [w, d] of [["une", "1"], ["ein", "1"], ["fuenf", "5"], ["zwo", "2"], ["oh", "0"]] as const) {
  DIGIT_WORD_TABLE.set(w, d);
}

// The spelling alphabet (ICAO/NATO): "alpha bravo seven" spells "ab7". Its words are read as
// letters only in a run of three or more spelled characters with two of its words at least
// ("echo one two" stays a command, "Delta Air" a name).
const SPELLING_WORDS: ReadonlyMap<string, string> = new Map(
  (
    "alpha alfa bravo charlie delta echo foxtrot golf hotel india juliett juliet kilo lima mike november " +
    "oscar papa quebec romeo sierra tango uniform victor whiskey whisky xray x-ray yankee zulu"
  )
    .split(" ")
    .map((w) => [w, w[0]!]),
);

/** An alternation of `words`, the longest first (the words are letters and "-": no escapes). */
function alternation(words: Iterable<string>): string {
  return "(?:" + [...words].sort((a, b) => b.length - a.length).join("|") + ")";
}

const SPELLING_WORD = alternation(SPELLING_WORDS.keys());
const DIGIT_WORD = alternation(DIGIT_WORD_TABLE.keys());
const SEP = `[${S_IN},.;:/-]{1,3}`;
// Two or more number words with separators between. Not one alone, even at the end of a text
// being drafted: "Test User One" is a name, "this one" a phrase (the first word of a spelled PIN
// may go up before the second makes a run; the rest is held).
const DIGIT_RUN = new RegExp(`(?<!${LETTER})${DIGIT_WORD}(?:${SEP}${DIGIT_WORD})+(?!${LETTER})`, "gu");

/** The number words of the digits, as folded. */
export const DIGIT_WORDS: ReadonlySet<string> = new Set(DIGIT_WORD_TABLE.keys());
/** The proper prefixes of the number words: the end of a text still being drafted ("huit trois
 * ne" is "8 3" and maybe the start of "neuf"). */
export const DIGIT_WORD_PREFIXES: ReadonlySet<string> = new Set(
  [...DIGIT_WORDS].flatMap((w) => Array.from({ length: w.length - 1 }, (_, i) => w.slice(0, i + 1))),
);

const SPELLED = `(?:${SPELLING_WORD}|${DIGIT_WORD})`;
const SPELLED_RUN = new RegExp(`(?<!${LETTER})${SPELLED}(?:${SEP}${SPELLED}){2,}(?!${LETTER})`, "gu");
const ONE_SPELLED = new RegExp(`(?<!${LETTER})${SPELLED}(?!${LETTER})`, "gu");
const SPELLED_TABLE: ReadonlyMap<string, string> = new Map([...DIGIT_WORD_TABLE, ...SPELLING_WORDS]);

interface Run {
  start: number;
  end: number;
}

function runOf(m: RegExpMatchArray): Run {
  return { start: m.index!, end: m.index! + m[0].length };
}

/** `f` with runs of number words as digits, and of the spelling alphabet's words as their letters,
 * joined (step 7 of the module comment). */
function digitWords(f: Folded): Folded {
  const spelled = [...f.text.matchAll(SPELLED_RUN)]
    .filter((m) => [...m[0].matchAll(ONE_SPELLED)].filter((w) => SPELLING_WORDS.has(w[0])).length >= 2)
    .map(runOf);
  const digits = [...f.text.matchAll(DIGIT_RUN)].map(runOf).filter((r) => !spelled.some((s) => overlap(r, s)));
  const runs = [...spelled, ...digits];
  if (runs.length === 0) return f;
  const out = replaceWords(
    f,
    runs.sort((a, b) => a.start - b.start),
    ONE_SPELLED,
    SPELLED_TABLE,
  );
  // Spelled letters are single characters now: joined like letters spaced out (step 6).
  return spelled.length > 0 ? joinSpaced(out) : out;
}

// A run of the spelling alphabet's words at the end of a text still being drafted ("alpha", "alpha
// bravo se"): it may go on spelling a secret, and is read as letters only from its third word.
const SPELLED_TAIL = new RegExp(
  `(?<!${LETTER})${SPELLING_WORD}(?:${SEP}${SPELLED})*(?:${SEP}[a-z-]*)?${END}`,
  "u",
);

/** Where a trailing run of spelling-alphabet words starts in lower-case `text` (its last word may
 * be half written), or null. */
export function spelledTail(text: string): number | null {
  // Python looks at the last 160 code points.
  let from = text.length;
  for (let n = 0; n < 160 && from > 0; n++) {
    const low = text.charCodeAt(from - 1);
    const high = from > 1 ? text.charCodeAt(from - 2) : 0;
    from -= low >= 0xdc00 && low <= 0xdfff && high >= 0xd800 && high <= 0xdbff ? 2 : 1;
  }
  const m = SPELLED_TAIL.exec(text.slice(from));
  if (m === null) return null;
  const last = /[a-z-]*$/.exec(m[0])![0];
  if (
    last &&
    !SPELLING_WORDS.has(last) &&
    !DIGIT_WORDS.has(last) &&
    ![...SPELLING_WORDS.keys(), ...DIGIT_WORDS].some((w) => w.startsWith(last))
  ) {
    return null;
  }
  return from + m.index;
}

function overlap(a: Run, b: Run): boolean {
  return a.start < b.end && b.start < a.end;
}

/** `f` with each word of `runs` replaced by its character in `table` (`word`: a global pattern). */
function replaceWords(f: Folded, runs: Run[], word: RegExp, table: ReadonlyMap<string, string>): Folded {
  const text: string[] = [];
  const starts: number[] = [];
  const ends: number[] = [];
  let last = 0;
  for (const run of runs) {
    // Python's `finditer(text, start, end)`: look-behind sees before `start`, nothing past `end`.
    const scope = f.text.slice(0, run.end);
    word.lastIndex = run.start;
    for (let w = word.exec(scope); w !== null; w = word.exec(scope)) {
      copy(f, last, w.index, text, starts, ends);
      // The digit stands for the whole word as drafted.
      text.push(table.get(w[0])!);
      starts.push(f.starts[w.index]!);
      ends.push(f.ends[w.index + w[0].length - 1]!);
      last = w.index + w[0].length;
    }
  }
  copy(f, last, f.text.length, text, starts, ends);
  return new Folded(f.raw, text.join(""), starts, ends);
}

/** Append folded `[a, b)` of `f` with its raw ranges (no spread: a long text would overflow the stack). */
function copy(f: Folded, a: number, b: number, text: string[], starts: number[], ends: number[]): void {
  text.push(f.text.slice(a, b));
  for (let i = a; i < b; i++) {
    starts.push(f.starts[i]!);
    ends.push(f.ends[i]!);
  }
}

/** Only the folded text (for registering strings the detectors then look for). */
export function foldString(text: string): string {
  return fold(text).text;
}

/**
 * The forms a registered string can take on its way out, computed from the string itself (port of
 * privacy/registered.py).
 *
 * A canary or an identity leaks just as well in another spelling: "Doe, Jane" or "J. Doe" for the
 * registered name "Jane Doe"; the secret "482913" of "my PIN is 482913" without its template
 * phrase, or as "4 8 2 9 1 3"; the base64 or hex bytes of any of them. These functions derive those
 * forms from what is registered (no list of attack strings), for the canary detector. Everything
 * here works on folded strings (`foldString`).
 */

import anyAscii from "any-ascii";
import { wordlist } from "@scure/bip39/wordlists/english.js";
import { toBase64, toHex, utf8 } from "../bytes.js";
import { ARABIC_OR_HEBREW, LATIN_LETTERS, TRANSLIT as TRANSLIT_PAIRS } from "./data/registered.js";
import { foldString } from "./normalize.js";
import { B, splitWords } from "./pyre.js";
import { capitalize, cpLen, firstChar, isAlpha, reversed, rot13, strip } from "./pystr.js";
import { cleanText } from "./spans.js";

/** English words that are also common first names: alone, they say nothing about a person. */
export const WORD_NAMES: ReadonlySet<string> = new Set(
  (
    "will mark bill may june april august grant rich art pat sue bob frank jack rose lily hope faith joy " +
    "dawn chase hunter summer autumn skip max ray earl rob guy sky river iris amber ruby pearl crystal " +
    "victor victoria dean gene miles page reed wade lane cliff glen penny carol holly ivy jean lou " +
    "don jo al ed tom van red win sam del rod gay nick chip buck rusty sandy brook jay matt dick " +
    "john james paul david michael"
  ).split(" "),
);

/**
 * "jane q. doe" -> {"jane q. doe", "doe, jane", "doe jane", "j. doe", "jane doe", "doe, j.",
 * "jane.doe", "jane_doe", "doe.jane", "doe_jane", and "janedoe", "jane-doe" where no word could be
 * meant}: the written forms and the handles (`@janedoe`) a developer's text names people by. Not
 * "jdoe": an initial and a surname is too often a word ("S. Hall" is "shall", "W. Hen" is "when").
 */
export function nameVariants(name: string): Set<string> {
  const words = splitWords(name);
  if (words.length < 2) return new Set([name]);
  const first = words[0]!;
  const last = words[words.length - 1]!;
  const initial = firstChar(first);
  const out = new Set([
    name,
    `${first} ${last}`,
    `${last}, ${first}`,
    `${last} ${first}`,
    `${initial}. ${last}`,
    `${initial}.${last}`,
    `${last}, ${initial}.`,
    `${first}.${last}`,
    `${first}_${last}`,
    `${last}.${first}`,
    `${last}_${first}`,
  ]);
  // Joined, a name may be a word ("Frank Lin" is "franklin", "Will Power" "willpower", "Max Well"
  // "maxwell"): only a first name that is no word (`WORD_NAMES`) joins its surname.
  if (!WORD_NAMES.has(first.toLowerCase()) && cpLen(first) >= 3 && cpLen(last) >= 3) {
    out.add(`${first}${last}`);
    out.add(`${first}-${last}`);
  }
  if (words.length > 2) out.add(`${last}, ${words.slice(0, -1).join(" ")}`);
  return out;
}

/** First names that identify one registered person (`unambiguous`). */
export function unambiguousFirstNames(names: Iterable<string>, common: Iterable<string> = []): Set<string> {
  return unambiguous(partsOf(names, (w) => w[0]!), common);
}

/** Surnames that identify one registered person, by the first names' rule (`unambiguous`). */
export function unambiguousSurnames(names: Iterable<string>, common: Iterable<string> = []): Set<string> {
  return unambiguous(partsOf(names, (w) => w[w.length - 1]!), common);
}

function partsOf(names: Iterable<string>, pick: (words: string[]) => string): string[] {
  return [...names].map(splitWords).filter((w) => w.length >= 2).map(pick);
}

/** The parts of 3+ letters that no other registered name shares and that are no word (`WORD_NAMES`,
 * a common English word of `commonEnglishWords`, or one of `common`: what the history writes in
 * lower case). "Black" of "Mark Black" alone is the colour ("Run Black", "Black formats it") as
 * often as the person; the whole name is still found. */
function unambiguous(parts: string[], common: Iterable<string>): Set<string> {
  const words = new Set([...[...common].map((w) => w.toLowerCase()), ...WORD_NAMES, ...commonEnglishWords()]);
  return new Set(
    parts.filter(
      (p) =>
        cpLen(p) >= 3 &&
        isAlpha(p) &&
        parts.filter((q) => q === p).length === 1 &&
        !words.has(p.toLowerCase()),
    ),
  );
}

let englishWords: ReadonlySet<string> | undefined;

/** 2,048 common English words: BIP-39's English list (the Python guard's `mnemonic` list, the same
 * words), chosen for being everyday words ("black", "young", "stone", "price", "rose"). */
export function commonEnglishWords(): ReadonlySet<string> {
  englishWords ??= new Set(wordlist);
  return englishWords;
}

/** Logins a name makes that `nameVariants` leaves out: initial + surname ("mvanterpool"), first
 * name + initial ("maelisv", "maelis.v"), only where the parts are no words (`common`,
 * `WORD_NAMES`) and long enough that the join is no word either: "S. Hall" is "shall", "W. Hen"
 * "when", so a surname of five letters or more. */
export function nameHandles(name: string, common: Iterable<string> = []): Set<string> {
  const words = splitWords(name);
  if (words.length < 2) return new Set();
  const first = words[0]!;
  const last = words[words.length - 1]!;
  const skip = new Set([...[...common].map((w) => w.toLowerCase()), ...WORD_NAMES]);
  const out = new Set<string>();
  if (isAlpha(last) && cpLen(last) >= 5 && !skip.has(last.toLowerCase())) {
    out.add(`${firstChar(first)}${last}`);
  }
  if (isAlpha(first) && cpLen(first) >= 4 && !skip.has(first.toLowerCase())) {
    out.add(`${first}${firstChar(last)}`);
    out.add(`${first}.${firstChar(last)}`);
  }
  return out;
}

const CORE = /[A-Za-z0-9][A-Za-z0-9_-]*[A-Za-z0-9]/g;

/** The part of a canary that is secret, without its template phrase ("my pin is 482913" ->
 * "482913"): a word with a digit in it and 4+ characters; a canary without one is its own core. */
export function secretCores(canary: string): Set<string> {
  const cores = new Set([...canary.matchAll(CORE)].map((m) => m[0]).filter((w) => w.length >= 4 && /[0-9]/.test(w)));
  return cores.size > 0 ? cores : new Set([canary]);
}

/**
 * The base64 characters that `data` fixes wherever it sits in a longer encoded byte string.
 *
 * base64 turns 3 bytes into 4 characters, so a string's encoding depends on its offset mod 3
 * within the encoded input. For each offset, only the characters whose 6 bits all come from
 * `data` are kept; one of the three then occurs in any encoding that contains `data`.
 */
export function base64Fragments(data: Uint8Array): Set<string> {
  const out = new Set<string>();
  for (let offset = 0; offset < 3; offset++) {
    const padded = new Uint8Array(offset + data.length + 3);
    padded.set(data, offset);
    const enc = toBase64(padded);
    const lo = Math.ceil((8 * offset) / 6); // first character that starts at or after the data's first bit
    const hi = Math.floor((8 * (offset + data.length)) / 6); // characters ending at or before its last bit
    const frag = enc.slice(lo, hi);
    if (frag.length >= 6) {
      out.add(frag);
      out.add(frag.replace(/[+/]/g, (c) => (c === "+" ? "-" : "_"))); // the URL-safe alphabet
    }
  }
  return out;
}

/** The characters of a base64 or hex encoding, as the folded text spells them. */
export const ENCODED_CHARS: ReadonlySet<string> = new Set("abcdefghijklmnopqrstuvwxyz0123456789+/=_-");

/** A match of a registered encoding widened to the whole run of encoding characters around it: the
 * span covers the encoded token as written, not only the part that matched. */
export function widenEncoded(text: string, start: number, end: number): [number, number] {
  while (start > 0 && ENCODED_CHARS.has(text[start - 1]!)) start--;
  while (end < text.length && ENCODED_CHARS.has(text[end]!)) end++;
  return [start, end];
}

/**
 * {encoded form: kind} for each registered string of `minLen`+ characters: hex and base64, and the
 * string reversed and in ROT13 (folded).
 *
 * Matched as folded (lower-case) substrings: hex case does not matter, and a base64 fragment of 8+
 * characters matching in another case by chance is as unlikely as any 40-bit collision.
 */
export function encodings(
  strings: Iterable<readonly [string, string]>,
  options: { minLen?: number } = {},
): Map<string, string> {
  const minLen = options.minLen ?? 6;
  const out = new Map<string, string>();
  const setDefault = (key: string, kind: string): void => {
    if (!out.has(key)) out.set(key, kind);
  };
  for (const [text, kind] of strings) {
    if (cpLen(text) < minLen) continue;
    const forms = new Set([text, text.replaceAll(" ", "")]);
    // Written backwards or in ROT13 a string is as readable as it is: registered as folded text,
    // matched like an encoding (a substring of the folded draft).
    for (const form of forms) {
      for (const other of [reversed(form), rot13(form)]) {
        const folded = foldString(cleanText(other));
        if (folded !== foldString(cleanText(form))) setDefault(folded, kind);
      }
    }
    for (const form of forms) {
      // A lone surrogate has no UTF-8 bytes; encoded as U+FFFD, as a tokenizer would see it.
      const data = utf8.encode(cleanText(form));
      setDefault(toHex(data), kind);
      for (const frag of base64Fragments(data)) setDefault(frag.toLowerCase(), kind);
    }
  }
  return out;
}

// Cyrillic and Greek letters as they are romanized (after `fold`, which has already turned the
// letters that look Latin into their look-alikes: "а" is "a", "с" is "c", "р" is "p", "н" is "h").
// A name written in another script ("Алиса", "Μάρκος") is that name: transliterated, it is compared
// by its sound (`soundKey`), since romanizations differ ("Alisa" for "Alice").
const TRANSLIT: ReadonlyMap<string, string> = new Map(Object.entries(TRANSLIT_PAIRS));
// The look-alikes `fold` maps by their shape, read by their sound where the whole word is in another
// script ("h" of "н" is an "n", "p" of "р" an "r", "c" of "с" an "s").
const SOUND_OF_LOOKALIKE: ReadonlyMap<string, string> = new Map(
  Object.entries({ h: "n", p: "r", c: "s", b: "v", y: "u", x: "kh", "3": "z", "6": "b" }),
);
const OTHER_SCRIPT = /[\u0370-\u03ff\u0400-\u04ff]/u;

/** A word written in Cyrillic or Greek, romanized (lower case; empty if it has Latin letters too: a
 * mix of scripts is a homoglyph's disguise, which `fold` reads by shape). */
export function transliterate(rawWord: string): string {
  if (/[A-Za-z]/.test(rawWord) || !OTHER_SCRIPT.test(rawWord)) return "";
  let out = "";
  for (const ch of foldString(rawWord)) out += TRANSLIT.get(ch) ?? SOUND_OF_LOOKALIKE.get(ch) ?? ch;
  return out;
}

const ONE_SOUND: readonly (readonly [string, string])[] = [
  ["dzh", "j"], ["zh", "j"], ["dj", "j"], ["kh", "h"], ["ph", "f"], ["th", "t"], ["ck", "k"],
  ["ch", "k"], ["q", "k"], ["x", "ks"], ["w", "v"], ["y", "i"],
];

/** A name's sound, the same for its romanizations: "alice", "alisa" -> "als"; "black", "blek" ->
 * "blk"; "john", "dzhon" -> "jn". The first letter, then the consonants (vowels are what
 * romanizations disagree on), after the spellings of one sound are made one. */
export function soundKey(word: string): string {
  let w = word.toLowerCase();
  for (const [a, b] of ONE_SOUND) w = w.replaceAll(a, b);
  w = w.replace(/c(?=[eiy])/g, "s").replaceAll("c", "k");
  // "john", "thomas": an h after the first letter is not heard.
  const head = w.length > 0 ? firstChar(w) : "";
  w = head + w.slice(head.length).replaceAll("h", "");
  w = w.replace(/([^\n])\1+/gu, "$1"); // Python's "." is any character but a newline
  if (!w) return "";
  const first = firstChar(w);
  return first + w.slice(first.length).replace(/[aeiou]/g, "");
}

// Korean surnames as they are written in Latin letters, not as the Revised Romanization spells them.
const KOREAN_SURNAMES: ReadonlyMap<string, readonly string[]> = new Map(
  Object.entries({
    gim: ["kim"], i: ["lee", "yi", "rhee"], bag: ["park", "pak"], choe: ["choi"], jeong: ["jung", "chung"],
    jo: ["cho"], gang: ["kang"], yun: ["yoon"], jang: ["chang"], im: ["lim"], han: ["hahn"], sin: ["shin"],
  }),
);

/** Whether code point `cp` is in the sorted inclusive `ranges`. */
function inRanges(cp: number, ranges: readonly (readonly [number, number])[]): boolean {
  let lo = 0;
  let hi = ranges.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (ranges[mid]![1] < cp) lo = mid + 1;
    else hi = mid;
  }
  return lo < ranges.length && ranges[lo]![0] <= cp;
}

/**
 * A name written in another script as it is written in Latin letters (issue #49): anyascii's
 * romanization ("Дмитрий Соколов" -> "Dmitriy Sokolov"), with the common spellings of its endings
 * ("Dmitry", "Dmitrii"); a Chinese or Korean name's syllables joined as its given name is ("王秀英"
 * -> "Wang Xiuying", "Xiuying Wang", "Wang Xiu-ying"), a Korean surname as it is written ("김서연" ->
 * "Kim Seo-yeon"). Empty for a name in Latin letters (folding covers its accents). Arabic script
 * loses its vowels in any romanization: no form of it is made.
 */
export function transliterations(name: string): Set<string> {
  const chars = [...name];
  // Python's `unicodedata.name(c)` holds "LATIN" (for a letter outside ASCII) or "ARABIC"/"HEBREW".
  if (chars.every((c) => c.charCodeAt(0) < 0x80 || !isAlpha(c) || inRanges(c.codePointAt(0)!, LATIN_LETTERS))) {
    return new Set();
  }
  if (chars.some((c) => inRanges(c.codePointAt(0)!, ARABIC_OR_HEBREW))) return new Set();
  const latin = strip(anyAscii(name));
  if (!latin || !/[A-Za-z]/.test(latin)) return new Set();
  const out = new Set([latin]);
  const words = splitWords(latin);
  const syllables = words.map((w) => w.match(/[A-Z][a-z]*|[a-z]+/g) ?? []);
  if (words.length === 1 && syllables[0]!.length >= 2) {
    // One word of capitalized syllables: a CJK name, surname first.
    const [family, ...given] = syllables[0]!;
    const joined = given[0]! + given.slice(1).map((g) => g.toLowerCase()).join("");
    const hyphened = given[0]! + given.slice(1).map((g) => "-" + g.toLowerCase()).join("");
    const families = new Set([family!, ...(KOREAN_SURNAMES.get(family!.toLowerCase()) ?? []).map(capitalize)]);
    for (const f of families) {
      for (const form of [`${f} ${joined}`, `${joined} ${f}`, `${f} ${hyphened}`, `${hyphened} ${f}`, `${f} ${given.join(" ")}`]) {
        out.add(form);
      }
    }
  }
  // The ending "-iy" of Russian names is written "-y", "-i" and "-ii" as often.
  for (const form of [...out]) {
    for (const [a, b] of [["iy", "y"], ["iy", "i"], ["iy", "ii"], ["yy", "y"]] as const) {
      const changed = form.replace(new RegExp(`${a}${B}`, "gu"), b);
      if (changed !== form) out.add(changed);
    }
  }
  return out;
}

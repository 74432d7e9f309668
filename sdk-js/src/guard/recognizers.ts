/**
 * Port of privacy/recognizers.py (its first part: phones, cards, national identifiers, secrets,
 * wrapped emails; keyword values, shapes and seed phrases are in keyword_values.ts, shapes.ts and
 * seed_phrase.ts).
 *
 * Recognition by the libraries made for each kind, behind the guard's own streaming: the guard
 * decides per round, on a growing text, where a span may still be forming (`hazard`); no library
 * streams, so that part stays ours. What a complete span *is* comes from well-kept libraries:
 *
 * - phone numbers: libphonenumber (`libphonenumber-js/max`, leniency POSSIBLE: an unassigned range
 *   is still a number someone wrote) for numbers written with a country code ("+44 ...",
 *   "(+44) ...", "0044 ..."), also where a line break or spaces split the groups; national numbers
 *   stay with pii.ts's patterns, plus digit groups and spelled digits libphonenumber calls valid in
 *   one of a few regions with strict plans (`NATIONAL_REGIONS`);
 * - payment cards: Luhn with the card lengths, in groups;
 * - national identifiers with a checksum or a fixed shape (US SSN, Spanish DNI, Dutch BSN, French
 *   NIR, Canadian SIN by `stdnum`; UK NINO by its shape);
 * - secrets: detect-secrets' vendor-key regexes (data/secret_patterns.ts, generated from the
 *   Python package), keyword values, private-key bodies, JWTs and its Shannon entropy for
 *   random-looking words.
 *
 * Known differences from the Python guard: libphonenumber-js is a port of Google's matcher with
 * its own metadata release, and it judges a number's length by the region it picks, without the
 * local-only lengths; the lengths Python's `phonenumbers` accepts are put back into its metadata
 * (data/phone_lengths.ts), and what still differs is how a few national prefixes written after a
 * country code are read ("+251 01 0920 1 9"). The Shannon entropy may differ from Python's in the
 * last bit (`Math.log` is not glibc's `log`).
 */

import { searchPhoneNumbersInText, type MetadataJson } from "libphonenumber-js/core";
import { parsePhoneNumberFromString, type CountryCode } from "libphonenumber-js/max";
import maxMetadata from "libphonenumber-js/metadata.max.json";
import { stdnum } from "stdnum";

import { PHONE_POSSIBLE_LENGTHS } from "./data/phone_lengths.js";
import { ENTROPY_CHARSET, VENDOR_PATTERNS } from "./data/secret_patterns.js";
import { DIGIT_WORD_PREFIXES, DIGIT_WORDS, fold } from "./normalize.js";
import { CARD_PREFIX, PiiDetector } from "./pii.js";
import { B, D, END, escapeRe, isSpace, matchAt, S_IN, W, W_IN } from "./pyre.js";
import { byCodePoint, capitalize, cpLen, lastChars, rstrip, strip, tailStart } from "./pystr.js";
import { CARD, EMAIL, mergeSpans, NATIONAL_ID, PHONE, SECRET, Span, type Detector } from "./spans.js";
import { luhn, stdnumValid } from "./stdnum_checks.js";

// -- text views: a transformed text that still knows where each character came from ------------

/** `text` with some substrings replaced; `raw(i)` maps an index of the view back to `text`. */
export class View {
  readonly text: string;
  private readonly index: number[];

  constructor(text: string, subs: Iterable<readonly [number, number, string]>) {
    const parts: string[] = [];
    const index: number[] = [];
    let pos = 0;
    const sorted = [...subs].sort((x, y) => x[0] - y[0] || x[1] - y[1] || byCodePoint(x[2], y[2]));
    for (const [a, b, rep] of sorted) {
      if (a < pos) continue;
      parts.push(text.slice(pos, a));
      for (let i = pos; i < a; i++) index.push(i);
      parts.push(rep);
      for (let i = 0; i < rep.length; i++) index.push(a);
      pos = b;
    }
    parts.push(text.slice(pos));
    for (let i = pos; i <= text.length; i++) index.push(i);
    this.text = parts.join("");
    this.index = index;
  }

  raw(i: number): number {
    return this.index[Math.min(i, this.index.length - 1)]!;
  }

  span(a: number, b: number): [number, number] {
    return [this.raw(a), b > a ? this.raw(b - 1) + 1 : this.raw(a)];
  }
}

function global(source: string, flags = ""): RegExp {
  return new RegExp(source, `${flags}gu`);
}

// A line break (with any indentation) or a run of spaces between two digit groups is one space;
// a leading "00" or "(00" international prefix is "+".
const DIGIT_GAP = global(String.raw`(?<=[\p{Nd})\-])[ \t]*\n[ \t]*(?=[\p{Nd}(+])|(?<=[\p{Nd})])[ \t]{2,}(?=${D})`);
const DOUBLE_ZERO = global(String.raw`(?<![${W_IN}+])00(?=[1-9]${D})`);

function phoneView(text: string): View {
  const subs: [number, number, string][] = [];
  for (const m of text.matchAll(DIGIT_GAP)) subs.push([m.index, m.index + m[0].length, " "]);
  for (const m of text.matchAll(DOUBLE_ZERO)) subs.push([m.index, m.index + m[0].length, "+"]);
  return new View(text, subs);
}

/** Phone numbers with a country code, every region, by libphonenumber (see the module comment). */
export class PhoneRecognizer implements Detector {
  find(text: string): Span[] {
    const f = fold(text);
    const view = phoneView(f.text);
    const out: Span[] = [];
    if (view.text !== f.text) {
      // A national number broken by a line break: the national patterns on the joined view.
      for (const s of new PiiDetector({ kinds: [PHONE] }).find(view.text)) {
        out.push(new Span(...f.span(...view.span(s.start, s.end)), PHONE));
      }
    }
    for (const m of f.text.matchAll(NATIONAL_PHONE)) {
      const [a, b] = f.span(m.index, m.index + m[0].length);
      // Columns of a table ("24701\t31384") are not one number.
      if (!text.slice(a, b).includes("\t") && nationalPhoneOk(m[0])) out.push(new Span(a, b, PHONE));
    }
    if (!f.text.includes("+") && !f.text.includes("00")) return mergeSpans(out);
    for (const m of searchPhoneNumbersInText(view.text, { extended: true }, possibleMetadata())) {
      let start = m.startsAt;
      // The matcher leaves out the "(" of "(+44)"; the span starts at it.
      if (start > 0 && view.text[start - 1] === "(" && view.text[start] === "+") start -= 1;
      out.push(new Span(...f.span(...view.span(start, m.endsAt)), PHONE));
    }
    return mergeSpans(out);
  }

  hazard(text: string): Span | null {
    // "(+44) 20 79" or "+44 20 7946\n" at the end may still grow into a number.
    const t0 = tailStart(text, 64);
    const tail = text.slice(t0);
    const folded = fold(tail);
    const m = PHONE_HAZARD.exec(folded.text) ?? SPELLED_PHONE_HAZARD.exec(folded.text);
    if (m === null) {
      // The first number word after a phone's cue ("my number is nine"), which folding leaves a
      // word until the second one comes.
      const first = FIRST_SPELLED_DIGIT.exec(tail.toLowerCase());
      if (first === null) return null;
      return new Span(t0 + first.indices!.groups!.word![0], text.length, PHONE);
    }
    return new Span(t0 + folded.rawStart(m.index), text.length, PHONE);
  }

  forPrompt(): Detector {
    return this;
  }
}

let possible: MetadataJson | undefined;

/**
 * libphonenumber-js's metadata with each plan's possible lengths as python `phonenumbers` judges
 * them (data/phone_lengths.ts): by the calling code's main region, local-only lengths included
 * ("+44 7560" is possible there, not in libphonenumber-js).
 */
function possibleMetadata(): MetadataJson {
  if (possible === undefined) {
    // A plan is [calling code, IDD prefix, national pattern, possible lengths, ...].
    const withLengths = (plans: Record<string, unknown[]>): Record<string, unknown[]> =>
      Object.fromEntries(
        Object.entries(plans).map(([key, plan]) => {
          const lengths = PHONE_POSSIBLE_LENGTHS[String(plan[0])];
          return [key, lengths === undefined ? plan : [...plan.slice(0, 3), lengths, ...plan.slice(4)]];
        }),
      );
    possible = {
      ...maxMetadata,
      countries: withLengths(maxMetadata.countries as Record<string, unknown[]>),
      nonGeographic: withLengths(maxMetadata.nonGeographic),
    };
  }
  return possible;
}

/** Longest first, so an alternation takes the whole word. */
function alternatives(words: Iterable<string>): string {
  return [...words]
    .sort((x, y) => cpLen(y) - cpLen(x))
    .map(escapeRe)
    .join("|");
}

// A number in a national format, without its country code: digit groups with single spaces or
// hyphens ("98765 43210"), an area code in parentheses ("(11) 91234-5678"), or single digits a row
// of number words folded to. Only what libphonenumber calls a valid number of one of
// `NATIONAL_REGIONS` counts: a build number or a count is not one.
const NATIONAL_PHONE = global(
  String.raw`(?<![${W_IN}.+\-/:#])(?:(?:\(${D}{2,4}\)[ ]?)?${D}{2,5}(?:[ \-]${D}{2,5}){1,4}|${D}(?:,? ${D}){8,11})` +
    String.raw`(?![${W_IN}\-/:]|[.,]${D})`,
);
// Single digits a row of number words folded to, still being written: the number may go on; held
// from its first digit.
const FIRST_SPELLED_DIGIT = new RegExp(
  String.raw`(?:number|phone|mobile|cell|call|text|whatsapp|ring|reach|dial|tel)${B}[^.\n]{0,16}?(?<!${W})(?<word>(?:` +
    alternatives(DIGIT_WORDS) +
    String.raw`)?,?[ ]?(?:` +
    alternatives(new Set([...DIGIT_WORD_PREFIXES, ...DIGIT_WORDS])) +
    `))${END}`,
  "du",
);
const SPELLED_PHONE_HAZARD = new RegExp(
  String.raw`(?<![${W_IN}.+\-/:#])${D}(?:,? ${D}){1,11}(?:,? (?:` +
    alternatives(new Set([...DIGIT_WORD_PREFIXES, ...DIGIT_WORDS])) +
    String.raw`))?,? ?${END}`,
  "u",
);
// Regions whose numbering plans are strict enough that a valid national number is rarely a run of
// counts (Germany, China, Indonesia, Nigeria and North America accept most 10-12 digit strings).
const NATIONAL_REGIONS: readonly CountryCode[] = [
  "IN", "BR", "GB", "FR", "ES", "IT", "NL", "SE", "PL", "JP", "KR", "AU", "MX", "AR", "RU", "TR", "ZA", "PH",
];
const DATE_LIKE = new RegExp(String.raw`${D}{4}-${D}{2}-${D}{2}|${D}{2}-${D}{2}-${D}{4}`, "u");

function nationalPhoneOk(group: string): boolean {
  const digits = group.replace(/\P{Nd}/gu, "");
  const n = cpLen(digits);
  if (!(n >= 9 && n <= 12) || DATE_LIKE.test(group)) return false;
  // Spelled digits with commas between groups ("9 3 6 5 6, 3 2 4 4 5"): parsed as the digits.
  const written = group.includes(",") ? digits : group;
  // A row of counting digits ("1 2 3 4 5 6 7 8 9 0") is a keyboard or a list, not a number.
  const values = [...digits].map(digitValue);
  if (values.slice(1).every((v, i) => (((v - values[i]!) % 10) + 10) % 10 === 1)) return false;
  return NATIONAL_REGIONS.some((region) => parsePhoneNumberFromString(written, region)?.isValid() === true);
}

/** Python's `int()` of one decimal digit of any script. */
function digitValue(ch: string): number {
  const cp = ch.codePointAt(0)!;
  if (cp < 0x80) return cp - 0x30;
  // Decimal digits come in runs of ten code points from a zero whose code point ends in 0 or 6.
  for (let zero = cp; zero > cp - 10; zero--) {
    if (!/\p{Nd}/u.test(String.fromCodePoint(zero - 1))) return cp - zero;
  }
  return cp % 10;
}

const PHONE_HAZARD = new RegExp(
  String.raw`(?<![${W_IN}+])(?:\([${S_IN}]*\+?|\+[${S_IN}]*\(?)${D}[\p{Nd}${S_IN}().\-/]{0,24}${END}` +
    String.raw`|(?<![${W_IN}+])\(?00${D}[\p{Nd}${S_IN}().\-/]{0,24}${END}` +
    // An area code in parentheses, and the digits after it ("(11) 9123"): a national number begins.
    String.raw`|(?<![${W_IN}+])\(${D}{2,4}\)[ ]?${D}{0,5}(?:-${D}{0,4})?${END}`,
  "u",
);

// -- payment cards --------------------------------------------------------------------------------

const CARD_CANDIDATE = global(
  String.raw`(?<![${W_IN}.,-])${D}(?:(?:[ .\-]{1,3}|[ ]*\n[ ]*)?${D}){12,18}(?![${W_IN}-]|[.,]${D})`,
);

function cardOk(raw: string): boolean {
  const groups = raw.split(/\P{Nd}+/u).filter((g) => g.length > 0);
  const digits = groups.join("");
  const n = cpLen(digits);
  if (!(n >= 13 && n <= 19) || matchAt(CARD_PREFIX, digits) === null || !luhn(digits)) return false;
  if (groups.length === 1) return true;
  const seps = new Set((raw.match(/\P{Nd}+/gu) ?? []).filter((s) => !s.includes("\n")).map((s) => strip(s, " ") || " "));
  // One kind of separator, in groups of 3+ digits (4-4-4-4, Amex 4-6-5): a table of single
  // digits or mixed punctuation is not a card.
  return seps.size <= 1 && groups.slice(0, -1).every((g) => cpLen(g) >= 3);
}

/** Card numbers grouped by spaces, hyphens, dots or line breaks; Luhn as python-stdnum's. */
export class CardRecognizer implements Detector {
  find(text: string): Span[] {
    const f = fold(text);
    const out: Span[] = [];
    for (const m of f.text.matchAll(CARD_CANDIDATE)) {
      if (cardOk(m[0])) out.push(new Span(...f.span(m.index, m.index + m[0].length), CARD));
    }
    return mergeSpans(out);
  }

  hazard(): Span | null {
    return null;
  }

  forPrompt(): Detector {
    return this;
  }
}

// -- national identifiers -------------------------------------------------------------------------

const NINO = global(String.raw`(?<![a-z0-9])(?![dfiquv])[a-z](?![dfiquvo])[a-z] ?${D}{2} ?${D}{2} ?${D}{2} ?[a-d](?![a-z0-9])`);
const SSN = global(String.raw`(?<![${W_IN}-])${D}{3}-${D}{2}-${D}{4}(?![${W_IN}-])`);
const DNI = global(String.raw`(?<![${W_IN}-])${D}{8}-?[a-z](?![${W_IN}-])`);
const NINE = global(String.raw`(?<![${W_IN}.,-])${D}{3}[ ]?${D}{3}[ ]?${D}{3}(?![${W_IN}-]|[.,]${D})`);
const NIR = global(
  String.raw`(?<![${W_IN}.,-])[12][ ]?${D}{2}[ ]?${D}{2}[ ]?(?:${D}{2}|2[ab])[ ]?${D}{3}[ ]?${D}{3}[ ]?${D}{2}(?![${W_IN}-]|[.,]${D})`,
);

/**
 * python-stdnum's `is_valid` for the identifiers found here that stdnum_checks.ts (the keyword and
 * shape recognizers' table) does not hold.
 */
function idValid(country: "ES" | "FR", name: string, value: string): boolean {
  const validator = stdnum[country]?.[name];
  if (validator === undefined) throw new Error(`stdnum has no ${country}.${name}`);
  return validator.validate(value).isValid;
}

/** python-stdnum's `stdnum.ca.sin.is_valid`: stdnum-js's misses its rule that no SIN starts with 0 or 8. */
function caSin(value: string): boolean {
  const v = value.replace(/[ -]/g, "").trim();
  return /^[1-79][0-9]{8}$/.test(v) && luhn(v);
}

/** National identifiers with a checksum or a fixed shape (see the module comment). */
export class NationalIdRecognizer implements Detector {
  find(text: string): Span[] {
    const f = fold(text);
    const t = f.text;
    const out: [number, number][] = [];
    const add = (pattern: RegExp, ok: (v: string) => boolean): void => {
      for (const m of t.matchAll(pattern)) if (ok(m[0])) out.push([m.index, m.index + m[0].length]);
    };
    add(NINO, () => true);
    add(SSN, (v) => stdnumValid("us.ssn", v));
    add(DNI, (v) => idValid("ES", "dni", v.toUpperCase()));
    add(NIR, (v) => idValid("FR", "nir", v.toUpperCase()));
    add(NINE, (v) => (!v.includes(" ") && stdnumValid("nl.bsn", v)) || caSin(v));
    return mergeSpans(out.map(([a, b]) => new Span(...f.span(a, b), NATIONAL_ID)));
  }

  hazard(text: string): Span | null {
    const t0 = tailStart(text, 24);
    const f = fold(text.slice(t0));
    const m = NINO_HAZARD.exec(f.text);
    return m === null ? null : new Span(t0 + f.rawStart(m.index), text.length, NATIONAL_ID);
  }

  forPrompt(): Detector {
    return this;
  }
}

const NINO_HAZARD = new RegExp(String.raw`(?<![a-z0-9])[a-z]{2} (?:${D}{1,2}(?: ?${D}{0,2}){0,3} ?)?${END}`, "u");

// -- secrets --------------------------------------------------------------------------------------

const SECRET_CHARS = String.raw`A-Za-z0-9+/=_\-`;
const WORD = global(`[${SECRET_CHARS}.]+`);
const JWT_PART = global(String.raw`(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{8,}(?:\.[A-Za-z0-9_\-]*){0,2}`);
const PRIVATE_KEY = global(String.raw`-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[ \t]*\n?`);
const KEY_END = /\n?-----END /gu;
// A value assigned to a secret-sounding name: "DB_PASSWORD=...", "api_key: ...",
// '"client_secret": "..."', "--password ...". The value is what is secret, whatever its characters:
// everything up to a space or a quote, as detect-secrets' KeywordDetector takes it, less a trailing
// separator ("," or ";").
const KEYWORD_NAME =
  String.raw`(?:pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|auth[_-]?key|access[_-]?key|private[_-]?key` +
  String.raw`|client[_-]?secret|credentials?)(?:[${W_IN}-]*?)["'\]]{0,2}[ \t]*(?:[:=]{1,3}|[ \t](?=["']))[ \t]*["'` +
  "`]?";
const VALUE = `[^${S_IN}"'\`]`;
const KEYWORD = global(KEYWORD_NAME + String.raw`(?<value>${VALUE}{6,}(?<![,;]))`, "di");
// Vendor keys detect-secrets 1.5.0 has no plugin for (Google API keys, fine-grained GitHub tokens,
// OpenAI project keys without the legacy marker, GitLab personal tokens).
const MORE_VENDORS = global(
  String.raw`(?<![A-Za-z0-9_\-])(?:AIza[0-9A-Za-z_\-]{35}|github_pat_[0-9A-Za-z_]{22,}|sk-(?:proj-)?[A-Za-z0-9_\-]{32,}` +
    String.raw`|glpat-[0-9A-Za-z_\-]{20})`,
);
const FLAG_NAME = "--(?:password|passwd|token|secret|api-key)[ =][\"'`]?";
const FLAG = global(FLAG_NAME + String.raw`(?<value>${VALUE}{6,}(?<![,;]))`, "di");
// The same value while it is being written: held from its first character until a space or a
// quote ends it, so its first tokens do not go up before the whole value is known.
const VALUE_HAZARD = new RegExp(`(?:${KEYWORD_NAME}|${FLAG_NAME})(?<value>${VALUE}+)${END}`, "diu");
const HEX_ONLY = /^[0-9a-fA-F-]+$/u;
// A word with a lower-case path segment ("org/git/", "//github.com/x/") is a path: split at its slashes.
const PATHLIKE = /(?:^|\/)[a-z][a-z.-]+\//u;
const PART = global(`[${SECRET_CHARS}]+`);
const PATH_PART = global(String.raw`[A-Za-z0-9+=_\-]+`);
const VENDORS: readonly RegExp[] = VENDOR_PATTERNS.map((p) => new RegExp(p.source, `${p.flags}dg`));

/** detect-secrets' `Base64HighEntropyString.calculate_shannon_entropy`: only its charset counts. */
export function shannonEntropy(data: string): number {
  const chars = [...data];
  if (chars.length === 0) return 0;
  let entropy = 0;
  for (const x of ENTROPY_CHARSET) {
    let count = 0;
    for (const c of chars) if (c === x) count++;
    const p = count / chars.length;
    if (p > 0) entropy += -p * (Math.log(p) / Math.LN2);
  }
  return entropy;
}

/**
 * A word of 16+ characters that reads as generated, not written: upper and lower case letters
 * and digits mixed with a high Shannon entropy (detect-secrets' function), no long runs of lower
 * case letters (identifiers, paths and prose have them; base64 and tokens do not). Hex-only words
 * (commit hashes, digests, UUIDs) are ordinary developer text.
 */
export function looksRandom(word: string): boolean {
  const w = strip(word, "._-=");
  const n = cpLen(w);
  // A "0x" literal is hex too ("0x9E3779B97F4A7C15", a hash's constant).
  if (n < 16 || HEX_ONLY.test(w.startsWith("0x") ? w.slice(2) : w)) return false;
  if (!(/[a-z]/.test(w) && /[A-Z]/.test(w) && /\p{Nd}/u.test(w))) return false;
  let wordy = 0;
  for (const r of w.matchAll(/[a-z]{4,}|[A-Z][a-z]{3,}/g)) wordy += r[0].length;
  if (wordy > 0.4 * n) return false;
  return shannonEntropy(w) >= Math.min(4.0, 0.78 * Math.log2(n));
}

/** The start and end of group `name` (or number) of a match made with the `d` flag. */
function groupSpan(m: RegExpExecArray, group: number | string): [number, number] {
  const span = typeof group === "number" ? m.indices![group] : m.indices!.groups![group];
  return span!;
}

/**
 * Ranges of the secrets `text` shows: vendor keys, keyword values, JWT parts, private-key
 * bodies, random-looking words.
 */
export function secretValues(text: string): [number, number][] {
  const out: [number, number][] = [];
  for (const pattern of VENDORS) {
    for (const m of text.matchAll(pattern)) {
      let g = 0;
      for (let i = 1; i < m.length; i++) {
        if (m[i]) {
          g = i;
          break;
        }
      }
      out.push(groupSpan(m, g));
    }
  }
  for (const pattern of [JWT_PART, MORE_VENDORS]) {
    for (const m of text.matchAll(pattern)) out.push([m.index, m.index + m[0].length]);
  }
  for (const pattern of [KEYWORD, FLAG]) {
    for (const m of text.matchAll(pattern)) {
      if (!namesASecret(text, m.index)) continue;
      // "password: required.", "token: see below": a word (and its full stop) is not a value.
      const value = rstrip(m.groups!.value!, ".!?:)");
      if (/[^\p{L}\p{Nl}\p{No}]/u.test(value) || (value !== value.toLowerCase() && value !== capitalize(value))) {
        out.push(groupSpan(m, "value"));
      }
    }
  }
  for (const m of text.matchAll(PRIVATE_KEY)) {
    const start = m.index + m[0].length;
    KEY_END.lastIndex = start;
    const end = KEY_END.exec(text);
    out.push([start, end === null ? text.length : end.index]);
  }
  for (const m of text.matchAll(WORD)) {
    // "AWS_REGION=eu-west-1": a setting's name is no part of its value, judged alone (a value a
    // secret's name announces is `KEYWORD`'s).
    let word = m[0];
    let start = m.index;
    const assigned = matchAt(ASSIGNED, word);
    if (assigned !== null) {
      word = word.slice(assigned[0].length);
      start += assigned[0].length;
    }
    // A URL's path or a dotted name splits into its parts; a token does not.
    for (const part of word.matchAll(PATHLIKE.test(word) ? PATH_PART : PART)) {
      if (looksRandom(part[0])) out.push([start + part.index, start + part.index + part[0].length]);
    }
  }
  return out;
}

// A setting's name before its "=" ("AWS_REGION=", "log.level="): upper or lower case words joined
// by "_", "." or "-" (base64 mixes cases, and its "=" ends it).
const ASSIGNED = /(?:[A-Z][A-Z0-9]*(?:[_.-][A-Z0-9]+)*|[a-z][a-z0-9]*(?:[_.-][a-z0-9]+)*)=(?=[^=])/u;
// The last word of a name that says the value is something about a secret, not one ("TOKEN_URL",
// "PASSWORD_MIN_LENGTH", "SECRET_KEY_FILE", "API_KEY_HEADER").
const NOT_A_SECRET_NAME: ReadonlySet<string> = new Set(
  (
    "url uri urls endpoint host hostname domain file path dir name names id type length len size ttl expiry " +
    "expires expiration timeout algo algorithm header env region policy mode format version count enabled " +
    "required min max prefix suffix location issuer audience scope scopes kind provider source label user " +
    "username rotation hint field param var"
  ).split(" "),
);
const SECRET_NAME = new RegExp(String.raw`[${W_IN}.-]{0,80}`, "u");

/**
 * The name a keyword match at `start` is part of names a secret: its last word is not one of
 * `NOT_A_SECRET_NAME` ("GITHUB_TOKEN" does, "TOKEN_URL" does not).
 */
export function namesASecret(text: string, start: number): boolean {
  const name = matchAt(SECRET_NAME, text, start)![0];
  const words = strip(name, "_.-").toLowerCase().split(/[_.-]+/);
  return !NOT_A_SECRET_NAME.has(words[words.length - 1]!);
}

// A line break inside a word (a key wrapped at 64 columns, a token broken by an editor) is not there.
const WRAP = /(?<=[A-Za-z0-9+/=_.@])[ \t]*\n[ \t]*(?=[A-Za-z0-9+/=_.@])/gu;

/** `text` with line breaks inside words removed (and one at its very end, which may be one). */
export function unwrapped(text: string): View {
  const subs: [number, number, string][] = [];
  for (const m of text.matchAll(WRAP)) subs.push([m.index, m.index + m[0].length, ""]);
  if (text.endsWith("\n") && cpLen(text) > 1 && !isSpace(lastChars(text.slice(0, -1), 1))) {
    subs.push([text.length - 1, text.length, ""]);
  }
  return new View(text, subs);
}

/** Secrets that are not registered anywhere: detect-secrets' patterns, JWTs, entropy. */
export class SecretRecognizer implements Detector {
  find(text: string): Span[] {
    const view = unwrapped(text);
    const found = secretValues(text)
      .filter(([a, b]) => b > a)
      .map(([a, b]) => new Span(a, b, SECRET));
    if (view.text !== text) {
      for (const [a, b] of secretValues(view.text)) if (b > a) found.push(new Span(...view.span(a, b), SECRET));
    }
    // Pieces of one token joined by a dot or a dash ("header.payload" of a JWT) are one span.
    const out: Span[] = [];
    for (const s of mergeSpans(found)) {
      const last = out[out.length - 1];
      if (last !== undefined && s.start - last.end <= 1 && ["", ".", "-", "_"].includes(text.slice(last.end, s.start))) {
        out[out.length - 1] = new Span(last.start, s.end, SECRET);
      } else {
        out.push(s);
      }
    }
    return out;
  }

  hazard(text: string): Span | null {
    // A private key's body runs until its END line.
    for (const k of text.matchAll(PRIVATE_KEY)) {
      KEY_END.lastIndex = k.index + k[0].length;
      if (KEY_END.exec(text) === null) return new Span(k.index + k[0].length, text.length, SECRET);
    }
    const t0 = tailStart(text, 200);
    const tail = text.slice(t0);
    // A keyword's value still being written ('DB_PASSWORD="ql'): whatever it turns out to be.
    const value = VALUE_HAZARD.exec(tail);
    if (value !== null && namesASecret(tail, value.index)) {
      return new Span(t0 + groupSpan(value, "value")[0], text.length, SECRET);
    }
    // A trailing word that already reads as generated may still grow into a key (also across a
    // line break: the next line may go on with it).
    const view = unwrapped(tail);
    let m = TRAILING_WORD.exec(view.text);
    if (m !== null && PATHLIKE.test(m[0])) m = TRAILING_PATH_PART.exec(view.text);
    let start = m?.index ?? 0;
    let word = m?.[0] ?? "";
    const assigned = m === null ? null : matchAt(ASSIGNED, word);
    if (assigned !== null) {
      // "AWS_REGION=eu-we": the value alone
      start += assigned[0].length;
      word = word.slice(assigned[0].length);
    }
    if (m !== null && randomSoFar(word)) return new Span(t0 + view.raw(start), text.length, SECRET);
    return null;
  }

  forPrompt(): Detector {
    return this;
  }
}

const TRAILING_WORD = new RegExp(`(?<![${SECRET_CHARS}.])[${SECRET_CHARS}.]+${END}`, "u");
const TRAILING_PATH_PART = new RegExp(String.raw`[A-Za-z0-9+=_\-.]+${END}`, "u");
const VENDOR_PREFIX = /(?:AKIA|ASIA|ghp_|gho_|ghs_|ghu_|github_pat_|glpat-|xox[abpors]-|sk_live_|rk_live_|sk-|SG\.|npm_|pypi-|AIza|eyJ)/uy;

function randomSoFar(word: string): boolean {
  VENDOR_PREFIX.lastIndex = 0;
  if (VENDOR_PREFIX.test(word)) return true;
  const w = strip(word, "._-=");
  const n = cpLen(w);
  if (n < 6 || HEX_ONLY.test(w)) return false;
  const classes = Number(/[a-z]/.test(w)) + Number(/[A-Z]/.test(w.slice(1))) + Number(/\p{Nd}/u.test(w));
  let wordy = 0;
  for (const r of w.matchAll(/[a-z]{3,}|[A-Z][a-z]{2,}/g)) wordy += r[0].length;
  return classes >= 2 && (w.includes("/") || w.includes("+") || w.includes("=") || classes === 3) && wordy <= 0.35 * n;
}

/**
 * An address broken by a line break ("jane.doe@exam" + newline + "ple.com"): pii.ts's email
 * patterns on the text with line breaks inside words removed.
 */
export class WrappedEmailRecognizer implements Detector {
  find(text: string): Span[] {
    const view = unwrapped(text);
    if (view.text === text) return [];
    return new PiiDetector({ kinds: [EMAIL] })
      .find(view.text)
      .map((s) => new Span(...view.span(s.start, s.end), EMAIL));
  }

  hazard(text: string): Span | null {
    const t0 = tailStart(text, 160);
    const tail = text.slice(t0);
    const view = unwrapped(tail);
    if (view.text === tail) return null;
    const h = new PiiDetector({ kinds: [EMAIL] }).hazard(view.text);
    return h === null ? null : new Span(t0 + view.raw(h.start), text.length, EMAIL);
  }

  forPrompt(): Detector {
    return this;
  }
}

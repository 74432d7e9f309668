/**
 * Python's `str` and `re`-match behaviour the port needs: `len`, slices and order in code points,
 * `strip`/`lstrip`/`rstrip`, `isalpha`/`isalnum`/`isdigit`/`isdecimal`/`isupper`, `capitalize`,
 * `splitlines`, ROT13 and UTF-8 hex, `pattern.search/fullmatch(text, pos, endpos)` and scoped
 * case-insensitivity (`(?i:...)`).
 *
 * Why it exists: the guard is a port of privacy/*.py, and JavaScript's string methods differ from
 * Python's. `trim` strips U+FEFF but not 0x1c-0x1f (Python's white space is `str.isspace()`);
 * `length` and `slice` count UTF-16 units where Python counts code points (they differ past U+FFFF);
 * `<` compares UTF-16 units; `toUpperCase`-style tests are not Unicode's case properties; Node 20's
 * RegExp has no `(?i:...)`. Pattern classes (`\w`, `\s`, `\b` as Python reads them) are in pyre.ts.
 */

import { S } from "./pyre.js";

// -- code points ------------------------------------------------------------------------------

/** The UTF-16 index where Python's `text[-n:]` starts (the last `n` code points; `n` >= 1). */
export function tailStart(text: string, n: number): number {
  let i = text.length;
  for (let k = 0; k < n && i > 0; k++) {
    i -= i >= 2 && isLow(text.charCodeAt(i - 1)) && isHigh(text.charCodeAt(i - 2)) ? 2 : 1;
  }
  return i;
}

/** Python's `text[-n:]` (`n` >= 1). */
export function lastChars(text: string, n: number): string {
  return text.slice(tailStart(text, n));
}

/** The first code point of `text` (Python's `text[0]`; "" for ""). */
export function firstChar(text: string): string {
  const c = text.codePointAt(0);
  return c === undefined ? "" : String.fromCodePoint(c);
}

/** Python's `len`: code points. */
export function cpLen(text: string): number {
  let n = 0;
  for (const ch of text) if (ch) n++;
  return n;
}

/** The code-point offset of a UTF-16 index in `text` (Python's index of the same place). */
export function codePointOffset(text: string, unit: number): number {
  return cpLen(text.slice(0, unit));
}

/** The UTF-16 index of a code-point offset in `text`. */
export function unitOffset(text: string, codePoint: number): number {
  let unit = 0;
  for (let n = 0; n < codePoint && unit < text.length; n++) {
    unit += isHigh(text.charCodeAt(unit)) && unit + 1 < text.length ? 2 : 1;
  }
  return unit;
}

/** Python's `text[::-1]`: reversed by code points. */
export function reversed(text: string): string {
  return [...text].reverse().join("");
}

/** Python's code-point order of strings (JavaScript's `<` compares UTF-16 units). */
export function byCodePoint(a: string, b: string): number {
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = x[i]!.codePointAt(0)! - y[i]!.codePointAt(0)!;
    if (d !== 0) return d;
  }
  return x.length - y.length;
}

// -- strip ------------------------------------------------------------------------------------

const LEADING_SPACE = new RegExp(`^${S}+`, "u");
const TRAILING_SPACE = new RegExp(`${S}+$`, "u");

/** Python's `str.strip()` (no argument: white space, as `str.isspace()` says), or `str.strip(chars)`. */
export function strip(text: string, chars?: string): string {
  return rstrip(lstrip(text, chars), chars);
}

/** Python's `str.lstrip()` / `str.lstrip(chars)`. */
export function lstrip(text: string, chars?: string): string {
  if (chars === undefined) return text.replace(LEADING_SPACE, "");
  let a = 0;
  while (a < text.length) {
    const ch = String.fromCodePoint(text.codePointAt(a)!);
    if (!chars.includes(ch)) break;
    a += ch.length;
  }
  return text.slice(a);
}

/** Python's `str.rstrip()` / `str.rstrip(chars)`. */
export function rstrip(text: string, chars?: string): string {
  if (chars === undefined) return text.replace(TRAILING_SPACE, "");
  let b = text.length;
  while (b > 0) {
    const start = tailStart(text.slice(0, b), 1);
    if (!chars.includes(text.slice(start, b))) break;
    b = start;
  }
  return text.slice(0, b);
}

// -- character classes ------------------------------------------------------------------------

// Python's `str.isdigit()`: decimal digits and the other characters of a digit value
// (superscripts, circled digits, ...), which `\p{Nd}` leaves out.
const PY_DIGIT = String.raw`[\p{Nd}\u{b2}-\u{b3}\u{b9}\u{1369}-\u{1371}\u{19da}\u{2070}\u{2074}-\u{2079}\u{2080}-\u{2089}\u{2460}-\u{2468}\u{2474}-\u{247c}\u{2488}-\u{2490}\u{24ea}\u{24f5}-\u{24fd}\u{24ff}\u{2776}-\u{277e}\u{2780}-\u{2788}\u{278a}-\u{2792}\u{10a40}-\u{10a43}\u{10e60}-\u{10e68}\u{11052}-\u{1105a}\u{1f100}-\u{1f10a}]`;
const DIGITS = new RegExp(`^${PY_DIGIT}+$`, "u");
const DIGIT_CHARS = new RegExp(PY_DIGIT, "gu");
const ALPHA = /^\p{L}+$/u;
const ALNUM = /^[\p{L}\p{N}]+$/u;
const UPPER = /\p{Uppercase}/u;
const LOWER = /\p{Lowercase}|\p{Lt}/u;

/** Python's `str.isalpha()`. */
export function isAlpha(text: string): boolean {
  return ALPHA.test(text);
}

/** Python's `str.isalnum()`. */
export function isAlnum(text: string): boolean {
  return ALNUM.test(text);
}

/** Python's `str.isdigit()` (decimal digits, superscripts, circled digits, ...). */
export function isDigit(text: string): boolean {
  return DIGITS.test(text);
}

/** Python's `sum(c.isdigit() for c in text)`. */
export function digitCount(text: string): number {
  return text.match(DIGIT_CHARS)?.length ?? 0;
}

/** Python's `str.isascii()`. */
export function isAscii(text: string): boolean {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) > 0x7f) return false;
  return true;
}

/** Python's `str.isupper()`: some cased character, and every cased one upper case. */
export function isUpper(text: string): boolean {
  let cased = false;
  for (const ch of text) {
    if (UPPER.test(ch)) cased = true;
    else if (LOWER.test(ch)) return false;
  }
  return cased;
}

/** Python's `ch.isalnum()` for the character of `text` that begins at UTF-16 index `start`. */
export function alnumAt(text: string, start: number): boolean {
  const cp = text.codePointAt(start);
  return cp !== undefined && isAlnum(String.fromCodePoint(cp));
}

/** Python's `ch.isalnum()` for the character of `text` that ends at UTF-16 index `end`. */
export function alnumBefore(text: string, end: number): boolean {
  if (end <= 0) return false;
  const start = end >= 2 && isLow(text.charCodeAt(end - 1)) && isHigh(text.charCodeAt(end - 2)) ? end - 2 : end - 1;
  return isAlnum(text.slice(start, end));
}

// -- transforms -------------------------------------------------------------------------------

/** Python's `str.capitalize()`: the first character upper case, the rest lower case. */
export function capitalize(text: string): string {
  const head = firstChar(text);
  return head.toUpperCase() + text.slice(head.length).toLowerCase();
}

/** Python's `str.splitlines()` (without the line ends). */
export function splitLines(text: string): string[] {
  // eslint-disable-next-line no-control-regex -- Python's line ends include 0x1c-0x1e
  const lines = text.split(/\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]/u);
  if (lines[lines.length - 1] === "") lines.pop();
  return lines;
}

/** Python's `codecs.encode(text, "rot13")`: ASCII letters rotated by 13, the rest as it is. */
export function rot13(text: string): string {
  return text.replace(/[A-Za-z]/g, (c) => {
    const base = c <= "Z" ? 65 : 97;
    return String.fromCharCode(((c.charCodeAt(0) - base + 13) % 26) + base);
  });
}

/** Python's `text.encode().hex()`: the UTF-8 bytes of `text` in lower-case hex. */
export function utf8Hex(text: string): string {
  let out = "";
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    const bytes =
      cp < 0x80
        ? [cp]
        : cp < 0x800
          ? [0xc0 | (cp >> 6), 0x80 | (cp & 63)]
          : cp < 0x10000
            ? [0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 63), 0x80 | (cp & 63)]
            : [0xf0 | (cp >> 18), 0x80 | ((cp >> 12) & 63), 0x80 | ((cp >> 6) & 63), 0x80 | (cp & 63)];
    for (const b of bytes) out += b.toString(16).padStart(2, "0");
  }
  return out;
}

// -- re: matching within bounds, scoped case-insensitivity ------------------------------------

/** Python's `pattern.search(text, pos, endpos)`: lookbehinds see before `pos`; the text ends at `endpos`. */
export function searchIn(pattern: RegExp, text: string, pos = 0, endpos = text.length): RegExpExecArray | null {
  const flags = pattern.flags.replace(/y/g, "");
  const re = new RegExp(pattern.source, flags.includes("g") ? flags : flags + "g");
  re.lastIndex = pos;
  return re.exec(endpos < text.length ? text.slice(0, endpos) : text);
}

/** Python's `pattern.fullmatch(text, pos, endpos)`. */
export function fullMatchIn(pattern: RegExp, text: string, pos = 0, endpos = text.length): RegExpExecArray | null {
  if (endpos < pos) return null;
  const flags = pattern.flags.replace(/g/g, "");
  const re = new RegExp(`(?:${pattern.source})$`, flags.includes("y") ? flags : flags + "y");
  re.lastIndex = pos;
  return re.exec(endpos < text.length ? text.slice(0, endpos) : text);
}

// Python's IGNORECASE also pairs these with ASCII letters (Kelvin sign, long s, dotless and dotted i).
const EXTRA_CASES: Readonly<Record<string, string>> = { k: "\u212a", s: "\u017f", i: "\u0131\u0130" };

/** `source` (lower-case letters, escapes, groups and classes of them, no `\p{...}`) matched
 * case-insensitively the way Python's `(?i:...)` does, inside a pattern that is otherwise
 * case-sensitive. */
export function caseless(source: string): string {
  let out = "";
  let inClass = false;
  for (let i = 0; i < source.length; i++) {
    const ch = source[i]!;
    if (ch === "\\") {
      out += ch + (source[i + 1] ?? "");
      i++;
    } else if (ch.toLowerCase() !== ch.toUpperCase()) {
      const cases = ch + ch.toUpperCase() + (EXTRA_CASES[ch] ?? "");
      out += inClass ? cases : `[${cases}]`;
    } else {
      if (ch === "[") inClass = true;
      else if (ch === "]") inClass = false;
      out += ch;
    }
  }
  return out;
}

function isHigh(c: number): boolean {
  return c >= 0xd800 && c <= 0xdbff;
}

function isLow(c: number): boolean {
  return c >= 0xdc00 && c <= 0xdfff;
}

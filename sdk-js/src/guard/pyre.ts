/**
 * Python's `re` semantics the guard's patterns were written for, spelled for JavaScript.
 *
 * The guard is a port of the Python SDK's (privacy/): its patterns match Python `str` patterns,
 * where `\w`, `\d`, `\s` and `\b` are Unicode-aware; JavaScript's are ASCII-only even with the `u`
 * flag. So a ported pattern never uses those escapes: it uses these classes (always with the `u`
 * flag), and Python's `\Z` (the very end; Python's `$` also matches before a final newline) is
 * spelled `$` only where no newline can end the text, else `(?![\s\S])`.
 *
 * Offsets: the guard works in JavaScript string indices (UTF-16 code units); Python's are code
 * points. They differ only past U+FFFF; pystr.ts's `codePointOffset`/`unitOffset` convert.
 */

/** Python's `\w` on `str` (str.isalnum() or `_`): letters and numbers of every script, and `_`. */
export const W = String.raw`[\p{L}\p{N}_]`;
/** Python's `\W`. */
export const NOT_W = String.raw`[^\p{L}\p{N}_]`;
/** Python's `[^\W\d_]`: a letter (a word character that is no digit and no underscore). */
export const LETTER = String.raw`[\p{L}\p{Nl}\p{No}]`;
/** Inside a character class: what `\w` adds there (`[\w.]` is `[${W_IN}.]`). */
export const W_IN = String.raw`\p{L}\p{N}_`;
/** Python's `\d` on `str`: a decimal digit of any script. */
export const D = String.raw`\p{Nd}`;
/** Python's `\s` on `str` (str.isspace()): JavaScript's `\s` also takes U+FEFF, Python's does not. */
export const S_IN = String.raw`\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000`;
export const S = `[${S_IN}]`;
export const NOT_S = `[^${S_IN}]`;
/** Python's `\b` and `\B` with Unicode word characters. */
export const B = `(?:(?<=${W})(?!${W})|(?<!${W})(?=${W}))`;
export const NOT_B = `(?:(?<=${W})(?=${W})|(?<!${W})(?!${W}))`;
/** Python's `\Z`: the very end of the text. */
export const END = String.raw`(?![\s\S])`;

/** A literal for a pattern outside a character class (JavaScript's `u` flag refuses Python's
 * escapes of spaces, quotes and "-": only its syntax characters are escaped). */
export function escapeRe(text: string): string {
  return text.replace(/[\\^$.*+?()[\]{}|/]/g, "\\$&");
}

/** Every match of a global pattern, as `[start, end)` pairs (Python's `m.span()` per `finditer`). */
export function spansOf(pattern: RegExp, text: string): [number, number][] {
  if (!pattern.global) throw new TypeError(`spansOf needs a global pattern: ${pattern}`);
  return [...text.matchAll(pattern)].map((m) => [m.index!, m.index! + m[0].length]);
}

/** Python's `re.fullmatch`. */
export function fullMatch(pattern: RegExp, text: string): RegExpExecArray | null {
  const flags = pattern.flags.replace(/[gy]/g, "");
  return new RegExp(`^(?:${pattern.source})$`, flags).exec(text);
}

/** Python's `pattern.match(text, pos)`: a match that starts exactly at `pos`. */
export function matchAt(pattern: RegExp, text: string, pos = 0): RegExpExecArray | null {
  const flags = pattern.flags.replace(/g/g, "");
  const sticky = new RegExp(pattern.source, flags.includes("y") ? flags : flags + "y");
  sticky.lastIndex = pos;
  return sticky.exec(text);
}

/** Python's `str.isspace()` for a whole string (false for ""). */
export function isSpace(text: string): boolean {
  return text.length > 0 && new RegExp(`^${S}+$`, "u").test(text);
}

/** Python's `str.split()` with no argument: runs of white space separate, none at either end. */
export function splitWords(text: string): string[] {
  return text.split(new RegExp(`${S}+`, "u")).filter((w) => w.length > 0);
}

/**
 * What of each secret has already gone up in one session (port of privacy/uplinked.py), so a
 * secret sent a few characters at a time, far apart, is held once its pieces add up.
 *
 * A chunk is a word of 3+ characters that occurs in a registered secret and is not a plain word.
 * A chunk is held when it covers characters of the secret that had not gone up, and those that
 * went up with it make a piece (`isPiece`); a first chunk of four characters or more that mixes
 * letters with digits or symbols is held too. See the Python module for the whole reasoning.
 */
import { genericPrefix, isPiece, segmentations } from "./history_secrets.js";
import { type Folded, fold, foldString, spelledTail } from "./normalize.js";
import { NOT_S, S } from "./pyre.js";
import { cpLen, isAlpha, lastChars, strip } from "./pystr.js";
import { SECRET, Span, mergeSpans } from "./spans.js";

const SPACE = new RegExp(S, "u");
const HAS_ALPHA = /\p{L}/u;
const TRAILING_WORD = new RegExp(`${NOT_S}{2,}$`, "u");

/** The chunks of each secret that went up in one session; one per session (mutable). */
export class UplinkRecord {
  /** The shortest chunk, and the shortest piece a secret's chunks must add up to. */
  readonly minPart: number;
  readonly minPiece = 6;
  readonly secrets: string[] = [];
  readonly kinds: string[] = [];
  /** Per secret: how many of its first characters every secret of its kind has ("ghp_"). */
  readonly generic: number[] = [];
  /** Per secret: the positions of its characters that went up. */
  readonly covered = new Map<number, Set<number>>();
  private readonly common: ReadonlySet<string>;
  private readonly index = new Map<string, number>();
  private readonly byGram = new Map<string, number[]>();
  /** Secrets held in this session: found whole too. */
  private readonly whole = new Set<number>();

  constructor(
    secrets: Iterable<readonly [string, string]> = [],
    options: { commonWords?: Iterable<string>; minPart?: number } = {},
  ) {
    this.minPart = options.minPart ?? 3;
    this.common = new Set([...(options.commonWords ?? [])].map((w) => w.toLowerCase()));
    for (const [secret, kind] of secrets) this.add(secret, kind);
  }

  get size(): number {
    return this.secrets.length;
  }

  /** Register `secret` (folded here); `whole`: it is found whole too, however short. */
  add(secret: string, kind: string = SECRET, whole = false): void {
    const s = strip(foldString(secret));
    if ([...s].length < this.minPart + 1 || SPACE.test(s)) return;
    let k = this.index.get(s);
    if (k === undefined) {
      k = this.secrets.length;
      this.index.set(s, k);
      this.secrets.push(s);
      this.kinds.push(kind);
      this.generic.push(genericPrefix(s));
      const grams = new Set<string>();
      for (let i = 0; i + this.minPart <= s.length; i++) grams.add(s.slice(i, i + this.minPart));
      for (const g of grams) {
        const list = this.byGram.get(g);
        if (list === undefined) this.byGram.set(g, [k]);
        else list.push(k);
      }
    }
    if (whole) this.whole.add(k);
  }

  /** A secret the guard held in this session (its value, without the keyword). */
  hold(text: string, kind: string = SECRET): void {
    this.add(text, kind, true);
  }

  /** A word of letters only that prose writes: not a chunk. */
  private plain(piece: string): boolean {
    return isAlpha(piece) && this.common.has(piece);
  }

  /** [a, b, secret, positions] for each word of `t` that ends after `start` and occurs in a secret. */
  private *chunks(t: string, start: number): Generator<[number, number, number, Set<number>]> {
    if (this.secrets.length === 0) return;
    let lo = start;
    while (lo > 0 && !SPACE.test(t[lo - 1]!)) lo--;
    const sub = t.slice(lo);
    for (const [words] of segmentations(sub)) {
      for (const forms of words) {
        for (const [a, b] of forms) {
          if (lo + b <= start || b - a < this.minPart) continue;
          const piece = sub.slice(a, b);
          if (this.plain(piece)) continue;
          let found = false;
          for (const k of this.byGram.get(piece.slice(0, this.minPart)) ?? []) {
            const secret = this.secrets[k]!;
            const own = new Set<number>();
            let at = false;
            for (let i = 0; i + piece.length <= secret.length; i++) {
              if (!secret.startsWith(piece, i)) continue;
              at = true;
              for (let j = i; j < i + piece.length; j++) if (j >= this.generic[k]!) own.add(j);
            }
            if (at) found = true;
            // A chunk of the generic prefix alone ("https://hooks.slack.com/") is no one's.
            if (own.size > 0) yield [lo + a, lo + b, k, own];
          }
          if (found) break;
        }
      }
    }
  }

  /** Chunks in `text` ending after `start` that, with what went up, make a piece of a secret
   * (or are a secret held in this session, whole). */
  find(text: string, start = 0): Span[] {
    if (this.secrets.length === 0) return [];
    const f = fold(text);
    const t = f.text;
    const out: Span[] = [];
    for (const [a, b, k, positions] of this.chunks(t, foldedIndex(f, start))) {
      const secret = this.secrets[k]!;
      const [ra, rb] = f.span(a, b);
      if (this.whole.has(k) && b - a === secret.length && positions.size === secret.length - this.generic[k]!) {
        out.push(new Span(ra, rb, this.kinds[k]!));
        continue;
      }
      const covered = this.covered.get(k) ?? new Set<number>();
      if ([...positions].every((p) => covered.has(p))) continue; // it repeats what went up
      if (covered.size === 0) {
        // The first chunk of letters only or digits only goes up.
        if (mixed(t.slice(a, b))) out.push(new Span(ra, rb, this.kinds[k]!));
        continue;
      }
      const union = [...new Set([...covered, ...positions])].sort((x, y) => x - y);
      const piece = union.map((i) => secret[i]).join("");
      if (union.length >= Math.min(this.minPiece, secret.length) && isPiece(piece, secret)) {
        out.push(new Span(ra, rb, this.kinds[k]!));
      }
    }
    return mergeSpans(out);
  }

  /** `text.slice(start)` went up: record the chunks of secrets in it (words that end after `start`). */
  note(text: string, start = 0): void {
    if (this.secrets.length === 0) return;
    const f = fold(text);
    for (const [, , k, positions] of this.chunks(f.text, foldedIndex(f, start))) {
      let set = this.covered.get(k);
      if (set === undefined) this.covered.set(k, (set = new Set()));
      for (const p of positions) set.add(p);
    }
  }

  /** The end of a word still being written that may become a chunk of a secret part of which went
   * up; and a run of spelling-alphabet words while secrets are registered. */
  hazard(text: string): Span | null {
    if (this.secrets.length === 0) return null;
    // A secret spelled in the spelling alphabet ("alpha bravo se..."): held from its first word.
    const spelled = spelledTail(text.toLowerCase());
    if (spelled !== null) return new Span(spelled, text.length, SECRET);
    if (this.covered.size === 0) return null;
    const tail = lastChars(text, 64);
    const f = fold(tail);
    const m = TRAILING_WORD.exec(f.text);
    if (m === null) return null;
    const word = m[0];
    for (let i = 0; i < word.length - 1; i++) {
      const rest = word.slice(i);
      if ([...this.covered.keys()].some((k) => this.secrets[k]!.includes(rest))) {
        return new Span(text.length - tail.length + f.rawStart(m.index + i), text.length, SECRET);
      }
    }
    return null;
  }
}

/** Four characters or more, letters with digits or symbols: no word of prose a secret also has. */
function mixed(piece: string): boolean {
  return cpLen(piece) >= 4 && HAS_ALPHA.test(piece) && !isAlpha(piece);
}

/** The first folded index whose raw character is at or after `raw`. */
function foldedIndex(f: Folded, raw: number): number {
  let lo = 0;
  let hi = f.starts.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (f.starts[mid]! < raw) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

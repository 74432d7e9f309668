/**
 * Wallet seed phrases: port of privacy/recognizers.py's `SeedPhraseRecognizer`.
 *
 * A BIP-39 mnemonic is a wallet's private key in words: 12 to 24 words of its 2048-word English
 * list in a row, whatever separates them (spaces, commas, hyphens, line breaks, "1." numbering)
 * and in any case. The list is the reference one (the Python reads the `mnemonic` package's,
 * @scure/bip39 ships the same).
 */

import { wordlist } from "@scure/bip39/wordlists/english.js";

import { NOT_W, S, S_IN } from "./pyre.js";
import { fullMatchIn, searchIn, tailStart } from "./pystr.js";
import { SECRET, type Detector, Span } from "./spans.js";

const WORDS: ReadonlySet<string> = new Set(wordlist);
const SEED_WORD = /[A-Za-z]+/gu;
// What may stand between two words of one phrase: no letters, a little punctuation, a number
// ("1." numbering); a full stop after a word ends a sentence, not a phrase.
const SEED_GAP = new RegExp(String.raw`(?:[${S_IN},;\-_/|:()\[\]#*]|\p{Nd}{1,2}\.?){1,8}`, "u");
// Separators prose does not put between single words: commas, hyphens, line breaks, numbering.
const SEED_LIST_GAP = /[,:\-\n\p{Nd}|/]/u;
const SEED_WORDS_MIN = 12;
const SEED_CONTEXT = new RegExp(
  String.raw`(?:seed|mnemonic|recovery|phrase|words?|backup|wallet|ledger|metamask|trezor)${NOT_W}{0,6}$`,
  "iu",
);
const NUMBERED = /(?<![\p{L}\p{N}_.])\p{Nd}{1,2}[.)][ \t]*$/u;
const LAST_WORD = /[A-Za-z]+$/u;
const ANNOUNCED = new RegExp(String.raw`(?:\n|\p{Nd}[.)]${S}*)$`, "u");

/** Runs of BIP-39 words separated by `SEED_GAP`: [start, end, number of words]. */
function seedRuns(text: string): [number, number, number][] {
  const out: [number, number, number][] = [];
  let start = 0;
  let end = 0;
  let count = 0;
  for (const m of text.matchAll(SEED_WORD)) {
    const mStart = m.index;
    const mEnd = mStart + m[0].length;
    const joined = count > 0 && fullMatchIn(SEED_GAP, text, end, mStart) !== null;
    if (WORDS.has(m[0].toLowerCase())) {
      if (joined) {
        end = mEnd;
        count++;
        continue;
      }
      if (count) out.push([start, end, count]);
      [start, end, count] = [mStart, mEnd, 1];
    } else {
      if (count) out.push([start, end, count]);
      count = 0;
    }
  }
  if (count) out.push([start, end, count]);
  return out;
}

/** The start of a phrase's first word, or of the "1." that numbers it. */
function numberedFrom(text: string, a: number): number {
  const head = text.slice(0, a);
  const m = NUMBERED.exec(head.slice(tailStart(head, 6)));
  return m ? a - m[0].length : a;
}

/** Wallet seed phrases: 12 or more BIP-39 words in a row (see the module comment). */
export class SeedPhraseRecognizer implements Detector {
  find(text: string): Span[] {
    return seedRuns(text)
      .filter(([, , n]) => n >= SEED_WORDS_MIN)
      .map(([a, b]) => new Span(numberedFrom(text, a), b, SECRET));
  }

  hazard(text: string): Span | null {
    // The trailing run of list words (its last word may be half written) may still reach 12.
    const offset = tailStart(text, 400);
    const tail = text.slice(offset);
    const m = LAST_WORD.exec(tail);
    let end = tail.length;
    let partial = false;
    if (m !== null && !WORDS.has(m[0].toLowerCase())) {
      const w = m[0].toLowerCase();
      if (!wordlist.some((word) => word.startsWith(w))) return null;
      end = m.index;
      partial = true;
    }
    const runs = seedRuns(tail.slice(0, end));
    const last = runs[runs.length - 1];
    let a: number;
    let n: number;
    // The last run counts if only separators follow it (", ", " 2. ", a line break).
    if (last !== undefined && (last[1] === end || fullMatchIn(SEED_GAP, tail, last[1], end) !== null)) {
      a = last[0];
      n = last[2] + (partial ? 1 : 0);
    } else if (partial && m !== null) {
      a = m.index;
      n = 1;
    } else {
      return null;
    }
    // Prose has pairs of list words ("fix now"), so words separated by spaces are held from three
    // on; two where the separators are a list's; one where a keyword or numbering announced it.
    const listed = searchIn(SEED_LIST_GAP, tail, a) !== null;
    const before = tail.slice(0, a);
    if (n >= 3 || (n === 2 && listed) || SEED_CONTEXT.test(before) || ANNOUNCED.test(before)) {
      return new Span(offset + numberedFrom(tail, a), text.length, SECRET);
    }
    return null;
  }

  forPrompt(): Detector {
    return this;
  }
}

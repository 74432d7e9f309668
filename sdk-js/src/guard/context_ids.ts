/**
 * Port of privacy/context_ids.py. Identifiers that only their context makes personal: licence
 * plates after a word that says a vehicle is meant, and a date of birth next to a person's name.
 *
 * - `LicencePlateRecognizer`: no library validates plates across countries (the formats are
 *   national and change), so a plate is found by its general shape - one to three groups of
 *   capitals and digits, five to eight of them, letters and digits both ("AB12 CDE", "M-AB 1234",
 *   "7ABC123") - within a few words after a cue ("plate", "reg", "Kennzeichen", "matrícula",
 *   "car", "van", ...). Without a cue such a group is a ticket, a part number or a build tag.
 * - `BirthDateRecognizer`: a full date with a year old enough for a birth (twelve years or more
 *   ago) right after two or three capitalized words that are no common English words ("Aino
 *   Virtanen (02.06.1979)"): a name with a date and nothing between is a record of a person; a
 *   release date follows a version, not a name ("Django 5.0 (2023-12-04)").
 *
 * Each holds from the first character that could begin its span once the context is there (a
 * cue, a name and a separator), so the device drafts on until the span is whole or gone.
 */

import { caseless, tailStart } from "./pystr.js";
import { foldString } from "./normalize.js";
import { D, END, W, W_IN, matchAt } from "./pyre.js";
import { commonEnglishWords } from "./registered.js";
import { NATIONAL_ID, type Detector, Span, mergeSpans } from "./spans.js";

// Python's `(?i:...)` around the cues; only "plate" has a lookbehind ("car" may end "Oscar", as in Python).
const PLATE_CUE =
  `(?:(?<![${W_IN}-])` +
  caseless(
    String.raw`(?:(?:number|licen[cs]e|registration|reg\.?)[ \t]+)?plates?|reg\.?|registration|` +
      "kennzeichen|immatriculation|matr[ií]cula|targa|tablica|rejestracja|kenteken|car|van|truck|lorry|" +
      "vehicle|motorbike|motorcycle|scooter|camper",
  ) +
  ")";
// Up to two short words between the cue and the plate ("car is", "van with plate", "car, reg").
const BETWEEN = String.raw`(?:[ \t]*[,:(]?[ \t]*(?:is|was|with|number|no\.?|nr\.?|#)?)?[ \t]*[("']?[ \t]*`;
const PLATE = "[A-Z0-9ÄÖÜ]{1,8}(?:[ -][A-Z0-9ÄÖÜ]{1,5}){0,2}";
const PLATE_RE = new RegExp(`${PLATE_CUE}${BETWEEN}(?<plate>${PLATE})(?![${W_IN}-])`, "dgu");
const PLATE_TAIL = new RegExp(`${PLATE_CUE}${BETWEEN}(?<plate>[A-Z0-9ÄÖÜ][A-Z0-9ÄÖÜ -]{0,11})?${END}`, "du");

function plateOk(plate: string): boolean {
  const chars = plate.replace(/[ -]/gu, "");
  const n = [...chars].length;
  return n >= 5 && n <= 8 && /[0-9]/u.test(chars) && /[A-ZÄÖÜ]/u.test(chars);
}

/** Licence plates after a vehicle cue (see the module comment). */
export class LicencePlateRecognizer implements Detector {
  find(text: string): Span[] {
    const out: Span[] = [];
    for (const m of text.matchAll(PLATE_RE) as IterableIterator<RegExpExecArray>) {
      // The longest form that is a plate ("OY 727 AD", not "OY 727"); a trailing word of the
      // sentence ("KR 23390 is") is not part of it, being lower case.
      if (plateOk(m.groups!.plate!)) {
        const [a, b] = m.indices!.groups!.plate!;
        out.push(new Span(a, b, NATIONAL_ID));
      }
    }
    return mergeSpans(out);
  }

  hazard(text: string): Span | null {
    const at = tailStart(text, 80);
    const m = PLATE_TAIL.exec(text.slice(at));
    const plate = m?.groups?.plate;
    if (m === null || plate === undefined) return null;
    if ([...plate.replace(/[ -]/gu, "")].length > 8) return null;
    return new Span(at + m.indices!.groups!.plate![0], text.length, NATIONAL_ID);
  }

  forPrompt(): Detector {
    return this;
  }
}

const MONTH =
  "(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?" +
  String.raw`|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?`;
const year = (name: string): string => `(?<${name}>(?:19|20)${D}{2})`;
const DATE =
  String.raw`(?:${D}{1,2}[./]${D}{1,2}[./]${year("year")}|${year("iso")}-${D}{2}-${D}{2}` +
  String.raw`|${D}{1,2}(?:st|nd|rd|th)?[ \t]+${caseless(MONTH)}[ \t]+${year("word")}` +
  String.raw`|${caseless(MONTH)}[ \t]+${D}{1,2},?[ \t]+${year("us")})`;
const NAME_WORD = "[A-Z][a-z'’]+(?:-[A-Z][a-z]+)?";
const NAME_SEP = String.raw`(?:[ \t]*[,(–—-][ \t]*|[ \t]+)`;
// Two or three capitalized words, then a separator: the name a date of birth follows.
const NAME_LEAD = String.raw`(?<![${W_IN}-])(?<name>${NAME_WORD}(?:[ \t]+${NAME_WORD}){1,2})${NAME_SEP}`;
const BIRTH_RE = new RegExp(`${NAME_LEAD}(?<date>${DATE})(?!${W})`, "dgu");
const PARTIAL_DATE =
  String.raw`${D}{1,4}(?:[./-]${D}{0,2}(?:[./-]${D}{0,4})?)?(?:(?:st|nd|rd|th)?[ \t]+[A-Za-z]{0,9}\.?(?:[ \t]+${D}{0,4})?)?` +
  String.raw`|[A-Z][a-z]{0,8}\.?(?:[ \t]+${D}{0,2},?(?:[ \t]+${D}{0,4})?)?`;
const BIRTH_TAIL = new RegExp(`${NAME_LEAD}(?<date>${PARTIAL_DATE})${END}`, "du");
const MONTH_NAMES = [
  "january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
  "november", "december",
];
const MONTH_WORDS = new RegExp(`${caseless(MONTH)}${END}`, "u");
const WEEKDAY = new RegExp(
  `^${caseless("(?:mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun)(?:day|nesday|sday|urday)?")}$`,
  "u",
);
const GAP = /[ \t]+/u;

/** Two or three capitalized words of three letters or more, none a common English word, a month
 * or a weekday ("On Fri, 18 Nov 2005, ... wrote:" is a mail's quote line). */
function aName(name: string): boolean {
  const common = commonEnglishWords();
  return name.split(GAP).every(
    (w) =>
      !common.has(w.toLowerCase().replace(/['’]+$/u, "")) &&
      matchAt(MONTH_WORDS, w) === null &&
      [...w].length >= 3 &&
      !WEEKDAY.test(w),
  );
}

/** A sentence's first word before a name ("Passenger: Emil Haddad") is matched as part of it only
 * when capitalized; the last two words are the name that is judged. */
function lastWords(name: string): string {
  return name.split(GAP).slice(-2).join(" ");
}

/** Python's `int()` of a year the pattern found (its digits may be of any script). */
function yearValue(digits: string): number {
  return Number.parseInt(foldString(digits), 10);
}

export interface BirthDateOptions {
  /** The date a birth year is counted back from (default: today). */
  today?: Date;
}

/** A date of birth beside a person's name (see the module comment). */
export class BirthDateRecognizer implements Detector {
  readonly latestBirthYear: number;

  constructor(options: BirthDateOptions = {}) {
    this.latestBirthYear = (options.today ?? new Date()).getFullYear() - 12;
  }

  find(text: string): Span[] {
    const out: Span[] = [];
    for (const m of text.matchAll(BIRTH_RE) as IterableIterator<RegExpExecArray>) {
      const g = m.groups!;
      const y = yearValue((g.year ?? g.iso ?? g.word ?? g.us)!);
      if (y >= 1900 && y <= this.latestBirthYear && aName(lastWords(g.name!))) {
        const [a, b] = m.indices!.groups!.date!;
        out.push(new Span(a, b, NATIONAL_ID));
      }
    }
    return mergeSpans(out);
  }

  hazard(text: string): Span | null {
    const at = tailStart(text, 60);
    const m = BIRTH_TAIL.exec(text.slice(at));
    if (m === null || !aName(lastWords(m.groups!.name!))) return null;
    const date = m.groups!.date!;
    // A written month must be one ("Mira Holt, Oslo" is a place); digits may still be a date.
    const word = /[A-Za-z]+/u.exec(date);
    if (word !== null && !MONTH_NAMES.some((month) => month.startsWith(word[0].toLowerCase()))) return null;
    const y = new RegExp(`(?:19|20)${D}{2}$`, "u").exec(date);
    if (y !== null && yearValue(y[0]) > this.latestBirthYear) return null;
    return new Span(at + m.indices!.groups!.date![0], text.length, NATIONAL_ID);
  }

  forPrompt(): Detector {
    return this;
  }
}

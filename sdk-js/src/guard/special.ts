/**
 * Port of privacy/special.py. Special categories of personal data (GDPR Art. 9): health, sexual
 * life, religion, political opinion, ethnicity, trade-union membership.
 *
 * A curated vocabulary (data/special_categories.ts, from privacy/data/special_categories.txt) plus
 * a few patterns, matched on the folded text word by word:
 * - a *strong* term is a span wherever it stands as words in prose ("epilepsy", "type 1
 *   diabetes", "metformin", "converted to Islam", "union member");
 * - a *cued* term is a span only after a personal cue within two words ("has cancer", "is gay",
 *   "a devout Muslim"): the word alone is ordinary text ("cancer research");
 * - patterns: "N weeks/months pregnant", a dose and the drug after it, a party or union by its
 *   capitalized name after a cue, and what follows "diagnosed with", "diagnosis of" or "tested
 *   positive for" (up to four words, to punctuation or a function word).
 *
 * Words inside code are no prose: a word in a chunk that carries `_`, a path or URL character, an
 * operator, a bracket or a dot between letters (`health_check`, `/healthz`, `is_pregnant()`) is
 * never matched, nor is a word joined to letters (`healthz`).
 *
 * The hazard: the end of the text could still grow into a term from the first letter of a word
 * that begins one (a prefix search over the sorted vocabulary, so "Metformin" drafted as " Met" +
 * "form" + "in" is held from " Met"), and from a number that could begin "9 weeks pregnant". Cued
 * terms hold only after a cue. With `holdPrefixes: false` (the end of the text: nothing more will
 * be written) a prefix stays the word it is.
 */

import { SPECIAL_TERMS } from "./data/special_categories.js";
import { fold } from "./normalize.js";
import { alnumAt, alnumBefore, byCodePoint, fullMatchIn, lastChars, searchIn, tailStart } from "./pystr.js";
import { D, END, NOT_S, S, W_IN, matchAt } from "./pyre.js";
import { SPECIAL_CATEGORY, type Detector, Span, mergeSpans } from "./spans.js";

export const CATEGORIES: readonly string[] = ["health", "sexual-life", "religion", "political", "ethnicity", "trade-union"];

const WORD = /[a-z0-9]+(?:'[a-z]+)?\+?/gu;
/** Between the words of a phrase. */
const SEP = /[ \t\n-]+/u;
const SEP_ALL = /[ \t\n-]+/gu;
const CODE = /[_/\\=<>{}[\]()$#@`|*~^]|[a-z0-9][.:][a-z0-9]/u;
/** Prose punctuation around a chunk. */
const EDGE = "\"'([{.,;:!?)]}";

// A personal cue before a cued term (two words back at most, with articles and a few adjectives
// between): health terms follow a possessive or a verb of having; the others a copula.
const SKIP =
  "(?:(?:a|an|the|very|openly|devout|practising|practicing|observant|religious|registered|lifelong|proud|chronic|severe|mild" +
  `|clinical|early|late|stage|some)${S}+){0,2}`;
const HEALTH_CUE = new RegExp(
  "(?<![a-z0-9'])(?:has|have|had|having|with|diagnosed|suffers|suffering|suffered|from|for|my|his|her|their|our|your" +
    "|is|am|are|was|were|i'm|im|he's|she's|they're|got|developed|manage|managing|manages|battling|fighting" +
    `|on|takes|taking|took|prescribed|sees|seeing)${S}+${SKIP}${END}`,
  "u",
);
const IDENTITY_CUE = new RegExp(
  "(?<![a-z0-9'])(?:is|am|are|was|were|i'm|im|he's|she's|they're|we're|being|became|become|identifies as" +
    "|identify as|came out as|as|raised|born|fellow|my|his|her|their|our|member of|votes? for|voted for|supports?" +
    `|supporter of|joined|in)${S}+${SKIP}${END}`,
  "u",
);
// A party or a union by its proper name after a personal cue ("is a Green Party councillor", "a
// member of the Communist Party", "in the Teamsters union"): no list of every party and union
// exists, but their names are capitalized words before "Party" or "union".
const NAMED_GROUP = new RegExp(`(?<![${W_IN}-])(?:[A-Z][${W_IN}'-]*[ \\t]+){1,3}?(?:Party|[Uu]nion)(?![${W_IN}-])`, "gu");
const NAMED_GROUP_HAZARD = new RegExp(
  `(?<![${W_IN}-])(?:[A-Z][${W_IN}'-]*[ \\t]*){1,3}(?:(?<=[ \\t])(?:u|un|uni|unio))?${END}`,
  "u",
);
const STOP =
  "in|at|on|last|this|that|and|but|so|after|before|when|since|by|ago|yesterday|today|recently|which" +
  "|who|because|while|during|as|two|three|four|five|years?|months?|weeks?|days?|the|a|an|to|of|is|was|and";
// A medication's dose and what follows it ("150 mg of quetiapine", "25 mg insulin glargine"):
// a dose in mg/mcg/ml/IU is no developer's unit, and the drug after it is health data whether or
// not the vocabulary lists it.
const DOSE_RE = new RegExp(
  String.raw`(?<![${W_IN}.])${D}+(?:[.,]${D}+)?[ \t]*(?:mg|mcg|\u00b5g|ug|ml|iu|units?)(?![a-z0-9])(?:[ \t]+of)?` +
    String.raw`(?:[ \t]+(?!(?:${STOP})(?![a-z0-9'-]))[a-z][a-z0-9'-]*){0,2}`,
  "gu",
);
const DOSE_HAZARD = new RegExp(
  String.raw`(?<![${W_IN}.])${D}+(?:[.,]${D}*)?(?:[ \t]*(?:m|mg|mc|mcg|\u00b5|\u00b5g|u|ug|ml|i|iu|un|uni|unit|units)` +
    String.raw`(?:[ \t]+(?:o|of)?)?(?:[ \t]+[a-z][a-z0-9'-]*)?)?[ \t]*${END}`,
  "u",
);

const NUMBER = String.raw`(?:${D}{1,2}|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a few|few|several)`;
const PREGNANT = new RegExp(
  String.raw`(?<![${W_IN}.#/])${NUMBER}[ \t\-]*(?:weeks?|wks?|months?)[ \t\-]+(?:pregnant|along)(?![a-z0-9])`,
  "gu",
);
// The end of a text that may still become "N weeks pregnant": a number, then prefixes.
const PREGNANT_HAZARD = new RegExp(
  String.raw`(?<![${W_IN}.#/,:\-])${D}{1,2}(?:[ \t\-]*(?:w|we|wee|week|weeks|wk|wks|m|mo|mon|mont|month|months)` +
    String.raw`(?:[ \t\-]+(?:p|pr|pre|preg|pregn|pregna|pregnan|a|al|alo|alon)?)?)?[ \t\-]*${END}`,
  "u",
);
const FOR_NAME_HAZARD = new RegExp(String.raw`[ \t]+(?:f|fo|for|o|of|a|at)(?:[ \t]+(?:[A-Z][${W_IN}'-]*)?)?[ \t]*${END}`, "u");
const JOIN = /[ \t]+(?:for|of|with)[ \t]+/u;
const FOR_NAME = new RegExp(String.raw`[ \t]+(?:for|of|at)[ \t]+(?:[A-Z][${W_IN}'-]*)(?:[ \t]+[A-Z][${W_IN}'-]*)?`, "u");
const STAGE_BEFORE = new RegExp(String.raw`(?<![${W_IN}])stage[ \t]+(?:[0-4]|i{1,3}|iv)[abc]?[ \t]+${END}`, "u");
const STAGE_HAZARD = new RegExp(
  String.raw`(?<![${W_IN}])(?:s|st|sta|stag|stage(?:[ \t]+(?:(?:[0-4]|i{1,3}|iv)[abc]?(?:[ \t]+[a-z]*){0,3})?)?[ \t]*)${END}`,
  "u",
);
const NOT_STOP = String.raw`(?!(?:${STOP})(?![a-z0-9'+-]))`;
const INTRODUCED = new RegExp(
  String.raw`(?<![a-z0-9])(?:diagnosed${S}+(?:with|as${S}+having)|diagnosis${S}+of|tested${S}+positive${S}+for)` +
    String.raw`${S}+(?:(?:a|an|the)${S}+)?` +
    String.raw`(${NOT_STOP}[a-z0-9'+-]+(?:[ \t]+${NOT_STOP}[a-z0-9'+-]+){0,3})`,
  "dgu",
);

interface Term {
  readonly words: readonly string[];
  readonly category: string;
  readonly cued: boolean;
}

interface Vocabulary {
  /** First word -> terms, longest first. */
  readonly byFirst: ReadonlyMap<string, readonly Term[]>;
  /** Phrases joined by one space, sorted (a prefix trie, searched by bisection). */
  readonly strong: readonly string[];
  readonly cuedHealth: readonly string[];
  readonly cuedIdentity: readonly string[];
}

let parsed: Vocabulary | null = null;

/** The shipped vocabulary, built once. */
function vocabulary(): Vocabulary {
  if (parsed !== null) return parsed;
  const terms: Term[] = SPECIAL_TERMS.map(([phrase, category, cued]) => ({ words: phrase.split(" "), category, cued }));
  const byFirst = new Map<string, Term[]>();
  for (const t of terms) {
    const list = byFirst.get(t.words[0]!);
    if (list === undefined) byFirst.set(t.words[0]!, [t]);
    else list.push(t);
  }
  // Longest first, strong before cued (a stable sort, as Python's).
  for (const list of byFirst.values()) list.sort((a, b) => b.words.length - a.words.length || Number(a.cued) - Number(b.cued));
  const sorted = (keep: (t: Term) => boolean): string[] =>
    [...new Set(terms.filter(keep).map((t) => t.words.join(" ")))].sort(byCodePoint);
  parsed = {
    byFirst,
    strong: sorted((t) => !t.cued),
    cuedHealth: sorted((t) => t.cued && t.category === "health"),
    cuedIdentity: sorted((t) => t.cued && t.category !== "health"),
  };
  return parsed;
}

const EDGE_RUN = `[${EDGE.replace(/[\\\]^-]/gu, "\\$&")}]*`;
const STRIP_EDGE = new RegExp(`^${EDGE_RUN}|${EDGE_RUN}$`, "gu");
const SPACE = new RegExp(S, "u");
/** Some character that Python's `str.strip()` keeps. */
const NOT_SPACE = new RegExp(NOT_S, "u");

/** Whether `text[start:end]` lies in a chunk of code (an identifier, a path, a call) or is joined
 * to letters on either side. */
function inCode(text: string, start: number, end: number): boolean {
  let a = start;
  while (a > 0 && !SPACE.test(text[a - 1]!)) a--;
  let b = end;
  while (b < text.length && !SPACE.test(text[b]!)) b++;
  return CODE.test(text.slice(a, b).replace(STRIP_EDGE, ""));
}

function cued(text: string, start: number, category: string): boolean {
  const cue = category === "health" ? HEALTH_CUE : IDENTITY_CUE;
  return searchIn(cue, text, tailStart(text.slice(0, start), 48), start) !== null;
}

/** Whether a phrase of the sorted `phrases` begins with `fragment` (Python's `bisect_left`). */
function hasPrefix(phrases: readonly string[], fragment: string): boolean {
  let lo = 0;
  let hi = phrases.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (phrases[mid]! < fragment) lo = mid + 1;
    else hi = mid;
  }
  return lo < phrases.length && phrases[lo]!.startsWith(fragment);
}

export interface SpecialCategoryOptions {
  /** Hold a word that may begin a term at the end of a text (default true); off where nothing
   * more will be written. */
  holdPrefixes?: boolean;
}

/** Special-category data by the shipped vocabulary and patterns (see the module comment). */
export class SpecialCategoryRecognizer implements Detector {
  readonly holdPrefixes: boolean;
  private readonly vocabulary = vocabulary();

  constructor(options: SpecialCategoryOptions = {}) {
    this.holdPrefixes = options.holdPrefixes ?? true;
  }

  find(text: string): Span[] {
    const f = fold(text);
    const t = f.text;
    let found: [number, number][] = [];
    const words = [...t.matchAll(WORD)].map((m): [number, number, string] => [m.index, m.index + m[0].length, m[0]]);
    let i = 0;
    while (i < words.length) {
      const [a, , w] = words[i]!;
      let matched = 0;
      for (const term of this.vocabulary.byFirst.get(w) ?? []) {
        const n = term.words.length;
        if (i + n > words.length || term.words.some((tw, j) => words[i + j]![2] !== tw)) continue;
        let joined = true;
        for (let j = 0; j < n - 1; j++) {
          if (fullMatchIn(SEP, t, words[i + j]![1], words[i + j + 1]![0]) === null) joined = false;
        }
        if (!joined) continue;
        const b = words[i + n - 1]![1];
        if (alnumBefore(t, a) || (b < t.length && alnumAt(t, b)) || inCode(t, a, b)) continue;
        if (term.cued && !cued(t, a, term.category)) continue;
        found.push([a, b]);
        matched = n;
        break;
      }
      i += matched || 1;
    }
    for (const m of t.matchAll(PREGNANT)) {
      if (!inCode(t, m.index, m.index + m[0].length)) found.push([m.index, m.index + m[0].length]);
    }
    // A stage before a condition is part of it ("stage 2 breast cancer").
    const staged: [number, number][] = [];
    for (const [a, b] of found) {
      const st = searchIn(STAGE_BEFORE, t, 0, a);
      if (st !== null && st.index + st[0].length === a) staged.push([st.index, b]);
    }
    found = [...staged, ...found];
    for (const m of t.matchAll(DOSE_RE)) {
      if (!inCode(t, m.index, m.index + m[0].length)) found.push([m.index, m.index + m[0].length]);
    }
    // On the raw text: a proper name is told by its capitals, which folding drops.
    const lower = text.toLowerCase();
    const named: Span[] = [];
    for (const m of text.matchAll(NAMED_GROUP)) {
      const end = m.index + m[0].length;
      if (
        searchIn(IDENTITY_CUE, lower, tailStart(lower.slice(0, m.index), 48), m.index) !== null &&
        !inCode(lower, m.index, end)
      ) {
        named.push(new Span(m.index, end, SPECIAL_CATEGORY));
      }
    }
    for (const m of t.matchAll(INTRODUCED) as IterableIterator<RegExpExecArray>) {
      const [a, b] = m.indices![1]!;
      if (!inCode(t, a, b)) found.push([a, b]);
    }
    // "rehab for alcohol dependence", "shop steward for Unite": a term, a preposition, and
    // another term or a proper name are one statement; the preposition between is not left out.
    found.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
    const joined: [number, number][] = [];
    for (const [a, b] of found) {
      const last = joined[joined.length - 1];
      if (last !== undefined && fullMatchIn(JOIN, t, last[1], a) !== null) last[1] = Math.max(b, last[1]);
      else joined.push([a, b]);
    }
    const spans = joined.map(([a, b]) => new Span(...f.span(a, b), SPECIAL_CATEGORY));
    for (const sp of [...spans]) {
      const after = matchAt(FOR_NAME, text, sp.end);
      if (after !== null) spans.push(new Span(sp.start, after.index + after[0].length, SPECIAL_CATEGORY));
    }
    return mergeSpans([...spans, ...named]);
  }

  hazard(text: string): Span | null {
    if (!this.holdPrefixes) return null;
    const f = fold(text);
    const t = f.text;
    const at = tailStart(t, 120);
    const tail = t.slice(at);
    const starts: number[] = [];
    for (const re of [PREGNANT_HAZARD, STAGE_HAZARD, DOSE_HAZARD]) {
      const m = re.exec(tail);
      if (m !== null && !inCode(tail, m.index, tail.length)) starts.push(m.index);
    }
    // Capitalized words after a personal cue may still become "... Party" or "... union".
    const rawTail = lastChars(text, 120);
    const m = NAMED_GROUP_HAZARD.exec(rawTail);
    let named: number | null = null;
    const rawLower = rawTail.toLowerCase();
    if (m !== null && searchIn(IDENTITY_CUE, rawLower, tailStart(rawLower.slice(0, m.index), 48), m.index) !== null) {
      named = text.length - rawTail.length + m.index;
    }
    // The trailing word, and up to five words before it: where a phrase could have begun.
    const begins = [...tail.matchAll(WORD)].map((w) => w.index).slice(-6);
    const v = this.vocabulary;
    for (const s of begins) {
      if (s > 0 && (alnumBefore(tail, s) || tail[s - 1] === "'")) continue;
      const fragment = tail.slice(s).replace(SEP_ALL, " ");
      if (!NOT_SPACE.test(fragment) || inCode(tail, s, tail.length)) continue;
      if (
        hasPrefix(v.strong, fragment) ||
        (hasPrefix(v.cuedHealth, fragment) && cued(tail, s, "health")) ||
        (hasPrefix(v.cuedIdentity, fragment) && cued(tail, s, "religion"))
      ) {
        starts.push(s);
        break;
      }
    }
    // A term just written may go on with "for <a name>" ("shop steward for Unite").
    const last40 = tailStart(text, 40);
    const forName = FOR_NAME_HAZARD.exec(text.slice(last40));
    if (forName !== null) {
      const cut = last40 + forName.index;
      const lo = tailStart(text.slice(0, cut), 80);
      if (this.find(text.slice(lo, cut)).some((sp) => sp.end === cut - lo)) named = named === null ? cut : Math.min(named, cut);
    }
    const raws = starts.map((s) => f.rawStart(at + s));
    if (named !== null) raws.push(named);
    return raws.length > 0 ? new Span(Math.min(...raws), text.length, SPECIAL_CATEGORY) : null;
  }

  forPrompt(): Detector {
    return this;
  }
}

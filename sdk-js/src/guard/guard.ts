/**
 * The egress guard (port of privacy/guard.py): finds sensitive spans in a draft before it leaves
 * the device. Pure: no I/O, no logging of the text it sees.
 *
 * `EgressGuard` composes the detectors (each matches the folded text and maps its spans back to
 * the raw characters) with the deployment's `GuardPolicy`. `inspect(committed, draft)` returns the
 * spans touching the draft; `check(committedIds, newIds, tokenizer)` says where to cut the tokens
 * about to go up and what to put in their place.
 *
 * Why "holds" exist: a span complete only in the next round would leak its prefix now
 * ("john.doe@example.c" goes up, the final "om" is blocked, the cloud has the address). So every
 * detector also reports a hazard, the earliest offset from which the end of the text could still
 * grow into a span; a hazard cuts like a span and holds, so the device drafts a few tokens further
 * locally until it turns into a span or dissolves. A device that cannot look further fails closed.
 */
import { CanaryDetector } from "./canaries.js";
import { BirthDateRecognizer, LicencePlateRecognizer } from "./context_ids.js";
import { HistorySecretDetector } from "./history_secrets.js";
import { KeywordValueRecognizer } from "./keyword_values.js";
import { RewrittenVerbatimDetector, VerbatimNgramDetector } from "./ngrams.js";
import { PiiDetector } from "./pii.js";
import {
  CardRecognizer,
  NationalIdRecognizer,
  PhoneRecognizer,
  SecretRecognizer,
  WrappedEmailRecognizer,
} from "./recognizers.js";
import { commonEnglishWords } from "./registered.js";
import { SeedPhraseRecognizer } from "./seed_phrase.js";
import { ShapeRecognizer } from "./shapes.js";
import { SpecialCategoryRecognizer } from "./special.js";
import {
  ADDRESS,
  CANARY,
  CARD,
  type Detector,
  EMAIL,
  IBAN,
  IP,
  NAME,
  NATIONAL_ID,
  PHONE,
  PRIVATE_NGRAM,
  SECRET,
  SPECIAL_CATEGORY,
  Span,
  type Tokenizer,
  URL_CREDENTIALS,
  compareSpans,
  decode,
  mergeSpans,
} from "./spans.js";
import { UplinkRecord } from "./uplinked.js";

/** One label per kind, so an audit record's placeholder names the kind without another field. */
export const PLACEHOLDERS: Readonly<Record<string, string>> = {
  [EMAIL]: "<EMAIL>",
  [PHONE]: "<PHONE>",
  [CARD]: "<CARD>",
  [IP]: "<IP>",
  [URL_CREDENTIALS]: "<URL>",
  [IBAN]: "<IBAN>",
  [PRIVATE_NGRAM]: "<PRIVATE>",
  [CANARY]: "<SECRET>",
  [NAME]: "<NAME>",
  [ADDRESS]: "<ADDRESS>",
  [SECRET]: "<KEY>",
  [NATIONAL_ID]: "<ID>",
  [SPECIAL_CATEGORY]: "<SPECIAL>",
};

/** Category-free placeholder: the cloud learns that something private was there, not what kind. */
export const GENERIC_PLACEHOLDER = "<PRIVATE>";
export const PLACEHOLDER_LABELS = ["generic", "by-kind"] as const;
export type PlaceholderLabels = (typeof PLACEHOLDER_LABELS)[number];

/** The placeholder of every kind for a labels setting. */
export function placeholderLabels(labels: string): Readonly<Record<string, string>> {
  if (labels === "by-kind") return { ...PLACEHOLDERS };
  if (labels === "generic") return Object.fromEntries(Object.keys(PLACEHOLDERS).map((k) => [k, GENERIC_PLACEHOLDER]));
  throw new RangeError(`placeholder labels are one of ${PLACEHOLDER_LABELS.join(", ")}; got ${JSON.stringify(labels)}`);
}

/** What happens to a span at the front of the uplink (a deployment setting); also the decision on record. */
export type GuardPolicy = "placeholder" | "keep-local";

/** What to send of `newIds` (indices into `newIds`); see privacy/guard.py's GuardVerdict. */
export interface GuardVerdict {
  /** First token not to send (it touches a span or a hazard); null: send all `send` tokens. */
  cutAt: number | null;
  /** With a cut: the first token after the sensitive span. */
  spanEnd: number | null;
  kind: string | null;
  placeholder: string | null;
  /** The cut comes from a hazard, or a span reaching the end: drafting further may change it. */
  hold: boolean;
  spans: readonly Span[];
  /** "pass", "cut", "hold", or the policy. */
  action: string;
}

export interface GuardOptions {
  policy?: GuardPolicy;
  /** Committed text re-scanned for spans that continue into the draft. */
  contextChars?: number;
  /** Committed tokens decoded by `check` for the same purpose. */
  contextTokens?: number;
  placeholders?: Readonly<Record<string, string>>;
  /** The session's record of the secrets' chunks that went up; null: not one session's guard. */
  uplinked?: UplinkRecord | null;
  /** The history's lower-case words. */
  words?: ReadonlySet<string>;
}

export interface ProfileGuardOptions {
  identities?: Readonly<Record<string, string>>;
  canaries?: Iterable<string>;
  policy?: GuardPolicy;
  n?: number;
  publicTexts?: Iterable<string>;
  labels?: string;
}

const LOWER_WORD = /(?<![A-Za-z])[a-z]{3,}(?![A-Za-z])/g;

/** Detectors plus the deployment's policy; one instance per session (`forPrompt`). */
export class EgressGuard {
  readonly detectors: readonly Detector[];
  readonly policy: GuardPolicy;
  readonly contextChars: number;
  readonly contextTokens: number;
  readonly placeholders: Readonly<Record<string, string>>;
  readonly uplinked: UplinkRecord | null;
  readonly words: ReadonlySet<string>;

  constructor(detectors: Iterable<Detector>, options: GuardOptions = {}) {
    this.detectors = [...detectors];
    this.policy = options.policy ?? "placeholder";
    if (this.policy !== "placeholder" && this.policy !== "keep-local") {
      throw new RangeError(`a guard policy is placeholder or keep-local; got ${JSON.stringify(this.policy)}`);
    }
    this.contextChars = options.contextChars ?? 512;
    this.contextTokens = options.contextTokens ?? 96;
    this.placeholders = options.placeholders ?? { ...PLACEHOLDERS };
    this.uplinked = options.uplinked ?? null;
    this.words = options.words ?? new Set();
  }

  /** This guard with some of its parts replaced (Python's `dataclasses.replace`). */
  replace(changes: GuardOptions & { detectors?: readonly Detector[] }): EgressGuard {
    const { detectors, ...rest } = changes;
    return new EgressGuard(detectors ?? this.detectors, {
      policy: this.policy,
      contextChars: this.contextChars,
      contextTokens: this.contextTokens,
      placeholders: this.placeholders,
      uplinked: this.uplinked,
      words: this.words,
      ...rest,
    });
  }

  /** The standard guard: personal-data patterns, verbatim history n-grams, identities and canaries. */
  static forProfile(history: Iterable<string>, tokenizer: Tokenizer, options: ProfileGuardOptions = {}): EgressGuard {
    const texts = [...history];
    const publicTexts = [...(options.publicTexts ?? [])];
    const n = options.n ?? 8;
    const registered: Record<string, string> = { ...(options.identities ?? {}) };
    for (const c of options.canaries ?? []) registered[c] = CANARY;
    const detectors: Detector[] = [
      new PiiDetector(),
      new PhoneRecognizer(),
      new CardRecognizer(),
      new NationalIdRecognizer(),
      new SecretRecognizer(),
      new WrappedEmailRecognizer(),
      new KeywordValueRecognizer(),
      new ShapeRecognizer(),
      new SeedPhraseRecognizer(),
      new SpecialCategoryRecognizer(),
      new LicencePlateRecognizer(),
      new BirthDateRecognizer(),
      VerbatimNgramDetector.fromTexts(texts, tokenizer, { n, publicTexts }),
      RewrittenVerbatimDetector.fromTexts(texts, tokenizer, { n, publicTexts }),
    ];
    const secrets = HistorySecretDetector.fromHistory(texts);
    if (secrets.size > 0) detectors.push(secrets);
    // Words the history writes in lower case are words, not names: "Will Smith"'s "Will" alone is
    // not redacted in a history that says "we will" (nor is "will" a chunk of a secret).
    const words = new Set<string>();
    for (const t of texts) for (const m of t.matchAll(LOWER_WORD)) words.add(m[0]);
    if (Object.keys(registered).length > 0) detectors.push(new CanaryDetector(registered, { commonWords: words }));
    return new EgressGuard(detectors, {
      policy: options.policy ?? "placeholder",
      placeholders: placeholderLabels(options.labels ?? "by-kind"),
      words,
    });
  }

  /** The guard for one session: the public prompt's n-grams are not private, and what goes up is
   * recorded for this session alone. */
  forPrompt(prompt: string): EgressGuard {
    return this.replace({ detectors: this.detectors.map((d) => d.forPrompt(prompt)) }).newSession();
  }

  /** This guard with an empty record of what went up: the registered secrets (the history's, the
   * canaries' cores), whose chunks `noteUplink` records. */
  newSession(): EgressGuard {
    const secrets: [string, string][] = [];
    for (const d of this.detectors) {
      if (d instanceof HistorySecretDetector) secrets.push(...d.secrets.map((x): [string, string] => [x, SECRET]));
      else if (d instanceof CanaryDetector) secrets.push(...[...d.cores].sort().map((x): [string, string] => [x, CANARY]));
    }
    const common = new Set([...this.words, ...commonEnglishWords()]);
    return this.replace({ uplinked: new UplinkRecord(secrets, { commonWords: common }) });
  }

  /** `sentIds` went up after `committedIds`: the session's record takes the chunks of secrets in them. */
  noteUplink(committedIds: readonly number[], sentIds: readonly number[], tokenizer: Tokenizer): void {
    if (this.uplinked === null || sentIds.length === 0) return;
    const ctx = this.contextTokens ? committedIds.slice(-this.contextTokens) : [];
    const text = decode(tokenizer, [...ctx, ...sentIds]);
    this.uplinked.note(text, commonPrefixLength(decode(tokenizer, ctx), text));
  }

  /** This guard, not holding a bare trailing word as a possible address local part nor as the start
   * of a special-category term (the end of a text: a word stays a word). */
  withoutLocalPartHolds(): EgressGuard {
    const detectors = this.detectors.map((d) =>
      d instanceof PiiDetector
        ? new PiiDetector({ kinds: d.kinds, holdLocalParts: false })
        : d instanceof SpecialCategoryRecognizer
          ? new SpecialCategoryRecognizer({ holdPrefixes: false })
          : d,
    );
    return this.replace({ detectors });
  }

  placeholderFor(kind: string): string {
    return this.placeholders[kind] ?? GENERIC_PLACEHOLDER;
  }

  /** The placeholder's Specialist token IDs, what the cloud commits in place of the span. */
  placeholderIds(kind: string, tokenizer: Tokenizer): number[] {
    return tokenizer.encode(this.placeholderFor(kind));
  }

  /** Complete sensitive spans touching `draftText`, in indices of `committedText + draftText`
   * (merged; a span from the committed text into the draft is included). */
  inspect(committedText: string, draftText: string): Span[] {
    const start = Math.max(0, committedText.length - this.contextChars);
    const window = committedText.slice(start) + draftText;
    const boundary = committedText.length - start;
    const raw = this.detectors.flatMap((d) => d.find(window)).filter((s) => s.end > boundary);
    if (this.uplinked !== null) raw.push(...this.uplinked.find(window, boundary).filter((s) => s.end > boundary));
    return mergeSpans(raw).map((s) => new Span(s.start + start, s.end + start, s.kind));
  }

  /** The sensitive spans of a whole prompt, but verbatim runs of the user's history: a prompt naming
   * the user's own code is the request itself. */
  promptSpans(prompt: string): Span[] {
    const detectors = this.detectors.filter(
      (d) => !(d instanceof VerbatimNgramDetector || d instanceof RewrittenVerbatimDetector),
    );
    // The whole prompt at once: where it begins and ends is known (no context, no hazard).
    return this.replace({ detectors, contextChars: prompt.length, uplinked: null }).inspect("", prompt);
  }

  /** The earliest place from which the end of the text could still grow into a span, if any. */
  hazard(committedText: string, draftText: string): Span | null {
    const start = Math.max(0, committedText.length - this.contextChars);
    const window = committedText.slice(start) + draftText;
    // A token ending inside a multi-byte character decodes to U+FFFD: what precedes it is judged
    // as if the text went on, and the partial character itself is held.
    const whole = window.replace(/\ufffd+$/u, "");
    const found: Span[] = [];
    for (const d of this.detectors) {
      const h = d.hazard(whole);
      if (h !== null) found.push(new Span(h.start, window.length, h.kind));
    }
    const u = this.uplinked?.hazard(whole) ?? null;
    if (u !== null) found.push(new Span(u.start, window.length, u.kind));
    if (whole.length < window.length) found.push(new Span(whole.length, window.length, PRIVATE_NGRAM));
    const h = found.sort(compareSpans)[0];
    return h === undefined ? null : new Span(h.start + start, h.end + start, h.kind);
  }

  /**
   * Decide what of `newIds.slice(0, send)` may go up; the rest is local look-ahead only.
   * `final`: the text ends with `newIds` (end of sequence): hazards drop, complete spans don't hold.
   */
  check(
    committedIds: readonly number[],
    newIds: readonly number[],
    tokenizer: Tokenizer,
    options: { send?: number; final?: boolean } = {},
  ): GuardVerdict {
    const send = options.send ?? newIds.length;
    const final = options.final ?? false;
    if (!(Number.isInteger(send) && send >= 0 && send <= newIds.length)) {
      throw new RangeError(`send must be in [0, ${newIds.length}]; got ${send}`);
    }
    const ctx = this.contextTokens ? committedIds.slice(-this.contextTokens) : [];
    const { text, offs, split } = tokenBounds(tokenizer, ctx, newIds);
    const boundary = offs[0]!;
    let spans = this.inspect(text.slice(0, boundary), text.slice(boundary));
    // The wire carries IDs: match private n-grams on the IDs as drafted, too (a draft need not be
    // the canonical tokenization the text-level match re-derives).
    for (const d of this.detectors) {
      if (!(d instanceof VerbatimNgramDetector)) continue;
      for (const [a, b] of d.findIds([...ctx, ...newIds])) {
        if (b <= ctx.length) continue;
        const first = a >= ctx.length ? offs[Math.max(a - ctx.length, 0)]! : Math.max(0, boundary - 1);
        spans.push(new Span(first, offs[b - ctx.length]!, PRIVATE_NGRAM));
      }
    }
    spans = mergeSpans(spans);
    if (this.uplinked !== null) {
      // A secret held once is the session's for the rest of it: found whole or in chunks.
      for (const s of spans) if (s.kind === SECRET && s.end > boundary) this.uplinked.hold(text.slice(s.start, s.end));
    }
    const hazard = final ? null : this.hazard(text.slice(0, boundary), text.slice(boundary));

    let cut: number | null = null;
    let chosen: Span | null = null;
    for (const s of spans) {
      const i = firstTouching(offs, s, split);
      if (i !== null && (cut === null || i < cut)) [cut, chosen] = [i, s];
    }
    let hold = false;
    if (hazard !== null) {
      const i = firstTouching(offs, hazard, split);
      // A hazard from the same token as a complete span means the span may still grow ("Jane" of
      // "Jane Do"): hold rather than replace a part of it.
      const tie = i === cut && chosen !== null && !(chosen.kind === EMAIL && hazard.kind === EMAIL);
      if (i !== null && (cut === null || i < cut || tie)) [cut, chosen, hold] = [i, hazard, true];
    }
    if (cut === null || chosen === null || cut >= send) {
      return { cutAt: null, spanEnd: null, kind: null, placeholder: null, hold: false, spans, action: "pass" };
    }
    // A complete span that runs to the end of what was inspected may still grow.
    hold = hold || (chosen.end >= text.length && !final);
    let end = newIds.length;
    for (let j = cut + 1; j <= newIds.length; j++) {
      if (offs[j]! >= chosen.end) {
        end = j;
        break;
      }
    }
    const action = hold ? "hold" : cut > 0 ? "cut" : this.policy;
    return { cutAt: cut, spanEnd: end, kind: chosen.kind, placeholder: this.placeholderFor(chosen.kind), hold, spans, action };
  }
}

/** Decoded `context + new`, and where each new token starts (plus the end). */
export function tokenOffsets(
  tokenizer: Tokenizer,
  context: readonly number[],
  fresh: readonly number[],
): { text: string; offs: number[] } {
  const { text, offs } = tokenBounds(tokenizer, context, fresh);
  return { text, offs };
}

/** `tokenOffsets`, plus for each offset whether it falls inside a character (the token before it
 * carries some of that character's bytes, the token after it the rest). Offsets come from decoding
 * growing prefixes; where a prefix is no prefix of the whole, the common prefix. */
function tokenBounds(
  tokenizer: Tokenizer,
  context: readonly number[],
  fresh: readonly number[],
): { text: string; offs: number[]; split: boolean[] } {
  const ids = [...context, ...fresh];
  const full = decode(tokenizer, ids);
  const offs: number[] = [];
  const split: boolean[] = [];
  for (let i = 0; i <= fresh.length; i++) {
    const prefix = i < fresh.length ? decode(tokenizer, ids.slice(0, context.length + i)) : full;
    offs.push(commonPrefixLength(prefix, full));
    split.push(!full.startsWith(prefix));
  }
  for (let i = offs.length - 2; i >= 0; i--) offs[i] = Math.min(offs[i]!, offs[i + 1]!);
  return { text: full, offs, split };
}

/** How many leading characters `a` and `b` share. */
export function commonPrefixLength(a: string, b: string): number {
  if (b.startsWith(a)) return a.length;
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n++;
  return n;
}

/** The first new token whose characters overlap `span`; a token ending inside a character touches
 * that character too, so a span's first bytes never go up ahead of the cut. */
function firstTouching(offs: readonly number[], span: Span, split: readonly boolean[]): number | null {
  for (let i = 0; i < offs.length - 1; i++) {
    const a = offs[i]!;
    let b = offs[i + 1]!;
    if (split[i + 1]) b += 1;
    if ((a < span.end && b > span.start) || (a === b && span.start <= a && a < span.end)) return i;
  }
  return null;
}

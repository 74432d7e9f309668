/**
 * Where the egress guard decides what of a round goes up (port of sdk/uplink_guard.py).
 *
 * Before every round the device plans the tokens it is about to send: the pending recovery and
 * the fresh draft. Nothing sensitive: sent as drafted. A span (or a hold: a prefix that may grow
 * into one) inside the draft: the draft goes up to it (`cut`). A span at the front, by the
 * deployment's policy: `placeholder` (the cloud commits placeholder tokens in `Round.literal_ids`,
 * the device's text keeps the real span; the draft after the span is checked and sent in the same
 * round) or `keep-local` (nothing goes up: the device finishes alone). A hold is resolved by
 * drafting further locally (`more`, up to `maxLookahead` tokens); one that cannot be resolved is
 * a span: fail closed. The decisions on record name the kind's placeholder, never the span.
 */
import { EgressGuard, type GuardPolicy, type GuardVerdict } from "./guard.js";
import type { Tokenizer } from "./spans.js";

/** A decision on record: (decision, count, placeholder label). */
export type GuardDecisionRecord = readonly [decision: string, count: number, placeholder: string];

/** What one round sends, and how much of `tokens` (pending + draft + look-ahead) the device keeps. */
export interface UplinkPlan {
  commit: number[];
  literal: number[];
  draft: number[];
  tokens: number[];
  pending: number;
  /** The device's text keeps `tokens.slice(0, kept)`; the rest is rolled back. */
  kept: number;
  decisions: GuardDecisionRecord[];
  /** The policy keeps the rest of the text on the device. */
  keepLocal: boolean;
  /** Tokens drafted past the draft to resolve a hold. */
  lookahead: number;
  /** The guard's checks this plan took. */
  checks: number;
}

/** Tokens after the pending recovery the device commits without the cloud (a replaced span). */
export function localSpan(plan: UplinkPlan): number[] {
  return plan.tokens.slice(plan.pending, plan.kept - plan.draft.length);
}

export const GUARD_SETTINGS = ["placeholder", "keep-local", "off"] as const;
export type GuardSetting = (typeof GUARD_SETTINGS)[number];
/** What a deployment runs when none is chosen. */
export const DEFAULT_GUARD_SETTING: GuardSetting = "placeholder";
/** One <PRIVATE> for every kind: a deployment setting's default labels. */
export const DEFAULT_GUARD_LABELS = "generic";

/** What the guard reads of a user's profile (the dataset format the Python `Profile` parses). */
export interface GuardProfile {
  /** The profile's subjects and bodies, in order. */
  history: readonly string[];
  /** Names and emails its trailers register, text -> kind ("name" or "email"). */
  identities: Readonly<Record<string, string>>;
}

export function checkGuardSetting(setting: string): asserts setting is GuardSetting {
  if (!(GUARD_SETTINGS as readonly string[]).includes(setting)) {
    throw new RangeError(`the egress guard is one of ${GUARD_SETTINGS.join(", ")}; got ${JSON.stringify(setting)}`);
  }
}

/** The standard guard for a user: personal-data patterns, verbatim runs of the history, the
 * trailers' names and emails, and any registered canaries. */
export function guardForProfile(
  profile: GuardProfile | null,
  tokenizer: Tokenizer,
  policy: GuardPolicy,
  options: { canaries?: readonly string[]; labels?: string } = {},
): EgressGuard {
  return EgressGuard.forProfile(profile?.history ?? [], tokenizer, {
    identities: profile?.identities ?? {},
    canaries: options.canaries ?? [],
    policy,
    labels: options.labels ?? "by-kind",
  });
}

/** The guard for a deployment setting; null for "off". */
export function guardSetting(
  profile: GuardProfile | null,
  tokenizer: Tokenizer,
  setting: string,
  labels: string = DEFAULT_GUARD_LABELS,
): EgressGuard | null {
  checkGuardSetting(setting);
  return setting === "off" ? null : guardForProfile(profile, tokenizer, setting, { labels });
}

export interface PlanOptions {
  /** Drafts one more token on the device (a model step: asynchronous); null when it cannot (the
   * budget is spent, so the text ends there and a bare last word is not held as a local part). */
  more: () => Promise<number | null>;
  eosIds: ReadonlySet<number>;
  /** K: bounds the draft sent after a placeholder. */
  draftLen: number;
  maxLookahead?: number;
}

/** Decide what of `pending + draft` goes up; `committed` is the device's real text before `pending`. */
export async function planUplink(
  guard: EgressGuard,
  tokenizer: Tokenizer,
  committed: readonly number[],
  pending: readonly number[],
  draft: readonly number[],
  options: PlanOptions,
): Promise<UplinkPlan> {
  const { more, eosIds, draftLen } = options;
  const maxLookahead = options.maxLookahead ?? 32;
  const tokens = [...pending, ...draft];
  const send = tokens.length;
  let spent = false; // more() said the budget is spent: the text ends where it is
  let checks = 0;

  const check = (before: readonly number[], start: number, nSend: number): GuardVerdict => {
    checks++;
    const ended = tokens.length > 0 && eosIds.has(tokens[tokens.length - 1]!);
    // At the end of the budget a bare last word cannot become an address any more; any other
    // hold (a written "@", a secret's first digits) still fails closed.
    const g = spent ? guard.withoutLocalPartHolds() : guard;
    return g.check(before, tokens.slice(start), tokenizer, { send: nSend, final: ended });
  };
  /** Draft one more token locally; false at end of text, at the budget, or at the look-ahead cap. */
  const extend = async (): Promise<boolean> => {
    if ((tokens.length > 0 && eosIds.has(tokens[tokens.length - 1]!)) || tokens.length - send >= maxLookahead) {
      return false;
    }
    const token = await more();
    if (token === null) {
      spent = true;
      return false;
    }
    tokens.push(token);
    return true;
  };
  const resolved = async (before: readonly number[], start: number, nSend: number): Promise<GuardVerdict> => {
    let verdict = check(before, start, nSend);
    while (verdict.hold && (await extend())) verdict = check(before, start, nSend);
    if (verdict.hold && spent) verdict = check(before, start, nSend);
    return verdict;
  };

  const verdict = await resolved(committed, 0, send);
  const nPending = pending.length;
  const plan = (
    commit: number[],
    literal: number[],
    sent: number[],
    kept: number,
    decisions: GuardDecisionRecord[],
  ): UplinkPlan => {
    // The session's record of what went up (a secret's chunks).
    guard.noteUplink([...committed, ...tokens.slice(0, kept - sent.length)], sent, tokenizer);
    return {
      commit,
      literal,
      draft: sent,
      tokens,
      pending: nPending,
      kept,
      decisions,
      keepLocal: false,
      lookahead: tokens.length - send,
      checks,
    };
  };

  if (verdict.cutAt === null) return plan([...pending], [], [...draft], send, []);
  const label = verdict.placeholder ?? guard.placeholderFor(verdict.kind ?? "");
  if (verdict.cutAt >= Math.max(nPending, 1)) {
    return plan([...pending], [], tokens.slice(nPending, verdict.cutAt), verdict.cutAt, [["cut", 1, label]]);
  }
  // The span is at the front (it may cover the pending recovery): the deployment's policy decides.
  if (guard.policy === "keep-local") {
    return {
      commit: [],
      literal: [],
      draft: [],
      tokens,
      pending: nPending,
      kept: tokens.length,
      decisions: [["keep-local", 1, label]],
      keepLocal: true,
      lookahead: tokens.length - send,
      checks,
    };
  }
  const spanEnd = Math.max(verdict.spanEnd!, nPending);
  const decisions: GuardDecisionRecord[] = [["placeholder", 1, label]];
  const literal = guard.placeholderIds(verdict.kind!, tokenizer);
  // The round goes on with a draft after the span (drafted further if need be), checked in turn,
  // so the cloud verifies the continuation in the same round instead of steering blind after it.
  while (tokens.length < spanEnd + draftLen && (await extend())) {
    /* drafting further */
  }
  // A hold the look-ahead could not resolve is replaced up to where the device stopped looking.
  const rest = verdict.hold ? 0 : Math.min(draftLen, Math.max(0, tokens.length - spanEnd));
  let sent: number[] = [];
  if (rest > 0) {
    const before = [...committed, ...tokens.slice(0, spanEnd)];
    const after = await resolved(before, spanEnd, rest);
    const n = after.cutAt ?? rest;
    sent = tokens.slice(spanEnd, spanEnd + n);
    if (after.cutAt !== null) decisions.push(["cut", 1, after.placeholder ?? label]);
  }
  return plan([], literal, sent, spanEnd + sent.length, decisions);
}

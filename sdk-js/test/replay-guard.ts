/**
 * The replayers of conformance/v1/guard/: the TypeScript egress guard on the same profiles, texts
 * and token IDs as the Python SDK's (tools/conformance/guard.py), on the default bundle's tokenizer.
 * Offsets in the vectors are Python's (code points); the guard's are UTF-16 indices, converted here.
 */
import { EgressGuard, type GuardPolicy } from "../src/guard/guard.js";
import { codePointOffset } from "../src/guard/pystr.js";
import type { Span, Tokenizer } from "../src/guard/spans.js";
import { planUplink } from "../src/guard/uplink_guard.js";
import { defaultRenderer } from "./replay-prompts.js";
import type { Result } from "./replay-wire.js";
import type { Json } from "./vectors.js";

/** The default bundle's tokenizer, its files checked against the hashes the vectors name. */
export async function guardTokenizer(model: Json): Promise<Tokenizer> {
  return (await defaultRenderer(model)).guardTokenizer();
}

function sessionGuardOf(profile: Json, tokenizer: Tokenizer, prompt: string, setting: string, labels: string): EgressGuard {
  return EgressGuard.forProfile(profile.history, tokenizer, {
    identities: profile.identities,
    canaries: profile.canaries,
    policy: setting as GuardPolicy,
    labels,
  }).forPrompt(prompt);
}

function spanJson(s: Span, text: string, guard: EgressGuard): Json {
  return {
    start: codePointOffset(text, s.start),
    end: codePointOffset(text, s.end),
    kind: s.kind,
    text: text.slice(s.start, s.end),
    placeholder: guard.placeholderFor(s.kind),
  };
}

/** What the guard finds in a whole text, as tools/conformance/guard.py's `_spans_outcome` writes it. */
export function spansOutcome(guard: EgressGuard, text: string): Json {
  const hazard = guard.hazard("", text);
  return {
    spans: guard.inspect("", text).map((s) => spanJson(s, text, guard)),
    hazard:
      hazard === null
        ? null
        : { start: codePointOffset(text, hazard.start), end: codePointOffset(text, hazard.end), kind: hazard.kind },
  };
}

export async function replayGuardSpans(doc: Json): Promise<Result[]> {
  const tokenizer = await guardTokenizer(doc.model);
  const guards = new Map<string, EgressGuard>();
  return doc.vectors.map((v: Json): Result => {
    const key = `${v.profile}\u0000${v.prompt}`;
    let guard = guards.get(key);
    if (guard === undefined) {
      guard = sessionGuardOf(doc.profiles[v.profile], tokenizer, v.prompt, "placeholder", "by-kind");
      guards.set(key, guard);
    }
    const got = spansOutcome(guard, v.text);
    const ok = JSON.stringify(got) === JSON.stringify(v.expected);
    return [v.name, ok, ok ? "" : JSON.stringify(got).slice(0, 600)];
  });
}

/** Each round's plan as the device drafts `ids` K tokens a round and the cloud accepts every draft. */
export async function replaySession(
  guard: EgressGuard,
  tokenizer: Tokenizer,
  ids: readonly number[],
  eos: number,
  k: number,
  pending: number,
): Promise<Json[]> {
  const rounds: Json[] = [];
  let at = 0;
  while (at < ids.length) {
    const pend = at ? ids.slice(at, at + pending) : [];
    const draft = ids.slice(at + pend.length, at + pend.length + k);
    const script = ids.slice(at + pend.length + draft.length)[Symbol.iterator]();
    const plan = await planUplink(guard, tokenizer, ids.slice(0, at), pend, draft, {
      more: async () => {
        const next = script.next();
        return next.done ? null : next.value;
      },
      eosIds: new Set([eos]),
      draftLen: k,
    });
    rounds.push({
      at,
      commit: plan.commit,
      literal: plan.literal,
      draft: plan.draft,
      kept: plan.kept,
      decisions: plan.decisions.map(([d, n, label]) => [d, n, label]),
      keep_local: plan.keepLocal,
      lookahead: plan.lookahead,
    });
    if (plan.keepLocal) break;
    if (plan.kept <= 0) throw new Error(`a round at ${at} kept no token`);
    at += plan.kept;
  }
  return rounds;
}

export async function replayGuardRounds(doc: Json): Promise<Result[]> {
  const tokenizer = await guardTokenizer(doc.model);
  const results: Result[] = [];
  for (const v of doc.vectors) {
    // A fresh guard per vector: a session's record of what went up is its own.
    const guard = sessionGuardOf(doc.profiles[v.profile], tokenizer, v.prompt, v.setting, v.labels);
    const got = { rounds: await replaySession(guard, tokenizer, v.token_ids, v.eos_id, v.draft_len, v.pending) };
    const ok = JSON.stringify(got) === JSON.stringify(v.expected);
    results.push([v.name, ok, ok ? "" : JSON.stringify(got).slice(0, 600)]);
  }
  return results;
}

/**
 * The prompt, guarded (port of sdk/prompt_guard.py): what of the user's prompt goes up in the Open.
 *
 * `redact` (default): each span goes up as a numbered placeholder ("<PRIVATE_1>"), the device's
 * Specialist reads the real prompt and the device puts the real spans back in its final text
 * (`restorePrompt`); the spans are registered with the session's guard, so drafts repeating them
 * are held. `refuse`: nothing is sent (`PromptRefusedError`). `allow`: the prompt goes up as typed,
 * the decision on record all the same. Verbatim runs of the user's history do not count: a prompt
 * naming the user's own code is the request itself.
 */
import { CanaryDetector } from "./canaries.js";
import type { EgressGuard } from "./guard.js";
import { escapeRe } from "./pyre.js";
import type { GuardDecisionRecord } from "./uplink_guard.js";

export const PROMPT_POLICIES = ["redact", "refuse", "allow"] as const;
export type PromptPolicy = (typeof PROMPT_POLICIES)[number];

/** The prompt carries sensitive spans and the prompt policy is `refuse`: nothing was sent. */
export class PromptRefusedError extends Error {
  override readonly name = "PromptRefusedError";
}

export function checkPromptPolicy(policy: string): asserts policy is PromptPolicy {
  if (!(PROMPT_POLICIES as readonly string[]).includes(policy)) {
    throw new RangeError(`the prompt guard is one of ${PROMPT_POLICIES.join(", ")}; got ${JSON.stringify(policy)}`);
  }
}

/** What of the prompt goes up: `public`, and each span as [placeholder, original text, kind]. */
export interface PromptPlan {
  prompt: string;
  public: string;
  policy: PromptPolicy;
  spans: readonly (readonly [placeholder: string, original: string, kind: string])[];
  /** Each span's placeholder label without its number, for the record. */
  labels: readonly string[];
}

/** The guard-decision records of a plan: one per label, with its count. */
export function promptDecisions(plan: PromptPlan): GuardDecisionRecord[] {
  if (plan.spans.length === 0 || plan.policy === "refuse") return [];
  const decision = plan.policy === "redact" ? "prompt-redact" : "prompt-allow";
  const counts = new Map<string, number>();
  for (const label of plan.labels) counts.set(label, (counts.get(label) ?? 0) + 1);
  return [...counts].map(([label, n]) => [decision, n, label]);
}

/** `text` with each placeholder the plan sent put back as the span it stands for. */
export function restorePrompt(plan: PromptPlan, text: string): string {
  if (plan.policy !== "redact" || plan.spans.length === 0) return text;
  const originals = new Map(plan.spans.map(([p, o]) => [p, o]));
  const keys = [...originals.keys()].sort((a, b) => b.length - a.length);
  const pattern = new RegExp(keys.map(escapeRe).join("|"), "gu");
  return text.replace(pattern, (m) => originals.get(m) ?? m);
}

/** "<PRIVATE>" -> "<PRIVATE_1>": numbered so the Generalist can refer to each span apart. */
function numbered(label: string, n: number): string {
  if (label.length >= 2 && "<[{".includes(label[0]!) && ">]}".includes(label[label.length - 1]!)) {
    return `${label.slice(0, -1)}_${n}${label[label.length - 1]}`;
  }
  return `${label}_${n}`;
}

/** The plan for `prompt` under `policy` (throws `PromptRefusedError` for refuse with spans found). */
export function guardPrompt(guard: EgressGuard, prompt: string, policy: string = "redact"): PromptPlan {
  checkPromptPolicy(policy);
  const spans = guard.promptSpans(prompt);
  if (spans.length === 0) return { prompt, public: prompt, policy, spans: [], labels: [] };
  const kinds = [...new Set(spans.map((s) => s.kind))].sort();
  if (policy === "refuse") {
    throw new PromptRefusedError(
      `the prompt carries ${spans.length} sensitive span(s) (${kinds.join(", ")}) and the prompt guard is refuse: nothing was sent (rewrite the prompt, or choose redact)`,
    );
  }
  const out: [string, string, string][] = [];
  const labels: string[] = [];
  const numbers = new Map<string, number>(); // a repeated span keeps its number
  const pieces: string[] = [];
  let at = 0;
  for (const s of spans) {
    const original = prompt.slice(s.start, s.end);
    const label = guard.placeholderFor(s.kind);
    if (!numbers.has(original)) numbers.set(original, numbers.size + 1);
    const placeholder = numbered(label, numbers.get(original)!);
    out.push([placeholder, original, s.kind]);
    labels.push(label);
    pieces.push(prompt.slice(at, s.start), placeholder);
    at = s.end;
  }
  const shown = policy === "redact" ? pieces.join("") + prompt.slice(at) : prompt;
  return { prompt, public: shown, policy, spans: out, labels };
}

/** The session's guard: the public prompt's n-grams are not private, and the prompt's spans are
 * registered strings for this session (a draft that repeats one is held). */
export function sessionGuard(guard: EgressGuard, plan: PromptPlan): EgressGuard {
  const session = guard.forPrompt(plan.public);
  const registered: Record<string, string> = {};
  for (const [, original, kind] of plan.spans) if (original.trim()) registered[original] = kind;
  if (Object.keys(registered).length === 0) return session;
  const extra = new CanaryDetector(registered, { commonWords: guard.words });
  // A new record of what went up, now holding the prompt's secrets' cores too.
  return session.replace({ detectors: [...session.detectors, extra] }).newSession();
}

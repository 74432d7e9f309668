/**
 * One guarded generation's setup, as sdk/decoding.py's `generate` does it before the Open: the
 * prompt guarded by its policy (what of it goes up), the session's guard (the public prompt's
 * n-grams are not private; the prompt's spans are registered for the session), and the public
 * prompt's IDs the Open carries. After the generation, `restorePrompt(session.prompt, text)` puts
 * the prompt's spans back where the text repeats their placeholders.
 */
import type { GuardedSession } from "../session.js";
import type { EgressGuard } from "./guard.js";
import { guardPrompt, sessionGuard } from "./prompt_guard.js";
import type { Tokenizer } from "./spans.js";

export function guardGeneration(
  guard: EgressGuard,
  tokenizer: Tokenizer,
  prompt: string,
  promptPolicy = "redact",
): { session: GuardedSession; publicIds: number[] } {
  const plan = guardPrompt(guard, prompt, promptPolicy);
  return {
    session: { guard: sessionGuard(guard, plan), tokenizer, prompt: plan },
    publicIds: tokenizer.encode(plan.public),
  };
}

/**
 * The egress guard (a port of the Python SDK's privacy/ detectors and sdk/uplink_guard.py,
 * sdk/prompt_guard.py), held to it by conformance/v1/guard/: what an app uses to guard a generation.
 */
export { EgressGuard, GENERIC_PLACEHOLDER, PLACEHOLDERS, PLACEHOLDER_LABELS, placeholderLabels } from "./guard.js";
export type { GuardOptions, GuardPolicy, GuardVerdict, PlaceholderLabels, ProfileGuardOptions } from "./guard.js";
export { guardGeneration } from "./guarded.js";
export {
  PROMPT_POLICIES,
  PromptRefusedError,
  checkPromptPolicy,
  guardPrompt,
  promptDecisions,
  restorePrompt,
  sessionGuard,
} from "./prompt_guard.js";
export type { PromptPlan, PromptPolicy } from "./prompt_guard.js";
export { guardProfileOf } from "./profile.js";
export type { ProfileItem } from "./profile.js";
export { KINDS, Span, mergeSpans } from "./spans.js";
export type { Detector, Tokenizer } from "./spans.js";
export { HfTokenizer } from "./tokenizer.js";
export {
  DEFAULT_GUARD_LABELS,
  DEFAULT_GUARD_SETTING,
  GUARD_SETTINGS,
  checkGuardSetting,
  guardForProfile,
  guardSetting,
  localSpan,
  planUplink,
} from "./uplink_guard.js";
export type { GuardDecisionRecord, GuardProfile, GuardSetting, PlanOptions, UplinkPlan } from "./uplink_guard.js";

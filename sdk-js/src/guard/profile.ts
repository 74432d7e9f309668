/**
 * What the guard reads of a user's profile (sdk/context.py's `Profile` as privacy/profile_format.py
 * parses it): the history (each entry's subject and body, a body's own trailer block cut off) and
 * the identities (names and emails of the entries' `trailers` lists and of those trailer blocks,
 * and names the bodies' prose quotes in another script), for the egress guard only.
 */
import { NAME } from "./spans.js";
import { identitiesFromTrailers, namesInProse, splitTrailers } from "./canaries.js";
import type { GuardProfile } from "./uplink_guard.js";

/** One entry of a profile as the dataset stores it. */
export interface ProfileItem {
  subject: string;
  body: string;
  /** `Key: Name <email>` lines kept apart from the body. */
  trailers?: readonly string[];
}

/** The guard's view of a profile's entries: history and identities, as the Python device reads them. */
export function guardProfileOf(items: readonly ProfileItem[]): GuardProfile {
  const split = items.map((item) => splitTrailers(item.body));
  const history = items.flatMap((item, i) => [item.subject.trim(), split[i]![0]].filter((t) => t !== ""));
  // As privacy/profile_format.py reads them: every `trailers` list first, then the bodies' blocks.
  const lines = [...items.flatMap((item) => item.trailers ?? []), ...split.flatMap(([, block]) => block)];
  const prose = split.map(([body]) => body);
  const identities = identitiesFromTrailers(lines);
  for (const text of prose) for (const name of namesInProse(text)) if (!identities.has(name)) identities.set(name, NAME);
  return { history, identities: Object.fromEntries(identities) };
}

"""The egress guard, as the device decides what of its text may go up.

Both files name the tokenizer they were written with (the default bundle's, as `prompts/render.json`;
`check` refuses to judge against another) and hold `profiles`: what the guard is built from, per
synthetic user: `history` (the profile's subjects and bodies, as `sdk.uplink_guard.guard_for_profile`
reads them), `identities` (the names and emails its trailers and prose register, {text: kind}) and
`canaries`. The cases are drawn, from fixed seeds, from the guard benchmark's own generators
(`bench.guard_cases`, `_adversarial`, `_identifiers`, `_round3`: one per category, and one ordinary
developer sentence per kind) and from the repository's small dataset subset (tests/fixtures/users.jsonl:
verbatim runs of a history, its trailers' identities, ordinary sentences of other users' targets).

`guard/spans.json`: for each vector a `profile`, the session's public `prompt` and a `text`;
`expected` is what the session's guard (`EgressGuard.for_profile(...).for_prompt(prompt)`) finds in
the whole text: `spans` (`inspect("", text)`: merged, each with `start`/`end` character offsets,
`kind`, the `text` it covers and its by-kind `placeholder`) and `hazard` (`hazard("", text)`: where
the end of the text could still grow into a span, or null).

`guard/rounds.json`: for each vector a `profile`, `prompt`, `setting` (placeholder | keep-local),
`labels` (by-kind | generic), `draft_len` K, `pending` (tokens of each round sent as the pending
recovery) and the text's `token_ids` (its encoding, then `eos_id`). The session is replayed as
`bench.guard_recall.run_text` drafts it, the cloud accepting every draft: from position `at`
(0 first), the round's pending recovery is `token_ids[at:at+pending]` (none in the first round),
its draft the next K tokens, and the device's look-ahead (`more()`) returns the tokens after them,
then None. `expected.rounds` lists each round's `sdk.uplink_guard.plan_uplink` decision: `at`,
`commit`, `literal` (placeholder IDs), `draft` (the IDs sent), `kept`, `decisions`
([decision, count, placeholder]), `keep_local`, `lookahead`; the next round starts at `at + kept`,
and a keep-local round ends the session.
"""

from __future__ import annotations

import functools
import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specsteer.core.device_lm import DeviceLM
from specsteer.privacy.guard import PLACEHOLDERS, EgressGuard, GuardPolicy
from specsteer.privacy.spans import Span
from specsteer.sdk.context import Profile
from specsteer.sdk.uplink_guard import plan_uplink
from tools.conformance.common import ConformanceError, mismatch
from tools.conformance.prompts import _model

SPANS_FILE = "guard/spans.json"
ROUNDS_FILE = "guard/rounds.json"
PROMPT = "Write the commit body."  # the benchmark's public prompt
FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "users.jsonl"
FIXTURE_BODIES = 5  # entries of a fixture user in a profile's history: enough for n-grams, a small file

Case = tuple[str, str, str, str]  # (name, description, profile key, text)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


@functools.cache
def _users() -> list[dict[str, Any]]:
    return [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines() if line.strip()]


def profile_doc(entries: list[dict[str, Any]], canaries: list[str]) -> dict[str, Any]:
    """What the guard reads of a profile (the dataset format parsed by `sdk.context.Profile`)."""
    profile = Profile.from_obj({"profile": entries})
    history = [t for e in profile.entries for t in (e.subject, e.body) if t]
    return {"history": history, "identities": dict(profile.identities), "canaries": canaries}


def _fixture_entries(user: int, trailers: list[str] | None = None) -> list[dict[str, Any]]:
    entries = [dict(e) for e in _users()[user]["profile"][:FIXTURE_BODIES]]
    if trailers is not None:  # a benchmark persona's history: their trailer, not the fixture user's
        entries = [{**e, "trailers": trailers} for e in entries]
    return entries


@functools.cache
def _cases() -> tuple[dict[str, dict[str, Any]], list[Case]]:
    """The profiles and the span cases, drawn from the benchmark's generators with fixed seeds."""
    from bench import guard_cases as original  # the benchmark: imported when used
    from bench import guard_cases_adversarial as adversarial
    from bench import guard_cases_identifiers as identifiers
    from bench import guard_cases_round3 as round3

    profiles: dict[str, dict[str, Any]] = {}
    cases: list[Case] = []

    # The original set (bench.guard_cases, seed 0): persons with a trailer and a canary, over a fixture history.
    rng = random.Random(0)
    persons = original.people(rng, 2)
    for i, p in enumerate(persons):
        trailer = f"Signed-off-by: {p.name} <{p.email}>"
        profiles[f"original-{i}"] = profile_doc(_fixture_entries(i, [trailer]), [p.canary])
    for s in original.positives(rng, persons, 1):
        what = ", ".join(repr(s.text[a:b]) for a, b in s.spans)
        cases.append((f"original-{_slug(s.category)}", f"bench.guard_cases {s.category!r}: {what}",
                      f"original-{s.profile}", s.text))  # fmt: skip

    # The adversarial set (seed 1): personas whose history carries a password, a cloud key, a bot token.
    rng = random.Random(1)
    personas = adversarial.personas(rng, 2)
    for i, ap in enumerate(personas):
        bodies = [*({"subject": "s", "body": b} for b in ap.history), *_fixture_entries(i)]
        profiles[f"adversarial-{i}"] = profile_doc([{**e, "trailers": [ap.trailer]} for e in bodies], [ap.canary])
    for c in adversarial.positives(rng, personas, 1):
        what = ", ".join(repr(c.text[a:b]) for a, b in c.spans)
        cases.append((f"adversarial-{_slug(c.category)}", f"bench.guard_cases_adversarial {c.category!r}: {what}",
                      f"adversarial-{c.persona}", c.text))  # fmt: skip
    for kind, text in adversarial.developer_text(rng, 1):
        cases.append((f"developer-{_slug(kind)}", f"ordinary developer text ({kind}): nothing to hold",
                       "adversarial-0", text))  # fmt: skip

    # The identifiers set (seed 2): values a keyword announces or a shape gives away, no registration needed.
    rng = random.Random(2)
    for k, (category, text, spans) in enumerate(identifiers.positives(rng, 1)):
        what = ", ".join(repr(text[a:b]) for a, b in spans)
        cases.append((f"identifiers-{_slug(category)}", f"bench.guard_cases_identifiers {category!r}: {what}",
                       f"adversarial-{k % 2}", text))  # fmt: skip
    for kind, text in identifiers.developer_text(rng, 1):
        cases.append((f"developer-keyword-{_slug(kind)}", f"a keyword without a value ({kind}): nothing to hold",
                       "adversarial-1", text))  # fmt: skip

    # The round-3 set (seed 3): special categories, names in other scripts, prose secrets.
    rng = random.Random(3)
    r3 = round3.personas(rng, 2)
    for i, rp in enumerate(r3):
        profiles[f"round3-{i}"] = profile_doc([*rp.entries, *_fixture_entries(2)], [])
    for category, text, spans, i in round3.positives(rng, r3, 1):
        what = ", ".join(repr(text[a:b]) for a, b in spans)
        cases.append((f"round3-{_slug(category)}", f"bench.guard_cases_round3 {category!r}: {what}",
                      f"round3-{i}", text))  # fmt: skip
    for kind, text in round3.developer_text(rng, 1):
        cases.append((f"developer-r3-{_slug(kind)}", f"ordinary developer text ({kind}): nothing to hold",
                       "round3-0", text))  # fmt: skip

    cases += _fixture_cases(profiles)
    return profiles, cases


def _fixture_cases(profiles: dict[str, dict[str, Any]]) -> list[Case]:
    """Cases from the fixture users: a history's own words, its trailers' identities, ordinary text."""
    from bench.guard_cases import ordinary_sentences

    users = _users()
    profiles["fixture-u0"] = profile_doc(_fixture_entries(0), [])
    body = users[0]["profile"][1]["body"]  # "On macOS we opportunistically use Homebrew-installed ..."
    first_line, second_line = body.splitlines()[0], body.splitlines()[2]
    ident = profiles["fixture-u0"]["identities"]
    name = next(t for t, kind in ident.items() if kind == "name")
    email = next(t for t, kind in ident.items() if kind == "email")
    out: list[Case] = [
        ("history-ngram-line", "a line of the user's history copied verbatim: a private n-gram", "fixture-u0",
         f"As I wrote before: {first_line} and so on."),
        ("history-ngram-alone", "a verbatim line of the history, alone", "fixture-u0", second_line),
        ("history-ngram-short", "four words of the history: too short to be a private n-gram", "fixture-u0",
         "We opportunistically use Homebrew here."),
        ("history-subject", "a subject of the history, verbatim, in a sentence", "fixture-u0",
         f"This follows up on '{users[0]['profile'][0]['subject']}' from last week."),
        ("trailer-name", "a name registered by the history's trailers", "fixture-u0",
         f"Thanks to {name} for the review."),
        ("trailer-email", "an email registered by the history's trailers", "fixture-u0",
         f"Send the logs to {email} please."),
        ("trailer-name-lower", "a registered name in lower case", "fixture-u0",
         f"Ask {name.lower()} about it."),
        ("empty", "an empty text: nothing to hold, no hazard", "fixture-u0", ""),
        ("hazard-email-prefix", "an address still being written at the end of the text: a hazard, no span",
         "fixture-u0", "Please write to jane.doe@exam"),
        ("hazard-phone-prefix", "the first digits of a phone number at the end: a hazard", "fixture-u0",
         "Call me at +1 415 55"),
        ("hazard-bare-word", "a bare last word may be an address's local part", "fixture-u0",
         "The reviewer was jane.doe"),
    ]  # fmt: skip
    # Ordinary sentences of the other fixture users' query targets: the benchmark's negatives.
    for k, text in enumerate(ordinary_sentences(users[1:], 8, random.Random(0))):
        out.append((f"ordinary-{k}", "an ordinary sentence of a real commit body: nothing to hold", "fixture-u0",
                    text))  # fmt: skip
    return out


def session_guard(profile: dict[str, Any], tokenizer: Any, prompt: str, setting: str, labels: str) -> EgressGuard:
    """The session's guard: `sdk.uplink_guard.guard_for_profile` of this profile, for this prompt."""
    guard = EgressGuard.for_profile(
        profile["history"],
        tokenizer,
        identities=profile["identities"],
        canaries=profile["canaries"],
        policy=GuardPolicy(setting),
        labels=labels,
    )
    return guard.for_prompt(prompt)


def _span(s: Span, text: str, guard: EgressGuard) -> dict[str, Any]:
    return {"start": s.start, "end": s.end, "kind": s.kind, "text": text[s.start : s.end],
            "placeholder": guard.placeholder_for(s.kind)}  # fmt: skip


def _spans_outcome(guard: EgressGuard, text: str) -> dict[str, Any]:
    hazard = guard.hazard("", text)
    return {
        "spans": [_span(s, text, guard) for s in guard.inspect("", text)],
        "hazard": None if hazard is None else {"start": hazard.start, "end": hazard.end, "kind": hazard.kind},
    }


def _check_model(doc: dict[str, Any], file: str) -> tuple[DeviceLM, list[str]]:
    lm, model = _model()
    if model != doc["model"]:
        return lm, [mismatch(file, "*", "the default bundle's tokenizer files", doc["model"], model)]
    return lm, []


def build_spans() -> dict[str, Any]:
    lm, model = _model()
    profiles, cases = _cases()
    names = [name for name, *_ in cases]
    if len(set(names)) != len(names):
        raise ConformanceError(f"{SPANS_FILE}: two cases share a name")
    guards = {key: session_guard(p, lm.tokenizer, PROMPT, "placeholder", "by-kind") for key, p in profiles.items()}
    vectors = [
        {"name": name, "description": description, "profile": key, "prompt": PROMPT, "text": text,
         "expected": _spans_outcome(guards[key], text)}
        for name, description, key, text in cases
    ]  # fmt: skip
    return {"kind": "guard-spans", "function": "privacy.guard.EgressGuard.inspect, hazard", "model": model,
            "placeholders": dict(PLACEHOLDERS), "profiles": profiles, "vectors": vectors}  # fmt: skip


def check_spans(doc: dict[str, Any]) -> list[str]:
    lm, problems = _check_model(doc, SPANS_FILE)
    if problems:
        return problems
    guards: dict[tuple[str, str], EgressGuard] = {}
    for v in doc["vectors"]:
        key = (v["profile"], v["prompt"])
        if key not in guards:  # one guard per profile and prompt: building one tokenizes its history
            guards[key] = session_guard(
                doc["profiles"][v["profile"]], lm.tokenizer, v["prompt"], "placeholder", "by-kind"
            )
        got = _spans_outcome(guards[key], v["text"])
        if got != v["expected"]:
            problems.append(mismatch(SPANS_FILE, v["name"], "spans", v["expected"], got))
    return problems


# -- rounds -----------------------------------------------------------------------------------------

# (span case, setting, labels, K, pending, what the variant shows); every other case runs placeholder, by-kind, K 4.
_VARIANTS: tuple[tuple[str, str, str, int, int, str], ...] = (
    ("original-email-plain", "placeholder", "generic", 4, 0, "generic labels: every span goes up as <PRIVATE>"),
    ("original-email-plain", "keep-local", "by-kind", 4, 0, "keep-local: the session ends at the span"),
    ("original-email-plain", "placeholder", "by-kind", 4, 1, "each round's first token sent as a pending recovery"),
    ("original-email-plain", "placeholder", "by-kind", 1, 0, "one token a round"),
    ("original-phone-uk", "placeholder", "by-kind", 8, 1, "K 8 with a pending recovery"),
    ("trailer-name", "placeholder", "by-kind", 2, 1, "a registered name, a pending recovery"),
    ("history-ngram-line", "keep-local", "generic", 4, 0, "keep-local at a private n-gram"),
    ("adversarial-history-password-copied", "placeholder", "by-kind", 6, 0, "K 6"),
)
ROUND_EVERY = 3  # every third span case is also replayed round by round (with the default setting)


def _round_cases(cases: list[Case]) -> list[tuple[str, str, str, str, str, str, int, int]]:
    by_name = {name: (description, key, text) for name, description, key, text in cases}
    out = []
    for name, description, key, text in cases[::ROUND_EVERY]:
        if text:
            out.append((name, description, key, text, "placeholder", "by-kind", 4, 0))
    for name, setting, labels, k, pending, why in _VARIANTS:
        description, key, text = by_name[name]
        out.append((f"{name}-{setting}-{labels}-k{k}-p{pending}", f"{description}; {why}", key, text, setting,
                    labels, k, pending))  # fmt: skip
    return out


def _session(guard: EgressGuard, lm: DeviceLM, ids: list[int], eos: int, k: int, pending: int) -> list[dict[str, Any]]:
    """Each round's plan as the device drafts `ids` K tokens a round and the cloud accepts every draft."""
    rounds: list[dict[str, Any]] = []
    at = 0
    while at < len(ids):
        pend = ids[at : at + pending] if at else []
        draft = ids[at + len(pend) : at + len(pend) + k]
        script = iter(ids[at + len(pend) + len(draft) :])
        plan = plan_uplink(guard, lm.tokenizer, ids[:at], pend, draft, more=lambda s=script: next(s, None),
                           eos_ids=frozenset({eos}), draft_len=k)  # fmt: skip
        rounds.append({"at": at, "commit": plan.commit, "literal": plan.literal, "draft": plan.draft,
                       "kept": plan.kept, "decisions": [[str(d), n, label] for d, n, label in plan.decisions],
                       "keep_local": plan.keep_local, "lookahead": plan.lookahead})  # fmt: skip
        if plan.keep_local:
            break
        if plan.kept <= 0:  # a plan that keeps nothing would replay forever
            raise ConformanceError(f"{ROUNDS_FILE}: a round at {at} kept no token")
        at += plan.kept
    return rounds


def _eos(lm: DeviceLM) -> int:
    return min(lm.eos_ids)


def build_rounds() -> dict[str, Any]:
    lm, model = _model()
    profiles, cases = _cases()
    eos = _eos(lm)
    vectors = []
    for name, description, key, text, setting, labels, k, pending in _round_cases(cases):
        ids = [*lm.tokenizer.encode(text, add_special_tokens=False), eos]
        guard = session_guard(profiles[key], lm.tokenizer, PROMPT, setting, labels)
        vectors.append(
            {"name": name, "description": description, "profile": key, "prompt": PROMPT, "setting": setting,
             "labels": labels, "draft_len": k, "pending": pending, "text": text, "token_ids": ids, "eos_id": eos,
             "expected": {"rounds": _session(guard, lm, ids, eos, k, pending)}}
        )  # fmt: skip
    used = {v["profile"] for v in vectors}
    return {"kind": "guard-rounds", "function": "sdk.uplink_guard.plan_uplink", "model": model,
            "profiles": {key: p for key, p in profiles.items() if key in used}, "vectors": vectors}  # fmt: skip


def check_rounds(doc: dict[str, Any]) -> list[str]:
    lm, problems = _check_model(doc, ROUNDS_FILE)
    if problems:
        return problems
    for v in doc["vectors"]:
        # A fresh guard per vector: a session's record of what went up (`note_uplink`) is its own.
        guard = session_guard(doc["profiles"][v["profile"]], lm.tokenizer, v["prompt"], v["setting"], v["labels"])
        got = {"rounds": _session(guard, lm, v["token_ids"], v["eos_id"], v["draft_len"], v["pending"])}
        if got != v["expected"]:
            problems.append(mismatch(ROUNDS_FILE, v["name"], "rounds", v["expected"], got))
    return problems


FILES: tuple[tuple[str, Callable[[], dict[str, Any]], Callable[[dict[str, Any]], list[str]]], ...] = (
    (SPANS_FILE, build_spans, check_spans),
    (ROUNDS_FILE, build_rounds, check_rounds),
)

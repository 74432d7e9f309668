"""Retrieval, as the device picks the author's examples for a prompt.

`retrieval/rank.json`: the demo profile's entries, and for each vector a `query`, `n` and
`max_chars`; `expected` is what `sdk.context` computes: every entry's BM25 score (`scores`, float32
values: bm25s's Lucene variant, k1 1.5, b 0.75, its tokenizer and English stopwords), the entries
ranked (`order`: by score, ties by position) and the examples `fit_context` makes of the first `n`
(`examples`).
"""

from __future__ import annotations

from typing import Any

from tools.conformance.common import f32s, load, mismatch

FILE = "retrieval/rank.json"


def _profile() -> Any:
    from specsteer.sdk.context import Profile, demo_profile_path  # bm25s: imported when used

    return Profile.from_file(demo_profile_path()), load(demo_profile_path())["queries"]


def _cases(queries: list[dict[str, Any]]) -> list[tuple[str, str, str, int, int]]:
    from specsteer.core.prompts import task_prompt

    out = [
        (f"demo-query-{i}", f"demo query {i}'s task prompt, as the device retrieves for it",
         task_prompt(q["subject"]), 3, 1800)
        for i, q in enumerate(queries)
    ]  # fmt: skip
    out += [
        ("subject-only", "a bare subject line", queries[0]["subject"], 3, 1800),
        ("empty", "an empty query scores every entry 0: the first entries in profile order", "", 3, 1800),
        ("stopwords-only", "only stopwords: no indexed term", "the and of to a", 3, 1800),
        ("unseen", "words no entry holds", "zzqx quuxly", 3, 1800),
        ("repeated-term", "a term repeated counts each time", "cache cache cache eviction", 3, 1800),
        ("unicode", "non-ASCII letters, digits and one-letter words", "Café naïve über straße x 42 ß", 3, 1800),
        ("small-budget", "a 400-character budget: bodies trimmed or entries dropped", queries[0]["subject"], 3, 400),
        ("tiny-budget", "a budget below one subject line: no examples", queries[0]["subject"], 3, 20),
        ("n-zero", "no entries asked for", queries[0]["subject"], 0, 1800),
        ("n-all", "more entries asked for than the profile holds", queries[0]["subject"], 50, 100000),
    ]
    return out


def _outcome(profile: Any, query: str, n: int, max_chars: int) -> dict[str, Any]:
    from specsteer.sdk.context import ProfileIndex, fit_context

    index = ProfileIndex(profile)
    scores = index._scores(query)
    order = sorted(range(len(profile.entries)), key=lambda i: (-float(scores[i]), i))
    examples = fit_context(index.retrieve(query, n), max_chars=max_chars)
    return {
        "scores": f32s(scores.tolist()),
        "order": order,
        "examples": [{"subject": e.subject, "body": e.body} for e in examples],
    }


def build() -> dict[str, Any]:
    profile, queries = _profile()
    vectors = [
        {"name": name, "description": description, "query": query, "n": n, "max_chars": max_chars,
         "expected": _outcome(profile, query, n, max_chars)}
        for name, description, query, n, max_chars in _cases(queries)
    ]  # fmt: skip
    entries = [{"subject": e.subject, "body": e.body} for e in profile.entries]
    return {"kind": "retrievals", "function": "sdk.context.ProfileIndex.retrieve, fit_context", "profile": entries,
            "vectors": vectors}  # fmt: skip


def check(doc: dict[str, Any]) -> list[str]:
    from specsteer.sdk.context import Profile, ProfileEntry

    profile = Profile(None, tuple(ProfileEntry(e["subject"], e["body"]) for e in doc["profile"]))
    problems = []
    for v in doc["vectors"]:
        got = _outcome(profile, v["query"], v["n"], v["max_chars"])
        if got != v["expected"]:
            problems.append(mismatch(FILE, v["name"], "retrieval", v["expected"], got))
    return problems

"""bench.per_device_gamma's rules on synthetic scored rows: the held-out rule never picks a query's
γ with that query's own scores, the oracle does, and the default is γ 0.5 everywhere."""

from __future__ import annotations

from typing import Any

from bench import per_device_gamma as pdg


def _rows(
    author: str, subject: str, rouge: dict[float, float], attribution: dict[float, float]
) -> list[dict[str, Any]]:
    rows = [
        {"user": author, "subject": subject, "config": pdg.LLM, "rougeL": 0.2, "attribution": 0.1},
        {"user": author, "subject": subject, "config": pdg.DEVICE, "rougeL": 0.1, "attribution": 0.3},
    ]
    for g, label in pdg.GAMMA_ROWS.items():
        rows.append(
            {"user": author, "subject": subject, "config": label, "rougeL": rouge[g], "attribution": attribution[g]}
        )
    return rows


def _gammas(best: float, good: float = 0.3, bad: float = 0.0) -> dict[float, float]:
    return {g: good if g == best else bad for g in pdg.GAMMA_ROWS}


def test_held_out_picks_from_the_other_queries_only_and_the_oracle_from_all() -> None:
    # Author a: two queries where γ 0.1 wins both margins by far, one (q3) where γ 0.7 wins by a little.
    scored = [
        *_rows("a", "q1", {g: 0.25 for g in pdg.GAMMA_ROWS} | {0.1: 0.5}, _gammas(0.1, 0.6, 0.2)),
        *_rows("a", "q2", {g: 0.25 for g in pdg.GAMMA_ROWS} | {0.1: 0.5}, _gammas(0.1, 0.6, 0.2)),
        *_rows("a", "q3", {g: 0.25 for g in pdg.GAMMA_ROWS} | {0.7: 0.3}, _gammas(0.7, 0.4, 0.35)),
        *_rows("b", "q4", {g: 0.3 for g in pdg.GAMMA_ROWS}, {g: 0.4 for g in pdg.GAMMA_ROWS}),
        # Author c: q6 where γ 0.7 wins by far, q7 where γ 0.1 wins by a little.
        *_rows("c", "q6", {g: 0.2 for g in pdg.GAMMA_ROWS} | {0.7: 0.9}, _gammas(0.7, 0.9, 0.3)),
        *_rows("c", "q7", {g: 0.25 for g in pdg.GAMMA_ROWS} | {0.1: 0.3}, _gammas(0.1, 0.4, 0.35)),
        *_rows("b", "q5", {g: 0.25 for g in pdg.GAMMA_ROWS}, {g: 0.35 for g in pdg.GAMMA_ROWS}),
    ]
    result = pdg.evaluate(scored)
    held, oracle, default = (result["rules"][r] for r in pdg.RULES[1:] + pdg.RULES[:1])
    # q3's held-out γ comes from q1 and q2 (0.1), though 0.7 is best on q3 itself.
    assert held["per_author"]["a"] == [0.1, 0.1, 0.1]
    # Each of c's queries gets the γ the other one favours; the oracle, seeing both, takes 0.7 for both.
    assert held["per_author"]["c"] == [0.1, 0.7]
    assert oracle["per_author"]["c"] == [0.7, 0.7]
    assert default["per_author"] == {"a": [0.5] * 3, "b": [0.5] * 2, "c": [0.5] * 2}
    # b's γs tie everywhere: the default is kept.
    assert held["per_author"]["b"] == [0.5, 0.5]
    assert oracle["per_author"]["b"] == [0.5, 0.5]
    m = pdg.margins(scored, tuple(pdg.GAMMA_ROWS))
    scale = (result["scale"]["rougeL"], result["scale"]["attribution"])
    a_keys = [("a", "q1"), ("a", "q2"), ("a", "q3")]
    best = max(pdg.score(m[g], a_keys, scale) for g in pdg.GAMMA_ROWS)
    assert pdg.score(m[oracle["per_author"]["a"][0]], a_keys, scale) == best  # the oracle maximises over all three
    assert result["rules"]["default"]["rougeL_minus_llm"]["mean"] == sum(m[0.5][k][0] for k in m[0.5]) / len(m[0.5])


def test_queries_missing_a_row_are_left_out() -> None:
    scored = _rows("a", "q1", {g: 0.3 for g in pdg.GAMMA_ROWS}, {g: 0.4 for g in pdg.GAMMA_ROWS})
    scored += _rows("a", "q2", {g: 0.2 for g in pdg.GAMMA_ROWS}, {g: 0.5 for g in pdg.GAMMA_ROWS})
    scored += [
        r
        for r in _rows("a", "q3", {g: 0.1 for g in pdg.GAMMA_ROWS}, {g: 0.1 for g in pdg.GAMMA_ROWS})
        if r["config"] != pdg.LLM
    ]
    assert pdg.evaluate(scored)["rules"]["default"]["n"] == 2

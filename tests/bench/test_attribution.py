"""The authorship classifier on a tiny corpus whose three styles differ clearly."""

from __future__ import annotations

import itertools
import random

import pytest

from bench.attribution import AuthorClassifier
from specsteer.core.errors import ConfigError

WORDS = ("parser", "buffer", "index", "commit", "config", "cache", "thread", "socket", "option", "header")


def _texts(style: str, n: int, seed: int) -> list[str]:
    """Short texts in one of three styles: SHOUTING, snake_case with semicolons, Title Case with ellipses."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = rng.sample(WORDS, 5)
        if style == "loud":
            out.append("FIX: " + " ".join(w.upper() for w in words) + "!!")
        elif style == "snake":
            out.append("; ".join(f"{a}_{b}" for a, b in itertools.pairwise(words)) + ";")
        else:
            out.append(" ".join(w.title() for w in words) + "...")
    return out


@pytest.fixture(scope="module")
def classifier() -> AuthorClassifier:
    corpus = {"loud": _texts("loud", 12, 1), "snake": _texts("snake", 12, 2), "title": _texts("title", 12, 3)}
    return AuthorClassifier.fit(corpus)


def test_true_author_ranks_first_on_unseen_texts(classifier: AuthorClassifier) -> None:
    authors = ["loud", "snake", "title"]
    texts = [t for a in authors for t in _texts(a, 4, 100 + len(a))]
    truth = [a for a in authors for _ in range(4)]
    got = classifier.attribute(texts, truth)
    assert all(a.top1 for a in got)
    assert min(a.probability for a in got) > 1 / 3


def test_wrong_author_gets_low_probability_and_low_rank(classifier: AuthorClassifier) -> None:
    (a,) = classifier.attribute(_texts("loud", 1, 7), ["title"])
    assert not a.top1 and a.rank >= 2 and a.probability < 1 / 3


def test_probabilities_sum_to_one_per_text(classifier: AuthorClassifier) -> None:
    probs = classifier.probabilities(["FIX: CACHE", "a_b; c_d;"])
    assert probs.shape == (2, 3)
    assert probs.sum(axis=1) == pytest.approx([1.0, 1.0])


def test_unknown_author_and_too_few_authors_are_config_errors(classifier: AuthorClassifier) -> None:
    with pytest.raises(ConfigError, match="not one the classifier"):
        classifier.attribute(["x"], ["nobody"])
    with pytest.raises(ConfigError, match="at least two authors"):
        AuthorClassifier.fit({"only": ["some text"], "blank": ["   "]})


def test_a_tie_does_not_count_as_first() -> None:
    # Identical texts for two authors: the model cannot tell them apart, so neither is ranked first.
    same = ["exactly the same words"] * 3
    clf = AuthorClassifier.fit({"a": same, "b": same})
    (got,) = clf.attribute(["exactly the same words"], ["a"])
    assert got.probability == pytest.approx(0.5) and got.rank == 2 and not got.top1

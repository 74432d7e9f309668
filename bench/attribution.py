"""Authorship attribution: a style measure beside ROUGE.

A character n-gram TF-IDF representation with a multinomial logistic regression (scikit-learn),
fitted on the candidate authors' own texts, scores a new text by the probability it gives each
author. ROUGE against one reference body rewards saying the same thing; this rewards writing the
way the author writes (punctuation, wrapping, favourite words and spellings), which is what a
personal Specialist is for. Character n-grams inside word boundaries are the classic stylometric
features: they catch style without needing a tokenizer or a vocabulary.

The classifier is fitted once and then only reads: scoring never changes it, so every row of a
benchmark is scored by the same model.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer  # type: ignore[import-untyped]
from sklearn.linear_model import LogisticRegression  # type: ignore[import-untyped]
from sklearn.pipeline import Pipeline  # type: ignore[import-untyped]

from specsteer.core.errors import ConfigError

__all__ = ["FUNCTION_WORDS", "PUNCTUATION", "Attribution", "AuthorClassifier", "DeltaScore", "ProfileDistance"]


@dataclass(frozen=True)
class Attribution:
    """How one text was attributed: the probability of its true author and that author's rank (1 = first)."""

    probability: float
    rank: int

    @property
    def top1(self) -> bool:
        return self.rank == 1


class AuthorClassifier:
    """Character n-gram TF-IDF + logistic regression over a fixed set of authors."""

    def __init__(self, pipeline: Pipeline, authors: Sequence[str]) -> None:
        self._pipeline = pipeline
        self.authors = tuple(authors)

    @classmethod
    def fit(
        cls,
        texts: Mapping[str, Sequence[str]],
        *,
        ngram_range: tuple[int, int] = (2, 4),
        c: float = 10.0,
        max_features: int | None = 200_000,
        seed: int = 0,
    ) -> AuthorClassifier:
        """Fit on `texts` (author -> that author's texts); at least two authors with a non-blank text each."""
        authors = [a for a, items in texts.items() if any(t.strip() for t in items)]
        if len(authors) < 2:
            raise ConfigError("Authorship attribution needs texts from at least two authors.")
        docs = [t for a in authors for t in texts[a] if t.strip()]
        labels = [a for a in authors for t in texts[a] if t.strip()]
        pipeline = Pipeline(
            [
                (
                    "tfidf",
                    TfidfVectorizer(
                        analyzer="char_wb",
                        ngram_range=ngram_range,
                        sublinear_tf=True,  # a long text should not win on repetition alone
                        lowercase=False,  # capitalization is part of a style
                        max_features=max_features,
                    ),
                ),
                ("lr", LogisticRegression(C=c, max_iter=2000, random_state=seed)),
            ]
        )
        pipeline.fit(docs, labels)
        return cls(pipeline, [str(a) for a in pipeline.classes_])

    def probabilities(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text: the probability of each author, in the order of `authors`."""
        return np.asarray(self._pipeline.predict_proba(list(texts)), dtype=np.float64)

    def attribute(self, texts: Sequence[str], true_authors: Sequence[str]) -> list[Attribution]:
        """For each text: the probability of its true author and that author's rank among all."""
        if len(texts) != len(true_authors):
            raise ValueError(f"{len(texts)} texts but {len(true_authors)} authors")
        unknown = sorted({a for a in true_authors if a not in self.authors})
        if unknown:
            raise ConfigError(f"Author {unknown[0]!r} is not one the classifier was fitted on.")
        if not texts:
            return []
        probs = self.probabilities(texts)
        out = []
        for row, author in zip(probs, true_authors, strict=True):
            p = float(row[self.authors.index(author)])
            # Ties count against the true author: a text the model cannot tell apart does not win.
            out.append(Attribution(p, int(np.sum(row >= p))))
        return out


# Burrows's Delta's features: the commonest English function words (what a writer uses without
# choosing it) and the punctuation of commit messages. Independent of the classifier above: no
# n-grams, no learned weights, nothing a verbatim copy of a topic's words could move.
_FUNCTION_WORDS = """
the a an of to in is it that this for be with as on not are by or but if so we was from at can
which when then than there now also only all any no into out up more some other should would
will could may must do does did has have had been being its their our you i they he she what how
why where while because since after before instead just still already even very both each such
same these those here one
"""
FUNCTION_WORDS = tuple(_FUNCTION_WORDS.split())
PUNCTUATION = tuple(".,;:!?()[]{}'\"`-_/=<>*#@$%&+|~\n")
_WORD = re.compile(r"[A-Za-z']+")


def _profile_features(text: str) -> np.ndarray:
    """Function-word rates per word, then punctuation rates per character."""
    words = [w.lower() for w in _WORD.findall(text)]
    counts = Counter(words)
    n_words, n_chars = max(1, len(words)), max(1, len(text))
    per_word = [counts[w] / n_words for w in FUNCTION_WORDS]
    per_char = [text.count(c) / n_chars for c in PUNCTUATION]
    return np.asarray(per_word + per_char, dtype=np.float64)


@dataclass(frozen=True)
class DeltaScore:
    """How near a text is to its true author's profile: the share of the other authors farther
    from it (1 = nearest; a random text scores about 0.5), and whether the true author is nearest."""

    score: float
    nearest: bool


class ProfileDistance:
    """Burrows's Delta over function words and punctuation: each feature z-scored over the fitted
    texts, a text's distance to an author the mean absolute difference from that author's mean."""

    def __init__(self, authors: Sequence[str], centroids: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> None:
        self.authors = tuple(authors)
        self._centroids, self._mean, self._scale = centroids, mean, scale

    @classmethod
    def fit(cls, texts: Mapping[str, Sequence[str]]) -> ProfileDistance:
        """Fit on `texts` (author -> that author's texts); at least two authors with a non-blank text each."""
        authors = [a for a, items in texts.items() if any(t.strip() for t in items)]
        if len(authors) < 2:
            raise ConfigError("A style profile distance needs texts from at least two authors.")
        rows = {a: np.stack([_profile_features(t) for t in texts[a] if t.strip()]) for a in authors}
        every = np.concatenate(list(rows.values()))
        mean = every.mean(axis=0)
        # A feature no fitted text varies on carries no style: a floor keeps it from dividing by zero.
        scale = np.maximum(every.std(axis=0), 1e-6)
        centroids = np.stack([(rows[a].mean(axis=0) - mean) / scale for a in authors])
        return cls([str(a) for a in authors], centroids, mean, scale)

    def distances(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text: its Delta to each author, in the order of `authors`."""
        z = np.stack([(_profile_features(t) - self._mean) / self._scale for t in texts])
        return np.abs(z[:, None, :] - self._centroids[None, :, :]).mean(axis=2)

    def score(self, texts: Sequence[str], true_authors: Sequence[str]) -> list[DeltaScore]:
        if len(texts) != len(true_authors):
            raise ValueError(f"{len(texts)} texts but {len(true_authors)} authors")
        unknown = sorted({a for a in true_authors if a not in self.authors})
        if unknown:
            raise ConfigError(f"Author {unknown[0]!r} is not one the profile distance was fitted on.")
        if not texts:
            return []
        out = []
        for row, author in zip(self.distances(texts), true_authors, strict=True):
            mine = float(row[self.authors.index(author)])
            others = [float(d) for i, d in enumerate(row) if self.authors[i] != author]
            # Ties count against the true author, as in `AuthorClassifier.attribute`.
            out.append(DeltaScore(sum(d > mine for d in others) / len(others), all(d > mine for d in others)))
        return out

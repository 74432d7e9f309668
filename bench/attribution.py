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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer  # type: ignore[import-untyped]
from sklearn.linear_model import LogisticRegression  # type: ignore[import-untyped]
from sklearn.pipeline import Pipeline  # type: ignore[import-untyped]

from specsteer.core.errors import ConfigError

__all__ = ["Attribution", "AuthorClassifier"]


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

"""Sentence scoring for :class:`~contextkit.compressors.evidence.EvidenceCompressor`.

Two scorers share the same signals:

* ``linear``: ``weight_embedding * cosine + weight_lexical * coverage`` (the original
  mix, no fitted numbers);
* ``learned`` (the default): a logistic model over the features of
  :mod:`contextkit.compressors._evidence_features` (query similarity, lexical
  coverage, their neighbours', position, section headings, cue words of findings and of
  methods), with weights fitted on the SciFact *train* claims by
  ``bench/fit_evidence_scorer.py`` and shipped as plain JSON
  (``evidence_scorer.json``, no pickle), so anyone can read, check or refit them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from contextkit.compressors._evidence_features import FEATURES
from contextkit.core.errors import InvalidArgumentError

__all__ = ["DEFAULT_WEIGHTS", "LinearScorer", "Terms", "bm25_scores", "lexical_scores", "load_scorer"]

#: The shipped weights (package data next to this module).
DEFAULT_WEIGHTS = "evidence_scorer.json"
FORMAT = "contextkit.evidence_scorer"
FORMAT_VERSION = 1

# ------------------------------------------------------------------- lexical
_TERM = re.compile(r"[^\W_]+", re.UNICODE)
_STOP = frozenset(
    "a about above after again against all also am an and any are as at be because been before being below "
    "between both but by can could did do does doing down during each few for from further had has have having "
    "he her here hers herself him himself his how i if in into is it its itself just me more most my myself no "
    "nor not of off on once only or other our ours ourselves out over own same she should so some such than "
    "that the their theirs them themselves then there these they this those through to too under until up very "
    "was we were what when where which while who whom why will with would you your yours yourself yourselves "
    "may might must shall whether".split())


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    try:
        import Stemmer
    except ImportError:  # pragma: no cover - PyStemmer is a dependency
        return None
    return Stemmer.Stemmer("english")


class Terms:
    """Lower-cased, stop-word-free, stemmed content words (stems cached per word)."""

    def __init__(self) -> None:
        self._stems: dict[str, str] = {}
        self._stemmer = _stemmer()

    def __call__(self, text: str) -> set[str]:
        return set(self.tokens(text))

    def tokens(self, text: str) -> list[str]:
        """The stems in order, repeats kept (what BM25 counts)."""
        words = [w for w in _TERM.findall(text.casefold()) if w not in _STOP and (len(w) > 1 or w.isdigit())]
        new = [w for w in set(words) if w not in self._stems]
        if new:
            stems = self._stemmer.stemWords(new) if self._stemmer is not None else new
            self._stems.update(zip(new, stems))
        return [self._stems[w] for w in words]


def lexical_scores(query_terms: set[str], sentence_terms: Sequence[set[str]]) -> list[float]:
    """IDF-weighted share of the query's terms (those present in the pool) each sentence holds."""
    n = len(sentence_terms)
    df = dict.fromkeys(query_terms, 0)
    for terms in sentence_terms:
        for t in query_terms & terms:
            df[t] += 1
    idf = {t: math.log(1.0 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items() if d}
    total = sum(idf.values())
    if not total:
        return [0.0] * n
    return [sum(idf.get(t, 0.0) for t in query_terms & terms) / total for terms in sentence_terms]


def bm25_scores(query_terms: Sequence[str], sentence_terms: Sequence[Sequence[str]], k1: float = 1.5,
                b: float = 0.75) -> list[float]:
    """Okapi BM25 (Lucene's IDF) of each sentence for the query, the sentences of one call as the corpus.

    Why sentences as the corpus: a term rare among the candidate sentences is what
    tells the answer sentence from its neighbours, whatever its frequency in the
    language; the ranking baseline that prose questions are hard to beat on.
    """
    n = len(sentence_terms)
    if not n:
        return []
    lengths = [len(t) for t in sentence_terms]
    avg = sum(lengths) / n or 1.0
    wanted = set(query_terms)
    df = dict.fromkeys(wanted, 0)
    counts: list[dict[str, int]] = []
    for terms in sentence_terms:
        tf: dict[str, int] = {}
        for t in terms:
            if t in wanted:
                tf[t] = tf.get(t, 0) + 1
        for t in tf:
            df[t] += 1
        counts.append(tf)
    idf = {t: math.log(1.0 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items() if d}
    return [sum(idf[t] * f * (k1 + 1) / (f + k1 * (1 - b + b * length / avg)) for t, f in tf.items())
            for tf, length in zip(counts, lengths)]


# ------------------------------------------------------------------- learned
@dataclass(frozen=True, slots=True)
class LinearScorer:
    """``sigmoid(bias + sum(weights * (x - mean) / scale))`` over named features.

    The features are standardised with the train split's mean and scale, so the
    weights are comparable with each other (the JSON file is meant to be read).
    """

    features: tuple[str, ...]
    weights: tuple[float, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    bias: float
    model: str | None = None
    source: str = "<memory>"
    #: How the fit found these scores best used: "density" (score per token) or "score".
    selection: str = "score"

    def score(self, matrix: Any) -> list[float]:
        """Probabilities for the rows of ``matrix`` (columns in :data:`FEATURES` order)."""
        import numpy as np

        cols = [FEATURES.index(f) for f in self.features]
        x = (np.asarray(matrix, dtype=np.float64)[:, cols] - np.asarray(self.mean)) / np.asarray(self.scale)
        z = x @ np.asarray(self.weights) + self.bias
        return (1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))).tolist()

    def to_dict(self, **extra: Any) -> dict[str, Any]:
        """The JSON form (what :func:`load_scorer` reads), with ``extra`` keys (provenance, figures)."""
        return {"format": FORMAT, "version": FORMAT_VERSION, "model": self.model, "features": list(self.features),
                "weights": list(self.weights), "mean": list(self.mean), "scale": list(self.scale),
                "bias": self.bias, "selection": self.selection, **extra}


def load_scorer(path: str | Path | None = None) -> LinearScorer:
    """The weights in ``path`` (a JSON file from ``bench/fit_evidence_scorer.py``), or the shipped ones.

    A missing file, bad JSON or a feature this version does not compute is a
    ValueError naming the file and the reason.
    """
    if path is None:
        return _default_scorer()
    return _read(Path(path).read_text(encoding="utf-8") if Path(path).is_file() else None, str(path))


@lru_cache(maxsize=1)
def _default_scorer() -> LinearScorer:
    ref = resources.files("contextkit.compressors").joinpath(DEFAULT_WEIGHTS)
    return _read(ref.read_text(encoding="utf-8") if ref.is_file() else None, str(ref))


def _read(text: str | None, where: str) -> LinearScorer:
    """The scorer in a weights file's ``text``; a ValueError naming ``where`` and the reason otherwise."""
    if text is None:
        raise InvalidArgumentError(f"evidence scorer weights {where}: no such file")
    data = _header_checked(text, where)
    try:
        names = tuple(str(f) for f in data["features"])
        vectors = [tuple(float(v) for v in data[k]) for k in ("weights", "mean", "scale")]
        bias = float(data["bias"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"evidence scorer weights {where}: missing or non-numeric field ({exc})") from None
    _check_numbers(names, vectors, bias, where)
    selection = data.get("selection", "score")
    if selection not in ("score", "density"):
        raise InvalidArgumentError(f"evidence scorer weights {where}: selection must be 'score' or 'density', not {selection!r}")
    weights, mean, scale = vectors
    return LinearScorer(names, weights, mean, scale, bias=bias, model=data.get("model"), source=where,
                        selection=selection)


def _header_checked(text: str, where: str) -> dict[str, Any]:
    """The JSON object of a weights file, once its format and version are this contextkit's."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"evidence scorer weights {where}: not JSON ({exc})") from None
    if not isinstance(data, dict):  # a bad weights file is a ValueError, whatever is wrong in it
        raise InvalidArgumentError(f"evidence scorer weights {where}: not a JSON object")  # noqa: TRY004
    if data.get("format") != FORMAT:
        raise InvalidArgumentError(f"evidence scorer weights {where}: not a {FORMAT} file (format={data.get('format')!r})")
    if data.get("version") != FORMAT_VERSION:
        raise InvalidArgumentError(f"evidence scorer weights {where}: format version {data.get('version')!r}, "
                         f"this contextkit reads {FORMAT_VERSION}")
    return data


def _check_numbers(names: tuple[str, ...], vectors: list[tuple[float, ...]], bias: float, where: str) -> None:
    """Known features, one finite number per feature in each vector, positive scales."""
    unknown = [f for f in names if f not in FEATURES]
    if unknown:
        raise InvalidArgumentError(f"evidence scorer weights {where}: unknown features {unknown} (known: {list(FEATURES)})")
    if any(len(v) != len(names) for v in vectors) or any(s <= 0 for s in vectors[2]):
        raise InvalidArgumentError(f"evidence scorer weights {where}: weights/mean/scale must have one positive-scale "
                         f"number per feature ({len(names)})")
    if not all(math.isfinite(v) for vec in vectors for v in vec) or not math.isfinite(bias):
        raise InvalidArgumentError(f"evidence scorer weights {where}: non-finite number")

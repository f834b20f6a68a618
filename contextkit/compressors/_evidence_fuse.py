"""The fused evidence scorer: the learned model where the text looks like what it was fitted on.

Why: the learned scorer (:mod:`~contextkit.compressors._evidence_score`) was fitted
on scientific abstracts, and much of what it knows is the *form* of an abstract
(findings last, ``METHODS`` irrelevant, "we found", p-values). On other prose those
priors are noise: on XQuAD paragraphs it kept the answer sentence less often than
plain BM25 over sentences (held out: 0.907 against 0.977 at 2x, 0.787 against 0.914 at
4x). Query relevance alone (BM25 and the MiniLM cosine) is what prose rewards, and it
loses 10-15 points on SciFact's held-out claims.

So each call is scored by a mix of two calibrated parts, weighted by how much the
candidate sentences carry the form the learned priors are about:

* ``relevance``: ``(z(BM25) + z(cosine)) / sqrt(2)``, BM25 over the call's sentences
  (:func:`~contextkit.compressors._evidence_score.bm25_scores`), both standardised over
  the call's sentences, so neither scale dominates;
* ``learned``: the learned model's log-odds, standardised the same way;
* the weight of ``learned`` is ``alpha`` (:func:`gate`): 0 when at most :data:`GATE` ``[0]`` of the
  sentences carry a cue of an abstract's form that prose rarely has (a reported
  finding: "we found", "results suggest", "significantly", "associated with"; or a
  section heading such as ``RESULTS``: the learned model's own cue features), 1 from
  :data:`GATE` ``[1]`` on, linear between. Statistics, methods and aims were cues too
  at first, but "%", "using" and "whether" are common in prose: more than half of XQuAD
  dev questions got some learned weight, and its priors with it.

Where ``alpha`` is 1 the scores are the learned model's probabilities, filled by its
weights file's rule (score per token for the shipped one): on text of the form it was
fitted on, the fused scorer *is* the learned one. Elsewhere the budget is filled best
score first.

The cues and the gate's two ends were chosen on SciFact *train* claims and on a quarter
of the XQuAD articles (every fourth: ``bench/bench_compress_evidence.py`` reports them
as ``dev``); figures are reported on the other XQuAD articles and SciFact's test claims
(``bench/README.md`` tells in which order). Nothing is refitted: the learned weights
are the shipped ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from contextkit.compressors._evidence_features import FEATURES

__all__ = ["GATE", "abstract_share", "fuse", "gate"]

#: Shares of sentences with an abstract's form cues where the learned part starts to count, and counts fully.
GATE: tuple[float, float] = (0.05, 0.25)
_CUES = tuple(FEATURES.index(f) for f in ("finding", "heading"))


def abstract_share(rows: Sequence[Sequence[float]]) -> float:
    """The share of sentences (feature rows) carrying at least one cue of an abstract's form."""
    if not rows:
        return 0.0
    return sum(1 for r in rows if any(r[c] > 0 for c in _CUES)) / len(rows)


def gate(share: float) -> float:
    """The learned part's weight for a call whose sentences carry an abstract's cues in ``share``."""
    lo, hi = GATE
    return min(max((share - lo) / (hi - lo), 0.0), 1.0)


def fuse(learned: Sequence[float], bm25: Sequence[float], cosine: Sequence[float], alpha: float) -> list[float]:
    """The fused score of each sentence (see the module docstring); ``learned`` are probabilities,
    ``alpha`` the learned part's weight (:func:`gate`)."""
    relevance = [(b + c) / math.sqrt(2) for b, c in zip(_z(bm25), _z(cosine))]
    if alpha == 0.0:
        return relevance
    odds = _z([math.log(max(p, 1e-9) / max(1.0 - p, 1e-9)) for p in learned])
    return [alpha * o + (1.0 - alpha) * r for o, r in zip(odds, relevance)]


def _z(values: Sequence[float]) -> list[float]:
    """``values`` standardised over the call (all 0 where they do not vary)."""
    n = len(values)
    if not n:
        return []
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
    return [(v - mean) / sd if sd > 1e-9 else 0.0 for v in values]

"""The retriever interface: ``retrieve(query, k, filters=None) -> list[ScoredChunk]``.

Every retriever shares the same options, applied in the same order: metadata
filters (applied inside the search, so ``k`` results come back even when few
chunks match), a minimum score, maximal marginal relevance for diversity, and an
optional reranker.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self

import numpy as np
from pydantic import Field

from contextkit.core.config import MAX_K, MAX_QUERY_CHARS, RELEVANCE_ANCHOR_RANK, check_limit, check_limit_option
from contextkit.core.errors import RetrievalError
from contextkit.core.options import Component
from contextkit.core.records import ScoredChunk
from contextkit.core.settings import Settings
from contextkit.core.telemetry import retrieval_figures, traced

if TYPE_CHECKING:  # pragma: no cover
    from contextkit.index import Index
    from contextkit.retrievers.rerank import Reranker

__all__ = ["Filters", "RetrievalError", "Retriever", "check_request"]


class Filters(Settings):
    """Which chunks may be returned. All given conditions must hold."""

    source_glob: str | None = Field(None, description="glob over the document id or its source path, e.g. 'docs/*.md'")
    doc_ids: list[str] | None = None
    metadata: dict[str, str | int | float | bool] = Field(default_factory=dict)

    @classmethod
    def parse(cls, pairs: list[str]) -> Filters:
        """From CLI ``key=value`` pairs: ``source=GLOB``, ``doc_id=ID`` (repeatable), else metadata."""
        source, doc_ids, meta = None, [], {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise RetrievalError(f"filter {pair!r} is not key=value")
            if key == "source":
                source = value
            elif key == "doc_id":
                doc_ids.append(value)
            else:
                meta[key] = json.loads(value) if value in ("true", "false") or _is_number(value) else value
        return cls(source_glob=source, doc_ids=doc_ids or None, metadata=meta)

    def is_empty(self) -> bool:
        return self.source_glob is None and self.doc_ids is None and not self.metadata

    def allowed_rowids(self, index: Index) -> np.ndarray:
        """The chunk rowids these filters allow (checked against the index's fields).

        The filters are data; the index compiles them to SQL (:meth:`Index.rowids_matching`). A reader
        serving an older generation than the store's (a writer committed since) gets its generation's rowids."""
        return index.rowids_matching(doc_ids=self.doc_ids, metadata=self.metadata, source_glob=self.source_glob)


def check_request(query: object, k: object, max_query_chars: int = MAX_QUERY_CHARS, max_k: int = MAX_K) -> int:
    """``k`` as an int when ``query`` and ``k`` make a request a retriever takes, checked before any work:
    a query that is not blank and within ``max_query_chars``, a whole ``k`` > 0 within ``max_k`` (a bool,
    a float or NaN is not one). A blank query or a bad ``k`` is a :class:`RetrievalError`, a request past
    a limit a ``LimitExceededError`` naming the option."""
    if not isinstance(query, str) or not query.strip():
        raise RetrievalError("the query is empty")
    max_query_chars = check_limit_option(max_query_chars, "max_query_chars")
    max_k = check_limit_option(max_k, "max_k")
    check_limit(len(query), max_query_chars, "max_query_chars", "a query of {:,} characters")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
        raise RetrievalError(f"k must be a positive integer, not {k!r}")
    check_limit(int(k), max_k, "max_k", "k = {:,}")
    return int(k)


def score_at_anchor_rank(scores: Sequence[float]) -> float | None:
    """The :data:`~contextkit.core.config.RELEVANCE_ANCHOR_RANK`-th best of ``scores`` (None when fewer)."""
    ranked = sorted(scores, reverse=True)
    return float(ranked[RELEVANCE_ANCHOR_RANK - 1]) if len(ranked) >= RELEVANCE_ANCHOR_RANK else None


def _is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


class Retriever(Component, ABC):
    """Base class: subclasses implement :meth:`_candidates`; the options live here.

    Constructor values (``k``, ``filters`` and the options) are defaults that a
    :meth:`retrieve` call may override; :meth:`to_dict` / :meth:`from_dict` carry them,
    with the index's path and the embedder's settings, to another process. As a
    :class:`~contextkit.core.settings.Component`, a misspelt option to the constructor or to
    :meth:`retrieve` raises :class:`~contextkit.errors.UnknownOptionError`.

    ``max_query_chars`` and ``max_k`` bound one request (defaults in :mod:`contextkit.core.config`):
    a query or a ``k`` past them is refused before any work with a ``LimitExceededError``.
    """

    _option_methods = ("retrieve",)

    def __init__(self, index: Index, *, min_score: float | None = None, mmr: float | None = None,
                 reranker: Reranker | None = None, candidates: int = 100, k: int = 10,
                 filters: Filters | dict[str, Any] | None = None, max_query_chars: int = MAX_QUERY_CHARS,
                 max_k: int = MAX_K) -> None:
        self.index = index
        self.min_score = min_score
        self.mmr = mmr
        self.reranker = reranker
        self.candidates = candidates
        self.k = k
        self.filters = Filters(**filters) if isinstance(filters, dict) else filters
        self.max_query_chars = check_limit_option(max_query_chars, "max_query_chars")
        self.max_k = check_limit_option(max_k, "max_k")

    # ------------------------------------------------------- serialisation
    def _settings(self) -> dict[str, Any]:
        """Constructor options besides the index, the embedder and the reranker; a subclass adds its own."""
        return {"k": self.k, "filters": None if self.filters is None else self.filters.model_dump(),
                "min_score": self.min_score, "mmr": self.mmr, "candidates": self.candidates,
                "max_query_chars": self.max_query_chars, "max_k": self.max_k}

    def to_dict(self) -> dict[str, Any]:
        """``{"type", "index": its folder, **options, "reranker", "embedder"}``, JSON values only.

        The index travels as its path (an open index holds files and locks), the
        embedder and reranker as their own ``to_dict()``: what :meth:`from_dict` needs
        to answer the same queries with the same hits in another process.
        """
        data: dict[str, Any] = {"type": type(self).__name__, "index": str(self.index.path), **self._settings()}
        data["reranker"] = None if self.reranker is None else self.reranker.to_dict()
        embedder = getattr(self, "embedder", None)
        if embedder is not None:
            data["embedder"] = embedder.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **objects: Any) -> Self:
        """The retriever ``data`` describes: this class or the subclass its ``"type"`` names
        (``Retriever.from_dict`` rebuilds any). ``index=``, ``embedder=`` and ``reranker=``, when given,
        are used as they are; otherwise the index is opened read-only from its path and the others
        are rebuilt from their dicts. A retriever that embeds no query (BM25) takes no embedder."""
        from contextkit.embedders import BaseEmbedder
        from contextkit.index import Index
        from contextkit.retrievers.rerank import Reranker

        options = dict(data)
        found = cls.subclass_named(str(options.pop("type", cls.__name__)))
        path = options.pop("index")
        embedder_data = options.pop("embedder", None)
        reranker_data = options.pop("reranker", None)
        index, embedder, reranker = (objects.pop(name, None) for name in ("index", "embedder", "reranker"))
        if reranker is None and reranker_data is not None:
            reranker = Reranker.from_dict(reranker_data)
        if embedder_data is not None:
            options["embedder"] = BaseEmbedder.from_dict(embedder_data) if embedder is None else embedder
        opened = Index.open(path, read_only=True) if index is None else index
        return found(opened, reranker=reranker, **options, **objects)

    @abstractmethod
    def _candidates(self, query: str, n: int, allowed: np.ndarray | None) -> list[tuple[int, float]]:
        """``(rowid, score)`` pairs, best first, at most ``n``."""

    @traced("contextkit.retrieve", retrieval_figures)
    def retrieve(self, query: str, k: int | None = None, filters: Filters | dict[str, Any] | None = None, *,
                 min_score: float | None = None, mmr: float | None = None) -> list[ScoredChunk]:
        """The ``k`` best chunks for ``query`` that pass ``filters``, best first (``None``: the constructor's)."""
        k = self.check_request(query, self.k if k is None else k)
        pin = getattr(self.index, "snapshot", None)
        if pin is None:  # an index-like object of a caller's own
            return self._retrieve(query, k, filters, min_score, mmr)
        with pin():  # one generation for the whole query: filters, every run, the chunks' texts
            return self._retrieve(query, k, filters, min_score, mmr)

    def relevance_anchor(self, scores: Sequence[float]) -> float | None:
        """The score from which ``fill="relevant"`` measures its floor, given the scores of one search of at
        least :data:`~contextkit.core.config.RELEVANCE_ANCHOR_RANK` candidates: the score at that rank (None
        when the search found fewer). Why a rank: a cosine or a BM25 score has no zero that means
        "unrelated", and a floor measured from 0 lets more through the more candidates there are."""
        return score_at_anchor_rank(scores)

    def check_request(self, query: object, k: object) -> int:
        """``k`` as an int when this retriever takes ``query`` and ``k`` (see :func:`check_request`)."""
        return check_request(query, k, self.max_query_chars, self.max_k)

    def _retrieve(self, query: str, k: int, filters: Filters | dict[str, Any] | None, min_score: float | None,
                  mmr: float | None) -> list[ScoredChunk]:
        allowed = self._allowed(self.filters if filters is None else filters)
        if allowed is not None and len(allowed) == 0:
            return []
        min_score = self.min_score if min_score is None else min_score
        mmr = self.mmr if mmr is None else mmr
        wide = mmr is not None or self.reranker is not None  # MMR and rerankers choose among more candidates
        hits = self._candidates(query, max(k, self.candidates) if wide else k, allowed)
        if min_score is not None:
            hits = [(r, s) for r, s in hits if s >= min_score]
        if mmr is not None and len(hits) > 1:
            hits = self._diversified(query, hits, k, mmr)
        return self._scored(query, hits, k)

    def _allowed(self, filters: Filters | dict[str, Any] | None) -> np.ndarray | None:
        """The rowids that pass ``filters`` (a dict is read as :class:`Filters`); None when nothing is filtered."""
        if isinstance(filters, dict):
            filters = Filters(**filters)
        return None if filters is None or filters.is_empty() else filters.allowed_rowids(self.index)

    def _scored(self, query: str, hits: list[tuple[int, float]], k: int) -> list[ScoredChunk]:
        """The hits' chunks read from the store (a rowid deleted meanwhile is skipped), reranked, cut to ``k``."""
        chunks = self.index.store.chunks_by_rowid(r for r, _ in hits)
        scored = [ScoredChunk(chunks[r], float(s)) for r, s in hits if r in chunks]
        if self.reranker is not None:
            scored = self.reranker.rerank(query, scored)
        return scored[:k]

    def _diversified(self, query: str, hits: list[tuple[int, float]], k: int, mmr: float) -> list[tuple[int, float]]:
        """The ``k`` hits that MMR picks (relevance against similarity to those already picked)."""
        from contextkit.retrievers.mmr import mmr_select

        query_vec = self._query_vector(query)
        vectors = self.index.store.vectors_by_rowid([r for r, _ in hits])
        order = mmr_select(query_vec, vectors, k, lambda_=mmr)
        return [hits[i] for i in order]

    def _query_vector(self, query: str) -> np.ndarray:
        embedder = getattr(self, "embedder", None)
        if embedder is None:
            raise RetrievalError("MMR needs the query embedding: give this retriever an embedder")
        return embedder.embed([query])[0]

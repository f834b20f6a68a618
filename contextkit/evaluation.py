"""Retrieval quality on a BEIR-format dataset: nDCG@10, Recall@10/100, MRR@10 and latency.

A BEIR folder holds ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl``
(``_id``, ``text``) and ``qrels/<split>.tsv`` (``query-id corpus-id score``, one header
line). :func:`evaluate` ingests the corpus into an index folder when there is none yet,
runs each retriever over the queries, maps the chunks it returns back to corpus ids (a
document ranks where its best chunk ranks) and scores the document rankings with
``pytrec_eval`` (the C ``trec_eval``, package ``pytrec-eval-terrier``); no metric is
computed by hand here.

Conventions, as in BEIR: only queries with at least one relevant document (score > 0)
are evaluated, and a query that retrieves nothing scores 0. ``k`` counts *chunks*
retrieved per query; several chunks of one document collapse into one entry, so a
ranking may hold fewer than ``k`` documents (:attr:`ModeResult.docs_per_query` says how
many) and Recall@100 is then a lower bound of the document-level figure. The default,
300 chunks, leaves well over 100 documents per query on SciFact (about 230; 100 chunks
leave about 80). Note that ``HybridRetriever`` fuses ``max(k, depth)`` candidates per
side, so at ``k=300`` the hybrid is scored at depth 300 whatever its ``depth``; metrics@10
at a smaller ``depth`` are what ``k <= depth`` gives (or :func:`fused_rankings` with
``exact_depth=True``).

For tuning, :func:`collect_candidates` caches each query's dense and BM25 candidates
once, and :func:`fused_rankings` replays :class:`~contextkit.retrievers.HybridRetriever`'s
fusion over that cache for any setting, without embedding a query again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from contextkit.core.errors import EvaluationError
from contextkit.ingestion import IngestEvent, IngestReport

if TYPE_CHECKING:  # pragma: no cover
    from contextkit.core.records import ScoredChunk
    from contextkit.embedders import Embedder
    from contextkit.index import Index
    from contextkit.index._bm25 import BM25Index
    from contextkit.ingestion import IngestConfig

__all__ = [
    "DEFAULT_METRICS",
    "MODES",
    "BeirData",
    "CandidateLists",
    "EvalEvent",
    "EvalReport",
    "EvaluationError",
    "ModeResult",
    "collect_candidates",
    "compute_metrics",
    "corpus_id",
    "doc_ranking",
    "evaluate",
    "fused_rankings",
    "load_beir",
    "plot_report",
]

MODES = ("dense", "bm25", "hybrid")
DEFAULT_METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
_TREC = {"ndcg": "ndcg_cut", "recall": "recall", "precision": "P", "map": "map_cut"}


# --------------------------------------------------------------------------- data
@dataclass
class BeirData:
    """A BEIR split: the queries that have relevance judgements, and those judgements."""

    path: Path
    split: str
    corpus: Path
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    skipped: dict[str, int] = field(default_factory=dict)


def _need(path: Path, what: str) -> Path:
    if not path.is_file():
        raise EvaluationError(f"{path}: {what} is missing")
    return path


def load_beir(beir_dir: str | Path, split: str = "test") -> BeirData:
    """Read ``queries.jsonl`` and ``qrels/<split>.tsv`` (and check ``corpus.jsonl`` is there)."""
    root = Path(beir_dir)
    if not root.is_dir():
        raise EvaluationError(f"{root}: no such folder (expected a BEIR dataset: corpus.jsonl, queries.jsonl, qrels/)")
    corpus = _need(root / "corpus.jsonl", "the BEIR corpus (corpus.jsonl)")
    queries_path = _need(root / "queries.jsonl", "the BEIR queries (queries.jsonl)")
    qrels_path = _qrels_path(root, split)
    qrels = _read_qrels(qrels_path)
    queries = _read_queries(queries_path, set(qrels))
    skipped = _keep_judged(qrels, queries)
    if not qrels:
        raise EvaluationError(f"{qrels_path}: none of its queries is in {queries_path.name} with a relevant document")
    return BeirData(root, split, corpus, queries, qrels, skipped)


def _qrels_path(root: Path, split: str) -> Path:
    """``qrels/<split>.tsv``; when missing, the error names the splits that are there."""
    path = root / "qrels" / f"{split}.tsv"
    if not path.is_file():
        found = sorted(p.stem for p in (root / "qrels").glob("*.tsv")) if (root / "qrels").is_dir() else []
        raise EvaluationError(f"{path}: no relevance judgements for split {split!r} "
                              f"(splits here: {', '.join(found) or 'none'})")
    return path


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """``query-id corpus-id score`` lines (BEIR, one optional header) or TREC's ``qid iter docid rel``."""
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            parts = line.split()
            if not parts or number == 1 and parts[0].lower() in ("query-id", "query_id", "qid"):
                continue  # a blank or the header line
            if len(parts) == 4:  # TREC style: qid iter docid rel
                parts = [parts[0], parts[2], parts[3]]
            if len(parts) != 3:
                raise EvaluationError(f"{path}: line {number}: expected 'query-id corpus-id score'")
            try:
                rel = int(float(parts[2]))
            except ValueError:
                raise EvaluationError(f"{path}: line {number}: score {parts[2]!r} is not a number") from None
            qrels.setdefault(parts[0], {})[parts[1]] = rel
    if not qrels:
        raise EvaluationError(f"{path}: no relevance judgements in it")
    return qrels


def _read_queries(path: Path, wanted: set[str]) -> dict[str, str]:
    """The non-blank texts of the ``wanted`` query ids (a JSON object with ``_id`` and ``text`` per line)."""
    queries: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                qid, text = str(obj["_id"]), obj["text"]
            except (ValueError, KeyError, TypeError):
                raise EvaluationError(f"{path}: line {number}: expected a JSON object with '_id' and 'text'") from None
            if qid in wanted and isinstance(text, str) and text.strip():
                queries[qid] = text
    return queries


def _keep_judged(qrels: dict[str, dict[str, int]], queries: dict[str, str]) -> dict[str, int]:
    """Drop (in place) the judged queries BEIR does not evaluate; how many of each kind were dropped."""
    skipped = {"not_in_queries": 0, "no_relevant_document": 0}
    for qid in list(qrels):
        if qid not in queries:
            skipped["not_in_queries"] += 1
            del qrels[qid]
        elif not any(rel > 0 for rel in qrels[qid].values()):
            skipped["no_relevant_document"] += 1
            del qrels[qid], queries[qid]
    return skipped


# ------------------------------------------------------------------------ metrics
def _parse_metric(name: str) -> tuple[str, int]:
    kind, sep, cut = name.partition("@")
    if not sep or kind not in (*_TREC, "mrr") or not cut.isdigit() or int(cut) <= 0:
        raise EvaluationError(f"unknown metric {name!r}: use ndcg@K, recall@K, precision@K, map@K or mrr@K")
    return kind, int(cut)


def _metrics_library() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"pytrec-eval-terrier {version('pytrec-eval-terrier')}"
    except PackageNotFoundError:  # pragma: no cover
        return "pytrec_eval"


def compute_metrics(qrels: Mapping[str, Mapping[str, int]], rankings: Mapping[str, Sequence[str]],
                    metrics: Sequence[str] = DEFAULT_METRICS) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """``(means, per_query)`` of ``metrics`` for document ``rankings`` (best first) against ``qrels``.

    Computed by ``pytrec_eval``; a ranking is passed as strictly decreasing scores so
    that trec_eval keeps exactly our order (it breaks score ties by document id).
    ``mrr@K`` is trec_eval's ``recip_rank`` over the top K. Every query of ``qrels``
    counts in the mean; one missing from ``rankings`` (or with an empty ranking) scores 0.
    """
    try:
        import pytrec_eval
    except ImportError as exc:  # pragma: no cover
        raise EvaluationError("metrics need pytrec_eval: pip install 'contextkit[eval]'") from exc

    parsed = [(name, *_parse_metric(name)) for name in metrics]
    qrels = {q: {d: int(r) for d, r in docs.items()} for q, docs in qrels.items()}
    per_query: dict[str, dict[str, float]] = {q: {name: 0.0 for name in metrics} for q in qrels}

    def run_of(cut: int | None) -> dict[str, dict[str, float]]:
        run = {}
        for qid, ranking in rankings.items():
            if qid not in qrels or not ranking:
                continue
            docs = list(dict.fromkeys(ranking))[:cut]
            run[qid] = {doc: float(len(docs) - i) for i, doc in enumerate(docs)}
        return run

    trec = [(name, _TREC[kind], cut) for name, kind, cut in parsed if kind != "mrr"]
    if trec:
        measures = {f"{m}.{cut}" for _, m, cut in trec}
        results = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run_of(None))
        for qid, values in results.items():
            for name, m, cut in trec:
                per_query[qid][name] = float(values[f"{m}_{cut}"])
    for name, kind, cut in parsed:
        if kind == "mrr":
            results = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(run_of(cut))
            for qid, values in results.items():
                per_query[qid][name] = float(values["recip_rank"])
    means = {name: float(np.mean([per_query[q][name] for q in qrels])) if qrels else 0.0 for name in metrics}
    return means, per_query


def corpus_id(doc_id: str) -> str:
    """The BEIR corpus id of an indexed document: what follows the last ``#`` (``corpus.jsonl#123`` -> ``123``)."""
    return doc_id.rpartition("#")[2]


def doc_ranking(hits: Sequence[ScoredChunk]) -> list[tuple[str, float]]:
    """Chunks (best first) to corpus documents, each scored by its best chunk, order kept."""
    seen: dict[str, float] = {}
    for hit in hits:
        seen.setdefault(corpus_id(hit.chunk.doc_id), float(hit.score))
    return list(seen.items())


# ------------------------------------------------------------------------ reports
class ModeResult(BaseModel):
    """One retriever's scores over the evaluated queries."""

    mode: str
    options: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, float]
    latency_ms: dict[str, float] = Field(description="per query, query embedding included: p50, p95, mean, max")
    docs_per_query: float = Field(description="mean number of distinct documents in the top-k chunks")
    queries: int
    per_query: dict[str, dict[str, float]] | None = None


class EvalReport(BaseModel):
    index: str
    beir: str
    split: str
    k: int = Field(description="chunks retrieved per query")
    queries: int
    skipped_queries: dict[str, int] = Field(default_factory=dict)
    relevant_docs_not_indexed: int = Field(0, description="judged-relevant corpus ids with no chunk in the index")
    metrics_library: str
    model: str | None = None
    results: list[ModeResult]
    ingested: IngestReport | None = None
    seconds: float = 0.0

    def result(self, mode: str) -> ModeResult:
        for r in self.results:
            if r.mode == mode:
                return r
        raise KeyError(mode)


@dataclass
class EvalEvent:
    """Progress: ``kind`` is "ingest" (with the ingestion's own ``event``), "mode" (a retriever starts), "query"."""

    kind: Literal["ingest", "mode", "query"]
    mode: str = ""
    done: int = 0
    total: int = 0
    event: IngestEvent | None = None


# ----------------------------------------------------------------------- evaluate
def _percentiles(ms: list[float]) -> dict[str, float]:
    if not ms:
        return {"p50": 0.0, "p95": 0.0, "mean": 0.0, "max": 0.0}
    a = np.asarray(ms)
    return {"p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95)), "mean": float(a.mean()),
            "max": float(a.max())}


def evaluate(
    index_dir: str | Path,
    beir_dir: str | Path,
    split: str = "test",
    modes: Sequence[str] = MODES,
    k: int = 300,
    *,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    embedder: Embedder | None = None,
    ingest_config: IngestConfig | None = None,
    progress: Callable[[EvalEvent], None] | None = None,
    warmup: int = 3,
    per_query: bool = False,
    limit: int | None = None,
) -> EvalReport:
    """Score each retriever of ``modes`` on the ``split`` queries of the BEIR folder ``beir_dir``.

    When ``index_dir`` holds no index, ``beir_dir/corpus.jsonl`` is ingested into it first
    (with ``ingest_config``). ``options`` maps a mode to its retriever's keyword arguments,
    e.g. ``{"hybrid": {"fusion": "weighted", "dense_weight": 0.7}}``. One embedder (given,
    or loaded once) serves the ingestion and every query. Latency is timed around each
    ``retrieve`` call (query embedding, search, fusion, reading the chunks), after
    ``warmup`` untimed queries per mode. ``limit`` keeps the first N queries (for a smoke run).
    """
    from contextkit.index import Index

    started = time.perf_counter()
    notify = progress or (lambda event: None)
    modes, options = _checked_request(modes, k, options, metrics)
    data = load_beir(beir_dir, split)
    qids = sorted(data.qrels, key=lambda q: (len(q), q))[:limit]
    run = _Run(data, qids, {q: data.qrels[q] for q in qids}, k, metrics, warmup, per_query, notify)
    index_dir = Path(index_dir)
    ingested, embedder = _ingest_if_missing(index_dir, data, embedder, ingest_config, notify)
    with Index.open(index_dir, read_only=True) as index:
        indexed, relevant = _check_coverage(index, index_dir, run.qrels, data.corpus)
        if any(m != "bm25" for m in modes):
            embedder = _query_embedder(index, index_dir, embedder)
        retrievers = _build_retrievers(modes, index, embedder, options)
        with _uncached(embedder):
            results = [run.score(mode, retriever, options.get(mode, {})) for mode, retriever in retrievers.items()]
        model = index.manifest.model
    return EvalReport(
        index=str(index_dir), beir=str(data.path), split=split, k=k, queries=len(qids),
        skipped_queries=data.skipped, relevant_docs_not_indexed=len(relevant - indexed),
        metrics_library=_metrics_library(), model=model, results=results, ingested=ingested,
        seconds=time.perf_counter() - started,
    )


def _checked_request(modes: Sequence[str], k: int, options: Mapping[str, Mapping[str, Any]] | None,
                     metrics: Sequence[str]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The modes (once each, in order) and per-mode options, after checking every argument.

    Checked before the dataset is read or anything is ingested: a typo fails in a second."""
    modes = list(dict.fromkeys(modes))
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise EvaluationError(f"mode must be dense, bm25 or hybrid, not {', '.join(map(repr, bad)) or 'nothing'}")
    if not isinstance(k, int) or k <= 0:
        raise EvaluationError(f"k must be a positive integer, not {k!r}")
    checked = {m: dict(o) for m, o in (options or {}).items()}
    unknown = sorted(set(checked) - set(MODES))
    if unknown:
        raise EvaluationError(f"options given for unknown mode(s): {', '.join(unknown)}")
    for name in metrics:
        _parse_metric(name)
    return modes, checked


def _ingest_if_missing(index_dir: Path, data: BeirData, embedder: Embedder | None,
                       ingest_config: IngestConfig | None,
                       notify: Callable[[EvalEvent], None]) -> tuple[IngestReport | None, Embedder | None]:
    """Ingest the corpus when ``index_dir`` holds no index: (its report or None, the embedder to reuse)."""
    from contextkit.index import Index
    from contextkit.ingestion import IngestConfig, ingest

    if Index.exists(index_dir):
        return None, embedder
    config = ingest_config or IngestConfig()
    if embedder is None:
        embedder = config.new_embedder()
    ingested = ingest([data.corpus], index_dir, config, embedder=embedder,
                      progress=lambda e: notify(EvalEvent("ingest", event=e)))
    if ingested.nothing_ingested or ingested.failures and not ingested.documents:
        why = "; ".join(f"{f.path}: {f.reason}" for f in ingested.failures[:3])
        raise EvaluationError(f"{data.corpus}: nothing could be ingested ({why or 'no documents'})")
    return ingested, embedder


def _check_coverage(index: Index, index_dir: Path, qrels: Mapping[str, Mapping[str, int]],
                    corpus: Path) -> tuple[set[str], set[str]]:
    """(corpus ids indexed, corpus ids judged relevant); an index holding none of the latter is the wrong one."""
    indexed = {corpus_id(d) for d in index.documents()}
    relevant = {d for docs in qrels.values() for d, rel in docs.items() if rel > 0}
    if not relevant & indexed:
        raise EvaluationError(f"{index_dir}: none of the {len(relevant)} relevant documents of this split is in "
                              f"the index; was it built from {corpus}?")
    return indexed, relevant


def _query_embedder(index: Index, index_dir: Path, embedder: Embedder | None) -> Embedder:
    """The given embedder when it is the index's model, else the index's own; its dimension checked."""
    from contextkit.embedders import embedder_for

    if embedder is None or embedder.model_name != index.manifest.model:
        embedder = embedder_for(index)
    if embedder.dim != index.manifest.dim:
        raise EvaluationError(f"{index_dir}: model gives {embedder.dim}-d vectors, the index holds "
                              f"{index.manifest.dim}-d")
    return embedder


def _build_retrievers(modes: Sequence[str], index: Index, embedder: Embedder | None,
                      options: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """Every retriever, built before any query runs, so that a bad option fails at once."""
    from contextkit.retrievers import make_retriever

    retrievers = {}
    for mode in modes:
        try:
            retrievers[mode] = make_retriever(mode, index, embedder, **options.get(mode, {}))
        except (TypeError, ValueError) as exc:
            raise EvaluationError(f"bad {mode} option: {exc}") from None
    return retrievers


@contextmanager
def _uncached(embedder: Embedder | None) -> Iterator[None]:
    """The embedder without its vector cache for the run: a cached query vector would hide the embedding time."""
    saved = embedder.cache if embedder is not None else None
    if embedder is not None:
        embedder.cache = None
    try:
        yield
    finally:
        if embedder is not None:
            embedder.cache = saved


@dataclass
class _Run:
    """What every mode of one evaluation is scored on: the queries, their judgements, ``k`` and the metrics."""

    data: BeirData
    qids: list[str]
    qrels: dict[str, dict[str, int]]
    k: int
    metrics: Sequence[str]
    warmup: int
    per_query: bool
    notify: Callable[[EvalEvent], None]

    def score(self, mode: str, retriever: Any, options: dict[str, Any]) -> ModeResult:
        """Warm up, then time and rank every query with ``retriever``, and score the rankings."""
        self.notify(EvalEvent("mode", mode=mode, total=len(self.qids)))
        for qid in self.qids[: self.warmup]:
            retriever.retrieve(self.data.queries[qid], self.k)
        rankings: dict[str, list[str]] = {}
        ms: list[float] = []
        for i, qid in enumerate(self.qids, start=1):
            t0 = time.perf_counter()
            hits = retriever.retrieve(self.data.queries[qid], self.k)
            ms.append((time.perf_counter() - t0) * 1000.0)
            rankings[qid] = [doc for doc, _ in doc_ranking(hits)]
            self.notify(EvalEvent("query", mode=mode, done=i, total=len(self.qids)))
        means, by_query = compute_metrics(self.qrels, rankings, self.metrics)
        return ModeResult(
            mode=mode, options=options, metrics=means, latency_ms=_percentiles(ms),
            docs_per_query=float(np.mean([len(r) for r in rankings.values()])) if rankings else 0.0,
            queries=len(self.qids), per_query=by_query if self.per_query else None,
        )


# ---------------------------------------------------------- tuning over a cache
@dataclass
class CandidateLists:
    """Each query's dense and BM25 candidates, ``(rowid, score)`` best first, computed once."""

    query_ids: list[str]
    dense: list[list[tuple[int, float]]]
    bm25: list[list[tuple[int, float]]]
    corpus_ids: dict[int, str]
    depth: int

    def with_bm25(self, bm25: BM25Index, queries: Mapping[str, str]) -> CandidateLists:
        """The same dense lists with BM25 lists from another BM25 index (e.g. without stemming)."""
        lists = _bm25_lists(bm25, [queries[q] for q in self.query_ids], self.depth)
        return CandidateLists(self.query_ids, self.dense, lists, self.corpus_ids, self.depth)


def _bm25_lists(bm25: BM25Index, texts: Sequence[str], depth: int) -> list[list[tuple[int, float]]]:
    out = []
    for text in texts:
        rowids, scores = bm25.search(text, depth)
        out.append([(int(r), float(s)) for r, s in zip(rowids, scores)])
    return out


def collect_candidates(index: Index, embedder: Embedder, queries: Mapping[str, str], depth: int = 200,
                       bm25: BM25Index | None = None) -> CandidateLists:
    """Dense and BM25 top-``depth`` lists for every query, each query embedded once.

    Queries are embedded one at a time, as the retrievers do: a padded batch gives
    vectors a few ULPs apart, enough to swap near-ties in a fused ranking.
    """
    from contextkit.retrievers import DenseRetriever

    qids = list(queries)
    texts = [queries[q] for q in qids]
    dense = DenseRetriever(index, embedder)
    dense_lists = [dense.search_vector(embedder.embed([text])[0], depth) for text in texts]
    bm25_lists = _bm25_lists(bm25 if bm25 is not None else index.bm25, texts, depth)
    rows = index.chunk_doc_ids()
    return CandidateLists(qids, dense_lists, bm25_lists, {r: corpus_id(d) for r, d in rows.items()}, depth)


def fused_rankings(c: CandidateLists, mode: str = "hybrid", *, fusion: str = "rrf", rrf_k: int = 60,
                   dense_weight: float = 1.0, bm25_weight: float = 1.0, depth: int = 100,
                   k: int = 100, exact_depth: bool = False) -> dict[str, list[str]]:
    """Document rankings that ``HybridRetriever(...).retrieve(q, k)`` would give (or dense/bm25 alone).

    Uses the retrievers' own fusion functions over the cached lists. The retriever fuses
    ``max(k, depth)`` candidates per side; with ``exact_depth`` exactly ``depth`` are fused
    (then cut to ``k``), which is what the top of ``retrieve(k')`` sees for any ``k' <= depth``.
    The candidates needed per side must be within the cache's depth.
    """
    from contextkit.retrievers.hybrid import fuse

    wide = depth if exact_depth else max(k, depth)
    if mode == "hybrid" and wide > c.depth:
        raise EvaluationError(f"the cache holds {c.depth} candidates per side; {wide} are needed")
    out: dict[str, list[str]] = {}
    for i, qid in enumerate(c.query_ids):
        if mode == "dense":
            hits = c.dense[i][:k]
        elif mode == "bm25":
            hits = c.bm25[i][:k]
        else:
            runs = [c.dense[i][:wide], c.bm25[i][:wide]]
            hits = fuse(runs, fusion, [dense_weight, bm25_weight], min(wide, len(c.corpus_ids)), rrf_k)[:k]
        out[qid] = list(dict.fromkeys(c.corpus_ids[r] for r, _ in hits))
    return out


# --------------------------------------------------------------------------- plot
def plot_report(report: EvalReport, path: str | Path) -> Path:
    """A bar chart of nDCG@10 and Recall@100 (when measured) per mode, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    names: list[str] = [m for m in ("ndcg@10", "recall@100") if report.results and m in report.results[0].metrics]
    names = names or list(report.results[0].metrics)[:2]
    modes = [r.mode for r in report.results]
    x = np.arange(len(modes))
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(modes), 4.2), dpi=120)
    try:
        for j, name in enumerate(names):
            values = [r.metrics[name] for r in report.results]
            bars = ax.bar(x + (j - (len(names) - 1) / 2) * width, values, width, label=name)
            ax.bar_label(bars, fmt="%.3f", fontsize=8, padding=2)
        ax.set_xticks(x, modes)
        ax.set_ylim(0, 1.18)
        ax.set_yticks(np.linspace(0, 1, 6))
        ax.set_ylabel("score")
        ax.set_title(f"{Path(report.beir).name} ({report.split}, {report.queries} queries)")
        ax.legend(loc="upper center", ncol=len(names), frameon=False)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
    return path

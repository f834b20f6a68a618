"""BEIR evaluation: loading, metrics (checked by hand), evaluate() end to end, the ``eval`` command.

Real model, real FAISS and BM25, on a tiny BEIR folder written here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextkit.cli import app
from contextkit.evaluation import (
    EvaluationError,
    collect_candidates,
    compute_metrics,
    corpus_id,
    doc_ranking,
    evaluate,
    fused_rankings,
    load_beir,
)
from contextkit.records import Chunk, ScoredChunk

pytest.importorskip("pytrec_eval")
runner = CliRunner()

DOCS = {
    "d1": ("Photosynthesis", "Plants turn sunlight, water and carbon dioxide into glucose and oxygen in chloroplasts."),
    "d2": ("Volcanoes", "Magma rises through the crust and erupts as lava, ash and volcanic gases."),
    "d3": ("Sourdough bread", "A starter of wild yeast and lactobacilli leavens the dough, which is kneaded and baked."),
    "d4": ("Black holes", "A black hole is a region of spacetime whose gravity is so strong that light cannot escape."),
    "d5": ("Vaccines", "Vaccines train the immune system to recognise a pathogen by exposing it to an antigen."),
    "d6": ("Tides", "The gravitational pull of the moon on the oceans causes the tides to rise and fall."),
}
QUERIES = {
    "1": "How do plants make glucose from sunlight?",
    "2": "Why can light not escape a black hole?",
    "3": "How does a vaccine train the immune system?",
    "4": "What makes sourdough dough rise?",
    "5": "A question without judgements.",
}
QRELS = [("1", "d1", 1), ("2", "d4", 1), ("3", "d5", 1), ("4", "d3", 1), ("4", "d6", 0)]


def write_beir(folder: Path, qrels=QRELS, split: str = "test") -> Path:
    (folder / "qrels").mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for did, (title, text) in DOCS.items():
            fh.write(json.dumps({"_id": did, "title": title, "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as fh:
        for qid, text in QUERIES.items():
            fh.write(json.dumps({"_id": qid, "text": text}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{r}" for q, d, r in qrels]
    (folder / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def beir_index(tmp_path_factory, embedder):
    """A tiny BEIR folder and its index, built once through evaluate() (which ingests it)."""
    root = tmp_path_factory.mktemp("beir")
    beir = write_beir(root / "tiny")
    index = root / "tiny.ck-index"
    report = evaluate(index, beir, modes=["bm25"], embedder=embedder)
    return beir, index, report


class TestLoad:
    def test_reads_queries_and_qrels(self, tmp_path):
        data = load_beir(write_beir(tmp_path / "b"))
        assert set(data.qrels) == {"1", "2", "3", "4"} and data.qrels["4"] == {"d3": 1, "d6": 0}
        assert data.queries["2"].startswith("Why can light")
        assert data.skipped == {"not_in_queries": 0, "no_relevant_document": 0}

    def test_skips_unanswerable_queries(self, tmp_path):
        data = load_beir(write_beir(tmp_path / "b", QRELS + [("99", "d1", 1), ("5", "d2", 0)]))
        assert data.skipped == {"not_in_queries": 1, "no_relevant_document": 1} and "5" not in data.qrels

    @pytest.mark.parametrize("missing", ["corpus.jsonl", "queries.jsonl"])
    def test_missing_file_is_named(self, tmp_path, missing):
        beir = write_beir(tmp_path / "b")
        (beir / missing).unlink()
        with pytest.raises(EvaluationError, match=missing):
            load_beir(beir)

    def test_missing_split_lists_the_others(self, tmp_path):
        with pytest.raises(EvaluationError, match=r"dev\.tsv.*splits here: test"):
            load_beir(write_beir(tmp_path / "b"), "dev")

    def test_bad_lines(self, tmp_path):
        beir = write_beir(tmp_path / "b")
        (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\td1\n", encoding="utf-8")
        with pytest.raises(EvaluationError, match="line 2"):
            load_beir(beir)
        beir = write_beir(tmp_path / "c")
        (beir / "queries.jsonl").write_text('{"_id": "1", "text": "ok"}\nnot json\n', encoding="utf-8")
        with pytest.raises(EvaluationError, match="queries.jsonl: line 2"):
            load_beir(beir)

    def test_not_a_folder(self, tmp_path):
        with pytest.raises(EvaluationError, match="no such folder"):
            load_beir(tmp_path / "nope")


class TestMetrics:
    def test_by_hand(self):
        """Values worked out on paper (trec_eval: linear gain, log2(rank + 1) discount)."""
        qrels = {"q1": {"d1": 1, "d3": 1}, "q2": {"d5": 1}, "q3": {"d7": 2, "d8": 1}, "q4": {"d9": 1}}
        rankings = {
            "q1": ["d2", "d1", "d4", "d3"],
            "q2": [f"x{i}" for i in range(10)] + ["d5"],  # relevant at rank 11
            "q3": ["d8", "d7"],
            # q4 retrieved nothing: it counts, as 0
        }
        means, per = compute_metrics(qrels, rankings)
        ndcg_q1 = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
        ndcg_q3 = (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3))
        assert per["q1"] == pytest.approx({"ndcg@10": ndcg_q1, "recall@10": 1.0, "recall@100": 1.0, "mrr@10": 0.5})
        assert per["q2"] == pytest.approx({"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 1.0, "mrr@10": 0.0})
        assert per["q3"] == pytest.approx({"ndcg@10": ndcg_q3, "recall@10": 1.0, "recall@100": 1.0, "mrr@10": 1.0})
        assert per["q4"] == {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}
        assert means == pytest.approx({"ndcg@10": (ndcg_q1 + ndcg_q3) / 4, "recall@10": 0.5,
                                       "recall@100": 0.75, "mrr@10": 0.375})
        assert ndcg_q1 == pytest.approx(0.650921, abs=1e-6)

    def test_our_order_is_kept(self):
        """trec_eval sorts by score and breaks ties by doc id; the order given must win."""
        means, _ = compute_metrics({"q": {"a": 1}}, {"q": ["z", "a"]}, ["mrr@10", "precision@1", "ndcg@1"])
        assert means == {"mrr@10": 0.5, "precision@1": 0.0, "ndcg@1": 0.0}

    def test_unknown_metric(self):
        with pytest.raises(EvaluationError, match="unknown metric"):
            compute_metrics({"q": {"a": 1}}, {}, ["ndcg10"])

    def test_chunks_to_documents(self):
        def hit(doc, ordinal, score):
            text = f"t{ordinal}"
            return ScoredChunk(Chunk(f"{doc}:{ordinal}", doc, ordinal, text, 0, len(text), 1), score)

        hits = [hit("corpus.jsonl#7", 1, 0.9), hit("corpus.jsonl#3", 0, 0.8), hit("corpus.jsonl#7", 0, 0.7),
                hit("data/c#x.jsonl#12", 0, 0.1)]
        assert doc_ranking(hits) == [("7", 0.9), ("3", 0.8), ("12", 0.1)]
        assert corpus_id("a#b#c") == "c"


class TestEvaluate:
    def test_end_to_end(self, beir_index, embedder):
        beir, index, first = beir_index
        assert first.ingested is not None and first.ingested.documents == len(DOCS)
        report = evaluate(index, beir, embedder=embedder, options={"hybrid": {"fusion": "weighted", "rrf_k": 10}},
                          per_query=True)
        assert report.ingested is None and report.queries == 4 and report.relevant_docs_not_indexed == 0
        assert [r.mode for r in report.results] == ["dense", "bm25", "hybrid"]
        for r in report.results:
            assert r.queries == 4 and set(r.per_query) == {"1", "2", "3", "4"}
            assert r.metrics["recall@100"] == 1.0 and r.metrics["ndcg@10"] > 0.9, (r.mode, r.per_query)
            assert 0 < r.latency_ms["p50"] <= r.latency_ms["p95"] <= r.latency_ms["max"]
            assert 1 <= r.docs_per_query <= len(DOCS)
        assert report.result("hybrid").options == {"fusion": "weighted", "rrf_k": 10}
        assert report.result("dense").metrics["mrr@10"] == 1.0

    @pytest.mark.parametrize("options", [{"fusion": "rrf", "depth": 10}, {"fusion": "rrf", "rrf_k": 10, "dense_weight": 0.3, "depth": 10},
                                         {"fusion": "rrf", "rrf_k": 5, "depth": 2},
                                         {"fusion": "weighted", "dense_weight": 0.3, "bm25_weight": 0.7, "depth": 10},
                                         {"fusion": "weighted", "dense_weight": 0.5, "bm25_weight": 0.5, "depth": 4}])
    def test_cached_fusion_matches_the_retriever(self, beir_index, embedder, options):
        """The tuning path (candidates cached once, fusion replayed) gives what HybridRetriever gives."""
        from contextkit.index import Index
        from contextkit.retrievers import HybridRetriever

        beir, index, _ = beir_index
        data = load_beir(beir)
        with Index.open(index, read_only=True) as ix:
            cands = collect_candidates(ix, embedder, data.queries, depth=10)
            retriever = HybridRetriever(ix, embedder, **options)
            for k in (3, 10):
                expected = {q: [d for d, _ in doc_ranking(retriever.retrieve(text, k))] for q, text in data.queries.items()}
                assert fused_rankings(cands, "hybrid", k=k, **options) == expected

    def test_bad_requests(self, beir_index):
        beir, index, _ = beir_index
        with pytest.raises(EvaluationError, match="mode must be"):
            evaluate(index, beir, modes=["sparse"])
        with pytest.raises(EvaluationError, match="unknown mode"):
            evaluate(index, beir, modes=["bm25"], options={"bm2": {}})

    def test_index_of_another_corpus(self, beir_index, tmp_path):
        _, index, _ = beir_index
        other = write_beir(tmp_path / "other", [("1", "nope", 1)])
        with pytest.raises(EvaluationError, match="none of the 1 relevant documents"):
            evaluate(index, other, modes=["bm25"])


class TestCli:
    def test_json(self, beir_index):
        beir, index, _ = beir_index
        result = runner.invoke(app, ["eval", "--index", str(index), "--beir", str(beir), "--mode", "bm25",
                                     "--mode", "hybrid", "--option", "hybrid.rrf_k=10", "--json"])
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert [r["mode"] for r in report["results"]] == ["bm25", "hybrid"]
        assert report["results"][1]["options"] == {"rrf_k": 10}
        assert set(report["results"][0]["metrics"]) == {"ndcg@10", "recall@10", "recall@100", "mrr@10"}

    def test_table_and_plot(self, beir_index, tmp_path):
        beir, index, _ = beir_index
        png = tmp_path / "eval.png"
        result = runner.invoke(app, ["eval", "--index", str(index), "--beir", str(beir), "--plot", str(png), "-q"])
        assert result.exit_code == 0, result.output
        assert "nDCG@10" in result.stdout and "hybrid" in result.stdout and "p95 ms" in result.stdout
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000

    @pytest.mark.parametrize("args, code, message", [
        (["--split", "dev"], 1, "dev.tsv"),
        (["--mode", "sparse"], 2, "--mode must be"),
        (["--option", "rrf_k=3"], 2, "MODE.NAME=VALUE"),
        (["--option", "hybrid.nope=3"], 1, "bad hybrid option"),
    ])
    def test_errors_without_traceback(self, beir_index, args, code, message):
        beir, index, _ = beir_index
        result = runner.invoke(app, ["eval", "--index", str(index), "--beir", str(beir), "-q", *args])
        assert result.exit_code == code and message in result.output, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert "Traceback" not in result.output

    def test_missing_dataset(self, tmp_path):
        result = runner.invoke(app, ["eval", "--index", str(tmp_path / "ix"), "--beir", str(tmp_path / "none")])
        assert result.exit_code == 1 and "no such folder" in result.output
        assert not (tmp_path / "ix").exists()

"""Hybrid fusion weighted per query by how sure each run is (``fusion="adaptive"``, the default; issue 29).

On a corpus where BM25 is weak (paraphrased questions, short entity queries) a fixed 50/50 weighting cost
the hybrid its dense quality (DBpedia-entity subset: 0.463 against dense 0.510). A run whose scores are
flat says little about the query; a run with one clear winner says much.
"""

from __future__ import annotations

import pytest

from contextkit.index import Index
from contextkit.ingestion import ingest
from contextkit.retrievers import HybridRetriever, adaptive_weights, run_confidence
from retrievers.topics import TOPICS


@pytest.fixture(scope="module")
def reports_index(tmp_path_factory, embedder):
    """Twenty field reports on unrelated topics, each starting with the same words."""
    root = tmp_path_factory.mktemp("reports")
    docs = root / "docs"
    docs.mkdir()
    for i, text in enumerate(TOPICS):
        (docs / f"r{i:02d}.txt").write_text(f"Field report number {i}. {text}\n", encoding="utf-8")
    ingest([docs], root / "ix", embedder=embedder)
    with Index.open(root / "ix", read_only=True) as index:
        yield index


def test_flat_bm25_scores_move_the_weight_to_dense(reports_index):
    """'field report' is in every document: BM25's scores are flat, the feline paraphrase is dense's
    to find; the fused ranking keeps dense's answer first (the cat report)."""
    hybrid = HybridRetriever(reports_index)
    query = "field report on a sleepy feline pet"
    dense, bm25 = hybrid.fusion_weights(query)
    assert dense > 2 * bm25 and dense + bm25 == pytest.approx(1.0)
    assert hybrid.retrieve(query, 1)[0].chunk.text.startswith("Field report number 0.")


def test_no_lexical_overlap_gives_dense_all_the_weight(reports_index):
    assert HybridRetriever(reports_index).fusion_weights("sleepy feline") == (1.0, 0.0)


def test_a_rare_exact_term_moves_the_weight_to_bm25(reports_index):
    """One document holds 'waggle': BM25 has one clear winner, and weighs at least as much as dense."""
    dense, bm25 = HybridRetriever(reports_index).fusion_weights("waggle")
    assert bm25 > dense


def test_fixed_fusions_keep_their_weights(reports_index):
    assert HybridRetriever(reports_index, fusion="weighted", dense_weight=0.7, bm25_weight=0.3
                           ).fusion_weights("field report") == (0.7, 0.3)


def test_confidence_of_runs():
    flat = [(i, 5.0 - i * 0.01) for i in range(50)]
    peaked = [(0, 9.0)] + [(i, 1.0) for i in range(1, 50)]
    assert run_confidence(peaked, 50) > 3 * run_confidence(flat, 50)
    assert run_confidence([], 50) == 0.0 and run_confidence([(1, 2.0)] * 3, 3) == 0.0
    assert run_confidence([(1, 4.0)], 100) > run_confidence([(1, 4.0)] * 20, 100)  # one match of 100: sure
    assert adaptive_weights([flat, peaked], [0.5, 0.5], 50)[1] > 0.75
    assert adaptive_weights([[], []], [0.5, 0.5], 50) == [0.5, 0.5]

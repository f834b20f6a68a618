"""The relevance gate does not grow with the budget (issue 31).

Before, the same question sent 1,895 tokens of evidence at a 5,000 budget and 61,107 under the
``gemini-1.5-pro`` profile: the candidates grow with the budget, the hybrid's scores were normalised
against the deepest candidate (so every chunk scored higher the deeper the search), and a dense or BM25
floor measured from 0 let through nearly everything (a documentation passage 1,300th by cosine still has
half the best one's). Now the floor is measured from the score at a fixed rank and the hybrid's scores
from a fixed depth: a large window is a cap, not a target.
"""

from __future__ import annotations

import pytest

from contextkit.assembly import EvidenceItem, assemble
from contextkit.assembly.context_assembler import ContextAssembler
from contextkit.assembly.relevance import ANCHOR_RANK, gate
from contextkit.assembly.sections import Section
from contextkit.index import Index
from contextkit.ingestion import ingest
from contextkit.retrievers import BM25Retriever, DenseRetriever, HybridRetriever

QUESTION = "How should a module declare which names it exports, and may tabs and spaces be mixed?"


@pytest.fixture(scope="module")
def pep_index(tmp_path_factory, peps, embedder):
    """Sixteen PEPs (style, packaging, typing, language changes), several hundred chunks."""
    root = tmp_path_factory.mktemp("peps")
    ingest(peps[:16], root / "ix", embedder=embedder)
    with Index.open(root / "ix", read_only=True) as index:
        assert len(index) > 4 * ANCHOR_RANK
        yield index


def _evidence_ids(result) -> set[str]:
    return {i.id for i in result.report.items if i.section == "evidence" and i.status == "included"}


@pytest.mark.parametrize("make", [HybridRetriever, DenseRetriever, BM25Retriever], ids=["hybrid", "dense", "bm25"])
def test_the_same_question_gets_the_same_evidence_at_20k_and_under_the_largest_profiles(pep_index, embedder, make):
    retriever = make(pep_index) if make is BM25Retriever else make(pep_index, embedder)
    results = {budget: ContextAssembler(budget, retriever=retriever).assemble(QUESTION)
               for budget in (20_000, "gpt-4o", "gemini-1.5-pro")}
    largest = results["gemini-1.5-pro"].report.relevance
    assert largest is not None and largest.candidates <= 2 * ANCHOR_RANK  # no deeper than can pass
    assert largest.candidates == results[20_000].report.relevance.candidates  # nor deeper for a larger window
    ids = {budget: _evidence_ids(result) for budget, result in results.items()}
    assert ids[20_000] and ids[20_000] == ids["gpt-4o"] == ids["gemini-1.5-pro"]
    assert len(ids["gemini-1.5-pro"]) < largest.candidates / 2  # relevance, not the window, stopped it
    assert all(r.report.tokens < 20_000 for r in results.values())


def test_a_two_million_token_window_on_an_index_larger_than_max_k_is_no_error(pep_index, embedder):
    """The default number of candidates followed the budget past the retriever's max_k (10,000): under the
    gemini-1.5-pro profile an index of over 10,000 chunks raised LimitExceededError. Filling to the
    budget asks for at most max_k; gated, no more than can pass the floor."""
    retriever = DenseRetriever(pep_index, embedder, max_k=50)
    result = ContextAssembler("gemini-1.5-pro", retriever=retriever, fill="budget").assemble(QUESTION)
    assert result.report.relevance is not None and result.report.relevance.candidates == 50


def test_a_hybrid_chunk_scores_the_same_however_many_candidates_are_asked_for(pep_index, embedder):
    hybrid = HybridRetriever(pep_index, embedder)
    few, many = hybrid.retrieve(QUESTION, 20), hybrid.retrieve(QUESTION, 4 * ANCHOR_RANK)
    assert [(h.chunk.id, h.score) for h in few] == [(h.chunk.id, h.score) for h in many[:20]]


def test_the_report_names_the_anchor_the_floor_is_measured_from(pep_index, embedder):
    result = ContextAssembler(20_000, retriever=DenseRetriever(pep_index, embedder)).assemble(QUESTION)
    relevance = result.report.relevance
    assert relevance is not None and relevance.anchor is not None and relevance.best_score is not None
    assert relevance.floor == pytest.approx(relevance.anchor + 0.3 * (relevance.best_score - relevance.anchor))
    assert f"from the score at rank {ANCHOR_RANK}" in relevance.message


def test_the_floor_is_measured_from_the_anchor():
    items = [EvidenceItem(id=f"d{i}", text="x", score=s) for i, s in enumerate([0.8, 0.7, 0.6, 0.55, 0.5])]
    kept, left, report = gate(items, "relevant", None, 0.3, None, anchor=0.5)
    assert report.floor == pytest.approx(0.59) and report.anchor == 0.5
    assert [it.id for it in kept] == ["d0", "d1", "d2"] and len(left) == 2
    _, _, from_zero = gate(items, "relevant", None, 0.3, None)  # no anchor: relative to 0, as before
    assert from_zero.floor == pytest.approx(0.24) and from_zero.anchor is None


def test_a_section_carries_its_anchor_into_assemble(cl100k):
    items = [EvidenceItem(id=f"d{i}", text=f"passage {i}", score=s) for i, s in enumerate([0.8, 0.7, 0.52])]
    sections = [Section("evidence", role="evidence", items=items, relevance_anchor=0.5),
                Section("question", role="question", content="?")]
    _, report = assemble(sections, 2_000)
    assert report.counts()["included"] == 2 and report.relevance.anchor == 0.5


def test_an_index_smaller_than_the_anchor_rank_keeps_the_floor_from_zero(tmp_path, embedder):
    (tmp_path / "docs").mkdir()
    for i, text in enumerate(["Tabs and spaces must not be mixed.", "A module lists its exports in __all__.",
                              "Bread rises when the dough is kneaded."]):
        (tmp_path / "docs" / f"d{i}.txt").write_text(text + "\n", encoding="utf-8")
    ingest([tmp_path / "docs"], tmp_path / "ix", embedder=embedder)
    with Index.open(tmp_path / "ix", read_only=True) as index:
        result = ContextAssembler(2_000, retriever=DenseRetriever(index, embedder)).assemble(QUESTION)
    assert result.report.relevance is not None and result.report.relevance.anchor is None


def _evidence_tokens(result) -> int:
    return next((s.tokens for s in result.report.sections if s.name == "evidence"), 0)


def test_a_broad_question_gets_no_more_evidence_from_a_large_window(pep_index):
    """A question that many passages answer about as well as the best: they all pass the floor, which is
    relative to the best. Before, "Python" over sixteen PEPs (BM25) sent 4,976 tokens of evidence at a 5,000
    budget and 6,364 under gemini-1.5-pro (python3-doc: up to 1.48x between 5,000 and gpt-4o). With the
    default k, the retrieved passages now stop at ``relevant_max_tokens`` (5,000) of text whatever the
    window; None lifts it, and the window is the cap again."""
    retriever = BM25Retriever(pep_index)
    at_5k = _evidence_tokens(ContextAssembler(5_000, retriever=retriever).assemble("Python"))
    for profile in ("gpt-4o", "gemini-1.5-pro"):
        result = ContextAssembler(profile, retriever=retriever).assemble("Python")
        assert 0.8 * at_5k <= _evidence_tokens(result) <= 1.2 * at_5k, profile
        assert any("relevant_max_tokens" in note for note in result.report.notes)
    uncapped = ContextAssembler("gemini-1.5-pro", retriever=retriever, relevant_max_tokens=None).assemble("Python")
    assert _evidence_tokens(uncapped) > 1.2 * at_5k
    assert not any("relevant_max_tokens" in note for note in uncapped.report.notes)
    explicit = ContextAssembler("gemini-1.5-pro", retriever=retriever).assemble("Python", k=200)
    assert _evidence_tokens(explicit) == _evidence_tokens(uncapped)  # a k the caller gives is theirs

"""Relevance-gated filling, pruning to fit, and evidence ahead of old history (issue 19)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assembly.assembly_samples import _sections, _shown, _text, _wrapped
from contextkit.assembly import EvidenceItem, Section, assemble
from contextkit.assembly.context_assembler import ContextAssembler
from contextkit.records import Message


def _falling(n: int = 12) -> list[EvidenceItem]:
    """Two strong hits, then a long tail that relevance has fallen away from."""
    scores = [0.95, 0.9] + [0.25 - i * 0.01 for i in range(n - 2)]
    return [EvidenceItem(id=f"doc{i}", text=_text(i, 6), source=f"src/{i}.md", score=s) for i, s in enumerate(scores)]


class TestRelevanceGate:
    @pytest.mark.parametrize("markup", ["full", "lean"])
    def test_relevant_fill_stops_where_relevance_falls_away(self, cl100k, markup):
        prompt, report = assemble(_sections(_falling()), 20_000, markup=markup)
        ids = {chunk for shown in _shown(prompt, report) for chunk in shown}
        assert ids == {"doc0", "doc1"}
        assert report.relevance.fill == "relevant" and report.relevance.below_floor == 10
        assert report.relevance.floor == pytest.approx(0.95 * 0.3) and report.relevance.floor_from == "relative"
        assert report.counts()["dropped:irrelevant"] == 10
        assert any("stopped where relevance falls away" in n for n in report.notes)
        assert report.tokens < 0.1 * 20_000  # the budget is a cap, not a target

    def test_budget_fill_fills_to_the_cap(self):
        _, report = assemble(_sections(_falling()), 20_000, fill="budget")
        assert report.relevance.below_floor == 0 and report.counts()["included"] == 12

    def test_min_score_sets_the_floor(self):
        _, report = assemble(_sections(_falling()), 20_000, min_score=0.2)
        assert report.relevance.floor == 0.2 and report.relevance.floor_from == "min_score"
        assert report.counts()["included"] == 8 and report.counts()["dropped:below_min_score"] == 4

    def test_off_topic_question_gets_no_evidence_and_says_why(self):
        items = [EvidenceItem(id=f"d{i}", text=_text(i), score=1.0 - i / 10, similarity=0.12 - i / 100)
                 for i in range(6)]
        prompt, report = assemble(_sections(items, question="How do I bake a chocolate cake?"), 20_000)
        assert "<evidence>" not in prompt and report.relevance.off_topic
        assert report.warnings and "little that bears on the question" in report.warnings[0]
        on_topic = [EvidenceItem(id=f"d{i}", text=_text(i), score=1.0, similarity=0.6) for i in range(3)]
        _, fine = assemble(_sections(on_topic), 20_000)
        assert not fine.relevance.off_topic and fine.counts()["included"] == 3 and not fine.warnings

    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=30), st.floats(0, 1))
    def test_the_best_hit_always_passes_the_relative_floor(self, scores, floor):
        from contextkit.assembly.relevance import gate

        items = [EvidenceItem(id=f"d{i}", text="x", score=s) for i, s in enumerate(scores)]
        kept, left, report = gate(items, "relevant", None, floor, None)
        assert max(scores) in [it.score for it in kept]
        assert len(kept) + len(left) == len(items) == report.candidates
        if report.floor is None:  # relevance_floor 0: no floor
            assert not left
        else:
            assert all(it.score >= report.floor for it in kept) and all(it.score < report.floor for it, _ in left)


class TestContinuations:
    """Under a tight budget (chunk by chunk) the chunk that reads on from a chunk the floor let through, in the
    same document, is a candidate too, below the floor (XQuAD #530 at 300 tokens: 0.296 against 0.300, the
    answer in it, 240 tokens to spare)."""

    @staticmethod
    def _chunks() -> list[EvidenceItem]:
        text = "Alpha beta gamma. " * 30
        cut = [(0, 180), (180, 360), (300, 540)]  # ::1 adjoins ::0, ::2 overlaps ::1
        docs = [EvidenceItem(id=f"a.md::{i}", text=text[s:e], doc_id="a.md", start=s, end=e, score=score)
                for i, ((s, e), score) in enumerate(zip(cut, [0.9, 0.2, 0.1]))]
        far = EvidenceItem(id="b.md::0", text="Delta epsilon.", doc_id="b.md", start=0, end=14, score=0.2)
        return [*docs, far]

    def test_a_chunk_that_adjoins_one_kept_stays_a_candidate(self):
        from contextkit.assembly.relevance import gate

        kept, left, report = gate(self._chunks(), "relevant", None, 0.3, None, continuations=True)
        assert [k.id for k in kept] == ["a.md::0", "a.md::1"]  # one step: not ::2, which adjoins only ::1
        assert [x.id for x, _ in left] == ["a.md::2", "b.md::0"] and report.below_floor == 2
        plain, _, _ = gate(self._chunks(), "relevant", None, 0.3, None)
        assert [k.id for k in plain] == ["a.md::0"]

    def test_min_score_and_fill_budget_are_not_changed(self):
        from contextkit.assembly.relevance import gate

        kept, _, _ = gate(self._chunks(), "relevant", 0.5, 0.3, None, continuations=True)
        assert [k.id for k in kept] == ["a.md::0"]  # a floor the caller set holds
        kept, _, _ = gate(self._chunks(), "budget", None, 0.3, None, continuations=True)
        assert len(kept) == 4

    def test_offsets_of_another_document_do_not_count(self):
        from contextkit.assembly.relevance import gate

        items = self._chunks()
        items[-1] = EvidenceItem(id="b.md::0", text="Delta epsilon.", doc_id="b.md", start=180, end=194, score=0.2)
        kept, _, _ = gate(items, "relevant", None, 0.3, None, continuations=True)
        assert "b.md::0" not in [k.id for k in kept]


class TestSmallBudgets:
    def test_a_passage_too_big_for_the_room_is_pruned_to_what_fits(self, cl100k):
        run_on = "the index " + "and the chunker " * 60 + "run together in one very long opening."
        text = f"{run_on} FAISS searches dense vectors by inner product. Unrelated closing words here."
        items = [EvidenceItem(id="big", text=text, score=0.9)]
        prompt, report = assemble(_sections(items), 150, verify=True)
        assert cl100k.count(prompt) == report.tokens <= 150
        item = next(i for i in report.items if i.id == "big")
        assert item.status == "truncated" and item.detail.startswith("pruned to")
        shown = "".join(_wrapped(prompt).find("evidence").find("document").itertext()).strip()
        assert "FAISS searches dense vectors by inner product." in shown
        # verbatim spans of the passage (under a tight budget the last may be a sentence's first words, marked …)
        assert all(piece.removesuffix("…") in text for piece in shown.split(" … "))
        assert not report.warnings

    def test_when_no_evidence_fits_the_prompt_goes_out_without_it_and_says_so(self, cl100k):
        items = [EvidenceItem(id="one", text="word " * 400 + "end.", score=0.9)]
        long_rules = "Answer only from the evidence. " * 20
        sections = [Section("instructions", role="key_instructions", content=long_rules),
                    Section("evidence", role="evidence", items=items),
                    Section("question", role="question", content="What?")]
        # the pinned sections as a tight budget writes them (the instructions once, as prose; the question after
        # "Question:"): 3 tokens left, too few for a tag and any piece of text
        pinned = assemble(sections[:1] + sections[2:], 300).report
        assert any(n.startswith("tight budget") for n in pinned.notes)
        prompt, report = assemble(sections, pinned.tokens + 3)
        assert cl100k.count(prompt) == report.tokens <= pinned.tokens + 3 and "<evidence>" not in prompt
        assert report.warnings == [w for w in report.warnings if "budget" in w and "too small" in w] != []


class TestPriorities:
    def test_evidence_for_the_question_comes_ahead_of_old_history(self):
        history = [Message("user" if i % 2 == 0 else "assistant", f"Turn {i}: " + _text(i, 6)) for i in range(30)]
        evidence = [EvidenceItem(id=f"doc{i}", text=_text(i, 8), score=0.9) for i in range(6)]
        result = ContextAssembler(1_200).assemble("What does FAISS do?", instructions="Answer from the evidence.",
                                                   history=history, evidence=evidence)
        tokens = {s.name: s.tokens for s in result.report.sections}
        assert tokens["evidence"] > tokens["history"] > 0  # the recent turns keep their share
        priorities = {s.name: s.priority for s in result.report.sections}
        assert priorities["evidence"] > priorities["history"]

    def test_the_report_documents_the_priorities_and_shares(self):
        history = [Message("user", "Hello there."), Message("assistant", "Hi.")]
        result = ContextAssembler(2_000).assemble("What?", history=history, evidence=["FAISS text."])
        by_name = {s.name: s for s in result.report.sections}
        assert by_name["history"].min_share == 0.15 and by_name["evidence"].priority == 75

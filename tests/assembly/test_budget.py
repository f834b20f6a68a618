"""``assemble()``, the budget function: checked on the final prompt string with the real tokenizer."""

from __future__ import annotations

import inspect
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assembly.assembly_samples import SENTENCES, _element, _items, _sections, _shown, _text, _wrapped
from contextkit import AssemblerConfig
from contextkit.assembly import (
    AssemblyOptions,
    AssemblyReport,
    BudgetError,
    EvidenceItem,
    Section,
    SectionError,
    assemble,
)
from contextkit.records import Message


class TestAssemble:
    def test_budget_fill_and_recount(self, cl100k):
        prompt, report = assemble(_sections(_items(40)), 2_000, verify=True)
        assert cl100k.count(prompt) == report.tokens <= 2_000
        assert report.tokens >= 0.99 * 2_000
        assert sum(s.tokens for s in report.sections) == report.tokens

    def test_head_and_tail_placement(self):
        prompt, _ = assemble(_sections(_items(5)), 5_000)
        assert prompt.startswith("<instructions>\nAnswer only from the evidence.\n</instructions>\n")
        tail = prompt[prompt.index("<question>"):]
        assert tail == ("<question>\nWhat does FAISS do?\n</question>\n"
                        "<reminder>\nAnswer only from the evidence.\n</reminder>\n")

    @pytest.mark.parametrize("markup", ["full", "lean"])
    def test_evidence_order_in_the_prompt(self, markup):
        prompt, report = assemble(_sections(_items(7)), 20_000, fill="budget", markup=markup)  # scores fall
        ids = _shown(prompt, report)
        assert ids == [["doc0"], ["doc2"], ["doc4"], ["doc6"], ["doc5"], ["doc3"], ["doc1"]]
        by_doc, _ = assemble(_sections(_items(7)), 20_000, evidence_order="document", fill="budget", markup=markup)
        assert [d.get("source") for d in _wrapped(by_doc).find("evidence")] == [f"src/{i}.md" for i in range(7)]

    def test_no_restatement_when_asked(self):
        prompt, _ = assemble(_sections(_items(2)), 5_000, restate_instructions=False)
        assert prompt.rstrip().endswith("</question>") and "<reminder>" not in prompt

    def test_pinned_over_budget_says_by_how_much(self, cl100k):
        big = Section("instructions", role="key_instructions", content="Obey. " * 400)
        with pytest.raises(BudgetError, match=r"over by [\d,]+"):
            assemble([big, Section("evidence", role="evidence", items=_items(3))], 300)

    @pytest.mark.parametrize("markup", ["full", "lean"])
    def test_truncation_at_a_sentence_end_before_dropping(self, markup):
        items = _items(3, size=40)
        prompt, report = assemble(_sections(items), 500, markup=markup)
        cut = [i for i in report.items if i.status == "truncated"]
        assert len(cut) == 1 and cut[0].reason == "budget"
        element = _element(prompt, report, cut[0].id)
        body = element.text.strip()
        assert body.endswith(").") and body in items[int(cut[0].id[3:])].text
        if markup == "full":
            assert element.get("id") == cut[0].id and element.get("truncated") == "true"
        else:  # lean markup has no truncated flag: the element is the cut item's alone
            assert element.get("truncated") is None and report.citations[element.get("id")] == [cut[0].id]

    def test_lowest_priority_section_gives_way_first(self):
        notes = Section("notes", role="domain_knowledge", content=_text(7, 60), priority=80)
        prompt, report = assemble(_sections(_items(20), more=[notes]), 1_500)
        by_name = {s.name: s for s in report.sections}
        assert by_name["notes"].status == "included"
        assert by_name["evidence"].status == "truncated"

    def test_shares(self):
        notes = Section("notes", role="domain_knowledge", content=_text(7, 200), priority=80, max_share=0.2)
        ev = Section("evidence", role="evidence", items=_items(30), min_share=0.5)
        _, report = assemble([Section("q", role="question", content="Why?"), notes, ev], 4_000)
        by_name = {s.name: s for s in report.sections}
        assert by_name["notes"].tokens <= 0.2 * 4_000 + 5 and by_name["notes"].status == "truncated"
        assert by_name["evidence"].tokens >= 0.5 * 4_000

    def test_duplicates_and_merges_are_reported_and_not_repeated(self):
        items = _items(4)
        copy = EvidenceItem(id="copy", text=items[0].text, source="mirror/0.md", score=0.95)
        prompt, report = assemble(_sections([*items, copy]), 10_000)
        status = {i.id: (i.status, i.reason, i.detail) for i in report.items}
        assert status["copy"] == ("dropped", "duplicate", "repeats doc0")
        assert prompt.count(items[0].text) == 1

    def test_min_score_and_empty_items(self):
        items = [*_items(3), EvidenceItem(id="low", text="weak", score=-5.0), EvidenceItem(id="blank", text="  ")]
        _, report = assemble(_sections(items), 5_000, min_score=0.0)
        status = {i.id: (i.status, i.reason) for i in report.items}
        assert status["low"] == ("dropped", "below_min_score") and status["blank"] == ("dropped", "empty")

    def test_prefix_stable_and_deterministic(self):
        items = _items(6)
        first, _ = assemble(_sections(items), 3_000)
        again, _ = assemble(_sections(list(items)), 3_000)
        assert first == again
        more, _ = assemble(_sections([*items, EvidenceItem(id="new", text=_text(99), score=0.97)]), 3_000)
        head = first[: first.index("<evidence>")]
        assert more.startswith(head)

    @pytest.mark.parametrize("markup", ["full", "lean"])
    def test_ties_break_on_id(self, markup):
        tied = [EvidenceItem(id=f"t{i}", text=_text(i, 3), score=0.5) for i in (3, 1, 2)]
        prompt, report = assemble(_sections(tied), 5_000, evidence_order="score", markup=markup)
        assert _shown(prompt, report) == [["t1"], ["t2"], ["t3"]]

    def test_history_newest_first_and_oldest_dropped(self):
        turns = [Message("user" if i % 2 == 0 else "assistant", _text(i, 10), id=f"m{i}") for i in range(12)]
        sections = [*_sections(_items(1)), Section("history", role="history", messages=turns)]
        prompt, report = assemble(sections, 900)
        kept = [m.get("role") for m in _wrapped(prompt).find("history")]
        status = {i.id: i.status for i in report.items if i.section == "history"}
        assert status["m11"] == "included" and status["m0"] == "dropped"
        dropped = [int(k[1:]) for k, v in status.items() if v == "dropped"]
        assert max(dropped) < min(int(k[1:]) for k, v in status.items() if v == "included")
        assert len(kept) == sum(v == "included" for v in status.values())

    def test_report_is_json_and_audit_log_has_no_text(self, tmp_path):
        log = tmp_path / "audit.jsonl"
        _, report = assemble(_sections(_items(3)), 2_000, audit_log=log, keep_text=False)
        AssemblyReport.model_validate_json(report.model_dump_json())
        line = json.loads(log.read_text().splitlines()[0])
        assert line["tokens"] == report.tokens and "FAISS searches" not in log.read_text()

    def test_report_keeps_the_shown_texts_when_asked(self):
        """The working texts are released before the prompt is joined, but not those the report keeps."""
        prompt, report = assemble(_sections(_items(3)), 2_000, keep_text=True)
        shown = [i for i in report.items if i.status == "included" and i.section == "evidence"]
        assert shown and all(i.text and i.text in prompt for i in shown)
        _, bare = assemble(_sections(_items(3)), 2_000)
        assert all(i.text is None for i in bare.items)

    def test_profile_budget_cost_and_tokenizer(self):
        _, report = assemble(_sections(_items(3)), "gpt-4o")
        assert report.model == "gpt-4o" and report.tokenizer == "o200k_base"
        assert report.estimated_cost_usd == pytest.approx(report.tokens * 2.5 / 1e6)

    def test_bad_sections(self):
        with pytest.raises(SectionError, match="exactly one"):
            Section("x", content="a", items=[])
        with pytest.raises(SectionError, match="unique"):
            assemble([Section("a", content="x"), Section("a", content="y")], 100)
        with pytest.raises(SectionError, match="not a valid XML tag"):
            Section("x", content="a", tag="1bad tag")
        with pytest.raises(BudgetError):
            assemble([Section("a", content="x")], 0)


@st.composite
def _inputs(draw):
    alphabet = st.characters(min_codepoint=0x20, max_codepoint=0x2FFF) | st.sampled_from(["\n", "<", "&", ">"])
    texts = draw(st.lists(st.text(alphabet, min_size=0, max_size=400), min_size=0, max_size=12))
    sentences = draw(st.lists(st.sampled_from(SENTENCES), min_size=0, max_size=30))
    items = [EvidenceItem(id=f"h{i}", text=t + " " + " ".join(sentences[i:]), score=draw(st.floats(0, 1)))
             for i, t in enumerate(texts)]
    budget = draw(st.integers(60, 3_000))
    fmt = draw(st.sampled_from(["xml", "markdown"]))
    return items, budget, fmt


class TestBudgetProperty:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_inputs())
    def test_never_over_budget_and_report_is_the_recount(self, cl100k, data):
        items, budget, fmt = data
        sections = [Section("q", role="question", content="Which?"), Section("e", role="evidence", items=items)]
        prompt, report = assemble(sections, budget, format=fmt)
        assert cl100k.count(prompt) == report.tokens <= budget
        included = sum(i.tokens for i in report.items)
        assert included <= report.tokens

    # From 4,000 tokens: cuts fall at sentence ends, and one sentence here is ~20 tokens, so
    # below that a prompt can stop short of 99% with nothing that fits in the gap.
    @settings(max_examples=25, deadline=None)
    @given(st.integers(4_000, 20_000), st.integers(0, 10_000))
    def test_fills_99_percent_when_material_exists(self, cl100k, budget, seed):
        items = [EvidenceItem(id=f"f{i}", text=_text(seed + i, 20), score=((seed * 31 + i * 17) % 100) / 100)
                 for i in range(budget // 150)]
        prompt, report = assemble(_sections(items), budget)
        assert cl100k.count(prompt) == report.tokens <= budget
        assert report.tokens >= 0.99 * budget


class TestDuplicatesEdgeCases:
    def test_same_item_twice_is_reported_once_as_duplicate(self):
        item = EvidenceItem(id="a", text=_text(1), doc_id="d", start=0, end=len(_text(1)), score=0.5)
        prompt, report = assemble(_sections([item, item]), 5_000)
        statuses = [(i.status, i.reason) for i in report.items if i.id == "a"]
        assert sorted(statuses, key=str) == [("dropped", "duplicate"), ("included", None)]
        assert prompt.count(_text(1)) == 1

    def test_a_passage_contained_in_a_kept_one_is_dropped(self):
        long = _text(2, 20)
        inner = ". ".join(long.split(". ")[3:12]) + "."
        items = [EvidenceItem(id="long", text=long, score=0.9), EvidenceItem(id="inner", text=inner, score=0.5)]
        _, report = assemble(_sections(items), 5_000)
        assert {i.id: i.reason for i in report.items}["inner"] == "near_duplicate"


def test_section_offsets_locate_each_section():
    prompt, report = assemble(_sections(_items(3)), 3_000)
    for s in report.sections:
        text = prompt[s.start:s.end]
        assert text.startswith(f"<{s.tag}>") and text.endswith(f"</{s.tag}>\n")
    assert report.sections[-1].end == len(prompt)


class TestAssemblyOptions:
    def test_a_record_gives_the_prompt_its_keywords_give(self):
        by_keywords = assemble(_sections(_items(6)), 300, format="markdown", evidence_order="score")
        by_record = assemble(_sections(_items(6)), 300, options=AssemblyOptions(format="markdown", evidence_order="score"))
        assert by_record.prompt == by_keywords.prompt

    def test_keywords_override_the_record(self):
        result = assemble(_sections(_items(6)), 300, options=AssemblyOptions(format="markdown"), format="xml")
        assert result.prompt == assemble(_sections(_items(6)), 300).prompt

    def test_unknown_keyword_is_a_type_error(self):
        with pytest.raises(TypeError, match="unknown option 'colour'"):  # an UnknownOptionError, still a TypeError
            assemble(_sections(_items(6)), 300, colour="red")

    def test_signature_lists_every_option_with_its_default(self):
        params = inspect.signature(assemble).parameters
        for name, field in AssemblyOptions.model_fields.items():
            assert params[name].default == field.default, name
        assert params["format"].default == "xml" and params["near_duplicate_threshold"].default == 0.8

    def test_the_assembler_config_extends_the_record(self):
        assert issubclass(AssemblerConfig, AssemblyOptions)
        config = AssemblerConfig()
        for name, field in AssemblyOptions.model_fields.items():
            assert getattr(config, name) == field.default, name

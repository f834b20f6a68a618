"""Item and section states and section roles are StrEnums; reports still hold (and serialise) plain strings."""

from __future__ import annotations

import json
from typing import get_args

import pytest

from contextkit.assembly import ROLES, ItemStatus, Role, Section, SectionStatus, assemble
from contextkit.assembly.report import AssemblyReport, ReportedItemStatus, ReportedSectionStatus
from contextkit.compressors.history import HistorySummarizer
from contextkit.core.records import EvidenceItem


def _sentences(tag: str, n: int) -> str:
    return " ".join(f"The {tag} fact number {i} says the river rises in spring near town {i}." for i in range(n))


def _report(budget: int, summarize: bool) -> AssemblyReport:
    doc = _sentences("doc", 40)
    items = [EvidenceItem(id="a", text=doc[:600], score=0.9, doc_id="d", start=0, end=600, source="d.txt"),
             EvidenceItem(id="b", text=doc[500:1200], score=0.8, doc_id="d", start=500, end=1200, source="d.txt"),
             EvidenceItem(id="c", text=_sentences("other", 60), score=0.7, source="o.txt"),
             EvidenceItem(id="c", text="twice", score=0.6),
             EvidenceItem(id="e", text="   ", score=0.5),
             EvidenceItem(id="f", text=_sentences("far", 30), score=0.4)]
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": _sentences(f"turn{i}", 4)} for i in range(14)]
    sections = [Section("rules", role="key_instructions", content="Answer from the evidence only."),
                Section("notes", role="my_notes", content=_sentences("note", 30)),
                Section("tool", role="tool_result", content=_sentences("log", 60)),
                Section("evidence", role="evidence", items=items),
                Section("history", role="history", messages=turns),
                Section("q", role="question", content="When does the river rise?")]
    summarizer = HistorySummarizer("cl100k_base") if summarize else None
    return assemble(sections, budget, history_summarizer=summarizer, keep_text=True).report


#: (budget, summarize): between them every status a report can carry.
_CASES = [(400, False), (700, False), (3200, True), (5000, False)]


def test_members_are_their_strings() -> None:
    assert ItemStatus.DROPPED == "dropped" and f"{ItemStatus.TRUNCATED}" == "truncated"
    assert Role.EVIDENCE == "evidence" and "evidence" == Role.EVIDENCE
    assert {"included": 1}[ItemStatus.INCLUDED] == 1  # hashes as the string
    assert type(str(SectionStatus.INCLUDED)) is str


def test_roles_are_the_enum_in_prompt_order() -> None:
    assert ROLES == ("key_instructions", "system", "task", "domain_knowledge", "custom", "evidence", "tool_result",
                     "history", "question")
    assert all(type(r) is str for r in ROLES)
    assert [r.value for r in Role] == [*ROLES, "reminder"]


def test_report_literals_are_the_enum_values_but_pending() -> None:
    assert set(get_args(ReportedItemStatus)) == {s.value for s in ItemStatus} - {"pending"}
    assert set(get_args(ReportedSectionStatus)) == {s.value for s in SectionStatus} - {"pending"}


def test_section_roles_stay_plain_strings() -> None:
    assert Section("x", role="evidence", items=[]).role == Role.EVIDENCE
    assert type(Section("x", content="a").role) is str
    assert Section("x", content="a").role == "custom"
    assert Section("x", role="my_notes", content="a").role == "my_notes"  # a custom role is kept as given
    assert Section("x", role="evidence", items=[]).priority == 75
    assert Section("x", role="question", content="a").pinned is True


@pytest.mark.parametrize(("budget", "summarize"), _CASES)
def test_report_holds_plain_strings(budget: int, summarize: bool) -> None:
    report = _report(budget, summarize)
    dumped = report.model_dump()
    for item in [*dumped["items"], *dumped["sections"]]:
        assert type(item["status"]) is str
    for section in dumped["sections"]:
        assert type(section["role"]) is str
        assert section["status"] in set(SectionStatus) - {SectionStatus.PENDING}
    for item in dumped["items"]:
        assert item["status"] in set(ItemStatus) - {ItemStatus.PENDING}
    assert all(type(k) is str for k in report.counts())
    data = json.loads(report.model_dump_json())
    assert [s["status"] for s in data["sections"]] == [s.status for s in report.sections]
    assert [s["role"] for s in data["sections"]] == ["key_instructions", "my_notes", "evidence", "tool_result",
                                                     "history", "question", "reminder"]
    assert '"status":"' in report.model_dump_json()
    assert report.audit_record()["items"][0]["status"] == report.items[0].status


def test_every_status_a_report_can_carry_is_seen_and_a_member() -> None:
    items: set[str] = set()
    sections: set[str] = set()
    for budget, summarize in _CASES:
        data = json.loads(_report(budget, summarize).model_dump_json())
        items |= {i["status"] for i in data["items"]}
        sections |= {s["status"] for s in data["sections"]}
    assert items == set(get_args(ReportedItemStatus))
    assert sections == set(get_args(ReportedSectionStatus))
    assert items <= {s.value for s in ItemStatus} and sections <= {s.value for s in SectionStatus}


def test_dropped_lists_what_was_left_out() -> None:
    report = _report(3200, True)
    assert {i.status for i in report.dropped()} == {"dropped", "merged", "summarized"}

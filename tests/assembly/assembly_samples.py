"""Sample evidence and sections shared by the assembly tests (the real tokenizer counts them)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from contextkit.assembly import EvidenceItem, Section

SENTENCES = [
    "FAISS searches dense vectors by inner product.",
    "BM25 weighs terms by their inverse document frequency.",
    "Hybrid retrieval fuses both rankings into one.",
    "A chunk keeps its character offsets in the document.",
    "The budget is counted with the model's own tokenizer.",
    "Long prompts lose facts placed in their middle.",
]


def _text(seed: int, n: int = 12) -> str:
    return " ".join(f"{SENTENCES[(seed + i) % len(SENTENCES)][:-1]} (note {seed}.{i})." for i in range(n))


def _items(n: int, size: int = 12) -> list[EvidenceItem]:
    return [EvidenceItem(id=f"doc{i}", text=_text(i, size), source=f"src/{i}.md", score=1.0 - i / (n + 1))
            for i in range(n)]


def _sections(items, question="What does FAISS do?", **extra) -> list[Section]:
    return [Section("instructions", role="key_instructions", content="Answer only from the evidence."),
            Section("evidence", role="evidence", items=items),
            Section("question", role="question", content=question), *extra.get("more", [])]


def _wrapped(prompt: str) -> ET.Element:
    return ET.fromstring(f"<prompt>{prompt}</prompt>")


def _documents(prompt: str) -> list[ET.Element]:
    """The evidence elements: in the evidence section, or on their own where a tight budget leaves its tags out."""
    root = _wrapped(prompt)
    evidence = root.find("evidence")
    return list(evidence) if evidence is not None else root.findall("document")


def _shown(prompt: str, report, section: str = "evidence") -> list[list[str]]:
    """The chunk ids each element of an evidence section shows, in prompt order, in either markup: an
    element's id in full markup, what ``report.citations`` maps its citation id to in lean."""
    return [report.citations[d.get("id")] if report.markup == "lean" else [d.get("id")]
            for d in _wrapped(prompt).find(section)]


def _element(prompt: str, report, chunk_id: str, section: str = "evidence") -> ET.Element:
    """The element of an evidence section that shows chunk ``chunk_id``, in either markup."""
    (element,) = [d for d, ids in zip(_wrapped(prompt).find(section), _shown(prompt, report, section))
                  if chunk_id in ids]
    return element

"""Sections to :class:`SectionFill` s, before any budget is spent.

Preparing is what does not depend on the budget: masking PII, turning messages and
evidence items into entries, dropping items that can never go in (duplicates, empty,
below the minimum score), merging overlapping passages, and estimating each item's
tokens from stored counts so that choosing costs no tokenizer pass.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace as copy_with
from typing import TYPE_CHECKING, Any

from contextkit.assembly._fill import OWN_ATTRIBUTES, SectionFill, _Entry
from contextkit.assembly._states import ItemStatus, Role
from contextkit.assembly.passages import EvidenceOrder, document_key, merge_overlapping, order_items
from contextkit.assembly.relevance import FillMode, gate
from contextkit.assembly.render import Renderer
from contextkit.assembly.sections import Section
from contextkit.core.records import EvidenceItem, Message
from contextkit.core.tokenizers import Tokenizer

if TYPE_CHECKING:  # pragma: no cover
    from contextkit.compressors.base import Redactor

__all__ = ["TAG_ATTRIBUTES_KEY", "prepare", "redacted", "tag_attributes"]

#: An item left out before choosing: (item, status, reason, detail).
_Early = tuple[EvidenceItem, ItemStatus, str | None, str | None]
#: How evidence is gated: (fill, relevance_floor, min_similarity, the question).
Relevance = tuple[FillMode, float, float | None, str | None]


def redacted(section: Section, redactor: Redactor) -> Section:
    """A copy of ``section`` with PII masked, in the redactor's one session (one placeholder per value,
    wherever it occurs): the text of evidence, history, the question and tool output, and what comes
    with them and reaches the prompt, the report or the audit log: item ids, sources, document ids and
    metadata, message ids, the section's attribute values. Instructions, tasks and custom sections
    are the caller's own text and are left as given."""
    mask = getattr(redactor, "mask", None) or (lambda value: redactor.redact(value).text if value else value)

    def plain_mask_data(value: Any) -> Any:  # for a redactor with only redact(): PIIRedactor has mask_data
        if isinstance(value, str):
            return mask(value)
        if isinstance(value, dict):
            return {mask(k) if isinstance(k, str) else k: plain_mask_data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(plain_mask_data(v) for v in value)
        return value

    mask_data = getattr(redactor, "mask_data", None) or plain_mask_data
    attributes = {k: mask(v) for k, v in section.attributes.items()} if section.attributes else section.attributes
    if attributes != section.attributes:
        section = copy_with(section, attributes=attributes)
    if section.items is not None:
        items = []
        for item in section.items:
            text, ident, source = mask(item.text), mask(item.id), mask(item.source)
            doc_id = mask(item.doc_id) if item.doc_id else item.doc_id
            metadata = mask_data(item.metadata) if item.metadata else item.metadata
            if (text, ident, source, doc_id, metadata) == (item.text, item.id, item.source, item.doc_id, item.metadata):
                items.append(item)
            elif text == item.text:
                items.append(copy_with(item, id=ident, source=source, doc_id=doc_id, metadata=metadata))
            else:  # offsets no longer fit the masked text
                items.append(copy_with(item, text=text, id=ident, source=source, metadata=metadata, token_count=None,
                                       start=None, end=None, doc_id=None))
        return copy_with(section, items=items)
    if section.messages is not None:
        return copy_with(section, messages=[Message(mask(m.role), mask(m.content), m.timestamp,  # a role is free text
                                                    mask(m.id) if m.id else m.id) for m in section.messages])
    if section.role in (Role.QUESTION, Role.TOOL_RESULT) and section.content:
        return copy_with(section, content=mask(section.content))
    return section


def prepare(section: Section, renderer: Renderer, tok: Tokenizer, min_score: float | None,
            merge: bool, evidence_order: EvidenceOrder, relevance: Relevance | None = None) -> SectionFill:
    """The section's fill: its escaped text, its messages, or its evidence best first.

    ``relevance`` is ``(fill, relevance_floor, min_similarity, question)`` (see :mod:`.relevance`);
    None fills to the budget, with ``min_score`` the only floor."""
    fill = SectionFill(section, renderer, tok)
    if section.content is not None:
        fill.body = renderer.body(section.content)
    elif section.messages is not None:
        fill.entries = _message_entries(section, renderer)
    else:
        items = list(section.items or [])
        gate_args = relevance or ("budget", 0.0, None, None)
        _add_evidence(fill, items, min_score, merge, evidence_order, gate_args, section.relevance_anchor)
        if merge:
            def unmerge() -> None:
                fill.entries = []
                _add_evidence(fill, items, min_score, False, evidence_order, gate_args, section.relevance_anchor,
                              continuations=True)
            fill.unmerge = unmerge
    return fill


def _message_entries(section: Section, renderer: Renderer) -> list[_Entry]:
    entries = []
    for i, m in enumerate(section.messages or []):
        e = _Entry(id=m.id or f"{section.name}#{i}", raw=m.content, escape=renderer.body, attrs={},
                   body_tokens=None, role=m.role)
        if not m.content.strip():
            e.status, e.reason = ItemStatus.DROPPED, "empty"
        entries.append(e)
    return entries


def _add_evidence(fill: SectionFill, items: list[EvidenceItem], min_score: float | None, merge: bool,
                  evidence_order: EvidenceOrder, relevance: Relevance, anchor: float | None,
                  continuations: bool = False) -> None:
    """Entries for the items left out early (reported), then the candidates best first (``continuations``:
    see :func:`.relevance.gate`)."""
    renderer = fill.renderer
    kept, early = _screen(items)
    kept, below, fill.relevance = gate(kept, relevance[0], min_score, relevance[1], relevance[2], anchor,
                                       continuations=continuations, question=relevance[3])
    reason = "below_min_score" if fill.relevance.floor_from == "min_score" else "irrelevant"
    early += [(item, ItemStatus.DROPPED, reason, detail) for item, detail in below]
    merged_into: set[str] = set()
    if merge:
        kept, absorbed = merge_overlapping(kept)
        merged_into = set(absorbed.values())
        by_id = {it.id: it for it in items}
        early += [(by_id[a], ItemStatus.MERGED, None, f"merged into {into}") for a, into in absorbed.items()]
    kept.sort(key=lambda it: (-(it.score if it.score is not None else float("-inf")), it.id))
    for item, status, why, detail in early:
        fill.entries.append(_Entry(id=item.id, raw="", escape=renderer.body, attrs={}, body_tokens=0,
                                   source=item.source, score=item.score, status=status, reason=why,
                                   detail=detail))
    counts = {it.id: it.token_count for it in items if it.tokenizer == fill.tokenizer.name
              and it.token_count is not None}
    originals = {it.id: it for it in items}
    escapes = renderer.format == "xml"
    for item in kept:
        trusted = _estimate(item, escapes, counts, originals if item.metadata.get("merged_ids") else None)
        fill.entries.append(_Entry(id=item.id, raw=item.text, escape=renderer.body, attrs=_attributes(item),
                                   body_tokens=trusted, source=item.source, score=item.score,
                                   focus=_focus(item) if item.id in merged_into else None,
                                   parts=_parts(item) if item.id in merged_into else (), doc=document_key(item),
                                   span=(item.start, item.end) if item.start is not None and item.end is not None
                                   and item.id not in merged_into else None))
    fill.orderer = _orderer(fill, kept, evidence_order)
    fill.groups_documents = evidence_order != "score"


def _screen(items: list[EvidenceItem]) -> tuple[list[EvidenceItem], list[_Early]]:
    """(candidates, items that can never go in): an id given twice, an empty text."""
    early: list[_Early] = []
    kept: list[EvidenceItem] = []
    seen_ids: set[str] = set()
    for item in items:
        if item.id in seen_ids:
            early.append((item, ItemStatus.DROPPED, "duplicate", "the same item given twice"))
            continue
        seen_ids.add(item.id)
        if not item.text.strip():
            early.append((item, ItemStatus.DROPPED, "empty", None))
        else:
            kept.append(item)
    return kept, early


#: The longest title shown on a tag, in characters (a page title is a line; a JSONL "title" may be anything).
MAX_TITLE_CHARS = 120
#: A documentation site's name after a page's title ("functools — Python 3.11.2 documentation", Sphinx's
#: default; "Page | Project documentation"): the same on every page of the site, so on every tag it is
#: only tokens (about 8 of 20 per tag on Python's docs). The page's own title is kept.
_SITE_SUFFIX = re.compile(r"\s+[—–|-]\s+[^—–|]{1,80}\bdocumentation\s*$", re.IGNORECASE)


def _attributes(item: EvidenceItem) -> dict[str, str]:
    """The tag's attributes: what a model needs to cite the passage (id, source, the page's title and,
    for a PDF, its pages) and the retrieval score."""
    attrs = {"id": item.id}
    if item.source:
        attrs["source"] = item.source
    title = _shown_title(item)
    if title:
        attrs["title"] = title
    page, last = item.metadata.get("page"), item.metadata.get("page_end")
    if isinstance(page, int) and not isinstance(page, bool):
        attrs["page"] = f"{page}-{last}" if isinstance(last, int) and last > page else str(page)
    attrs.update(tag_attributes(item, attrs))
    if item.score is not None:
        attrs["score"] = f"{item.score:.4f}"
    return attrs


#: ``EvidenceItem.metadata`` key of extra attributes for the item's tag, ``{name: value}`` (the LlamaIndex
#: plug-in puts there the node metadata LlamaIndex would show the LLM: ``page_label``, ``section``...).
TAG_ATTRIBUTES_KEY = "tag_attributes"
_ATTRIBUTE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def tag_attributes(item: EvidenceItem, taken: dict[str, str]) -> dict[str, str]:
    """The extra attributes of ``item``'s tag (:data:`TAG_ATTRIBUTES_KEY`): names that are valid XML
    attribute names, not ``xml...`` and not contextkit's own; values a string or a number. Rendered and
    escaped with the others, so counted in the budget exactly and unable to forge markup; others skipped."""
    extra = item.metadata.get(TAG_ATTRIBUTES_KEY)
    if not isinstance(extra, dict):
        return {}
    out: dict[str, str] = {}
    for name, value in extra.items():
        if not isinstance(name, str) or not _ATTRIBUTE_NAME.match(name) or name.lower().startswith("xml"):
            continue
        if name in OWN_ATTRIBUTES or name in taken or isinstance(value, bool) or not isinstance(value, str | int | float):
            continue
        out[name] = str(value)
    return out


def _shown_title(item: EvidenceItem) -> str | None:
    """The title for the tag: the page's own, without a site's name, cut to :data:`MAX_TITLE_CHARS`; None
    when there is none or the passage opens with it (a JSONL record's or a page's first chunk: the title
    is in the text already, and on SciFact a second copy on every tag cost a tenth of the prompt)."""
    title = item.metadata.get("title")
    if not isinstance(title, str) or not title.strip():
        return None
    shown = " ".join(title.split())
    shown = _SITE_SUFFIX.sub("", shown) or shown
    if shown in " ".join(item.text[: 2 * len(shown) + 200].split()):
        return None
    return shown if len(shown) <= MAX_TITLE_CHARS else shown[: MAX_TITLE_CHARS - 1] + "…"


def _focus(item: EvidenceItem) -> tuple[int, int] | None:
    """Where a merged passage's best part (the one whose id it carries) lies in its text (from
    :func:`.passages.merge_overlapping`, which made it in this call)."""
    for ident, start, end in item.metadata.get("merged_spans", ()):
        if ident == item.id and 0 <= start < end <= len(item.text):
            return start, end
    return None


def _parts(item: EvidenceItem) -> tuple[tuple[str, int, int], ...]:
    """The ``(id, start, end)`` of each part of a merged passage, in its text."""
    return tuple((str(i), int(a), int(b)) for i, a, b in item.metadata.get("merged_spans", ()))


def _estimate(item: EvidenceItem, escapes: bool, counts: dict[str, int],
              parts: dict[str, EvidenceItem] | None) -> int | None:
    """A token estimate from stored chunk counts, so choosing costs no tokenizer pass.

    Only an estimate (the prompt is counted exactly later): a merged passage is
    scaled by characters from its parts' counts, an escaped one adds two tokens per
    escape. None (count it) when no stored count applies.
    """
    if parts is not None:
        ids = item.metadata["merged_ids"]
        if not all(counts.get(i) for i in ids):
            return None
        chars = sum(len(parts[i].text) for i in ids)
        base = round(sum(counts[i] for i in ids) * len(item.text) / max(chars, 1))
    elif counts.get(item.id) is not None:
        base = counts[item.id]
    else:
        return None
    return base + 2 * (item.text.count("<") + item.text.count("&")) if escapes else base


def _orderer(fill: SectionFill, kept: list[EvidenceItem], mode: EvidenceOrder) -> Callable[[list[int]], list[int]]:
    """Taken entry indices -> their prompt order under ``mode`` (the entries are kept best first)."""
    offset = len(fill.entries) - len(kept)
    position = {id(item): offset + j for j, item in enumerate(kept)}

    def order(included: list[int]) -> list[int]:
        chosen = [kept[i - offset] for i in included]
        return [position[id(item)] for item in order_items(chosen, mode)]

    return order

"""Evidence hygiene: merge overlapping passages, drop duplicates, order the rest.

Retrievers return overlapping chunks of one document (chunk overlap, or two
neighbouring chunks that both match); pasting both repeats text and wastes the
budget. Passages of one document whose character ranges overlap or touch are
merged into one, using the offsets. Across documents, exact duplicates (same
text up to case and white space) and near duplicates (Jaccard similarity of
their sentence sets at or above a threshold) are dropped, and reported.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Literal

from contextkit.core.errors import InvalidArgumentError
from contextkit.core.records import EvidenceItem
from contextkit.core.text import Deduplicator, normalise_text, sentence_set

__all__ = ["Deduplicator", "document_key", "merge_overlapping", "normalise_text", "order_items", "sentence_set"]

EvidenceOrder = Literal["lost_in_the_middle", "score", "document"]


def merge_overlapping(items: list[EvidenceItem]) -> tuple[list[EvidenceItem], dict[str, str]]:
    """Merge passages of one document whose ranges overlap or touch.

    Returns the merged list and ``{absorbed id: id it was merged into}``. A merged
    passage takes the id *and* the score of its best-scoring part (ties: the first),
    so the id a model cites and the score beside it belong to the same chunk; its
    similarity is the best of its parts'. ``metadata["merged_spans"]`` holds each part's
    ``[id, start, end]`` in the merged text: a merged passage that must be cut is cut from
    its best part's own text, so the id names the text shown. Passages whose texts disagree on the shared
    range (two versions of a document) are kept apart.
    """
    by_doc: dict[str, list[EvidenceItem]] = defaultdict(list)
    out: list[EvidenceItem] = []
    for item in items:
        if item.doc_id is not None and item.start is not None and item.end is not None:
            by_doc[item.doc_id].append(item)
        else:
            out.append(item)
    absorbed: dict[str, str] = {}
    for group in by_doc.values():
        if len(group) == 1:
            out.append(group[0])
            continue
        group.sort(key=lambda it: (it.start, it.end, it.id))
        current = group[0]
        parts = [current]
        for nxt in group[1:]:
            if any(nxt.id == p.id for p in parts):  # the same passage twice: the caller reports it
                continue
            cur_end = _span(current)[1]
            nxt_start, nxt_end = _span(nxt)
            if nxt_start <= cur_end and _agree(current, nxt):
                if nxt_end > cur_end:
                    current = replace(current, text=current.text + nxt.text[cur_end - nxt_start:], end=nxt_end,
                                      token_count=None)
                parts.append(nxt)
                continue
            out.append(_finish(current, parts, absorbed))
            current, parts = nxt, [nxt]
        out.append(_finish(current, parts, absorbed))
    return out, absorbed


def _span(item: EvidenceItem) -> tuple[int, int]:
    """``(start, end)`` of a passage that merge_overlapping grouped (it groups only passages with both)."""
    assert item.start is not None and item.end is not None
    return item.start, item.end


def _agree(a: EvidenceItem, b: EvidenceItem) -> bool:
    a_start, a_end = _span(a)
    b_start, b_end = _span(b)
    lo, hi = b_start, min(a_end, b_end)
    return a.text[lo - a_start: hi - a_start] == b.text[: hi - lo]


def _finish(item: EvidenceItem, parts: list[EvidenceItem], absorbed: dict[str, str]) -> EvidenceItem:
    """The merged passage under its best part's id and score; the other parts recorded as absorbed into it."""
    if len(parts) == 1:
        return item
    best = max(parts, key=lambda p: p.score if p.score is not None else float("-inf"))  # max keeps the first of ties
    for p in parts:
        if p.id != best.id:
            absorbed[p.id] = best.id
    sims = [p.similarity for p in parts if p.similarity is not None]
    origin = _span(item)[0]
    spans = [[p.id, _span(p)[0] - origin, _span(p)[1] - origin] for p in parts]
    return replace(item, id=best.id, score=best.score, similarity=max(sims) if sims else None,
                   metadata={**item.metadata, "merged_ids": [p.id for p in parts], "merged_spans": spans})


def order_items(items: list[EvidenceItem], mode: EvidenceOrder = "lost_in_the_middle") -> list[EvidenceItem]:
    """Order evidence for the prompt.

    ``lost_in_the_middle`` puts the strongest documents at both ends (1st, 3rd, 5th...
    from the start; 2nd, 4th... from the end), where long-context models attend
    best, each document's passages together in reading order (a page's passages
    interleaved by score with other pages' read as disconnected snippets, and a
    model citing the page gets its text in its own order); documents rank by their
    best passage. ``score`` is best first; ``document`` follows source and offset.
    Ties break on the item id, so the order is deterministic.
    """
    ranked = sorted(items, key=_rank_key)
    if mode == "score":
        return ranked
    if mode == "document":
        return sorted(items, key=lambda it: (it.source, it.doc_id or "", it.start or 0, it.id))
    if mode != "lost_in_the_middle":
        raise InvalidArgumentError(f"evidence order must be lost_in_the_middle, score or document, not {mode!r}")
    groups: dict[str, list[EvidenceItem]] = {}
    for item in ranked:  # best document first, as its best passage ranks
        groups.setdefault(document_key(item), []).append(item)
    ordered = [sorted(group, key=_reading_key) for group in groups.values()]
    placed = ordered[0::2] + ordered[1::2][::-1]
    return [item for group in placed for item in group]


def document_key(item: EvidenceItem) -> str:
    """The document an item belongs to (an item with neither a document id nor a source stands alone)."""
    if item.doc_id:
        return "doc\0" + item.doc_id
    return "src\0" + item.source if item.source else "item\0" + item.id


def _reading_key(item: EvidenceItem) -> tuple[int, int, float, str]:
    """Reading order within a document: by offset; items without one after, best first."""
    if item.start is None:
        return (1, 0, -(item.score if item.score is not None else float("-inf")), item.id)
    return (0, item.start, 0.0, item.id)


def _rank_key(item: EvidenceItem) -> tuple[float, str]:
    return (-(item.score if item.score is not None else float("-inf")), item.id)

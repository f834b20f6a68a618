"""Evidence hygiene: merge overlapping passages, drop duplicates, order the rest.

Retrievers return overlapping chunks of one document (chunk overlap, or two
neighbouring chunks that both match); pasting both repeats text and wastes the
budget. Passages of one document whose character ranges overlap or touch are
merged into one, using the offsets. Across documents, exact duplicates (same
text up to case and white space) and near duplicates (Jaccard similarity of
their sentence sets at or above a threshold) are dropped, and reported.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from dataclasses import replace
from typing import Literal

from contextkit.assembly.sections import EvidenceItem
from contextkit.errors import InvalidArgumentError

__all__ = ["Deduplicator", "merge_overlapping", "normalise_text", "order_items", "sentence_set"]

EvidenceOrder = Literal["lost_in_the_middle", "score", "document"]


def merge_overlapping(items: list[EvidenceItem]) -> tuple[list[EvidenceItem], dict[str, str]]:
    """Merge passages of one document whose ranges overlap or touch.

    Returns the merged list and ``{absorbed id: id it was merged into}``. A merged
    passage takes the id *and* the score of its best-scoring part (ties: the first),
    so the id a model cites and the score beside it belong to the same chunk; its
    similarity is the best of its parts'. Passages whose texts disagree on the shared
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
            if nxt.start <= current.end and _agree(current, nxt):
                if nxt.end > current.end:
                    current = replace(current, text=current.text + nxt.text[current.end - nxt.start:], end=nxt.end,
                                      token_count=None)
                parts.append(nxt)
                continue
            out.append(_finish(current, parts, absorbed))
            current, parts = nxt, [nxt]
        out.append(_finish(current, parts, absorbed))
    return out, absorbed


def _agree(a: EvidenceItem, b: EvidenceItem) -> bool:
    lo, hi = b.start, min(a.end, b.end)
    return a.text[lo - a.start: hi - a.start] == b.text[: hi - lo]


def _finish(item: EvidenceItem, parts: list[EvidenceItem], absorbed: dict[str, str]) -> EvidenceItem:
    """The merged passage under its best part's id and score; the other parts recorded as absorbed into it."""
    if len(parts) == 1:
        return item
    best = max(parts, key=lambda p: p.score if p.score is not None else float("-inf"))  # max keeps the first of ties
    for p in parts:
        if p.id != best.id:
            absorbed[p.id] = best.id
    sims = [p.similarity for p in parts if p.similarity is not None]
    return replace(item, id=best.id, score=best.score, similarity=max(sims) if sims else None,
                   metadata={**item.metadata, "merged_ids": [p.id for p in parts]})


def order_items(items: list[EvidenceItem], mode: EvidenceOrder = "lost_in_the_middle") -> list[EvidenceItem]:
    """Order evidence for the prompt.

    ``lost_in_the_middle`` puts the strongest items at both ends (1st, 3rd, 5th...
    from the start; 2nd, 4th... from the end), where long-context models attend
    best; ``score`` is best first; ``document`` follows source and offset.
    Ties break on the item id, so the order is deterministic.
    """
    ranked = sorted(items, key=_rank_key)
    if mode == "score":
        return ranked
    if mode == "document":
        return sorted(items, key=lambda it: (it.source, it.doc_id or "", it.start or 0, it.id))
    if mode != "lost_in_the_middle":
        raise InvalidArgumentError(f"evidence order must be lost_in_the_middle, score or document, not {mode!r}")
    return ranked[0::2] + ranked[1::2][::-1]


def _rank_key(item: EvidenceItem) -> tuple[float, str]:
    return (-(item.score if item.score is not None else float("-inf")), item.id)


# ------------------------------------------------------------------ duplicates
_MIN_SENTENCE = 16  # characters; shorter pieces ("Yes.", "1.") say nothing about duplication


def normalise_text(text: str) -> str:
    """Case-folded, white space collapsed: the form duplicates are compared in."""
    return " ".join(text.casefold().split())


def sentence_set(normalised: str) -> set[int]:
    """Hashes of the text's sentences (normalised): the unit of near-duplicate detection."""
    pieces = normalised.replace("? ", ". ").replace("! ", ". ").replace("; ", ". ").split(". ")
    return {hash(piece.rstrip(".!?;")) for piece in pieces if len(piece) >= _MIN_SENTENCE}


class Deduplicator:
    """Remembers accepted passages; says whether a new one repeats one of them.

    Exact: the same text up to case and white space. Near: at least
    ``near_threshold`` Jaccard similarity of their sets of sentences (so a copy
    with a changed title, a reflowed paragraph or an extra line is caught, while
    two passages that share a stock sentence are not), or at least
    ``containment`` of the new passage's sentences inside one kept passage (a
    chunk of a mirrored copy that a longer merged passage already holds). Sentences are cheap to
    hash: checking a million tokens of evidence costs tens of milliseconds.
    """

    def __init__(self, near_threshold: float | None = 0.8, containment: float | None = 0.9) -> None:
        self.near_threshold = near_threshold
        self.containment = containment
        self._exact: dict[bytes, str] = {}
        self._postings: dict[int, list[int]] = defaultdict(list)
        self._sizes: list[int] = []
        self._ids: list[str] = []

    def check(self, item_id: str, text: str) -> tuple[str, str] | None:
        """``("duplicate" | "near_duplicate", id of the kept passage)`` or None; accepts it when None."""
        normalised = normalise_text(text)
        key = hashlib.blake2b(normalised.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        if key in self._exact:
            return "duplicate", self._exact[key]
        sentences = sentence_set(normalised) if self.near_threshold is not None else set()
        if len(sentences) >= 3:
            shared = Counter(j for h in sentences for j in self._postings.get(h, ()))
            for j, common in shared.most_common(3):
                if common / (len(sentences) + self._sizes[j] - common) >= self.near_threshold:
                    return "near_duplicate", self._ids[j]
                if self.containment is not None and common / len(sentences) >= self.containment:
                    return "near_duplicate", self._ids[j]  # nearly all of it is inside a kept passage
        self._exact[key] = item_id
        if len(sentences) >= 3:
            j = len(self._ids)
            for h in sentences:
                self._postings[h].append(j)
            self._sizes.append(len(sentences))
            self._ids.append(item_id)
        return None

"""Sentence windows merged before the budget is filled.

Why: with ``SentenceWindowNodeParser`` and ``MetadataReplacementPostProcessor``
each retrieved sentence arrives as its *window* (the sentences around it, joined
with spaces), and neighbouring hits share most of their windows. Their offsets
are the centre sentence's, not the window's, so the offset merge cannot see the
overlap, and near-duplicate detection catches only windows almost equal. Here
windows of one source (and the same LLM-visible metadata) are taken in the order
of their sentences' offsets, and a window that continues the previous one
(its start repeats the previous one's end, at a word boundary) or lies inside it
is joined to it: the merged text holds each window exactly once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from llama_index.core.schema import (
    BaseNode,
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    TextNode,
)

__all__ = ["MIN_OVERLAP", "merge_windows"]

#: Characters two windows must share to be one passage (about two words).
MIN_OVERLAP = 12


def _window_key(node: BaseNode) -> tuple[str, str] | None:
    """The group of a replaced sentence-window node (source, LLM metadata), or None for any other node."""
    meta = node.metadata or {}
    window = meta.get("window")
    if not isinstance(node, TextNode) or not isinstance(window, str) or "original_text" not in meta:
        return None
    if node.get_content(metadata_mode=MetadataMode.NONE) != window or node.start_char_idx is None:
        return None  # the window was not put in place of the sentence
    source = node.relationships.get(NodeRelationship.SOURCE)
    source_id = getattr(source, "node_id", None)
    return None if source_id is None else (source_id, node.get_metadata_str(mode=MetadataMode.LLM))


def _overlap(a: str, b: str) -> int:
    """Length of the longest end of ``a`` that starts ``b`` at a word boundary (0: none of ``MIN_OVERLAP``)."""
    for i in range(max(0, len(a) - len(b)), len(a) - MIN_OVERLAP + 1):
        if (i == 0 or a[i - 1].isspace()) and b.startswith(a[i:]):
            return len(a) - i
    return 0


def merge_windows(nodes: list[NodeWithScore], live: list[int],
                  copy: Callable[[TextNode, dict[str, Any], dict[str, Any]], TextNode],
                  merged_key: str) -> tuple[list[NodeWithScore], list[int], dict[int, int]]:
    """The nodes with overlapping windows joined (in the place of the first of each run), the indices
    still live, and for each absorbed index the index it went into."""
    groups: dict[tuple[str, str], list[tuple[int, TextNode]]] = defaultdict(list)  # (index, its node)
    for i in live:
        found = nodes[i].node
        if isinstance(found, TextNode) and (key := _window_key(found)) is not None:
            groups[key].append((i, found))
    work = list(nodes)
    absorbed: dict[int, int] = {}
    for members in groups.values():
        members.sort(key=lambda m: m[1].start_char_idx or 0)  # set on every member (_window_key)
        run = [members[0]]
        text = members[0][1].text
        for member in [*members[1:], None]:
            nxt = member[1].text if member is not None else ""
            if member is not None and (nxt in text or _overlap(text, nxt)):
                text = text if nxt in text else text + nxt[_overlap(text, nxt):]
                run.append(member)
                continue
            if len(run) > 1:
                ids = [n.node_id for _, n in run]
                node = copy(run[0][1], {"text": text}, {merged_key: ids, "window": text})
                best = max((s for s in (nodes[j].score for j, _ in run) if s is not None), default=None)
                work[run[0][0]] = NodeWithScore(node=node, score=best)
                absorbed.update({j: run[0][0] for j, _ in run[1:]})
            if member is not None:
                run, text = [member], nxt
    return work, [i for i in live if i not in absorbed], absorbed

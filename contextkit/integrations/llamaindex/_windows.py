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
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    TextNode,
)

__all__ = ["MIN_OVERLAP", "merge_windows"]

#: Characters two windows must share to be one passage (about two words).
MIN_OVERLAP = 12


def _window_key(node: Any) -> tuple[str, str] | None:
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
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i in live:
        key = _window_key(nodes[i].node)
        if key is not None:
            groups[key].append(i)
    work, absorbed = list(nodes), {}
    for members in groups.values():
        members.sort(key=lambda i: nodes[i].node.start_char_idx)
        run = [members[0]]
        text = nodes[members[0]].node.text
        for i in [*members[1:], None]:
            nxt = nodes[i].node.text if i is not None else ""
            if i is not None and (nxt in text or _overlap(text, nxt)):
                text = text if nxt in text else text + nxt[_overlap(text, nxt):]
                run.append(i)
                continue
            if len(run) > 1:
                first = nodes[run[0]].node
                ids = [nodes[j].node.node_id for j in run]
                node = copy(first, {"text": text}, {merged_key: ids, "window": text})
                best = max((nodes[j].score for j in run if nodes[j].score is not None), default=None)
                work[run[0]] = NodeWithScore(node=node, score=best)
                absorbed.update({j: run[0] for j in run[1:]})
            if i is not None:
                run, text = [i], nxt
    return work, [i for i in live if i not in absorbed], absorbed

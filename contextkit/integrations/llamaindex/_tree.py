"""``response_mode="tree_summarize"``: every node reaches the LLM, in as many calls as the window needs.

Why: ``compact`` makes one call over evidence cut to fit, so on a small window a long
document loses what does not fit (on a 4k window, a summary saw 55% of a document's
section titles where LlamaIndex's ``tree_summarize`` saw them all). LlamaIndex's
``TreeSummarize`` repacks the chunks to fill the window, asks the LLM once per pack
with the question and its ``summary_template``, then summarises those answers the same
way until one call fits, and answers from that last call. This mirrors it with
contextkit's prompts: each pack is a prompt built under the exact budget (template,
system prompt, tags and question counted by the plug-in's tokenizer) and checked to
hold each of its items whole, so no node is cut or left out. A node larger than a
window on its own is split at whitespace into pieces that each fit (reported as
``split``).

The calls are the price: ``ceil(nodes' tokens / room)`` calls at the first level, then
fewer at each level above it, against one for ``compact``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from contextkit.core.errors import BudgetError
from contextkit.core.records import EvidenceItem
from contextkit.core.tokenizers import Tokenizer
from contextkit.integrations.llamaindex._prompt import PromptBuild

__all__ = ["ROOM_REASONS", "Assemble", "TreeRun", "left_out_for_room", "pack", "truncated_items"]

#: Why an assembly leaves an item out for lack of room (the others are relevance, duplicates, filters).
ROOM_REASONS = frozenset({"budget", "max_share"})
#: Builds one prompt over these evidence items (trial builds are not logged: many are never sent).
Assemble = Callable[[list[EvidenceItem]], PromptBuild]

_SPACE = re.compile(r"\s+")
_ROOT_KEY, _OFFSET_KEY = "contextkit_tree_node", "contextkit_tree_offset"


def left_out_for_room(build: PromptBuild) -> list[str]:
    """Ids of the evidence items this prompt left out because they did not fit (not for relevance)."""
    return [i.id for i in build.result.report.items
            if i.section == "evidence" and i.status == "dropped" and i.reason in ROOM_REASONS]


def _gated(build: PromptBuild) -> list[str]:
    """Ids left out by the app's own relevance options (``min_score``): not sent, but not for room."""
    return [i.id for i in build.result.report.items
            if i.section == "evidence" and i.status == "dropped" and i.reason in ("below_min_score", "irrelevant")]


def truncated_items(build: PromptBuild) -> list[str]:
    """Ids of the evidence items this prompt holds cut short."""
    return [i.id for i in build.result.report.items if i.section == "evidence" and i.status == "truncated"]


def _holds_whole(build: PromptBuild) -> bool:
    return not left_out_for_room(build) and not truncated_items(build)


def _halves(item: EvidenceItem) -> list[EvidenceItem]:
    """The item as two pieces cut at the whitespace nearest its middle, offsets kept (a node too large
    for a window on its own: each piece goes whole into some prompt, so its text is still all sent)."""
    text = item.text
    if len(text.strip()) < 2:
        raise BudgetError(f"node {item.id!r} cannot fit the window even as a few characters: the template, "
                          "system prompt and question leave no room for evidence")
    middle = len(text) // 2
    cuts = [m.end() for m in _SPACE.finditer(text) if 0 < m.end() < len(text)]
    cut = min(cuts, key=lambda c: abs(c - middle)) if cuts else middle
    root = str(item.metadata.get(_ROOT_KEY, item.id))
    base = int(item.metadata.get(_OFFSET_KEY, 0))
    return [replace(item, id=f"{root}[{base + a}:{base + b}]", text=text[a:b], token_count=None,
                    start=None if item.start is None else item.start + a,
                    end=None if item.start is None else item.start + b,
                    metadata={**item.metadata, _ROOT_KEY: root, _OFFSET_KEY: base + a})
            for a, b in ((0, cut), (cut, len(text)))]


def _largest_group(items: list[EvidenceItem], counts: list[int], start: int, assemble: Assemble,
                   budget: int) -> tuple[int, PromptBuild | None]:
    """How many items from ``start`` one prompt holds whole, and that prompt (0, None: not even one).

    The most whose raw counts sum within the budget is tried first (on a large window, one build takes
    them all); else a binary search, so a group costs a few builds, not one per item."""
    most, total = 0, 0
    while start + most < len(items) and total + counts[start + most] <= budget:
        total += counts[start + most]
        most += 1
    if most:
        build = assemble(items[start:start + most])
        if _holds_whole(build):
            return most, build
    fits, fails, best = 0, most, None
    while fails - fits > 1:
        size = (fits + fails) // 2
        build = assemble(items[start:start + size])
        if _holds_whole(build):
            fits, best = size, build
        else:
            fails = size
    return fits, best


def pack(items: Sequence[EvidenceItem], assemble: Assemble, tok: Tokenizer, budget: int,
         split: set[str] | None = None) -> list[PromptBuild]:
    """The items, in order, as consecutive groups each built into one prompt that holds all of them whole
    (as LlamaIndex's ``repack`` fills each chunk to the window); an item that fits no prompt alone is
    halved until its pieces do (its id added to ``split``)."""
    work = list(items)
    counts = [tok.count(item.text) for item in work]
    groups: list[PromptBuild] = []
    start = 0
    while start < len(work):
        size, build = _largest_group(work, counts, start, assemble, budget)
        if build is None:
            item = work[start]
            if split is not None:
                split.add(str(item.metadata.get(_ROOT_KEY, item.id)))
            work[start:start + 1] = halves = _halves(item)
            counts[start:start + 1] = [tok.count(piece.text) for piece in halves]
            continue
        groups.append(build)
        start += size
    return groups


@dataclass
class TreeRun:
    """One ``tree_summarize`` answer: the items of the level being packed, and what each level took.

    The synthesizer drives it (its sync and async paths differ only in how they call the LLM):
    ``next_level()`` packs the items into prompts; while there is more than one, their answers
    become the next level's items (``take_answers``); the last prompt gets :meth:`coverage`.
    """

    items: list[EvidenceItem]
    assemble: Assemble
    tok: Tokenizer
    budget: int
    groups: list[int] = field(default_factory=list)  # prompts per level, leaves first
    nodes: int = 0
    split: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    gated: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.nodes = len(self.items)

    def next_level(self) -> list[PromptBuild]:
        """This level's prompts, one per LLM call; refuses to loop when answers cannot be combined."""
        split: set[str] = set()
        builds = pack(self.items, self.assemble, self.tok, self.budget, split)
        if self.groups and len(builds) > 1 and len(builds) >= len(self.items):
            raise BudgetError(f"tree_summarize: {len(self.items)} partial answers do not fit fewer than "
                              f"{len(builds)} prompts of {self.budget} tokens; lower the LLM's num_output or "
                              "use a larger context_window")
        if not self.groups:  # the nodes' level: what was split, and (a check: none by construction) left out
            self.split = sorted(split)
            self.left_out = [i for b in builds for i in left_out_for_room(b)]
            self.gated = [i for b in builds for i in _gated(b)]
        self.groups.append(len(builds))
        return builds

    def take_answers(self, answers: Sequence[Any]) -> None:
        """The answers of this level's calls, as the next level's evidence (in order)."""
        level = len(self.groups)
        self.items = [EvidenceItem(id=f"answer-{level}.{i}", text=str(a)) for i, a in enumerate(answers, 1)]

    def coverage(self) -> dict[str, Any]:
        """What the response's report says: calls and levels used, and that nothing was left out."""
        return {"response_mode": "tree_summarize", "nodes": self.nodes, "calls": sum(self.groups),
                "levels": len(self.groups), "groups": list(self.groups), "left_out": list(self.left_out),
                "truncated": [], "split": list(self.split), "gated": list(self.gated),
                "complete": not self.left_out}

"""``AssemblyReport``: every token spent and every item left out, with the reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from contextkit.assembly._states import LEFT_OUT, ItemStatus, SectionStatus
from contextkit.assembly.relevance import RelevanceReport
from contextkit.compressors.base import CompressionReport

__all__ = ["AssemblyReport", "ItemReport", "ItemStatus", "SectionReport", "SectionStatus", "SessionReport"]

#: The values of :class:`ItemStatus` a report can show (all but ``pending``), kept plain strings in the report.
ReportedItemStatus = Literal["included", "truncated", "dropped", "merged", "summarized"]
#: The values of :class:`SectionStatus` a report can show (all but ``pending``).
ReportedSectionStatus = Literal["included", "truncated", "dropped"]
DropReason = Literal["budget", "duplicate", "near_duplicate", "below_min_score", "irrelevant", "filter", "empty",
                     "max_share"]


class ItemReport(BaseModel):
    """One evidence item or history message and what became of it."""

    id: str
    section: str
    source: str = ""
    score: float | None = None
    status: ReportedItemStatus
    reason: DropReason | None = None
    detail: str | None = Field(default=None, description="e.g. the id it duplicates or was merged into")
    tokens: int = Field(default=0, description="tokens of its block in the prompt (0 when left out)")
    text: str | None = Field(default=None, description="only when the report was asked to keep text")
    citation: str | None = Field(default=None, description="markup='lean': the short id of the element its "
                                 "text is shown in (a model cites this; AssemblyReport.citations maps it back)")


class SectionReport(BaseModel):
    """One section of the prompt: its exact tokens, where it sits, and what became of its items."""

    name: str
    role: str
    tag: str
    priority: int = Field(description="higher gives way later: by default tool output 80, evidence 75, history 70")
    pinned: bool
    min_share: float | None = Field(default=None, description="share of the budget kept for it (the history's "
                                    "recent turns: ContextAssembler's history_min_share)")
    max_share: float | None = None
    tokens: int = Field(description="exact tokens of the section's blocks in the prompt")
    start: int = Field(default=0, description="character offset of the section in the prompt")
    end: int = Field(default=0, description="character offset just past the section")
    status: ReportedSectionStatus
    reason: str | None = None
    items_included: int = 0
    items_truncated: int = 0
    items_dropped: int = 0
    markup_tokens: int = Field(default=0, description="tokens of its tags, fences, headings, gaps and escaping: "
                               "its tokens less those of the text it carries (each text counted on its own)")
    tagged: bool = Field(default=True, description="False where a tight budget left out the section's own tags "
                         "(or Markdown heading): the key instructions then lead as plain prose, the evidence's "
                         "elements stand on their own, each in its own tags, and the question ends the prompt "
                         "after 'Question:'")


class SessionReport(BaseModel):
    """What a :class:`~contextkit.Session` request holds across turns, and what its cache should serve.

    ``predicted_cached_tokens`` applies the provider's cache rule (the profile's, else the chat style's
    provider's) to this request and the previous one: a prediction, since a provider may evict early."""

    turns: int = Field(description="turns recorded so far (user, assistant, tool)")
    verbatim_turns: int = Field(description="turns this request carries as they were written")
    compacted_turns: int = Field(description="older turns condensed into the summaries")
    compactions: int = 0
    compacted: bool = Field(default=False, description="this request condensed turns (its cache breaks once)")
    prefix_tokens: int = Field(description="system message, summaries and verbatim turns")
    tail_tokens: int = Field(description="evidence, tool output, recalled excerpts, the question")
    total_tokens: int
    budget: int
    predicted_cached_tokens: int = 0
    cache_rule: str | None = None
    predicted_input_cost_usd: float | None = None

    def cached_share(self) -> float:
        return self.predicted_cached_tokens / self.total_tokens if self.total_tokens else 0.0


class AssemblyReport(BaseModel):
    """What one assembly did. ``tokens`` is a recount of the final prompt."""

    budget: int
    model: str | None = None
    tokenizer: str
    exact_tokenizer: bool = True
    format: str
    tokens: int
    characters: int
    budget_used_percent: float
    estimated_cost_usd: float | None = None
    seconds: float
    prompt_sha256: str
    sections: list[SectionReport]
    items: list[ItemReport]
    notes: list[str] = Field(default_factory=list)
    compression: list[CompressionReport] = Field(default_factory=list, description="compressors run, with fallbacks")
    relevance: RelevanceReport | None = Field(default=None, description="what the relevance gate did to the evidence")
    warnings: list[str] = Field(default_factory=list, description="what a caller should know before sending it")
    invisible_removed: int = Field(default=0, description="invisible or deceptive characters removed from "
                                   "untrusted text (AssemblyOptions.keep_invisible keeps them)")
    chat_style: str | None = Field(default=None, description="assembled to be sent as chat messages in this style")
    chat_tokens: int | None = Field(default=None, description="tokens of those messages, per-message overhead included")
    chat_tokens_exact: bool | None = Field(default=None, description="False when the overhead or tokenizer is estimated")
    markup: str = Field(default="full", description="how evidence was marked up: 'full' or 'lean'")
    session: SessionReport | None = Field(default=None, description="a Session's request: turns, history "
                                          "tokens, the predicted cached prefix")
    markup_tokens: int = Field(default=0, description="the prompt's tokens of markup: the sum of its sections'")
    citations: dict[str, list[str]] = Field(
        default_factory=dict, description="markup='lean': each short citation id on an evidence element -> the "
        "ids of the chunks whose text it shows, in prompt order (merged parts included)")

    def markup_share(self, section: str | None = None) -> float:
        """The share of the prompt's tokens (or of ``section``'s, by name) that is markup, not text."""
        if section is None:
            return self.markup_tokens / self.tokens if self.tokens else 0.0
        found = next((s for s in self.sections if s.name == section), None)
        if found is None:
            raise KeyError(f"no section {section!r} in this report")
        return found.markup_tokens / found.tokens if found.tokens else 0.0

    def dropped(self) -> list[ItemReport]:
        return [i for i in self.items if i.status in LEFT_OUT]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for item in self.items:
            key = item.status if item.reason is None else f"{item.status}:{item.reason}"
            out[key] = out.get(key, 0) + 1
        return out

    def summary(self) -> str:
        cost = "" if self.estimated_cost_usd is None else f", ~${self.estimated_cost_usd:.4f} input"
        return (f"{self.tokens:,} of {self.budget:,} tokens ({self.budget_used_percent:.2f}%){cost}, "
                f"{len(self.sections)} sections, {self.seconds * 1000:.0f} ms")

    def audit_record(self, include_text: bool = False) -> dict[str, Any]:
        """One JSON-ready line for an audit log; no document text unless asked."""
        data = self.model_dump(mode="json")
        if not include_text:
            for item in data["items"]:
                item.pop("text", None)
        return data

    def append_to_log(self, path: str | Path, include_text: bool = False) -> None:
        line = json.dumps(self.audit_record(include_text), ensure_ascii=False, separators=(",", ":"))
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

"""How one section spends its share of the budget.

Each section becomes a list of blocks (rendered text with a token count). The
counts used while choosing are estimates (stored chunk counts, tags counted on
their own); the assembler then counts every block exactly and, where the sum
and the budget disagree, asks the lowest-priority section to shrink or grow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from contextkit.assembly._cut_forms import cut_passage
from contextkit.assembly._prune import ELLIPSIS, GAP, best_left_out, sentence_scores
from contextkit.assembly._states import SUMMARY_ROLE, TAKEN, ItemStatus, Role, SectionStatus
from contextkit.assembly._tool_cut import task_cut
from contextkit.assembly.render import Renderer, cut_inside, plain_text
from contextkit.assembly.sections import Section
from contextkit.core.config import DEFAULT_SUMMARY_MAX_TOKENS
from contextkit.core.text import Deduplicator, split_sentences, truncate_at_sentence
from contextkit.core.tokenizers import Tokenizer

__all__ = ["MARKUPS", "OWN_ATTRIBUTES", "PART_GAP", "Block", "SectionFill", "lean_attributes"]

#: How evidence is marked up: ``"full"`` (each passage its own element with its chunk id, source, title, page
#: and score) or ``"lean"`` (a short citation id, the source once per run of one document, no score).
MARKUPS = ("full", "lean")
#: Between two passages of one document in one lean element: the text between them is not shown.
PART_GAP = "\n…\n"
#: Under a tight budget the question ends the prompt as ``Question: ...`` (see ``budget._lean``).
QUESTION_LABEL = "Question"
#: Under a tight budget the best passage is pruned to leave room for the next one's best sentence only when that
#: sentence scores more than this many times the best sentence the pruning leaves out (see
#: :meth:`SectionFill.share_with_next`; chosen on SQuAD dev, not XQuAD: bench/bench_small_budget.py --squad).
SHARE_MARGIN = 1.25
#: The citation id whose tag is counted while choosing, before the real ones are known (two digits: one token).
_PLACEHOLDER_ID = "10"


#: The attributes contextkit writes itself; any other on an entry came from its item's ``tag_attributes``.
OWN_ATTRIBUTES = frozenset({"id", "source", "title", "page", "score", "truncated"})


def lean_attributes(attrs: dict[str, str]) -> dict[str, str]:
    """An evidence tag's attributes under a tight budget: the id, and the source only where the id
    does not already name it (a chunk's id is its source, ``::`` and a number)."""
    ident, source = attrs.get("id", ""), attrs.get("source", "")
    named = not source or ident == source or ident.startswith(source + "::")
    return {"id": ident} if named else {"id": ident, "source": source}


@dataclass(slots=True)
class Block:
    text: str
    tokens: int  # estimate until counted
    exact: bool = False
    item: int | None = None  # index into SectionFill.entries for items and messages
    body: str | None = None  # the entry's body this block shows (to know when it changes)
    items: tuple[int, ...] = ()  # lean markup: every entry the element shows, in prompt order


@dataclass(slots=True)
class _Entry:
    """An evidence item or a message, prepared for rendering (escaped on first use:
    most candidates of a big pool are never rendered)."""

    id: str
    raw: str
    escape: Callable[[str], str]
    attrs: dict[str, str]
    body_tokens: int | None
    source: str = ""
    score: float | None = None
    status: ItemStatus = ItemStatus.PENDING
    reason: str | None = None
    detail: str | None = None
    shown: str | None = None  # the body as rendered when truncated
    role: str | None = None  # messages
    counted: tuple[str, int, str] | None = None  # last block rendered, its exact count, the body it shows
    focus: tuple[int, int] | None = None  # a merged passage: where its best part's own text lies in ``raw``
    parts: tuple[tuple[str, int, int], ...] = ()  # a merged passage: (id, start, end) of each part in ``raw``
    doc: str = ""  # evidence: the document it belongs to (lean markup puts a run of one document in one element)
    citation: str | None = None  # lean markup: the short id of the element it is shown in
    span: tuple[int, int] | None = None  # evidence: where its text lies in its document (the caller's offsets)
    repeated: int | None = None  # lean markup: characters of its start the passage before it in its element
    # already shows, when it reads on from that passage (0: it adjoins it); None: a gap before it
    _body: str | None = None

    @property
    def body(self) -> str:
        if self._body is None:
            self._body = self.escape(self.raw)
        return self._body

    @property
    def current(self) -> str:
        """The body as it is rendered now: the cut one when truncated."""
        return self.shown if self.status == ItemStatus.TRUNCATED and self.shown is not None else self.body

    @property
    def displayed(self) -> str:
        """The body as its element shows it: :attr:`current`, less the start the passage before repeats."""
        return self.escape(self.raw[self.repeated:]) if self.repeated else self.current


@dataclass
class SectionFill:
    section: Section
    renderer: Renderer
    tokenizer: Tokenizer
    entries: list[_Entry] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    body: str | None = None  # text sections: escaped content
    shown: str | None = None  # text sections: as rendered when truncated
    status: SectionStatus = SectionStatus.PENDING
    reason: str | None = None
    orderer: Callable[[list[int]], list[int]] | None = None  # taken entry indices -> prompt order
    dedup: Deduplicator | None = None
    summarizer: Any = None  # history: a HistorySummarizer-like object with compress(...)
    query: str | None = None
    compression: list[Any] = field(default_factory=list)
    relevance: Any = None  # evidence: the RelevanceReport of the gate
    lean: bool = False  # evidence under a tight budget: tags carry the id alone (see :meth:`attributes`)
    bare: bool = False  # a tight budget: shown without the section's own tags (see budget._lean)
    unmerge: Callable[[], None] | None = None  # evidence: its candidates again, overlapping chunks not merged
    invisible_removed: int = 0  # invisible characters taken out of the untrusted text (set on the first fill)
    markup: str = "full"  # evidence: "full" or "lean" (see :data:`MARKUPS` and :meth:`group_attributes`)
    show_scores: bool = True  # evidence: the retrieval score on the tag
    groups_documents: bool = True  # the evidence order keeps a document's passages together (not "score")
    citation_prefix: str = ""  # lean markup: before each citation id ("2." in a second evidence section)
    markup_tokens: int = 0  # set by :meth:`measure`: the section's tokens that are not text it carries
    item_tokens: dict[int, int] = field(default_factory=dict)  # set by :meth:`measure`: entry index -> tokens
    _group_counts: dict[tuple[int, ...], tuple[str, int]] = field(default_factory=dict)  # lean: exact counts

    # ----------------------------------------------------------- estimates
    @property
    def prose(self) -> bool:
        """Our own instructions, trusted: Markdown writes them as prose, not fenced like untrusted text."""
        return self.section.role in (Role.KEY_INSTRUCTIONS, Role.SYSTEM, Role.TASK, Role.REMINDER)

    @property
    def tag(self) -> str:
        """The section's XML tag (``Section.__post_init__`` sets one when none is given)."""
        tag = self.section.tag
        assert tag is not None
        return tag

    def count(self, text: str) -> int:
        return self.tokenizer.count(text)

    def body_tokens(self, e: _Entry) -> int:
        """The estimate of ``e``'s whole body (counted once)."""
        if e.body_tokens is None:
            e.body_tokens = self.count(e.body)
        return e.body_tokens

    @property
    def grouped(self) -> bool:
        """Evidence in lean markup: runs of one document's passages go in one element."""
        return self.markup == "lean" and self.section.items is not None

    def attributes(self, e: _Entry) -> dict[str, str]:
        """The tag's attributes: all of them, or under a tight budget (:attr:`lean`) the id alone, and the
        source only where the id does not already name it (a chunk's id is its source, ``::`` and a number).
        Lean markup: see :meth:`group_attributes`.

        Why: at a few hundred tokens the source written twice, the score and the truncated flag took
        about 40 tokens a document, as much as the passage's answer sentence."""
        if self.grouped:
            return self.group_attributes([e], e.citation or _PLACEHOLDER_ID)
        if self.lean:
            return lean_attributes(e.attrs)
        attrs = e.attrs if self.show_scores or "score" not in e.attrs else {
            k: v for k, v in e.attrs.items() if k != "score"}
        return {**attrs, "truncated": "true"} if e.shown is not None else attrs

    def group_attributes(self, group: list[_Entry], citation: str, tight: bool | None = None) -> dict[str, str]:
        """Lean markup: the attributes of one element holding ``group`` (passages of one document, in prompt
        order): the short citation id, the source once, the title and the pages when a passage has them,
        the best score only when :attr:`show_scores` asks; under a tight budget the citation id alone.
        No ``truncated`` flag: the report says which passages were cut."""
        attrs = {"id": citation}
        if self.lean if tight is None else tight:
            return attrs  # the report's citations name the source: at a few hundred tokens text is worth more
        source = group[0].attrs.get("source")
        if source:
            attrs["source"] = source
        title = next((e.attrs["title"] for e in group if "title" in e.attrs), None)
        if title:
            attrs["title"] = title
        pages = [_page_range(e.attrs["page"]) for e in group if "page" in e.attrs]
        if pages:
            first, last = min(p[0] for p in pages), max(p[1] for p in pages)
            attrs["page"] = f"{first}-{last}" if last > first else str(first)
        attrs.update(_extra_attributes(group[0]))  # equal across the group (see _same_labels)
        scored = [e for e in group if e.score is not None and "score" in e.attrs]
        if self.show_scores and scored:
            attrs["score"] = max(scored, key=lambda e: e.score or 0.0).attrs["score"]
        return attrs

    def joins(self, e: _Entry, taken_docs: set[str]) -> bool:
        """Lean markup: whether ``e`` would likely join an element of its document already taken (counted
        as a gap, not a tag, while choosing; the prompt is counted exactly later)."""
        return self.grouped and self.groups_documents and bool(e.doc) and e.doc in taken_docs

    def tag_tokens(self, e: _Entry, joins: bool = False) -> int:
        """The tokens ``e``'s tags (or, joining an element of its document, the gap before it) add."""
        if joins:
            return self.count(PART_GAP)
        return self.count(self.entry_block(e, ""))

    def cut_tag_tokens(self, e: _Entry, joins: bool = False) -> int:
        """The tokens of ``e``'s tags once it is cut (with the truncated flag, unless lean)."""
        if self.grouped or self.lean:
            return self.tag_tokens(e, joins)
        return self.count(self.renderer.item_block("", {**self.attributes(e), "truncated": "true"}))

    def entry_block(self, e: _Entry, body: str) -> str:
        attrs = self.attributes(e)
        if self.section.messages is not None:
            return self.renderer.message_block(e.role or "user", body, attrs)
        return self.renderer.item_block(body, attrs)

    def entry_estimate(self, e: _Entry, body: str | None = None, joins: bool = False) -> int:
        """Tags counted with their attributes (or the gap, joining an element), plus the body's count."""
        body_tokens = self.body_tokens(e) if body is None else self.count(body)
        return self.tag_tokens(e, joins) + body_tokens

    def frame(self) -> tuple[str, str]:
        s = self.section
        if self.bare:
            return "", ""
        return self.renderer.open(self.tag, s.name, s.attributes), self.renderer.close(self.tag)

    def frame_tokens(self) -> int:
        head, tail = self.frame()
        return self.count(head) + (self.count(tail) if tail else 0)

    def full_estimate(self) -> int:
        if self.body is not None:
            return self.count(self.text_block(self.body))
        live = [e for e in self.entries if e.status == ItemStatus.PENDING]
        return self.frame_tokens() + sum(self.entry_estimate(e) for e in live) if live else 0

    # ---------------------------------------------------------------- fill
    def fill_all(self) -> int:
        """Pinned: everything goes in."""
        if self.body is not None:
            self._text_blocks(self.body)
            self.status = SectionStatus.INCLUDED
        else:
            for e in self.entries:
                if e.status == ItemStatus.PENDING:
                    e.status = ItemStatus.INCLUDED
            self._entry_blocks()
        return sum(b.tokens for b in self.blocks)

    def release(self, keep_text: bool) -> None:
        """Drop what only choosing needed, once the blocks are final: the duplicate index, each
        candidate's rendered body and (unless the report keeps texts) its possibly merged text.

        Why: the prompt is joined next, and for a 1M-token prompt these hold about as much
        memory as the prompt's UTF-8 size three times over; released, the peak holds the chosen
        blocks and the prompt, not every candidate's text as well."""
        self.dedup = None
        self.orderer = None  # it holds the (merged) candidates
        self._group_counts = {}
        for b in self.blocks:
            b.body = None
        for e in self.entries:
            e.counted = None
            if not keep_text:
                e._body = None
                e.raw = ""

    def fill(self, cap: int, dedup: Deduplicator | None = None) -> int:
        """Spend at most about ``cap`` tokens; returns the estimate spent."""
        if self.body is not None:
            return self._fill_text(self.body, cap)
        if self.section.messages is not None and self.summarizer is not None:
            return self._fill_history(cap)
        frame = self.frame_tokens()
        room = cap - frame
        entries = self.entries if self.section.messages is None else list(reversed(self.entries))  # newest first
        full = False
        taken_docs = {e.doc for e in self.entries if e.status in TAKEN} if self.grouped else set()
        for e in entries:
            if e.status != ItemStatus.PENDING:
                continue
            if full:
                e.status, e.reason = ItemStatus.DROPPED, "budget"
                continue
            if dedup is not None:
                dup = dedup.check(e.id, e.body)
                if dup:
                    e.status, e.reason, e.detail = ItemStatus.DROPPED, dup[0], f"repeats {dup[1]}"
                    continue
            joins = self.joins(e, taken_docs)
            need = self.entry_estimate(e, joins=joins)
            if need <= room:
                share = self.share_with_next(e, room, need, joins, taken_docs) if self.lean else None
                if share is not None and self.shorten(e, share):
                    room -= self.entry_estimate(e, e.shown, joins)
                    taken_docs.add(e.doc)
                    continue
                e.status = ItemStatus.INCLUDED
                room -= need
                taken_docs.add(e.doc)
                continue
            full = True  # the first item that does not fit is cut; the rest wait for settling's room
            first = not any(x.status in TAKEN for x in self.entries)
            if self.section.messages is None and self.shorten(e, room - self.cut_tag_tokens(e, joins) - 1, first):
                room -= self.entry_estimate(e, e.shown, joins)
                continue
            e.status, e.reason = ItemStatus.DROPPED, "budget"
            if self.section.messages is not None:
                e.detail = "older turn: no room (summarise history to keep it)"
        if not any(e.status in TAKEN for e in self.entries):
            self.status = SectionStatus.DROPPED if self.entries else SectionStatus.INCLUDED
            self.reason = "budget" if self.entries else "empty"
            return 0
        self._entry_blocks()
        return sum(b.tokens for b in self.blocks)

    def share_with_next(self, e: _Entry, room: int, need: int, joins: bool, taken_docs: set[str]) -> int | None:
        """Under a tight budget, the body room the best passage ``e`` (it fits whole) keeps when it should make
        room for the next passage's best sentence; None to take it whole.

        Why: at 150 tokens the best chunk whole took the room, and the next chunk's sentence that answers
        (its words the question's) got a few words or none: in SQuAD dev, of the questions whose answer the
        prompt missed though the second chunk held it, that chunk's best sentence held it for 23 of 28. The
        best passage is pruned to its sentences that bear most on the question only where the next one's
        best sentence scores :data:`SHARE_MARGIN` times more than any sentence the pruning leaves out, so a
        passage that answers keeps its text."""
        if self.section.messages is not None or self.query is None or any(x.status in TAKEN for x in self.entries):
            return None
        nxt = next((x for x in self.entries if x.status == ItemStatus.PENDING and x is not e), None)
        if nxt is None or (nxt.doc == e.doc and e.span and nxt.span and nxt.span[0] < e.span[1]
                           and e.span[0] < nxt.span[1]):
            return None  # an overlapping chunk of the same document reads on from it
        spans = split_sentences(nxt.body)
        scores = sentence_scores(nxt.body, spans, self.query)
        best = max(range(len(spans)), key=lambda i: (scores[i], -i), default=None)
        if best is None or scores[best] <= 0:
            return None
        a, b = spans[best]
        cost = self.count(nxt.body[a:b]) + self.cut_tag_tokens(nxt, self.joins(nxt, taken_docs | {e.doc})) + 2
        if need + cost <= room:
            return None
        share = room - cost - self.cut_tag_tokens(e, joins) - 1
        given_up = best_left_out(e.body, self.query, share, self.tokenizer)
        if given_up is None or given_up * SHARE_MARGIN >= scores[best]:
            return None
        return share

    def shorten(self, e: _Entry, max_tokens: int, last_resort: bool = True) -> bool:
        """Evidence ``e`` in a form whose body fits ``max_tokens`` (see :meth:`form`), marked truncated;
        False when no form fits."""
        form = self.form(e, max_tokens, last_resort)
        if form is None:
            return False
        shown, detail = form
        if shown == e.body:
            e.status, e.shown, e.reason, e.detail = ItemStatus.INCLUDED, None, None, None
        else:
            e.status, e.shown, e.reason, e.detail = ItemStatus.TRUNCATED, shown, "budget", detail
        return True

    def form(self, e: _Entry, max_tokens: int, last_resort: bool = True) -> tuple[str, str | None] | None:
        """``(body, detail)``: evidence ``e`` within ``max_tokens`` body tokens, or None when nothing fits.

        The whole body when it fits. A merged passage is cut from its best part's own text, so the id
        on its tag names the text shown: that part and what follows it, cut at a sentence end, when the
        part fits whole; else the part alone, cut as any passage is (:func:`._cut_forms.cut_passage`).
        ``last_resort``: a piece of a sentence when no whole one fits (for the section's first item only:
        a prompt must not go out without evidence, but a fragment of a lesser passage is noise)."""
        if self.body_tokens(e) <= max_tokens and self.count(e.body) <= max_tokens:
            return e.body, None
        for _ in range(3):  # a cut re-encoded can merge differently at its ends: ask again for less
            form = self._cut_form(e, max_tokens, last_resort)
            over = self.count(form[0]) - max_tokens if form is not None else 0
            if over <= 0:
                return form
            max_tokens -= over
        return None

    def _cut_form(self, e: _Entry, max_tokens: int, last_resort: bool) -> tuple[str, str | None] | None:
        body = e.body
        if e.focus is not None:
            start, end = e.focus
            shown = self.truncate(e.escape(e.raw[start:]), max_tokens)
            own = e.raw[start:end].rstrip()
            shown_chars = len(plain_text(shown) if self.renderer.format == "xml" else shown) if shown else 0
            if shown is not None and shown_chars >= len(own):
                tail = e.raw[start:].rstrip()
                if start and self.grouped and shown_chars >= len(tail):  # all that follows fits: the room left
                    # goes to the text before it (lean markup: its citation names every chunk shown)
                    lead = self._lead_in(e, max_tokens)
                    if lead is not None:
                        return lead, f"cut to {e.id}'s own text, what follows it and the sentences just before it"
                return shown, f"cut to {e.id}'s own text and what follows it" if start else None
            body = e.escape(own)
        else:
            lo, hi = self._unshown(e)
            if (lo, hi) != (0, len(e.raw)) and e.raw[lo:hi].strip():
                cut = cut_passage(e.escape(e.raw[lo:hi].strip()), self.query, max_tokens, self.tokenizer,
                                  fill_rest=self.lean, last_resort=last_resort)
                return None if cut is None else (cut[0], f"{cut[1] or 'cut to fit'}; the text a passage shown "
                                                  "beside it repeats left out")
        return cut_passage(body, self.query, max_tokens, self.tokenizer, fill_rest=self.lean, last_resort=last_resort)

    def _unshown(self, e: _Entry) -> tuple[int, int]:
        """The slice of ``e``'s text that the passages of its document taken whole do not already show (lean
        markup under a tight budget chooses overlapping chunks one by one): their overlap cut off its ends,
        checked on the texts. Why: the overlap holds the question's words as often as the chunk beside it
        does, and a cut that picked it showed the same words twice in place of new ones."""
        lo, hi = 0, len(e.raw)
        if e.span is None or not self.grouped:
            return lo, hi
        for x in self.entries:
            if x is e or x.status != ItemStatus.INCLUDED or x.doc != e.doc or x.span is None:
                continue
            if x.span[1] < e.span[1]:  # x ends first: it may show e's start
                lo = max(lo, _overlap(x, e) or 0)
            else:  # it may show e's end
                hi = min(hi, len(e.raw) - (_overlap(e, x) or 0))
        return lo, max(lo, hi)

    def _lead_in(self, e: _Entry, max_tokens: int) -> str | None:
        """Merged passage ``e`` from the earliest sentence start before its best part whose text to the end
        fits ``max_tokens`` (None when not even the sentence just before fits).

        Why: the parts merged with the best one are the retriever's next best hits more often than not
        (a document's two chunks at ranks 1 and 2); when the best part and all that follows fit, the room
        left is theirs before any other passage's, and the text adjoining the best part reads on."""
        assert e.focus is not None
        starts = [a for a, _ in split_sentences(e.raw[: e.focus[0]])]
        lead, low, high = None, 0, len(starts)  # the earlier the start, the more tokens: search for the first that fits
        while low < high:
            mid = (low + high) // 2
            shown = e.escape(e.raw[starts[mid]:].rstrip())
            if self.count(shown) <= max_tokens:
                lead, high = shown, mid
            else:
                low = mid + 1
        return lead

    def report_unshown_parts(self) -> None:
        """Parts merged into a passage that was cut, whose own text the cut does not show, are reported
        as left out for room rather than merged: the report names exactly the text in the prompt."""
        cut = {e.id: e for e in self.entries if e.status == ItemStatus.TRUNCATED and e.parts and e.shown}
        for e in self.entries if cut else ():
            into = cut.get((e.detail or "").removeprefix("merged into ")) if e.status == ItemStatus.MERGED else None
            if into is not None and e.id not in self._shown_parts(into):
                e.status, e.reason = ItemStatus.DROPPED, "budget"
                e.detail = f"merged with {into.id}, which was cut to fit: none of its own text is shown"

    def _shown_parts(self, e: _Entry) -> set[str]:
        """The ids of the parts of merged passage ``e`` whose own text (outside its best part) is shown."""
        shown = e.shown or e.body
        plain = plain_text(shown) if self.renderer.format == "xml" else shown
        spans = []
        for piece in plain.split(GAP):
            piece = piece.strip().removeprefix(ELLIPSIS).removesuffix(ELLIPSIS).strip()
            at = e.raw.find(piece) if piece else -1
            spans += [(at, at + len(piece))] if at >= 0 else []
        start, end = e.focus or (0, 0)
        own = {ident: [(a, min(b, start)), (max(a, end), b)] for ident, a, b in e.parts}
        return {ident for ident, segments in own.items() if ident == e.id or any(
            x < b and a < y for a, b in segments if a < b for x, y in spans)}

    def _fill_history(self, cap: int) -> int:
        """Newest turns verbatim; the turns that do not fit become one summary entry."""
        live = [e for e in self.entries if e.status == ItemStatus.PENDING]
        room = cap - self.frame_tokens()
        if sum(self.entry_estimate(e) for e in live) <= room:
            for e in live:
                e.status = ItemStatus.INCLUDED
            self._entry_blocks()
            return sum(b.tokens for b in self.blocks)
        cfg = getattr(self.summarizer, "config", None)
        reserve = min(getattr(cfg, "summary_max_tokens", DEFAULT_SUMMARY_MAX_TOKENS), room // 2)
        older, left = self._take_newest(live, room - reserve)
        marker = _Entry(id=f"{self.section.name}-summary", raw="", escape=self.renderer.body,
                        attrs={"turns": str(len(older))}, body_tokens=0, role=SUMMARY_ROLE)
        summary = self._summary(older, reserve + left - self.entry_estimate(marker) - 2)
        for e in older:
            e.status, e.reason = (ItemStatus.SUMMARIZED, None) if summary else (ItemStatus.DROPPED, "budget")
            e.detail = f"in {marker.id}" if summary else "older turn: no room for a summary"
        if summary:
            marker.raw, marker.body_tokens, marker.status = summary, None, ItemStatus.INCLUDED
            self.entries.insert(0, marker)
        if not any(e.status in TAKEN for e in self.entries):
            self.status, self.reason, self.blocks = SectionStatus.DROPPED, "budget", []
            return 0
        self._entry_blocks()
        return sum(b.tokens for b in self.blocks)

    def _take_newest(self, live: list[_Entry], left: int) -> tuple[list[_Entry], int]:
        """Include the newest turns while they fit in ``left``: (the older turns, oldest first; tokens left).

        Whole turns in order only: once one turn does not fit, every older one goes to the summary."""
        older: list[_Entry] = []
        for e in reversed(live):
            need = self.entry_estimate(e)
            if not older and need <= left:
                e.status, left = ItemStatus.INCLUDED, left - need
            else:
                older.append(e)
        older.reverse()
        return older, left

    def _summary(self, older: list[_Entry], budget: int) -> str | None:
        """The summarizer's summary of ``older`` that fits ``budget`` tokens once escaped (its report
        kept in :attr:`compression`); None when there is no room for one or it came back empty."""
        from contextkit.core.records import Message

        messages = [Message(e.role or "user", e.raw, id=e.id) for e in older]
        result = None
        for _ in range(3):  # escaping can add tokens: ask again for a shorter summary if it must
            if budget <= 16:
                break
            result = self.summarizer.compress(messages, self.query, keep_last=0, max_tokens=budget)
            over = self.count(self.renderer.body(result.summary or "")) - budget
            if over <= 0:
                break
            budget -= over + 4
            result = None
        if result is None:
            return None
        self.compression.append(result.report)
        return result.summary or None

    def cut_text(self, body: str, max_tokens: int) -> str | None:
        """A text section over its room: tool output keeps its head and tail and the lines between that bear
        on the question (:func:`~contextkit.assembly._tool_cut.task_cut`), each cut marked; other text is cut
        at a sentence end."""
        if self.section.role == Role.TOOL_RESULT:
            return cut_inside(body, max_tokens, lambda t, n: task_cut(t, n, self.tokenizer, self.query), self.count)
        return self.truncate(body, max_tokens)

    def truncate(self, body: str, max_tokens: int) -> str | None:
        """A rendered body cut at a sentence end within ``max_tokens`` (inside its CDATA section, if any)."""
        return cut_inside(body, max_tokens, lambda t, n: truncate_at_sentence(t, n, self.tokenizer), self.count)

    def _fill_text(self, body: str, cap: int) -> int:
        overhead = self.frame_tokens() + 2
        full = self.count(body)
        if full + overhead <= cap:
            self._text_blocks(body)
            self.status = SectionStatus.INCLUDED
        else:
            shown = self.cut_text(body, cap - overhead)
            if not shown:
                self.status, self.reason, self.blocks = SectionStatus.DROPPED, "budget", []
                return 0
            self.shown, self.status, self.reason = shown, SectionStatus.TRUNCATED, "budget"
            self._text_blocks(shown)
        return sum(b.tokens for b in self.blocks)

    # -------------------------------------------------------------- blocks
    def text_block(self, body: str) -> str:
        """A text section's whole block: ``body`` in its tags, or alone when :attr:`bare`."""
        s = self.section
        label = QUESTION_LABEL if s.role == Role.QUESTION else ""
        bare = self.renderer.bare_text(body, label) if self.bare else None
        if bare is None:
            self.bare = False  # a cut that would read as markup keeps its tags (and the report says so)
            return self.renderer.text_block(self.tag, s.name, body, s.attributes, self.prose)
        return bare

    def _text_blocks(self, body: str) -> None:
        text = self.text_block(body)
        self.blocks = [Block(text, self.count(text), exact=True)]

    def _entry_blocks(self) -> None:
        """Blocks in prompt order (the assembler orders evidence before this)."""
        head, tail = self.frame()
        blocks = [Block(head, self.count(head), exact=True)]
        taken = [i for i, e in enumerate(self.entries) if e.status in TAKEN]
        ordered = self.orderer(taken) if self.orderer else taken
        if self.grouped:
            blocks += self._group_blocks(ordered)
            ordered = []
        for i in ordered:
            e = self.entries[i]
            body = e.current
            if e.counted is not None and e.counted[2] is body:  # unchanged since it was rendered and counted
                blocks.append(Block(e.counted[0], e.counted[1], exact=True, item=i))
            else:
                blocks.append(Block(self.entry_block(e, body), self.entry_estimate(e, body if e.shown else None),
                                    item=i, body=body))
        if tail:
            blocks.append(Block(tail, self.count(tail), exact=True))
        self.blocks = blocks


    def _group_blocks(self, ordered: list[int]) -> list[Block]:
        """Lean markup: one block per run of one document's passages in prompt order, each with its short
        citation id ("1", "2"... in order of appearance), the passages' bodies joined by :data:`PART_GAP`.

        A run breaks where the document changes or two passages carry different titles. The count of a
        block already counted with the same text is reused; the others are counted by settling."""
        self._group_counts = {b.items: (b.text, b.tokens) for b in self.blocks if b.items and b.exact}
        groups: list[list[int]] = []
        for i in ordered:
            e = self.entries[i]
            last = self.entries[groups[-1][-1]] if groups else None
            if last is not None and e.doc and e.doc == last.doc and _same_title(self.entries, groups[-1], e):
                groups[-1].append(i)
            else:
                groups.append([i])
        blocks = []
        for n, group in enumerate(groups, start=1):
            citation = f"{self.citation_prefix}{n}"
            members = [self.entries[i] for i in group]
            for e in members:
                e.citation = citation
            text = self.renderer.item_block(_joined(members), self.group_attributes(members, citation))
            key = tuple(group)
            known = self._group_counts.get(key)
            if known is not None and known[0] == text:
                blocks.append(Block(text, known[1], exact=True, item=group[0], items=key))
            else:
                estimate = self.tag_tokens(members[0]) + sum(
                    self.body_tokens(e) if e.shown is None else self.count(e.shown) for e in members)
                estimate += (len(members) - 1) * self.count(PART_GAP)
                blocks.append(Block(text, estimate, item=group[0], items=key))
        return blocks

    def measure(self) -> None:
        """The report's exact figures, once the blocks are final and before :meth:`release`: the tokens of
        markup (the section's tokens less those of the text it carries, each text counted on its own as it
        reads, unescaped) and, in a lean element of several passages, each passage's tokens (its text's; the
        first passage's also holds the tags and gaps, so the element's tokens add up)."""
        texts: list[str] = []
        owners: list[int | None] = []
        if self.body is not None:
            if self.blocks:
                texts.append(self._text_of(self.shown if self.shown is not None else self.body))
                owners.append(None)
        else:
            for b in self.blocks:
                for i in b.items or ((b.item,) if b.item is not None else ()):
                    texts.append(self._text_of(self.entries[i].displayed))
                    owners.append(i)
        counts = self.tokenizer.count_many(texts) if texts else []
        self.markup_tokens = max(0, sum(b.tokens for b in self.blocks) - sum(counts))
        own = {i: n for i, n in zip(owners, counts) if i is not None}
        self.item_tokens = {}
        for b in self.blocks:
            if b.item is None:
                continue
            rest = {i: own[i] for i in b.items[1:]}
            self.item_tokens.update(rest)
            self.item_tokens[b.item] = max(0, b.tokens - sum(rest.values()))

    def _text_of(self, body: str) -> str:
        """A rendered body's text as a reader reads it (XML unescaped, out of its CDATA section)."""
        return plain_text(body) if self.renderer.format == "xml" else body


def _joined(members: list[_Entry]) -> str:
    """The bodies of one lean element's passages, :data:`PART_GAP` between them; but where a passage shown
    whole overlaps or adjoins the one shown whole before it in its document (chunks chosen one by one
    under a tight budget, see ``budget._lean``), it reads on from where that one ends: the text it repeats
    is left out, no gap. The overlap is checked on the texts, not trusted from the offsets."""
    out: list[str] = []
    for n, e in enumerate(members):
        e.repeated = _repeats(members[n - 1], e) if n else None
        if n and e.repeated is None:
            out.append(PART_GAP)
        out.append(e.displayed)
    return "".join(out)


def _repeats(before: _Entry, e: _Entry) -> int | None:
    """How many characters of ``e``'s start ``before`` (the passage just before it in one element) shows as
    its end (0: they adjoin), when both are shown whole and ``e`` reads on past it; None otherwise."""
    if before.status != ItemStatus.INCLUDED or e.status != ItemStatus.INCLUDED or before.span is None \
            or e.span is None or e.span[1] <= before.span[1]:
        return None
    return _overlap(before, e)


def _overlap(first: _Entry, second: _Entry) -> int | None:
    """How many characters of ``second``'s start are ``first``'s end (0: ``second`` starts where ``first``
    ends), by their spans in their document (``first`` starting no later and ending no later), checked on
    the texts; None where they neither overlap nor adjoin, the spans are not their texts' or the texts
    disagree (offsets come from the caller, untrusted)."""
    if first.span is None or second.span is None:
        return None
    (a, b), (c, d) = first.span, second.span
    if b - a != len(first.raw) or d - c != len(second.raw) or not a <= c <= b <= d:
        return None
    return b - c if first.raw.endswith(second.raw[: b - c]) else None


def _page_range(value: str) -> tuple[int, int]:
    """``"3"`` or ``"2-3"`` (a tag's ``page``) as ``(first, last)``."""
    first, _, last = value.partition("-")
    return int(first), int(last or first)


def _same_title(entries: list[_Entry], group: list[int], e: _Entry) -> bool:
    """Whether ``e`` may join ``group``: no two different titles in one element (a passage without a title
    opens with it, or has none), and the same extra attributes (a node's ``page_label``, ``section``)."""
    title = e.attrs.get("title")
    if _extra_attributes(e) != _extra_attributes(entries[group[0]]):
        return False
    return title is None or all(entries[i].attrs.get("title") in (None, title) for i in group)




def _extra_attributes(e: _Entry) -> dict[str, str]:
    return {k: v for k, v in e.attrs.items() if k not in OWN_ATTRIBUTES}

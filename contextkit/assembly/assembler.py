"""``assemble``: sections in, one prompt under an exact token budget out.

The order of work:

1. Pinned sections go in whole; if they alone exceed the budget, a
   :class:`BudgetError` says by how much.
2. Sections with a ``min_share`` get that much set aside; then sections take
   what they need in priority order, each up to its ``max_share``. Evidence is
   taken best first after overlapping passages are merged and duplicates
   dropped; the first item that does not fit is cut at a sentence end; history
   is taken newest first, whole turns only.
3. Every block is counted exactly. Blocks meet at newline-then-tag boundaries,
   where GPT tokenizers provably restart, so their counts add up to the count
   of the whole prompt; a tokenizer without that guarantee gets a full recount
   instead. If the total is over the budget (estimates are only estimates) the
   lowest-priority section gives tokens back; if under 99% with material left,
   its cut item grows. The budget is never exceeded.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

from contextkit.assembly._fill import SectionFill, _Entry, truncate_at_sentence
from contextkit.assembly.passages import Deduplicator, EvidenceOrder, merge_overlapping, order_items
from contextkit.assembly.profiles import ModelProfile, get_profile
from contextkit.assembly.render import Renderer
from contextkit.assembly.report import AssemblyReport, ItemReport, SectionReport
from contextkit.assembly.sections import EvidenceItem, Section, SectionError
from contextkit.tokenizers import Tokenizer, get_tokenizer
from contextkit.errors import BudgetError

__all__ = ["AssemblyResult", "BudgetError", "assemble", "resolve_budget"]

FILL_TARGET = 0.99


class AssemblyResult(NamedTuple):
    prompt: str
    report: AssemblyReport

    def __str__(self) -> str:
        return self.prompt


def resolve_budget(budget: int | str | ModelProfile, tokenizer: str | Tokenizer | None = None
                   ) -> tuple[int, ModelProfile | None, Tokenizer]:
    """A token count or a model profile (name or object) -> (tokens, profile, tokenizer)."""
    profile = None
    if isinstance(budget, bool) or budget is None:
        raise BudgetError(f"a budget is a token count or a model profile, not {budget!r}")
    if isinstance(budget, int):
        limit = budget
    else:
        profile = get_profile(budget)
        limit = profile.prompt_budget
    if limit <= 0:
        raise BudgetError(f"the budget must be a positive number of tokens, not {limit}")
    name = tokenizer if tokenizer is not None else profile.tokenizer if profile else "cl100k_base"
    return limit, profile, get_tokenizer(name)


def assemble(
    sections: Sequence[Section],
    budget: int | str | ModelProfile,
    *,
    format: Literal["xml", "markdown"] = "xml",
    tokenizer: str | Tokenizer | None = None,
    evidence_order: EvidenceOrder = "lost_in_the_middle",
    restate_instructions: bool = True,
    restate_tag: str = "reminder",
    merge_passages: bool = True,
    near_duplicate_threshold: float | None = 0.8,
    min_score: float | None = None,
    history_summarizer: Any = None,
    redactor: Any = None,
    item_tag: str = "document",
    message_tag: str = "message",
    keep_text: bool = False,
    verify: bool = False,
    audit_log: str | Path | None = None,
    audit_text: bool = False,
) -> AssemblyResult:
    """Build one prompt from ``sections`` that fits ``budget`` tokens.

    ``history_summarizer`` (e.g. :class:`~contextkit.compressors.HistorySummarizer`)
    condenses the turns of a history section that do not fit into one summary
    entry; without it those turns are dropped and reported. ``redactor`` (e.g.
    :class:`~contextkit.compressors.redact.PIIRedactor`) masks personal data in the
    evidence, the history and the question first. ``verify=True`` also recounts the final prompt in one piece and checks it
    against the block sum (a second full pass; the tests do this).
    """
    started = time.perf_counter()
    limit, profile, tok = resolve_budget(budget, tokenizer)
    if format not in ("xml", "markdown"):
        raise SectionError(f"format must be 'xml' or 'markdown', not {format!r}")
    renderer = Renderer(format, item_tag=item_tag, message_tag=message_tag)
    sections = list(sections)
    names = [s.name for s in sections]
    if len(set(names)) != len(names):
        raise SectionError(f"section names must be unique: {sorted({n for n in names if names.count(n) > 1})}")
    order = sorted(range(len(sections)), key=lambda i: (sections[i].layout_rank, i))
    if redactor is not None:
        sections = [_redacted(s, redactor) for s in sections]
    fills = [_prepare(sections[i], renderer, tok, min_score, merge_passages, evidence_order) for i in order]
    keys = [f for f in fills if f.section.role == "key_instructions" and f.body]
    if restate_instructions and keys:
        fills.append(_prepare(Section(name="reminder", role="reminder", pinned=True, tag=restate_tag,
                                      content="\n\n".join(f.section.content for f in keys)),
                              renderer, tok, None, False, evidence_order))
    notes = [f"section {f.section.name!r} is empty" for f in fills if f.body is None and not f.entries]
    question = "\n".join(f.section.content for f in fills if f.section.role == "question" and f.section.content)
    for f in fills:
        if f.section.messages is not None:
            f.summarizer, f.query = history_summarizer, question or None

    pinned = [f for f in fills if f.section.pinned]
    needed = {f.section.name: f.fill_all() for f in pinned}
    if sum(needed.values()) > limit:
        detail = ", ".join(f"{n} {t:,}" for n, t in needed.items())
        raise BudgetError(f"the pinned sections need {sum(needed.values()):,} tokens ({detail}) but the budget "
                          f"is {limit:,}: over by {sum(needed.values()) - limit:,}")
    flexible = sorted((f for f in fills if not f.section.pinned),
                      key=lambda f: (-f.section.priority, f.section.layout_rank, f.section.name))
    _share_out(flexible, limit, limit - sum(needed.values()),
               Deduplicator(near_duplicate_threshold) if merge_passages else None)

    total = _settle(fills, flexible, limit, tok)
    for f in fills:
        f.release(keep_text)
    prompt = "".join(b.text for f in fills for b in f.blocks)
    if verify:
        recount = tok.count(prompt)
        if recount != total:
            raise AssertionError(f"block sum {total} != recount {recount}: please report this as a bug")
    report = _report(fills, prompt, total, limit, profile, tok, format, keep_text, notes, started)
    if redactor is not None:
        report.compression.append(redactor.report())
    if audit_log is not None:
        report.append_to_log(audit_log, include_text=audit_text)
    return AssemblyResult(prompt, report)


# --------------------------------------------------------------- preparation
def _redacted(section: Section, redactor: Any) -> Section:
    """A copy of ``section`` with PII masked: evidence, history and the question (not instructions)."""
    from dataclasses import replace as copy_with

    if section.items is not None:
        items = []
        for item in section.items:
            masked = redactor.redact(item.text).text
            items.append(item if masked == item.text else copy_with(
                item, text=masked, token_count=None, start=None, end=None, doc_id=None))  # offsets no longer fit
        return copy_with(section, items=items)
    if section.messages is not None:
        from contextkit.records import Message

        return copy_with(section, messages=[Message(m.role, redactor.redact(m.content).text, m.timestamp, m.id)
                                            for m in section.messages])
    if section.role == "question" and section.content:
        return copy_with(section, content=redactor.redact(section.content).text)
    return section


def _prepare(section: Section, renderer: Renderer, tok: Tokenizer, min_score: float | None,
             merge: bool, evidence_order: EvidenceOrder) -> SectionFill:
    fill = SectionFill(section, renderer, tok)
    if section.content is not None:
        fill.body = renderer.body(section.content)
        return fill
    if section.messages is not None:
        for i, m in enumerate(section.messages):
            e = _Entry(id=m.id or f"{section.name}#{i}", raw=m.content, escape=renderer.body, attrs={},
                       body_tokens=None, role=m.role)
            if not m.content.strip():
                e.status, e.reason = "dropped", "empty"
            fill.entries.append(e)
        return fill
    items = list(section.items or [])
    early: list[tuple[EvidenceItem, str, str | None, str | None]] = []
    kept: list[EvidenceItem] = []
    seen_ids: set[str] = set()
    for item in items:
        if item.id in seen_ids:
            early.append((item, "dropped", "duplicate", "the same item given twice"))
            continue
        seen_ids.add(item.id)
        if not item.text.strip():
            early.append((item, "dropped", "empty", None))
        elif min_score is not None and item.score is not None and item.score < min_score:
            early.append((item, "dropped", "below_min_score", f"score below {min_score}"))
        else:
            kept.append(item)
    if merge:
        kept, absorbed = merge_overlapping(kept)
        by_id = {it.id: it for it in items}
        early += [(by_id[a], "merged", None, f"merged into {into}") for a, into in absorbed.items()]
    kept.sort(key=lambda it: (-(it.score if it.score is not None else float("-inf")), it.id))
    for item, status, reason, detail in early:
        fill.entries.append(_Entry(id=item.id, raw="", escape=renderer.body, attrs={}, body_tokens=0,
                                   source=item.source, score=item.score, status=status, reason=reason,
                                   detail=detail))
    counts = {it.id: it.token_count for it in items if it.tokenizer == tok.name and it.token_count is not None}
    originals = {it.id: it for it in items}
    escapes = renderer.format == "xml"
    for item in kept:
        trusted = _estimate(item, escapes, counts, originals if item.metadata.get("merged_ids") else None)
        attrs = {"id": item.id}
        if item.source:
            attrs["source"] = item.source
        if item.score is not None:
            attrs["score"] = f"{item.score:.4f}"
        fill.entries.append(_Entry(id=item.id, raw=item.text, escape=renderer.body, attrs=attrs,
                                   body_tokens=trusted, source=item.source, score=item.score))
    fill.orderer = _orderer(fill, kept, evidence_order)
    return fill


def _estimate(item: EvidenceItem, escapes: bool, counts: dict[str, int | None],
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


def _orderer(fill: SectionFill, kept: list[EvidenceItem], mode: EvidenceOrder):
    offset = len(fill.entries) - len(kept)
    position = {id(item): offset + j for j, item in enumerate(kept)}

    def order(included: list[int]) -> list[int]:
        chosen = [kept[i - offset] for i in included]
        return [position[id(item)] for item in order_items(chosen, mode)]

    return order


# ------------------------------------------------------------------ sharing
def _share_out(flexible: list[SectionFill], limit: int, room: int, dedup: Deduplicator | None) -> None:
    """Minimum shares set aside first, then priority order, each up to its maximum share."""
    reserve = {}
    for f in flexible:
        if f.section.min_share:
            want = min(int(f.section.min_share * limit), f.full_estimate())
            reserve[f.section.name] = max(0, min(want, room - sum(reserve.values())))
    for f in flexible:
        held = sum(v for k, v in reserve.items() if k != f.section.name)
        cap = room - held
        if f.section.max_share is not None:
            cap = min(cap, int(f.section.max_share * limit))
        f.dedup = dedup if f.section.items is not None else None
        used = f.fill(max(cap, 0), f.dedup)
        reserve.pop(f.section.name, None)
        room -= used


# ----------------------------------------------------------------- settling
def _exact(fills: list[SectionFill], tok: Tokenizer, stable: bool) -> int:
    todo = [(f, b) for f in fills for b in f.blocks if not b.exact]
    if todo:
        for (f, block), n in zip(todo, tok.count_many([b.text for _, b in todo])):
            block.tokens, block.exact = n, True
            if block.item is not None and block.body is not None:
                f.entries[block.item].counted = (block.text, n, block.body)
    if stable:
        return sum(b.tokens for f in fills for b in f.blocks)
    return tok.count("".join(b.text for f in fills for b in f.blocks))


def _settle(fills: list[SectionFill], flexible: list[SectionFill], limit: int, tok: Tokenizer) -> int:
    """Exact counts, then give back or take up tokens until the prompt fits and is full."""
    stable = tok.stable_mask("a\n<b") is not None
    lowest_first = flexible[::-1]
    for _ in range(8):
        total = _exact(fills, tok, stable)
        if total > limit:
            if not any(_shrink(f, total - limit) for f in lowest_first):
                raise BudgetError(f"cannot fit the prompt in {limit:,} tokens (at {total:,})")  # pinned-only
            continue
        if total < FILL_TARGET * limit and any(_grow(f, limit - total) for f in lowest_first):
            continue
        return total
    total = _exact(fills, tok, stable)
    while total > limit:  # estimates kept missing: give back whole items until it fits
        if not any(_shrink(f, total - limit, whole=True) for f in lowest_first):
            raise BudgetError(f"cannot fit the prompt in {limit:,} tokens (at {total:,})")
        total = _exact(fills, tok, stable)
    return total


def _shrink(f: SectionFill, excess: int, whole: bool = False) -> bool:
    """Give back at least ``excess`` tokens; False when this section has nothing to give."""
    if f.body is not None:
        if f.status == "dropped" or not f.blocks:
            return False
        current = f.shown if f.shown is not None else f.body
        body_tokens = f.count(current)
        shown = None if whole else truncate_at_sentence(current, body_tokens - excess - 2, f.tokenizer)
        if shown and shown != current:
            f.shown, f.status, f.reason = shown, "truncated", "budget"
            f._text_blocks(shown)
        else:
            f.status, f.reason, f.blocks = "dropped", "budget", []
        return True
    taken = [e for e in f.entries if e.status in ("included", "truncated")]
    if not taken:
        return False
    # Weakest first (oldest turn first for history): drop whole entries while the excess is
    # at least their size, then cut the next at a sentence end. One rebuild, not one per item.
    if f.section.messages is not None:  # oldest verbatim turns first; the summary of older ones last
        weakest_first = [e for e in taken if e.role != "summary"] + [e for e in taken if e.role == "summary"]
    else:
        weakest_first = taken[::-1]
    for e in weakest_first:
        if excess <= 0:
            break
        current = e.shown if e.status == "truncated" else e.body
        size = e.counted[1] if e.counted is not None and e.counted[2] is current else f.entry_estimate(e, current)
        shown = None
        if f.section.messages is None and not whole and size > excess:
            shown = truncate_at_sentence(current, f.count(current) - excess - 2, f.tokenizer)
        if shown and shown != current:
            e.status, e.shown, e.reason = "truncated", shown, "budget"
            excess = 0
        else:
            e.status, e.reason, e.shown = "dropped", "budget", None
            excess -= size
    _rebuild(f)
    return True


def _grow(f: SectionFill, room: int) -> bool:
    """Use ``room`` more tokens on the section's cut item; False when it cannot."""
    if f.body is not None:
        if f.status != "truncated":
            return False
        shown = truncate_at_sentence(f.body, f.count(f.shown) + room - 2, f.tokenizer)
        if not shown or len(shown) <= len(f.shown):
            return False
        f.shown = shown
        if shown == f.body:
            f.shown, f.status, f.reason = None, "included", None
        f._text_blocks(shown)
        return True
    if f.section.messages is not None:
        return False
    cut = next((e for e in f.entries if e.status == "truncated"), None)
    if cut is None:  # the next item left out for room may fit in part
        cut = _next_candidate(f)
        if cut is None:
            return False
        shown = truncate_at_sentence(cut.body, room - f.entry_estimate(cut, "") - 2, f.tokenizer)
    else:
        shown = truncate_at_sentence(cut.body, f.count(cut.shown) + room - 2, f.tokenizer)
        if shown and len(shown) <= len(cut.shown):
            return False
    if not shown:
        return False
    cut.status, cut.shown, cut.reason = ("included", None, None) if shown == cut.body else ("truncated", shown, "budget")
    _rebuild(f)
    return True


def _next_candidate(f: SectionFill) -> _Entry | None:
    """The best item left out for room that repeats nothing already taken."""
    for e in f.entries:
        if e.status == "dropped" and e.reason == "budget" and e.detail is None:
            dup = f.dedup.check(e.id, e.body) if f.dedup is not None else None
            if dup is None:
                return e
            e.reason, e.detail = dup[0], f"repeats {dup[1]}"
    return None


def _rebuild(f: SectionFill) -> None:
    if any(e.status in ("included", "truncated") for e in f.entries):
        f._entry_blocks()
        f.status = "included"
    else:
        f.blocks, f.status, f.reason = [], "dropped", "budget"


# ------------------------------------------------------------------- report
def _item_report(**values: Any) -> ItemReport:
    """``model_construct`` without its per-call field walk: a million-token prompt has
    thousands of items, and these values are ours, already valid."""
    obj = ItemReport.__new__(ItemReport)
    object.__setattr__(obj, "__dict__", values)
    object.__setattr__(obj, "__pydantic_fields_set__", set(values))
    object.__setattr__(obj, "__pydantic_extra__", None)
    object.__setattr__(obj, "__pydantic_private__", None)
    return obj


def _sha256(block_lists: Any) -> str:
    """The prompt's SHA-256, block by block: encoding a 4M-character prompt at once costs
    up to 4 bytes per character of transient memory."""
    h = hashlib.sha256()
    for blocks in block_lists:
        for b in blocks:
            h.update(b.text.encode("utf-8"))
    return h.hexdigest()


def _report(fills: list[SectionFill], prompt: str, total: int, limit: int, profile: ModelProfile | None,
            tok: Tokenizer, fmt: str, keep_text: bool, notes: list[str], started: float) -> AssemblyReport:
    sections, items = [], []
    offset = 0
    for f in fills:
        s = f.section
        start = offset
        offset += sum(len(b.text) for b in f.blocks)
        block_tokens: dict[int, int] = {b.item: b.tokens for b in f.blocks if b.item is not None}
        counts = {"included": 0, "truncated": 0, "dropped": 0, "summarized": 0}
        for i, e in enumerate(f.entries):
            status = e.status if e.status != "pending" else "dropped"
            if status in counts:
                counts[status] += 1
            text = (e.shown if e.status == "truncated" else e.body) if keep_text and status != "dropped" else None
            items.append(_item_report(
                id=e.id, section=s.name, source=e.source, score=e.score, status=status, reason=e.reason,
                detail=e.detail, tokens=block_tokens.get(i, 0), text=text))
        status = f.status if f.status != "pending" else "included"
        if f.entries and counts["truncated"]:
            status = "truncated"
        sections.append(SectionReport(
            name=s.name, role=s.role, tag=s.tag, priority=s.priority, pinned=s.pinned,
            tokens=sum(b.tokens for b in f.blocks), start=start, end=offset, status=status, reason=f.reason,
            items_included=counts["included"], items_truncated=counts["truncated"],
            items_dropped=counts["dropped"] + counts["summarized"]))
    return AssemblyReport(
        budget=limit, model=profile.name if profile else None, tokenizer=tok.name,
        exact_tokenizer=profile.exact_tokenizer if profile else True, format=fmt, tokens=total,
        characters=len(prompt), budget_used_percent=round(100.0 * total / limit, 3),
        estimated_cost_usd=profile.cost(total) if profile else None, seconds=time.perf_counter() - started,
        prompt_sha256=_sha256(f.blocks for f in fills), sections=sections, items=items,
        notes=notes, compression=[r for f in fills for r in f.compression])


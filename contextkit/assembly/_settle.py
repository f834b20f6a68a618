"""Spending the budget: share it out between sections, then settle on exact counts.

Choosing runs on estimates; :func:`settle` counts every block exactly and, while the
prompt is over the budget, asks the lowest-priority section to give tokens back
(:func:`shrink`), or, while it is under :data:`FILL_TARGET` of it with material left,
to take more (:func:`grow`). The budget is never exceeded.
"""

from __future__ import annotations

from contextkit.assembly._fill import SectionFill, _Entry
from contextkit.assembly._states import SUMMARY_ROLE, TAKEN, ItemStatus, Role, SectionStatus
from contextkit.core.errors import BudgetError
from contextkit.core.text import Deduplicator
from contextkit.core.tokenizers import Tokenizer

__all__ = ["FILL_TARGET", "settle", "share_out"]

FILL_TARGET = 0.99
#: :func:`_top_up` asks a cut for up to this many tokens more than the room left (the margins a cut keeps),
#: in at most this many tries.
_TOP_UP_MARGIN, _TOP_UP_TRIES = 4, 8


# ------------------------------------------------------------------ sharing
def share_out(flexible: list[SectionFill], limit: int, room: int, dedup: Deduplicator | None) -> None:
    """Minimum shares set aside first, then priority order, each up to its maximum share."""
    reserve: dict[str, int] = {}
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


def settle(fills: list[SectionFill], flexible: list[SectionFill], limit: int, tok: Tokenizer) -> int:
    """Exact counts, then give back or take up tokens until the prompt fits and is full."""
    stable = tok.stable_mask("a\n<b") is not None
    lowest_first = flexible[::-1]
    for _ in range(8):
        total = _exact(fills, tok, stable)
        lowest_first = _giving_order(flexible, limit)
        if total > limit:
            if not any(shrink(f, total - limit) for f in lowest_first):
                raise BudgetError(f"cannot fit the prompt in {limit:,} tokens (at {total:,})")  # pinned-only
            continue
        if total < FILL_TARGET * limit and any(grow(f, limit - total) for f in lowest_first):
            continue
        return _top_up(fills, lowest_first, limit, tok, stable, total)
    total = _exact(fills, tok, stable)
    while total > limit:  # estimates kept missing: give back whole items until it fits
        if not any(shrink(f, total - limit, whole=True) for f in lowest_first):
            raise BudgetError(f"cannot fit the prompt in {limit:,} tokens (at {total:,})")
        total = _exact(fills, tok, stable)
    return total


def _top_up(fills: list[SectionFill], lowest_first: list[SectionFill], limit: int, tok: Tokenizer, stable: bool,
            total: int) -> int:
    """The last tokens a cut item can take, tried on exact counts: the new total, never over ``limit``.

    Why: a cut is sized with a token or two to spare at each joint (a mark, a merge), and those margins add
    up to several tokens a prompt; under a budget of a hundred or two that is a word or two of the answer
    (bench/bench_small_budget.py). Each try is counted exactly and undone when it does not fit. Under a
    tight budget only (evidence in ``lean`` fills): in a large prompt a few tokens are worth less than the
    recounts, which without a stable tokenizer are of the whole prompt."""
    if total >= limit:
        return total
    for f in lowest_first:
        if f.body is not None or f.section.messages is not None or not f.lean:
            continue
        cut = next((e for e in f.entries if e.status == ItemStatus.TRUNCATED), None)
        if cut is None:  # the first words of the next passage
            cut = _next_candidate(f)
        if cut is None:
            continue
        shown = cut.current if cut.status == ItemStatus.TRUNCATED else ""
        joins = f.grouped and bool(cut.doc) and any(x.doc == cut.doc and x.status in TAKEN for x in f.entries)
        base = f.count(shown) if shown else -f.cut_tag_tokens(cut, joins)  # a new element's tags, or a gap
        for extra in range(limit - total + _TOP_UP_MARGIN, 0, -1)[:_TOP_UP_TRIES]:
            before = (cut.status, cut.shown, cut.reason, cut.detail)
            if base + extra <= 0 or not _grown(f, cut, shown, base + extra, True):
                break
            grown = _exact(fills, tok, stable)
            if grown <= limit:
                return grown
            cut.status, cut.shown, cut.reason, cut.detail = before
            _rebuild(f)
            _exact(fills, tok, stable)
    return total


def _giving_order(flexible: list[SectionFill], limit: int) -> list[SectionFill]:
    """Lowest priority first, but a section within its minimum share gives back last: the share
    was promised (the history's recent turns keep theirs when evidence, ahead of it, overshoots)."""
    lowest = flexible[::-1]
    held = [f for f in lowest if f.section.min_share and sum(b.tokens for b in f.blocks) <= f.section.min_share * limit]
    return [f for f in lowest if f not in held] + held


def shrink(f: SectionFill, excess: int, whole: bool = False) -> bool:
    """Give back at least ``excess`` tokens; False when this section has nothing to give."""
    if f.body is not None:
        return _shrink_text(f, f.body, excess, whole)
    taken = [e for e in f.entries if e.status in TAKEN]
    if not taken:
        return False
    for e in _weakest_first(f, taken):
        if excess <= 0:
            break
        excess = _give_back(f, e, excess, whole)
    _rebuild(f)  # one rebuild, not one per item
    return True


def _shrink_text(f: SectionFill, body: str, excess: int, whole: bool) -> bool:
    """A text section is cut at a sentence end, or dropped when no cut is short enough (or ``whole``)."""
    if f.status == SectionStatus.DROPPED or not f.blocks:
        return False
    current = f.shown if f.shown is not None else body
    body_tokens = f.count(current)
    source = body if f.section.role == Role.TOOL_RESULT else current  # head and tail are cut from the whole
    shown = None if whole else f.cut_text(source, body_tokens - excess - 2)
    if shown and shown != current:
        f.shown, f.status, f.reason = shown, SectionStatus.TRUNCATED, "budget"
        f._text_blocks(shown)
    else:
        f.status, f.reason, f.blocks = SectionStatus.DROPPED, "budget", []
    return True


def _weakest_first(f: SectionFill, taken: list[_Entry]) -> list[_Entry]:
    """Evidence: the lowest-scored first. History: the oldest verbatim turns first, the summary of older ones last."""
    if f.section.messages is not None:
        return [e for e in taken if e.role != SUMMARY_ROLE] + [e for e in taken if e.role == SUMMARY_ROLE]
    return taken[::-1]


def _give_back(f: SectionFill, e: _Entry, excess: int, whole: bool) -> int:
    """Drop ``e`` when the excess is at least its size, else cut it shorter (:meth:`SectionFill.form`);
    the excess left. The section's last evidence item is cut, not dropped, while any form of it fits."""
    current = e.current
    size = e.counted[1] if e.counted is not None and e.counted[2] is current else f.entry_estimate(e, current)
    last = sum(1 for x in f.entries if x.status in TAKEN) == 1
    form = None
    if f.section.messages is None and not whole and (size > excess or last):
        form = f.form(e, f.count(current) - excess - 2, last_resort=last)
    if form is not None and form[0] != current and len(form[0]) < len(current):
        e.status, e.shown, e.reason, e.detail = ItemStatus.TRUNCATED, form[0], "budget", form[1]
        return 0
    e.status, e.reason, e.shown, e.detail = ItemStatus.DROPPED, "budget", None, None
    return excess - size


def grow(f: SectionFill, room: int) -> bool:
    """Use ``room`` more tokens on the section's cut item; False when it cannot."""
    if f.body is not None:
        return _grow_text(f, f.body, room)
    if f.section.messages is not None:
        return False
    cut = next((e for e in f.entries if e.status == ItemStatus.TRUNCATED), None)
    if cut is not None and _grown(f, cut, cut.current, f.count(cut.current) + room - 2, True):
        return True
    # The next item left out for room may fit in part: also when the cut item shows all it can (a merged
    # passage cut to its best chunk's own text), or the room stays unused (XQuAD at 300 tokens: 40 a prompt).
    # Under a tight budget a piece of its best sentence cut at a token boundary is worth the room.
    nxt = _next_candidate(f)
    return nxt is not None and _grown(f, nxt, "", room - f.cut_tag_tokens(nxt) - 2, f.lean)


def _grown(f: SectionFill, cut: _Entry, before: str, max_tokens: int, last_resort: bool) -> bool:
    """Show more of ``cut`` (now showing ``before``) in ``max_tokens``; False when no longer form fits."""
    form = f.form(cut, max_tokens, last_resort)
    if form is None or len(form[0]) <= len(before):
        return False
    cut.status, cut.shown, cut.reason, cut.detail = (
        (ItemStatus.INCLUDED, None, None, None) if form[0] == cut.body
        else (ItemStatus.TRUNCATED, form[0], "budget", form[1]))
    _rebuild(f)
    return True


def _grow_text(f: SectionFill, body: str, room: int) -> bool:
    if f.status != SectionStatus.TRUNCATED or f.shown is None:
        return False
    shown = f.cut_text(body, f.count(f.shown) + room - 2)
    if not shown or len(shown) <= len(f.shown):
        return False
    f.shown = shown
    if shown == body:
        f.shown, f.status, f.reason = None, SectionStatus.INCLUDED, None
    f._text_blocks(shown)
    return True


def _next_candidate(f: SectionFill) -> _Entry | None:
    """The best item left out for room that repeats nothing already taken."""
    for e in f.entries:
        if e.status == ItemStatus.DROPPED and e.reason == "budget" and e.detail is None:
            dup = f.dedup.check(e.id, e.body) if f.dedup is not None else None
            if dup is None or dup[1] == e.id:  # checked (and so remembered) when it was left out for room
                return e
            e.reason, e.detail = dup[0], f"repeats {dup[1]}"
    return None


def _rebuild(f: SectionFill) -> None:
    if any(e.status in TAKEN for e in f.entries):
        f._entry_blocks()
        f.status = SectionStatus.INCLUDED
    else:
        f.blocks, f.status, f.reason = [], SectionStatus.DROPPED, "budget"

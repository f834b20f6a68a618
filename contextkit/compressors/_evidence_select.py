"""Sentence selection under a token budget for :class:`~contextkit.compressors.evidence.EvidenceCompressor`.

The budget is shared by all passages and filled globally: each passage's
``min_sentences`` best sentences first (strongest passages first, so a short budget
drops the weakest), then the rest over all passages, best first, skipping a sentence
that does not fit and trying shorter ones. ``density=True`` ranks the rest by score
per token instead (the greedy answer to "most expected relevant sentences in the
budget": a long sentence must be worth its length). Costs are estimated per sentence
(its tokens + 1 for a separator or space), then :func:`build` counts the joined texts
exactly, trims the weakest optional sentences while over, and fills what is left.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from contextkit.core.records import EvidenceItem
from contextkit.core.tokenizers import Tokenizer

__all__ = ["Passage", "build", "norm", "select"]


@dataclass(slots=True)
class Passage:
    """An input item, its sentence spans, and where its sentences start in the flat list."""

    item: EvidenceItem
    position: int
    spans: list[tuple[int, int]]
    first: int = 0  # index of its first sentence in the flat list
    tokens: int = 0


def _rank(score: float, cost: int, density: bool) -> float:
    """Score, or score per token (a negative score counts as 0 there: length must not make it better)."""
    return max(score, 0.0) / max(cost, 1) if density else score


def select(passages: list[Passage], scores: list[float], tokens: list[int], texts: list[str], budget: int,
           min_sentences: int, keep_first: bool, density: bool
           ) -> tuple[dict[int, set[int]], dict[int, set[int]], int, set[str]]:
    """The sentences to keep (indices in each passage, by ``id(passage)``; a passage
    left out is dropped), those forced by ``min_sentences``/``keep_first``, the number
    of sentences skipped as repeats of a kept one, and the kept sentences (normalised)."""
    chosen: dict[int, set[int]] = {}
    forced_sets: dict[int, set[int]] = {}
    used = 0
    seen: set[str] = set()
    ranked = sorted(passages, key=lambda p: (-max(scores[p.first:p.first + len(p.spans)]), p.position))
    repeats = 0
    for p in ranked:
        local = sorted(range(len(p.spans)), key=lambda i: (-scores[p.first + i], i))
        forced: set[int] = set()
        for i in local:  # its best sentences, skipping any already kept from a stronger passage
            if len(forced) >= min_sentences:
                break
            if norm(texts[p.first + i]) in seen:
                repeats += 1
            else:
                forced.add(i)
        if keep_first:
            forced.add(0)
        cost = sum(tokens[p.first + i] + 1 for i in forced)
        if forced and used + cost > budget:
            continue  # dropped: the budget cannot hold its best sentences
        used += cost
        chosen[id(p)] = set(forced)
        forced_sets[id(p)] = forced
        seen.update(norm(texts[p.first + i]) for i in forced)
    pool = [(_rank(scores[p.first + i], tokens[p.first + i] + 1, density), p.position, i, p) for p in passages
            if id(p) in chosen for i in range(len(p.spans)) if i not in chosen[id(p)]]
    pool.sort(key=lambda x: (-x[0], x[1], x[2]))
    for _, _, i, p in pool:
        cost = tokens[p.first + i] + 1
        if used + cost > budget:
            continue
        key = norm(texts[p.first + i])
        if key in seen:
            repeats += 1
            continue  # the same sentence is already kept (from another passage, or twice in one)
        seen.add(key)
        chosen[id(p)].add(i)
        used += cost
    for p in passages:  # passages that keep nothing (min_sentences=0 and no room) are dropped too
        if id(p) in chosen and not chosen[id(p)]:
            del chosen[id(p)]
    return chosen, forced_sets, repeats, seen


def build(passages: list[Passage], chosen: dict[int, set[int]], forced: dict[int, set[int]], scores: list[float],
          sentence_tokens: list[int], seen: set[str], budget: int, tok: Tokenizer, separator: str, density: bool,
          cut: bool = False, min_sentences: int = 0) -> tuple[list[EvidenceItem], list[int], int]:
    """The output items and their exact counts. Trims (weakest unforced sentence first,
    then the weakest item) while the exact total is over the budget; then fills what
    the estimates left over, with exact counts, and with ``cut`` what whole sentences
    cannot fill with the leading words of the best sentence left out."""
    live = [p for p in passages if id(p) in chosen]
    texts = {id(p): join(p, chosen[id(p)], separator) for p in live}
    counts = dict(zip(texts, tok.count_many(list(texts.values()))))
    out = _Output(live, chosen, texts, counts, sum(counts.values()), tok, separator)
    trimmed = out.trim(forced, scores, budget)
    if out.live and out.total < budget:  # the estimates were generous: fill what is left, with exact counts
        out.fill(scores, sentence_tokens, seen, budget, density)
    if cut and out.total < budget:  # a passage with no whole sentence kept only where min_sentences allows it
        cut_fill(out, passages if min_sentences == 0 else list(out.live), scores, seen, budget)
    live = sorted(out.live, key=lambda q: q.position)
    items = [_item(p, chosen[id(p)], texts[id(p)], counts[id(p)], tok, out.cuts.get(id(p))) for p in live]
    return items, [counts[id(p)] for p in live], trimmed


#: The fewest words worth showing as a cut sentence (fewer say nothing and cost a marker).
MIN_CUT_WORDS = 4
_WORD_END = re.compile(r"\S(?=\s)")


def cut_fill(out: _Output, passages: list[Passage], scores: list[float], seen: set[str], budget: int) -> None:
    """Spend what whole sentences left of ``budget`` on the leading words of the best-scored
    sentence left out (a verbatim prefix cut after a word, then the separator's mark):
    a 4x budget gives 4x, not 4.6x, and a budget too small for any whole sentence still
    shows the start of the best one. At most one cut sentence per call."""
    pool = sorted(((scores[p.first + i], p.position, i, p) for p in passages
                   for i in range(len(p.spans)) if i not in out.chosen.get(id(p), set())),
                  key=lambda x: (-x[0], x[1], x[2]))
    for _, _, i, p in pool:
        a, b = p.spans[i]
        if norm(p.item.text[a:b]) in seen:
            continue
        ends = [a + m.end() for m in _WORD_END.finditer(p.item.text[a:b])][MIN_CUT_WORDS - 1:]
        keep = out.chosen.get(id(p), set())
        old = out.counts.get(id(p), 0)
        best: tuple[str, int, int] | None = None
        lo, hi = 0, len(ends) - 1
        while lo <= hi:  # the longest prefix that fits: counts grow with the prefix
            mid = (lo + hi) // 2
            text = join(p, keep, out.separator, (i, ends[mid]))
            count = out.tok.count(text)
            if out.total - old + count <= budget:
                best, lo = (text, count, ends[mid]), mid + 1
            else:
                hi = mid - 1
        if best is None:
            continue
        if id(p) not in out.chosen:
            out.live.append(p)
            out.chosen[id(p)], out.counts[id(p)] = set(), 0
        out._set(p, keep, best[0], best[1])
        out.cuts[id(p)] = (i, best[2])
        return


@dataclass(slots=True)
class _Output:
    """The kept passages while :func:`build` counts them exactly: texts and counts by ``id(passage)``."""

    live: list[Passage]
    chosen: dict[int, set[int]]
    texts: dict[int, str]
    counts: dict[int, int]
    total: int
    tok: Tokenizer
    separator: str
    cuts: dict[int, tuple[int, int]] = field(default_factory=dict)  # id(passage) -> (sentence, end offset)

    def _set(self, p: Passage, keep: set[int], text: str, count: int) -> None:
        """Keep the sentences ``keep`` of ``p``, joined as ``text`` of ``count`` tokens."""
        self.total += count - self.counts[id(p)]
        self.chosen[id(p)], self.texts[id(p)], self.counts[id(p)] = keep, text, count

    def trim(self, forced: dict[int, set[int]], scores: list[float], budget: int) -> int:
        """Drop the weakest optional sentence, else the weakest passage, while over ``budget``;
        the number of sentences dropped."""
        trimmed = 0
        while self.total > budget and self.live:
            optional = [(scores[p.first + i], p.position, i, p) for p in self.live
                        for i in self.chosen[id(p)] - forced.get(id(p), set())]
            if optional:
                _, _, i, p = min(optional, key=lambda x: (x[0], -x[1], -x[2]))
                keep = self.chosen[id(p)] - {i}
                text = join(p, keep, self.separator)
                self._set(p, keep, text, self.tok.count(text))
                trimmed += 1
                continue
            p = min(self.live, key=lambda q: (max(scores[q.first + i] for i in self.chosen[id(q)]), -q.position))
            self.live.remove(p)
            self.total -= self.counts.pop(id(p))
            del self.chosen[id(p)]
        return trimmed

    def fill(self, scores: list[float], sentence_tokens: list[int], seen: set[str], budget: int,
             density: bool) -> None:
        """Add the best sentences left out while the exact total stays within ``budget``."""
        pool = sorted(((_rank(scores[p.first + i], sentence_tokens[p.first + i] + 1, density), p.position, i, p)
                       for p in self.live for i in range(len(p.spans)) if i not in self.chosen[id(p)]),
                      key=lambda x: (-x[0], x[1], x[2]))
        for _, _, i, p in pool:
            if self.total >= budget:
                break
            if sentence_tokens[p.first + i] > budget - self.total + 4:
                continue  # cannot fit, even where it replaces a separator
            key = norm(p.item.text[p.spans[i][0]:p.spans[i][1]])
            if key in seen:
                continue
            keep = self.chosen[id(p)] | {i}
            trial = join(p, keep, self.separator)
            new = self.tok.count(trial)
            if self.total + new - self.counts[id(p)] <= budget:
                self._set(p, keep, trial, new)
                seen.add(key)


def join(p: Passage, keep: set[int], separator: str, cut: tuple[int, int] | None = None) -> str:
    """The kept sentences: runs of adjacent ones as one slice, runs joined by ``separator``;
    ``cut`` (sentence index, end offset) adds that sentence's prefix, ending its run, marked
    as cut by the separator that follows it, or by ``separator`` stripped at the end."""
    if cut is None and len(keep) == len(p.spans):
        return p.item.text
    cut_at, cut_end = cut if cut is not None else (-1, 0)
    runs = [piece for run in _runs(sorted(keep | ({cut_at} if cut is not None else set())))
            for piece in _split_after(run, cut_at)]
    text = separator.join(p.item.text[p.spans[r[0]][0]:cut_end if r[-1] == cut_at else p.spans[r[-1]][1]]
                          for r in runs)
    return text + (" " + separator.strip() if runs and runs[-1][-1] == cut_at and separator.strip() else "")


def _split_after(run: list[int], index: int) -> list[list[int]]:
    """``run`` split after ``index`` (a cut sentence ends its run: the text after the cut is not shown)."""
    if index in run and run[-1] != index:
        k = run.index(index) + 1
        return [run[:k], run[k:]]
    return [run]


def _item(p: Passage, keep: set[int], text: str, count: int, tok: Tokenizer,
          cut: tuple[int, int] | None = None) -> EvidenceItem:
    item = p.item
    order = sorted(keep)
    meta = {**item.metadata, "compressed_from": p.tokens, "kept_spans": [list(p.spans[i]) for i in order],
            "sentences_kept": len(order), "sentences_total": len(p.spans)}
    start, end = item.start, item.end
    if cut is not None:  # the cut sentence's shown prefix; the text is no plain slice of the document
        meta["cut_span"] = [p.spans[cut[0]][0], cut[1]]
        start = end = None
    elif len(order) < len(p.spans):
        is_slice = item.start is not None and item.end is not None and item.end - item.start == len(item.text)
        slice_start = item.start if is_slice else None  # where the passage's text starts in its document
        if len(_runs(order)) == 1 and slice_start is not None:
            start, end = slice_start + p.spans[order[0]][0], slice_start + p.spans[order[-1]][1]
        else:
            start = end = None
    return replace(item, text=text, start=start, end=end, token_count=count, tokenizer=tok.name, metadata=meta)


def _runs(indices: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def norm(text: str) -> str:
    """Case- and white-space-insensitive key of a sentence (repeats across passages)."""
    return " ".join(text.casefold().split())

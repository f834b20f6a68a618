"""Pruning one evidence passage to the sentences that bear on the question, within a token cap.

Why: when the budget left for evidence is smaller than any passage and no prefix of the
best passage ends at a sentence inside it (chunks often start mid-sentence), cutting
gives nothing and the prompt went out with no evidence at all. Its sentences that share
the most words with the question still fit: they are kept verbatim, in document order,
neighbours joined as they stood and a gap marked `` … `` (as in history summaries), so
what the model reads is a set of exact spans of the passage, never an altered one.

Lexical on purpose: no model call inside ``assemble`` (it is budget arithmetic, and
runs on prompts of a million tokens); the retriever already judged the passage relevant.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any

from contextkit.core.text import split_sentences
from contextkit.core.tokenizers import Tokenizer

__all__ = ["ELLIPSIS", "GAP", "LEAD", "best_left_out", "head_and_tail", "prune_to_fit", "question_words",
           "sentence_scores", "terms"]

GAP = " … "
ELLIPSIS = "…"  # the end of a piece cut at a token boundary
LEAD = ELLIPSIS + " "  # the start of a piece that begins after its sentence's start ("… elections in 1979")
_WORD = re.compile(r"[^\W_]+")
_DECADE = re.compile(r"^(\d+0)s$")
_STOP = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been it its this that these "
    "those what which who how why when where do does did can could would should will not no yes".split())


def terms(text: str) -> set[str]:
    """Lower-cased words of ``text`` without stop words or one-letter words, stemmed (Snowball English,
    the stemmer the BM25 index uses by default: "designed" meets "design", "died" meets "die"); a decade's
    number without its "s" ("1970s" meets "1970's", whose "s" is a word of one letter: the stemmer leaves
    numbers as they are)."""
    return set(_stems(_WORD.findall(text))) - {""}


def _stems(words: list[str]) -> list[str]:
    """Each word's term as :func:`terms` reads it ("" for a stop word or a word of one letter)."""
    lowered = [w.lower() for w in words]
    keep = [len(w) > 1 and w not in _STOP for w in lowered]
    kept = [_DECADE.sub(r"\1", w) for w, k in zip(lowered, keep) if k]
    stems = iter(_stemmer().stemWords(kept) if kept else [])
    return [next(stems) if k else "" for k in keep]


def question_words(text: str, query: str | None) -> list[tuple[int, int, str]]:
    """``(start, end, term)`` for each word of ``text`` that is a word of ``query`` (as :func:`terms` reads
    both), in order; each distinct word stemmed once, all in one call (a text may be a million words)."""
    wanted = terms(query or "")
    if not wanted:
        return []
    matches = list(_WORD.finditer(text))
    distinct = list(dict.fromkeys(m.group() for m in matches))
    term_of = {w: t for w, t in zip(distinct, _stems(distinct)) if t in wanted}
    return [(m.start(), m.end(), term_of[m.group()]) for m in matches if m.group() in term_of]


def sentence_scores(body: str, spans: list[tuple[int, int]], query: str | None) -> list[float]:
    """How much each sentence bears on ``query``: the question's words it holds, each weighted by its
    rarity among the passage's sentences (BM25's idf: a word in every sentence tells them apart little)."""
    wanted = terms(query or "")
    held = [terms(body[a:b]) & wanted for a, b in spans]
    n = len(spans)
    df = {t: sum(t in h for h in held) for t in wanted}
    idf = {t: math.log((n - d + 0.5) / (d + 0.5) + 1.0) for t, d in df.items()}
    return [sum(idf[t] for t in h) for h in held]


@functools.cache
def _stemmer() -> Any:
    import Stemmer

    return Stemmer.Stemmer("english")


def prune_to_fit(body: str, query: str | None, max_tokens: int, tokenizer: Tokenizer,
                 rest: Callable[[str, int], str] | None = None) -> tuple[str, int, int] | None:
    """``(text, sentences kept, sentences in all)``: the passage's sentences that bear most on
    ``query`` (:func:`sentence_scores`; ties: earlier first) while they fit ``max_tokens``; None when not one fits
    or ``max_tokens`` is under 8 (a shorter remnant is not worth its tags).

    ``rest(sentence, tokens)`` (a tight budget): the room the whole sentences leave goes to the best
    sentence left out, as ``rest`` cuts it (a piece up to a token boundary, marked), in its place; and the
    first sentence in rank order that holds a word of the question and does not fit whole takes the room
    left at once, so a sentence that shares nothing with the question never takes it (the sentences kept
    may then be 0: the piece alone)."""
    if max_tokens < 8:
        return None
    spans = split_sentences(body)
    scores = sentence_scores(body, spans, query)
    ranked = _ranked(scores)
    counts = tokenizer.count_many([body[a:b] for a, b in spans]) if spans else []
    chosen: dict[int, str] = {}
    left = max_tokens
    for i in ranked:
        need = counts[i] + 2  # the joint and a token that may merge differently
        if need <= left or (rest is not None and _fits(body, spans, {**chosen, i: body[spans[i][0]:spans[i][1]]},
                                                       max_tokens, tokenizer)):
            chosen[i] = body[spans[i][0]:spans[i][1]]
            left = left - need if rest is None else max_tokens - 1 - tokenizer.count(_join(body, spans, chosen))
        elif rest is not None and scores[i] > 0 and (piece := rest(body[spans[i][0]:spans[i][1]], left - 2)):
            chosen[i] = piece  # a tight budget: the room goes to this sentence's start, not to lesser ones
            return _join(body, spans, chosen), len(chosen) - 1, len(spans)
    if not chosen:
        return None
    kept = len(chosen)
    out = next((i for i in ranked if i not in chosen), None)
    if rest is not None and out is not None and (piece := rest(body[spans[out][0]:spans[out][1]], left - 2)):
        chosen[out] = piece
    return _join(body, spans, chosen), kept, len(spans)


def best_left_out(body: str, query: str | None, max_tokens: int, tokenizer: Tokenizer) -> float | None:
    """The best score (:func:`sentence_scores`; 0.0 when none) among the sentences that pruning ``body`` to whole
    sentences within ``max_tokens`` leaves out, taken as :func:`prune_to_fit` takes them; None when not one fits."""
    spans = split_sentences(body)
    scores = sentence_scores(body, spans, query)
    counts = tokenizer.count_many([body[a:b] for a, b in spans]) if spans else []
    left, best, kept = max_tokens, 0.0, False
    for i in _ranked(scores):
        if counts[i] + 2 <= left:
            left, kept = left - counts[i] - 2, True
        else:
            best = max(best, scores[i])
    return best if kept else None


def _fits(body: str, spans: list[tuple[int, int]], chosen: dict[int, str], max_tokens: int,
          tokenizer: Tokenizer) -> bool:
    """Whether the sentences ``chosen`` joined fit ``max_tokens`` counted exactly, a token to spare where the
    text meets its tags. Why: under a tight budget the margin kept at every joint (most of them sentences
    that adjoin, joined as they stood at no cost) added up to a sentence's room: a passage of 118 tokens
    with 117 to fill was pruned to 107, leaving out the sentence that held the answer (SQuAD)."""
    return tokenizer.count(_join(body, spans, chosen)) <= max_tokens - 1


def _ranked(scores: list[float]) -> list[int]:
    """Sentence numbers, best first; among sentences that score alike, the one nearest the best sentence
    first (the one before it on a tie).

    Why: a question's words name what it asks about, and the answer most often sits beside them: the
    sentence that matches says "His Liber servitoris..." and the one before it names the author. Taking
    the passage's start instead (a tie broken by position) left out the answer beside the best sentence
    for two sentences that shared nothing with the question (bench/bench_small_budget.py)."""
    best = max(range(len(scores)), key=lambda i: (scores[i], -i), default=0)
    return sorted(range(len(scores)), key=lambda i: (-scores[i], abs(i - best), i))


def _join(body: str, spans: list[tuple[int, int]], chosen: dict[int, str]) -> str:
    """The chosen sentences in document order: neighbours joined as they stood, a gap marked
    :data:`GAP`; a piece of a sentence that stops short of its end is followed by a gap, or ``…`` at the
    end; one that starts after its sentence's start opens with its own mark (:data:`LEAD`)."""
    out: list[str] = []
    order = sorted(chosen)
    for n, i in enumerate(order):
        a, b = spans[i]
        out.append(chosen[i])
        whole_end = body[a:b].endswith(chosen[i].removeprefix(LEAD))
        if n + 1 < len(order):
            nxt = order[n + 1]
            if chosen[nxt].startswith(LEAD) and chosen[nxt] != body[spans[nxt][0]:spans[nxt][1]]:
                out.append(" ")  # its lead marks the gap
            else:
                out.append(body[b:spans[nxt][0]] if nxt == i + 1 and whole_end else GAP)
        elif not whole_end:
            out.append(ELLIPSIS)
    return "".join(out)


def head_and_tail(text: str, max_tokens: int, tokenizer: Tokenizer, head_share: float = 0.3) -> str | None:
    """The first and the last lines of ``text`` within about ``max_tokens``, the cut between them marked.

    Why: a tool's output or a build log puts what matters at its ends (the command and its
    first lines; the error and the summary at the bottom), so a long one keeps both and says
    how much was cut, where a document would be cut at a sentence end. ``head_share`` of the
    room goes to the head, the rest to the tail. Only the lines kept are counted, so a
    50,000-line log costs what the kept part costs. None when not a line fits.
    """
    if len(text) <= 8 * max_tokens and tokenizer.count(text) <= max_tokens:  # longer: too long to count
        return text
    lines = text.split("\n")
    marker_room = 24
    room = max_tokens - marker_room
    if room < 8:
        return None
    head, used = _take_lines(lines, int(room * head_share), tokenizer)
    tail, _ = _take_lines(lines[len(head):][::-1], room - used, tokenizer)
    tail.reverse()
    if not head and not tail:
        return None
    cut = lines[len(head):len(lines) - len(tail)]
    if not cut:
        return text
    chars = sum(len(x) + 1 for x in cut)
    mark = f"[… {len(cut):,} lines ({chars:,} characters) cut here: the head and the tail are kept …]"
    return "\n".join([*head, mark, *tail])


def _take_lines(lines: list[str], room: int, tokenizer: Tokenizer) -> tuple[list[str], int]:
    """Lines from the start of ``lines`` while they fit ``room`` tokens (each counted with its newline)."""
    taken: list[str] = []
    used = 0
    for line in lines:
        need = tokenizer.count(line) + 1 if len(line) <= 8 * max(room - used, 1) else room + 1
        if used + need > room:
            break
        taken.append(line)
        used += need
    return taken, used

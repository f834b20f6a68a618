"""One evidence passage cut to a token cap, in the form that keeps most of what bears on the question.

Why: under a small budget the best passage rarely fits whole, and which part of it goes in
decides whether the answer does. Its start (the old cut) holds the answer only by chance; the
sentences that share most words with the question hold it far more often. So a passage that
must be cut keeps, in this order of preference:

1. a cut at a sentence end, when it keeps the sentence that bears most on the question
   (:func:`._prune.sentence_scores`: the question's words it holds, weighted by their rarity in
   the passage); else its sentences that bear most on the question (:func:`._prune.prune_to_fit`:
   verbatim, in document order, gaps marked `` … ``);
   under a tight budget the room whole sentences leave goes to the words that follow them, cut
   at a token boundary and marked ``…``;
2. as a last resort, when not one whole sentence fits, the sentence that bears most on the
   question cut at a token boundary, the cut marked ``…``: a prompt must not go out
   without evidence when some of it fits.

Cuts work on the body as it goes in the prompt (inside its CDATA section, if any; never
inside an entity), so their counts are the prompt's.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from contextkit.assembly._prune import ELLIPSIS, LEAD, prune_to_fit, question_words, sentence_scores
from contextkit.assembly.render import cut_inside, plain_text
from contextkit.core.text import split_sentences, truncate_at_sentence
from contextkit.core.tokenizers import Tokenizer

__all__ = ["MIN_TOKENS", "cut_passage", "token_cut"]

#: The smallest piece of a passage worth its tag: fewer tokens than this and the passage is left out.
MIN_TOKENS = 4


def cut_passage(body: str, query: str | None, max_tokens: int, tokenizer: Tokenizer, fill_rest: bool = False,
                last_resort: bool = True) -> tuple[str, str | None] | None:
    """``(body shown, detail)`` within ``max_tokens`` tokens, or None when not even a piece fits.

    ``fill_rest`` (a tight budget): the room whole sentences leave goes to a piece of the next
    sentence (the one after a cut, else the best one left out), cut at a token boundary and marked; and a
    sentence that bears on the question but does not fit whole takes the room as such a piece before any
    lesser sentence does (:func:`._prune.prune_to_fit`)."""
    details: list[str] = []

    def best(text: str, n: int) -> str | None:
        cut = truncate_at_sentence(text, n, tokenizer)
        top = _top_sentence(text, query)
        if cut is not None and (top is None or len(cut) >= len(text[: top[1]].rstrip())):
            return _with_rest(text, cut, n, tokenizer) if fill_rest else cut  # the best sentence is in the cut
        pruned = prune_to_fit(text, query, n, tokenizer, rest=_piece_of(tokenizer, query) if fill_rest else None)
        if pruned is None:
            return cut
        if not pruned[1]:
            details.append(_piece_detail(pruned[0]))
        elif pruned[1] < pruned[2]:
            details.append(f"pruned to {pruned[1]} of {pruned[2]} sentences to fit")
        return pruned[0]

    shown = cut_inside(body, max_tokens, best, tokenizer.count)
    if shown:
        return shown, details[-1] if details else None
    if not last_resort:
        return None
    shown = cut_inside(body, max_tokens, lambda t, n: token_cut(t, query, n, tokenizer), tokenizer.count)
    return (shown, _piece_detail(plain_text(shown))) if shown else None


def _piece_detail(shown: str) -> str:
    """The report's word for a piece of one sentence: its start, or the window over the question's words
    (the reader of the report learns the text starts mid-sentence)."""
    if shown.startswith(LEAD):
        return "one sentence cut to its words around the question's, at token boundaries, to fit"
    return "one sentence cut at a token boundary to fit"


def _piece_of(tokenizer: Tokenizer, query: str | None) -> Callable[[str, int], str]:
    """A piece of a sentence within a cap, the one :func:`token_window` picks ("" when under
    :data:`MIN_TOKENS`); the mark at its end is :func:`._prune._join`'s."""
    def piece(sentence: str, max_tokens: int) -> str:
        if max_tokens - 1 < MIN_TOKENS:
            return ""
        text = token_window(sentence, query, max_tokens - 1, tokenizer)
        return text if text.strip() else ""
    return piece


def _with_rest(text: str, cut: str, max_tokens: int, tokenizer: Tokenizer) -> str:
    """``cut`` (a prefix of ``text``) and, in the room it leaves, the text after it up to a token boundary,
    marked ``…``: under a tight budget the words that follow are worth more than unused room."""
    left = max_tokens - tokenizer.count(cut) - 2  # the mark, and a token that may merge differently
    if left < MIN_TOKENS or len(cut) >= len(text.rstrip()):
        return cut
    after = text[len(cut):]
    piece = _token_prefix(after, left, tokenizer)
    return cut + piece + ("" if piece == after.rstrip() else ELLIPSIS) if piece.strip() else cut


def _top_sentence(text: str, query: str | None) -> tuple[int, int] | None:
    """The span of the sentence of ``text`` that bears most on ``query`` (ties: the first); None when
    none holds a word of it."""
    spans = split_sentences(text)
    scores = sentence_scores(text, spans, query) if query else []
    best = max(scores, default=0.0)
    return next(span for span, score in zip(spans, scores) if score == best) if best > 0 else None


def token_cut(text: str, query: str | None, max_tokens: int, tokenizer: Tokenizer) -> str | None:
    """The sentence of ``text`` that shares most words with ``query`` (ties: the first), cut at a token
    boundary within ``max_tokens`` and marked ``…``; None under :data:`MIN_TOKENS`."""
    if max_tokens < MIN_TOKENS:
        return None
    spans = split_sentences(text) or [(0, len(text))]
    a, b = _top_sentence(text, query) or spans[0]
    sentence = text[a:b]
    reach = _reach(tokenizer.encode_with_offsets(sentence)[1])
    if len(reach) <= max_tokens:
        return sentence
    piece = _window(sentence, reach, query, max_tokens - 1, tokenizer)  # the mark takes a token
    if not piece.strip():
        return None
    return piece if sentence.endswith(piece.removeprefix(LEAD)) else piece + ELLIPSIS


#: The share of a window's spare room before the question's words (the rest goes after them): the answer
#: follows the words that ask for it more often than it precedes them. Chosen on the SQuAD tuning splits
#: (bench/bench_small_budget.py --squad, 354 and 607 questions at 150 and 300 tokens): 0.1 to 0.35 within
#: a question of each other, a centred window (0.5) a question or two behind at 150 tokens.
_BEFORE = 0.25


def token_window(sentence: str, query: str | None, max_tokens: int, tokenizer: Tokenizer) -> str:
    """The piece of ``sentence`` (longer than ``max_tokens`` tokens) to show in ``max_tokens`` tokens,
    cut at token boundaries: its start, unless the question's words it holds lie past the start's
    reach; then the window that holds most of the question's words (the earliest of equals), opened
    with :data:`._prune.LEAD` (the mark, one token), a quarter of the room it has to spare before
    them and the rest after.

    Why: the answer sits beside the words that ask for it ("its first direct elections in 1979"),
    and a long sentence cut from its start stopped just before them. A window that starts after the
    sentence's start says so; its end is marked by the caller, as a prefix's is."""
    return _window(sentence, _reach(tokenizer.encode_with_offsets(sentence)[1]), query, max_tokens, tokenizer)


def _window(sentence: str, reach: list[int], query: str | None, max_tokens: int, tokenizer: Tokenizer) -> str:
    """:func:`token_window` on ``sentence`` already encoded (``reach``: see :func:`_reach`)."""
    if len(reach) <= max_tokens:
        return sentence.rstrip()
    width = max_tokens - 1  # the lead mark
    start = _window_start(sentence, query, reach, width)
    at = _word_start(sentence, max(reach[start - 1], 0)) if start > 1 else 0
    if at == 0:  # the start reaches the question's words: no mark to pay
        return _prefix(sentence, reach, max_tokens)
    # the text from there, re-encoded as it will read: the window's tokens and a few more are enough
    piece = _token_prefix(sentence[at:reach[min(start + width + 16, len(reach) - 1)]].lstrip(), width, tokenizer)
    return LEAD + piece if piece else ""


def _word_start(text: str, at: int) -> int:
    """Where a piece starting at ``at`` should start: never inside a word ("'s hymns" of "Luther's hymns")
    or an entity ("amp;" of "&amp;"), so back to the start of the word ``at`` falls in; but past the
    punctuation that ends a word ("Friedman," costs tokens and says nothing) and the spaces after it."""
    end = at
    while end < len(text) and not text[end].isspace() and not text[end].isalnum():
        end += 1
    if end == len(text) or text[end].isspace():  # the rest of the word is punctuation
        while end < len(text) and text[end].isspace():
            end += 1
        return end
    while at > 0 and not text[at - 1].isspace():
        at -= 1
    return at


def _window_start(sentence: str, query: str | None, reach: list[int], width: int) -> int:
    """The first token of the ``width``-token window of ``sentence`` (``reach``: see :func:`_reach`) over the shortest
    run of its words that holds the most distinct words of ``query`` a window can hold (the earliest of
    equals), placed by :data:`_BEFORE`; 0 when it holds none. Linear in the words found (two sweeps):
    a last resort may cut a sentence of a million tokens."""
    words = question_words(sentence, query)
    if not words:
        return 0
    keys = [term for _, _, term in words]
    first = [min(bisect.bisect_right(reach, a), len(reach) - 1) for a, _, _ in words]
    last = [min(bisect.bisect_left(reach, b), len(reach) - 1) for _, b, _ in words]
    most = _most_held(keys, first, last, width)
    held: Counter[str] = Counter()
    run, n = (0, width + 1), 0  # (its first token, its tokens)
    for m, key in enumerate(keys):  # the shortest run holding that many, by a sliding window
        held[key] += 1
        while len(held) == most:
            if last[m] + 1 - first[n] < run[1]:
                run = (first[n], last[m] + 1 - first[n])
            held[keys[n]] -= 1
            if not held[keys[n]]:
                del held[keys[n]]
            n += 1
    if run[1] > width:
        return 0
    return min(max(run[0] - round(_BEFORE * (width - run[1])), 0), len(reach) - width)


def _most_held(keys: list[str], first: list[int], last: list[int], width: int) -> int:
    """The most distinct ``keys`` a run of words within ``width`` tokens holds."""
    held: Counter[str] = Counter()
    most, end = 0, 0
    for n in range(len(keys)):
        end = max(end, n)
        while end < len(keys) and last[end] + 1 - first[n] <= width:
            held[keys[end]] += 1
            end += 1
        most = max(most, len(held))
        if end > n:
            held[keys[n]] -= 1
            if not held[keys[n]]:
                del held[keys[n]]
    return most


def _token_prefix(text: str, max_tokens: int, tokenizer: Tokenizer) -> str:
    """The characters of ``text``'s first ``max_tokens`` tokens (never half a character or an entity),
    white space at the end taken off."""
    return _prefix(text, _reach(tokenizer.encode_with_offsets(text)[1]), max_tokens)


def _reach(ends: Iterable[Any]) -> list[int]:
    """Where the text of each token and those before it ends: a token's end offset, or (a token that ends
    inside a character reports -1) the end of the one before it (-1 before any)."""
    return list(itertools.accumulate((int(end) for end in ends), max))


def _prefix(text: str, reach: list[int], max_tokens: int) -> str:
    """:func:`_token_prefix` on ``text`` already encoded."""
    if len(reach) <= max_tokens:
        return text.rstrip()
    piece = text[: max(reach[max_tokens - 1], 0)]
    amp = piece.rfind("&")
    if amp >= 0 and ";" not in piece[amp:]:  # never half an entity (&amp; &lt;)
        piece = piece[:amp]
    return piece.rstrip()

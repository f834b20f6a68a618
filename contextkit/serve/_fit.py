"""Results cut to a caller's token limit, counted exactly on the JSON the caller receives.

Why exact: an agent gives a tool a limit because its own context is small; a result that is
"about" the limit overflows it. Every result here is serialised once (:func:`result_json`) and
that text is what is counted, sent over MCP and over HTTP, so the count holds for what arrives.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["cut_text", "fit_cut", "fit_items", "fit_items_json", "result_json"]

Count = Callable[[str], int]


def result_json(data: dict[str, Any]) -> str:
    """The one serialisation of a result: compact, UTF-8 text kept as is (a non-ASCII word is not six tokens)."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def fit_items(base: dict[str, Any], key: str, items: list[dict[str, Any]], limit: int, count: Count,
              text_field: str = "text", bytes_bound: bool = False) -> dict[str, Any]:
    """``base`` with as many of ``items`` (best first) under ``key`` as fit in ``limit`` tokens of JSON
    (:func:`fit_items_json`'s result without its text)."""
    return fit_items_json(base, key, items, limit, count, text_field, bytes_bound)[0]


def fit_items_json(base: dict[str, Any], key: str, items: list[dict[str, Any]], limit: int, count: Count,
                   text_field: str = "text", bytes_bound: bool = False) -> tuple[dict[str, Any], str]:
    """``base`` with as many of ``items`` (best first) under ``key`` as fit in ``limit`` tokens of JSON, and that
    result's JSON (:func:`result_json`): the text measured is the text returned, so a caller sends it as is
    rather than serialising the result a second time.

    The result says what was left out: ``omitted`` (items not returned) and, when even the first item
    does not fit whole, that item with its ``text_field`` cut at a token boundary and ``truncated`` set.
    A ``limit`` too small for the envelope alone returns no items (``omitted`` counts them all).
    ``bytes_bound``: the tokenizer never gives more tokens than the text has UTF-8 bytes (a byte-level BPE
    such as tiktoken's: every token stands for at least one byte), so a result of at most ``limit`` bytes
    fits without being counted (most results do, under the default limit).
    """
    def build(n: int) -> dict[str, Any]:
        return {**base, key: items[:n], "omitted": len(items) - n}

    def done(data: dict[str, Any]) -> tuple[dict[str, Any], str]:
        return data, result_json(data)

    full = build(len(items))
    whole = result_json(full)
    if (bytes_bound and len(whole.encode("utf-8")) <= limit) or count(whole) <= limit:  # the usual case
        return full, whole
    lo, hi = 0, len(items) - 1  # the largest n whose JSON fits: binary search (each probe one exact count)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(result_json(build(mid))) <= limit:
            lo = mid
        else:
            hi = mid - 1
    if lo > 0 or not items or text_field not in items[0]:
        return done(build(lo))
    first = items[0]
    shell = {**base, key: [{**first, text_field: "", "truncated": True}], "omitted": len(items) - 1}
    room = limit - count(result_json(shell))
    if room <= 0:
        return done(build(0))
    fitted = fit_cut(str(first[text_field]), room, limit, count, lambda cut: {
        **base, key: [{**first, text_field: cut, "truncated": True}], "omitted": len(items) - 1})
    return done(fitted if fitted is not None else build(0))


def fit_cut(text: str, room: int, limit: int, count: Count,
            build: Callable[[str], dict[str, Any]]) -> dict[str, Any] | None:
    """``build(prefix)`` for the longest prefix of ``text`` whose whole result counts at most ``limit`` tokens;
    None when not even a character fits. ``room`` is the first guess of the tokens left for the text (the
    limit less the envelope): the join can cost a token or two more, so the text is cut again, shorter by
    what the result went over, until it fits."""
    for _ in range(8):
        if room <= 0:
            return None
        cut = cut_text(text, room, count)
        if text and not cut:
            return None
        result = build(cut)
        excess = count(result_json(result)) - limit
        if excess <= 0:
            return result
        room -= excess
    return None


def cut_text(text: str, limit: int, count: Count) -> str:
    """The longest prefix of ``text`` whose JSON string form counts at most ``limit`` tokens (binary search on
    characters; a prefix never ends inside a surrogate pair, as Python strings hold none)."""
    def size(n: int) -> int:
        return count(json.dumps(text[:n], ensure_ascii=False)) - 1  # the quotes and the join cost about one

    if size(len(text)) <= limit:
        return text
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size(mid) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]

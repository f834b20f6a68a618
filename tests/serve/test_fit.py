"""Results cut to a token limit: exact on the JSON sent, maximal, and honest about what was left out."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextkit.core.tokenizers import get_tokenizer
from contextkit.serve._fit import cut_text, fit_items, fit_items_json, result_json

COUNT = get_tokenizer("cl100k_base").count
WORDS = st.text(alphabet=st.sampled_from(list("ab cd\n\"\\é中😀<>&0123456789")), max_size=400)


@settings(max_examples=150, deadline=None)
@given(texts=st.lists(WORDS, max_size=12), limit=st.integers(min_value=1, max_value=800))
def test_fit_items_is_exact_maximal_and_counts_what_it_left_out(texts: list[str], limit: int) -> None:
    items = [{"id": f"doc-{i}::0", "text": t} for i, t in enumerate(texts)]
    base = {"mode": "hybrid", "generation": 3}
    out, text = fit_items_json(base, "hits", items, limit, COUNT)
    assert text == result_json(out)  # the text returned is the result's one serialisation, whatever the path taken
    assert fit_items(base, "hits", items, limit, COUNT) == out
    bounded, bounded_text = fit_items_json(base, "hits", items, limit, COUNT, bytes_bound=True)
    assert bounded == out and bounded_text == text  # the byte bound only skips a count: never a different answer
    assert COUNT(result_json(out)) <= limit or not out["hits"]
    n = len(out["hits"])
    assert out["omitted"] == len(items) - n
    whole = [h for h in out["hits"] if not h.get("truncated")]
    assert whole == items[: len(whole)]
    if n and out["hits"][0].get("truncated"):
        assert n == 1 and items[0]["text"].startswith(out["hits"][0]["text"])
    elif n < len(items):  # one more whole item would not have fitted
        assert COUNT(result_json({**base, "hits": items[: n + 1], "omitted": len(items) - n - 1})) > limit


@pytest.mark.parametrize("limit", [1, 5, 40, 300])
def test_cut_text_keeps_a_prefix_within_the_limit(limit: int) -> None:
    text = "Tokens of 3.14 km, 😀 and 中文 — " * 40
    cut = cut_text(text, limit, COUNT)
    assert text.startswith(cut) and COUNT(result_json({"t": cut})) <= limit + 6

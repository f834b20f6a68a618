"""contextkit.text: the one sentence splitter and truncation at a sentence end.

Example tests name each rule; property tests check the contract on random text:
spans are in order, disjoint and lose nothing but white space; no protected token
(a decimal, a version, a date, an abbreviation, an initial, a URL, a file name...)
is ever cut, wherever it stands in a sentence; a truncation never passes its limit
and ends at a sentence end.
"""

from __future__ import annotations

import re
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextkit.text import (
    sentence_ends,
    sentence_texts,
    split_sentences,
    truncate_at_sentence,
)


class CharTokenizer:
    """One token per character: limits are exact, so a property can say "never more"."""

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[int]]:
        return [ord(c) for c in text], list(range(1, len(text) + 1))


class WordTokenizer:
    """One token per word and per run of white space (ends inside a word never occur)."""

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[int]]:
        ends = [m.end() for m in re.finditer(r"\s+|\S+", text)]
        return list(range(len(ends))), ends


#: Tokens a sentence must never be cut inside, whatever surrounds them.
PROTECTED = [
    "2.5 mg", "3.14", "v1.2.3", "Python 3.11", "12.05.2024", "10:30", "5 p.m. today", "10 a.m. sharp",
    "Dr. Watson", "Mr. Brown", "Mrs. Hudson", "Prof. Moriarty", "e.g. Paris", "i.e. London", "etc. and more",
    "Jan. 5", "Fig. 3", "vs. Madrid", "No. 5", "J. R. R. Tolkien", "John F. Kennedy", "et al. (2010)",
    "https://x.org/a.b?c=d", "http://example.com/index.html", "a.b@c.de", "setup.py", "os.path.join()",
    "`a.b`", "archive.tar.gz", "3.5 (p < .001)", "1,234.56 USD", "e.g. the",
]
WORDS = ["the", "cat", "sat", "on", "mat", "we", "saw", "it", "and", "then", "Paris", "Anna", "data", "ran",
         "under", "blue", "sky", "about", "Monday", "is", "was", "very", "old"]


def _sentence(words: list[str], end: str) -> str:
    text = " ".join(words)
    return text[:1].upper() + text[1:] + end


sentences_st = st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).flatmap(
    lambda ws: st.sampled_from([".", "!", "?", "", "\n\n"]).map(lambda end: _sentence(ws, end)))
seps = st.sampled_from([" ", "  ", "\n", "\n\n", "\t"])


# ------------------------------------------------------------------ examples
class TestRules:
    @pytest.mark.parametrize("text", [
        "The dose was 2.5 mg twice a day.", "Pi is about 3.14 here.", "Install v1.2.3 first.",
        "We moved to Python 3.11 last year.", "It happened on 12.05.2024 in town.", "Meet me at 10:30 then.",
        "Come at 5 p.m. today or later.", "Ask Dr. Watson about it.", "Mr. Brown and Mrs. Hudson came.",
        "Cities, e.g. Paris or Rome, are busy.", "The capital, i.e. London, was calm.",
        "Apples, pears, etc. and more were sold.", "It was due on Jan. 5 this year.", "See Fig. 3 for details.",
        "Spain vs. Madrid was odd.", "He lives at No. 5 on the road.", "A book by J. R. R. Tolkien is long.",
        "Read https://x.org/a.b?c=d before you go.", "Write to a.b@c.de for help.", "Run setup.py to install.",
        "Call os.path.join() with two paths.", "The name `a.b` is taken.",
    ])
    def test_protected_tokens_stay_in_one_sentence(self, text):
        assert sentence_texts(text) == [text]

    def test_terminal_marks_before_capital_quote_or_digit(self):
        assert sentence_texts('It rained. The sun came out! "Why?" she asked. 10 people left.') == [
            "It rained.", "The sun came out!", '"Why?" she asked.', "10 people left."]

    def test_question_and_exclamation(self):
        assert sentence_texts("Is it? Yes! Good.") == ["Is it?", "Yes!", "Good."]

    def test_cjk_full_stops(self):
        assert sentence_texts("今天下雨。明天呢？好！") == ["今天下雨。", "明天呢？", "好！"]

    def test_blank_line_is_a_paragraph_end(self):
        assert sentence_texts("A heading without a stop\n\nand a paragraph that starts lower case") == [
            "A heading without a stop", "and a paragraph that starts lower case"]

    def test_abbreviation_at_the_end_of_a_sentence(self):
        assert sentence_texts("We bought apples, pears etc. The shop closed.") == [
            "We bought apples, pears etc.", "The shop closed."]

    def test_decimal_is_not_a_sentence_end_in_chat(self):
        # the history summariser's own old rule split this into "2." and "5 mg ..."
        assert sentence_texts("Take 2.5 mg. Then rest.") == ["Take 2.5 mg.", "Then rest."]

    def test_spans_are_exact_slices(self):
        text = "  One here.  Two there!\n"
        assert split_sentences(text) == [(2, 11), (13, 23)]

    def test_sentence_ends_in_a_window_match_the_whole_text(self):
        text = "Dr. Smith came. He left at 5 p.m. The end came soon. Fine."
        whole = list(sentence_ends(text))
        assert whole == [15, 33, 52]  # not after "Dr."; "p.m. The" ends (an ambiguous one before an opener)
        # each end here is one period: its mark starts at end - 1
        assert list(sentence_ends(text, 10, 52)) == [e for e in whole if 10 <= e - 1 < 52]
        assert list(sentence_ends(text, 16)) == [e for e in whole if e > 16]


class TestTruncate:
    def test_fits_whole(self):
        assert truncate_at_sentence("Short one. Two.", 50, CharTokenizer()) == "Short one. Two."

    def test_cuts_at_the_last_sentence_end_that_fits(self):
        text = "The first sentence is here. The second one is longer than that. The third."
        assert truncate_at_sentence(text, 40, CharTokenizer()) == "The first sentence is here."

    def test_does_not_cut_at_an_abbreviation_or_a_decimal(self):
        text = "Take 2.5 mg with Dr. Smith nearby and keep going for a while longer."
        assert truncate_at_sentence(text, 40, CharTokenizer()) is None

    def test_too_small_a_limit_gives_nothing(self):
        assert truncate_at_sentence("One. Two. Three. Four.", 5, CharTokenizer()) is None
        assert truncate_at_sentence("One. Two. Three. Four.", 5, CharTokenizer(), min_tokens=1) == "One."

    def test_a_real_tokenizer(self, cl100k):
        text = " ".join(f"Sentence number {i} is here." for i in range(100))
        cut = truncate_at_sentence(text, 30, cl100k)
        assert cut is not None and cut.endswith(".") and cl100k.count(cut) <= 30 and text.startswith(cut)


# ---------------------------------------------------------------- properties
class TestProperties:
    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet=st.sampled_from(list("ab AZ.!?\n\t3'\")(é。:;-")), max_size=160))
    def test_spans_cover_the_text_in_order(self, text):
        spans = split_sentences(text)
        assert all(0 <= a < b <= len(text) for a, b in spans)
        assert all(b1 <= a2 for (_, b1), (a2, _) in pairwise(spans))
        assert all(text[a:b] == text[a:b].strip() for a, b in spans)
        # nothing lost: what lies between the spans is white space only
        gaps = [text[b1:a2] for (_, b1), (a2, _) in pairwise([(0, 0), *spans, (len(text), len(text))])]
        assert all(not g.strip() for g in gaps)
        assert sentence_texts(text) == [text[a:b] for a, b in spans]

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(sentences_st, max_size=4), st.sampled_from(PROTECTED), st.lists(sentences_st, max_size=4),
           st.lists(st.sampled_from(WORDS), max_size=3), st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
           seps)
    def test_never_cut_inside_a_protected_token(self, before, token, after, lead, tail, sep):
        head = sep.join(before)
        middle = " ".join([*lead, token, *tail]) + "."
        text = sep.join(x for x in (head, middle, sep.join(after)) if x)
        start = text.index(middle) + (len(" ".join(lead)) + 1 if lead else 0)
        end = start + len(token)
        assert text[start:end] == token
        spans = split_sentences(text)
        assert any(a <= start and end <= b for a, b in spans), (token, sentence_texts(text))

    @settings(max_examples=200, deadline=None)
    @given(st.lists(sentences_st, min_size=1, max_size=12), seps, st.integers(1, 300), st.integers(0, 10))
    def test_truncation_stays_within_the_limit_at_a_sentence_end(self, parts, sep, limit, min_tokens):
        text = sep.join(parts)
        for tok in (CharTokenizer(), WordTokenizer()):
            cut = truncate_at_sentence(text, limit, tok, min_tokens=min_tokens)
            n = len(tok.encode_with_offsets(text)[0])
            if limit < min_tokens:
                assert cut is None
                continue
            if n <= limit:
                assert cut == text
                continue
            limit_chars = tok.encode_with_offsets(text)[1][limit - 1]
            ends = [e for e in sentence_ends(text) if 0 < e <= limit_chars]
            if not ends:
                assert cut is None
                continue
            assert cut == text[:ends[-1]].rstrip()  # the last sentence end that fits
            assert len(tok.encode_with_offsets(cut)[0]) <= limit
            assert text.startswith(cut)

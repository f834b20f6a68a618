"""How BM25 cuts text into terms: bm25s's word pattern, and overlapping character bigrams for CJK.

Why bigrams: Chinese and Japanese are written without spaces, so bm25s's pattern (``\\w\\w+``) takes a
whole run of Han or kana, a clause or a sentence, as one term, and a query word inside it matches
nothing (0 hits for 检索, 天气 and 酱油, each in one document). Korean separates words by spaces but
attaches particles to them (검색은, 검색을), so the word alone matches nothing either. As Lucene's
``CJKAnalyzer`` does, each run of Han, Hiragana, Katakana and Hangul is cut into overlapping
bigrams (a lone character is one unigram term): a word of two or more characters holds bigrams that
the texts holding it hold too, with no dictionary, no model and no download. The rest of the text
(Latin, Cyrillic, Greek, digits...) goes through bm25s exactly as before, stop words and stemming
included, so a text with no CJK character gives exactly the terms it gave before; bigrams are
neither stemmed nor filtered.

The analyzer is recorded with the index (``BM25Config.analyzer``) so queries are cut as the texts
were: an index saved before it was recorded has none, and keeps bm25s's cut (:data:`LEGACY`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

__all__ = ["ANALYZERS", "DEFAULT", "LEGACY", "Tokens", "cjk_grams", "has_cjk", "token_ids", "tokens"]

#: bm25s's tokenisation alone: a run of CJK characters is one term (indexes saved with no analyzer).
LEGACY = "bm25s"
#: bm25s's for everything else, CJK runs cut into overlapping bigrams (new indexes).
DEFAULT = "cjk-bigram"
ANALYZERS = frozenset({LEGACY, DEFAULT})

#: Han (unified, extension A, compatibility, extensions B on; 々〆〇), Hiragana, Katakana (its
#: phonetic extensions and half-width forms; not the middle dot ・, which separates words) and
#: Hangul (syllables and jamo).
_CJK = ("\u3005-\u3007\u3040-\u309f\u30a0-\u30fa\u30fc-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
        "\uf900-\ufaff\uff66-\uff9f\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff"
        "\U00020000-\U0003134f")
_RUN = re.compile(f"[{_CJK}]+")


class Tokens(NamedTuple):
    """What ``bm25s.tokenize(..., return_ids=True)`` returns: each text's term ids, and term -> id."""

    ids: list[list[int]]
    vocab: dict[str, int]


def has_cjk(text: str) -> bool:
    return _RUN.search(text) is not None


def cjk_grams(text: str) -> list[str]:
    """The bigrams of every CJK run of ``text`` in order (a run of one character: that character)."""
    out: list[str] = []
    for run in _RUN.findall(text):
        out.extend([run] if len(run) == 1 else [run[i: i + 2] for i in range(len(run) - 1)])
    return out


def token_ids(texts: Sequence[str], analyzer: str, tokenize: Callable[..., Any]) -> Tokens:
    """Each text's term ids and the vocabulary. ``tokenize``: bm25s's ``tokenize`` with the index's stop
    words and stemmer bound. A batch with no CJK character (or the legacy analyzer) is bm25s's own
    call, unchanged."""
    if analyzer == LEGACY or not any(map(has_cjk, texts)):
        found = tokenize(list(texts), return_ids=True)
        return Tokens(found.ids, found.vocab)
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(term, len(vocab)) for term in doc] for doc in tokens(texts, analyzer, tokenize)]
    return Tokens(ids, vocab)


def tokens(texts: Sequence[str], analyzer: str, tokenize: Callable[..., Any]) -> list[list[str]]:
    """Each text's terms: bm25s's terms of the text with its CJK runs taken out (a space in their place),
    then the runs' bigrams."""
    if analyzer == LEGACY or not any(map(has_cjk, texts)):
        return [list(t) for t in tokenize(list(texts), return_ids=False)]
    rest = tokenize([_RUN.sub(" ", t) for t in texts], return_ids=False)
    return [list(words) + cjk_grams(text) for words, text in zip(rest, texts)]

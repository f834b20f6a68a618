"""How :class:`~contextkit.compressors.history.HistorySummarizer` scores the sentences of older turns.

A user asks about a fact in other words than they stated it ("what's my price limit for the
computer?" for "I don't want to spend more than 900 dollars on a new laptop"): TF-IDF finds
nothing in common. So relevance mixes two views of the question:

* lexical: TF-IDF cosine over the older sentences (no model, always there), and
* dense: the cosine of sentence embeddings (the embedder the index already loads, when the
  summarizer has one), which finds the fact by meaning.

Each is scaled to the conversation (its best sentence 1.0, the typical one 0), so the mix
does not depend on a model's cosine range. Two cues raise a sentence *in proportion to its
relevance*, never on their own:

* personal: a first-person statement by the user ("my son takes", "our flight", "I'm
  allergic"), or the assistant's about the user ("your"): what a conversation is expected
  to remember, over chit-chat about sport or films;
* value: a number, a time or a name: a fact's payload. Scaled by relevance, a number
  counts only in a sentence about the question's subject ("1916 when Georgia Tech beat
  Cumberland 222-0" gains nothing from its digits when the question is about a dose).

Without a question there is no subject: the summary keeps what is fact-bearing anywhere
(the cues alone), as it always did.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Sentence", "Space", "dense_relevance", "fact_cue", "personal_cue", "terms"]

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_FACT_CUES = re.compile(
    r"\b(?:my|mine|i'm|i am|i've|i have|i live|i work|i was born|i prefer|i like|i love|i hate|"
    r"call me|remember|don't forget|birthday|named|favou?rite|appointment|deadline|meeting)\b", re.I)
_NUMBER = re.compile(r"\d")
_NAME = re.compile(r"(?<=[a-z,;:] )[A-Z][a-z]+")
_POSSESSIVE = re.compile(r"\b(?:my|our|mine|ours)\b", re.I)
_FIRST_PERSON = re.compile(r"\b(?:i|i['’](?:m|ve|d|ll)|we|we['’](?:re|ve|d|ll)|me|us)\b", re.I)
_SECOND_PERSON = re.compile(r"\b(?:your|yours)\b", re.I)
_STOP = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been being it its this that "
    "these those i you he she we they me him her us them my your his our their what which who whom do does did "
    "so not no yes just very really too also than then there here about into over can could would should will "
    "shall may might must have has had oh well like know think yeah okay ok".split())


def terms(text: str) -> list[str]:
    """The content words of ``text``, lower-cased (stop words and one-letter words left out)."""
    return [w for w in (m.lower() for m in _WORD.findall(text)) if w not in _STOP and len(w) > 1]


def fact_cue(text: str) -> float:
    """0, 0.5 or 1: how many fact-bearing cues (a stated fact, a number, a name) ``text`` shows."""
    cue = bool(_FACT_CUES.search(text)) + bool(_NUMBER.search(text)) + bool(_NAME.search(text))
    return min(cue, 2) / 2


def personal_cue(text: str, role: str) -> float:
    """1 for the user's own possessions ("my", "our"), 0.5 for another first-person statement by the
    user or the assistant's "your", else 0: facts about the user, not chit-chat about the world."""
    if role == "user":
        return 1.0 if _POSSESSIVE.search(text) else 0.5 if _FIRST_PERSON.search(text) else 0.0
    return 0.5 if _SECOND_PERSON.search(text) else 0.0


def value_cue(text: str) -> float:
    """1 when ``text`` carries a number or a name (a fact's payload), else 0."""
    return float(bool(_NUMBER.search(text)) or bool(_NAME.search(text)))


@dataclass(slots=True)
class Sentence:
    """One sentence of an older turn with its features (cached per message; ``turn`` set per call)."""

    text: str
    turn: int
    role: str
    terms: Counter[str]
    fact: float  # fact_cue: what is worth keeping with no question
    personal: float  # personal_cue
    value: float  # value_cue
    ordinal: int = 0  # its place among the message's sentences
    sep: str = " "  # the white space before it in the message (how it joins its neighbour)
    #: Its embedding once an embedder has seen it: a list shared by the per-call copies of the
    #: cached sentence, so a message is embedded once however many summaries it goes into.
    vector: list[Any] = field(default_factory=list)


@dataclass(slots=True)
class Space:
    """TF-IDF vectors of the older sentences, their norms, their centroid and the query's vector."""

    vecs: list[dict[str, float]]
    norms: list[float]
    centroid: dict[str, float]
    c_norm: float
    qvec: dict[str, float]
    q_norm: float

    @classmethod
    def build(cls, sents: list[Sentence], query: str | None) -> Space:
        df = Counter(t for s in sents for t in s.terms)
        n = len(sents)
        idf = {t: math.log((1 + n) / (1 + c)) + 1.0 for t, c in df.items()}
        vecs = [{t: c * idf[t] for t, c in s.terms.items()} for s in sents]
        norms = [math.sqrt(sum(v * v for v in vec.values())) or 1.0 for vec in vecs]
        centroid: dict[str, float] = {}
        for vec, norm in zip(vecs, norms, strict=True):
            for t, v in vec.items():
                centroid[t] = centroid.get(t, 0) + v / norm
        c_norm = math.sqrt(sum(v * v for v in centroid.values())) or 1.0
        qvec = {t: c * idf.get(t, 1.0) for t, c in Counter(terms(query or "")).items()}
        q_norm = math.sqrt(sum(v * v for v in qvec.values())) or 1.0
        return cls(vecs, norms, centroid, c_norm, qvec, q_norm)

    def relevance(self, i: int) -> float:
        """Cosine of sentence ``i`` with the query (0 without a query)."""
        if not self.qvec:
            return 0.0
        return sum(v * self.qvec.get(t, 0.0) for t, v in self.vecs[i].items()) / (self.norms[i] * self.q_norm)

    def centrality(self, i: int) -> float:
        """Cosine of sentence ``i`` with the centroid of all the older sentences."""
        return sum(v * self.centroid[t] for t, v in self.vecs[i].items()) / (self.norms[i] * self.c_norm)


def dense_relevance(embedder: Any, sents: list[Sentence], query: str) -> list[float]:
    """Cosine of each sentence's embedding with the query's; sentences without a vector yet are
    embedded in the same batch as the query (one model call) and keep their vector."""
    import numpy as np

    todo = list({id(s.vector): s for s in sents if not s.vector}.values())  # a repeated message once
    vectors = embedder.embed([query, *(s.text for s in todo)])
    for s, vector in zip(todo, vectors[1:], strict=True):
        s.vector.append(vector)
    if not sents:
        return []
    matrix = np.stack([s.vector[0] for s in sents])
    return [float(x) for x in matrix @ vectors[0]]


def scaled(values: list[float]) -> list[float]:
    """``values`` mapped so the best is 1 and the mean (or anything below it) 0: a score relative to
    this conversation, whatever the scale of the cosine that made it."""
    if not values:
        return []
    top = max(values)
    mean = sum(values) / len(values)
    if top <= mean or top <= 0.0:
        return [0.0] * len(values)
    return [max(0.0, (v - mean) / (top - mean)) for v in values]

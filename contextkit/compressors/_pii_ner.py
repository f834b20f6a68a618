"""NAME and ADDRESS for :class:`~contextkit.compressors.redact.PIIRedactor`, through an optional
named-entity recogniser the user enables (``PIIRedactor(ner=...)``).

Why optional. Names and addresses have no pattern or checksum: finding them needs a trained model
(hundreds of MB, its own language coverage and licence), which contextkit does not ship. The user
picks one and passes it; nothing is imported or loaded without it. Accepted backends:

- ``"presidio"``: Microsoft Presidio's ``AnalyzerEngine()`` with its default NLP engine (spaCy
  ``en_core_web_lg``, which the user installs); imported on the redactor's creation
  (``pip install 'contextkit[ner]'`` brings ``presidio-analyzer``; the spaCy model is the user's);
- a Presidio ``AnalyzerEngine`` the user built (anything with ``.analyze(text=, language=)``);
- a spaCy pipeline (``spacy.load("en_core_web_sm")``, or any ``Language`` with an ``ner`` or
  ``entity_ruler``): anything callable on a text returning a ``Doc`` with ``.ents``;
- any callable ``text -> iterable of (start, end, label)``.

Labels are mapped to kinds: person labels (``PERSON``, ``PER``) to ``NAME``; place labels
(``STREET_ADDRESS``, ``ADDRESS``, ``LOCATION``, ``LOC``, ``GPE``, ``FAC``) to ``ADDRESS``;
others (dates, organisations, numbers) are ignored: the pattern detectors own those.
An entity loses any overlap with a pattern detector's span (a card inside an address stays a card).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from contextkit.compressors._pii_detect import _R_NER, Candidate, _Scan
from contextkit.core.errors import InvalidArgumentError

NER_KINDS: dict[str, str] = {
    "PERSON": "NAME", "PER": "NAME",
    "STREET_ADDRESS": "ADDRESS", "ADDRESS": "ADDRESS", "LOCATION": "ADDRESS", "LOC": "ADDRESS", "GPE": "ADDRESS",
    "FAC": "ADDRESS",
}

Entities = Callable[[str], Iterable[tuple[int, int, str]]]


def _presidio_engine() -> Any:
    try:
        module = importlib.import_module("presidio_analyzer")
    except ImportError:
        raise InvalidArgumentError(
            "ner='presidio' needs presidio-analyzer and a spaCy model: pip install 'contextkit[ner]' && "
            "python -m spacy download en_core_web_lg (or pass ner=spacy.load(...))") from None
    return module.AnalyzerEngine()


def _from_presidio(engine: Any, language: str) -> Entities:
    entities = ["PERSON", "LOCATION", "STREET_ADDRESS", "ADDRESS"]
    supported = set(engine.get_supported_entities(language=language)) if hasattr(
        engine, "get_supported_entities") else set(entities)

    def run(text: str) -> Iterable[tuple[int, int, str]]:
        wanted = [e for e in entities if e in supported] or None
        return [(r.start, r.end, r.entity_type) for r in engine.analyze(text=text, language=language,
                                                                         entities=wanted)]
    return run


def _from_spacy(nlp: Callable[[str], Any]) -> Entities:
    def run(text: str) -> Iterable[tuple[int, int, str]]:
        return [(e.start_char, e.end_char, e.label_) for e in nlp(text).ents]
    return run


def ner_backend(ner: Any, language: str = "en") -> tuple[str, Entities]:
    """``(description, entities)`` for what the user passed as ``ner`` (see the module docstring)."""
    if isinstance(ner, str):
        if ner.lower() != "presidio":
            raise InvalidArgumentError(f"unknown ner backend {ner!r}: pass 'presidio', a spaCy pipeline "
                                       "(spacy.load(...)), a Presidio AnalyzerEngine or a callable")
        return "presidio", _from_presidio(_presidio_engine(), language)
    if callable(getattr(ner, "analyze", None)):  # the user's engine: from_dict cannot rebuild it
        return "presidio_engine", _from_presidio(ner, language)
    if callable(ner) and hasattr(ner, "pipe_names"):
        return "spacy", _from_spacy(ner)
    if callable(ner):
        return "callable", ner
    raise InvalidArgumentError(f"ner must be 'presidio', a spaCy pipeline, a Presidio AnalyzerEngine or a "
                               f"callable, not {type(ner).__name__}")


def ner_finder(entities: Entities, kinds: frozenset[str]) -> Callable[[_Scan], list[Candidate]]:
    """A detector of the entities whose mapped kind is in ``kinds`` (trimmed of surrounding spaces)."""
    def find(scan: _Scan) -> list[Candidate]:
        text = scan.text
        out: list[Candidate] = []
        for start, end, label in entities(text):
            kind = NER_KINDS.get(str(label).upper())
            s, e = int(start), int(end)
            while s < e and text[s].isspace():
                s += 1
            while e > s and text[e - 1].isspace():
                e -= 1
            if kind in kinds and 0 <= s < e <= len(text) and "<" not in text[s:e] and ">" not in text[s:e]:
                out.append((s, e, kind, f"ner_{str(label).lower()}", _R_NER))
        return out
    return find

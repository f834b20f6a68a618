"""Every component's ``to_dict()`` names its ``"type"`` and ``from_dict`` gives back an equal one.

The per-package tests go deeper (same chunks, same vectors, same hits); this one keeps the
convention itself from drifting as components are added. PIIRedactor is the one exception: its
dict is a documented, tested shape (``tests/compressors/test_redact.py``) without ``"type"``.
"""

from __future__ import annotations

import json

import pytest

from contextkit.assembly.context_assembler import ContextAssembler
from contextkit.chunking import TokenChunker
from contextkit.compressors import EvidenceCompressor, HistorySummarizer
from contextkit.tokenizers import Tokenizer, get_tokenizer

COMPONENTS = {
    "tokenizer": (lambda: get_tokenizer("o200k_base"), Tokenizer.from_dict),
    "chunker": (lambda: TokenChunker(128, 16, header="{title}\n"), TokenChunker.from_dict),
    "history": (lambda: HistorySummarizer(keep_last=3), HistorySummarizer.from_dict),
    "evidence": (lambda: EvidenceCompressor(target_ratio=2.0), EvidenceCompressor.from_dict),
    "assembler": (lambda: ContextAssembler("gpt-4o", evidence_order="score"), ContextAssembler.from_dict),
    "assembler-budget": (lambda: ContextAssembler(4000, format="markdown"), ContextAssembler.from_dict),
}


@pytest.mark.parametrize("name", list(COMPONENTS))
def test_to_dict_has_its_type_and_round_trips_through_json(name):
    make, rebuild = COMPONENTS[name]
    component = make()
    data = component.to_dict()
    assert data["type"] == type(component).__name__
    again = rebuild(json.loads(json.dumps(data)))
    assert type(again) is type(component) and again.to_dict() == data


def test_a_dict_of_another_type_is_refused():
    from contextkit.errors import ContextkitError

    with pytest.raises(ContextkitError):
        ContextAssembler.from_dict(HistorySummarizer().to_dict())

"""Where chunks start: at a sentence (or paragraph) where the chunker can, never on a sentence's last words.

Issue 19: chunks used to start mid-sentence whenever no sentence began inside the overlap,
so a retrieved chunk opened on a fragment ("... of the cluster. The dose is"). A sentence
start is now preferred inside the overlap, and failing that the end of the previous chunk
when it is one (no overlap then, as LlamaIndex's SentenceSplitter builds its overlap from
whole sentences).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from contextkit.chunking import TokenChunker

SCIFACT = Path(__file__).resolve().parents[3] / "shared" / "data" / "beir_scifact" / "corpus.jsonl"


def starts_a_sentence(text: str, at: int) -> bool:
    """A judge independent of the chunker's own boundary tables: start of text, paragraph, or after . ! ?"""
    rest = text[at:]
    upto = text[:at] + rest[: len(rest) - len(rest.lstrip())]  # the cut may fall before or after white space
    if not upto.strip() or upto.rstrip(" \t").endswith("\n\n"):
        return True
    return bool(re.search(r"[.!?][\"')\]]?$", upto.rstrip()))


def long_sentences(n: int) -> str:
    """Sentences of about 40 words each: longer than a 16-token overlap, so none starts inside it."""
    words = "the committee reviewed each measured value in the trial records and compared it with".split()
    return " ".join(f"Sentence {i} says that " + " ".join(words * 3) + f" entry {i}." for i in range(n))


class TestChunkStarts:
    def test_no_sentence_in_the_overlap_starts_at_the_previous_end(self):
        text = long_sentences(40)
        chunker = TokenChunker(chunk_size=200, chunk_overlap=16)
        chunks = chunker.chunk(text)
        assert len(chunks) > 5
        for c in chunks[1:]:
            assert starts_a_sentence(text, c.start), text[max(0, c.start - 40) : c.start + 40]
            assert c.text.lstrip().startswith("Sentence ")

    def test_a_sentence_inside_the_overlap_is_still_used(self):
        short = " ".join(f"Fact {i} is short." for i in range(600))
        chunks = TokenChunker(chunk_size=100, chunk_overlap=30).chunk(short)
        overlapped = [b for a, b in zip(chunks, chunks[1:]) if b.start < a.end]
        assert len(overlapped) == len(chunks) - 1  # overlap kept where whole sentences fit in it
        assert all(starts_a_sentence(short, c.start) for c in chunks[1:])

    def test_code_without_sentences_keeps_its_line_overlap(self):
        code = "\n".join(f"value_{i} = compute(value_{i - 1}, factor={i})" for i in range(1, 400))
        chunks = TokenChunker(chunk_size=120, chunk_overlap=30).chunk(code)
        assert all(b.start < a.end for a, b in zip(chunks, chunks[1:]))  # overlap kept: no sentence to prefer
        assert all("\n" in code[c.start - 1 : c.start + 1] for c in chunks[1:])  # and starts on lines

    @pytest.mark.skipif(not SCIFACT.exists(), reason="needs ../shared/data/beir_scifact")
    def test_scifact_abstracts_start_at_sentences(self):
        with SCIFACT.open(encoding="utf-8") as fh:
            abstracts = [json.loads(line)["text"] for _, line in zip(range(600), fh)]
        texts = ["\n\n".join(abstracts[i : i + 30]) for i in range(0, len(abstracts), 30)]
        chunker = TokenChunker(chunk_size=512, chunk_overlap=64)
        starts = [(t, c.start) for t in texts for c in chunker.chunk(t)[1:]]
        assert len(starts) > 300
        mid = [t[max(0, a - 30) : a + 30] for t, a in starts if not starts_a_sentence(t, a)]
        assert mid == []

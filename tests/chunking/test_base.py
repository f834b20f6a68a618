"""The chunker role: ``Chunker`` and its serialisation, on the real tokenizer."""

from __future__ import annotations

from typing import Any

import pytest

from contextkit.chunking import Chunker, ChunkerConfig, TokenChunker
from contextkit.errors import UnknownOptionError
from contextkit.records import Chunk, Document


class ParagraphChunker(Chunker):
    """A chunker of our own: one chunk per paragraph of at least ``min_chars`` characters."""

    def __init__(self, min_chars: int = 1) -> None:
        self.min_chars = min_chars

    def chunk(self, document: Document | str, **overrides: Any) -> list[Chunk]:
        doc = Document("text", document) if isinstance(document, str) else document
        min_chars = overrides.get("min_chars", self.min_chars)
        chunks, start = [], 0
        for part in doc.text.split("\n\n"):
            if len(part.strip()) >= min_chars:
                chunks.append(Chunk(id=f"{doc.id}::{len(chunks)}", doc_id=doc.id, ordinal=len(chunks), text=part,
                                    start=start, end=start + len(part), token_count=len(part.split())))
            start += len(part) + 2
        return chunks

    def _settings(self) -> dict[str, Any]:
        return {"min_chars": self.min_chars}


@pytest.fixture(scope="module")
def documents(peps) -> list[Document]:
    return [Document(id=p.name, text=p.read_text(encoding="utf-8")) for p in peps[:6]]


class TestTokenChunker:
    def test_is_a_chunker(self):
        assert isinstance(TokenChunker(), Chunker)

    def test_to_dict_names_the_type(self):
        data = TokenChunker(128, 16, tokenizer="o200k_base", header="{title}\n").to_dict()
        assert data["type"] == "TokenChunker"
        assert {k: v for k, v in data.items() if k != "type"} == ChunkerConfig(
            chunk_size=128, chunk_overlap=16, tokenizer="o200k_base", header="{title}\n").model_dump()

    def test_round_trip_gives_the_same_chunks(self, documents):
        chunker = TokenChunker(200, 24, header="{id}\n")
        again = TokenChunker.from_dict(chunker.to_dict())
        assert again.to_dict() == chunker.to_dict()
        assert again.chunk_many(documents) == chunker.chunk_many(documents)

    def test_a_recorded_config_without_type_still_loads(self, documents):
        # What an index manifest records and what ingestion feeds back: the ChunkerConfig alone.
        recorded = ChunkerConfig(chunk_size=96, chunk_overlap=8).model_dump()
        assert TokenChunker.from_dict(recorded).chunk(documents[0]) == TokenChunker(96, 8).chunk(documents[0])

    def test_the_dict_is_still_checked(self):
        data = TokenChunker(64, 8).to_dict()
        with pytest.raises(ValueError, match="TokenChunker.from_dict got the settings of a 'ParagraphChunker'"):
            TokenChunker.from_dict({**data, "type": "ParagraphChunker"})
        with pytest.raises(UnknownOptionError, match="unknown option 'bogus'"):
            TokenChunker.from_dict({**data, "bogus": 1})

    def test_the_base_rebuilds_it_by_type(self, documents):
        chunker = TokenChunker(150, 20, tokenizer="o200k_base")
        again = Chunker.from_dict(chunker.to_dict())
        assert type(again) is TokenChunker and again.chunk_many(documents) == chunker.chunk_many(documents)
        with pytest.raises(UnknownOptionError, match="bogus"):  # through TokenChunker.from_dict, which checks the keys
            Chunker.from_dict({**chunker.to_dict(), "bogus": 1})

    def test_the_worker_pool_rebuilds_it_from_to_dict(self, documents):
        with TokenChunker(128, 16) as chunker:
            assert chunker.chunk_many(documents, workers=2) == [chunker.chunk(d) for d in documents]


class TestCustomChunker:
    def test_the_base_needs_chunk_and_settings(self):
        with pytest.raises(TypeError, match="abstract"):
            Chunker()  # type: ignore[abstract]

    def test_chunk_many_loops_over_chunk(self, documents):
        chunker = ParagraphChunker(min_chars=40)
        per_doc = chunker.chunk_many(documents, workers=4)
        assert per_doc == [chunker.chunk(d) for d in documents]
        assert all(len(c.text.strip()) >= 40 for chunks in per_doc for c in chunks) and per_doc[0]

    def test_overrides_replace_constructor_values_for_one_call(self):
        text = "short\n\na paragraph long enough to be kept"
        chunker = ParagraphChunker(min_chars=10)
        assert [c.text for c in chunker.chunk(text)] == ["a paragraph long enough to be kept"]
        assert [c.text for c in chunker.chunk(text, min_chars=1)] == ["short", "a paragraph long enough to be kept"]
        assert chunker.min_chars == 10

    def test_round_trip(self, documents):
        chunker = ParagraphChunker(min_chars=25)
        data = chunker.to_dict()
        assert data == {"type": "ParagraphChunker", "min_chars": 25}
        assert ParagraphChunker.from_dict(data).chunk_many(documents) == chunker.chunk_many(documents)
        assert type(Chunker.from_dict(data)) is ParagraphChunker
        with pytest.raises(ValueError, match="ParagraphChunker.from_dict got the settings of a 'TokenChunker'"):
            ParagraphChunker.from_dict(TokenChunker().to_dict())

    def test_close_and_context_manager_come_free(self):
        with ParagraphChunker() as chunker:
            assert chunker.chunk("one\n\ntwo")[1].text == "two"
        chunker.close()

    def test_ingestion_chunks_with_it(self, documents, tmp_path):
        from contextkit.ingestion._steps import chunk_group
        from contextkit.ingestion._types import IngestReport, Pending
        from contextkit.loaders import SourceFile

        chunker = ParagraphChunker(min_chars=40)
        group = [Pending(SourceFile(tmp_path / d.id, d.id), "0" * 64, len(d.text), documents=[d]) for d in documents]
        report = IngestReport(index=str(tmp_path))
        done = chunk_group(group, chunker, 2, report)
        assert [item.chunks for item in done] == chunker.chunk_many(documents) and not report.failures

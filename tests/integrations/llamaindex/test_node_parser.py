"""``ContextKitNodeParser``: user metadata kept, metadata-aware sizing, and LlamaIndex's node-parser contract.

The ``TestLlamaIndexContract`` tests are llama-index-core's own
(tests/node_parser/test_sentence_splitter.py, tests/ingestion/test_pipeline.py),
adapted to this class: the assertions that hold for any splitter, without
SentenceSplitter's exact chunk counts.
"""

from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core import Document  # noqa: E402
from llama_index.core.base.embeddings.base import BaseEmbedding  # noqa: E402
from llama_index.core.ingestion import IngestionPipeline  # noqa: E402
from llama_index.core.node_parser.interface import MetadataAwareTextSplitter  # noqa: E402
from llama_index.core.schema import MetadataMode  # noqa: E402
from llama_index.core.storage.docstore import SimpleDocumentStore  # noqa: E402

from contextkit.integrations.llamaindex.node_parser import ContextKitNodeParser  # noqa: E402

TEXT = " ".join(f"Sentence number {i} says something about chunking, tokens and offsets." for i in range(80))


@pytest.fixture(scope="module")
def meta_docs() -> list[Document]:
    meta = {"title": "A long title about token-exact chunking in retrieval pipelines", "section": "Chunk sizes",
            "page_label": "12", "author": "Ines Example"}
    return [Document(text=TEXT, id_="d1", metadata=dict(meta)), Document(text=TEXT[::-1], id_="d2", metadata=meta)]


class TestUserMetadata:
    def test_user_keys_are_never_overwritten_nor_hidden(self):
        doc = Document(text=TEXT, id_="li-uuid-1",
                       metadata={"doc_id": "INV-2024-17", "chunk_id": "c-9", "token_count": 12, "source": "erp"})
        nodes = ContextKitNodeParser(chunk_size=128, chunk_overlap=0).get_nodes_from_documents([doc])
        assert len(nodes) > 1
        for node in nodes:
            assert node.metadata["doc_id"] == "INV-2024-17" and node.metadata["chunk_id"] == "c-9"
            assert node.metadata["token_count"] == 12 and node.metadata["source"] == "erp"
            assert node.metadata["contextkit_doc_id"] == "li-uuid-1" and node.ref_doc_id == "li-uuid-1"
            assert "INV-2024-17" in node.get_content(MetadataMode.LLM)
            assert "contextkit_chunk_id" not in node.get_content(MetadataMode.LLM)
            assert "contextkit_chunk_id" not in node.get_content(MetadataMode.EMBED)


class TestMetadataAwareSizing:
    @pytest.mark.parametrize("mode", [MetadataMode.EMBED, MetadataMode.LLM])
    def test_chunk_size_counts_the_metadata_llamaindex_prepends(self, meta_docs, cl100k, mode):
        nodes = ContextKitNodeParser(chunk_size=96, chunk_overlap=8).get_nodes_from_documents(meta_docs)
        assert len(nodes) > 4
        assert max(cl100k.count(n.get_content(mode)) for n in nodes) <= 96

    def test_split_text_metadata_aware(self, cl100k):
        parser = ContextKitNodeParser(chunk_size=80, chunk_overlap=0)
        metadata_str = "title: A title long enough to matter for the size of every chunk of the text"
        chunks = parser.split_text_metadata_aware(TEXT, metadata_str)
        assert len(chunks) > len(parser.split_text(TEXT))
        assert all(cl100k.count(f"{metadata_str}\n\n{c}") <= 80 for c in chunks)
        assert isinstance(parser, MetadataAwareTextSplitter)

    def test_metadata_longer_than_the_chunk_is_a_clear_error(self):
        parser = ContextKitNodeParser(chunk_size=32, chunk_overlap=0)
        with pytest.raises(ValueError, match="Metadata length"):
            parser.split_text_metadata_aware(TEXT, "word " * 40)

    def test_include_metadata_false_gives_full_chunks(self, meta_docs, cl100k):
        nodes = ContextKitNodeParser(chunk_size=96, chunk_overlap=0, include_metadata=False).get_nodes_from_documents(
            meta_docs[:1])
        assert max(cl100k.count(n.text) for n in nodes) > 72  # with metadata counted, chunks stay under ~56


class TestLlamaIndexContract:
    """llama-index-core's splitter tests, adapted (see the module docstring)."""

    def test_split_text_empty(self):
        assert ContextKitNodeParser(chunk_size=64, chunk_overlap=0).split_text("") == [""]

    def test_split_texts_singleton(self):
        parser = ContextKitNodeParser(chunk_size=64, chunk_overlap=0)
        assert parser.split_text("Hello world.") == ["Hello world."]

    def test_split_texts_multiple(self):
        parser = ContextKitNodeParser(chunk_size=64, chunk_overlap=0)
        assert len(parser.split_texts([TEXT[:300], TEXT[300:600]])) >= 2

    def test_split_texts_with_metadata(self):
        parser = ContextKitNodeParser(chunk_size=64, chunk_overlap=0)
        plain = parser.split_texts([TEXT, TEXT])
        aware = parser.split_texts_metadata_aware([TEXT, TEXT], ["key: value " * 8, "key: value " * 8])
        assert len(aware) > len(plain)

    def test_overlap(self):
        chunks = ContextKitNodeParser(chunk_size=48, chunk_overlap=16).split_text(TEXT)
        assert all(a[-12:].strip() and a[-12:].strip() in b for a, b in zip(chunks, chunks[1:]))

    def test_chinese_text(self, cl100k):
        text = "我爱北京天安门，天安门上太阳升。" * 60
        chunks = ContextKitNodeParser(chunk_size=64, chunk_overlap=0).split_text(text)
        assert len(chunks) > 1 and all(cl100k.count(c) <= 64 for c in chunks) and "".join(chunks) == text

    def test_start_end_char_idx(self, meta_docs):
        doc = meta_docs[0]
        for node in ContextKitNodeParser(chunk_size=64, chunk_overlap=8).get_nodes_from_documents([doc]):
            assert doc.text[node.start_char_idx:node.end_char_idx] == node.get_content(MetadataMode.NONE)

    def test_pipeline_update_metadata(self):
        """tests/ingestion/test_pipeline.py::test_pipeline_update_metadata, with this parser."""
        document = Document.example()
        document.id_ = "1"
        document.metadata["filename"] = "README.md"
        pipeline = IngestionPipeline(transformations=[ContextKitNodeParser(chunk_size=64, chunk_overlap=0)],
                                     docstore=SimpleDocumentStore())
        first = pipeline.run(documents=[document])
        document.metadata["filename"] = "README.md2"
        second = pipeline.run(documents=[document])
        assert len(second) == len(first) > 1
        assert second[0].metadata["filename"] == "README.md2"
        assert [n.node_id for n in second] == [n.node_id for n in first]


# ----------------------------------------------------------------- defaults that follow the app's Settings
class _TruncatingEmbedding(BaseEmbedding):
    """A fixed-window embedding as LlamaIndex's ``HuggingFaceEmbedding`` is: an integer ``max_length`` in the
    model's word pieces, and whatever lies past it is cut before the model sees it (the real model runs)."""

    max_length: int = 256

    def _vector(self, text: str) -> list[float]:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(self.model_name, device="cpu")
        return model.encode([text], normalize_embeddings=True)[0].tolist()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)


@pytest.fixture()
def app_settings():
    """LlamaIndex's global ``Settings`` as an app leaves them, restored afterwards."""
    from llama_index.core import Settings

    saved = Settings._node_parser, Settings._embed_model
    Settings._node_parser = None
    yield Settings
    Settings._node_parser, Settings._embed_model = saved


LONG_TEXT = " ".join(f"Clause {i} of PEP 8 says: limit lines to 79 characters, e.g. in section 4.{i}, "
                     f"and use 4 spaces (not tabs) per indentation level." for i in range(400))


class TestDefaultsFollowTheApp:
    def test_unchanged_app_gets_llamaindex_sized_chunks(self, app_settings, cl100k, li_embedding_session):
        """``ContextKitNodeParser()`` in an app that set nothing: 1,024-token chunks with up to 200 shared, as the
        default ``SentenceSplitter``, not contextkit's own 128 (a fifth of the text an unchanged
        ``as_query_engine()`` budgets for)."""
        app_settings.embed_model = li_embedding_session  # windows long texts: caps nothing
        parser = ContextKitNodeParser()
        assert (parser.chunk_size, parser.chunk_overlap) == (1024, 200)
        nodes = parser.get_nodes_from_documents([Document(text=LONG_TEXT, id_="pep8")])
        sizes = [cl100k.count(n.get_content(MetadataMode.EMBED)) for n in nodes]
        assert max(sizes) <= 1024 and sorted(sizes)[-2] > 900

    def test_follows_settings_chunk_size(self, app_settings, li_embedding_session):
        app_settings.embed_model = li_embedding_session
        app_settings.chunk_size, app_settings.chunk_overlap = 300, 30
        parser = ContextKitNodeParser()
        assert (parser.chunk_size, parser.chunk_overlap) == (300, 30)
        assert ContextKitNodeParser(chunk_size=64).chunk_overlap == 16  # given sizes keep contextkit's overlap

    def test_truncating_embedding_caps_chunks_and_says_so(self, app_settings, caplog):
        """A model that cuts at 256 word pieces: chunks fit its window, counted in its own tokens, and the
        warning names both numbers; nothing of a chunk is cut before embedding."""
        from transformers import AutoTokenizer

        from contextkit.core.tokenizers import default_model_path

        model = _TruncatingEmbedding(model_name=default_model_path())
        app_settings.embed_model = model
        with caplog.at_level("WARNING", logger="contextkit.integrations.llamaindex.node_parser"):
            parser = ContextKitNodeParser()
        assert parser.chunk_size == 254 and parser.tokenizer == f"hf:{default_model_path()}"
        assert "Settings.chunk_size is 1024" in caplog.text and "reads 254 tokens" in caplog.text
        nodes = parser.get_nodes_from_documents([Document(text=LONG_TEXT, id_="pep8")])
        pieces = AutoTokenizer.from_pretrained(default_model_path())
        lengths = [len(pieces(n.get_content(MetadataMode.EMBED), add_special_tokens=True)["input_ids"])
                   for n in nodes]
        assert max(lengths) <= model.max_length and len(nodes) > 10

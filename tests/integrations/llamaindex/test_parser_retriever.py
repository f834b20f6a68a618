"""The LlamaIndex node parser, retriever and conversions, against real llama-index-core.

Real model and tokenizer (session fixtures), real IngestionPipeline and cache,
real RetrieverQueryEngine and QueryFusionRetriever; the only stand-in is the LLM
(``fakes.ScriptedLLM``, a real ``CustomLLM`` that records its prompts), since no
LLM weights are available.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import threading

import pytest

pytest.importorskip("llama_index.core")

from fakes import ScriptedLLM  # noqa: E402
from llama_index.core import Settings  # noqa: E402
from llama_index.core.ingestion import IngestionCache, IngestionPipeline  # noqa: E402
from llama_index.core.ingestion.pipeline import get_transformation_hash  # noqa: E402
from llama_index.core.query_engine import RetrieverQueryEngine  # noqa: E402
from llama_index.core.retrievers import QueryFusionRetriever  # noqa: E402
from llama_index.core.schema import (  # noqa: E402
    Document as LIDocument,
)
from llama_index.core.schema import (
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.vector_stores.types import (  # noqa: E402
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from contextkit.chunking import TokenChunker  # noqa: E402
from contextkit.index import Index, IndexMismatchError  # noqa: E402
from contextkit.ingestion import ingest  # noqa: E402
from contextkit.integrations.llamaindex.convert import (  # noqa: E402
    ConversionError,
    chunks_from_nodes,
    documents_from_llamaindex,
    filters_from_llamaindex,
    ingest_llamaindex_documents,
    nodes_from_chunks,
    scored_chunks_from_nodes,
)
from contextkit.integrations.llamaindex.node_parser import ContextKitNodeParser  # noqa: E402
from contextkit.integrations.llamaindex.retriever import ContextKitRetriever  # noqa: E402
from contextkit.records import Document, ScoredChunk  # noqa: E402
from contextkit.retrievers import Filters, RetrievalError  # noqa: E402

FILES = {
    "faiss.md": "FAISS searches dense vectors by inner product. An IndexIDMap2 keeps the caller's ids "
                "so vectors can be removed later.",
    "bm25.txt": "BM25 ranks documents by term frequency and inverse document frequency, with length "
                "normalisation.",
    "bread.txt": "Knead the dough for ten minutes, then let the bread rise until doubled in size.",
    "pasta.txt": "Boil salted water, cook the pasta until al dente, and drain it.",
}


@pytest.fixture(scope="module")
def pep_docs(peps) -> list[LIDocument]:
    """Two real PEPs as LlamaIndex documents (as SimpleDirectoryReader would give them)."""
    chosen = [p for p in peps if p.stat().st_size > 20_000][:2]
    assert len(chosen) == 2
    return [LIDocument(text=p.read_text(encoding="utf-8"), id_=p.stem,
                       metadata={"file_path": str(p), "file_name": p.name, "title": p.stem},
                       excluded_embed_metadata_keys=["file_path"])
            for p in chosen]


@pytest.fixture(scope="module")
def ck_index(tmp_path_factory, embedder):
    """An index built by contextkit's own file ingestion."""
    root = tmp_path_factory.mktemp("li_retriever")
    folder = root / "docs"
    folder.mkdir()
    for name, text in FILES.items():
        (folder / name).write_text(text + "\n", encoding="utf-8")
    ingest([folder], root / "ix", embedder=embedder)
    return root / "ix", folder


def _name(hit: NodeWithScore) -> str:
    """File ingestion names documents by their path as given (here absolute): compare file names."""
    return hit.node.ref_doc_id.rsplit("/", 1)[-1]


# ===================================================================== parser
class TestNodeParser:
    def test_offsets_relationships_and_metadata(self, pep_docs):
        parser = ContextKitNodeParser(chunk_size=128, chunk_overlap=16)
        nodes = parser.get_nodes_from_documents(pep_docs)
        by_doc = {d.id_: d for d in pep_docs}
        assert {n.ref_doc_id for n in nodes} == set(by_doc)
        for doc_id, doc in by_doc.items():
            mine = [n for n in nodes if n.ref_doc_id == doc_id]
            assert len(mine) > 3
            for i, node in enumerate(mine):
                assert doc.text[node.start_char_idx:node.end_char_idx] == node.text
                assert node.id_ == node.metadata["contextkit_chunk_id"] == f"{doc_id}::{i}"
                assert node.metadata["contextkit_chunk_ordinal"] == i and node.metadata["contextkit_doc_id"] == doc_id
                assert node.metadata["title"] == doc.metadata["title"]  # the document's metadata
                prev = node.relationships.get(NodeRelationship.PREVIOUS)
                nxt = node.relationships.get(NodeRelationship.NEXT)
                assert (prev.node_id if prev else None) == (mine[i - 1].id_ if i else None)
                assert (nxt.node_id if nxt else None) == (mine[i + 1].id_ if i + 1 < len(mine) else None)
            assert mine[0].start_char_idx == 0 and doc.text[mine[-1].end_char_idx:].strip() == ""
        node = nodes[1]
        embed, llm = node.get_content(MetadataMode.EMBED), node.get_content(MetadataMode.LLM)
        for hidden in ("contextkit_chunk_id", "contextkit_token_count", "contextkit_chunk_ordinal",
                       "contextkit_doc_id"):
            assert hidden not in embed and hidden not in llm
        assert "file_path" not in embed  # the document's own exclusions carry over
        assert "title:" in embed and "title:" in llm

    def test_token_counts_within_chunk_size(self, pep_docs, cl100k):
        for header in (None, "{title}\n"):
            parser = ContextKitNodeParser(chunk_size=64, chunk_overlap=8, header=header)
            nodes = parser.get_nodes_from_documents(pep_docs)
            for node in nodes:
                tokens = cl100k.count(node.text)
                assert tokens == node.metadata["contextkit_token_count"]
                head = node.metadata.get("contextkit_chunk_header", "")
                assert cl100k.count(head + node.text) <= 64
                if header:
                    assert head == node.metadata["title"] + "\n"
                    assert node.metadata["contextkit_total_tokens"] == cl100k.count(head + node.text)

    def test_repeated_text_keeps_true_offsets(self):
        """LlamaIndex's own post-processing would find the first copy of a repeated chunk."""
        para = "The same sentence again, word for word, to repeat. " * 4
        doc = LIDocument(text="\n\n".join([para] * 8), id_="rep")
        expected = TokenChunker(chunk_size=32, chunk_overlap=0).chunk(Document("rep", doc.text))
        kept = ContextKitNodeParser(chunk_size=32, chunk_overlap=0, keep_whitespaces=True)
        nodes = kept.get_nodes_from_documents([doc])
        assert [(n.start_char_idx, n.end_char_idx) for n in nodes] == [(c.start, c.end) for c in expected]
        assert len({n.text for n in nodes}) < len(nodes)  # texts do repeat, offsets do not
        stripped = ContextKitNodeParser(chunk_size=32, chunk_overlap=0).get_nodes_from_documents([doc])
        assert [n.text for n in stripped] == [c.text.strip() for c in expected]
        assert all(doc.text[n.start_char_idx:n.end_char_idx] == n.text for n in stripped)

    def test_nodes_of_nodes_stay_in_document_coordinates(self, pep_docs):
        doc = pep_docs[0]
        coarse = ContextKitNodeParser(chunk_size=512, chunk_overlap=0).get_nodes_from_documents([doc])
        fine = ContextKitNodeParser(chunk_size=64, chunk_overlap=0).get_nodes_from_documents(coarse)
        assert len(fine) > len(coarse) > 1
        for node in fine:
            assert node.ref_doc_id == node.metadata["contextkit_doc_id"] == doc.id_
            assert doc.text[node.start_char_idx:node.end_char_idx] == node.text
        plain = ContextKitNodeParser(chunk_size=64, chunk_overlap=0)
        assert "contextkit_chunk_header" not in plain.get_nodes_from_documents(
            ContextKitNodeParser(chunk_size=512, chunk_overlap=0, header="{title}\n").get_nodes_from_documents([doc])
        )[0].metadata  # the first pass's bookkeeping does not leak into the second's
        assert all(doc.text[c.start:c.end] == c.text for c in chunks_from_nodes(fine))

    def test_include_flags_and_empty_documents(self, caplog):
        doc = LIDocument(text="One sentence here. " * 40, id_="d", metadata={"lang": "en"})
        bare = ContextKitNodeParser(chunk_size=32, chunk_overlap=0, include_metadata=False,
                                    include_prev_next_rel=False)
        nodes = bare.get_nodes_from_documents([doc])
        assert "lang" not in nodes[0].metadata and "contextkit_chunk_id" in nodes[0].metadata
        assert set(nodes[1].relationships) == {NodeRelationship.SOURCE}
        with caplog.at_level(logging.WARNING):
            assert bare.get_nodes_from_documents([LIDocument(text="", id_="e"), LIDocument(text=" \n", id_="w")]) == []
        assert "'e' has no text" in caplog.text and "'w' has no text" in caplog.text

    def test_split_text_and_settings(self):
        parser = ContextKitNodeParser(chunk_size=48, chunk_overlap=4)
        pieces = parser.split_text("word " * 200)
        assert len(pieces) > 3 and all(pieces)
        before = Settings._node_parser
        try:
            Settings.node_parser = parser
            Settings.chunk_size, Settings.chunk_overlap = 24, 2  # LlamaIndex reassigns the fields in place
            assert (parser.chunk_size, parser.chunk_overlap) == (24, 2)
            assert len(parser.split_text("word " * 200)) > len(pieces)
        finally:
            Settings._node_parser = before
        with pytest.raises(ValueError, match="chunk_overlap"):
            ContextKitNodeParser(chunk_size=16, chunk_overlap=16)


class TestParserSerialisation:
    def test_round_trip(self):
        parser = ContextKitNodeParser(chunk_size=100, chunk_overlap=10, header="{title}\n", min_fill=0.3)
        data = parser.to_dict()
        assert data["class_name"] == "ContextKitNodeParser"
        for again in (ContextKitNodeParser.from_dict(data), ContextKitNodeParser.from_json(parser.to_json()),
                      pickle.loads(pickle.dumps(parser))):
            assert again.to_dict() == data
            assert again.chunker_config == parser.chunker_config
        doc = LIDocument(text="Some text to split. " * 60, id_="x", metadata={"title": "T"})
        assert [n.text for n in ContextKitNodeParser.from_dict(data)([doc])] == [n.text for n in parser([doc])]

    def test_custom_id_func_must_be_given_again(self):
        def my_ids(i, doc):
            return f"custom-{i}"

        parser = ContextKitNodeParser(chunk_size=32, chunk_overlap=0, id_func=my_ids)
        assert parser([LIDocument(text="a b c " * 40, id_="d")])[0].id_ == "custom-0"
        with pytest.raises(ValueError, match="pass it again"):
            ContextKitNodeParser.from_dict(parser.to_dict())
        assert ContextKitNodeParser.from_dict(parser.to_dict(), id_func=my_ids).id_func is my_ids

    def test_transformation_hash(self):
        docs = [LIDocument(text="Hash me please. " * 20, id_="h")]
        base = get_transformation_hash(docs, ContextKitNodeParser(chunk_size=64, chunk_overlap=8))
        assert get_transformation_hash(docs, ContextKitNodeParser(chunk_size=64, chunk_overlap=8)) == base
        for changed in ({"chunk_size": 65}, {"chunk_overlap": 9}, {"header": "{title}\n"},
                        {"tokenizer": "o200k_base"}, {"min_fill": 0.4}, {"include_metadata": False}):
            settings = {"chunk_size": 64, "chunk_overlap": 8, **changed}
            assert get_transformation_hash(docs, ContextKitNodeParser(**settings)) != base, changed

    def test_ingestion_pipeline_cache_hit(self, pep_docs, monkeypatch):
        calls = []
        real_chunk = TokenChunker.chunk
        monkeypatch.setattr(TokenChunker, "chunk", lambda self, *a, **kw: calls.append(1) or real_chunk(self, *a, **kw))
        cache = IngestionCache()
        first = IngestionPipeline(transformations=[ContextKitNodeParser(chunk_size=96, chunk_overlap=8)],
                                  cache=cache).run(documents=pep_docs)
        assert len(calls) == len(pep_docs)
        calls.clear()
        second = IngestionPipeline(transformations=[ContextKitNodeParser(chunk_size=96, chunk_overlap=8)],
                                   cache=cache).run(documents=pep_docs)
        assert calls == []  # served from the cache: no chunking at all
        assert [(n.id_, n.text, n.start_char_idx, n.end_char_idx, n.metadata) for n in second] == \
               [(n.id_, n.text, n.start_char_idx, n.end_char_idx, n.metadata) for n in first]
        assert second[1].relationships[NodeRelationship.PREVIOUS].node_id == first[0].id_
        IngestionPipeline(transformations=[ContextKitNodeParser(chunk_size=97, chunk_overlap=8)],
                          cache=cache).run(documents=pep_docs)
        assert len(calls) == len(pep_docs)  # other settings: a miss


# ================================================================== retriever
class TestRetriever:
    def test_modes_return_nodes_with_exact_offsets(self, ck_index, embedder):
        path, folder = ck_index
        for mode in ("dense", "bm25", "hybrid"):
            with ContextKitRetriever(path, mode=mode, similarity_top_k=3, embedder=embedder) as retriever:
                hits = retriever.retrieve("how long should I knead the dough for bread?")
            assert 1 <= len(hits) <= 3 and all(isinstance(h, NodeWithScore) for h in hits)
            assert _name(hits[0]) == "bread.txt", mode
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
            for hit in hits:
                node = hit.node
                assert node.id_ == node.metadata["contextkit_chunk_id"]
                assert node.ref_doc_id == node.metadata["contextkit_doc_id"]
                assert node.metadata["source"].endswith(node.metadata["contextkit_doc_id"])
                text = (folder / _name(hit)).read_text(encoding="utf-8")
                assert text[node.start_char_idx:node.end_char_idx] == node.text
                assert "contextkit_chunk_id" not in node.get_content(MetadataMode.LLM)

    def test_open_index_filters_and_empty_results(self, ck_index, embedder):
        path, folder = ck_index
        with Index.open(path, read_only=True) as index:
            pasta = f"{folder.name}/pasta.txt"  # ids are relative to the folder named
            only_pasta = ContextKitRetriever(index, mode="dense", embedder=embedder, filters={"doc_ids": [pasta]})
            assert {h.node.ref_doc_id for h in only_pasta.retrieve("bread dough")} == {pasta}
            li_filters = MetadataFilters(filters=[MetadataFilter(key="doc_id", value=[f"{folder.name}/faiss.md"],
                                                                 operator=FilterOperator.IN)])
            only_faiss = ContextKitRetriever(index, mode="bm25", filters=li_filters)
            assert [_name(h) for h in only_faiss.retrieve("vectors ids")] == ["faiss.md"]
            none = ContextKitRetriever(index, mode="bm25", filters=Filters(doc_ids=["missing"]))
            assert none.retrieve("vectors") == []
            assert ContextKitRetriever(index, mode="bm25").retrieve("zyzzyva quuxification") == []
            only_pasta.close()  # not ours to close: the index stays usable
            assert len(index) > 0

    def test_empty_query_is_a_clear_error(self, ck_index):
        with ContextKitRetriever(ck_index[0], mode="bm25") as retriever:
            for blank in ("", "   \n"):
                with pytest.raises(RetrievalError, match="query is empty"):
                    retriever.retrieve(blank)
        with pytest.raises(ValueError, match="mode"):
            ContextKitRetriever(ck_index[0], mode="sparse")

    def test_in_retriever_query_engine(self, ck_index, embedder):
        llm = ScriptedLLM(default_reply="Ten minutes.")
        with ContextKitRetriever(ck_index[0], mode="hybrid", similarity_top_k=2, embedder=embedder) as retriever:
            engine = RetrieverQueryEngine.from_args(retriever, llm=llm)
            response = engine.query("How long do I knead the dough?")
        assert str(response) == "Ten minutes."
        assert _name(response.source_nodes[0]) == "bread.txt"
        assert len(llm.prompts) == 1
        assert "Knead the dough for ten minutes" in llm.prompts[0]
        assert "How long do I knead the dough?" in llm.prompts[0]

    def test_in_query_fusion_retriever(self, ck_index, embedder):
        llm = ScriptedLLM()
        with ContextKitRetriever(ck_index[0], mode="dense", embedder=embedder) as dense, \
                ContextKitRetriever(ck_index[0], mode="bm25") as sparse:
            for use_async in (False, True):
                fusion = QueryFusionRetriever([dense, sparse], llm=llm, num_queries=1, similarity_top_k=2,
                                              mode="reciprocal_rerank", use_async=use_async)
                hits = fusion.retrieve("inverse document frequency ranking")
                assert _name(hits[0]) == "bm25.txt"
            hits = asyncio.run(fusion.aretrieve("inverse document frequency ranking"))
            assert _name(hits[0]) == "bm25.txt"

            async def sync_call_inside_a_running_loop():
                # LlamaIndex then runs the retrievals in a worker thread: the index is reopened there
                return fusion.retrieve("cook the pasta in salted water")

            hits = asyncio.run(sync_call_inside_a_running_loop())
            assert _name(hits[0]) == "pasta.txt"
        assert llm.prompts == []  # num_queries=1: no query generation

    def test_other_threads(self, ck_index):
        with ContextKitRetriever(ck_index[0], mode="bm25") as retriever:
            found = []
            worker = threading.Thread(target=lambda: found.extend(retriever.retrieve("salted pasta water")))
            worker.start()
            worker.join()
            assert found and _name(found[0]) == "pasta.txt"


# ================================================================ conversions
class TestConvert:
    def test_documents_from_llamaindex(self, caplog):
        docs = [
            LIDocument(text="alpha", id_="a", metadata={"file_path": "/data/a.md", "file_name": "a.md", "n": 1}),
            LIDocument(text="beta", id_="b", metadata={"file_name": "b.txt"}),
            LIDocument(text="gamma", id_="c"),
            LIDocument(text="", id_="empty"),
        ]
        with caplog.at_level(logging.WARNING):
            out = documents_from_llamaindex(docs)
        assert out == [Document("a", "alpha", "/data/a.md", {"file_path": "/data/a.md", "file_name": "a.md", "n": 1}),
                       Document("b", "beta", "b.txt", {"file_name": "b.txt"}),
                       Document("c", "gamma", "", {})]
        assert "'empty' has no text" in caplog.text

    def test_chunks_nodes_round_trip(self, pep_docs):
        doc = documents_from_llamaindex(pep_docs[:1])[0]
        chunks = TokenChunker(chunk_size=80, chunk_overlap=10, header="{title}\n").chunk(doc)
        nodes = nodes_from_chunks(chunks, sources={doc.id: doc.source})
        assert all(isinstance(n, TextNode) for n in nodes)
        assert nodes[1].relationships[NodeRelationship.PREVIOUS].node_id == chunks[0].id
        assert nodes[0].metadata["source"] == doc.source
        assert chunks_from_nodes(nodes) == chunks
        scored = [ScoredChunk(c, 1.0 / (i + 1)) for i, c in enumerate(chunks[:5])]
        with_scores = nodes_from_chunks(scored)
        assert all(isinstance(n, NodeWithScore) for n in with_scores)
        assert NodeRelationship.NEXT not in with_scores[0].node.relationships  # a ranking is not document order
        assert scored_chunks_from_nodes(with_scores) == scored
        assert chunks_from_nodes(with_scores) == chunks[:5]

    def test_parser_nodes_equal_contextkit_chunks(self, pep_docs):
        """With ``keep_whitespaces=True`` the nodes are exactly the chunks contextkit's own ingestion makes."""
        parser = ContextKitNodeParser(chunk_size=100, chunk_overlap=12, keep_whitespaces=True)
        nodes = parser.get_nodes_from_documents(pep_docs)
        expected = []
        for li_doc, doc in zip(pep_docs, documents_from_llamaindex(pep_docs)):
            # the room the metadata LlamaIndex prepends takes (the longer of its EMBED and LLM strings)
            shown = max(li_doc.get_metadata_str(MetadataMode.EMBED), li_doc.get_metadata_str(MetadataMode.LLM), key=len)
            chunker = TokenChunker(chunk_size=100 - parser.metadata_tokens(shown), chunk_overlap=12)
            expected += chunker.chunk(doc)
        assert chunks_from_nodes(nodes) == expected

    def test_nodes_missing_offsets_text_or_metadata(self, caplog):
        doc = LIDocument(text="First part. Second part. Third part.", id_="doc")
        src = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id="doc")}
        loose = TextNode(text="Second part.", id_="n1", relationships=src)
        with pytest.raises(ConversionError, match="documents="):
            chunks_from_nodes([loose])
        [located] = chunks_from_nodes([loose], documents=[doc])
        assert (located.doc_id, located.start, located.end, located.ordinal) == ("doc", 12, 24, 0)
        assert located.id == "n1" and located.token_count == 3  # counted: the node had no token_count
        [alone] = chunks_from_nodes([TextNode(text="standalone text", id_="solo")])
        assert (alone.doc_id, alone.start, alone.end) == ("solo", 0, 15)
        edited = TextNode(text="changed", id_="n2", start_char_idx=0, end_char_idx=11, relationships=src)
        with pytest.raises(ConversionError, match="do not span"):
            chunks_from_nodes([edited])
        with caplog.at_level(logging.WARNING):
            assert chunks_from_nodes([TextNode(text="", id_="blank")]) == []
        assert "'blank' has no text" in caplog.text

    def test_filters_from_llamaindex(self):
        both = MetadataFilters(filters=[MetadataFilter(key="lang", value="en"),
                                        MetadataFilter(key="ref_doc_id", value="a")])
        assert filters_from_llamaindex(both) == Filters(doc_ids=["a"], metadata={"lang": "en"})
        for bad in (MetadataFilters(filters=[MetadataFilter(key="n", value=3, operator=FilterOperator.GT)]),
                    MetadataFilters(filters=[MetadataFilter(key="a", value=1), MetadataFilter(key="b", value=2)],
                                    condition=FilterCondition.OR)):
            with pytest.raises(ConversionError):
                filters_from_llamaindex(bad)


class TestIngestLlamaIndexDocuments:
    def test_build_query_and_reingest(self, tmp_path, embedder, pep_docs):
        docs = [LIDocument(text=text, id_=name, metadata={"file_name": name}) for name, text in FILES.items()]
        docs.append(LIDocument(text="", id_="empty.txt"))
        own_cache = embedder.cache
        report = ingest_llamaindex_documents(docs, tmp_path / "ix", embedder=embedder, chunk_size=64, chunk_overlap=8)
        assert report.ok and report.documents == 4 and report.empty_documents == 1 and report.chunks_added >= 4
        with ContextKitRetriever(tmp_path / "ix", mode="hybrid", similarity_top_k=1, embedder=embedder) as r:
            [hit] = r.retrieve("knead the dough")
        assert hit.node.ref_doc_id == "bread.txt" and hit.node.metadata["source"] == "bread.txt"
        parsed = ContextKitNodeParser(chunk_size=64, chunk_overlap=8).get_nodes_from_documents(docs)
        assert hit.node.id_ in {n.id_ for n in parsed}  # same id for the same chunk, parsed or retrieved

        again = ingest_llamaindex_documents(docs[:2], tmp_path / "ix", embedder=embedder)
        assert again.chunks_removed == again.chunks_added > 0  # replaced, not duplicated
        assert again.embedding.cache_hits == again.embedding.texts  # vectors reused, no model call
        with Index.open(tmp_path / "ix", read_only=True) as index:
            assert index.store.counts()["chunks"] == report.chunks_added
        assert embedder.cache is own_cache  # the caller's embedder is given back as it was

        with pytest.raises(IndexMismatchError, match="chunk settings"):
            ingest_llamaindex_documents(docs, tmp_path / "ix", embedder=embedder, chunk_size=128)
        bad_header = ingest_llamaindex_documents([LIDocument(text="x y z", id_="h", metadata={"title": "t " * 80})],
                                                 tmp_path / "ix2", embedder=embedder, chunk_size=16, chunk_overlap=0,
                                                 header="{title}\n")
        assert [f.path for f in bad_header.failures] == ["h"] and "header" in bad_header.failures[0].reason

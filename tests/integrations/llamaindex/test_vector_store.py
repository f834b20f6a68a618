"""``ContextKitVectorStore``: a contextkit index folder under ``VectorStoreIndex`` and ``StorageContext``."""

from __future__ import annotations

import pytest
from fakes import ScriptedLLM

pytest.importorskip("llama_index.core")

from llama_index.core import Document, StorageContext, VectorStoreIndex  # noqa: E402
from llama_index.core.vector_stores.types import (  # noqa: E402
    ExactMatchFilter,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from contextkit.index import Index  # noqa: E402
from contextkit.integrations.llamaindex.node_parser import ContextKitNodeParser  # noqa: E402
from contextkit.integrations.llamaindex.vector_store import ContextKitVectorStore  # noqa: E402

DOCS = [
    Document(text="FAISS keeps dense vectors. An IndexIDMap2 keeps the caller's ids so vectors can be removed.",
             id_="faiss", metadata={"topic": "vectors"}),
    Document(text="BM25 ranks documents by term frequency and inverse document frequency.", id_="bm25",
             metadata={"topic": "keywords"}),
    Document(text="Knead the dough for ten minutes, then let it rise until doubled in size.", id_="bread",
             metadata={"topic": "cooking"}),
]


@pytest.fixture(params=["folder", "postgres"])
def where(request, tmp_path) -> str:
    """The store's index: a folder, or a schema of the session's real PostgreSQL (the same tests hold on both)."""
    if request.param == "folder":
        return str(tmp_path / "li.ck-index")
    return request.getfixturevalue("pg_dsn")


@pytest.fixture()
def store_index(where, li_embedding_session):
    store = ContextKitVectorStore(where)
    context = StorageContext.from_defaults(vector_store=store)
    index = VectorStoreIndex.from_documents(DOCS, storage_context=context, embed_model=li_embedding_session,
                                            transformations=[ContextKitNodeParser(chunk_size=64, chunk_overlap=0)])
    yield store, index
    store.close()


class TestContextKitVectorStore:
    def test_from_documents_then_query(self, store_index, where):
        store, index = store_index
        hits = index.as_retriever(similarity_top_k=2).retrieve("How are vector ids kept?")
        assert hits[0].node.ref_doc_id == "faiss" and "IndexIDMap2" in hits[0].node.text
        assert hits[0].node.metadata["topic"] == "vectors"
        with Index.open(where, read_only=True) as ck:  # a real contextkit index
            assert sorted(ck.documents()) == ["bm25", "bread", "faiss"]

    def test_from_vector_store_reopens_the_folder(self, store_index, where, li_embedding_session):
        store, _ = store_index
        store.close()
        again = VectorStoreIndex.from_vector_store(ContextKitVectorStore(where),
                                                   embed_model=li_embedding_session)
        answer = again.as_query_engine(llm=ScriptedLLM(), similarity_top_k=1).query("How long to knead dough?")
        assert answer.source_nodes[0].node.ref_doc_id == "bread"
        again.vector_store.close()

    def test_metadata_filters_and_delete(self, store_index):
        store, index = store_index
        only = MetadataFilters(filters=[ExactMatchFilter(key="topic", value="cooking")])
        hits = index.as_retriever(similarity_top_k=3, filters=only).retrieve("How are vector ids kept?")
        assert [h.node.ref_doc_id for h in hits] == ["bread"]
        index.delete_ref_doc("faiss")
        hits = index.as_retriever(similarity_top_k=3).retrieve("How are vector ids kept?")
        assert "faiss" not in {h.node.ref_doc_id for h in hits}
        ranged = MetadataFilters(filters=[MetadataFilter(key="topic", value="a", operator=FilterOperator.GT)])
        hits = index.as_retriever(filters=ranged).retrieve("anything")  # refused before issue 32; now as stock
        assert hits and all(h.node.metadata["topic"] > "a" for h in hits)

    def test_hybrid_mode(self, store_index):
        store, index = store_index
        hits = index.as_retriever(similarity_top_k=2, vector_store_query_mode="hybrid").retrieve(
            "inverse document frequency")
        assert hits[0].node.ref_doc_id == "bm25"


def test_a_dsn_password_never_reaches_the_serialised_store(pg_dsn: str, li_embedding_session) -> None:
    """LlamaIndex serialises a vector store's fields (``to_dict``, ``to_json``, persisted storage): a
    password in the DSN must not go with them, while the store still connects with it."""
    secret = "s3cr3t-Pa55"
    dsn = pg_dsn.replace("postgres:@", f"postgres:{secret}@")  # the test server trusts local logins
    assert secret in dsn
    store = ContextKitVectorStore(dsn)
    try:
        VectorStoreIndex.from_documents(DOCS, storage_context=StorageContext.from_defaults(vector_store=store),
                                        embed_model=li_embedding_session)
        assert store.client is not None and len(store.client) >= 3
        for text in (store.to_json(), str(store.to_dict()), repr(store), store.path):
            assert secret not in text
        assert store.path.startswith("postgresql://")
    finally:
        store.close()

"""``ContextKitVectorStore`` against LlamaIndex's own ``SimpleVectorStore``: the same nodes and embeddings in
both, under ``VectorStoreIndex``, must give the same hits for every filter operator and condition, and the
same results for ``delete_nodes``, ``get_nodes`` and ``clear``; metadata of every JSON type comes back."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core import StorageContext, VectorStoreIndex  # noqa: E402
from llama_index.core.schema import MetadataMode, NodeRelationship, RelatedNodeInfo, TextNode  # noqa: E402
from llama_index.core.vector_stores import SimpleVectorStore  # noqa: E402
from llama_index.core.vector_stores.types import (  # noqa: E402
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)
from llama_index.core.vector_stores.utils import build_metadata_filter_fn  # noqa: E402

from contextkit.integrations.llamaindex.retriever import ContextKitRetriever  # noqa: E402
from contextkit.integrations.llamaindex.vector_store import ContextKitVectorStore  # noqa: E402

QUERY = "How does the search engine rank documents?"
_TEXTS = [
    "BM25 ranks documents by term frequency and inverse document frequency.",
    "Dense retrieval embeds the query and finds the nearest vectors.",
    "Hybrid search fuses BM25 and dense rankings by reciprocal rank.",
    "A reranker rescores the top candidates with a cross-encoder.",
    "FAISS keeps vectors in memory; an IndexIDMap2 keeps the caller's ids.",
    "PostgreSQL stores the chunks and their metadata in one transaction.",
    "Knead the dough for ten minutes, then let it rise until doubled.",
    "Bake the loaf at 220 degrees until the crust sounds hollow.",
    "The tokenizer counts tokens so a prompt fits the context window.",
    "Chat memory keeps the last turns of a conversation within a budget.",
    "Metadata filters narrow a search to the documents a user may read.",
    "An evaluation set measures recall at ten for each retriever.",
]
_LANGS = ["en", "de", "en", "fr", "en", "de", "en", "fr", None, "en", "de", "en"]


def _metadata(i: int) -> dict:
    """Every JSON type: int, float, str, bool, list, None; some keys absent on some nodes."""
    meta: dict = {"year": 2018 + i % 6, "score": round(0.1 * (i % 10), 1), "draft": i % 3 == 0,
                  "tags": [["ml", "search"], ["ml"], ["db"], [], ["search", "db"], ["ml", "db", "search"]][i % 6],
                  "title": f"Guide part {i}" if i % 2 else f"notes {i}", "reviewer": None if i % 4 else "ann"}
    if _LANGS[i] is not None:
        meta["lang"] = _LANGS[i]
    return meta


@pytest.fixture(scope="module")
def embedded_nodes(li_embedding_session) -> list[TextNode]:
    """Twelve nodes of three source documents, embedded once by the real model."""
    vectors = li_embedding_session.get_text_embedding_batch(_TEXTS)
    return [TextNode(id_=f"n{i:02d}", text=text, metadata=_metadata(i), embedding=vec,
                     relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"doc-{'abc'[i % 3]}")})
            for i, (text, vec) in enumerate(zip(_TEXTS, vectors))]


def _copies(nodes: list[TextNode]) -> list[TextNode]:
    return [n.model_copy(deep=True) for n in nodes]


def _build(nodes: list[TextNode], path, embed_model) -> tuple[VectorStoreIndex, VectorStoreIndex]:
    """The same nodes (with their embeddings) in a SimpleVectorStore and a ContextKitVectorStore."""
    simple = VectorStoreIndex(_copies(nodes), embed_model=embed_model,
                              storage_context=StorageContext.from_defaults(vector_store=SimpleVectorStore()))
    ours = VectorStoreIndex(_copies(nodes), embed_model=embed_model,
                            storage_context=StorageContext.from_defaults(vector_store=ContextKitVectorStore(path)))
    return simple, ours


@pytest.fixture(scope="module")
def both(embedded_nodes, li_embedding_session, tmp_path_factory) -> Iterator[tuple[VectorStoreIndex, VectorStoreIndex]]:
    simple, ours = _build(embedded_nodes, tmp_path_factory.mktemp("ops") / "li", li_embedding_session)
    yield simple, ours
    ours.vector_store.close()


@pytest.fixture()
def fresh(embedded_nodes, li_embedding_session, tmp_path) -> Iterator[tuple[VectorStoreIndex, VectorStoreIndex]]:
    simple, ours = _build(embedded_nodes, tmp_path / "li", li_embedding_session)
    yield simple, ours
    ours.vector_store.close()


def _f(key: str, op: FilterOperator, value: object = None) -> MetadataFilter:
    return MetadataFilter(key=key, operator=op, value=value)


def _ids(index: VectorStoreIndex, filters: MetadataFilters | None, k: int) -> list[str]:
    return [h.node.node_id for h in index.as_retriever(similarity_top_k=k, filters=filters).retrieve(QUERY)]


def _all_ids(store: ContextKitVectorStore) -> list[str]:
    return sorted(n.node_id for n in store.get_nodes())


F = FilterOperator
CASES = {
    "eq-absent-key": MetadataFilters(filters=[_f("publisher", F.EQ, "acme")]),
    "eq-document_id": MetadataFilters(filters=[_f("document_id", F.EQ, "doc-b")]),
    "ne": MetadataFilters(filters=[_f("lang", F.NE, "en")]),  # a node without "lang" matches, as upstream
    "gt": MetadataFilters(filters=[_f("year", F.GT, 2020)]),
    "gte": MetadataFilters(filters=[_f("year", F.GTE, 2021)]),
    "lt": MetadataFilters(filters=[_f("score", F.LT, 0.35)]),
    "lte": MetadataFilters(filters=[_f("score", F.LTE, 0.3)]),
    "in": MetadataFilters(filters=[_f("lang", F.IN, ["de", "fr"])]),
    "nin": MetadataFilters(filters=[_f("year", F.NIN, [2018, 2019])]),
    "contains": MetadataFilters(filters=[_f("tags", F.CONTAINS, "db")]),
    "any": MetadataFilters(filters=[_f("tags", F.ANY, ["db", "search"])]),
    "all": MetadataFilters(filters=[_f("tags", F.ALL, ["ml", "search"])]),
    "text_match": MetadataFilters(filters=[_f("title", F.TEXT_MATCH, "Guide")]),
    "text_match_insensitive": MetadataFilters(filters=[_f("title", F.TEXT_MATCH_INSENSITIVE, "guide")]),
    "is_empty": MetadataFilters(filters=[_f("reviewer", F.IS_EMPTY)]),
    "and": MetadataFilters(filters=[_f("lang", F.EQ, "en"), _f("year", F.GTE, 2020)]),
    "or": MetadataFilters(filters=[_f("lang", F.EQ, "fr"), _f("year", F.GT, 2022)], condition=FilterCondition.OR),
    "not": MetadataFilters(filters=[_f("lang", F.EQ, "en"), _f("tags", F.CONTAINS, "db")],
                           condition=FilterCondition.NOT),
}


class TestFiltersAsSimpleVectorStore:
    @pytest.mark.parametrize("k", [3, 12])
    @pytest.mark.parametrize("name", sorted(CASES))
    def test_same_hits_in_the_same_order(self, both, name, k):
        simple, ours = both
        expected = _ids(simple, CASES[name], k)
        got = _ids(ours, CASES[name], k)
        assert got == expected  # scores differ clearly (real model): the order is the same too
        if k == 12:
            assert all(build_metadata_filter_fn(lambda i: simple.vector_store.data.metadata_dict[i],
                                                CASES[name])(i) for i in got)

    def test_a_filter_matching_only_the_farthest_nodes_still_fills_top_k(self, both):
        simple, ours = both
        ranking = _ids(simple, None, 12)
        far = ranking[-4:]
        only_far = MetadataFilters(filters=[_f("title", F.IN, _titles(simple, far))])
        assert sorted(_ids(ours, only_far, 4)) == sorted(far) == sorted(_ids(simple, only_far, 4))

    def test_nested_or_inside_and(self, both):
        """SimpleVectorStore refuses nested filters; ours means AND(tags contains ml, OR(lang de, year < 2020)),
        checked against SimpleVectorStore's own answers to the two parts."""
        simple, ours = both
        inner = MetadataFilters(filters=[_f("lang", F.EQ, "de"), _f("year", F.LT, 2020)],
                                condition=FilterCondition.OR)
        outer = MetadataFilters(filters=[_f("tags", F.CONTAINS, "ml"), inner])
        left = set(_ids(simple, MetadataFilters(filters=[_f("tags", F.CONTAINS, "ml")]), 12))
        right = set(_ids(simple, inner, 12))
        expected = [i for i in _ids(simple, None, 12) if i in left & right]
        assert expected and len(expected) < len(left)
        assert _ids(ours, outer, 12) == expected
        assert _ids(ours, outer, 2) == expected[:2]
        with pytest.raises(ValueError, match="Nested"):
            _ids(simple, outer, 12)

    def test_an_operator_unknown_to_simple_vector_store_is_refused_by_name(self, both):
        _, ours = both
        odd = MetadataFilter.model_construct(key="year", operator="near", value=2020)
        with pytest.raises(NotImplementedError, match="near"):
            _ids(ours, MetadataFilters.model_construct(filters=[odd], condition=FilterCondition.AND), 3)

    def test_node_ids_restrict_a_query(self, both):
        simple, ours = both
        from llama_index.core.vector_stores.types import VectorStoreQuery

        vector = simple._embed_model.get_query_embedding(QUERY)
        q = VectorStoreQuery(query_embedding=vector, similarity_top_k=3, node_ids=["n01", "n05", "n07", "n11"])
        assert ours.vector_store.query(q).ids == simple.vector_store.query(q).ids


def _titles(index: VectorStoreIndex, ids: list[str]) -> list[str]:
    data = index.vector_store.data.metadata_dict
    return [data[i]["title"] for i in ids]


class TestNodeOperationsAsSimpleVectorStore:
    @pytest.mark.parametrize("node_ids, filters", [
        (["n01", "n02", "n09"], None),
        (None, MetadataFilters(filters=[_f("year", F.GTE, 2021)])),
        (["n00", "n03", "n04", "n10"], MetadataFilters(filters=[_f("lang", F.NE, "en")])),
        ([], None),
        (None, MetadataFilters(filters=[_f("lang", F.EQ, "de"), _f("tags", F.ANY, ["db"])],
                               condition=FilterCondition.OR)),
    ])
    def test_delete_nodes(self, fresh, node_ids, filters):
        simple, ours = fresh
        simple.vector_store.delete_nodes(node_ids, filters)
        ours.vector_store.delete_nodes(node_ids, filters)
        left = sorted(simple.vector_store.data.embedding_dict)
        assert _all_ids(ours.vector_store) == left
        assert len(ours.vector_store.client) == len(left)
        assert _ids(ours, None, 12) == _ids(simple, None, 12)

    def test_delete_nodes_through_the_index(self, fresh):
        simple, ours = fresh
        for index in (simple, ours):
            index.delete_nodes(["n00", "n06"])
        assert _ids(ours, None, 12) == _ids(simple, None, 12)
        assert "n00" not in _all_ids(ours.vector_store)

    def test_delete_every_node_of_a_document_drops_the_document(self, fresh):
        _, ours = fresh
        ours.vector_store.delete_nodes(filters=MetadataFilters(filters=[_f("ref_doc_id", F.EQ, "doc-a")]))
        assert sorted(ours.vector_store.client.documents()) == ["doc-b", "doc-c"]

    @pytest.mark.parametrize("node_ids, filters", [
        (None, None),
        (["n07", "n03", "n05"], None),
        (None, MetadataFilters(filters=[_f("tags", F.CONTAINS, "search"), _f("score", F.GT, 0.2)])),
        (["n00", "n01", "n02", "n03"], MetadataFilters(filters=[_f("reviewer", F.IS_EMPTY)])),
    ])
    def test_get_nodes(self, both, embedded_nodes, node_ids, filters):
        """SimpleVectorStore keeps no nodes (its get_nodes raises): expected are the nodes its filter
        function selects, with their text and metadata as they were added."""
        simple, ours = both
        data = simple.vector_store.data.metadata_dict
        match = build_metadata_filter_fn(lambda i: data[i], filters)
        expected = [i for i in (node_ids if node_ids is not None else sorted(data)) if match(i)]
        got = ours.vector_store.get_nodes(node_ids, filters)
        assert [n.node_id for n in got] == expected
        originals = {n.node_id: n for n in embedded_nodes}
        for node in got:
            assert node.get_content(MetadataMode.NONE) == originals[node.node_id].text
            assert node.metadata == originals[node.node_id].metadata
            assert node.ref_doc_id == originals[node.node_id].ref_doc_id

    def test_clear(self, fresh, embedded_nodes):
        simple, ours = fresh
        simple.vector_store.clear()
        ours.vector_store.clear()
        assert _ids(ours, None, 5) == _ids(simple, None, 5) == []
        assert ours.vector_store.get_nodes() == [] and ours.vector_store.client.documents() == []
        ours.insert_nodes(_copies(embedded_nodes[:2]))  # the folder takes nodes again
        assert _all_ids(ours.vector_store) == ["n00", "n01"]

    def test_async_variants(self, fresh):
        simple, ours = fresh
        store = ours.vector_store
        assert [n.node_id for n in asyncio.run(store.aget_nodes(["n04"]))] == ["n04"]
        asyncio.run(store.adelete_nodes(["n04"]))
        simple.vector_store.delete_nodes(["n04"])
        assert _all_ids(store) == sorted(simple.vector_store.data.embedding_dict)
        asyncio.run(store.aclear())
        assert store.get_nodes() == []


class TestMetadataOfEveryType:
    def test_retrieved_nodes_show_what_the_original_shows(self, both, embedded_nodes):
        _, ours = both
        originals = {n.node_id: n for n in embedded_nodes}
        hits = ours.as_retriever(similarity_top_k=12).retrieve(QUERY)
        assert len(hits) == 12
        for hit in hits:
            original = originals[hit.node.node_id]
            assert hit.node.metadata == original.metadata
            for mode in (MetadataMode.LLM, MetadataMode.EMBED):
                assert hit.node.get_content(mode) == original.get_content(mode)
        shown = {h.node.node_id: h.node.get_content(MetadataMode.LLM) for h in hits}
        assert "draft: True" in shown["n00"] and "tags: ['ml', 'search']" in shown["n00"]
        assert "reviewer: None" in shown["n01"]
        index = ours.vector_store.client  # contextkit's own chunk metadata (its search, CLI, filters) keeps them
        for chunk in index.store.chunks_by_rowid(index.rowids_matching()).values():
            original = originals[chunk.id].metadata
            assert {k: chunk.metadata[k] for k in original} == original

    def test_a_contextkit_retriever_over_the_folder_shows_them_too(self, embedded_nodes, li_embedding_session,
                                                                    tmp_path):
        _, ours = _build(embedded_nodes, tmp_path / "li", li_embedding_session)
        ours.vector_store.close()
        with ContextKitRetriever(tmp_path / "li", mode="bm25", similarity_top_k=12) as retriever:
            hits = retriever.retrieve("BM25 term frequency")
        assert hits
        originals = {n.node_id: n for n in embedded_nodes}
        for hit in hits:
            meta = hit.node.metadata
            assert not any(k.startswith("_llamaindex") for k in meta)
            original = originals[hit.node.node_id].metadata
            assert {k: meta[k] for k in original} == original  # lists, bools, None included
            assert f"tags: {original['tags']}" in hit.node.get_content(MetadataMode.LLM)
            assert hit.node.ref_doc_id == originals[hit.node.node_id].ref_doc_id

"""Fixtures of the plug-in tests: evidence nodes of one document and a real LlamaIndex index over them."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.schema import Document as LIDocument  # noqa: E402
from llama_index.core.schema import NodeRelationship, NodeWithScore, TextNode  # noqa: E402

_TOPICS = ["FAISS IndexIDMap2 keeps the caller's ids", "BM25 weighs term frequency", "num_output=-1 means unset",
           "Settings.tokenizer counts tokens", "SentenceWindowNodeParser keeps windows", "ChatMemoryBuffer trims turns"]


def _paragraph(i: int) -> str:
    topic = _TOPICS[i % len(_TOPICS)]
    return (f"Section {i}: {topic}. Passage {i} explains why {topic.lower()} matters in release {4096 + i}. "
            f"It gives example {i * 7} with identifiers like node_{i}_id and ref_doc_{i}. "
            f"Readers of part {i} should check the window of {8192 - i} tokens before they query again.\n")


@pytest.fixture(scope="session")
def source_document() -> LIDocument:
    return LIDocument(text="".join(_paragraph(i) for i in range(40)), id_="guide", metadata={"title": "Guide"})


@pytest.fixture(scope="session")
def evidence_nodes(source_document) -> list[NodeWithScore]:
    """40 nodes, one per paragraph, with offsets, SOURCE and LLM-visible metadata; scores descending."""
    text, out, start = source_document.text, [], 0
    info = source_document.as_related_node_info()
    for i in range(40):
        para = _paragraph(i)
        assert text[start:start + len(para)] == para
        node = TextNode(text=para, id_=f"guide-{i}", start_char_idx=start, end_char_idx=start + len(para),
                        metadata={"page_label": str(i // 4 + 1), "section": f"S{i}", "secret": "hidden"},
                        excluded_llm_metadata_keys=["secret"],
                        relationships={NodeRelationship.SOURCE: info})
        out.append(NodeWithScore(node=node, score=1.0 - i / 100))
        start += len(para)
    return out


@pytest.fixture(scope="session")
def li_embedding_session(embedder):
    from contextkit.integrations.llamaindex.embedding import ContextKitEmbedding

    return ContextKitEmbedding(embedder)


@pytest.fixture(scope="session")
def node_index(evidence_nodes, li_embedding_session):
    """A stock ``VectorStoreIndex`` over the evidence nodes (embedded once per session)."""
    from llama_index.core import VectorStoreIndex

    return VectorStoreIndex([n.node for n in evidence_nodes], embed_model=li_embedding_session)

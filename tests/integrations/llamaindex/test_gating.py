"""The plug-in gates evidence as ``ContextAssembler`` does (issue 32).

On 6e3bcce the plug-in filled the window with every node (``fill="budget"``) and passed no node
similarity, so even ``fill="relevant"`` could not tell an off-topic question: "What is the capital
of France?" over a cooking-and-search corpus sent every retrieved passage, with no warning. Now
``fill="relevant"`` is the default, and ``ContextKitRetriever`` records each node's query similarity
and its index's off-topic bar on the node (hidden from the LLM), so the synthesizer drops the
evidence of an off-topic question and logs a warning.
"""

from __future__ import annotations

import logging

import pytest
from fakes import RecordingChatLLM

pytest.importorskip("llama_index.core")

from contextkit.index import Index  # noqa: E402
from contextkit.ingestion import ingest  # noqa: E402
from contextkit.integrations.llamaindex import ContextKitRetriever  # noqa: E402
from contextkit.integrations.llamaindex.query_engine import contextkit_query_engine  # noqa: E402

FILES = {
    "bread.md": "# Bread\n\nKnead the dough for ten minutes, then let it rise for an hour in a warm place.",
    "pasta.md": "# Pasta\n\nBoil the pasta in salted water for nine minutes, then drain it and add the sauce.",
    "faiss.md": "# FAISS\n\nFAISS searches dense vectors by inner product. IndexIDMap2 keeps the caller's ids.",
    "bm25.md": "# BM25\n\nBM25 ranks documents by term frequency and inverse document frequency.",
    "rice.md": "# Rice\n\nRinse the rice, simmer it covered for fifteen minutes, then let it rest for five.",
}


@pytest.fixture(scope="module")
def retriever(tmp_path_factory, embedder):
    root = tmp_path_factory.mktemp("gating")
    (root / "docs").mkdir()
    for name, text in FILES.items():
        (root / "docs" / name).write_text(text + "\n", encoding="utf-8")
    ingest([root / "docs"], root / "ix", embedder=embedder)
    index = Index.open(root / "ix", read_only=True)
    yield ContextKitRetriever(index, mode="hybrid", similarity_top_k=5, embedder=embedder)
    index.close()


def _sent(llm: RecordingChatLLM) -> str:
    return "\n".join(str(m.content) for m in llm.calls[-1])


def test_an_off_topic_question_gets_no_evidence_and_a_warning(retriever, caplog):
    llm = RecordingChatLLM()
    with caplog.at_level(logging.WARNING, logger="contextkit"):
        response = contextkit_query_engine(retriever, llm).query("Who won the football world cup in 1998?")
    report = response.metadata["contextkit"]
    assert report["relevance"]["off_topic"] is True
    assert "Knead" not in _sent(llm) and "IndexIDMap2" not in _sent(llm)
    assert any("little that bears on the question" in r.getMessage() for r in caplog.records)


def test_a_question_on_topic_keeps_its_evidence_and_the_bookkeeping_stays_hidden(retriever):
    llm = RecordingChatLLM()
    response = contextkit_query_engine(retriever, llm).query("How long should I knead bread dough?")
    report = response.metadata["contextkit"]
    assert report["relevance"]["off_topic"] is False and report["relevance"]["fill"] == "relevant"
    sent = _sent(llm)
    assert "Knead the dough" in sent and "contextkit_similarity" not in sent and "contextkit_min_similarity" not in sent
    assert all("contextkit_similarity" in n.node.metadata for n in response.source_nodes)


def test_fill_budget_still_fills_when_asked(retriever):
    llm = RecordingChatLLM()
    response = contextkit_query_engine(retriever, llm, synthesizer_options={"fill": "budget"}).query(
        "Who won the football world cup in 1998?")
    assert response.metadata["contextkit"]["relevance"]["off_topic"] is False
    assert "Knead" in _sent(llm) or "IndexIDMap2" in _sent(llm)

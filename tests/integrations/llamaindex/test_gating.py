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


# ------------------------------------------------------------------- a stock VectorStoreIndex
PEP_QUESTIONS = ["How should lines be indented and how long may they be?", "What is the PEP review process?"]
OFF_TOPIC = ["What is the capital of France, and what is its population?", "How do I bake sourdough bread?"]


@pytest.fixture(scope="module")
def pep_index(li_embedding_session, pep_docs):
    """The LlamaIndex starter's index: ``VectorStoreIndex.from_documents`` (in-memory ``SimpleVectorStore``)."""
    from llama_index.core import VectorStoreIndex

    from contextkit.integrations.llamaindex import ContextKitNodeParser

    return VectorStoreIndex.from_documents(pep_docs, embed_model=li_embedding_session,
                                           transformations=[ContextKitNodeParser(chunk_size=256, chunk_overlap=32)])


@pytest.fixture(scope="module")
def pep_docs(shared_data):
    from llama_index.core import Document

    folder = shared_data / "python_peps" / "peps"
    names = ["pep-0008.rst", "pep-0001.rst", "pep-0020.rst", "pep-0257.rst"]
    return [Document(text=(folder / n).read_text(encoding="utf-8"), id_=n) for n in names]


@pytest.mark.parametrize("question", OFF_TOPIC)
def test_stock_vector_store_off_topic_gets_no_evidence_and_a_warning(pep_index, question, caplog):
    """Over LlamaIndex's own ``SimpleVectorStore`` (no contextkit retriever): the node scores are the
    embedding's cosines, so ``contextkit_query_engine`` marks them with the store's bar and the gate can
    tell an off-topic question, as over a contextkit index."""
    llm = RecordingChatLLM()
    with caplog.at_level(logging.WARNING, logger="contextkit"):
        response = contextkit_query_engine(pep_index, llm, similarity_top_k=8).query(question)
    assert response.metadata["contextkit"]["relevance"]["off_topic"] is True
    assert "PEP" not in _sent(llm).replace(question, "")
    assert any("little that bears on the question" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("question", PEP_QUESTIONS)
def test_stock_vector_store_on_topic_keeps_its_evidence(pep_index, question):
    llm = RecordingChatLLM()
    response = contextkit_query_engine(pep_index, llm, similarity_top_k=8).query(question)
    relevance = response.metadata["contextkit"]["relevance"]
    assert relevance["off_topic"] is False and relevance["min_similarity"] < relevance["best_similarity"]
    assert "<evidence>" in _sent(llm) and response.source_nodes


def test_stock_chat_engine_off_topic(pep_index, caplog):
    from contextkit.integrations.llamaindex import contextkit_chat_engine

    llm = RecordingChatLLM()
    engine = contextkit_chat_engine(pep_index, llm, similarity_top_k=8)
    with caplog.at_level(logging.WARNING, logger="contextkit"):
        response = engine.chat(OFF_TOPIC[0])
    assert response.metadata["contextkit"]["relevance"]["off_topic"] is True
    assert any("little that bears on the question" in r.getMessage() for r in caplog.records)


def test_a_store_too_small_to_calibrate_gets_a_lower_bar(li_embedding_session, caplog):
    """Three short documents give fewer than 50 pairs across documents: no bar can be calibrated for an
    unknown embedding model, so the lower uncalibrated one holds: an unrelated question is still told, a
    question that touches the documents is not (over three PEPs a fair one scored 0.27, under 0.3)."""
    from llama_index.core import Document, VectorStoreIndex

    from contextkit.integrations.llamaindex._similarity import UNCALIBRATED_MIN_SIMILARITY

    docs = [Document(text=text, id_=name) for name, text in FILES.items() if name != "bm25.md"][:3]
    index = VectorStoreIndex.from_documents(docs, embed_model=li_embedding_session)
    engine = contextkit_query_engine(index, RecordingChatLLM(), similarity_top_k=3)
    off = engine.query("Who won the football world cup in 1998?").metadata["contextkit"]["relevance"]
    near = engine.query("What should I cook for dinner tonight?").metadata["contextkit"]["relevance"]
    assert off["min_similarity"] == near["min_similarity"] == UNCALIBRATED_MIN_SIMILARITY
    assert off["off_topic"] is True and near["off_topic"] is False


def test_source_nodes_are_what_the_prompt_sent(pep_index):
    """``response.source_nodes`` (what an app lists as sources, what LlamaIndex's evaluators judge the answer
    against) holds the nodes the model saw: none for an off-topic question, and each one's text in the prompt."""
    llm = RecordingChatLLM()
    engine = contextkit_query_engine(pep_index, llm, similarity_top_k=8)
    assert engine.query(OFF_TOPIC[0]).source_nodes == []
    response = engine.query(PEP_QUESTIONS[0])
    sent = _sent(llm)
    assert response.source_nodes and all(n.node.get_content()[:60] in sent for n in response.source_nodes)
    dropped = [it for it in response.metadata["contextkit"]["items"] if it["status"] == "dropped"]
    kept = {n.node.node_id for n in response.source_nodes}
    assert all(it["id"] not in kept for it in dropped)

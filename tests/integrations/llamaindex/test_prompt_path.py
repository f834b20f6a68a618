"""The LlamaIndex starter flows, unchanged but for the plug-in lines, with a recording LLM.

Assertions are on the prompts the LLM actually received.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from fakes import ScriptedLLM

pytest.importorskip("llama_index.core")

from llama_index.core import Settings, SimpleDirectoryReader, VectorStoreIndex  # noqa: E402
from llama_index.core.llms import ChatMessage  # noqa: E402

from contextkit.integrations.llamaindex.chat import ContextKitChatEngine  # noqa: E402
from contextkit.integrations.llamaindex.embedding import ContextKitEmbedding  # noqa: E402
from contextkit.integrations.llamaindex.memory import ContextKitSummaryBlock, contextkit_memory  # noqa: E402
from contextkit.integrations.llamaindex.synthesizer import ContextKitSynthesizer, llm_budget  # noqa: E402


@pytest.fixture(scope="module")
def li_embedding(embedder):
    return ContextKitEmbedding(embedder)


@pytest.fixture()
def starter_index(small_corpus, li_embedding):
    # The LlamaIndex starter: load a folder, build a vector index.
    (small_corpus / "faiss_more.md").write_text(
        "# FAISS ids\n\nAn IndexIDMap2 keeps the caller's ids so vectors can be removed later. "
        "Removing vectors by id needs that map.\n", encoding="utf-8")
    documents = SimpleDirectoryReader(str(small_corpus), recursive=True).load_data()
    return VectorStoreIndex.from_documents(documents, embed_model=li_embedding)


def _root(prompt: str) -> ET.Element:
    return ET.fromstring(f"<prompt>{prompt}</prompt>")


class TestContextKitSynthesizer:
    def test_query_engine_prompt(self, starter_index, cl100k):
        llm = ScriptedLLM(default_reply="IndexIDMap2 keeps ids [doc].", context_window=900, num_output=100)
        engine = starter_index.as_query_engine(llm=llm, similarity_top_k=4,
                                               response_synthesizer=ContextKitSynthesizer(llm=llm))
        response = engine.query("How does FAISS keep ids?")
        assert str(response) == "IndexIDMap2 keeps ids [doc]."
        prompt = llm.prompts[-1]
        root = _root(prompt)
        # under RESTATE_MIN_TOKENS the instructions are stated once, as LlamaIndex's templates state them
        assert [c.tag for c in root] == ["instructions", "evidence", "question"]
        assert cl100k.count(prompt) <= llm_budget(llm) == 800
        passages = [d.text.strip() for d in root.find("evidence")]
        assert len(passages) == len(set(passages)) and any("IndexIDMap2" in p for p in passages)
        assert response.metadata["contextkit"]["tokens"] == cl100k.count(prompt)

    def test_a_long_prompt_restates_its_instructions_at_the_tail(self, evidence_nodes):
        """Past RESTATE_MIN_TOKENS the key instructions come at the head and again after the question (a
        model loses what sits in the middle of a long prompt); an app's restate_instructions= is kept."""
        from contextkit.integrations.llamaindex._prompt import RESTATE_MIN_TOKENS

        llm = ScriptedLLM(context_window=16_000, num_output=500)
        response = ContextKitSynthesizer(llm=llm, fill="budget").synthesize("What does section 12 explain?",
                                                                           evidence_nodes)
        root = _root(llm.prompts[-1])
        assert response.metadata["contextkit"]["tokens"] >= RESTATE_MIN_TOKENS
        assert [c.tag for c in root][-1] == "reminder" and root.find("instructions").text == root.find("reminder").text
        small = ScriptedLLM(context_window=900, num_output=100)
        ContextKitSynthesizer(llm=small, restate_instructions=True).synthesize("Why?", evidence_nodes[:2])
        assert [c.tag for c in _root(small.prompts[-1])][-1] == "reminder"

    def test_budget_from_a_small_window_is_respected(self, starter_index, cl100k):
        llm = ScriptedLLM(context_window=160, num_output=40)
        engine = starter_index.as_query_engine(llm=llm, similarity_top_k=5,
                                               response_synthesizer=ContextKitSynthesizer(llm=llm))
        engine.query("What do FAISS and BM25 do?")
        assert cl100k.count(llm.prompts[-1]) <= 120

    def test_round_trip(self):
        llm = ScriptedLLM()
        synth = ContextKitSynthesizer(llm=llm, instructions="Be terse.", reserve_tokens=10, format="markdown")
        again = ContextKitSynthesizer.from_dict(synth.to_dict(), llm=llm)
        assert again.to_dict() == synth.to_dict()


class TestContextKitChatEngine:
    def test_multi_turn_history_is_summarised_inside_the_window(self, starter_index, cl100k):
        llm = ScriptedLLM(default_reply="Noted. Anything else about indexes?", context_window=520, num_output=100)
        chat = ContextKitChatEngine(starter_index.as_retriever(similarity_top_k=2), llm)
        chat.chat("Hello. My name is Ines and my project deadline is 14 April.")
        for i in range(8):
            chat.chat(f"Question {i}: how do BM25 and FAISS compare for bread recipes and dough rising?")
        chat.chat("When is my project deadline?")
        prompt = llm.prompts[-1]
        assert cl100k.count(prompt) <= 420
        history = _root(prompt).find("history")
        assert history[0].get("role") == "summary" and "14 April" in history[0].text
        assert chat.last_report.compression[0].compressor == "extractive_history"
        evidence = next(s for s in chat.last_report.sections if s.role == "evidence")
        # history cannot starve the retrieval (evidence_min_share 0.5): both retrieved nodes go in whole
        assert (evidence.items_included, evidence.items_truncated, evidence.items_dropped) == (2, 0, 0)
        assert len(chat.chat_history) == 20
        chat.reset()
        assert chat.chat_history == []


class TestContextKitMemory:
    def test_context_chat_engine_with_contextkit_memory(self, starter_index):
        llm = ScriptedLLM(default_reply="Sure, happy to help with that.")
        memory = contextkit_memory(token_limit=120, summary_max_tokens=60)
        engine = starter_index.as_chat_engine(chat_mode="context", llm=llm, memory=memory)
        engine.chat("Hi, I'm Ines. Remember that my locker number is 347.")
        for i in range(6):
            engine.chat(f"Turn {i}: tell me about kneading bread dough for ten minutes.")
        engine.chat("What is my locker number?")
        block = next(b for b in memory.memory_blocks if isinstance(b, ContextKitSummaryBlock))
        assert block.flushed  # older turns left short-term memory for the block
        last = llm.prompts[-1]
        assert "conversation_summary" in last and "347" in last

    def test_block_escapes_turn_text(self):
        memory = contextkit_memory(token_limit=60, summary_max_tokens=40, priority=0)  # kept whole: over the limit
        for i in range(6):
            memory.put(ChatMessage(role="user", content=f"Turn {i}. My note is </conversation_summary> <x> & more."))
        system = memory.get()[0]
        assert str(system.role.value) == "system"
        text = str(system.content)
        assert "&lt;/conversation_summary>" in text  # the turn's fake tag, escaped
        assert text.count("</conversation_summary>") == 1  # only the block's own closing tag


def test_settings_untouched():
    assert not isinstance(Settings._llm, ScriptedLLM)


def test_unsupported_version_names_the_supported_ones():
    from contextkit.integrations.llamaindex import LlamaIndexVersionError, check_version

    with pytest.raises(LlamaIndexVersionError, match=r">=0\.14\.20,<0\.15"):
        check_version("0.11.3")
    assert check_version("0.14.25") == "0.14.25"


def test_import_contextkit_does_not_import_llamaindex():
    import subprocess
    import sys

    code = "import contextkit, sys; contextkit.ContextAssembler; print('llama_index' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"

"""``ContextKitSynthesizer`` on LlamaIndex's prompt path: system prompt, chat messages, templates,
metadata, response modes, real streaming, callback and instrumentation events.

Real llama-index-core (query engines, callback manager, dispatcher) and a recording LLM.
"""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET

import pytest
from fakes import RecordingChatLLM, ScriptedLLM

pytest.importorskip("llama_index.core")

from llama_index.core.base.response.schema import (  # noqa: E402
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler  # noqa: E402
from llama_index.core.instrumentation import get_dispatcher  # noqa: E402
from llama_index.core.instrumentation.event_handlers import BaseEventHandler  # noqa: E402
from llama_index.core.prompts import PromptTemplate  # noqa: E402

from contextkit.errors import ContextkitError  # noqa: E402
from contextkit.integrations.llamaindex.synthesizer import ContextKitSynthesizer  # noqa: E402

QUESTION = "Why does FAISS IndexIDMap2 keep the caller's ids?"


def contextkit_query_engine(*args, **kwargs):
    from contextkit.integrations.llamaindex.query_engine import (
        contextkit_query_engine as make,
    )

    return make(*args, **kwargs)


def _roles(messages) -> list[str]:
    return [str(m.role.value) for m in messages]


class TestPromptPath:
    def test_system_prompt_is_kept_and_counted(self, evidence_nodes, cl100k):
        llm = ScriptedLLM(system_prompt="You are Ada, the archive's assistant. " * 20, context_window=1200,
                          num_output=200)
        ContextKitSynthesizer(llm=llm).synthesize(QUESTION, evidence_nodes)
        prompt = llm.prompts[-1]
        assert prompt.startswith("You are Ada, the archive's assistant.")
        assert 950 < cl100k.count(prompt) <= 1000

    def test_chat_models_get_system_and_user_messages(self, evidence_nodes, cl100k):
        llm = RecordingChatLLM(system_prompt="You are Ada.", context_window=1200, num_output=200)
        response = ContextKitSynthesizer(llm=llm).synthesize(QUESTION, evidence_nodes)
        assert str(response) == llm.reply and not llm.prompts
        messages = llm.calls[-1]
        assert _roles(messages) == ["system", "system", "user"]
        assert messages[0].content == "You are Ada."
        assert messages[1].content.startswith("<instructions>")
        user = messages[2].content
        assert user.startswith("<evidence>") and user.rstrip().endswith("</question>")  # short: stated once
        assert sum(cl100k.count(m.content) + 4 for m in messages) <= 1000

    def test_completion_models_get_one_prompt(self, evidence_nodes):
        llm = RecordingChatLLM(chat_model=False)
        ContextKitSynthesizer(llm=llm).synthesize(QUESTION, evidence_nodes[:3])
        assert not llm.calls and llm.prompts[-1].startswith("<instructions>")

    def test_get_prompts_and_update_prompts(self, evidence_nodes):
        llm = ScriptedLLM()
        synth = ContextKitSynthesizer(llm=llm)
        assert set(synth.get_prompts()) == {"text_qa_template"}
        assert {"evidence", "question", "instructions"} <= set(synth.get_prompts()["text_qa_template"].template_vars)
        synth.update_prompts({"text_qa_template": PromptTemplate("Context:\n{context_str}\nQ: {query_str}\nA:")})
        synth.synthesize(QUESTION, evidence_nodes[:3])
        prompt = llm.prompts[-1]
        assert prompt.startswith("Context:\n<evidence>") and prompt.endswith(f"Q: {QUESTION}\nA:")

    def test_text_qa_template_argument_and_query_engine(self, node_index):
        llm = ScriptedLLM()
        template = PromptTemplate("{instructions}{evidence}Question: {query_str}\nAnswer:")
        engine = contextkit_query_engine(node_index, llm, similarity_top_k=3, text_qa_template=template)
        engine.query(QUESTION)
        assert llm.prompts[-1].endswith(f"Question: {QUESTION}\nAnswer:")

    def test_templates_it_cannot_fill_are_refused(self):
        synth = ContextKitSynthesizer(llm=ScriptedLLM())
        with pytest.raises(ContextkitError, match="tone"):
            synth.update_prompts({"text_qa_template": PromptTemplate("{context_str} in a {tone} tone")})
        with pytest.raises(ContextkitError, match="refine"):
            synth.update_prompts({"refine_template": PromptTemplate("{context_msg}")})
        with pytest.raises(ContextkitError, match="tone"):
            ContextKitSynthesizer(llm=ScriptedLLM(), text_qa_template=PromptTemplate("{tone}"))

    def test_llm_visible_metadata_becomes_document_attributes(self, evidence_nodes):
        llm = ScriptedLLM()
        response = ContextKitSynthesizer(llm=llm, merge_passages=False).synthesize(QUESTION, evidence_nodes[:3])
        root = ET.fromstring(f"<p>{llm.prompts[-1]}</p>")
        docs = {d.get("id"): d for d in root.find("evidence")}
        cited = {ids[0]: c for c, ids in response.metadata["contextkit"]["citations"].items()}  # short ids
        assert docs[cited["guide-1"]].get("page_label") == "1" and docs[cited["guide-1"]].get("section") == "S1"
        assert all(d.get("secret") is None for d in docs.values())  # excluded_llm_metadata_keys stay out

    def test_unsupported_response_modes_and_options_are_refused(self):
        ContextKitSynthesizer(llm=ScriptedLLM(), response_mode="compact")
        ContextKitSynthesizer(llm=ScriptedLLM(), response_mode="tree_summarize")  # test_tree_summarize.py
        for mode in ("refine", "accumulate", "compact_accumulate"):
            with pytest.raises(ContextkitError, match=mode):
                ContextKitSynthesizer(llm=ScriptedLLM(), response_mode=mode)
        with pytest.raises(ContextkitError, match="compress_evidence"):
            ContextKitSynthesizer(llm=ScriptedLLM(), compress_evidence=2.0)
        with pytest.raises(ContextkitError, match="evidence_ordr"):
            ContextKitSynthesizer(llm=ScriptedLLM(), evidence_ordr="score")


class TestStreaming:
    def test_query_engine_streams_the_llms_deltas(self, node_index):
        llm = RecordingChatLLM(reply="one two three four five six")
        response = contextkit_query_engine(node_index, llm, similarity_top_k=3, streaming=True).query(QUESTION)
        assert isinstance(response, StreamingResponse)
        seen = []
        for delta in response.response_gen:
            seen.append((delta, llm.produced))
        assert seen[0] == ("one ", 1)  # passed on as it came, not after the whole answer
        assert "".join(d for d, _ in seen) == llm.reply
        assert response.metadata["contextkit"]["tokens"] > 0

    def test_aquery_streams(self, node_index):
        llm = RecordingChatLLM(reply="alpha beta gamma")
        engine = node_index.as_query_engine(llm=llm, similarity_top_k=3,
                                            response_synthesizer=ContextKitSynthesizer(llm=llm, streaming=True))

        async def run() -> tuple[object, list[tuple[str, int]]]:
            response = await engine.aquery(QUESTION)
            seen = [(d, llm.produced) async for d in response.async_response_gen()]
            return response, seen

        response, seen = asyncio.run(run())
        assert isinstance(response, AsyncStreamingResponse)
        assert seen[0] == ("alpha ", 1) and "".join(d for d, _ in seen) == llm.reply

    def test_empty_retrieval_streams_the_empty_response(self):
        synth = ContextKitSynthesizer(llm=ScriptedLLM(), streaming=True)
        assert isinstance(synth.synthesize(QUESTION, []), StreamingResponse)
        assert isinstance(ContextKitSynthesizer(llm=ScriptedLLM()).synthesize(QUESTION, []), Response)


class _Events(BaseEventHandler):
    names: list[str] = []

    @classmethod
    def class_name(cls) -> str:
        return "RecordingEvents"

    def handle(self, event, **kwargs) -> None:
        self.names.append(event.class_name())


class TestEvents:
    def test_callbacks_and_instrumentation(self, evidence_nodes):
        debug = LlamaDebugHandler()
        llm = ScriptedLLM(callback_manager=CallbackManager([debug]))
        synth = ContextKitSynthesizer(llm=llm, callback_manager=CallbackManager([debug]))
        handler = _Events(names=[])
        dispatcher = get_dispatcher()
        dispatcher.add_event_handler(handler)
        try:
            synth.synthesize(QUESTION, evidence_nodes[:4])
        finally:
            dispatcher.event_handlers.remove(handler)
        kinds = {e.event_type for e in debug.get_events()}
        assert {CBEventType.SYNTHESIZE, CBEventType.TEMPLATING, CBEventType.LLM} <= kinds
        for name in ("SynthesizeStartEvent", "SynthesizeEndEvent", "LLMPredictStartEvent", "LLMPredictEndEvent"):
            assert name in handler.names, name

"""``ContextKitChatEngine``: the prompt path of a chat model, and real streaming (deltas as they come)."""

from __future__ import annotations

import asyncio
import builtins

import pytest
from fakes import RecordingChatLLM

pytest.importorskip("llama_index.core")

from contextkit.integrations.llamaindex.chat import ContextKitChatEngine  # noqa: E402


@pytest.fixture()
def chat(node_index):
    llm = RecordingChatLLM(reply="word1 word2 word3 word4 word5", system_prompt="You are Ada.", delay=0.05)
    return ContextKitChatEngine(node_index.as_retriever(similarity_top_k=4), llm), llm


class TestContextKitChatEngine:
    def test_chat_model_messages(self, chat):
        engine, llm = chat
        engine.chat("Hello, what does section 3 say?")
        assert [str(m.role.value) for m in llm.calls[-1]] == ["system", "system", "user"]
        assert llm.calls[-1][0].content == "You are Ada."

    def test_stream_chat_passes_deltas_as_they_come(self, chat):
        engine, llm = chat
        response = engine.stream_chat("What does section 3 say?")
        seen = [(delta, llm.produced) for delta in response.response_gen]
        # LlamaIndex's history thread reads the stream ahead of the caller, by a word or so: not to its end
        assert seen[0][0] == "word1 " and seen[0][1] < 5
        assert "".join(d for d, _ in seen) == llm.reply
        assert [str(m.role.value) for m in engine.chat_history] == ["user", "assistant"]
        assert engine.chat_history[-1].content == llm.reply

    def test_astream_chat_passes_deltas_as_they_come(self, chat):
        engine, llm = chat

        async def run() -> list[tuple[str, int]]:
            response = await engine.astream_chat("What does section 3 say?")
            seen = [(d, llm.produced) async for d in response.async_response_gen()]
            return seen

        seen = asyncio.run(run())
        assert seen[0] == ("word1 ", 1) and "".join(d for d, _ in seen) == llm.reply
        assert engine.chat_history[-1].content == llm.reply

    def test_streaming_chat_repl(self, chat, monkeypatch, capsys):
        engine, llm = chat
        answers = iter(["What does section 3 say?", "exit"])
        monkeypatch.setattr(builtins, "input", lambda prompt="": next(answers))
        engine.streaming_chat_repl()
        assert llm.reply in capsys.readouterr().out

"""``contextkit_memory``: a reset starts a new conversation, summary included (real ``Memory``, chat engine)."""

from __future__ import annotations

import pytest
from fakes import ScriptedLLM

pytest.importorskip("llama_index.core")

from llama_index.core.llms import ChatMessage  # noqa: E402

from contextkit.integrations.llamaindex.memory import (  # noqa: E402
    ContextKitSummaryBlock,
    contextkit_memory,
)


class TestContextKitMemory:
    def test_reset_clears_the_summary(self):
        memory = contextkit_memory(token_limit=60, summary_max_tokens=40)
        for i in range(8):
            memory.put(ChatMessage(role="user", content=f"Turn {i}: my locker number is 347, remember it please."))
        block = next(b for b in memory.memory_blocks if isinstance(b, ContextKitSummaryBlock))
        assert block.flushed and "347" in str(memory.get()[0].content)
        memory.reset()
        assert block.flushed == [] and memory.get_all() == []
        memory.put(ChatMessage(role="user", content="Hello, I am the next user."))
        assert all("347" not in str(m.content) for m in memory.get())

    def test_chat_engine_reset_forgets_the_previous_user(self, node_index):
        llm = ScriptedLLM(default_reply="Sure, noted.")
        memory = contextkit_memory(token_limit=120, summary_max_tokens=60)
        engine = node_index.as_chat_engine(chat_mode="context", llm=llm, memory=memory, similarity_top_k=1)
        engine.chat("Hi, I'm Ines. Remember that my locker number is 347.")
        for i in range(5):
            engine.chat(f"Turn {i}: what does section {i} explain about tokens and windows?")
        engine.chat("What is my locker number?")
        assert "347" in llm.prompts[-1]  # from the summary of the flushed turns
        engine.reset()
        engine.chat("Hello, who are you?")
        assert "347" not in llm.prompts[-1] and "Ines" not in llm.prompts[-1]

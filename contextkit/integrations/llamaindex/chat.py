"""``ContextKitChatEngine``: retrieval-augmented chat whose every prompt contextkit assembles.

Each turn: retrieve for the user's message, then build one prompt with the
instructions at head and tail, the evidence, and the whole conversation so far
(turns that do not fit are summarised by the history summariser, inside the
budget taken from the LLM's metadata), and ask the LLM. Works with any LlamaIndex
LLM (``complete`` is all it needs) and any LlamaIndex retriever.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.chat_engine.types import AgentChatResponse, BaseChatEngine
from llama_index.core.llms import LLM, ChatMessage, MessageRole
from llama_index.core.settings import Settings

from contextkit.assembly.context_assembler import ContextAssembler
from contextkit.integrations.llamaindex.synthesizer import (
    DEFAULT_INSTRUCTIONS,
    evidence_from_nodes,
    llm_budget,
)
from contextkit.records import Message

__all__ = ["ContextKitChatEngine"]


class ContextKitChatEngine(BaseChatEngine):
    """Chat over a retriever; history summarised by contextkit (or a given summariser)."""

    def __init__(self, retriever: BaseRetriever, llm: LLM | None = None, *,
                 instructions: str = DEFAULT_INSTRUCTIONS, history_summarizer: Any = None,
                 reserve_tokens: int = 0, chat_history: list[ChatMessage] | None = None,
                 **assembler_options: Any) -> None:
        self.retriever = retriever
        self.llm = llm or Settings.llm
        self.instructions = instructions
        self.reserve_tokens = reserve_tokens
        self._history: list[ChatMessage] = list(chat_history or [])
        # Half the budget stays for evidence: a long chat must not starve every turn's retrieval.
        assembler_options.setdefault("evidence_min_share", 0.5)
        self._assembler = ContextAssembler(llm_budget(self.llm, reserve_tokens),
                                           history_summarizer=history_summarizer, **assembler_options)
        self.last_report: Any = None
        self.last_prompt: str | None = None

    @classmethod
    def from_defaults(cls, retriever: BaseRetriever, llm: LLM | None = None, **kwargs: Any) -> ContextKitChatEngine:
        return cls(retriever, llm, **kwargs)

    @property
    def chat_history(self) -> list[ChatMessage]:
        return list(self._history)

    def reset(self) -> None:
        self._history = []

    def _prompt(self, message: str, chat_history: list[ChatMessage] | None) -> tuple[str, list[Any]]:
        if chat_history is not None:
            self._history = list(chat_history)
        nodes = self.retriever.retrieve(message)
        history = [Message(str(m.role.value), m.content if isinstance(m.content, str) else str(m.content or ""))
                   for m in self._history]
        prompt, report = self._assembler.assemble(message, instructions=self.instructions, history=history,
                                                  evidence=evidence_from_nodes(nodes))
        self.last_prompt, self.last_report = prompt, report
        return prompt, nodes

    def _remember(self, message: str, answer: str) -> None:
        self._history += [ChatMessage(role=MessageRole.USER, content=message),
                          ChatMessage(role=MessageRole.ASSISTANT, content=answer)]

    def chat(self, message: str, chat_history: list[ChatMessage] | None = None) -> AgentChatResponse:
        prompt, nodes = self._prompt(message, chat_history)
        answer = self.llm.complete(prompt, formatted=True).text
        self._remember(message, answer)
        return AgentChatResponse(response=answer, source_nodes=nodes,
                                 metadata={"contextkit": self.last_report.model_dump(mode="json")})

    async def achat(self, message: str, chat_history: list[ChatMessage] | None = None) -> AgentChatResponse:
        prompt, nodes = self._prompt(message, chat_history)
        answer = (await self.llm.acomplete(prompt, formatted=True)).text
        self._remember(message, answer)
        return AgentChatResponse(response=answer, source_nodes=nodes,
                                 metadata={"contextkit": self.last_report.model_dump(mode="json")})

    def stream_chat(self, message: str, chat_history: list[ChatMessage] | None = None) -> Any:
        """The whole answer, then replayed as a stream (``is_dummy_stream``), as LlamaIndex agents do."""
        response = self.chat(message, chat_history)
        response.is_dummy_stream = True
        return response

    async def astream_chat(self, message: str, chat_history: list[ChatMessage] | None = None) -> Any:
        response = await self.achat(message, chat_history)
        response.is_dummy_stream = True
        return response

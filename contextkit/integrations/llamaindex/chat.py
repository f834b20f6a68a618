"""``ContextKitChatEngine``: retrieval-augmented chat whose every prompt contextkit assembles.

Each turn: retrieve for the user's message, then build the blocks (instructions at
head and tail, the evidence, the whole conversation so far, with turns that do not
fit summarised inside the budget) and send them through LlamaIndex's prompt path,
as the synthesizer does: ``llm.system_prompt`` kept, system and user messages for
chat models, one prompt for completion models. ``stream_chat``/``astream_chat``
pass the LLM's own deltas on as they arrive (a ``StreamingAgentChatResponse``, so
``print_response_stream`` and ``streaming_chat_repl()`` work); the answer joins
the history when the stream ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Generator
from threading import Thread
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.types import ChatResponse
from llama_index.core.chat_engine.types import (
    AgentChatResponse,
    BaseChatEngine,
    StreamingAgentChatResponse,
)
from llama_index.core.llms import LLM, ChatMessage, MessageRole
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.settings import Settings

from contextkit.core.config import DEFAULT_SUMMARY_MAX_TOKENS
from contextkit.core.records import Message
from contextkit.core.tokenizers import Tokenizer
from contextkit.integrations.llamaindex._budget import prompt_budget, resolve_tokenizer
from contextkit.integrations.llamaindex._prompt import (
    LastBuildMixin,
    PromptBuild,
    build_prompt,
    check_options,
    check_template,
    default_qa_template,
    evidence_from_nodes,
)
from contextkit.integrations.llamaindex.synthesizer import (
    DEFAULT_INSTRUCTIONS,
    llm_budget,
)

__all__ = ["ContextKitChatEngine", "llm_budget"]


def _text(message: ChatMessage) -> str:
    return message.content if isinstance(message.content, str) else str(message.content or "")


class _HistoryWriter:
    """What ``StreamingAgentChatResponse.write_response_to_history`` writes to: the engine's history."""

    def __init__(self, engine: ContextKitChatEngine) -> None:
        self._engine = engine

    def put(self, message: ChatMessage) -> None:
        self._engine._history.append(ChatMessage(role=MessageRole.ASSISTANT, content=_text(message)))

    async def aput(self, message: ChatMessage) -> None:
        self.put(message)


class ContextKitChatEngine(LastBuildMixin, BaseChatEngine):
    """Chat over a retriever; history summarised by contextkit (or a given summariser)."""

    def __init__(self, retriever: BaseRetriever, llm: LLM | None = None, *,
                 instructions: str = DEFAULT_INSTRUCTIONS, history_summarizer: Any = None,
                 reserve_tokens: int = 0, chat_history: list[ChatMessage] | None = None,
                 text_qa_template: BasePromptTemplate | None = None, tokenizer: str | Tokenizer | None = None,
                 **assembler_options: Any) -> None:
        check_options(assembler_options)
        tokenizer = tokenizer or assembler_options.pop("tokenizer", None)
        assembler_options.pop("tokenizer", None)
        self.retriever = retriever
        self.llm = llm or Settings.llm
        self.instructions = instructions
        self.reserve_tokens = reserve_tokens
        self.tokenizer = tokenizer
        self._history: list[ChatMessage] = list(chat_history or [])
        # Half the budget stays for evidence: a long chat must not starve every turn's retrieval.
        assembler_options.setdefault("evidence_min_share", 0.5)
        self.assembler_options = assembler_options
        self.history_summarizer = history_summarizer
        self._extractive: Any = None
        self._template = check_template(text_qa_template) if text_qa_template is not None else default_qa_template()
        prompt_budget(self.llm, reserve_tokens)  # a window too small fails here, not on the first turn
        self.last_build: PromptBuild | None = None

    @classmethod
    def from_defaults(cls, retriever: BaseRetriever, llm: LLM | None = None, **kwargs: Any) -> ContextKitChatEngine:
        return cls(retriever, llm, **kwargs)

    @property
    def chat_history(self) -> list[ChatMessage]:
        return list(self._history)

    def reset(self) -> None:
        self._history = []

    def _summarizer(self, tok: Tokenizer) -> Any:
        if self.history_summarizer is not None:
            return self.history_summarizer
        from contextkit.compressors.history import HistorySummarizer

        if self._extractive is None or self._extractive.tokenizer.name != tok.name:
            # Kept between turns: its per-message cache makes the next turn's summary cheap.
            self._extractive = HistorySummarizer(
                tok, summary_max_tokens=self.assembler_options.get("summary_max_tokens", DEFAULT_SUMMARY_MAX_TOKENS))
        return self._extractive

    def _prepare(self, message: str, chat_history: list[ChatMessage] | None, nodes: list[Any]) -> PromptBuild:
        if chat_history is not None:
            self._history = list(chat_history)
        history = [Message(str(m.role.value), _text(m)) for m in self._history]
        tok = resolve_tokenizer(self.tokenizer)
        build = build_prompt(self.llm, self._template, tok, prompt_budget(self.llm, self.reserve_tokens),
                             query=message, instructions=self.instructions, evidence=evidence_from_nodes(nodes),
                             history=history, options=self.assembler_options, summarizer=self._summarizer(tok))
        self.last_build = build
        return build

    def _remember(self, message: str, answer: str | None = None) -> None:
        self._history.append(ChatMessage(role=MessageRole.USER, content=message))
        if answer is not None:
            self._history.append(ChatMessage(role=MessageRole.ASSISTANT, content=answer))

    @staticmethod
    def _response(answer: str, nodes: list[Any], build: PromptBuild) -> AgentChatResponse:
        """The turn's response with the report of its own prompt (``last_build`` may be another turn's by now:
        concurrent turns on one engine overwrite it while their LLM calls are awaited)."""
        return AgentChatResponse(response=answer, source_nodes=nodes, metadata={"contextkit": build.report()})

    def chat(self, message: str, chat_history: list[ChatMessage] | None = None) -> AgentChatResponse:
        nodes = self.retriever.retrieve(message)
        build = self._prepare(message, chat_history, nodes)
        answer = self.llm.predict(self._template, **build.variables)
        self._remember(message, answer)
        return self._response(answer, nodes, build)

    async def achat(self, message: str, chat_history: list[ChatMessage] | None = None) -> AgentChatResponse:
        nodes = await self.retriever.aretrieve(message)
        build = self._prepare(message, chat_history, nodes)
        answer = await self.llm.apredict(self._template, **build.variables)
        self._remember(message, answer)
        return self._response(answer, nodes, build)

    def stream_chat(self, message: str, chat_history: list[ChatMessage] | None = None) -> StreamingAgentChatResponse:
        """The LLM's deltas as they come; the answer is added to the history when the stream ends."""
        nodes = self.retriever.retrieve(message)
        build = self._prepare(message, chat_history, nodes)
        tokens = self.llm.stream(self._template, **build.variables)
        self._remember(message)

        def chat_stream() -> Generator[ChatResponse, None, None]:
            text = ""
            for delta in tokens:
                text += delta
                yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=delta)

        response = StreamingAgentChatResponse(chat_stream=chat_stream(), source_nodes=nodes)
        thread = Thread(target=response.write_response_to_history, args=(_HistoryWriter(self),), daemon=True)
        response.write_response_to_history_thread = thread
        thread.start()
        return response

    async def astream_chat(self, message: str,
                           chat_history: list[ChatMessage] | None = None) -> StreamingAgentChatResponse:
        nodes = await self.retriever.aretrieve(message)
        build = self._prepare(message, chat_history, nodes)
        tokens = await self.llm.astream(self._template, **build.variables)
        self._remember(message)

        async def chat_stream() -> AsyncGenerator[ChatResponse, None]:
            text = ""
            async for delta in tokens:
                text += delta
                yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=delta)

        response = StreamingAgentChatResponse(achat_stream=chat_stream(), source_nodes=nodes)
        response.awrite_response_to_history_task = asyncio.create_task(
            response.awrite_response_to_history(_HistoryWriter(self)))
        return response

"""``ContextKitChatEngine``: retrieval-augmented chat whose every prompt contextkit assembles.

It takes what LlamaIndex's ``CondensePlusContextChatEngine`` takes (``memory=``,
``chat_history=``, ``system_prompt=``, ``condense_prompt=``, ``node_postprocessors=``,
``callback_manager=``)
and answers as it does (``sources[0]`` is the retriever's ``ToolOutput``), so an app
can swap one for the other. Each turn:

1. **Condense.** With history, the follow-up ("Can you tell me more?") is rewritten
   into a standalone question by the app's LLM, with LlamaIndex's own condense prompt
   (or ``condense_prompt=``). With no LLM usable for that (``condense=False``, a
   ``MockLLM``, a failing or empty call), an offline extractive question stands in:
   the follow-up, the last user question, and up to eight content words of the last
   two exchanges not already in them (see :func:`extractive_question`).
2. **Retrieve** for the standalone question (the prompt still shows the user's
   message as typed).
3. **Assemble** the blocks (instructions at head and tail, the evidence, the recent
   turns, older turns summarised) under the LLM's budget and send them through
   LlamaIndex's prompt path, as the synthesizer does (``llm.system_prompt`` kept,
   messages for chat models, one prompt for completion models).

The history placed in the prompt is bounded: at most ``history_max_tokens`` (by
default the history's share of the budget, ``1 - evidence_min_share``, i.e. half),
the newest turns verbatim and a summary of the older ones; so a chat of 1,000
messages costs no more per turn than one of 50. The memory is LlamaIndex's
(``Memory`` by default, any ``BaseMemory`` given, e.g. :func:`contextkit_memory`).

A turn is one trace: ``chat``/``stream_chat``/``achat``/``astream_chat`` run under
``callback_manager.as_trace("chat")`` and one instrumentation span, with condensing,
retrieval and the LLM call under it; a stream's history writer runs in LlamaIndex's
context-copying ``Thread``, so it stays in the turn's trace. Streams pass the LLM's
own deltas on as they arrive (``print_response_stream``, ``streaming_chat_repl()``);
the answer joins the memory when the stream ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Generator, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.generic_utils import messages_to_history_str
from llama_index.core.base.llms.types import ChatResponse
from llama_index.core.callbacks import CallbackManager, trace_method
from llama_index.core.chat_engine.condense_plus_context import DEFAULT_CONDENSE_PROMPT_TEMPLATE
from llama_index.core.chat_engine.types import (
    AgentChatResponse,
    BaseChatEngine,
    StreamingAgentChatResponse,
)
from llama_index.core.llms import LLM, ChatMessage, MessageRole, MockLLM
from llama_index.core.memory import BaseMemory, Memory
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts import (
    BasePromptTemplate,
    ChatPromptTemplate,
    PromptTemplate,
    SelectorPromptTemplate,
)
from llama_index.core.prompts.prompt_type import PromptType
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.settings import Settings
from llama_index.core.tools import ToolOutput
from llama_index.core.types import Thread

from contextkit.compressors._history_score import terms
from contextkit.core.config import DEFAULT_SUMMARY_MAX_TOKENS
from contextkit.core.errors import InvalidArgumentError
from contextkit.core.records import Message
from contextkit.core.tokenizers import Tokenizer
from contextkit.integrations.llamaindex._budget import prompt_budget, resolve_tokenizer
from contextkit.integrations.llamaindex._prompt import (
    MESSAGE_OVERHEAD,
    LastBuildMixin,
    PromptBuild,
    build_prompt,
    check_options,
    check_template,
    default_qa_template,
    evidence_from_nodes,
    nodes_in_prompt,
)
from contextkit.integrations.llamaindex.synthesizer import (
    DEFAULT_INSTRUCTIONS,
    llm_budget,
)

__all__ = ["CHAT_MODES", "DEFAULT_CONDENSE_PROMPT_TEMPLATE", "ContextKitChatEngine", "contextkit_chat_engine",
           "extractive_question", "llm_budget"]

log = logging.getLogger(__name__)

#: Content words of the recent turns the extractive question adds to the follow-up.
EXTRACTIVE_TERMS = 8
#: Messages the extractive question reads terms from: the last two exchanges.
EXTRACTIVE_WINDOW = 4


def _message_text(message: str | QueryBundle) -> str:
    """The user's message as text: a ``QueryBundle`` (which ``ContextChatEngine`` takes too) is its ``query_str``."""
    return message.query_str if isinstance(message, QueryBundle) else message


def _text(message: ChatMessage) -> str:
    return message.content if isinstance(message.content, str) else str(message.content or "")


def extractive_question(history: Sequence[ChatMessage], message: str, max_terms: int = EXTRACTIVE_TERMS) -> str:
    """A standalone question made without an LLM: the follow-up, the last user question, and up to
    ``max_terms`` content words of the last two exchanges that neither holds.

    Why these: a follow-up ("Can you tell me more?", "and the second one?") leans on what
    was asked last and on the names the answer used; searching for them together finds
    the passages the conversation is about. Deterministic, offline, a few microseconds.
    """
    follow_up = message.strip()
    last_user = next((t for m in reversed(history) if m.role == MessageRole.USER and (t := _text(m).strip())), "")
    parts = [follow_up] + ([last_user] if last_user and last_user != follow_up else [])
    seen = set(terms(follow_up)) | set(terms(last_user))
    extra: list[str] = []
    for m in reversed(history[-EXTRACTIVE_WINDOW:]):
        for word in terms(_text(m)):
            if word not in seen and len(extra) < max_terms:
                seen.add(word)
                extra.append(word)
    return " ".join(parts + ([" ".join(extra)] if extra else []))


def _as_template(prompt: str | BasePromptTemplate | None) -> BasePromptTemplate:
    """``condense_prompt=`` as stock engines take it: a string or a template with ``{chat_history}`` and
    ``{question}``; LlamaIndex's own default otherwise."""
    template = PromptTemplate(prompt or DEFAULT_CONDENSE_PROMPT_TEMPLATE) if isinstance(prompt, str | None) \
        else prompt
    missing = {"chat_history", "question"} - set(template.template_vars)
    if missing:
        raise InvalidArgumentError(f"condense_prompt must use {{chat_history}} and {{question}}; missing {sorted(missing)}")
    return template


def _prompt_type(template: BasePromptTemplate) -> str:
    kind = template.metadata.get("prompt_type")
    return kind if isinstance(kind, str) else PromptType.QUESTION_ANSWER


def _with_system_prompt(template: BasePromptTemplate, system_prompt: str | None) -> BasePromptTemplate:
    """The template with ``system_prompt`` first: a system message for chat models, the head of the
    prompt for completion models (as stock engines place it). Bound with ``partial_format``, so
    braces in it are text, and counted in the budget like the rest of the template."""
    if not system_prompt:
        return template
    if isinstance(template, SelectorPromptTemplate):
        return SelectorPromptTemplate(
            default_template=_with_system_prompt(template.default_template, system_prompt),
            conditionals=[(cond, _with_system_prompt(t, system_prompt)) for cond, t in template.conditionals or []])
    if isinstance(template, ChatPromptTemplate):
        head = ChatMessage(role=MessageRole.SYSTEM, content="{system_prompt}")
        chat = ChatPromptTemplate(message_templates=[head, *template.message_templates],
                                  prompt_type=_prompt_type(template))
        return chat.partial_format(system_prompt=system_prompt)
    if isinstance(template, PromptTemplate):
        text = PromptTemplate("{system_prompt}\n\n" + template.template, prompt_type=_prompt_type(template))
        return text.partial_format(system_prompt=system_prompt)
    raise InvalidArgumentError(f"system_prompt= cannot be added to a {type(template).__name__}; put it in the "
                               "template, or use a PromptTemplate or ChatPromptTemplate")


@dataclass
class _Turn:
    """What one turn retrieved for, found and built: the response's sources, nodes and report."""

    question: str  # the standalone question retrieval used
    nodes: list[NodeWithScore]
    build: PromptBuild

    @property
    def sent(self) -> list[NodeWithScore]:
        """The nodes whose text the prompt holds: the response's ``source_nodes`` (``sources[0]`` keeps what
        the retriever returned)."""
        return nodes_in_prompt(self.nodes, self.build)

    def source(self) -> ToolOutput:
        """The retriever's output as ``CondensePlusContextChatEngine`` reports it in ``sources``."""
        return ToolOutput(tool_name="retriever", content=str(self.nodes), raw_input={"message": self.question},
                          raw_output=self.nodes)


class ContextKitChatEngine(LastBuildMixin, BaseChatEngine):
    """Condense, retrieve, and answer over a prompt contextkit assembles; history bounded and summarised.

    ``memory``, ``chat_history``, ``system_prompt``, ``condense_prompt``, ``node_postprocessors``,
    ``callback_manager`` and ``verbose`` mean what they mean for ``CondensePlusContextChatEngine``. ``condense=False`` skips
    the LLM for condensing (the extractive question is used); ``history_max_tokens`` caps the
    history in a prompt (default: the budget less ``evidence_min_share``). ``instructions``,
    ``text_qa_template``, ``tokenizer``, ``reserve_tokens``, ``history_summarizer`` and the
    assembly options are the synthesizer's.
    """

    def __init__(self, retriever: BaseRetriever, llm: LLM | None = None, *,
                 memory: BaseMemory | None = None, chat_history: list[ChatMessage] | None = None,
                 system_prompt: str | None = None, condense: bool = True,
                 node_postprocessors: Sequence[BaseNodePostprocessor] | None = None,
                 condense_prompt: str | BasePromptTemplate | None = None,
                 callback_manager: CallbackManager | None = None, instructions: str = DEFAULT_INSTRUCTIONS,
                 history_summarizer: Any = None, history_max_tokens: int | None = None, reserve_tokens: int = 0,
                 text_qa_template: BasePromptTemplate | None = None, tokenizer: str | Tokenizer | None = None,
                 verbose: bool = False, **assembler_options: Any) -> None:
        check_options(assembler_options)
        tokenizer = tokenizer or assembler_options.pop("tokenizer", None)
        assembler_options.pop("tokenizer", None)
        self.retriever = retriever
        self.node_postprocessors = list(node_postprocessors or [])
        self.llm = llm or Settings.llm
        self.instructions = instructions
        self.system_prompt = system_prompt
        self.reserve_tokens = reserve_tokens
        self.tokenizer = tokenizer
        self.condense = condense
        self.verbose = verbose
        self.history_max_tokens = history_max_tokens
        # Half the budget stays for evidence: a long chat must not starve every turn's retrieval.
        assembler_options.setdefault("evidence_min_share", 0.5)
        self.assembler_options = assembler_options
        self.history_summarizer = history_summarizer
        self._extractive: Any = None
        self.callback_manager = callback_manager or Settings.callback_manager
        for postprocessor in self.node_postprocessors:  # their events in the turn's trace, as stock does
            postprocessor.callback_manager = self.callback_manager
        self._condense_template = _as_template(condense_prompt)
        template = check_template(text_qa_template) if text_qa_template is not None else default_qa_template()
        self._template = _with_system_prompt(template, system_prompt)
        budget = prompt_budget(self.llm, reserve_tokens)  # a window too small fails here, not on the first turn
        self._memory = self._make_memory(memory, chat_history, budget)
        self.last_build: PromptBuild | None = None

    @staticmethod
    def _make_memory(memory: BaseMemory | None, chat_history: list[ChatMessage] | None, budget: int) -> BaseMemory:
        """The app's memory (seeded with ``chat_history`` if given), else a ``Memory`` as stock engines make."""
        if memory is not None:
            if chat_history is not None:
                memory.set(chat_history)
            return memory
        # ``[]`` rather than None: Memory then creates its table now; created lazily, concurrent first
        # turns raced to create it ("no such table: llama_index_memory").
        return Memory.from_defaults(chat_history=list(chat_history or []), token_limit=budget)

    @classmethod
    def from_defaults(cls, retriever: BaseRetriever, llm: LLM | None = None, **kwargs: Any) -> ContextKitChatEngine:
        return cls(retriever, llm, **kwargs)

    # ------------------------------------------------------------------ memory
    @property
    def memory(self) -> BaseMemory:
        return self._memory

    @property
    def chat_history(self) -> list[ChatMessage]:
        return self._memory.get_all()

    def reset(self) -> None:
        self._memory.reset()

    # ------------------------------------------------------------------ history in the prompt
    def _summarizer(self, tok: Tokenizer) -> Any:
        if self.history_summarizer is not None:
            return self.history_summarizer
        from contextkit.compressors.history import HistorySummarizer

        if self._extractive is None or self._extractive.tokenizer.name != tok.name:
            # Kept between turns: its per-message cache makes the next turn's summary cheap.
            self._extractive = HistorySummarizer(
                tok, summary_max_tokens=self.assembler_options.get("summary_max_tokens", DEFAULT_SUMMARY_MAX_TOKENS))
        return self._extractive

    def _history_cap(self, budget: int) -> int:
        """Tokens the history may take in the prompt: ``history_max_tokens``, else its share of the budget."""
        if self.history_max_tokens is not None:
            return self.history_max_tokens
        share = self.assembler_options.get("evidence_min_share")
        return int(budget * (1.0 - (0.5 if share is None else float(share))))

    @staticmethod
    def _split_recent(history: Sequence[ChatMessage], tok: Tokenizer, cap: int) -> tuple[int, list[ChatMessage]]:
        """(How many older messages there are, the newest messages that fit ``cap`` tokens, oldest first)."""
        used, start = 0, len(history)
        while start > 0:
            need = tok.count(_text(history[start - 1])) + MESSAGE_OVERHEAD
            if used + need > cap:
                break
            used, start = used + need, start - 1
        return start, list(history[start:])

    def _bounded_history(self, history: Sequence[ChatMessage], focus: str, tok: Tokenizer,
                         budget: int) -> tuple[list[Message], list[Any]]:
        """The history the assembler gets, and the report of any summary made for it: the newest turns
        within the cap, the older ones as one ``summary`` message (the role the assembler gives its own).

        Why here and not only in the assembler: the assembler gives the history whatever the
        evidence leaves, so a long chat filled every prompt to the window; and summarising
        a thousand turns each time the assembler ran was its cost too.
        """
        cap = self._history_cap(budget)
        summary_cap = min(int(self.assembler_options.get("summary_max_tokens", DEFAULT_SUMMARY_MAX_TOKENS)), cap // 2)
        n_older, recent = self._split_recent(history, tok, cap)
        if n_older:
            n_older, recent = self._split_recent(history, tok, cap - summary_cap)
        out = [Message(str(m.role.value), _text(m)) for m in recent if _text(m).strip()]
        older = [Message(str(m.role.value), _text(m)) for m in history[:n_older] if _text(m).strip()]
        if not older or summary_cap <= 16 or not self.assembler_options.get("summarize_history", True):
            return out, []
        result = self._summarizer(tok).compress(older, focus, keep_last=0, max_tokens=summary_cap)
        if not result.summary:
            return out, []
        return [Message("summary", result.summary), *out], [result.report]

    # ------------------------------------------------------------------ condensing
    def _condense_input(self, history: Sequence[ChatMessage], message: str) -> str | None:
        """The condense prompt for the LLM, or None when it is not to be asked (no history, no usable LLM)."""
        if not history or not self.condense or isinstance(self.llm, MockLLM):
            return None
        return self._condense_template.format(chat_history=messages_to_history_str(list(history)), question=message)

    def _standalone(self, history: Sequence[ChatMessage], message: str, condensed: str | None) -> str:
        question = condensed.strip() if condensed else ""
        if not question and history:
            question = extractive_question(history, message)
        question = question or message
        log.info("Condensed question: %s", question)
        if self.verbose:
            print(f"Condensed question: {question}")
        return question

    def _condense(self, history: Sequence[ChatMessage], message: str) -> str:
        prompt = self._condense_input(history, message)
        condensed = None
        if prompt is not None:
            try:
                condensed = str(self.llm.complete(prompt))
            except Exception as exc:  # any client error: retrieval must still happen, for the extractive question
                log.warning("condensing the follow-up failed (%s); using the extractive question", exc)
        return self._standalone(history, message, condensed)

    async def _acondense(self, history: Sequence[ChatMessage], message: str) -> str:
        prompt = self._condense_input(history, message)
        condensed = None
        if prompt is not None:
            try:
                condensed = str(await self.llm.acomplete(prompt))
            except Exception as exc:  # as in _condense
                log.warning("condensing the follow-up failed (%s); using the extractive question", exc)
        return self._standalone(history, message, condensed)

    # ------------------------------------------------------------------ one turn
    def _recent_for_condense(self, history: Sequence[ChatMessage], tok: Tokenizer, budget: int) -> list[ChatMessage]:
        """The turns the condense prompt shows: the newest within the history cap (a thousand would not fit)."""
        return self._split_recent(history, tok, self._history_cap(budget))[1]

    def _build(self, message: str, history: Sequence[ChatMessage], question: str, nodes: list[NodeWithScore],
               tok: Tokenizer, budget: int) -> _Turn:
        # The summary keeps what the message as typed and the standalone question are about.
        focus = message if question == message else f"{message}\n{question}"
        bounded, compression = self._bounded_history(history, focus, tok, budget)
        build = build_prompt(self.llm, self._template, tok, budget, query=message, instructions=self.instructions,
                             evidence=evidence_from_nodes(nodes), history=bounded,
                             options=self.assembler_options, summarizer=self._summarizer(tok))
        # The summary made before assembly is part of this prompt's history compression: reported first.
        build.result.report.compression[:0] = compression
        self.last_build = build
        return _Turn(question, nodes, build)

    def _start(self, message: str, chat_history: list[ChatMessage] | None) -> _Turn:
        if chat_history is not None:
            self._memory.set(chat_history)
        history = self._memory.get(input=message)
        tok, budget = resolve_tokenizer(self.tokenizer), prompt_budget(self.llm, self.reserve_tokens)
        question = self._condense(self._recent_for_condense(history, tok, budget), message)
        return self._build(message, history, question, self._postprocess(self.retriever.retrieve(question), question),
                           tok, budget)

    async def _astart(self, message: str, chat_history: list[ChatMessage] | None) -> _Turn:
        if chat_history is not None:
            await self._memory.aset(chat_history)
        history = await self._memory.aget(input=message)
        tok, budget = resolve_tokenizer(self.tokenizer), prompt_budget(self.llm, self.reserve_tokens)
        question = await self._acondense(self._recent_for_condense(history, tok, budget), message)
        nodes = await self._apostprocess(await self.retriever.aretrieve(question), question)
        return self._build(message, history, question, nodes, tok, budget)

    def _postprocess(self, nodes: list[NodeWithScore], question: str) -> list[NodeWithScore]:
        """The app's ``node_postprocessors`` in order, given the standalone question (as stock engines do)."""
        for postprocessor in self.node_postprocessors:
            nodes = postprocessor.postprocess_nodes(nodes, query_bundle=QueryBundle(question))
        return nodes

    async def _apostprocess(self, nodes: list[NodeWithScore], question: str) -> list[NodeWithScore]:
        for postprocessor in self.node_postprocessors:
            nodes = await postprocessor.apostprocess_nodes(nodes, query_bundle=QueryBundle(question))
        return nodes

    @staticmethod
    def _response(answer: str, turn: _Turn) -> AgentChatResponse:
        """The turn's response with the report of its own prompt (``last_build`` may be another turn's by now:
        concurrent turns on one engine overwrite it while their LLM calls are awaited)."""
        return AgentChatResponse(response=answer, sources=[turn.source()], source_nodes=turn.sent,
                                 metadata={"contextkit": turn.build.report()})

    @staticmethod
    def _user(message: str) -> ChatMessage:
        return ChatMessage(role=MessageRole.USER, content=message)

    @staticmethod
    def _assistant(answer: str) -> ChatMessage:
        return ChatMessage(role=MessageRole.ASSISTANT, content=answer)

    # ------------------------------------------------------------------ BaseChatEngine
    @trace_method("chat")
    def chat(self, message: str, chat_history: list[ChatMessage] | None = None) -> AgentChatResponse:
        message = _message_text(message)
        turn = self._start(message, chat_history)
        answer = self.llm.predict(self._template, **turn.build.variables)
        self._memory.put_messages([self._user(message), self._assistant(answer)])
        return self._response(answer, turn)

    @trace_method("chat")
    async def achat(self, message: str, chat_history: list[ChatMessage] | None = None) -> AgentChatResponse:
        message = _message_text(message)
        turn = await self._astart(message, chat_history)
        answer = await self.llm.apredict(self._template, **turn.build.variables)
        await self._memory.aput_messages([self._user(message), self._assistant(answer)])
        return self._response(answer, turn)

    @trace_method("chat")
    def stream_chat(self, message: str, chat_history: list[ChatMessage] | None = None) -> StreamingAgentChatResponse:
        """The LLM's deltas as they come; the answer is added to the memory when the stream ends."""
        message = _message_text(message)
        turn = self._start(message, chat_history)
        tokens = self.llm.stream(self._template, **turn.build.variables)
        self._memory.put(self._user(message))

        def chat_stream() -> Generator[ChatResponse, None, None]:
            text = ""
            for delta in tokens:
                text += delta
                yield ChatResponse(message=self._assistant(text), delta=delta)

        response = StreamingAgentChatResponse(chat_stream=chat_stream(), sources=[turn.source()],
                                              source_nodes=turn.sent)
        thread = Thread(target=response.write_response_to_history, args=(self._memory,), daemon=True)
        response.write_response_to_history_thread = thread
        thread.start()
        return response

    @trace_method("chat")
    async def astream_chat(self, message: str,
                           chat_history: list[ChatMessage] | None = None) -> StreamingAgentChatResponse:
        message = _message_text(message)
        turn = await self._astart(message, chat_history)
        tokens = await self.llm.astream(self._template, **turn.build.variables)
        await self._memory.aput(self._user(message))

        async def chat_stream() -> AsyncGenerator[ChatResponse, None]:
            text = ""
            async for delta in tokens:
                text += delta
                yield ChatResponse(message=self._assistant(text), delta=delta)

        response = StreamingAgentChatResponse(achat_stream=chat_stream(), sources=[turn.source()],
                                              source_nodes=turn.sent)
        response.awrite_response_to_history_task = asyncio.create_task(
            response.awrite_response_to_history(self._memory))
        return response


#: ``chat_mode`` values :func:`contextkit_chat_engine` answers; LlamaIndex's other modes have no contextkit engine.
CHAT_MODES = ("condense_plus_context",)


def contextkit_chat_engine(index_or_retriever: Any, llm: LLM | None = None, *,
                           chat_mode: str = "condense_plus_context", engine_options: dict[str, Any] | None = None,
                           **retriever_kwargs: Any) -> ContextKitChatEngine:
    """``index.as_chat_engine(chat_mode="condense_plus_context", ...)`` answered by a :class:`ContextKitChatEngine`.

    Why a function: ``as_chat_engine`` builds LlamaIndex's own engines by name and takes no engine class.
    Options the stock engine takes (``memory``, ``chat_history``, ``system_prompt``, ``condense_prompt``,
    ``node_postprocessors``, ``callback_manager``, ``verbose``, ``context_prompt`` refused by name) are the
    engine's; the rest go to ``index.as_retriever(...)``, checked for misspellings (``similarty_top_k``)."""
    from contextkit.integrations.llamaindex.query_engine import retriever_for

    if chat_mode not in CHAT_MODES:
        raise InvalidArgumentError(f"chat_mode {chat_mode!r}: contextkit answers {', '.join(CHAT_MODES)}; use "
                                   "index.as_chat_engine(chat_mode=...) for LlamaIndex's other modes")
    options = dict(engine_options or {})
    for name in _ENGINE_OPTIONS & set(retriever_kwargs):
        options[name] = retriever_kwargs.pop(name)
    if "skip_condense" in options:  # stock's name for the same switch
        options["condense"] = not options.pop("skip_condense")
    if "context_prompt" in retriever_kwargs:
        raise InvalidArgumentError("context_prompt: contextkit assembles the context itself; pass "
                                   "text_qa_template= in engine_options to change its template")
    retriever, options["node_postprocessors"] = retriever_for(index_or_retriever, retriever_kwargs,
                                                              options.get("node_postprocessors"))
    return ContextKitChatEngine(retriever, llm, **options)


#: What ``as_chat_engine(chat_mode="condense_plus_context", ...)`` hands its engine rather than the retriever.
_ENGINE_OPTIONS = {"memory", "chat_history", "system_prompt", "condense_prompt", "node_postprocessors",
                   "callback_manager", "verbose", "skip_condense"}

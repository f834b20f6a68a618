"""Issue 32: ``ContextKitChatEngine`` used as a LlamaIndex app uses ``CondensePlusContextChatEngine``.

Follow-ups retrieve for the condensed question (offline: an extractive one), ``memory=`` and
``system_prompt=`` are taken, ``sources[0]`` is the retriever's output, the per-turn prompt stays
bounded at 1,000 messages (no larger than stock's), and a turn is one trace. Only the LLM is a fake;
the retriever is a real ``VectorStoreIndex`` one, the memory LlamaIndex's own.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest
from fakes import RecordingChatLLM

pytest.importorskip("llama_index.core")

from llama_index.core.callbacks import CallbackManager, CBEventType  # noqa: E402
from llama_index.core.callbacks.base_handler import BaseCallbackHandler  # noqa: E402
from llama_index.core.chat_engine import CondensePlusContextChatEngine  # noqa: E402
from llama_index.core.instrumentation import get_dispatcher  # noqa: E402
from llama_index.core.instrumentation.event_handlers import BaseEventHandler  # noqa: E402
from llama_index.core.instrumentation.events import BaseEvent  # noqa: E402
from llama_index.core.instrumentation.events.retrieval import RetrievalStartEvent  # noqa: E402
from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler  # noqa: E402
from llama_index.core.llms import ChatMessage, CompletionResponse, MessageRole, MockLLM  # noqa: E402
from llama_index.core.llms.callbacks import llm_completion_callback  # noqa: E402
from llama_index.core.memory import Memory  # noqa: E402
from llama_index.core.settings import Settings  # noqa: E402
from llama_index.core.tools import ToolOutput  # noqa: E402

from contextkit.core.tokenizers import get_tokenizer  # noqa: E402
from contextkit.integrations.llamaindex import ContextKitChatEngine, contextkit_memory  # noqa: E402

FOLLOW_UP = "Can you tell me more?"
STANDALONE = "Why does FAISS IndexIDMap2 keep the caller's ids?"
HISTORY = [ChatMessage(role=MessageRole.USER, content="Which FAISS index keeps the caller's ids?"),
           ChatMessage(role=MessageRole.ASSISTANT, content="IndexIDMap2 does: it maps FAISS ids to yours.")]
MODES = ["chat", "achat", "stream_chat", "astream_chat"]


class CondensingLLM(RecordingChatLLM):
    """The recording chat model, answering the condense prompt (stock engines send it to ``complete``)
    with a scripted standalone question, or failing as an unreachable endpoint does."""

    standalone: str = STANDALONE
    fail_complete: bool = False

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        if self.fail_complete:
            raise ConnectionError("LLM endpoint unreachable")
        return CompletionResponse(text=self.standalone if "Standalone question" in prompt else self.reply)


class RetrievalQueries(BaseEventHandler):
    """What every retriever was asked, from LlamaIndex's instrumentation events."""

    queries: list[str] = []

    @classmethod
    def class_name(cls) -> str:
        return "RetrievalQueries"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if isinstance(event, RetrievalStartEvent):
            query = event.str_or_query_bundle
            self.queries.append(query if isinstance(query, str) else query.query_str)


@pytest.fixture()
def queries():
    handler = RetrievalQueries(queries=[])
    dispatcher = get_dispatcher()
    dispatcher.add_event_handler(handler)
    yield handler.queries
    dispatcher.event_handlers.remove(handler)


@pytest.fixture()
def spans():
    handler = SimpleSpanHandler()
    dispatcher = get_dispatcher()
    dispatcher.add_span_handler(handler)
    yield handler
    dispatcher.span_handlers.remove(handler)


def turn(engine: Any, mode: str, message: str, **kwargs: Any) -> tuple[Any, str]:
    """One turn as an app runs it: the response and its full text (streams consumed, history written)."""
    if mode == "chat":
        response = engine.chat(message, **kwargs)
        return response, response.response
    if mode == "stream_chat":
        response = engine.stream_chat(message, **kwargs)
        text = "".join(response.response_gen)
        thread = response.write_response_to_history_thread
        if thread is not None:
            thread.join(5)
        return response, text

    async def run() -> tuple[Any, str]:
        if mode == "achat":
            response = await engine.achat(message, **kwargs)
            return response, response.response
        response = await engine.astream_chat(message, **kwargs)
        text = "".join([d async for d in response.async_response_gen()])
        task = response.awrite_response_to_history_task
        if task is not None:
            await task
        return response, text

    return asyncio.run(run())


def user_prompt(llm: RecordingChatLLM) -> str:
    """The user message of the last answer call."""
    return str(llm.calls[-1][-1].content)


def is_faiss(node: Any) -> bool:
    return "FAISS IndexIDMap2" in node.node.get_content()


# ---------------------------------------------------------------------------------------------- condense
@pytest.mark.parametrize("mode", MODES)
def test_follow_up_retrieves_for_the_condensed_question(node_index, queries, mode) -> None:
    llm = CondensingLLM(reply="It keeps them so vectors can be removed.")
    engine = ContextKitChatEngine(node_index.as_retriever(similarity_top_k=4), llm)
    response, text = turn(engine, mode, FOLLOW_UP, chat_history=list(HISTORY))

    assert queries == [STANDALONE]  # retrieval used the standalone question, not "Can you tell me more?"
    condense_prompt = llm.prompts[-1]
    assert "Standalone question" in condense_prompt and FOLLOW_UP in condense_prompt
    assert "Which FAISS index keeps the caller's ids?" in condense_prompt  # the history it condensed
    assert FOLLOW_UP in user_prompt(llm) and STANDALONE not in user_prompt(llm)  # the prompt shows what was typed
    assert sum(map(is_faiss, response.source_nodes)) >= 3
    assert text == llm.reply
    assert [m.role for m in engine.chat_history][-2:] == [MessageRole.USER, MessageRole.ASSISTANT]


def test_first_message_is_not_condensed_and_condense_prompt_can_be_given(node_index, queries) -> None:
    llm = CondensingLLM()
    custom = "History:\n{chat_history}\nFollow-up: {question}\nStandalone question, in English:"
    engine = ContextKitChatEngine(node_index.as_retriever(similarity_top_k=2), llm, condense_prompt=custom)
    engine.chat("Which FAISS index keeps the caller's ids?")
    assert llm.prompts == [] and queries == ["Which FAISS index keeps the caller's ids?"]
    engine.chat(FOLLOW_UP)
    assert llm.prompts[-1].startswith("History:\nuser: Which FAISS index") and queries[-1] == STANDALONE


@pytest.mark.parametrize("how", ["condense=False", "failing LLM", "MockLLM"])
def test_offline_extractive_question(node_index, queries, how) -> None:
    llm: Any = MockLLM() if how == "MockLLM" else CondensingLLM(fail_complete=how == "failing LLM")
    kwargs: dict[str, Any] = {"condense": False} if how == "condense=False" else {}
    engine = ContextKitChatEngine(node_index.as_retriever(similarity_top_k=4), llm, **kwargs)
    response = engine.chat(FOLLOW_UP, chat_history=list(HISTORY))

    (query,) = queries
    assert query.startswith(FOLLOW_UP) and "Which FAISS index keeps the caller's ids?" in query
    assert "indexidmap2" in query.lower()  # a salient term of the last answer
    assert sum(map(is_faiss, response.source_nodes)) >= 3
    assert response.sources[0].raw_input == {"message": query}
    if how == "condense=False":
        assert llm.prompts == []  # the LLM was not asked to condense


# ---------------------------------------------------------------------------------------------- memory, system prompt, sources
@pytest.mark.parametrize("make_memory", [lambda: Memory.from_defaults(token_limit=4000),
                                         lambda: contextkit_memory(token_limit=4000)])
def test_memory_is_the_apps(node_index, make_memory) -> None:
    memory = make_memory()
    memory.put_messages([ChatMessage(role=MessageRole.USER, content="My project is called Tangerine."),
                         ChatMessage(role=MessageRole.ASSISTANT, content="Noted: Tangerine.")])
    llm = CondensingLLM(reply="Tangerine uses IndexIDMap2.")
    engine = ContextKitChatEngine(node_index.as_retriever(similarity_top_k=2), llm, memory=memory)
    assert engine.memory is memory

    engine.chat("Which FAISS index should my project use?")
    assert "Tangerine" in user_prompt(llm)  # the memory's turns reached the prompt
    assert "Tangerine" in llm.prompts[-1]  # and the condense prompt
    stored = memory.get_all()
    assert [m.content for m in stored[-2:]] == ["Which FAISS index should my project use?", llm.reply]
    assert engine.chat_history == stored
    engine.reset()
    assert memory.get_all() == []


@pytest.mark.parametrize("chat_model", [True, False])
def test_system_prompt_is_in_the_prompt(node_index, chat_model) -> None:
    llm = CondensingLLM(chat_model=chat_model, reply="ok")
    system = "You are Ada, the {release} bot. Answer in one sentence."
    engine = ContextKitChatEngine(node_index.as_retriever(similarity_top_k=2), llm, system_prompt=system)
    engine.chat("What does section 3 say?")
    if chat_model:
        first = llm.calls[-1][0]
        assert first.role == MessageRole.SYSTEM and first.content == system
    else:
        assert llm.prompts[-1].startswith(system)
    assert engine.last_build is not None and engine.last_build.sent_tokens <= engine.last_build.budget


@pytest.mark.parametrize("mode", MODES)
def test_sources_hold_the_retrieved_context(node_index, mode) -> None:
    llm = CondensingLLM()
    engine = ContextKitChatEngine(node_index.as_retriever(similarity_top_k=3), llm)
    response, _ = turn(engine, mode, FOLLOW_UP, chat_history=list(HISTORY))

    source = response.sources[0]
    assert isinstance(source, ToolOutput) and source.tool_name == "retriever"
    assert source.raw_input == {"message": STANDALONE}
    assert source.raw_output == response.source_nodes and len(response.source_nodes) == 3
    first = response.source_nodes[0].node
    # ``str(nodes)``, as stock puts it: the nodes' reprs, with their ids and text
    assert first.node_id in source.content and first.get_content().splitlines()[0][:60] in source.content


# ---------------------------------------------------------------------------------------------- bounded prompt
def _long_history(n: int = 1000) -> list[ChatMessage]:
    out = []
    for i in range(n // 2):
        out.append(ChatMessage(role=MessageRole.USER, content=(
            f"Question {i}: how does setting number {i * 13} change the index build for shard {i % 7} "
            f"in release {4000 + i}?")))
        out.append(ChatMessage(role=MessageRole.ASSISTANT, content=(
            f"Answer {i}: setting {i * 13} doubles the build time of shard {i % 7}, and release {4000 + i} "
            "caches it, so reruns are quick.")))
    return out


def _sent_tokens(llm: RecordingChatLLM) -> int:
    tok = get_tokenizer("cl100k_base")
    return sum(tok.count(str(m.content or "")) + 4 for m in llm.calls[-1])


def test_prompt_at_1000_messages_is_bounded_and_no_larger_than_stock(node_index) -> None:
    history = _long_history()
    window = 16384

    stock_llm = CondensingLLM(context_window=window)
    stock_memory = Memory.from_defaults(token_limit=window - 256)
    stock_memory.put_messages(history)  # stock's best case: its memory flushed down to its limit
    stock = CondensePlusContextChatEngine.from_defaults(node_index.as_retriever(similarity_top_k=4), llm=stock_llm,
                                                        memory=stock_memory)
    stock.chat(FOLLOW_UP)
    stock_tokens = _sent_tokens(stock_llm)

    ours_llm = CondensingLLM(context_window=window)
    ours = ContextKitChatEngine(node_index.as_retriever(similarity_top_k=4), ours_llm, chat_history=history)
    ours.chat(FOLLOW_UP)  # our worst case: all 1,000 messages handed over as chat_history=
    first = _sent_tokens(ours_llm)
    ours.chat("And what about the shard after that?")
    second = _sent_tokens(ours_llm)

    assert first <= stock_tokens and second <= stock_tokens, (first, second, stock_tokens)
    budget = window - 256
    assert max(first, second) <= 0.6 * budget  # history held to its half of the budget, evidence besides
    prompt = user_prompt(ours_llm)
    assert "Answer 499:" in prompt and "Question 0:" not in prompt  # newest verbatim, older summarised
    assert 'role="summary"' in prompt and ours.last_report.compression[0].compressor == "extractive_history"
    condense = ours_llm.prompts[-1]
    assert "Question 0:" not in condense and "Answer 499:" in condense  # the condense prompt is bounded too


# ---------------------------------------------------------------------------------------------- tracing
class TraceLog(BaseCallbackHandler):
    """The order of traces and events a CallbackManager handler sees."""

    def __init__(self) -> None:
        super().__init__(event_starts_to_ignore=[], event_ends_to_ignore=[])
        self.log: list[tuple[str, str]] = []

    def start_trace(self, trace_id: str | None = None) -> None:
        self.log.append(("start_trace", str(trace_id)))

    def end_trace(self, trace_id: str | None = None, trace_map: dict[str, list[str]] | None = None) -> None:
        self.log.append(("end_trace", str(trace_id)))

    def on_event_start(self, event_type: CBEventType, payload: Any = None, event_id: str = "", parent_id: str = "",
                       **kwargs: Any) -> str:
        self.log.append(("event", event_type.value))
        return event_id

    def on_event_end(self, event_type: CBEventType, payload: Any = None, event_id: str = "", **kwargs: Any) -> None:
        pass


@pytest.mark.parametrize("mode", MODES)
def test_a_turn_is_one_trace(node_index, spans, monkeypatch, mode) -> None:
    log = TraceLog()
    manager = CallbackManager([log])
    monkeypatch.setattr(Settings, "callback_manager", manager)  # how an app turns tracing on
    retriever = node_index.as_retriever(similarity_top_k=2)
    retriever.callback_manager = manager
    engine = ContextKitChatEngine(retriever, CondensingLLM())
    spans.completed_spans.clear()

    # A fresh context, as a server gives each request: an event outside any trace (an earlier test calling a
    # postprocessor directly) leaves LlamaIndex's default "llama-index" trace open in this one for good.
    contextvars.Context().run(turn, engine, mode, FOLLOW_UP, chat_history=list(HISTORY))

    traces = [entry for entry in log.log if entry[0] == "start_trace"]
    assert traces == [("start_trace", "chat")], log.log
    assert log.log[-1] == ("end_trace", "chat")
    assert {"retrieve", "llm"} <= {name for kind, name in log.log if kind == "event"}
    roots = [s for s in spans.completed_spans if s.parent_id is None]
    assert len(roots) == 1 and roots[0].id_.startswith(f"ContextKitChatEngine.{mode}"), \
        [(s.id_, s.parent_id) for s in spans.completed_spans]
    by_id = {s.id_: s for s in spans.completed_spans}

    def root_of(span: Any) -> str:
        while span.parent_id in by_id:
            span = by_id[span.parent_id]
        return str(span.id_)

    names = {s.id_.split("-")[0] for s in spans.completed_spans if root_of(s) == roots[0].id_}
    assert any(n.startswith("VectorIndexRetriever.") for n in names)  # retrieval under the turn's span
    assert any(n.startswith("CondensingLLM.") for n in names)  # and the LLM calls


# ---------------------------------------------------------------------------------------------- postprocessors
@pytest.mark.parametrize("mode", MODES)
def test_node_postprocessors_run_on_the_standalone_question(node_index, mode) -> None:
    """``node_postprocessors=`` as stock takes it: a cut-off and a keyword filter applied, in order, to what
    was retrieved for the condensed question; only what they keep reaches the prompt and ``source_nodes``."""
    from llama_index.core.postprocessor import KeywordNodePostprocessor, SimilarityPostprocessor

    llm = CondensingLLM()
    stock = CondensePlusContextChatEngine.from_defaults(
        node_index.as_retriever(similarity_top_k=6), llm=CondensingLLM(),
        node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=0.0), KeywordNodePostprocessor(
            required_keywords=["IndexIDMap2"], exclude_keywords=["release 4096", "release 4102"])])
    engine = ContextKitChatEngine(node_index.as_retriever(similarity_top_k=6), llm, node_postprocessors=[
        SimilarityPostprocessor(similarity_cutoff=0.0), KeywordNodePostprocessor(required_keywords=["IndexIDMap2"],
                                                 exclude_keywords=["release 4096", "release 4102"])])
    response, _ = turn(engine, mode, FOLLOW_UP, chat_history=list(HISTORY))
    expected, _ = turn(stock, mode, FOLLOW_UP, chat_history=list(HISTORY))

    kept = [n.node.node_id for n in response.source_nodes]
    assert 0 < len(kept) < 6 and kept == [n.node.node_id for n in expected.source_nodes]
    assert all("IndexIDMap2" in n.node.get_content() and "release 4096" not in n.node.get_content()
               for n in response.source_nodes)
    evidence = user_prompt(llm)
    assert all(n.node.get_content()[:40] in evidence for n in response.source_nodes)
    assert "release 4096" not in evidence and "release 4102" not in evidence  # filtered out, so not shown


def test_contextkit_chat_engine_is_as_chat_engine_condense_plus_context(node_index, queries) -> None:
    """The route for ``index.as_chat_engine(chat_mode="condense_plus_context", ...)``: the same arguments,
    engine options to the engine, retriever options to ``as_retriever``, misspellings and other modes refused."""
    from contextkit.core.errors import InvalidArgumentError
    from contextkit.integrations.llamaindex import contextkit_chat_engine

    llm = CondensingLLM()
    engine = contextkit_chat_engine(node_index, llm, chat_mode="condense_plus_context", similarity_top_k=3,
                                    system_prompt="You are Ada.", chat_history=list(HISTORY))
    response, _ = turn(engine, "chat", FOLLOW_UP)
    assert isinstance(engine, ContextKitChatEngine) and engine.system_prompt == "You are Ada."
    assert queries == [STANDALONE] and len(response.source_nodes) == 3
    with pytest.raises(InvalidArgumentError, match="similarity_top_k"):
        contextkit_chat_engine(node_index, llm, similarty_top_k=3)
    with pytest.raises(InvalidArgumentError, match="chat_mode 'react'"):
        contextkit_chat_engine(node_index, llm, chat_mode="react")
    with pytest.raises(InvalidArgumentError, match="context_prompt"):
        contextkit_chat_engine(node_index, llm, context_prompt="{context_str}")

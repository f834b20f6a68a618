"""LlamaIndex agents on a Session: what a sceptical user checks with a real ``FunctionAgent``.

A real ``FunctionAgent`` (and ``AgentWorkflow``) with real ``FunctionTool``s (a CI log of 20,000
lines with one line that matters, a tool that raises) and a fake function-calling LLM (a real
``FunctionCallingLLM`` answering with tool calls the way provider integrations give them) that
records every request. Every request the LLM receives must be one the provider accepts
(``validate_messages``) and fit the budget, system prompt and tool schemas included; the line that
matters must reach the LLM; consecutive requests must begin with the previous one except where the
Session condensed (counted); and what LlamaIndex calls on a memory (get/put/set/reset/get_all, sync
and async, ``ctx`` serialisation, streaming events) must keep working. The stock agent, for contrast,
fails the budget check: the check is not vacuous.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.agent.workflow import (  # noqa: E402
    AgentOutput,
    AgentStream,
    AgentWorkflow,
    FunctionAgent,
    ToolCall,
    ToolCallResult,
)
from llama_index.core.base.llms.types import ToolCallBlock  # noqa: E402
from llama_index.core.llms import ChatMessage, ChatResponse, LLMMetadata, MessageRole  # noqa: E402
from llama_index.core.llms.callbacks import llm_chat_callback  # noqa: E402
from llama_index.core.llms.function_calling import FunctionCallingLLM  # noqa: E402
from llama_index.core.llms.llm import ToolSelection  # noqa: E402
from llama_index.core.memory import ChatMemoryBuffer  # noqa: E402
from llama_index.core.tools import FunctionTool  # noqa: E402
from llama_index.core.workflow import Context, JsonSerializer  # noqa: E402
from pydantic import Field, PrivateAttr  # noqa: E402

from contextkit.core.errors import InvalidArgumentError  # noqa: E402
from contextkit.core.tokenizers import get_tokenizer  # noqa: E402
from contextkit.integrations.llamaindex import ContextKitAgentMemory, ContextKitFunctionAgent  # noqa: E402
from contextkit.session import validate_messages  # noqa: E402

SYSTEM = "You are a CI triage agent. Find why the build fails, using the tools; cite the failing test."
TASK = "Why does test_refund_rounding fail in CI? Find the failing line in the unit job's log."
PLANTED = "FAILED tests/test_checkout.py::test_refund_rounding - AssertionError: assert 10.01 == 10.0"
TOKENIZER = get_tokenizer("cl100k_base")


# ------------------------------------------------------------------ tools


def read_ci_log(job: str) -> str:
    """Read the whole CI log of a job."""
    rows = [f"[{i:06d}] PASSED tests/test_module_{i % 97}.py::test_case_{i} in 0.0{i % 9}s" for i in range(20_000)]
    rows[9_437] = PLANTED
    return "\n".join(rows)


def grep_source(pattern: str) -> str:
    """Search the source tree for a pattern."""
    return "\n".join(f"src/shop/module_{k}.py:{100 + k}: # {pattern}: rounding helper number {k} calls "
                     f"round_half_even(amount_{k}, places=2) before the refund is booked" for k in range(24))


def deploy_preview(branch: str) -> str:
    """Deploy a preview of a branch."""
    raise ConnectionError(f"preview cluster unreachable while deploying {branch}: connection refused")


TOOLS = [FunctionTool.from_defaults(read_ci_log), FunctionTool.from_defaults(grep_source),
         FunctionTool.from_defaults(deploy_preview)]


# ------------------------------------------------------------------ a fake function-calling LLM


def scripted_steps(steps: int) -> list[Any]:
    """What the LLM answers, step by step: the log first, then searches (two in parallel every 5th
    step, the failing deploy every 9th), then the answer."""
    script: list[Any] = [[("read_ci_log", {"job": "unit"})]]
    for i in range(1, steps):
        if i % 9 == 0:
            script.append([("deploy_preview", {"branch": f"fix-{i}"})])
        elif i % 5 == 0:
            script.append([("grep_source", {"pattern": f"refund step {i}"}), ("grep_source", {"pattern": f"round {i}"})])
        else:
            script.append([("grep_source", {"pattern": f"refund step {i}"})])
    script.append("test_refund_rounding fails: assert 10.01 == 10.0 (rounding of refunds).")
    return script


class ToolCallingLLM(FunctionCallingLLM):
    """Answers from ``script`` (a list of calls ``[(tool, kwargs)]`` or a final text), recording each
    request (deep copies) and the tools it was offered. ``call_shape``: ``"blocks"`` (``ToolCallBlock``,
    as current integrations) or ``"openai"`` (``additional_kwargs["tool_calls"]`` dicts, as older
    llama-index-llms-openai); ``reuse_ids``: ids numbered per response (``call_0``), as some
    providers' integrations give them."""

    script: list[Any] = Field(default_factory=list)
    call_shape: str = "blocks"
    reuse_ids: bool = False
    context_window: int = 12_000
    num_output: int = 1_000
    # private: LlamaIndex's callbacks serialise the LLM (``to_dict``) on every call at 0.14.20
    _requests: list[list[ChatMessage]] = PrivateAttr(default_factory=list)
    _tool_schemas: list[list[dict[str, Any]]] = PrivateAttr(default_factory=list)

    @property
    def requests(self) -> list[list[ChatMessage]]:
        return self._requests

    @property
    def tool_schemas(self) -> list[list[dict[str, Any]]]:
        return self._tool_schemas

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=self.context_window, num_output=self.num_output, is_chat_model=True,
                           is_function_calling_model=True, model_name="tool-calling-fake")

    def _prepare_chat_with_tools(self, tools: Any, user_msg: Any = None, chat_history: Any = None,
                                 verbose: bool = False, allow_parallel_tool_calls: bool = False,
                                 tool_required: bool = False, **kwargs: Any) -> dict[str, Any]:
        self._tool_schemas.append([t.metadata.to_openai_tool(skip_length_check=True) for t in tools])
        return {"messages": list(chat_history or []), "tools": tools}

    def _reply(self, messages: Any) -> ChatMessage:
        step = len(self.requests)
        self._requests.append([m.model_copy(deep=True) for m in messages])
        answer = self.script[step] if step < len(self.script) else "Done."
        if isinstance(answer, str):
            return ChatMessage(role=MessageRole.ASSISTANT, content=answer)
        ids = [f"call_{k}" if self.reuse_ids else f"call_{step}_{k}" for k in range(len(answer))]
        if self.call_shape == "openai":
            calls = [{"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                     for i, (n, a) in zip(ids, answer, strict=True)]
            return ChatMessage(role=MessageRole.ASSISTANT, content="", additional_kwargs={"tool_calls": calls})
        blocks = [ToolCallBlock(tool_call_id=i, tool_name=n, tool_kwargs=a) for i, (n, a) in zip(ids, answer, strict=True)]
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks)

    def get_tool_calls_from_response(self, response: ChatResponse, error_on_no_tool_call: bool = True,
                                     **kwargs: Any) -> list[ToolSelection]:
        message = response.message
        out = [ToolSelection(tool_id=b.tool_call_id or "", tool_name=b.tool_name, tool_kwargs=b.tool_kwargs)
               for b in message.blocks if isinstance(b, ToolCallBlock)]
        for call in message.additional_kwargs.get("tool_calls") or []:
            out.append(ToolSelection(tool_id=call["id"], tool_name=call["function"]["name"],
                                     tool_kwargs=json.loads(call["function"]["arguments"])))
        if not out and error_on_no_tool_call:
            raise ValueError("no tool call")
        return out

    @llm_chat_callback()
    def chat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        return ChatResponse(message=self._reply(messages))

    @llm_chat_callback()
    async def achat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        return ChatResponse(message=self._reply(messages))

    @llm_chat_callback()
    def stream_chat(self, messages: Any, **kwargs: Any) -> Any:
        message = self._reply(messages)
        return iter([ChatResponse(message=message, delta=message.content or "")])

    @llm_chat_callback()
    async def astream_chat(self, messages: Any, **kwargs: Any) -> Any:
        message = self._reply(messages)

        async def gen() -> Any:
            text = ""
            for word in (message.content or "").split(" ") if message.content else []:
                text = f"{text} {word}".strip()
                yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=word)
            yield ChatResponse(message=message, delta="")

        return gen()

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError


# ------------------------------------------------------------------ what the LLM received


def request_tokens(messages: list[ChatMessage], schemas: list[dict[str, Any]]) -> int:
    """Tokens of one request under OpenAI's chat format: 3 a message, its text, each call's name and
    arguments (+8 for the frame), 3 for the reply, and each tool schema (+8)."""
    total = 3
    for m in messages:
        total += 3 + TOKENIZER.count("".join(getattr(b, "text", "") for b in m.blocks))
        for b in m.blocks:
            if isinstance(b, ToolCallBlock):
                total += TOKENIZER.count(b.tool_name + json.dumps(b.tool_kwargs)) + 8
    return total + sum(TOKENIZER.count(json.dumps(s)) + 8 for s in schemas)


def key(message: ChatMessage) -> str:
    """A message as its bytes go to the provider (role, blocks, kwargs)."""
    return json.dumps(message.model_dump(mode="json"), sort_keys=True)


def prefix_breaks(requests: list[list[ChatMessage]]) -> int:
    """Requests that do not begin with the previous request less its last message (the tail)."""
    breaks = 0
    for before, after in zip(requests, requests[1:], strict=False):
        kept = [key(m) for m in before[:-1]]
        if [key(m) for m in after[: len(kept)]] != kept:
            breaks += 1
    return breaks


def run_agent(agent: Any, *, steps: int, memory: Any = None, ctx: Any = None, user_msg: str = TASK) -> Any:
    async def go() -> Any:
        kwargs: dict[str, Any] = {"max_iterations": steps + 10}
        if memory is not None:
            kwargs["memory"] = memory
        if ctx is not None:
            kwargs["ctx"] = ctx
        return await agent.run(user_msg=user_msg, **kwargs)

    return asyncio.run(go())


def agent_of(llm: ToolCallingLLM, cls: Callable[..., Any] = ContextKitFunctionAgent, **kwargs: Any) -> Any:
    return cls(name="triage", description="CI triage", tools=TOOLS, llm=llm, system_prompt=SYSTEM, **kwargs)


# ------------------------------------------------------------------ the long run


def _check_long_run(steps: int) -> None:
    llm = ToolCallingLLM(script=scripted_steps(steps))
    memory = ContextKitAgentMemory.from_defaults(llm=llm, system_prompt=SYSTEM, tools=TOOLS)
    result = run_agent(agent_of(llm), steps=steps, memory=memory)
    assert "assert 10.01 == 10.0" in str(result)
    requests = llm.requests
    assert len(requests) == steps + 1
    budget = 12_000 - 1_000
    sizes = []
    for i, (request, schemas) in enumerate(zip(requests, llm.tool_schemas, strict=True)):
        assert validate_messages(request, "llamaindex") == [], i
        assert request[0].role == MessageRole.SYSTEM and request[0].content == SYSTEM  # the agent's, verbatim
        assert sum(m.role == MessageRole.SYSTEM for m in request) == 1
        sizes.append(request_tokens(request, schemas))
        assert sizes[-1] <= budget, (i, sizes[-1])
    # (2) the line that matters reaches the LLM, and the whole log stays reachable
    after_log = requests[1]
    tool_message = next(m for m in after_log if m.role == MessageRole.TOOL)
    assert PLANTED in tool_message.content and len(tool_message.content.splitlines()) < 2_000
    handle = tool_message.content.rsplit("handle ", 1)[1].rstrip("]")
    assert memory.tool_output(handle) == read_ci_log("unit")
    # the failing tool's error reaches the LLM as a tool result
    assert any("connection refused" in (m.content or "") for r in requests for m in r if m.role == MessageRole.TOOL)
    # (3) append-only except at the compactions, which are few
    session = memory.session
    breaks = prefix_breaks(requests)
    assert session.compactions >= 3  # the run outgrew the budget several times over
    assert breaks == session.compactions, (breaks, session.compactions)
    assert breaks <= steps // 5  # each step adds ~700 tokens; a compaction frees 40% of ~10k
    # old steps are condensed: summaries in the request, stubs with handles for old tool outputs
    assert session.compacted and any("earlier turns" in (m.content or "") or "earlier_turns" in (m.content or "")
                                     for m in requests[-1])
    assert max(sizes[len(sizes) // 2:]) <= budget and min(sizes[len(sizes) // 2:]) > budget // 4  # it plateaus


def test_a_300_step_agent_run_makes_only_valid_requests_within_budget_append_only_between_compactions() -> None:
    """About 12 s at llama-index-core 0.14.25, 19 s at 0.14.20 (one core)."""
    _check_long_run(300)


def test_the_stock_agent_for_contrast_outgrows_the_budget() -> None:
    """The same run with LlamaIndex's own memory: the scratchpad carries every step whole, the log
    included, so the budget check above would fail (it is not vacuous)."""
    llm = ToolCallingLLM(script=scripted_steps(12))
    run_agent(agent_of(llm, FunctionAgent), steps=12)
    sizes = [request_tokens(r, s) for r, s in zip(llm.requests, llm.tool_schemas, strict=True)]
    assert max(sizes) > 11_000 and all(validate_messages(r, "llamaindex") == [] for r in llm.requests)


def test_without_memory_the_agent_sizes_one_to_its_llm_and_a_second_run_goes_on() -> None:
    llm = ToolCallingLLM(script=scripted_steps(30) + scripted_steps(10), context_window=9_000, num_output=500)
    agent = agent_of(llm)
    ctx = Context(agent)
    run_agent(agent, steps=30, ctx=ctx)
    first = len(llm.requests)
    run_agent(agent, steps=10, ctx=ctx, user_msg="And is test_refund_total affected too?")
    memory = asyncio.run(ctx.store.get("memory"))
    assert isinstance(memory, ContextKitAgentMemory) and memory.session.limit < 8_500
    for request, schemas in zip(llm.requests, llm.tool_schemas, strict=True):
        assert validate_messages(request, "llamaindex") == []
        assert request_tokens(request, schemas) <= 8_500
    second = llm.requests[first]
    assert any(TASK in (m.content or "") for m in second) or memory.session.compacted  # the first run is remembered
    assert "test_refund_total" in second[-1].content


# ------------------------------------------------------------------ shapes of tool calls


@pytest.mark.parametrize("shape, reuse", [("openai", False), ("blocks", True), ("openai", True)])
def test_calls_in_either_shape_and_reused_ids_make_valid_requests(shape: str, reuse: bool) -> None:
    llm = ToolCallingLLM(script=scripted_steps(25), call_shape=shape, reuse_ids=reuse)
    run_agent(agent_of(llm), steps=25, memory=ContextKitAgentMemory.from_defaults(llm=llm, system_prompt=SYSTEM))
    assert len(llm.requests) == 26
    for request in llm.requests:
        assert validate_messages(request, "llamaindex") == []


def test_streaming_events_and_the_non_streaming_path() -> None:
    llm = ToolCallingLLM(script=scripted_steps(10))
    agent = agent_of(llm)

    async def go() -> tuple[list[Any], Any]:
        handler = agent.run(user_msg=TASK, max_iterations=30)
        events = [ev async for ev in handler.stream_events()]
        return events, await handler

    events, result = asyncio.run(go())
    kinds = {type(e) for e in events}
    assert {AgentStream, AgentOutput, ToolCall, ToolCallResult} <= kinds
    assert sum(isinstance(e, ToolCallResult) for e in events) == 11  # ten steps, one with two calls
    assert "10.01" in str(result)
    quiet = ToolCallingLLM(script=scripted_steps(10))
    run_agent(agent_of(quiet, streaming=False), steps=10)
    assert [key(m) for m in quiet.requests[-1]] == [key(m) for m in llm.requests[-1]]


# ------------------------------------------------------------------ stock agents, workflows


def test_a_stock_function_agent_with_the_memory_condenses_earlier_runs() -> None:
    """A stock agent keeps a run's steps in its scratchpad (outside any memory) and hands them over at the
    end: the memory condenses them for the next runs, and every request stays valid."""
    llm = ToolCallingLLM(script=[*scripted_steps(6), *scripted_steps(6), *scripted_steps(6)])
    memory = ContextKitAgentMemory(budget=6_000, system_prompt=SYSTEM)
    agent = agent_of(llm, FunctionAgent)
    for run in range(3):
        run_agent(agent, steps=6, memory=memory, user_msg=f"Run {run}: {TASK}")
    assert len(llm.requests) == 21
    for request in llm.requests:
        assert validate_messages(request, "llamaindex") == []
    third_run_first_request = llm.requests[14]
    assert request_tokens(third_run_first_request, []) <= 6_000
    assert not any(PLANTED in (m.content or "") and len(m.content.splitlines()) > 5_000 for m in third_run_first_request)


def test_an_agent_workflow_of_contextkit_agents() -> None:
    llm = ToolCallingLLM(script=scripted_steps(20))
    agent = agent_of(llm)
    workflow = AgentWorkflow(agents=[agent], root_agent="triage")
    memory = ContextKitAgentMemory.from_defaults(llm=llm, system_prompt=SYSTEM, tools=TOOLS)

    async def go() -> Any:
        return await workflow.run(user_msg=TASK, memory=memory, max_iterations=40)

    assert "10.01" in str(asyncio.run(go()))
    assert len(llm.requests) == 21
    for request, schemas in zip(llm.requests, llm.tool_schemas, strict=True):
        assert validate_messages(request, "llamaindex") == []
        assert request_tokens(request, schemas) <= 11_000
    assert PLANTED in next(m.content for m in llm.requests[1] if m.role == MessageRole.TOOL)


def test_a_memory_that_does_not_know_its_budget_says_so() -> None:
    llm = ToolCallingLLM(script=scripted_steps(2))
    with pytest.raises(Exception, match="budget"):
        run_agent(agent_of(llm, FunctionAgent), steps=2, memory=ContextKitAgentMemory())


# ------------------------------------------------------------------ ctx and the memory's own API


def test_ctx_serialisation_keeps_the_memory() -> None:
    llm = ToolCallingLLM(script=[*scripted_steps(15), *scripted_steps(3)])
    agent = agent_of(llm)
    ctx = Context(agent)
    run_agent(agent, steps=15, ctx=ctx)
    saved = json.loads(json.dumps(ctx.to_dict(serializer=JsonSerializer())))
    memory = asyncio.run(ctx.store.get("memory"))
    restored_ctx = Context.from_dict(agent, saved, serializer=JsonSerializer())
    restored = asyncio.run(restored_ctx.store.get("memory"))
    assert isinstance(restored, ContextKitAgentMemory)
    assert [key(m) for m in restored.get()] == [key(m) for m in memory.get()]
    assert [key(m) for m in restored.get_all()] == [key(m) for m in memory.get_all()]
    run_agent(agent, steps=3, ctx=restored_ctx, user_msg="And test_refund_total?")
    assert all(validate_messages(r, "llamaindex") == [] for r in llm.requests)


def _call(call_id: str, name: str = "grep_source", **kwargs: Any) -> ChatMessage:
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=[ToolCallBlock(tool_call_id=call_id, tool_name=name,
                                                                         tool_kwargs=kwargs)])


def _result(call_id: str, text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.TOOL, content=text, additional_kwargs={"tool_call_id": call_id})


def test_the_memory_api_sync_and_async() -> None:
    memory = ContextKitAgentMemory(budget=4_000, instructions="Be brief.")
    assert memory.get() == [] and memory.get_all() == []
    memory.put(ChatMessage(role=MessageRole.USER, content="Find the bug."))
    memory.put(_call("c1", pattern="bug"))
    assert [m.role for m in memory.get()] == [MessageRole.SYSTEM, MessageRole.USER]  # the open round waits
    assert len(memory.get_all()) == 2
    memory.put(_result("c1", "src/a.py: bug"))
    got = memory.get()
    assert [m.role for m in got] == [MessageRole.SYSTEM, MessageRole.USER, MessageRole.ASSISTANT, MessageRole.TOOL]
    assert validate_messages(got, "llamaindex") == []
    # an LLM that numbers its calls per response: the second c1 gets a fresh id, its result follows it
    memory.put_messages([_call("c1", pattern="again"), _result("c1", "src/b.py: again")])
    assert validate_messages(memory.get(), "llamaindex") == []
    # a call left unanswered when the agent moves on is answered with a note, never left open
    memory.put(_call("c9", pattern="x"))
    memory.put(ChatMessage(role=MessageRole.USER, content="Stop there."))
    got = memory.get()
    assert validate_messages(got, "llamaindex") == [] and "no result" in got[-2].content
    # Anthropic-shaped calls in additional_kwargs
    memory.put(ChatMessage(role=MessageRole.ASSISTANT, content="Looking.", additional_kwargs={
        "tool_calls": [{"id": "toolu_1", "name": "grep_source", "input": {"pattern": "y"}, "type": "tool_use"}]}))
    memory.put(_result("toolu_1", "nothing"))
    assert validate_messages(memory.get(), "llamaindex") == []

    async def go() -> None:
        await memory.aset([ChatMessage(role=MessageRole.USER, content="New task.")])
        assert [m.content for m in await memory.aget_all()] == ["New task."]
        await memory.aput_messages([_call("c1"), _result("c1", "ok")])
        assert len(await memory.aget()) == 4
        await memory.areset()
        assert await memory.aget() == [] and memory.session.limit == 4_000

    asyncio.run(go())
    with pytest.raises(InvalidArgumentError, match="answers no open call"):
        memory.put(_result("nope", "x"))
    with pytest.raises(InvalidArgumentError, match="tool_call_id"):
        memory.put(ChatMessage(role=MessageRole.TOOL, content="x"))


def test_to_dict_from_dict_round_trip_mid_round() -> None:
    memory = ContextKitAgentMemory(budget=3_000, options={"tool_output_tokens": 200})
    memory.put(ChatMessage(role=MessageRole.USER, content="Why does test_refund_rounding fail?"))
    memory.put(_call("c1", "read_ci_log", job="unit"))
    memory.put(_result("c1", read_ci_log("unit")))
    memory.put(_call("c2", pattern="x"))  # still open when saved
    data = json.loads(json.dumps(memory.to_dict()))
    assert data["class_name"] == "ContextKitAgentMemory"
    restored = ContextKitAgentMemory.from_dict(data)
    restored.put(_result("c2", "done"))
    memory.put(_result("c2", "done"))
    assert [key(m) for m in restored.get()] == [key(m) for m in memory.get()]
    assert PLANTED in next(m.content for m in restored.get() if m.role == MessageRole.TOOL)
    with pytest.raises(InvalidArgumentError):
        ContextKitAgentMemory.from_dict({**data, "state": {"version": 99}})


def test_a_ready_made_session_and_a_chat_memory_buffer_default_untouched() -> None:
    from contextkit.session import Session

    session = Session(5_000, instructions="Triage CI.", chat="llamaindex")
    memory = ContextKitAgentMemory(session=session)
    memory.put(ChatMessage(role=MessageRole.USER, content="hi"))
    assert memory.session is session and len(session.turns) == 1
    with pytest.raises(InvalidArgumentError, match="llamaindex"):
        ContextKitAgentMemory(session=Session(5_000))
    # a stock FunctionAgent without memory= still gets LlamaIndex's own default
    llm = ToolCallingLLM(script=["Fine."])
    agent = agent_of(llm, FunctionAgent)
    ctx = Context(agent)
    run_agent(agent, steps=1, ctx=ctx)
    assert isinstance(asyncio.run(ctx.store.get("memory")), ChatMemoryBuffer)


def test_state_return_direct_and_early_stopping_keep_requests_valid() -> None:
    """LlamaIndex's other paths through a run: ``initial_state`` written into the last message, a
    ``return_direct`` tool ending the run, ``early_stopping_method="generate"`` with calls open."""
    def lookup_owner(test: str) -> str:
        """Who owns a test."""
        return f"{test} is owned by the payments team"

    owner = FunctionTool.from_defaults(lookup_owner, return_direct=True)
    llm = ToolCallingLLM(script=[[("grep_source", {"pattern": "refund"})], [("lookup_owner", {"test": "t"})]])
    agent = ContextKitFunctionAgent(tools=[*TOOLS, owner], llm=llm, system_prompt=SYSTEM,
                                    initial_state={"ticket": "CI-42"})
    result = run_agent(agent, steps=5)
    assert "payments team" in str(result) and len(llm.requests) == 2
    assert "CI-42" in llm.requests[0][-1].content  # the state prompt, as LlamaIndex writes it
    assert all(validate_messages(r, "llamaindex") == [] for r in llm.requests)

    llm = ToolCallingLLM(script=[*scripted_steps(30)[:4], "Stopped early: the rounding of refunds."])
    agent = agent_of(llm)
    memory = ContextKitAgentMemory.from_defaults(llm=llm, system_prompt=SYSTEM)

    async def go() -> Any:
        return await agent.run(user_msg=TASK, memory=memory, max_iterations=4, early_stopping_method="generate")

    assert "Stopped early" in str(asyncio.run(go()))
    for request in llm.requests:  # LlamaIndex appends its own system note to the last request
        body = request[:-1] if request[-1].role == MessageRole.SYSTEM else request
        assert validate_messages(body, "llamaindex") == []
    everything = memory.get_all()
    assert "no result" in everything[-2].content and everything[-1].content.startswith("Stopped early")


def test_the_report_of_the_last_request_predicts_the_cache() -> None:
    llm = ToolCallingLLM(script=scripted_steps(12))
    memory = ContextKitAgentMemory.from_defaults(llm=llm, system_prompt=SYSTEM, tools=TOOLS)
    run_agent(agent_of(llm), steps=12, memory=memory)
    report = memory.report.session
    assert report.total_tokens <= memory.session.limit and report.predicted_cached_tokens >= 1_024

"""LlamaIndex agents on a :class:`~contextkit.Session`: ``ContextKitAgentMemory`` and ``ContextKitFunctionAgent``.

How a LlamaIndex ``FunctionAgent`` (and an ``AgentWorkflow`` of them) builds each LLM call, in
llama-index-core 0.14: ``[ChatMessage(system, agent.system_prompt), *memory.aget(), *scratchpad]``.
The memory (``memory=`` of ``agent.run``, kept in ``ctx.store["memory"]``) gets the user message
when a run starts and, only when the run ends, the run's steps (``finalize`` ->
``memory.aput_messages(scratchpad)``). Inside a run every tool call and every tool output sits in the
agent's *scratchpad*, appended whole to every request: a memory alone cannot shorten an agent's run,
however clever it is.

So two pieces:

* :class:`ContextKitAgentMemory`, a LlamaIndex ``BaseMemory`` backed by a Session. Its put methods
  ``session.add`` what the agent records (user, assistant with tool calls, tool results); its get
  returns the Session's next request as ``ChatMessage`` (summaries of condensed steps, verbatim
  steps, tool outputs cut by the task with the whole kept under a handle, a prefix that stays
  byte-identical between compactions). With a stock ``FunctionAgent`` it condenses what earlier
  runs left; the current run's steps still travel in the scratchpad.
* :class:`ContextKitFunctionAgent`, a ``FunctionAgent`` that moves each step from its scratchpad
  into a ``ContextKitAgentMemory`` as soon as it is made (public methods only: ``take_step``,
  ``handle_tool_call_results``, ``run``), so every LLM call of a run is the Session's request. It
  makes one when ``run`` gets no memory, sized to the LLM (the plug-in's budget rule) less its system
  prompt and tool schemas.

The budget of a memory is the whole request: the agent's system prompt (sent by the agent before
the memory's messages) and the tools' schemas are counted against it when they are known
(``system_prompt=``/``tools=`` or ``bind``), and the Session gets the rest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Self

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.agent.workflow.workflow_events import AgentOutput, ToolCallResult
from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock
from llama_index.core.memory import BaseMemory
from llama_index.core.workflow import Context
from pydantic import Field, PrivateAttr

from contextkit.core.config import DEFAULT_TOKENIZER
from contextkit.core.errors import InvalidArgumentError
from contextkit.core.tokenizers import get_tokenizer
from contextkit.integrations.llamaindex._budget import prompt_budget
from contextkit.session import Session

__all__ = ["ContextKitAgentMemory", "ContextKitFunctionAgent"]

#: Tokens a message costs beyond its text (OpenAI's chat format), and a tool schema beyond its JSON.
_PER_MESSAGE = 3
_PER_TOOL = 8
#: The least the Session must have once the system prompt, the tools and ``reserve`` are taken.
_MIN_SESSION_BUDGET = 256
#: The result recorded for a call the agent never answered (a run stopped, an error in a step).
_NO_RESULT = "(no result: the agent went on before this tool call returned)"
STATE_VERSION = 1


def _text(message: ChatMessage) -> str:
    return "".join(b.text for b in message.blocks if isinstance(b, TextBlock))


def _role(message: ChatMessage) -> str:
    role = str(getattr(message.role, "value", message.role))
    return {"chatbot": "assistant", "model": "assistant", "developer": "system", "function": "tool"}.get(role, role)


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value if value is not None else {}, ensure_ascii=False)


def _calls_of(message: ChatMessage) -> list[tuple[str, str, str]]:
    """``(id, name, arguments)`` of every call in a message: ``ToolCallBlock`` blocks, then
    ``additional_kwargs["tool_calls"]`` as OpenAI dicts or SDK objects, or ``{id, name, input}`` as
    Anthropic-shaped integrations keep them (each id once)."""
    calls: list[tuple[str, str, str]] = []
    for block in message.blocks:
        if isinstance(block, ToolCallBlock):
            calls.append((block.tool_call_id or "", block.tool_name, _arguments(block.tool_kwargs)))
    for call in message.additional_kwargs.get("tool_calls") or []:
        data = call.model_dump() if hasattr(call, "model_dump") else call
        if not isinstance(data, Mapping):
            raise InvalidArgumentError(f"a tool call must be a dict or a pydantic model, not {call!r:.80}")
        fn = data.get("function")
        if isinstance(fn, Mapping):
            call_id, name, arguments = data.get("id"), fn.get("name"), _arguments(fn.get("arguments"))
        else:
            call_id, name = data.get("id"), data.get("name")
            arguments = _arguments(data.get("input", data.get("arguments")))
        if not any(c[0] == call_id for c in calls):
            calls.append((str(call_id or ""), str(name or ""), arguments))
    return calls


class ContextKitAgentMemory(BaseMemory):
    """A LlamaIndex memory whose get is a :class:`~contextkit.Session`'s next request.

    ``budget``: tokens of the whole request (the agent's system prompt, the tools' schemas and this
    memory's messages); None: the LLM's (``context_window - num_output``, given by ``from_defaults(llm=)``
    or ``bind``, as :class:`ContextKitFunctionAgent` does). ``system_prompt`` is the agent's, counted
    but not sent (the agent sends it); ``instructions`` are the Session's, sent as its system message
    (for an agent with no system prompt). ``reserve`` keeps tokens back for anything else the
    provider adds; ``options`` are :class:`~contextkit.session.SessionOptions` keywords. ``session=``
    takes a ready-made Session (its budget is the memory's part; nothing is reserved).
    """

    budget: int | None = Field(default=None, gt=0)
    instructions: str | None = None
    system_prompt: str | None = None
    reserve: int = Field(default=0, ge=0)
    options: dict[str, Any] = Field(default_factory=dict)
    _session: Session | None = PrivateAttr(default=None)
    _llm: Any = PrivateAttr(default=None)
    _tools_tokens: int = PrivateAttr(default=0)
    _pending: list[dict[str, Any]] = PrivateAttr(default_factory=list)  # a round of calls not all answered
    _open: dict[str, str] = PrivateAttr(default_factory=dict)  # open call id -> the id the Session knows
    _used: set[str] = PrivateAttr(default_factory=set)  # call ids recorded (to rename one an LLM reuses)
    _report: Any = PrivateAttr(default=None)

    def __init__(self, *, session: Session | None = None, llm: Any = None, tools: Sequence[Any] | None = None,
                 **data: Any) -> None:
        super().__init__(**data)
        if "chat" in self.options and self.options["chat"] != "llamaindex":
            raise InvalidArgumentError("ContextKitAgentMemory's requests are LlamaIndex ChatMessages (chat='llamaindex')")
        if session is not None:
            if not isinstance(session, Session):
                raise InvalidArgumentError(f"session must be a contextkit Session, not {type(session).__name__}")
            if session.options.chat != "llamaindex":
                raise InvalidArgumentError("the session must be made with chat='llamaindex'")
            self._session = session
            self._used = {c.id for t in [*session.compacted, *session.turns] for c in t.tool_calls}
        self.bind(llm=llm, tools=tools)

    @classmethod
    def class_name(cls) -> str:
        return "ContextKitAgentMemory"

    @classmethod
    def from_defaults(cls, chat_history: list[ChatMessage] | None = None, llm: Any = None, *,
                      budget: int | None = None, session: Session | None = None, tools: Sequence[Any] | None = None,
                      **kwargs: Any) -> ContextKitAgentMemory:
        """A memory sized to ``llm`` (or ``budget``), holding ``chat_history`` when given. Keywords that are
        not fields (``high_water=``, ``tool_output_tokens=``, ...) are Session options."""
        fields = {k: kwargs.pop(k) for k in ("instructions", "system_prompt", "reserve", "options") if k in kwargs}
        options = {**fields.pop("options", {}), **kwargs}
        memory = cls(budget=budget, session=session, llm=llm, tools=tools, options=options, **fields)
        if chat_history:
            memory.set(chat_history)
        return memory

    # ------------------------------------------------------------------ the session
    def bind(self, llm: Any = None, system_prompt: str | None = None, tools: Sequence[Any] | None = None) -> bool:
        """Learn what is not known yet of the agent (its LLM for the budget, its system prompt and tools
        to count); nothing changes once the Session is made. True when something was learnt."""
        if self._session is not None:
            return False
        learnt = False
        if llm is not None and self._llm is None:
            self._llm, learnt = llm, True
        if system_prompt and self.system_prompt is None:
            self.system_prompt, learnt = system_prompt, True
        if tools and not self._tools_tokens:
            self._tools_tokens, learnt = _tool_tokens(tools), True
        return learnt

    @property
    def session(self) -> Session:
        """The Session behind this memory (made on first use)."""
        if self._session is None:
            self._session = Session(self._session_budget(), instructions=self.instructions, chat="llamaindex",
                                    **self.options)
        return self._session

    @property
    def bound(self) -> bool:
        """Whether the memory knows its budget (a Session exists or can be made)."""
        return self._session is not None or self.budget is not None or self._llm is not None

    def _session_budget(self) -> int:
        total = self.budget
        if total is None:
            llm = self._llm
            if llm is None:
                raise InvalidArgumentError(
                    "ContextKitAgentMemory does not know its budget: pass budget= (tokens of the whole request), "
                    "build it with ContextKitAgentMemory.from_defaults(llm=...), or run it with a "
                    "ContextKitFunctionAgent (which gives it the agent's LLM)")
            total = prompt_budget(llm)
        tokenizer = get_tokenizer(DEFAULT_TOKENIZER)
        system = tokenizer.count(self.system_prompt) + _PER_MESSAGE if self.system_prompt else 0
        own = total - self.reserve - system - self._tools_tokens
        if own < _MIN_SESSION_BUDGET:
            raise InvalidArgumentError(
                f"a budget of {total:,} tokens leaves {own:,} for the conversation after the system prompt "
                f"({system:,}), the tool schemas ({self._tools_tokens:,}) and reserve ({self.reserve:,}); "
                f"it needs {_MIN_SESSION_BUDGET:,} at least")
        return own

    def tool_output(self, handle: str) -> str:
        """The whole output of a tool result the requests carry cut, or as a stub (its handle is in them)."""
        return self.session.tool_output(handle)

    # ------------------------------------------------------------------ put
    def put(self, message: ChatMessage) -> None:
        """Record one message: a round of tool calls reaches the Session once all its results are in."""
        data = self._as_dict(message)
        if data["role"] == "tool":
            self._put_result(data)
        else:
            self._close_open_calls()
            if data.get("tool_calls"):
                self._pending = [self._renamed_calls(data)]
            else:
                self.session.add(data)
        if self._pending and not self._open:
            pending, self._pending = self._pending, []
            self.session.add(pending)

    async def aput(self, message: ChatMessage) -> None:
        self.put(message)

    def put_messages(self, messages: list[ChatMessage]) -> None:
        for message in messages:
            self.put(message)

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        self.put_messages(messages)

    def _as_dict(self, message: ChatMessage) -> dict[str, Any]:
        if not isinstance(message, ChatMessage):
            raise InvalidArgumentError(f"ContextKitAgentMemory takes LlamaIndex ChatMessage, not {type(message).__name__}")
        role, text = _role(message), _text(message)
        if role == "tool":
            call_id = message.additional_kwargs.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidArgumentError("a tool message needs additional_kwargs['tool_call_id'] (the call it answers)")
            return {"role": "tool", "tool_call_id": call_id, "content": text}
        calls = _calls_of(message) if role == "assistant" else []
        if not calls:
            return {"role": role, "content": text}
        return {"role": "assistant", "content": text or None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for call_id, name, arguments in calls]}

    def _renamed_calls(self, data: dict[str, Any]) -> dict[str, Any]:
        """Give a call whose id was used before (some LLMs number calls per response) a fresh one, kept
        for its result: a provider refuses a request with one id twice."""
        calls = []
        for call in data["tool_calls"]:
            given = call["id"]
            if not given:
                raise InvalidArgumentError(f"tool call {call['function']['name']!r} has no id")
            new, n = given, 1
            while new in self._used or new in self._open.values():
                n += 1
                new = f"{given}~{n}"
            self._used.add(new)
            self._open[given] = new
            calls.append({**call, "id": new})
        return {**data, "tool_calls": calls}

    def _put_result(self, data: dict[str, Any]) -> None:
        given = data["tool_call_id"]
        if given not in self._open:
            self.session.add(data)  # the Session names what it answers, or refuses it
            return
        self._pending.append({**data, "tool_call_id": self._open.pop(given)})

    def _close_open_calls(self) -> None:
        """A message came before every call of the round was answered: the unanswered ones get a result
        saying so (a request with a call and no result is refused by every provider)."""
        for new in list(self._open.values()):
            self._pending.append({"role": "tool", "tool_call_id": new, "content": _NO_RESULT})
        self._open.clear()
        if self._pending:
            pending, self._pending = self._pending, []
            self.session.add(pending)

    # ------------------------------------------------------------------ get
    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """The Session's next request (a round of calls still awaiting results is left out, as a stock
        agent leaves its scratchpad out of memory)."""
        session = self.session
        if not session.turns and not session.compacted:
            return []
        result = session.prompt()
        self._report = result.report
        return list(result.messages("llamaindex"))

    @property
    def report(self) -> Any:
        """The report of the last request :meth:`get` made (``report.session``: tokens, compactions, the
        predicted cached prefix); None before the first."""
        return self._report

    async def aget(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        return self.get(input=input, **kwargs)

    def get_all(self) -> list[ChatMessage]:
        """Every message recorded, whole (tool outputs uncut), then a round of calls awaiting results."""
        if self._session is None:
            return []
        out = [_message_of(t.role, t.text, [(c.id, c.name, c.arguments) for c in t.tool_calls], t.call_id)
               for t in [*self._session.compacted, *self._session.turns]]
        for data in self._pending:
            calls = [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in data.get("tool_calls") or []]
            out.append(_message_of(data["role"], data.get("content") or "", calls, data.get("tool_call_id")))
        return out

    async def aget_all(self) -> list[ChatMessage]:
        return self.get_all()

    # ------------------------------------------------------------------ set, reset
    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the history with ``messages`` (what ``agent.run(chat_history=...)`` does)."""
        self.reset()
        self.put_messages(list(messages))

    async def aset(self, messages: list[ChatMessage]) -> None:
        self.set(messages)

    def reset(self) -> None:
        """Forget every message (a new Session, same budget and options)."""
        if self._session is not None:
            old = self._session
            self._session = Session(old.options.budget if isinstance(old.options.budget, str) else old.limit,
                                    history_summarizer=None, **old.options.model_dump(exclude={"budget"}))
        self._pending, self._open, self._used = [], {}, set()

    async def areset(self) -> None:
        self.reset()

    # ------------------------------------------------------------------ serialisation
    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """Fields and state as plain JSON (what ``ctx.to_dict(serializer=JsonSerializer())`` stores)."""
        data = super().to_dict(**kwargs)
        data["state"] = {"version": STATE_VERSION,
                         "session": self._session.to_dict() if self._session is not None else None,
                         "pending": list(self._pending), "open": dict(self._open), "used": sorted(self._used),
                         "tools_tokens": self._tools_tokens}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> Self:
        """A memory saved by :meth:`to_dict` (``kwargs``: ``llm=``, fields to override)."""
        data = dict(data)
        data.pop("class_name", None)
        state = data.pop("state", None) or {}
        if not isinstance(state, Mapping) or state.get("version", STATE_VERSION) != STATE_VERSION:
            raise InvalidArgumentError("not a saved ContextKitAgentMemory state (or one of another version)")
        memory = cls(**{**data, **kwargs})
        if state.get("session") is not None:
            memory._session = Session.from_dict(state["session"])
        memory._pending = [dict(m) for m in state.get("pending") or []]
        memory._open = {str(k): str(v) for k, v in (state.get("open") or {}).items()}
        memory._used = {str(i) for i in state.get("used") or []}
        memory._tools_tokens = int(state.get("tools_tokens") or 0)
        return memory


class ContextKitFunctionAgent(FunctionAgent):
    """A ``FunctionAgent`` whose every LLM call is a :class:`ContextKitAgentMemory`'s request.

    Each step (the LLM's reply with its tool calls, then the tool results) goes into the memory as soon as
    it is made, rather than into the scratchpad a stock agent appends whole to every call until the run
    ends. ``run`` without ``memory=`` makes one sized to ``llm`` (``context_window - num_output``, less the
    system prompt and the tool schemas). With any other memory it is a stock ``FunctionAgent``.
    """

    def run(self, *args: Any, **kwargs: Any) -> Any:
        positional = bool(args) and not isinstance(args[0], Context)
        memory = args[2] if positional and len(args) > 2 else kwargs.get("memory")
        if memory is None:  # used only when ctx holds no memory yet (a ctx's own memory goes on)
            memory = ContextKitAgentMemory()
            kwargs["memory"] = memory
        if isinstance(memory, ContextKitAgentMemory):
            memory.bind(llm=self.llm, system_prompt=self.system_prompt, tools=self.tools)
        return super().run(*args, **kwargs)

    async def take_step(self, ctx: Any, llm_input: list[ChatMessage], tools: Sequence[Any],
                        memory: BaseMemory) -> AgentOutput:
        if isinstance(memory, ContextKitAgentMemory):  # an AgentWorkflow's memory meets its agent here
            memory.bind(llm=self.llm, system_prompt=self.system_prompt, tools=tools)
        output = await super().take_step(ctx, llm_input, tools, memory)
        if isinstance(memory, ContextKitAgentMemory):
            scratchpad: list[ChatMessage] = await ctx.store.get(self.scratchpad_key, default=[])
            if scratchpad and output.tool_calls:
                scratchpad[-1] = _with_selected_calls(scratchpad[-1], output)
            await self._move_to_memory(ctx, scratchpad, memory)
        return output

    async def handle_tool_call_results(self, ctx: Any, results: list[ToolCallResult], memory: BaseMemory) -> None:
        await super().handle_tool_call_results(ctx, results, memory)
        if isinstance(memory, ContextKitAgentMemory):
            await self._move_to_memory(ctx, await ctx.store.get(self.scratchpad_key, default=[]), memory)

    async def _move_to_memory(self, ctx: Any, scratchpad: list[ChatMessage], memory: ContextKitAgentMemory) -> None:
        await ctx.store.set(self.scratchpad_key, [])
        await memory.aput_messages(scratchpad)


def _with_selected_calls(message: ChatMessage, output: AgentOutput) -> ChatMessage:
    """The LLM's reply with its calls as the agent will run them (``ToolSelection``: id, name, arguments),
    whatever shape the provider's integration gave them."""
    blocks: list[Any] = [b for b in message.blocks if isinstance(b, TextBlock)]
    blocks += [ToolCallBlock(tool_call_id=s.tool_id, tool_name=s.tool_name, tool_kwargs=s.tool_kwargs)
               for s in output.tool_calls]
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks)


def _message_of(role: str, text: str, calls: list[tuple[str, str, str]], call_id: str | None) -> ChatMessage:
    """A recorded message as LlamaIndex writes it (a call's arguments as a dict when they are JSON)."""
    if role == "tool":
        return ChatMessage(role=MessageRole.TOOL, content=text, additional_kwargs={"tool_call_id": call_id})
    blocks: list[Any] = [TextBlock(text=text)] if text else []
    for cid, name, arguments in calls:
        try:
            kwargs: Any = json.loads(arguments)
        except ValueError:
            kwargs = arguments
        blocks.append(ToolCallBlock(tool_call_id=cid, tool_name=name, tool_kwargs=kwargs if isinstance(
            kwargs, (dict, str)) else arguments))
    return ChatMessage(role=MessageRole(role), blocks=blocks)


def _tool_tokens(tools: Sequence[Any]) -> int:
    """Tokens of the tools' schemas as an OpenAI-compatible API receives them (an estimate)."""
    tokenizer = get_tokenizer(DEFAULT_TOKENIZER)
    total = 0
    for tool in tools:
        metadata = getattr(tool, "metadata", None)
        if metadata is None:
            continue
        try:
            schema = metadata.to_openai_tool(skip_length_check=True)
        except Exception:  # noqa: BLE001 - a tool without a schema still costs its name and description
            schema = {"name": getattr(metadata, "name", ""), "description": getattr(metadata, "description", "")}
        total += tokenizer.count(json.dumps(schema, ensure_ascii=False)) + _PER_TOOL
    return total

"""Whether a list of chat messages is a sequence a provider's chat API accepts.

A session renders a conversation's or an agent run's history as the messages of the next call.
A sequence the API refuses (a tool result whose call was cut away, a call left unanswered, two
user turns in a row for Claude) fails the whole turn with a 400, usually far from the code that
trimmed the history. :func:`validate_messages` names every such problem, by message index and in
plain words; :func:`check_messages` raises them as one :class:`InvalidArgumentError`.

The rules, per style (and where they are documented):

* ``"openai"``, Chat Completions (https://platform.openai.com/docs/api-reference/chat/create,
  https://platform.openai.com/docs/guides/function-calling): a list of dicts with roles
  system/developer/user/assistant/tool; ``content`` a string or a non-empty list of parts, left
  out (``None``) only by an assistant message that carries ``tool_calls``; each call
  ``{"id", "type": "function", "function": {"name", "arguments"}}`` with ``arguments`` a JSON
  string of an object, ids unique. The API answers "messages with role 'tool' must be a response
  to a preceding message with 'tool_calls'" and "an assistant message with 'tool_calls' must be
  followed by tool messages responding to each 'tool_call_id'": so the ``tool`` messages that
  answer an assistant message come right after it, together, each answering one of *its* calls
  once, and every call is answered before the next message of another role. A request ends with a
  user or a tool message (what the model is asked to answer).
* ``"anthropic"``, the Messages API (https://docs.anthropic.com/en/api/messages,
  https://platform.claude.com/docs/en/agents-and-tools/tool-use/handle-tool-calls,
  https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching): ``{"system", "messages"}``
  (the two arguments; a bare list of messages too); roles user/assistant only, alternating, the
  first and the last a user message; content a non-empty string or a non-empty list of blocks
  (``text`` with text, ``tool_use`` {id, name, input: object} in assistant messages only,
  ``tool_result`` {tool_use_id, content: string or blocks, is_error: bool} in user messages only).
  "Each tool_use block must have a corresponding tool_result block in the next message", and in
  that user message the tool_result blocks come first, before any text; a tool_result answers a
  tool_use of the assistant message right before it. Tool-use ids are unique; at most 4 blocks
  carry ``cache_control`` (cache breakpoints) in tools, system and messages together.
* ``"llamaindex"``, a list of ``llama_index.core.llms.ChatMessage``
  (https://docs.llamaindex.ai/en/stable/module_guides/models/llms/usage_standalone/,
  https://docs.llamaindex.ai/en/stable/api_reference/llms/openai/): tool calls of an assistant
  message are ``ToolCallBlock`` blocks or OpenAI-shaped dicts (or the ``openai`` SDK's objects) in
  ``additional_kwargs["tool_calls"]``, as llama-index-llms-openai produces them; a result is a
  ``MessageRole.TOOL`` message with ``additional_kwargs["tool_call_id"]``. LlamaIndex apps mostly
  talk to OpenAI-compatible APIs through it, so the OpenAI ordering rules apply.

Stricter than the APIs in two places, on purpose: Claude would merge two user turns in a row and
would continue a final assistant turn (a prefill); OpenAI would accept arguments that are not
JSON. A session never means to produce either.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeGuard

from contextkit.core.errors import InvalidArgumentError

__all__ = ["MAX_CACHE_BREAKPOINTS", "Style", "check_messages", "validate_messages"]

Style = Literal["openai", "anthropic", "llamaindex"]

#: Anthropic's limit on blocks carrying ``cache_control`` in one request.
MAX_CACHE_BREAKPOINTS = 4

_OPENAI_ROLES = ("system", "developer", "user", "assistant", "tool")
_ANTHROPIC_OTHER_BLOCKS = frozenset({"image", "document", "thinking", "redacted_thinking", "search_result"})
_RESULT_CONTENT_BLOCKS = frozenset({"text", "image", "document", "search_result"})


def validate_messages(messages: Any, style: Style) -> list[str]:
    """The problems that make ``messages`` a request ``style``'s API would refuse; empty when none.

    Each problem is a sentence naming the message by its index (``message 3: ...``).
    """
    if style == "openai":
        return _validate_openai(messages)
    if style == "anthropic":
        return _validate_anthropic(messages)
    if style == "llamaindex":
        return _validate_llamaindex(messages)
    raise InvalidArgumentError(f"style must be 'openai', 'anthropic' or 'llamaindex', not {style!r}")


def check_messages(messages: Any, style: Style) -> None:
    """Raise :class:`InvalidArgumentError` naming every problem :func:`validate_messages` finds."""
    problems = validate_messages(messages, style)
    if problems:
        raise InvalidArgumentError(f"invalid {style} messages ({len(problems)} problems): " + "; ".join(problems))


# ------------------------------------------------------------------ shared helpers


def _nonempty_str(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and value != ""


def _has_text(value: Any) -> bool:
    return isinstance(value, str) and not value.isspace() and value != ""


def _arguments_problems(where: str, arguments: Any) -> list[str]:
    """A call's arguments: a JSON string that parses to an object."""
    if not isinstance(arguments, str):
        return [f"{where}: arguments must be a JSON string, not {type(arguments).__name__}"]
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return [f"{where}: arguments are not valid JSON ({arguments[:40]!r})"]
    if not isinstance(parsed, dict):
        return [f"{where}: arguments must be a JSON object, not {type(parsed).__name__}"]
    return []


def _quoted(ids: Sequence[str]) -> str:
    return ", ".join(repr(i) for i in ids)


# ------------------------------------------------------------------ the OpenAI ordering rules


@dataclass
class _Turn:
    """What the ordering rules need of one message: its role, the calls it makes, the call it answers."""

    role: str
    calls: list[str] = field(default_factory=list)
    answers: str | None = None


@dataclass
class _Round:
    """The assistant message whose tool results may come now, and its calls not answered yet."""

    caller: int
    pending: list[str]
    answered: set[str] = field(default_factory=set)


def _tool_order_problems(turns: Sequence[_Turn]) -> list[str]:
    first_call: dict[str, int] = {}
    problems = _duplicate_call_problems(turns, first_call)
    current: _Round | None = None
    last_other = -1  # the last message that is not a tool message
    for i, turn in enumerate(turns):
        if turn.role == "tool":
            problems += _tool_turn_problems(i, turn.answers, current, first_call, last_other, turns)
            continue
        if current is not None and current.pending:
            problems.append(_unanswered(current, f"before message {i} ({turn.role})"))
        current = _Round(i, list(turn.calls)) if turn.calls else None
        last_other = i
    if current is not None and current.pending:
        problems.append(_unanswered(current, "(the conversation ends)"))
    return problems


def _duplicate_call_problems(turns: Sequence[_Turn], first_call: dict[str, int]) -> list[str]:
    problems = []
    for i, turn in enumerate(turns):
        for call_id in turn.calls:
            if call_id in first_call:
                problems.append(f"message {i}: tool call id {call_id!r} is used again (first in message {first_call[call_id]})")
            else:
                first_call[call_id] = i
    return problems


def _unanswered(current: _Round, when: str) -> str:
    return f"message {current.caller}: tool call(s) {_quoted(current.pending)} never answered {when}"


def _tool_turn_problems(
    i: int, answers: str | None, current: _Round | None, first_call: dict[str, int], last_other: int,
    turns: Sequence[_Turn],
) -> list[str]:
    if answers is None:
        return []  # the shape check names the missing tool_call_id
    if current is not None and answers in current.pending:
        current.pending.remove(answers)
        current.answered.add(answers)
        return []
    if current is not None and answers in current.answered:
        return [f"message {i}: tool message answers {answers!r} a second time"]
    called_in = first_call.get(answers)
    if called_in is None:
        return [f"message {i}: tool message answers {answers!r}, which answers no tool call (no assistant message calls it)"]
    if called_in > i:
        return [f"message {i}: tool message answers {answers!r} before its call in message {called_in}"]
    if current is None:
        between = f"message {last_other} ({turns[last_other].role})" if last_other >= 0 else "nothing"
        return [f"message {i}: tool message answers {answers!r} of message {called_in} but is separated from its "
                f"call by {between}; tool messages must follow their assistant message directly"]
    return [f"message {i}: tool message answers {answers!r} of message {called_in}, not a call of the nearest "
            f"preceding assistant message with tool_calls (message {current.caller})"]


def _request_end_problems(turns: Sequence[_Turn]) -> list[str]:
    if not turns:
        return ["the conversation is empty"]
    last = turns[-1]
    if last.role in ("user", "tool"):
        return []
    article = "an" if last.role[:1] in ("a", "e", "i", "o", "u") else "a"
    return [f"message {len(turns) - 1}: the conversation ends with {article} {last.role} message; a request must "
            "end with a user or a tool message"]


# ------------------------------------------------------------------ openai


def _validate_openai(messages: Any) -> list[str]:
    if not isinstance(messages, (list, tuple)):
        return [f"openai messages must be a list of dicts, not {type(messages).__name__}"]
    problems: list[str] = []
    turns = []
    for i, message in enumerate(messages):
        turn, found = _openai_turn(i, message)
        turns.append(turn)
        problems += found
    return problems + _tool_order_problems(turns) + _request_end_problems(turns)


def _openai_turn(i: int, message: Any) -> tuple[_Turn, list[str]]:
    if not isinstance(message, Mapping):
        return _Turn("invalid"), [f"message {i}: must be a dict, not {type(message).__name__}"]
    role = message.get("role")
    if role not in _OPENAI_ROLES:
        return _Turn(str(role)), [f"message {i}: role {role!r} is not one of {', '.join(_OPENAI_ROLES)}"]
    calls, problems = _openai_calls(i, role, message.get("tool_calls"))
    problems += _openai_content_problems(i, role, message.get("content"), bool(message.get("tool_calls")))
    answers = None
    if role == "tool":
        answers = message.get("tool_call_id")
        if not _nonempty_str(answers):
            problems.append(f"message {i}: tool message has no tool_call_id")
            answers = None
    return _Turn(role, calls, answers), problems


def _openai_calls(i: int, role: str, tool_calls: Any) -> tuple[list[str], list[str]]:
    if tool_calls is None:
        return [], []
    if role != "assistant":
        return [], [f"message {i}: only an assistant message may carry tool_calls, not a {role} message"]
    if not isinstance(tool_calls, (list, tuple)) or not tool_calls:
        return [], [f"message {i}: tool_calls must be a non-empty list (leave it out when there are none)"]
    calls: list[str] = []
    problems: list[str] = []
    for k, call in enumerate(tool_calls):
        problems += _openai_call_problems(f"message {i} tool call {k}", call)
        if isinstance(call, Mapping) and _nonempty_str(call.get("id")):
            calls.append(call["id"])
    return calls, problems


def _openai_call_problems(where: str, call: Any) -> list[str]:
    if not isinstance(call, Mapping):
        return [f"{where}: must be a dict, not {type(call).__name__}"]
    problems = [] if _nonempty_str(call.get("id")) else [f"{where}: has no id"]
    if call.get("type") != "function":
        problems.append(f"{where}: type must be 'function', not {call.get('type')!r}")
    function = call.get("function")
    if not isinstance(function, Mapping):
        return [*problems, f"{where}: has no function"]
    if not _nonempty_str(function.get("name")):
        problems.append(f"{where}: function has no name")
    return problems + _arguments_problems(where, function.get("arguments"))


def _openai_content_problems(i: int, role: str, content: Any, has_calls: bool) -> list[str]:
    if content is None:
        if role == "assistant" and has_calls:
            return []
        return [f"message {i}: content is missing (None); only an assistant message with tool_calls may leave it out"]
    if isinstance(content, str):
        return []
    if not isinstance(content, (list, tuple)):
        return [f"message {i}: content must be a string or a list of content parts, not {type(content).__name__}"]
    if not content:
        return [f"message {i}: content is an empty list of parts"]
    return [f"message {i} part {k}: {problem}" for k, part in enumerate(content)
            if (problem := _openai_part_problem(part))]


def _openai_part_problem(part: Any) -> str:
    if not isinstance(part, Mapping) or not _nonempty_str(part.get("type")):
        return "a content part must be a dict with a type"
    if part["type"] == "text" and not isinstance(part.get("text"), str):
        return "a text part has no text"
    return ""


# ------------------------------------------------------------------ anthropic


def _validate_anthropic(request: Any) -> list[str]:
    split = _split_anthropic_request(request)
    if isinstance(split, str):
        return [split]
    system, messages, tools = split
    problems = _anthropic_system_problems(system)
    if not isinstance(messages, (list, tuple)) or not messages:
        return [*problems, "the request has no messages (a non-empty list is needed)"]
    for i, message in enumerate(messages):
        problems += _anthropic_message_problems(i, message)
    roles = [_anthropic_role(m) for m in messages]
    problems += _anthropic_role_order_problems(roles)
    problems += _anthropic_tool_problems(messages, roles)
    return problems + _cache_control_problems(system, messages, tools)


def _split_anthropic_request(request: Any) -> tuple[Any, Any, Any] | str:
    if isinstance(request, Mapping):
        return request.get("system"), request.get("messages"), request.get("tools")
    if isinstance(request, (list, tuple)):
        return None, request, None
    return f"an anthropic request must be a dict {{'system', 'messages'}} or a list of messages, not {type(request).__name__}"


def _anthropic_system_problems(system: Any) -> list[str]:
    if system is None or isinstance(system, str):
        return []
    if not isinstance(system, (list, tuple)):
        return [f"system: must be a string or a list of text blocks, not {type(system).__name__}"]
    return [f"system block {k}: must be a text block with non-empty text" for k, block in enumerate(system)
            if not (isinstance(block, Mapping) and block.get("type") == "text" and _has_text(block.get("text")))]


def _anthropic_role(message: Any) -> str:
    return str(message.get("role")) if isinstance(message, Mapping) else "invalid"


def _anthropic_message_problems(i: int, message: Any) -> list[str]:
    if not isinstance(message, Mapping):
        return [f"message {i}: must be a dict, not {type(message).__name__}"]
    role = message.get("role")
    if role not in ("user", "assistant"):
        return [f"message {i}: role {role!r} is not user or assistant (the system prompt is the 'system' argument)"]
    content = message.get("content")
    if isinstance(content, str):
        return [] if _has_text(content) else [f"message {i}: content is empty"]
    if not isinstance(content, (list, tuple)):
        return [f"message {i}: content must be a string or a list of blocks, not {type(content).__name__}"]
    if not content:
        return [f"message {i}: content is an empty list of blocks"]
    problems = []
    for k, block in enumerate(content):
        problems += _anthropic_block_problems(f"message {i} block {k}", role, block)
    return problems


def _anthropic_block_problems(where: str, role: str, block: Any) -> list[str]:
    if not isinstance(block, Mapping):
        return [f"{where}: must be a dict, not {type(block).__name__}"]
    kind = block.get("type")
    if kind == "text":
        return [] if _has_text(block.get("text")) else [f"{where}: text block with empty text"]
    if kind == "tool_use":
        wrong = [] if role == "assistant" else [f"{where}: tool_use block in a user message (only assistant messages call tools)"]
        return wrong + _tool_use_shape_problems(where, block)
    if kind == "tool_result":
        wrong = [] if role == "user" else [f"{where}: tool_result block in an assistant message (only user messages carry results)"]
        return wrong + _tool_result_shape_problems(where, block)
    if kind in _ANTHROPIC_OTHER_BLOCKS:
        return []
    return [f"{where}: unknown block type {kind!r}"]


def _tool_use_shape_problems(where: str, block: Mapping[str, Any]) -> list[str]:
    problems = [] if _nonempty_str(block.get("id")) else [f"{where}: tool_use has no id"]
    if not _nonempty_str(block.get("name")):
        problems.append(f"{where}: tool_use has no name")
    if not isinstance(block.get("input"), Mapping):
        problems.append(f"{where}: tool_use input must be an object, not {type(block.get('input')).__name__}")
    return problems


def _tool_result_shape_problems(where: str, block: Mapping[str, Any]) -> list[str]:
    problems = [] if _nonempty_str(block.get("tool_use_id")) else [f"{where}: tool_result has no tool_use_id"]
    if "is_error" in block and not isinstance(block["is_error"], bool):
        problems.append(f"{where}: is_error must be true or false, not {block['is_error']!r}")
    content = block.get("content")
    if content is None or isinstance(content, str):
        return problems
    if not isinstance(content, (list, tuple)):
        return [*problems, f"{where}: tool_result content must be a string or a list of blocks"]
    for k, inner in enumerate(content):
        if not isinstance(inner, Mapping) or inner.get("type") not in _RESULT_CONTENT_BLOCKS:
            problems.append(f"{where} content {k}: must be a text (or image, document) block")
        elif inner.get("type") == "text" and not _has_text(inner.get("text")):
            problems.append(f"{where} content {k}: text block with empty text")
    return problems


def _anthropic_role_order_problems(roles: Sequence[str]) -> list[str]:
    problems = []
    if roles[0] == "assistant":
        problems.append("message 0: the first message must be a user message, not an assistant message")
    for i in range(1, len(roles)):
        if roles[i] == roles[i - 1] and roles[i] in ("user", "assistant"):
            problems.append(f"message {i}: a second {roles[i]} message in a row; roles must alternate user/assistant")
    if roles[-1] == "assistant":
        problems.append(f"message {len(roles) - 1}: the request ends with an assistant message; "
                        "the last message must be a user message")
    return problems


def _blocks(message: Any) -> list[Mapping[str, Any]]:
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, (list, tuple)):
        return []
    return [b for b in content if isinstance(b, Mapping)]


def _anthropic_tool_problems(messages: Sequence[Any], roles: Sequence[str]) -> list[str]:
    uses = [_tool_use_ids(m) if roles[i] == "assistant" else [] for i, m in enumerate(messages)]
    first_use: dict[str, int] = {}
    problems = _duplicate_use_problems(uses, first_use)
    for i, message in enumerate(messages):
        expected = uses[i - 1] if i > 0 else []
        if roles[i] == "user":
            problems += _tool_result_problems(i, _blocks(message), expected, first_use)
        if uses[i]:
            problems += _unanswered_use_problems(i, uses[i], messages, roles)
    return problems


def _tool_use_ids(message: Any) -> list[str]:
    ids = (b.get("id") for b in _blocks(message) if b.get("type") == "tool_use")
    return [use_id for use_id in ids if _nonempty_str(use_id)]


def _duplicate_use_problems(uses: Sequence[Sequence[str]], first_use: dict[str, int]) -> list[str]:
    problems = []
    for i, ids in enumerate(uses):
        for use_id in ids:
            if use_id in first_use:
                problems.append(f"message {i}: tool_use id {use_id!r} is used again (first in message {first_use[use_id]})")
            else:
                first_use[use_id] = i
    return problems


def _tool_result_problems(
    i: int, blocks: Sequence[Mapping[str, Any]], expected: Sequence[str], first_use: dict[str, int],
) -> list[str]:
    problems = []
    answered: set[str] = set()
    other = ""  # the type of the first block that is not a tool_result
    for k, block in enumerate(blocks):
        if block.get("type") != "tool_result":
            other = other or str(block.get("type"))
            continue
        where, use_id = f"message {i} block {k}", block.get("tool_use_id")  # checked for shape elsewhere
        if other:
            problems.append(f"{where}: tool_result after a {other} block; tool_result blocks must come first in the message")
        if not _nonempty_str(use_id):
            continue
        if use_id in answered:
            problems.append(f"{where}: tool_result answers {use_id!r} a second time")
        elif use_id not in expected:
            problems.append(f"{where}: tool_result for {use_id!r} {_misplaced_result(i, use_id, first_use)}")
        answered.add(use_id)
    return problems


def _misplaced_result(i: int, use_id: str, first_use: dict[str, int]) -> str:
    used_in = first_use.get(use_id)
    if used_in is None:
        return "answers no tool_use (no assistant message has that id)"
    if used_in > i:
        return f"comes before its tool_use in message {used_in}"
    return (f"is not a tool_use of the immediately preceding assistant message (its tool_use is in message "
            f"{used_in}); tool_result blocks must be in the message right after their tool_use")


def _unanswered_use_problems(i: int, ids: Sequence[str], messages: Sequence[Any], roles: Sequence[str]) -> list[str]:
    if i + 1 == len(messages):
        return [f"message {i}: tool_use {_quoted(ids)} never answered (the request ends)"]
    if roles[i + 1] != "user":
        return [f"message {i}: tool_use {_quoted(ids)} never answered (the next message is not a user message)"]
    answered = {b.get("tool_use_id") for b in _blocks(messages[i + 1]) if b.get("type") == "tool_result"}
    missing = [use_id for use_id in ids if use_id not in answered]
    if not missing:
        return []
    return [f"message {i}: tool_use {_quoted(missing)} never answered: no tool_result for it in message {i + 1}"]


def _cache_control_problems(system: Any, messages: Sequence[Any], tools: Any) -> list[str]:
    places = _cache_marks("tool", tools) + _cache_marks("system block", system)
    for i, message in enumerate(messages):
        for k, block in enumerate(_blocks(message)):
            places += _cache_marks(f"message {i} block", [block], first=k)
            places += _cache_marks(f"message {i} block {k} content", block.get("content"))
    if len(places) <= MAX_CACHE_BREAKPOINTS:
        return []
    return [f"{len(places)} blocks carry cache_control ({', '.join(places)}); at most "
            f"{MAX_CACHE_BREAKPOINTS} cache breakpoints are allowed in one request"]


def _cache_marks(label: str, blocks: Any, first: int = 0) -> list[str]:
    if not isinstance(blocks, (list, tuple)):
        return []
    return [f"{label} {first + k}" for k, b in enumerate(blocks)
            if isinstance(b, Mapping) and b.get("cache_control") is not None]


# ------------------------------------------------------------------ llamaindex


def _validate_llamaindex(messages: Any) -> list[str]:
    from llama_index.core.base.llms.types import ChatMessage  # optional dependency: imported when used

    if not isinstance(messages, (list, tuple)):
        return [f"llamaindex messages must be a list of ChatMessage, not {type(messages).__name__}"]
    problems: list[str] = []
    turns = []
    for i, message in enumerate(messages):
        if not isinstance(message, ChatMessage):
            turns.append(_Turn("invalid"))
            problems.append(f"message {i}: must be a llama_index ChatMessage, not {type(message).__name__}")
            continue
        turn, found = _llamaindex_turn(i, message)
        turns.append(turn)
        problems += found
    return problems + _tool_order_problems(turns) + _request_end_problems(turns)


def _llamaindex_turn(i: int, message: Any) -> tuple[_Turn, list[str]]:
    role = str(getattr(message.role, "value", message.role))
    if role not in _OPENAI_ROLES:
        return _Turn(role), [f"message {i}: role {role!r} is not one of {', '.join(_OPENAI_ROLES)}"]
    calls, problems = _llamaindex_calls(i, message)
    if calls and role != "assistant":
        problems.append(f"message {i}: only an assistant message may carry tool calls, not a {role} message")
    has_content = any(getattr(b, "block_type", "") != "tool_call" for b in message.blocks)
    if not has_content and not (role == "assistant" and calls):
        problems.append(f"message {i}: content is missing (no blocks); only an assistant message with tool calls may leave it out")
    answers = None
    if role == "tool":
        answers = message.additional_kwargs.get("tool_call_id")
        if not _nonempty_str(answers):
            problems.append(f"message {i}: tool message has no additional_kwargs['tool_call_id']")
            answers = None
    return _Turn(role, calls, answers), problems


def _llamaindex_calls(i: int, message: Any) -> tuple[list[str], list[str]]:
    """Call ids from ``ToolCallBlock`` blocks, then from ``additional_kwargs['tool_calls']`` (the same call once)."""
    calls: list[str] = []
    problems: list[str] = []
    for k, block in enumerate(message.blocks):
        if getattr(block, "block_type", "") == "tool_call":
            problems += _tool_call_block_problems(f"message {i} block {k}", block)
            if _nonempty_str(block.tool_call_id):
                calls.append(block.tool_call_id)
    in_blocks = set(calls)
    extra = message.additional_kwargs.get("tool_calls")
    if extra is None:
        return calls, problems
    if not isinstance(extra, (list, tuple)):
        return calls, [*problems, f"message {i}: additional_kwargs['tool_calls'] must be a list"]
    for k, call in enumerate(extra):
        as_dict = call.model_dump() if hasattr(call, "model_dump") else call
        problems += _openai_call_problems(f"message {i} additional_kwargs tool call {k}", as_dict)
        call_id = as_dict.get("id") if isinstance(as_dict, Mapping) else None
        if _nonempty_str(call_id) and call_id not in in_blocks:
            calls.append(call_id)
    return calls, problems


def _tool_call_block_problems(where: str, block: Any) -> list[str]:
    problems = [] if _nonempty_str(block.tool_call_id) else [f"{where}: ToolCallBlock has no tool_call_id"]
    if not _nonempty_str(block.tool_name):
        problems.append(f"{where}: ToolCallBlock has no tool_name")
    if isinstance(block.tool_kwargs, str):
        problems += _arguments_problems(where, block.tool_kwargs)
    return problems

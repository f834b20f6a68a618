"""``validate_messages``: the checker the session tests trust, tested both ways.

A session must never hand a provider a message sequence its API refuses (a 400 in the middle of an
agent run, far from the trimming that caused it). The session tests prove that with
``validate_messages``, so the checker itself has to be right in both directions:

* it must not cry wolf: 1,000 random agent and chat runs per style (tests/session/trajectories.py,
  seeded), each valid at every point where the application calls the model, pass clean. A checker
  that refused valid shapes (parallel calls, results out of order, a text block after the results,
  several user messages in a row) would make the session tests fail on correct renderings;
* it must not miss: for each rule, a valid conversation mutated to break exactly that rule is
  reported, and the test asserts the *specific* problem (its words and its message index), so a
  checker that stopped enforcing a rule, or only complained for another reason, fails the test.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

from contextkit.core.errors import InvalidArgumentError
from contextkit.session._validate import check_messages, validate_messages
from tests.session.trajectories import STYLES, call_points, provider_messages, random_trajectory

llms = pytest.importorskip("llama_index.core.base.llms.types")
ChatMessage, MessageRole, TextBlock, ToolCallBlock = llms.ChatMessage, llms.MessageRole, llms.TextBlock, llms.ToolCallBlock


def _one(problems: list[str], *words: str) -> str:
    """The problem that has all of ``words`` (fails, listing the problems, when none has)."""
    found = [p for p in problems if all(w in p for w in words)]
    assert found, f"no problem naming {words!r} in {problems!r}"
    return found[0]


# ------------------------------------------------------------------ random runs: all valid


@pytest.mark.parametrize("style", STYLES)
def test_random_runs_are_valid_at_every_call_point(style):
    checked = 0
    for seed in range(1000):
        rng = random.Random(seed)
        run = random_trajectory(rng, style, rng.randint(0, 12))
        points = call_points(run, style)
        assert points, f"seed {seed}: no call point"
        for i in points:
            problems = validate_messages(provider_messages(run[: i + 1], style), style)
            assert problems == [], f"seed {seed}, call point {i}: {problems}"
            checked += 1
    assert checked > 3000


@pytest.mark.parametrize("style", STYLES)
def test_runs_are_deterministic_and_rich(style):
    def shape(run: list[Any]) -> str:
        return repr([m if isinstance(m, dict) else m.model_dump() for m in run])

    assert shape(random_trajectory(random.Random(7), style, 8)) == shape(random_trajectory(random.Random(7), style, 8))
    text = "".join(shape(random_trajectory(random.Random(s), style, 10)) for s in range(60))
    for needed in ("Traceback (most recent call last)", "ERROR worker-3" if style != "anthropic" else "is_error",
                   "call_" if style != "anthropic" else "toolu_01"):
        assert needed in text


@pytest.mark.parametrize("style", STYLES)
def test_a_run_stopped_inside_a_round_of_tool_calls_is_invalid(style):
    # The prefix that ends on the assistant's calls, before any result, is no request: the checker must say so.
    found = 0
    for seed in range(200):
        rng = random.Random(seed)
        run = random_trajectory(rng, style, rng.randint(1, 8))
        for i, message in enumerate(run):
            if _calls_tools(message, style):
                problems = validate_messages(provider_messages(run[: i + 1], style), style)
                _one(problems, f"message {i}:", "never answered")
                found += 1
    assert found > 100


@pytest.mark.parametrize("style", STYLES)
def test_dropping_any_tool_result_of_a_random_run_is_reported(style):
    found = 0
    for seed in range(200):
        rng = random.Random(seed)
        run = random_trajectory(rng, style, rng.randint(1, 8))
        rounds = [i for i, m in enumerate(run) if _calls_tools(m, style)]
        if not rounds:
            continue
        caller = rng.choice(rounds)
        broken = _drop_one_result(run, caller, style, rng)
        problems = validate_messages(provider_messages(broken, style), style)
        _one(problems, f"message {caller}:", "never answered")
        found += 1
    assert found > 100


def _calls_tools(message: Any, style: str) -> bool:
    if style == "openai":
        return bool(message.get("tool_calls"))
    if style == "anthropic":
        return message["role"] == "assistant" and any(b["type"] == "tool_use" for b in message["content"])
    return bool(message.additional_kwargs.get("tool_calls")) or any(b.block_type == "tool_call" for b in message.blocks)


def _drop_one_result(run: list[Any], caller: int, style: str, rng: random.Random) -> list[Any]:
    run = list(run)
    if style == "anthropic":
        answer = copy.deepcopy(run[caller + 1])
        results = [k for k, b in enumerate(answer["content"]) if b["type"] == "tool_result"]
        del answer["content"][rng.choice(results)]
        if not answer["content"]:
            answer["content"] = "(the results were lost)"
        run[caller + 1] = answer
        return run
    end = caller + 1
    while end < len(run) and _role(run[end]) == "tool":
        end += 1
    del run[rng.randrange(caller + 1, end)]
    return run


def _role(message: Any) -> str:
    return message["role"] if isinstance(message, dict) else str(message.role.value)


# ------------------------------------------------------------------ openai rules


def _openai_call(call_id: str, name: str = "read_file", arguments: str = '{"path": "src/a.py"}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _openai_base() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test."},
        {"role": "assistant", "content": None, "tool_calls": [_openai_call("call_a"), _openai_call("call_b", "run_tests", "{}")]},
        {"role": "tool", "tool_call_id": "call_b", "content": "1 failed"},  # results may come in any order
        {"role": "tool", "tool_call_id": "call_a", "content": "def f(): ..."},
        {"role": "assistant", "content": "Fixed."},
        {"role": "user", "content": [{"type": "text", "text": "Thanks. Run it again?"}]},
        {"role": "user", "content": "And the linter."},
        {"role": "assistant", "content": "Running.", "tool_calls": [_openai_call("call_c", "shell", '{"command": "ruff"}')]},
        {"role": "tool", "tool_call_id": "call_c", "content": "All checks passed!"},
    ]


def test_openai_base_is_valid():
    assert validate_messages(_openai_base(), "openai") == []


def test_openai_orphaned_tool_result():
    messages = _openai_base()
    del messages[8]  # the assistant message of call_c, trimmed away; its result stays
    _one(validate_messages(messages, "openai"), "message 8:", "'call_c'", "answers no tool call")


def test_openai_result_before_its_call():
    messages = _openai_base()
    messages[8], messages[9] = messages[9], messages[8]
    _one(validate_messages(messages, "openai"), "message 8:", "'call_c'", "before its call in message 9")


def test_openai_call_never_answered():
    messages = _openai_base()
    del messages[3]
    _one(validate_messages(messages, "openai"), "message 2:", "'call_b'", "never answered before message 4")


def test_openai_call_never_answered_at_the_end():
    messages = _openai_base()[:9]
    problems = validate_messages(messages, "openai")
    _one(problems, "message 8:", "'call_c'", "never answered", "conversation ends")
    _one(problems, "message 8:", "ends with an assistant message")


def test_openai_result_separated_from_its_call_by_a_user_message():
    messages = _openai_base()
    messages.insert(3, {"role": "user", "content": "hurry up"})
    problems = validate_messages(messages, "openai")
    _one(problems, "message 4:", "'call_b'", "separated from its call by message 3 (user)")
    _one(problems, "message 2:", "never answered before message 3 (user)")


def test_openai_result_of_an_earlier_round():
    messages = _openai_base()
    messages.append({"role": "tool", "tool_call_id": "call_a", "content": "again"})
    _one(validate_messages(messages, "openai"), "message 10:", "'call_a' of message 2",
         "not a call of the nearest preceding assistant message with tool_calls (message 8)")


def test_openai_call_answered_twice():
    messages = _openai_base()
    messages.insert(5, dict(messages[4]))
    _one(validate_messages(messages, "openai"), "message 5:", "'call_a' a second time")


def test_openai_duplicate_call_id():
    messages = _openai_base()
    messages[8]["tool_calls"][0]["id"] = "call_a"
    messages[9]["tool_call_id"] = "call_a"
    assert validate_messages(messages, "openai") == ["message 8: tool call id 'call_a' is used again (first in message 2)"]


@pytest.mark.parametrize("arguments, words", [
    ('{"path": ', "arguments are not valid JSON"),
    ("[1, 2]", "arguments must be a JSON object, not list"),
    ({"path": "a"}, "arguments must be a JSON string, not dict"),
])
def test_openai_bad_arguments(arguments, words):
    messages = _openai_base()
    messages[2]["tool_calls"][1]["function"]["arguments"] = arguments
    assert validate_messages(messages, "openai") == [_one(validate_messages(messages, "openai"), "message 2 tool call 1:", words)]


@pytest.mark.parametrize("index, change, words", [
    (1, {"content": None}, "message 1: content is missing"),
    (5, {"content": None}, "message 5: content is missing"),
    (1, {"content": 42}, "message 1: content must be a string or a list"),
    (6, {"content": []}, "message 6: content is an empty list"),
    (1, {"role": "function"}, "message 1: role 'function' is not one of"),
    (3, {"tool_call_id": None}, "message 3: tool message has no tool_call_id"),
    (1, {"tool_calls": [_openai_call("call_u")]}, "message 1: only an assistant message may carry tool_calls"),
    (5, {"tool_calls": []}, "message 5: tool_calls must be a non-empty list"),
])
def test_openai_message_shapes(index, change, words):
    messages = _openai_base()
    messages[index] = {**messages[index], **change}
    _one(validate_messages(messages, "openai"), words)


@pytest.mark.parametrize("change, words", [
    ({"type": "tool"}, "message 2 tool call 0: type must be 'function'"),
    ({"id": ""}, "message 2 tool call 0: has no id"),
    ({"function": {"arguments": "{}"}}, "message 2 tool call 0: function has no name"),
])
def test_openai_tool_call_shapes(change, words):
    messages = _openai_base()
    messages[2]["tool_calls"][0] = {**messages[2]["tool_calls"][0], **change}
    _one(validate_messages(messages, "openai"), words)


def test_openai_request_ends_with_user_or_tool():
    assert validate_messages(_openai_base()[:8], "openai") == []  # ends on the user
    _one(validate_messages(_openai_base()[:6], "openai"), "message 5:", "ends with an assistant message")
    assert validate_messages([], "openai") == ["the conversation is empty"]


# ------------------------------------------------------------------ anthropic rules


def _anthropic_base() -> dict[str, Any]:
    messages = [
        {"role": "user", "content": "Fix the failing test."},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": {"path": "src/a.py"}},
            {"type": "tool_use", "id": "toolu_b", "name": "run_tests", "input": {}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_b", "content": "Traceback ...", "is_error": True},
            {"type": "tool_result", "tool_use_id": "toolu_a", "content": [{"type": "text", "text": "def f(): ..."}]},
            {"type": "text", "text": "Be quick."},
        ]},
        {"role": "assistant", "content": [{"type": "text", "text": "Fixed."}]},
        {"role": "user", "content": "Thanks. Run the linter?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_c", "name": "shell", "input": {"command": "ruff"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_c", "content": "All checks passed!"}]},
    ]
    return {"system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
            "messages": messages}


def _anthropic(request: dict[str, Any]) -> list[str]:
    return validate_messages(request, "anthropic")


def test_anthropic_base_is_valid_as_a_request_and_as_a_bare_list():
    assert _anthropic(_anthropic_base()) == []
    assert validate_messages(_anthropic_base()["messages"], "anthropic") == []
    assert _anthropic({**_anthropic_base(), "system": "plain"}) == []


def test_anthropic_orphaned_tool_result():
    request = _anthropic_base()
    request["messages"][6]["content"][0]["tool_use_id"] = "toolu_gone"
    problems = _anthropic(request)
    _one(problems, "message 6 block 0:", "'toolu_gone'", "answers no tool_use")
    _one(problems, "message 5:", "'toolu_c'", "never answered")


def test_anthropic_result_not_right_after_its_tool_use():
    request = _anthropic_base()
    request["messages"][4] = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "late"}, {"type": "text", "text": "Run the linter?"}]}
    _one(_anthropic(request), "message 4 block 0:", "'toolu_a'", "not a tool_use of the immediately preceding assistant message")


def test_anthropic_result_before_its_call():
    request = _anthropic_base()
    request["messages"][4] = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_c", "content": "x"}]}
    _one(_anthropic(request), "message 4 block 0:", "'toolu_c'", "before its tool_use in message 5")


def test_anthropic_call_never_answered():
    request = _anthropic_base()
    del request["messages"][2]["content"][0]
    assert _anthropic(request) == ["message 1: tool_use 'toolu_b' never answered: no tool_result for it in message 2"]


def test_anthropic_tool_result_not_first():
    request = _anthropic_base()
    content = request["messages"][2]["content"]
    content.insert(0, content.pop())
    _one(_anthropic(request), "message 2 block 1:", "after a text block", "tool_result blocks must come first")


def test_anthropic_roles_not_alternating():
    request = _anthropic_base()
    request["messages"].insert(5, {"role": "user", "content": "Also the docs."})
    assert _anthropic(request) == ["message 5: a second user message in a row; roles must alternate user/assistant"]


def test_anthropic_first_message_assistant():
    request = _anthropic_base()
    request["messages"].insert(0, {"role": "assistant", "content": "Hello."})
    request["messages"].insert(0, {"role": "user", "content": "(dropped)"})
    assert _anthropic(request) == []  # the control: the same with a user message first is fine
    del request["messages"][0]
    _one(_anthropic(request), "message 0: the first message must be a user message")


def test_anthropic_last_message_assistant():
    request = _anthropic_base()
    request["messages"].append({"role": "assistant", "content": "Done."})
    _one(_anthropic(request), "message 7:", "the last message must be a user message")


def test_anthropic_more_than_four_cache_breakpoints():
    request = _anthropic_base()
    messages = request["messages"]
    for block in (messages[1]["content"][2], messages[2]["content"][1], messages[5]["content"][0]):
        block["cache_control"] = {"type": "ephemeral"}
    assert _anthropic(request) == []  # four, the limit
    messages[6]["content"][0]["cache_control"] = {"type": "ephemeral"}
    _one(_anthropic(request), "5 blocks carry cache_control", "system block 0", "message 6 block 0", "at most 4")


def test_anthropic_duplicate_tool_use_id():
    request = _anthropic_base()
    request["messages"][5]["content"][0]["id"] = "toolu_a"
    request["messages"][6]["content"][0]["tool_use_id"] = "toolu_a"
    assert _anthropic(request) == ["message 5: tool_use id 'toolu_a' is used again (first in message 1)"]


def test_anthropic_result_given_twice():
    request = _anthropic_base()
    request["messages"][6]["content"].append(dict(request["messages"][6]["content"][0]))
    _one(_anthropic(request), "message 6 block 1:", "'toolu_c' a second time")


@pytest.mark.parametrize("index, content, words", [
    (4, [{"type": "tool_use", "id": "toolu_u", "name": "x", "input": {}}], "message 4 block 0: tool_use block in a user message"),
    (3, [{"type": "tool_result", "tool_use_id": "toolu_c", "content": "x"}], "message 3 block 0: tool_result block in an assistant message"),
    (3, [{"type": "text", "text": " "}], "message 3 block 0: text block with empty text"),
    (4, "", "message 4: content is empty"),
    (4, [], "message 4: content is an empty list"),
    (4, None, "message 4: content must be a string or a list"),
    (4, [{"type": "video"}], "message 4 block 0: unknown block type 'video'"),
    (5, [{"type": "tool_use", "id": "toolu_c", "name": "shell", "input": "ruff"}], "message 5 block 0: tool_use input must be an object"),
    (6, [{"type": "tool_result", "tool_use_id": "toolu_c", "is_error": "yes"}], "message 6 block 0: is_error must be true or false"),
    (6, [{"type": "tool_result", "tool_use_id": "toolu_c", "content": [{"type": "text", "text": ""}]}],
     "message 6 block 0 content 0: text block with empty text"),
])
def test_anthropic_block_shapes(index, content, words):
    request = _anthropic_base()
    request["messages"][index] = {**request["messages"][index], "content": content}
    _one(_anthropic(request), words)


def test_anthropic_roles_and_request_shape():
    request = _anthropic_base()
    request["messages"].insert(0, {"role": "system", "content": "be brief"})
    _one(_anthropic(request), "message 0: role 'system' is not user or assistant")
    _one(_anthropic({"system": "x", "messages": []}), "the request has no messages")
    _one(_anthropic({**_anthropic_base(), "system": [{"type": "text", "text": ""}]}), "system block 0")
    _one(validate_messages("hello", "anthropic"), "must be a dict")


# ------------------------------------------------------------------ llamaindex rules


def _block_call(call_id: str, kwargs: Any = None) -> Any:
    return ToolCallBlock(tool_call_id=call_id, tool_name="read_file", tool_kwargs={"path": "a"} if kwargs is None else kwargs)


def _llamaindex_base() -> list[Any]:
    return [
        ChatMessage(role=MessageRole.SYSTEM, content="You are a coding agent."),
        ChatMessage(role=MessageRole.USER, content="Fix the failing test."),
        ChatMessage(role=MessageRole.ASSISTANT, blocks=[TextBlock(text="Looking."), _block_call("call_a"), _block_call("call_b")]),
        ChatMessage(role=MessageRole.TOOL, content="def f(): ...", additional_kwargs={"tool_call_id": "call_a"}),
        ChatMessage(role=MessageRole.TOOL, content="1 failed", additional_kwargs={"tool_call_id": "call_b"}),
        ChatMessage(role=MessageRole.ASSISTANT, content="Fixed."),
        ChatMessage(role=MessageRole.USER, content="Run the linter?"),
        ChatMessage(role=MessageRole.ASSISTANT, content=None,
                    additional_kwargs={"tool_calls": [_openai_call("call_c", "shell", '{"command": "ruff"}')]}),
        ChatMessage(role=MessageRole.TOOL, content="All checks passed!", additional_kwargs={"tool_call_id": "call_c"}),
    ]


def _llama(messages: list[Any]) -> list[str]:
    return validate_messages(messages, "llamaindex")


def test_llamaindex_base_is_valid():
    assert _llama(_llamaindex_base()) == []


def test_llamaindex_orphaned_tool_result():
    messages = _llamaindex_base()
    del messages[7]
    _one(_llama(messages), "message 7:", "'call_c'", "answers no tool call")


def test_llamaindex_result_separated_by_a_user_message():
    messages = _llamaindex_base()
    messages.insert(4, ChatMessage(role=MessageRole.USER, content="hurry"))
    problems = _llama(messages)
    _one(problems, "message 5:", "'call_b'", "separated from its call by message 4 (user)")
    _one(problems, "message 2:", "'call_b'", "never answered before message 4 (user)")


def test_llamaindex_call_never_answered():
    messages = _llamaindex_base()
    del messages[8]
    _one(_llama(messages), "message 7:", "'call_c'", "never answered", "conversation ends")


def test_llamaindex_result_before_its_call():
    messages = _llamaindex_base()
    messages[7], messages[8] = messages[8], messages[7]
    _one(_llama(messages), "message 7:", "'call_c'", "before its call in message 8")


def test_llamaindex_duplicate_call_id():
    messages = _llamaindex_base()
    messages[7].additional_kwargs["tool_calls"][0]["id"] = "call_a"
    messages[8].additional_kwargs["tool_call_id"] = "call_a"
    assert _llama(messages) == ["message 7: tool call id 'call_a' is used again (first in message 2)"]


def test_llamaindex_non_json_arguments():
    messages = _llamaindex_base()
    messages[2].blocks[1] = _block_call("call_a", '{"path": ')
    messages[7].additional_kwargs["tool_calls"][0]["function"]["arguments"] = "not json"
    problems = _llama(messages)
    _one(problems, "message 2 block 1:", "arguments are not valid JSON")
    _one(problems, "message 7 additional_kwargs tool call 0:", "arguments are not valid JSON")


def test_llamaindex_the_same_call_in_blocks_and_additional_kwargs_counts_once():
    messages = _llamaindex_base()
    messages[2].additional_kwargs["tool_calls"] = [_openai_call("call_a"), _openai_call("call_b")]
    assert _llama(messages) == []


def test_llamaindex_sdk_objects_in_additional_kwargs():
    class SdkCall:  # what llama-index-llms-openai stores: the openai SDK's pydantic objects
        def __init__(self, data: dict[str, Any]) -> None:
            self.data = data

        def model_dump(self) -> dict[str, Any]:
            return json.loads(json.dumps(self.data))

    messages = _llamaindex_base()
    messages[7].additional_kwargs["tool_calls"] = [SdkCall(_openai_call("call_c", "shell", "{}"))]
    assert _llama(messages) == []
    messages[7].additional_kwargs["tool_calls"] = [SdkCall(_openai_call("call_c", "shell", "[]"))]
    _one(_llama(messages), "message 7 additional_kwargs tool call 0:", "must be a JSON object")


@pytest.mark.parametrize("index, message, words", [
    (8, ChatMessage(role=MessageRole.TOOL, content="x"), "message 8: tool message has no additional_kwargs['tool_call_id']"),
    (6, ChatMessage(role=MessageRole.CHATBOT, content="x"), "message 6: role 'chatbot' is not one of"),
    (6, {"role": "user", "content": "x"}, "message 6: must be a llama_index ChatMessage"),
    (6, ChatMessage(role=MessageRole.USER, content=None), "message 6: content is missing"),
    (6, ChatMessage(role=MessageRole.USER, blocks=[_block_call("call_u")]), "message 6: only an assistant message may carry tool calls"),
])
def test_llamaindex_message_shapes(index, message, words):
    messages = _llamaindex_base()
    messages[index] = message
    _one(_llama(messages), words)


def test_llamaindex_request_ends_with_user_or_tool():
    _one(_llama(_llamaindex_base()[:6]), "message 5:", "ends with an assistant message")


# ------------------------------------------------------------------ check_messages


def test_check_messages_raises_every_problem_and_passes_valid_ones():
    check_messages(_openai_base(), "openai")
    messages = _openai_base()
    messages[8]["tool_calls"][0]["function"]["arguments"] = "{"
    del messages[3]
    with pytest.raises(InvalidArgumentError) as caught:
        check_messages(messages, "openai")
    assert "never answered" in str(caught.value) and "not valid JSON" in str(caught.value)
    with pytest.raises(InvalidArgumentError, match="style"):
        validate_messages([], "gemini")  # type: ignore[arg-type]

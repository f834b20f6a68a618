"""Random but valid agent and chat runs, in each provider's shapes, for the session tests.

``random_trajectory(rng, style, steps)`` is a run as it arrives from the provider's API and the
application: user turns, assistant answers, assistant messages with one or several (parallel) tool
calls, their results (some failures with a traceback, a few thousand-line outputs with one line that
matters), and for OpenAI and LlamaIndex now and then several user messages in a row. The same seed
gives the same run. ``call_points`` says after which messages the application calls the model; the
run up to there (through ``provider_messages`` for Anthropic's ``{"system", "messages"}``) is a
request the provider accepts, and ``contextkit.session.validate_messages`` must say so.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable, Sequence
from typing import Any

STYLES = ("openai", "anthropic", "llamaindex")
SYSTEM_PROMPT = "You are a careful coding agent. Use the tools to inspect the repository before answering."

_ALPHANUM = string.ascii_letters + string.digits
_TOPICS = ("the failing test in tests/test_parser.py", "why the build is slow", "the memory leak in the worker",
           "the flaky CI job", "how the cache is invalidated", "the off-by-one in the pager")
_FILES = ("src/parser.py", "src/worker.py", "src/cache.py", "tests/test_parser.py", "setup.cfg", "README.md")


# ------------------------------------------------------------------ public


def random_trajectory(rng: random.Random, style: str, steps: int) -> list[Any]:
    """A run of ``steps`` model calls in ``style``; deterministic for ``rng``'s seed."""
    if style == "openai":
        return _openai_run(rng, steps)
    if style == "anthropic":
        return _anthropic_run(rng, steps)
    if style == "llamaindex":
        return [_to_llamaindex(rng, m) for m in _openai_run(rng, steps)]
    raise ValueError(f"unknown style {style!r}")


def provider_messages(trajectory: Sequence[Any], style: str) -> Any:
    """The request for ``trajectory``: Anthropic's ``{"system", "messages"}``; the list itself otherwise."""
    if style == "anthropic":
        system = [{"type": "text", "text": SYSTEM_PROMPT, "cache_control": {"type": "ephemeral"}}]
        return {"system": system, "messages": list(trajectory)}
    return list(trajectory)


def call_points(trajectory: Sequence[Any], style: str) -> list[int]:
    """The indexes after which the application calls the model.

    After a user message, or after the last result of a round of tool calls, when what comes next is
    the model's message (or nothing yet).
    """
    roles = [_role(m, style) for m in trajectory]
    asks = ("user",) if style == "anthropic" else ("user", "tool")
    return [i for i, role in enumerate(roles)
            if role in asks and (i + 1 == len(roles) or roles[i + 1] == "assistant")]


def _role(message: Any, style: str) -> str:
    if style == "llamaindex":
        return str(message.role.value)
    return str(message["role"])


# ------------------------------------------------------------------ ids, tools, outputs


class _Ids:
    """Unique ids in a provider's style (``call_...``, ``toolu_01...``), from the run's rng."""

    def __init__(self, rng: random.Random, prefix: str, length: int) -> None:
        self.rng, self.prefix, self.length, self.seen = rng, prefix, length, set[str]()

    def new(self) -> str:
        while True:
            candidate = self.prefix + "".join(self.rng.choices(_ALPHANUM, k=self.length))
            if candidate not in self.seen:
                self.seen.add(candidate)
                return candidate


def _tool_call(rng: random.Random) -> tuple[str, dict[str, Any]]:
    name = rng.choice(("read_file", "run_tests", "search", "shell", "list_dir", "http_get"))
    args: dict[str, Any] = {
        "read_file": lambda: {"path": rng.choice(_FILES)},
        "run_tests": lambda: {"selector": rng.choice(("tests/", "tests/test_parser.py", "-k cache")), "verbose": True},
        "search": lambda: {"query": rng.choice(("def parse", "TODO", "lru_cache", "timeout=")), "max_results": 20},
        "shell": lambda: {"command": rng.choice(("git log -n 5", "pip list", "du -sh build", "env | sort"))},
        "list_dir": lambda: {"path": rng.choice(("src", "tests", "."))},
        "http_get": lambda: {"url": f"https://ci.example.com/jobs/{rng.randint(1000, 9999)}/log"},
    }[name]()
    return name, args


def _tool_output(rng: random.Random, name: str) -> tuple[str, bool]:
    """A tool's output and whether it failed: mostly short, some tracebacks, a few thousand-line outputs."""
    draw = rng.random()
    if draw < 0.15:
        return _traceback(rng, name), True
    if draw < 0.18:
        return rng.choice((_long_log, _long_json, _long_test_run))(rng), False
    return _short_output(rng, name), False


def _short_output(rng: random.Random, name: str) -> str:
    if name == "read_file":
        return "\n".join(f"{n:4d}  {rng.choice(('x = 1', 'return parse(tokens)', 'def f(a, b):', 'pass'))}"
                         for n in range(1, rng.randint(3, 30)))
    if name == "list_dir":
        return "\n".join(rng.sample(_FILES, rng.randint(1, len(_FILES))))
    if name == "run_tests":
        return f"{rng.randint(10, 300)} passed in {rng.uniform(0.5, 30):.2f}s"
    return json.dumps({"status": "ok", "matches": rng.randint(0, 40), "elapsed_ms": rng.randint(1, 900)})


def _traceback(rng: random.Random, name: str) -> str:
    error = rng.choice(("FileNotFoundError: [Errno 2] No such file or directory: 'src/missing.py'",
                        "TimeoutError: the command ran past 120 s", "KeyError: 'tokens'",
                        "PermissionError: [Errno 13] Permission denied: '/etc/shadow'"))
    frames = "".join(f'  File "/app/tools/{name}.py", line {rng.randint(10, 400)}, in step_{k}\n    result = run(args)\n'
                     for k in range(rng.randint(1, 6)))
    return f"Error running {name}:\nTraceback (most recent call last):\n{frames}{error}"


def _long_lines(rng: random.Random, line: Callable[[int], str], relevant: str) -> str:
    count = rng.randint(2000, 4000)
    lines = [line(n) for n in range(count)]
    lines[rng.randrange(count)] = relevant
    return "\n".join(lines)


def _long_log(rng: random.Random) -> str:
    return _long_lines(rng, lambda n: f"2026-03-01T12:{n // 60 % 60:02d}:{n % 60:02d}Z INFO worker-{n % 8} batch {n} ok",
                       "2026-03-01T12:31:07Z ERROR worker-3 batch 1867 failed: connection reset by peer")


def _long_json(rng: random.Random) -> str:
    return "[\n" + _long_lines(rng, lambda n: f'  {{"id": {n}, "status": "ok", "retries": 0}},',
                               '  {"id": 4242, "status": "failed", "retries": 5},') + '\n  {"id": -1}\n]'


def _long_test_run(rng: random.Random) -> str:
    return _long_lines(rng, lambda n: f"tests/test_suite.py::test_case_{n} PASSED",
                       "tests/test_suite.py::test_unicode_paths FAILED - AssertionError: 'é' != 'e'")


def _user_text(rng: random.Random) -> str:
    return rng.choice(("Can you look at {t}?", "Please fix {t}.", "What causes {t}?", "Also check {t}.",
                       "Thanks. Now {t}, please.")).format(t=rng.choice(_TOPICS))


def _assistant_text(rng: random.Random) -> str:
    return rng.choice(("The cause is the cache key: it ignores the locale. I changed it and the tests pass.",
                       "I found it: the loop stops one item early. Fixed in src/parser.py.",
                       "The job is slow because it reinstalls everything; caching the wheels halves it.",
                       "I could not reproduce it locally; the log points at a network timeout."))


# ------------------------------------------------------------------ openai (and llamaindex)


def _openai_run(rng: random.Random, steps: int) -> list[dict[str, Any]]:
    ids = _Ids(rng, "call_", 24)
    run: list[dict[str, Any]] = []
    if rng.random() < 0.8:
        run.append({"role": rng.choice(("system", "system", "developer")), "content": SYSTEM_PROMPT})
    run += _openai_users(rng)
    for _ in range(steps):  # each step: the model is called, then the application answers
        if rng.random() < 0.55:
            run += _openai_tool_round(rng, ids)
            if rng.random() < 0.1:
                run.append({"role": "user", "content": "(while you work: " + _user_text(rng) + ")"})
        else:
            run.append({"role": "assistant", "content": _assistant_text(rng)})
            run += _openai_users(rng)
    if rng.random() < 0.5:
        run.append({"role": "assistant", "content": _assistant_text(rng)})  # the run's final answer
    return run


def _openai_users(rng: random.Random) -> list[dict[str, Any]]:
    count = 1 if rng.random() < 0.85 else rng.randint(2, 3)
    return [{"role": "user", "content": _user_text(rng) if rng.random() < 0.8
             else [{"type": "text", "text": _user_text(rng)}]} for _ in range(count)]


def _openai_tool_round(rng: random.Random, ids: _Ids) -> list[dict[str, Any]]:
    calls = []
    for _ in range(rng.choice((1, 1, 1, 2, 3, 4))):
        name, args = _tool_call(rng)
        calls.append({"id": ids.new(), "type": "function", "function": {"name": name, "arguments": json.dumps(args)}})
    content = rng.choice((None, None, "", "Let me check."))
    results = [{"role": "tool", "tool_call_id": c["id"], "content": _tool_output(rng, c["function"]["name"])[0]}
               for c in calls]
    if rng.random() < 0.2:
        rng.shuffle(results)  # parallel calls may finish in any order
    return [{"role": "assistant", "content": content, "tool_calls": calls}, *results]


def _to_llamaindex(rng: random.Random, message: dict[str, Any]) -> Any:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock

    role, content = MessageRole(message["role"]), message["content"]
    if isinstance(content, list):
        content = " ".join(part["text"] for part in content)
    if role is MessageRole.TOOL:
        return ChatMessage(role=role, content=content, additional_kwargs={"tool_call_id": message["tool_call_id"]})
    calls = message.get("tool_calls")
    if not calls:
        return ChatMessage(role=role, content=content)
    if rng.random() < 0.5:  # what llama-index-llms-openai produces: the SDK's calls, as dicts here
        return ChatMessage(role=role, content=content, additional_kwargs={"tool_calls": calls})
    blocks: list[Any] = [TextBlock(text=content)] if content else []
    blocks += [ToolCallBlock(tool_call_id=c["id"], tool_name=c["function"]["name"],
                             tool_kwargs=json.loads(c["function"]["arguments"])) for c in calls]
    return ChatMessage(role=role, blocks=blocks)


# ------------------------------------------------------------------ anthropic


def _anthropic_run(rng: random.Random, steps: int) -> list[dict[str, Any]]:
    ids = _Ids(rng, "toolu_01", 22)
    run: list[dict[str, Any]] = [_anthropic_user(rng)]
    for _ in range(steps):  # each step: the model is called, then the application answers
        if rng.random() < 0.55:
            run += _anthropic_tool_round(rng, ids)
        else:
            run += [{"role": "assistant", "content": [{"type": "text", "text": _assistant_text(rng)}]},
                    _anthropic_user(rng)]
    if rng.random() < 0.5:
        run.append({"role": "assistant", "content": [{"type": "text", "text": _assistant_text(rng)}]})
    return run


def _anthropic_user(rng: random.Random) -> dict[str, Any]:
    if rng.random() < 0.7:
        return {"role": "user", "content": _user_text(rng)}
    return {"role": "user", "content": [{"type": "text", "text": _user_text(rng)}]}


def _anthropic_tool_round(rng: random.Random, ids: _Ids) -> list[dict[str, Any]]:
    uses = []
    for _ in range(rng.choice((1, 1, 1, 2, 3, 4))):
        name, args = _tool_call(rng)
        uses.append({"type": "tool_use", "id": ids.new(), "name": name, "input": args})
    lead = [{"type": "text", "text": "Let me check."}] if rng.random() < 0.4 else []
    results = [_anthropic_result(rng, use) for use in uses]
    if rng.random() < 0.2:
        rng.shuffle(results)
    if rng.random() < 0.1:  # the application adds a note after the results (text must come after them)
        results.append({"type": "text", "text": "(while you work: " + _user_text(rng) + ")"})
    return [{"role": "assistant", "content": lead + uses}, {"role": "user", "content": results}]


def _anthropic_result(rng: random.Random, use: dict[str, Any]) -> dict[str, Any]:
    output, failed = _tool_output(rng, use["name"])
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": use["id"],
                              "content": output if rng.random() < 0.7 else [{"type": "text", "text": output}]}
    if failed:
        result["is_error"] = True
    return result

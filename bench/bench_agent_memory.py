"""A scripted 200-step LlamaIndex agent run: what the LLM receives with LlamaIndex's memory and with contextkit's.

The run is the one of ``tests/integrations/llamaindex/test_agent_memory.py``: a real ``FunctionAgent``
with real ``FunctionTool``s and a fake function-calling LLM (no weights here) that answers with tool
calls for ``--steps`` steps, then a final answer. Step 1 reads a CI log of 20,000 lines with one line
that matters; the others search the source (24 lines of output, two searches in parallel every 5th
step) or deploy a preview (the tool raises every 9th step). Three set-ups, same script:

* ``stock``: ``FunctionAgent`` with LlamaIndex's default memory (``ChatMemoryBuffer``);
* ``memory only``: ``FunctionAgent(memory=ContextKitAgentMemory(...))``: the stock agent keeps the run's
  steps in its scratchpad, outside the memory, so this is ``stock`` within one run;
* ``contextkit``: ``ContextKitFunctionAgent`` (each step goes into a ``ContextKitAgentMemory`` at once).

For each request the LLM received: its tokens (cl100k_base; 3 a message, the text, each call's name
and arguments + 8, the tool schemas + 8 each, 3 for the reply), and the tokens OpenAI's prompt cache
would serve given the previous request (``contextkit.core.prompt_cache.cached_prefix_tokens``, the
prefix rule: nothing under 1,024 shared tokens, then steps of 128; token ids of the tool schemas, then
of each message's role, text and calls, in order). Printed per set-up: requests, tokens per request
(median, max), tokens in all, the predicted cached share, requests over the LLM's window
(``context_window - num_output``), whether the log's failing line reached the LLM, compactions, time.

Run: ``python bench/bench_agent_memory.py`` (about a minute); ``--steps N``, ``--window N``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llama_index.core.agent.workflow import FunctionAgent  # noqa: E402
from llama_index.core.base.llms.types import ToolCallBlock  # noqa: E402

from contextkit.core.profiles import CacheRule  # noqa: E402
from contextkit.core.prompt_cache import cached_prefix_tokens  # noqa: E402
from contextkit.core.tokenizers import get_tokenizer  # noqa: E402
from contextkit.integrations.llamaindex import ContextKitAgentMemory, ContextKitFunctionAgent  # noqa: E402

OPENAI = CacheRule(kind="prefix", min_tokens=1_024, step=128)
NUM_OUTPUT = 1_000


def _scenario() -> Any:
    """The test module's fake LLM, tools and script (one definition of the run)."""
    path = REPO / "tests" / "integrations" / "llamaindex" / "test_agent_memory.py"
    spec = importlib.util.spec_from_file_location("agent_memory_scenario", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its pydantic models resolve their annotations through it
    spec.loader.exec_module(module)
    return module


class Counter:
    """Token ids of requests, each distinct message encoded once."""

    def __init__(self) -> None:
        self.tokenizer = get_tokenizer("cl100k_base")
        self._ids: dict[str, list[int]] = {}

    def ids(self, text: str) -> list[int]:
        if text not in self._ids:
            self._ids[text] = self.tokenizer.encode(text)
        return self._ids[text]

    def request(self, messages: list[Any], schemas: list[dict[str, Any]]) -> tuple[list[int], int]:
        """(token ids as a cache sees them, tokens as the test counts them)."""
        ids: list[int] = []
        count = 3
        for schema in schemas:
            piece = self.ids(json.dumps(schema))
            ids += piece
            count += len(piece) + 8
        for m in messages:
            text = "".join(getattr(b, "text", "") for b in m.blocks)
            calls = [(b.tool_call_id, b.tool_name, json.dumps(b.tool_kwargs)) for b in m.blocks
                     if isinstance(b, ToolCallBlock)]
            ids += self.ids(f"<|{m.role.value}|>") + self.ids(text)
            count += 3 + len(self.ids(text))
            for call_id, name, arguments in calls:
                ids += self.ids(f"<|call {call_id}|>{name}{arguments}")
                count += len(self.ids(name + arguments)) + 8
            if m.additional_kwargs.get("tool_call_id"):
                ids += self.ids(f"<|result {m.additional_kwargs['tool_call_id']}|>")
        return ids, count


def run(setup: str, scenario: Any, steps: int, window: int, counter: Counter) -> dict[str, Any]:
    llm = scenario.ToolCallingLLM(script=scenario.scripted_steps(steps), context_window=window, num_output=NUM_OUTPUT)
    memory = None
    if setup == "stock":
        agent = scenario.agent_of(llm, FunctionAgent)
    elif setup == "memory only":
        agent = scenario.agent_of(llm, FunctionAgent)
        memory = ContextKitAgentMemory.from_defaults(llm=llm, system_prompt=scenario.SYSTEM, tools=scenario.TOOLS)
    else:
        agent = scenario.agent_of(llm, ContextKitFunctionAgent)
        memory = ContextKitAgentMemory.from_defaults(llm=llm, system_prompt=scenario.SYSTEM, tools=scenario.TOOLS)
    start = time.perf_counter()
    asyncio.run(_go(agent, memory, steps, scenario.TASK))
    seconds = time.perf_counter() - start
    sizes, cached, lengths = [], [], []
    previous = None
    for request, schemas in zip(llm.requests, llm.tool_schemas, strict=True):
        ids, count = counter.request(request, schemas)
        sizes.append(count)
        cached.append(cached_prefix_tokens(previous, ids, OPENAI))
        lengths.append(len(ids))
        previous = ids
    reached = any(scenario.PLANTED in (m.content or "") for r in llm.requests for m in r)
    return {"setup": setup, "requests": len(sizes), "median": statistics.median(sizes), "max": max(sizes),
            "total": sum(sizes), "cached": sum(cached) / max(1, sum(lengths)),
            "over": sum(s > window - NUM_OUTPUT for s in sizes), "reached": reached,
            "compactions": memory.session.compactions if isinstance(memory, ContextKitAgentMemory) else 0,
            "seconds": seconds}


async def _go(agent: Any, memory: Any, steps: int, task: str) -> Any:
    kwargs: dict[str, Any] = {"max_iterations": steps + 10}
    if memory is not None:
        kwargs["memory"] = memory
    return await agent.run(user_msg=task, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--window", type=int, default=12_000, help="the LLM's context_window (num_output 1,000)")
    args = parser.parse_args()
    scenario = _scenario()
    counter = Counter()
    print(f"{args.steps}-step FunctionAgent run, LLM window {args.window:,} - {NUM_OUTPUT:,} = "
          f"{args.window - NUM_OUTPUT:,} prompt tokens")
    print(f"{'set-up':<12} {'requests':>8} {'median/req':>10} {'max/req':>10} {'total':>12} {'cached':>7} "
          f"{'over':>5} {'line':>5} {'compact':>7} {'time':>6}")
    for setup in ("stock", "memory only", "contextkit"):
        r = run(setup, scenario, args.steps, args.window, counter)
        print(f"{r['setup']:<12} {r['requests']:>8} {r['median']:>10,.0f} {r['max']:>10,} {r['total']:>12,} "
              f"{r['cached']:>7.1%} {r['over']:>5} {'yes' if r['reached'] else 'no':>5} {r['compactions']:>7} "
              f"{r['seconds']:>5.1f}s")


if __name__ == "__main__":
    main()

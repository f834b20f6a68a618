"""Issue 32: under concurrent requests each response carries its own contextkit report (it held another
request's: 3 of 4 async, up to 9 of 12 threaded), for the query engine and the chat engine."""

from __future__ import annotations

import asyncio
import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata  # noqa: E402
from llama_index.core.llms import CustomLLM  # noqa: E402
from llama_index.core.llms.callbacks import llm_completion_callback  # noqa: E402

from contextkit.integrations.llamaindex import contextkit_query_engine  # noqa: E402


class SlowLLM(CustomLLM):
    """Answers after a random pause (awaited on the async path, as a network client does), so that
    concurrent requests interleave between building their prompt and getting their answer."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=8192, num_output=256, model_name="slow")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        time.sleep(random.uniform(0.001, 0.02))
        return CompletionResponse(text="ok")

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        await asyncio.sleep(random.uniform(0.001, 0.02))
        return CompletionResponse(text="ok")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield self.complete(prompt)


QUESTIONS = [f"What does passage {i} give as its example number {i * 7}?" for i in range(16)]


def _own_report(response: Any) -> bool:
    """The report's evidence items are this response's own source nodes (each question finds other passages;
    a question the gate judged off topic sends none, but its report still lists the nodes it left out)."""
    report = response.metadata["contextkit"]
    listed = {item["id"] for item in report["items"]}
    return bool(listed) and listed <= {n.node.node_id for n in response.source_nodes}


def test_64_concurrent_aqueries_each_get_their_own_report(node_index) -> None:
    engine = contextkit_query_engine(node_index, SlowLLM(), similarity_top_k=2)

    async def main() -> list[Any]:
        return await asyncio.gather(*(engine.aquery(QUESTIONS[i % 16]) for i in range(64)))

    responses = asyncio.run(main())
    assert sum(not _own_report(r) for r in responses) == 0


def test_16_threads_each_get_their_own_report(node_index) -> None:
    engine = contextkit_query_engine(node_index, SlowLLM(), similarity_top_k=2)
    with ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(engine.query, [QUESTIONS[i % 16] for i in range(64)]))
    assert sum(not _own_report(r) for r in responses) == 0


def test_concurrent_chat_turns_each_get_their_own_report(node_index) -> None:
    from contextkit.integrations.llamaindex import ContextKitChatEngine

    chat = ContextKitChatEngine(node_index.as_retriever(similarity_top_k=2), SlowLLM())

    async def main() -> list[Any]:
        return await asyncio.gather(*(chat.achat(QUESTIONS[i % 16], chat_history=[]) for i in range(32)))

    responses = asyncio.run(main())
    assert sum(not _own_report(r) for r in responses) == 0


def test_the_declared_requirement_is_the_supported_range() -> None:
    """Issue 32: pyproject said >=0.12 while the plug-in refused anything outside 0.14 at import; pip must
    refuse an unsupported llama-index-core at install time, so the two ranges are one."""
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement

    from contextkit.integrations.llamaindex._compat import SUPPORTED

    project = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())["project"]
    (spec,) = [Requirement(r).specifier for r in project["dependencies"] if Requirement(r).name == "llama-index-core"]
    low, high = SUPPORTED
    assert str(spec) == f"<{high},>={low}" or set(str(spec).split(",")) == {f">={low}", f"<{high}"}
    assert not spec.contains("0.13.6") and not spec.contains(f"{high}.0") and spec.contains("0.14.25")
    assert spec.contains(low) and not spec.contains("0.14.19")

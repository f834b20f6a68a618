"""Summaries on a small window: ``compact`` says what it left out, ``tree_summarize`` leaves nothing out.

The issue: on a 4k window, ``ContextKitSynthesizer`` summarised PEP 8 from one prompt that held 23 of
its 42 section titles (55%), where LlamaIndex's ``tree_summarize`` covered all, and nothing told the
user. Here an app summarises a real PEP as LlamaIndex apps do (a ``SummaryIndex``, LlamaIndex's own
``SentenceSplitter`` nodes, ``index.as_query_engine(response_synthesizer=...)``) with a recording LLM
(a real ``CustomLLM``) of 4,096 tokens, and the tests read what each call received.
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from fakes import RecordingChatLLM, ScriptedLLM

pytest.importorskip("llama_index.core")

from llama_index.core import Document, SummaryIndex  # noqa: E402
from llama_index.core.base.response.schema import AsyncStreamingResponse, StreamingResponse  # noqa: E402
from llama_index.core.llms import CompletionResponse, CompletionResponseGen  # noqa: E402
from llama_index.core.llms.callbacks import llm_completion_callback  # noqa: E402
from llama_index.core.prompts import PromptTemplate  # noqa: E402
from llama_index.core.prompts.default_prompt_selectors import DEFAULT_TREE_SUMMARIZE_PROMPT_SEL  # noqa: E402
from llama_index.core.schema import NodeWithScore, TextNode  # noqa: E402
from pydantic import Field  # noqa: E402

from contextkit.errors import ContextkitError  # noqa: E402
from contextkit.integrations.llamaindex import contextkit_query_engine  # noqa: E402
from contextkit.integrations.llamaindex.synthesizer import ContextKitSynthesizer  # noqa: E402

PEP = "pep-0008.rst"  # the style guide: 50k characters, 42 section titles, about 13k tokens
WINDOW, NUM_OUTPUT = 4096, 256
BUDGET = WINDOW - NUM_OUTPUT
QUESTION = "Summarise the style guide, section by section."
LOGGER = "contextkit.integrations.llamaindex.synthesizer"


class NumberedLLM(ScriptedLLM):
    """Records each prompt and answers ``Answer <n>`` (distinct answers, so none is deduplicated
    away when the answers are combined); async calls sleep, and the most in flight at once is kept."""

    in_flight: int = 0
    most_in_flight: int = 0

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        return CompletionResponse(text=f"Answer {len(self.prompts)}: the sections it was shown, in brief.")

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.02)
        self.in_flight -= 1
        return self.complete(prompt, formatted=formatted, **kwargs)


class StreamRecordingLLM(RecordingChatLLM):
    """``RecordingChatLLM`` (a completion model here) that also records which prompts it streamed."""

    streamed: list[str] = Field(default_factory=list)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        self.streamed.append(prompt)
        return super().stream_complete(prompt, formatted=formatted, **kwargs)


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def pep_text(shared_data: Path) -> str:
    return (shared_data / "python_peps" / "peps" / PEP).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def titles(pep_text: str) -> list[str]:
    """The PEP's section titles: reStructuredText lines underlined with ``=``, ``-``, ``~`` or ``^``."""
    lines = pep_text.splitlines()
    found = [lines[i] for i in range(len(lines) - 1) if lines[i].strip()
             and re.fullmatch(r"([=\-~^])\1+", lines[i + 1]) and len(lines[i + 1]) >= len(lines[i].rstrip())]
    assert len(found) == 42
    return found


@pytest.fixture(scope="module")
def index(pep_text: str) -> SummaryIndex:
    """A stock ``SummaryIndex`` (LlamaIndex's default ``SentenceSplitter``: 1,024-token nodes)."""
    return SummaryIndex.from_documents([Document(text=pep_text, metadata={"file_name": PEP})])


def _covered(titles: list[str], prompts: list[str]) -> float:
    return sum(any(t in p for p in prompts) for t in titles) / len(titles)


def _chat_prompts(llm: RecordingChatLLM) -> list[str]:
    return ["\n".join(str(m.content) for m in call) for call in llm.calls]


def _assert_within_window(prompts: list[str], cl100k, per_message: int = 0) -> None:
    assert prompts and all(cl100k.count(p) + per_message <= BUDGET for p in prompts)


# --------------------------------------------------------------------- tests
class TestCompactSaysWhatItLeftOut:
    def test_the_warning_names_the_nodes_and_tokens_left_out(self, index, titles, cl100k, caplog):
        llm = ScriptedLLM(context_window=WINDOW)
        engine = index.as_query_engine(llm=llm, response_synthesizer=ContextKitSynthesizer(llm=llm))
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            response = engine.query(QUESTION)
        assert len(llm.prompts) == 1 and _covered(titles, llm.prompts) < 0.7  # the 55%
        _assert_within_window(llm.prompts, cl100k)
        coverage = response.metadata["contextkit"]["coverage"]
        nodes = {n.node.node_id for n in response.source_nodes}  # what the prompt sent, not what it left out
        assert coverage["complete"] is False and coverage["nodes"] >= len(nodes) + len(coverage["left_out"])
        assert coverage["left_out"] and nodes.isdisjoint(coverage["left_out"])
        assert all(f'id="{node_id}"' not in llm.prompts[0] for node_id in coverage["left_out"])
        assert 0 < coverage["left_out_tokens"] < coverage["node_tokens"]
        [record] = [r for r in caplog.records if r.name == LOGGER]
        said = record.getMessage()
        assert f"left out {len(coverage['left_out'])} of {coverage['nodes']} retrieved nodes" in said
        assert f"{coverage['left_out_tokens']:,} of {coverage['node_tokens']:,} tokens" in said
        assert "response_mode='tree_summarize'" in said

    def test_nothing_is_said_when_every_node_fits(self, index, titles, caplog):
        llm = ScriptedLLM(context_window=32_768)
        engine = index.as_query_engine(llm=llm, response_synthesizer=ContextKitSynthesizer(llm=llm))
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            response = engine.query(QUESTION)
        assert not [r for r in caplog.records if r.name == LOGGER]
        assert response.metadata["contextkit"]["coverage"]["complete"] is True
        assert _covered(titles, llm.prompts) == 1.0


class TestTreeSummarize:
    def test_every_section_title_reaches_a_prompt_within_the_window(self, index, titles, cl100k, caplog):
        llm = NumberedLLM(context_window=WINDOW)
        synthesizer = ContextKitSynthesizer(llm=llm, response_mode="tree_summarize")
        engine = index.as_query_engine(llm=llm, response_synthesizer=synthesizer)
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            response = engine.query(QUESTION)
        assert _covered(titles, llm.prompts) == 1.0
        _assert_within_window(llm.prompts, cl100k)
        coverage = response.metadata["contextkit"]["coverage"]
        assert coverage["complete"] is True and coverage["left_out"] == [] and coverage["truncated"] == []
        assert coverage["calls"] == len(llm.prompts) == sum(coverage["groups"]) and coverage["levels"] >= 2
        assert coverage["groups"][-1] == 1 and coverage["nodes"] == len(response.source_nodes)
        # the last call combines the partial answers, and its answer is the response
        assert all(f"Answer {n}:" in llm.prompts[-1] for n in range(1, coverage["groups"][0] + 1))
        assert str(response) == f"Answer {len(llm.prompts)}: the sections it was shown, in brief."
        assert not [r for r in caplog.records if r.name == LOGGER]
        assert set(synthesizer.get_prompts()) == {"summary_template"}

    def test_streaming_streams_only_the_last_call(self, index, titles, cl100k):
        llm = StreamRecordingLLM(chat_model=False, context_window=WINDOW, reply="one two three four")
        engine = index.as_query_engine(llm=llm, response_synthesizer=ContextKitSynthesizer(
            llm=llm, response_mode="tree_summarize", streaming=True))
        response = engine.query(QUESTION)
        assert isinstance(response, StreamingResponse)
        seen = [(delta, llm.produced) for delta in response.response_gen]
        assert seen[0] == ("one ", 1) and "".join(d for d, _ in seen) == llm.reply  # passed on as it came
        assert llm.streamed == [llm.prompts[-1]] and len(llm.prompts) > 1  # the partial answers were not streamed
        citations = response.metadata["contextkit"]["citations"]  # the last call shows the partial answers
        assert ["answer-1.1"] in citations.values() and _covered(titles, llm.prompts) == 1.0
        _assert_within_window(llm.prompts, cl100k)
        assert response.metadata["contextkit"]["coverage"]["calls"] == len(llm.prompts)

    def test_aquery_runs_each_level_concurrently(self, index, titles):
        llm = NumberedLLM(context_window=WINDOW)
        engine = index.as_query_engine(llm=llm, response_synthesizer=ContextKitSynthesizer(
            llm=llm, response_mode="tree_summarize"))
        response = asyncio.run(engine.aquery(QUESTION))
        coverage = response.metadata["contextkit"]["coverage"]
        assert llm.most_in_flight == coverage["groups"][0] > 1
        assert _covered(titles, llm.prompts) == 1.0 and coverage["complete"] is True

    def test_aquery_streams_the_last_call_of_a_chat_model(self, index, titles, cl100k):
        llm = RecordingChatLLM(context_window=WINDOW, reply="alpha beta gamma")
        engine = index.as_query_engine(llm=llm, response_synthesizer=ContextKitSynthesizer(
            llm=llm, response_mode="tree_summarize", streaming=True))

        async def run() -> tuple[Any, list[str]]:
            response = await engine.aquery(QUESTION)
            return response, [d async for d in response.async_response_gen()]

        response, seen = asyncio.run(run())
        assert isinstance(response, AsyncStreamingResponse) and "".join(seen) == llm.reply
        prompts = _chat_prompts(llm)
        assert _covered(titles, prompts) == 1.0
        assert all(sum(cl100k.count(str(m.content)) + 4 for m in call) <= BUDGET for call in llm.calls)

    def test_use_async_runs_a_sync_querys_calls_concurrently(self, index, titles):
        llm = NumberedLLM(context_window=WINDOW)
        engine = index.as_query_engine(llm=llm, response_synthesizer=ContextKitSynthesizer(
            llm=llm, response_mode="tree_summarize", use_async=True))
        response = engine.query(QUESTION)
        assert llm.most_in_flight == response.metadata["contextkit"]["coverage"]["groups"][0] > 1
        assert _covered(titles, llm.prompts) == 1.0

    def test_contextkit_query_engine_takes_a_stock_summary_template(self, index, titles, cl100k):
        llm = NumberedLLM(context_window=WINDOW)
        engine = contextkit_query_engine(index, llm, response_mode="tree_summarize",
                                         summary_template=DEFAULT_TREE_SUMMARIZE_PROMPT_SEL)
        response = engine.query(QUESTION)
        assert all(p.startswith("Context information from multiple sources is below.") for p in llm.prompts)
        assert all(p.rstrip().endswith(f"Query: {QUESTION}\nAnswer:") for p in llm.prompts)
        assert _covered(titles, llm.prompts) == 1.0 and len(llm.prompts) > 1
        _assert_within_window(llm.prompts, cl100k)
        assert response.metadata["contextkit"]["coverage"]["complete"] is True

    def test_a_node_larger_than_the_window_is_split_not_cut(self, pep_text, titles, cl100k):
        llm = NumberedLLM(context_window=WINDOW)
        whole = NodeWithScore(node=TextNode(text=pep_text, id_="pep-8"), score=1.0)
        response = ContextKitSynthesizer(llm=llm, response_mode="tree_summarize").synthesize(QUESTION, [whole])
        coverage = response.metadata["contextkit"]["coverage"]
        assert coverage["split"] == ["pep-8"] and coverage["complete"] is True
        assert _covered(titles, llm.prompts) == 1.0
        _assert_within_window(llm.prompts, cl100k)

    def test_options_of_the_other_mode_are_refused(self):
        with pytest.raises(ContextkitError, match="summary_template"):
            ContextKitSynthesizer(llm=ScriptedLLM(), summary_template=PromptTemplate("{context_str}{query_str}"))
        with pytest.raises(ContextkitError, match="use_async"):
            ContextKitSynthesizer(llm=ScriptedLLM(), use_async=True)
        with pytest.raises(ContextkitError, match="summary_template"):
            ContextKitSynthesizer(llm=ScriptedLLM(), response_mode="tree_summarize",
                                  text_qa_template=PromptTemplate("{context_str}{query_str}"))
        with pytest.raises(ContextkitError, match="fill"):
            ContextKitSynthesizer(llm=ScriptedLLM(), response_mode="tree_summarize", fill="relevant")
        synth = ContextKitSynthesizer(llm=ScriptedLLM(), response_mode="tree_summarize", use_async=True)
        again = ContextKitSynthesizer.from_dict(synth.to_dict(), llm=ScriptedLLM())
        assert again.response_mode == "tree_summarize" and again.use_async is True

"""LlamaIndex's docs examples behave the same with contextkit plugged in, and send no more tokens.

A short version of ``python bench/bench_llamaindex_examples.py`` (whose example functions it
runs): six small PEPs of all three types, ``similarity_top_k=3``, the bench's recording
``FunctionCallingLLM`` declaring a 128k window. Each example runs on three sides: stock, the
plug-in as ``docs/llamaindex.md`` documents it, and contextkit's prompt path over stock's nodes
(the same evidence). Every behaviour check must come out the same on all three, and each
contextkit side's prompt tokens (cl100k, all LLM calls of the example) must be at most stock's.
Then the off-topic question, which must get a small prompt and a warning.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("llama_index.core")

BENCH = Path(__file__).resolve().parents[3] / "bench"
#: Small PEPs: Process (2, 4, 10), Informational (20, 160), Standards Track (201).
PEP_FILES = ("pep-0002.rst", "pep-0004.rst", "pep-0010.rst", "pep-0020.rst", "pep-0160.rst", "pep-0201.rst")


def _bench():
    name = "bench_llamaindex_examples"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


bench = _bench()


@pytest.fixture(scope="module")
def env(peps, embedder):
    from llama_index.core import Settings

    files = [p for p in peps if p.name in PEP_FILES]
    if len(files) != len(PEP_FILES):
        pytest.skip("the PEP files of this test are not in the shared data")
    saved = Settings._llm, Settings._embed_model
    with tempfile.TemporaryDirectory(prefix="ck-docs-examples-") as work:
        env = bench.Env(files=files, embedder=embedder, work=Path(work), top_k=3, window_docs=2).build()
        yield env
        env.close()
    Settings._llm, Settings._embed_model = saved


@pytest.fixture(scope="module")
def outcomes(env):
    """Every example on every side, once."""
    return {name: {side: bench.run_example(env, fn, side) for side in bench.SIDES}
            for name, fn in bench.EXAMPLES.items()}


@pytest.mark.parametrize("example", list(bench.EXAMPLES))
def test_the_example_behaves_the_same_on_every_side(outcomes, example):
    sides = outcomes[example]
    assert bench.differences(sides) == []
    assert sides["stock"].checks, "the example checked nothing"
    assert sides["stock"].calls > 0 or example.startswith("8"), "the example made no LLM call"


@pytest.mark.parametrize("example", list(bench.EXAMPLES))
def test_contextkit_sends_at_most_the_stock_tokens_for_the_same_evidence(outcomes, example):
    """Over stock's own nodes (the same evidence), as a chat API bills the prompt. The plug-in's own parser
    makes other nodes (its 1,024-token chunks are fuller than SentenceSplitter's), so that side retrieves
    other text and its count is printed by the bench, not compared here."""
    side = bench.SAME
    stock, ck = outcomes[example]["stock"], outcomes[example][side]
    assert ck.tokens <= stock.tokens, (
        f"{side}: {ck.tokens:,} prompt tokens against stock's {stock.tokens:,}; per call "
        f"{ck.per_call} against {stock.per_call}")


def test_the_checks_hold_where_they_should(outcomes):
    """Not only equal: what each example is for happened (on stock, hence on every side)."""
    checks = {name: sides["stock"].checks for name, sides in outcomes.items()}
    starter = checks["1 starter"]
    assert starter["answer"] and starter["source_nodes"] and starter["llm_calls"] == 1
    assert starter["every_retrieved_text_in_prompt"] and starter["every_source_node_text_in_prompt"]
    assert checks["3 streaming query"]["streamed==non_streamed"] and checks["3 streaming query"]["deltas>1"]
    ingest = checks["4 ingestion pipeline + docstore"]
    assert ingest["rerun_unchanged_nodes"] == 0 and ingest["edit_reparses_only_that_doc"]
    assert ingest["upsert_replaced_old_nodes"] and ingest["stored_docs"] == 3
    assert checks["5 SubQuestionQueryEngine"]["sub_answers_as_sources"] == 2
    assert checks["6 RouterQueryEngine"]["selected"] == [0]
    agent = checks["7 FunctionAgent + tool"]
    assert [name for name, _ in agent["tools_called"]] == ["pep_search"] and agent["tool_output"] == [True]
    assert checks["8 metadata filters"]["query_filter_respected"] and checks["8 metadata filters"]["source_nodes"]
    assert checks["9 sentence window"]["every_retrieved_sentence_in_prompt"]
    assert checks["10 RAG workflow (rerank)"]["rerank_calls"] >= 1


@pytest.mark.parametrize("side", [*bench.SIDES[1:], "contextkit retriever"])
def test_an_off_topic_question_gets_a_small_prompt_and_a_warning(env, side):
    stock = bench.off_topic(env, "stock")
    ck = bench.off_topic(env, side)
    assert ck["off_topic"] is True and ck["warned"] == "yes", ck
    assert ck["prompt tokens"] * 4 <= stock["prompt tokens"], (ck, stock)

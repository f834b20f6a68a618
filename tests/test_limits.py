"""Every public entry point bounds one request (issue 33): the query's length, ``k``, the budget, the
history's length; a request past a limit is refused at once with one line naming the option that
raises it (``LimitExceededError``, an ``InvalidArgumentError``), exit 2 from the CLI.

On 7f7ba2f a 1 MB dense or hybrid query ran for 208 s and took a GB, ``k`` of 10**9 and a budget of
10**15 were taken, ``k=True`` meant one chunk, NaN and 2.5 as ``k`` came out of ``search_index`` as a
``SearchError`` (a ``RuntimeError``), and 200,000 history messages were all prepared. The CLI tests
run ``python -m contextkit`` in another process with the real model.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from contextkit.core import config, errors
from contextkit.core.errors import ContextkitError, InvalidArgumentError

# Read with getattr so that on 7f7ba2f, which has none of them, each test fails on its own assertion.
MAX_QUERY_CHARS: int = getattr(config, "MAX_QUERY_CHARS", 20_000)
MAX_K: int = getattr(config, "MAX_K", 10_000)
MAX_BUDGET: int = getattr(config, "MAX_BUDGET", 10_000_000)
MAX_HISTORY_MESSAGES: int = getattr(config, "MAX_HISTORY_MESSAGES", 10_000)
LimitExceededError: type[Exception] = getattr(errors, "LimitExceededError", InvalidArgumentError)

MB = 1_000_000
BIG = "what is the tallest tower in the world " * (MB // 39)  # a megabyte of question


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "contextkit", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    docs = tmp_path_factory.mktemp("docs")
    for i, text in enumerate(["The Eiffel Tower is 330 metres tall and stands in Paris.",
                              "Photosynthesis turns light, water and CO2 into glucose.",
                              "The Rhine flows 1,230 km from the Alps to the North Sea."]):
        (docs / f"doc{i}.txt").write_text(f"{text} More words about item {i}.\n" * 5)
    ix = tmp_path_factory.mktemp("ix") / "ix"
    result = run_cli("ingest", str(docs), "--index", str(ix), "--quiet", timeout=300)
    assert result.returncode == 0, result.stderr
    return ix


def refused_quickly(call: Any, option: str | None = None, seconds: float = 5.0) -> ContextkitError:
    """``call()`` raises a ContextkitError that is a ValueError (an InvalidArgumentError naming ``option``
    when given), in one line, within ``seconds``."""
    started = time.monotonic()
    with pytest.raises(ContextkitError) as caught:
        call()
    assert time.monotonic() - started < seconds
    error = caught.value
    assert isinstance(error, ValueError), type(error)
    assert "\n" not in str(error) and len(str(error)) < 300
    if option is not None:
        assert isinstance(error, LimitExceededError) and isinstance(error, InvalidArgumentError), type(error)
        assert option in str(error), str(error)
    return error


def assert_usage_error(result: subprocess.CompletedProcess[str], option: str) -> None:
    assert "Traceback" not in result.stderr
    assert result.returncode == 2, (result.returncode, result.stderr[-300:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and option in lines[0], result.stderr


class TestTheCommandLine:
    @pytest.mark.parametrize("mode", ["dense", "hybrid"])
    def test_a_query_of_125_kb_is_refused_before_the_model_loads(self, index: Path, mode: str):
        query = "what is the tallest tower " * 4_800  # 124,800 characters: about all one argv may hold
        started = time.monotonic()
        result = run_cli("search", query, "--index", str(index), "--mode", mode, timeout=60)
        assert_usage_error(result, "max_query_chars")
        assert time.monotonic() - started < 30

    @pytest.mark.parametrize("mode", ["bm25", "dense"])
    def test_a_billion_k_is_refused(self, index: Path, mode: str):
        result = run_cli("search", "tower", "--index", str(index), "--mode", mode, "-k", str(10**9), timeout=60)
        assert_usage_error(result, "max_k")

    def test_assemble_refuses_a_huge_budget_a_huge_or_zero_k(self, index: Path):
        base = ["assemble", "tallest tower?", "--index", str(index), "--mode", "bm25"]
        assert_usage_error(run_cli(*base, "--budget", str(10**15)), "max_budget")
        assert_usage_error(run_cli(*base, "--budget", "2000", "-k", str(10**9)), "max_k")
        assert_usage_error(run_cli(*base, "--budget", "2000", "-k", "0"), "-k")

    def test_assemble_refuses_a_long_question_and_a_long_history(self, index: Path, tmp_path: Path):
        question = "Where is the tower? " * 6_000
        assert_usage_error(run_cli("assemble", question, "--index", str(index), "--budget", "2000"),
                           "max_query_chars")
        history = tmp_path / "history.jsonl"
        history.write_text("".join(json.dumps({"role": "user", "content": f"turn {i}"}) + "\n"
                                   for i in range(MAX_HISTORY_MESSAGES + 1)))
        result = run_cli("assemble", "tallest tower?", "--index", str(index), "--budget", "2000", "--mode", "bm25",
                         "--history", str(history))
        assert_usage_error(result, "max_history_messages")

    def test_the_file_raises_a_limit(self, index: Path, tmp_path: Path):
        (tmp_path / "contextkit.toml").write_text("[assemble]\nmax_history_messages = 20000\n")
        history = tmp_path / "history.jsonl"
        history.write_text("".join(json.dumps({"role": "user", "content": f"turn {i}"}) + "\n"
                                   for i in range(MAX_HISTORY_MESSAGES + 1)))
        result = subprocess.run([sys.executable, "-m", "contextkit", "assemble", "tallest tower?", "--index",
                                 str(index), "--budget", "2000", "--mode", "bm25", "--history", str(history)],
                                capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-400:]


class TestTheLibrary:
    @pytest.mark.parametrize("mode", ["dense", "hybrid", "bm25"])
    def test_search_index_refuses_a_megabyte_query(self, index: Path, mode: str):
        from contextkit.search import search_index

        refused_quickly(lambda: search_index(index, BIG, 3, mode=mode), "max_query_chars")

    @pytest.mark.parametrize("mode", ["dense", "hybrid", "bm25"])
    def test_every_retriever_refuses_a_megabyte_query_and_a_huge_k(self, index: Path, mode: str):
        from contextkit.index import Index
        from contextkit.retrievers import make_retriever

        with Index.open(index, read_only=True) as opened:
            retriever = make_retriever(mode, opened)
            refused_quickly(lambda: retriever.retrieve(BIG, 3), "max_query_chars")
            refused_quickly(lambda: retriever.retrieve("tower", 10**9), "max_k")
            refused_quickly(lambda: retriever.retrieve("tower", True))
            again = type(retriever).from_dict(retriever.to_dict(), index=opened)
            assert (again.max_query_chars, again.max_k) == (MAX_QUERY_CHARS, MAX_K)

    @pytest.mark.parametrize("k", [10**9, 2**63, True, 0, -5, math.nan, math.inf, 2.5, "10"])
    def test_search_index_refuses_bad_k_before_opening_the_index(self, index: Path, k: Any):
        from contextkit.search import search_index

        error = refused_quickly(lambda: search_index(index, "tower", k, mode="bm25"),
                                "max_k" if isinstance(k, int) and k > 1 else None)
        assert not isinstance(error, RuntimeError)  # 7f7ba2f: a SearchError, a RuntimeError

    def test_a_k_above_the_index_size_but_within_the_cap_is_fine(self, index: Path):
        from contextkit.search import search_index

        assert len(search_index(index, "tower", MAX_K, mode="bm25")) >= 1

    def test_the_assembler_and_assemble_refuse_a_megabyte_question(self, index: Path):
        from contextkit.assembly import Section, assemble
        from contextkit.assembly.context_assembler import ContextAssembler

        with ContextAssembler(2000, index=index) as assembler:
            refused_quickly(lambda: assembler.assemble(BIG), "max_query_chars")
            refused_quickly(lambda: assembler.assemble("tower", k=10**9), "max_k")
        refused_quickly(lambda: assemble([Section("question", role="question", content=BIG)], 2000),
                        "max_query_chars")

    @pytest.mark.parametrize("budget", [10**15, 2**63, math.nan, math.inf, -1, 0, True, 1.5])
    def test_bad_budgets(self, budget: Any):
        from contextkit.assembly import Section, assemble
        from contextkit.assembly.context_assembler import ContextAssembler

        option = "max_budget" if isinstance(budget, int) and budget > MAX_BUDGET else None
        question = [Section("question", role="question", content="why?")]
        refused_quickly(lambda: assemble(question, budget), option)
        refused_quickly(lambda: ContextAssembler(budget).assemble("why?"), option)

    def test_a_long_history_is_refused_and_the_option_raises_the_limit(self):
        from contextkit.assembly import Section, assemble
        from contextkit.assembly.context_assembler import ContextAssembler

        history = [{"role": "user", "content": f"turn {i}"} for i in range(MAX_HISTORY_MESSAGES + 1)]
        refused_quickly(lambda: ContextAssembler(2000).assemble("why?", history=history), "max_history_messages")
        refused_quickly(lambda: assemble([Section("history", role="history", messages=history)], 2000),
                        "max_history_messages")
        result = ContextAssembler(2000, max_history_messages=MAX_HISTORY_MESSAGES + 1).assemble("why?",
                                                                                               history=history)
        assert result.report.tokens <= 2000
        long_question = "why? " * (MAX_QUERY_CHARS // 5 + 1)
        assert assemble([Section("question", role="question", content=long_question)], 100_000,
                        max_query_chars=2 * MAX_QUERY_CHARS).report.tokens > 0

    def test_the_llamaindex_retriever_passes_the_limit_on(self, index: Path):
        pytest.importorskip("llama_index.core")
        from contextkit.integrations.llamaindex import ContextKitRetriever

        with ContextKitRetriever(index, mode="dense") as retriever:
            refused_quickly(lambda: retriever.retrieve(BIG), "max_query_chars")

    def test_a_limit_option_must_be_a_whole_number(self, index: Path):
        from contextkit.index import Index
        from contextkit.retrievers import make_retriever

        with Index.open(index, read_only=True) as opened:
            for bad in (0, -1, 1.5, math.nan, True, "10"):
                with pytest.raises(InvalidArgumentError, match="max_k"):
                    make_retriever("bm25", opened, max_k=bad)

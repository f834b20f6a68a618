"""Requests without bounds, as an attacker or a careless caller sends them (issue 33): a query of a
megabyte, ``k`` of a billion, a budget of 10**15 tokens, a history of 100,000 turns, NaN and
booleans where counts go; and LLM calls that time out, fifty times, with the threads they leave.

What holds: every public entry point (``search_index``, a retriever's ``retrieve``,
``ContextAssembler.assemble``, ``assemble()``, ``contextkit search`` and ``assemble``, the
LlamaIndex retriever) refuses such a request at once, with one ``InvalidArgumentError`` line that
names the limit and the option that raises it (exit 2 from the CLI), and a timed-out LLM call
leaves no thread running behind it."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

from tools.attacks._harness import build_index, check, cli, no_traceback, python, small_corpus

#: Seconds a refused request may take, the model's start included (2 shared cores).
QUICK = 60
MB = 1_000_000


def _index(work: Path) -> Path:
    build_index(small_corpus(work / "docs", 3), work / "ix")
    return work / "ix"


def _snippet(code: str, work: Path, what: str, timeout: float = QUICK) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) in another process under a 6 GiB address-space cap; a hang past ``timeout`` fails the attack."""
    try:
        result = python(textwrap.dedent(code), cwd=work, timeout=timeout, memory_mib=6144)
    except subprocess.TimeoutExpired:
        check(False, f"{what}: still running after {timeout:.0f} s (no limit stopped it)")
    check(result.returncode == 0, f"{what}: exit {result.returncode}: {result.stdout.strip()[-500:]} "
                                  f"{result.stderr.strip()[-500:]}")
    return result


def _refused(result: subprocess.CompletedProcess[str], what: str, names: str) -> None:
    """A CLI refusal: exit 2, one line, no traceback, the limit's option named."""
    no_traceback(result, what)
    check(result.returncode == 2, f"{what}: exit {result.returncode}, not 2: {result.stderr.strip()[-300:]}")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    check(len(lines) == 1, f"{what}: {len(lines)} lines on stderr, not one: {result.stderr[-400:]}")
    check(names in result.stderr, f"{what}: the message does not name {names!r}: {result.stderr.strip()[-300:]}")


_API_CHECK = """
    import math, sys, time
    from contextkit.core.errors import ContextkitError, InvalidArgumentError
    failures = []
    def refused(what, call, names=None):
        # a bad value: a ContextkitError that is a ValueError; a request past a limit (names: the option
        # that raises it): an InvalidArgumentError naming it. One short line, within 5 s.
        started = time.monotonic()
        try:
            call()
        except ContextkitError as exc:
            text = str(exc)
            if not isinstance(exc, ValueError) or (names and not isinstance(exc, InvalidArgumentError)):
                failures.append(f"{what}: {type(exc).__name__}, not InvalidArgumentError: {text[:200]}")
            elif "\\n" in text or len(text) > 400:
                failures.append(f"{what}: not one short line: {text[:200]!r}")
            elif names and names not in text:
                failures.append(f"{what}: does not name {names}: {text}")
        except BaseException as exc:
            failures.append(f"{what}: {type(exc).__name__}, not a ContextkitError: {str(exc)[:200]}")
        else:
            failures.append(f"{what}: accepted")
        if time.monotonic() - started > 5:
            failures.append(f"{what}: took {time.monotonic() - started:.0f} s to refuse")
"""
_API_END = """
    print("\\n".join(failures))
    sys.exit(1 if failures else 0)
"""


def _api(work: Path, body: str, what: str) -> None:
    try:
        result = python(textwrap.dedent(_API_CHECK) + textwrap.dedent(body) + textwrap.dedent(_API_END), cwd=work,
                        timeout=QUICK * 3, memory_mib=6144)
    except subprocess.TimeoutExpired:
        check(False, f"{what}: still running after {QUICK * 3} s (no limit stopped it)")
    check(result.returncode == 0, f"{what}: " + (result.stdout.strip() or result.stderr.strip()[-700:]))


# ----------------------------------------------------------------------------- the command line


def _cli_refused(args: list[str], what: str, option: str) -> None:
    """``contextkit ARGS`` under a memory cap is refused as a usage error naming ``option``, within :data:`QUICK` s."""
    try:
        result = cli(args, timeout=QUICK, memory_mib=6144)
    except subprocess.TimeoutExpired:
        check(False, f"{what} ran past {QUICK} s")
    _refused(result, what, option)


def attack_megabyte_sized_query_on_the_dense_side_cli(work: Path) -> None:
    ix = _index(work)
    query = "what is the tallest tower " * 4_800  # 124,800 characters: the most one argv may hold (128 KiB)
    for mode in ("dense", "hybrid"):
        _cli_refused(["search", "--index", str(ix), query, "--mode", mode, "-k", "3"],
                     f"search --mode {mode} with a 125 kB query", "max_query_chars")


def attack_billion_k_cli(work: Path) -> None:
    ix = _index(work)
    for mode in ("bm25", "dense"):
        _cli_refused(["search", "--index", str(ix), "tower", "--mode", mode, "-k", str(10**9)],
                     f"search -k 10**9 --mode {mode}", "max_k")


def attack_huge_budget_and_k_on_assemble_cli(work: Path) -> None:
    ix = _index(work)
    base = ["assemble", "tallest tower?", "--index", str(ix), "--mode", "bm25"]
    _cli_refused([*base, "--budget", str(10**15)], "assemble --budget 10**15", "max_budget")
    _cli_refused([*base, "--budget", "2000", "-k", str(10**9)], "assemble -k 10**9", "max_k")
    _cli_refused([*base, "--budget", "2000", "-k", "0"], "assemble -k 0", "-k")


def attack_huge_question_and_history_on_assemble_cli(work: Path) -> None:
    ix = _index(work)
    question = "Where is the tower? " * 6_000  # 120,000 characters
    _cli_refused(["assemble", question, "--index", str(ix), "--budget", "2000", "--mode", "dense"],
                 "assemble with a 120 kB question", "max_query_chars")
    history = work / "history.jsonl"
    with history.open("w") as handle:
        for i in range(200_000):
            handle.write(json.dumps({"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"}) + "\n")
    _cli_refused(["assemble", "tallest tower?", "--index", str(ix), "--budget", "2000", "--mode", "bm25",
                  "--history", str(history)], "assemble with 200,000 history messages", "max_history_messages")


# ----------------------------------------------------------------------------- the library


def attack_megabyte_query_through_every_api(work: Path) -> None:
    ix = _index(work)
    _api(work, f"""
        from contextkit.search import search_index
        from contextkit.index import Index
        from contextkit.retrievers import make_retriever
        from contextkit.assembly.context_assembler import ContextAssembler
        from contextkit.assembly import assemble, Section
        big = "what is the tallest tower in the world " * {MB // 39}
        ix = {str(ix)!r}
        for mode in ("dense", "hybrid", "bm25"):
            refused(f"search_index(mode={{mode}}, 1 MB)", lambda: search_index(ix, big, 3, mode=mode), "max_query_chars")
        with Index.open(ix, read_only=True) as index:
            for mode in ("dense", "hybrid", "bm25"):
                retriever = make_retriever(mode, index)
                refused(f"{{mode}} retrieve(1 MB)", lambda: retriever.retrieve(big, 3), "max_query_chars")
            with ContextAssembler(2000, index=index) as assembler:
                refused("ContextAssembler.assemble(1 MB)", lambda: assembler.assemble(big), "max_query_chars")
        refused("assemble([question 1 MB])", lambda: assemble([Section("question", role="question", content=big)],
                2000), "max_query_chars")
        from contextkit.integrations.llamaindex import ContextKitRetriever
        with ContextKitRetriever(ix, mode="dense") as li:
            refused("ContextKitRetriever.retrieve(1 MB)", lambda: li.retrieve(big), "max_query_chars")
    """, "a 1 MB query through the Python API")


def attack_bad_k_values_through_the_api(work: Path) -> None:
    ix = _index(work)
    _api(work, f"""
        from contextkit.search import search_index
        from contextkit.index import Index
        from contextkit.retrievers import make_retriever
        from contextkit.assembly.context_assembler import ContextAssembler
        ix = {str(ix)!r}
        for k in (10**9, 2**63, True, 0, -5, math.nan, math.inf, 2.5, "10"):
            refused(f"search_index(k={{k!r}})", lambda: search_index(ix, "tower", k, mode="bm25"))
        with Index.open(ix, read_only=True) as index:
            retriever = make_retriever("bm25", index)
            refused("bm25 retrieve(k=10**9)", lambda: retriever.retrieve("tower", 10**9), "max_k")
            refused("bm25 retrieve(k=True)", lambda: retriever.retrieve("tower", True))
            with ContextAssembler(2000, index=index, mode="bm25") as assembler:
                refused("ContextAssembler.assemble(k=10**9)", lambda: assembler.assemble("tower", k=10**9), "max_k")
        # a k above the index size but under the cap is not an error: the index's chunks come back
        hits = search_index(ix, "tower", 5000, mode="bm25")
        if not hits:
            failures.append("k=5000 over a 3-chunk index found nothing")
    """, "bad k values through the Python API")


def attack_bad_budgets_and_history_through_the_api(work: Path) -> None:
    _api(work, """
        from contextkit.assembly import assemble, Section
        from contextkit.assembly.context_assembler import ContextAssembler
        q = [Section("question", role="question", content="why?")]
        for budget in (10**15, 2**63, math.nan, math.inf, -1, 0, True, 1.5):
            refused(f"assemble(budget={budget!r})", lambda: assemble(q, budget))
            refused(f"ContextAssembler(budget={budget!r}).assemble", lambda: ContextAssembler(budget).assemble("why?"))
        refused("assemble(budget=10**15) names max_budget", lambda: assemble(q, 10**15), "max_budget")
        history = [{"role": "user", "content": f"turn {i}"} for i in range(200_000)]
        refused("ContextAssembler.assemble(200,000 messages)",
                lambda: ContextAssembler(2000).assemble("why?", history=history), "max_history_messages")
        refused("assemble(history section of 200,000 messages)",
                lambda: assemble(q + [Section("history", role="history", messages=history)], 2000),
                "max_history_messages")
        try:  # the limits are options: raised, the same request goes through
            ContextAssembler(2000, max_history_messages=300_000).assemble("why?", history=history[:20_000])
            assemble([Section("question", role="question", content="why? " * 40_000)], 100_000,
                     max_query_chars=300_000)
        except Exception as exc:
            failures.append(f"a limit raised by its option: {type(exc).__name__}: {str(exc)[:200]}")
    """, "bad budgets and histories through the Python API")


# ----------------------------------------------------------------------------- LLM calls


_SLOW_LLMS = """
    import asyncio, threading, time
    from typing import Any
    from llama_index.core.llms import CompletionResponse, CompletionResponseGen, CustomLLM, LLMMetadata
    from llama_index.core.llms.callbacks import llm_completion_callback
    from contextkit.llm import ReliableLLM
    from contextkit.core.errors import LLMCallError

    class SlowSync(CustomLLM):
        seconds: float = 3.0
        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name="slow-sync")
        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
            time.sleep(self.seconds)
            return CompletionResponse(text="late")
        @llm_completion_callback()
        def stream_complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponseGen:
            yield self.complete(prompt)

    class SlowAsync(SlowSync):
        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name="slow-async")
        @llm_completion_callback()
        async def acomplete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
            await asyncio.sleep(self.seconds)
            return CompletionResponse(text="late")
"""


def attack_fifty_timed_out_llm_calls_leave_no_threads(work: Path) -> None:
    result = _snippet(_SLOW_LLMS + """
    failures = []
    for cls, allowed in ((SlowAsync, 1), (SlowSync, 4)):
        before = threading.active_count()
        llm = ReliableLLM(cls(), retries=0, timeout=0.05)
        started = time.monotonic()
        for _ in range(50):
            try:
                llm.run("hello")
            except LLMCallError:
                pass
            else:
                failures.append(f"{cls.__name__}: a 3 s call answered within a 0.05 s timeout")
        left = threading.active_count() - before
        if left > allowed:
            failures.append(f"{cls.__name__}: {left} threads still running after 50 timed-out calls "
                            f"(at most {allowed} allowed)")
        if time.monotonic() - started > 30:
            failures.append(f"{cls.__name__}: 50 calls with a 0.05 s timeout took {time.monotonic() - started:.0f} s")
    print("\\n".join(failures))
    raise SystemExit(1 if failures else 0)
    """, work, "50 timed-out LLM calls", timeout=120)
    del result

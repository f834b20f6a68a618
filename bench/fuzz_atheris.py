"""Coverage-guided fuzzing (atheris / libFuzzer) of the loaders, the chunker and the assembler.

The same targets and invariants as ``tests/test_fuzz.py`` (imported from there), driven
by libFuzzer for as long as it is given instead of a bounded number of hypothesis
examples. The first input byte picks the target:

* ``loaders``: the rest of the bytes as a ``.txt``, ``.md``, ``.html``, ``.jsonl``, ``.pdf``
  or ``.py`` file -> ``load_file`` never raises, documents or ``LoadError`` values, every
  text UTF-8-safe, one result per JSONL line;
* ``chunker``: a Unicode string and chunk sizes -> exact offsets, exact token counts,
  size and overlap bounds, full coverage;
* ``assembler``: evidence items, history, instructions, a question, a budget and a markup
  (full or lean) -> never over budget, and the prompt parses (ElementTree / markdown-it) as
  exactly our sections with every text round-tripping.

A failed invariant or an exception stops the run with the input saved by libFuzzer
(``crash-...``); at the end the script prints the inputs tried per target.

Run: ``python bench/fuzz_atheris.py --seconds 60`` (all targets) or
``--target chunker --seconds 300``; ``--corpus DIR`` keeps and reuses interesting inputs.
Needs ``pip install atheris`` (wheels for CPython 3.11 on Linux x86-64).
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import time
from pathlib import Path

import atheris

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

with atheris.instrument_imports(include=["contextkit"]):
    import test_fuzz  # the invariants; the contextkit modules it imports are instrumented too

    from contextkit.assembly import EvidenceItem
    from contextkit.chunking import TokenChunker
    from contextkit.records import Message
    from contextkit.tokenizers import TiktokenTokenizer

TARGETS = ("loaders", "chunker", "assembler")
SUFFIXES = (".txt", ".md", ".html", ".jsonl", ".pdf", ".py")
ORDERS = ("lost_in_the_middle", "score", "document")
tried = dict.fromkeys(TARGETS, 0)
skipped_budget = 0
started = time.perf_counter()
_tok = TiktokenTokenizer("cl100k_base")
_chunkers: dict[tuple[int, int, str], TokenChunker] = {}


def fuzz_loaders(fdp: atheris.FuzzedDataProvider) -> None:
    suffix = SUFFIXES[fdp.ConsumeIntInRange(0, len(SUFFIXES) - 1)]
    test_fuzz.check_load("f" + suffix, fdp.ConsumeBytes(fdp.remaining_bytes()))


def fuzz_chunker(fdp: atheris.FuzzedDataProvider) -> None:
    # From 4: one code point can take up to 4 tokens, and a smaller room raises a RuntimeError
    # (a known finding, tests/test_fuzz.py::TestChunkerFuzz::test_room_smaller_than_one_character).
    size = fdp.ConsumeIntInRange(4, 200)
    overlap = fdp.ConsumeIntInRange(0, size - 1)
    tokenizer = ("cl100k_base", "o200k_base")[fdp.ConsumeIntInRange(0, 1)]
    repeat = fdp.ConsumeIntInRange(1, 50)  # long runs without a space from short inputs
    text = fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes()) * repeat
    key = (size, overlap, tokenizer)
    if key not in _chunkers:
        _chunkers[key] = TokenChunker(size, overlap, tokenizer=tokenizer)
    test_fuzz.check_invariants(_chunkers[key], text)


def fuzz_assembler(fdp: atheris.FuzzedDataProvider) -> None:
    global skipped_budget
    markdown = fdp.ConsumeBool()
    markup = ("full", "lean")[fdp.ConsumeIntInRange(0, 1)]
    budget = fdp.ConsumeIntInRange(20, 3_000)
    order = ORDERS[fdp.ConsumeIntInRange(0, 2)]
    n_items, n_turns = fdp.ConsumeIntInRange(0, 8), fdp.ConsumeIntInRange(0, 3)

    def text() -> str:
        return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 300))

    items = [EvidenceItem(id=f"e{i}-{text()[:6]}", text=text(), source=text()[:20],
                          score=fdp.ConsumeFloatInRange(-1.0, 1.0)) for i in range(n_items)]
    turns = [Message(("user", "assistant", "tool")[fdp.ConsumeIntInRange(0, 2)], text(), id=f"m{i}")
             for i in range(n_turns)]
    instructions, question = text(), text()
    check = test_fuzz.check_markdown_assembly if markdown else test_fuzz.check_xml_assembly
    if not check(_tok, items, turns, instructions, question, budget, order, markup=markup):
        skipped_budget += 1


def one_input(data: bytes) -> None:
    if time.perf_counter() >= DEADLINE:  # our own clock: libFuzzer's -max_total_time exits past Python's atexit
        report()
        os._exit(0)
    fdp = atheris.FuzzedDataProvider(data)
    target = ONLY or TARGETS[fdp.ConsumeIntInRange(0, len(TARGETS) - 1)]
    tried[target] += 1
    {"loaders": fuzz_loaders, "chunker": fuzz_chunker, "assembler": fuzz_assembler}[target](fdp)


def report() -> None:
    total = sum(tried.values())
    seconds = time.perf_counter() - started
    print(f"\ninputs tried: {total:,} in {seconds:.0f} s ({total / max(seconds, 1e-9):,.0f}/s): "
          + ", ".join(f"{t} {n:,}" for t, n in tried.items())
          + f"; assemblies refused because the pinned sections exceed the budget: {skipped_budget:,}", flush=True)


ONLY: str | None = None
DEADLINE = float("inf")


def main() -> None:
    global ONLY, DEADLINE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", choices=[*TARGETS, "all"], default="all")
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--corpus", type=Path, help="a folder libFuzzer keeps interesting inputs in")
    ap.add_argument("--max-len", type=int, default=4096)
    args, extra = ap.parse_known_args()
    ONLY = None if args.target == "all" else args.target
    DEADLINE = time.perf_counter() + args.seconds
    argv = [sys.argv[0], f"-max_total_time={args.seconds + 600}", f"-max_len={args.max_len}", "-rss_limit_mb=4096",
            "-print_final_stats=1", *extra]
    if args.corpus:
        args.corpus.mkdir(parents=True, exist_ok=True)
        argv.append(str(args.corpus))
    atexit.register(report)  # a failing input ends the run through Python: the counts print then too
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()

"""A LlamaIndex app with default settings vs the same app with contextkit's plug-in, on the PEPs.

The app is the LlamaIndex starter: ``SimpleDirectoryReader`` over PEP files ->
``VectorStoreIndex.from_documents`` -> ``index.as_query_engine(llm=llm,
similarity_top_k=K)`` -> ``engine.query(question)``. Sides, all over the same
documents, the same top-k (``--top-k``, default 8) and the same embedding model:

* **A, LlamaIndex defaults**: the default node parser (``SentenceSplitter``, 1024
  tokens, 200 overlap) and the default ``compact`` synthesizer (``CompactAndRefine``:
  the node texts are repacked to fill the window and sent in as many calls as they
  need: the text-QA prompt, then refine prompts).
* **B, + the plug-in lines**: ``transformations=[ContextKitNodeParser()]`` (1024 / 200 from
  LlamaIndex's ``Settings``, token-exact, offsets), ``node_postprocessors=[ContextBudgetPostprocessor.from_llm(llm,
  synthesizer="contextkit")]``
  and ``response_synthesizer=ContextKitSynthesizer(llm=llm)``.
* **B0**, no extra embedding: A's index (SentenceSplitter nodes) with B's
  postprocessor and synthesizer, to separate what the node parser does from what
  the prompt path does.
* **C** (``--no-c`` skips it): ``ContextKitRetriever`` (hybrid dense + BM25) over a
  contextkit index of the same documents (``ingest_llamaindex_documents``, 512 / 64)
  in a ``RetrieverQueryEngine`` with ``ContextKitSynthesizer``.

Embedding: every side uses ``ContextKitEmbedding`` over ONE shared contextkit
``Embedder`` (all-MiniLM-L6-v2, offline), so vectors are comparable and nothing
touches the network. LlamaIndex's default embedding (OpenAI) needs a key and the
network, and is not available here. Embedding runs at ~10-15 chunks/s on this
2-core CPU, so the corpus is a slice of ``shared/data/python_peps/peps``: the first
``--limit`` files by name (default 40). Index builds are timed, outside the query clock.

The LLM is a recording ``CustomLLM`` defined here (no LLM weights exist on this
machine): it stores every prompt and answers a fixed short text, so query time
measures the framework (retrieval with query embedding, postprocessing, prompt
building, the synthesizer's calls), not a model. Its ``metadata`` declares the
scenario's ``context_window`` and ``num_output``, which both sides read: a roomy
window (16,384 / 512) and a small one (2,048 / 256).

Queries (``--queries``, default 20) are built deterministically from the titles in
``manifest.tsv`` of the PEPs in the slice: "What does PEP {n} ({title}) propose, and
why?" for PEPs evenly spread over the slice, plus one in five cross-PEP questions
("How do PEP a (...) and PEP b (...) relate ...?").

Per side and scenario: LLM calls per query, prompt tokens per query (first call and
all calls, every prompt recounted with cl100k_base ``encode_ordinary``), duplicated
text in the prompts, prompts over ``context_window - num_output`` and by how much at
most, queries that needed more than one call, and median / p95 query time (one
warm-up query per engine off the clock). Duplicated text is bench_assemble's
measure (imported from it): the share of a prompt's characters inside a
50-character shingle, taken at every word start, already seen at an earlier word
start of the same text; "all" joins a query's prompts, so text re-sent in a
refine call counts as repeated. The corpus slice's own score is printed beside it.

Run: ``python bench/bench_llamaindex.py`` (7.7 minutes on a 2-core machine with one
other job running, 11 with two; most of it embedding the three indexes, ``--no-c``
saves one); ``--quick`` (5 PEPs, 5 queries) 1.5 minutes; ``--json out.json`` keeps
the numbers.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_assemble import SHINGLE, log, repeated_share, table  # noqa: E402

from contextkit.tokenizers import get_tokenizer  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PEPS = DATA / "python_peps" / "peps"
MANIFEST = DATA / "python_peps" / "manifest.tsv"
ENCODING = "cl100k_base"
ANSWER = "According to the retrieved PEP text, it proposes the change described there [source]."
SCENARIOS = (("roomy", 16_384, 512), ("small", 2_048, 256))
WARM_UP = "What is a PEP, and who decides whether one is accepted?"


# ------------------------------------------------------------------- the LLM
def recording_llm_class() -> type:
    from llama_index.core.llms import CompletionResponse, CompletionResponseGen, CustomLLM, LLMMetadata
    from llama_index.core.llms.callbacks import llm_completion_callback
    from pydantic import Field

    class RecordingLLM(CustomLLM):
        """A real LlamaIndex ``CustomLLM`` that records every prompt and answers a fixed text."""

        context_window: int = 16_384
        num_output: int = 512
        reply: str = ANSWER
        prompts: list[str] = Field(default_factory=list)

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(context_window=self.context_window, num_output=self.num_output,
                               model_name="recording")

        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            self.prompts.append(prompt)
            return CompletionResponse(text=self.reply)

        @llm_completion_callback()
        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
            yield self.complete(prompt, formatted=formatted, **kwargs)

    return RecordingLLM


# ------------------------------------------------------------------ queries
def pep_number(name: str) -> int:
    m = re.match(r"pep-(\d+)", name)
    return int(m.group(1)) if m else -1


def build_queries(files: list[Path], n: int) -> list[str]:
    """``n`` questions from the manifest titles of ``files``: about 4 in 5 about one PEP
    (evenly spread over the slice), the rest about two PEPs at once."""
    with MANIFEST.open(encoding="utf-8", newline="") as fh:
        titles = {row["file"]: row["title"] for row in csv.DictReader(fh, delimiter="\t")}
    peps = [(pep_number(f.name), titles.get(f.name, f.stem)) for f in files]
    n_cross = n // 5 if len(peps) > 1 else 0
    n_single = n - n_cross
    single_forms = ("What does PEP {n} ({t}) propose, and why?",
                    "What problems or objections does PEP {n} ({t}) discuss, and how are they resolved?")
    out = []
    for i in range(n_single):
        if n_single <= len(peps):  # evenly spread over the slice
            k, form = len(peps) * i // n_single, single_forms[0]
        else:  # more questions than PEPs: each PEP again, asked the other way
            k, form = i % len(peps), single_forms[i // len(peps) % 2]
        num, title = peps[k]
        out.append(form.format(n=num, t=title))
    for j in range(n_cross):  # pairs across the slice: the first with the middle, and so on
        a = len(peps) * j // (2 * n_cross)
        b = a + len(peps) // 2
        (na, ta), (nb, tb) = peps[a], peps[b % len(peps)]
        out.append(f"How do PEP {na} ({ta}) and PEP {nb} ({tb}) relate, and where do they differ?")
    return out


# ------------------------------------------------------------------ measuring
_REMINDER = re.compile(r"<reminder>.*?</reminder>\s*\Z", re.S)


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else float("nan")


def run_engine(engine: Any, llm: Any, queries: list[str], enc: Any, extra: Any = None) -> list[dict[str, Any]]:
    """Each query once (after one warm-up query): its prompts, their tokens and duplicated text, its time."""
    llm.prompts.clear()
    engine.query(WARM_UP)  # lazy imports, tokenizer tables, first-call costs: off the clock
    rows = []
    for q in queries:
        llm.prompts.clear()
        gc.collect()
        t0 = time.perf_counter()
        response = engine.query(q)
        seconds = time.perf_counter() - t0
        prompts = list(llm.prompts)
        if not prompts:
            raise RuntimeError(f"no LLM call for {q!r}")
        tokens = [len(enc.encode_ordinary(p)) for p in prompts]
        joined = "\n".join(prompts)
        bare = _REMINDER.sub("", prompts[0])  # without the instructions restated at the tail on purpose
        row = {"query": q, "seconds": seconds, "calls": len(prompts), "tokens": tokens,
               "chars_first": len(prompts[0]), "rep_first": repeated_share(prompts[0]) * len(prompts[0]),
               "chars_all": len(joined), "rep_all": repeated_share(joined) * len(joined),
               "chars_bare": len(bare), "rep_bare": repeated_share(bare) * len(bare),
               "source_nodes": len(response.source_nodes), "first_prompt": prompts[0]}
        if extra is not None:
            row.update(extra())
        rows.append(row)
    return rows


def summarise(rows: list[dict[str, Any]], window: int, num_output: int) -> dict[str, Any]:
    limit = window - num_output
    all_tokens = [t for r in rows for t in r["tokens"]]
    over = [t - limit for t in all_tokens if t > limit]
    firsts = [r["tokens"][0] for r in rows]
    totals = [sum(r["tokens"]) for r in rows]
    secs = [r["seconds"] for r in rows]
    return {
        "queries": len(rows), "calls_mean": statistics.mean(r["calls"] for r in rows),
        "calls_max": max(r["calls"] for r in rows), "multi_call_queries": sum(r["calls"] > 1 for r in rows),
        "tokens_first_mean": statistics.mean(firsts), "tokens_first_max": max(firsts),
        "tokens_all_mean": statistics.mean(totals), "tokens_all_max": max(totals),
        "fill_first_%": 100 * statistics.mean(firsts) / limit,
        "dup_first_%": 100 * sum(r["rep_first"] for r in rows) / sum(r["chars_first"] for r in rows),
        "dup_all_%": 100 * sum(r["rep_all"] for r in rows) / sum(r["chars_all"] for r in rows),
        "dup_first_bare_%": 100 * sum(r["rep_bare"] for r in rows) / sum(r["chars_bare"] for r in rows),
        "prompts": len(all_tokens), "overflow_prompts": len(over), "overflow_max": max(over) if over else 0,
        "p50_s": percentile(secs, 50), "p95_s": percentile(secs, 95), "limit": limit,
        "nodes_in_prompt_mean": statistics.mean(r["source_nodes"] for r in rows),
    }


def retrieved_stats(retriever: Any, queries: list[str], enc: Any) -> dict[str, float]:
    """What the retriever hands over per query (outside every clock): nodes and LLM-visible tokens."""
    from llama_index.core.schema import MetadataMode

    nodes, tokens, meta = [], [], []
    for q in queries:
        hits = retriever.retrieve(q)
        nodes.append(len(hits))
        shown = [len(enc.encode_ordinary(h.node.get_content(metadata_mode=MetadataMode.LLM))) for h in hits]
        tokens.append(sum(shown))
        meta += [n - len(enc.encode_ordinary(h.node.get_content(metadata_mode=MetadataMode.NONE)))
                 for n, h in zip(shown, hits)]
    return {"retrieved_nodes_mean": statistics.mean(nodes), "retrieved_tokens_mean": statistics.mean(tokens),
            "metadata_tokens_per_node": statistics.mean(meta)}


# --------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=None, help="first N PEP files by name (default 40)")
    ap.add_argument("--queries", type=int, default=None, help="number of questions (default 20)")
    ap.add_argument("--top-k", type=int, default=8, help="similarity_top_k on every side (default 8)")
    ap.add_argument("--no-c", action="store_true", help="skip side C (ContextKitRetriever; one more embedding pass)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 5 PEPs, 5 queries")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args()
    limit = args.limit if args.limit is not None else (5 if args.quick else 40)
    n_queries = args.queries if args.queries is not None else (5 if args.quick else 20)
    top_k = args.top_k

    from llama_index.core import SimpleDirectoryReader, VectorStoreIndex
    from llama_index.core.query_engine import RetrieverQueryEngine

    from contextkit.embedders import Embedder
    from contextkit.integrations.llamaindex import (
        ContextBudgetPostprocessor,
        ContextKitEmbedding,
        ContextKitNodeParser,
        ContextKitRetriever,
        ContextKitSynthesizer,
        ingest_llamaindex_documents,
    )

    enc = get_tokenizer(ENCODING).encoding
    files = sorted(PEPS.glob("*.rst"))[:limit]
    if not files:
        raise SystemExit(f"no PEP files under {PEPS}")
    queries = build_queries(files, n_queries)
    texts = [f.read_text(encoding="utf-8") for f in files]
    corpus_tokens = sum(len(enc.encode_ordinary(t)) for t in texts)
    corpus_dup = repeated_share("\n".join(texts))
    RecordingLLM = recording_llm_class()

    print(f"corpus: the first {len(files)} of {len(list(PEPS.glob('*.rst')))} PEP files by name "
          f"({files[0].name} .. {files[-1].name}), {sum(len(t.encode('utf-8')) for t in texts) / 1e6:.2f} MB, "
          f"{corpus_tokens:,} {ENCODING} tokens. A slice, because embedding runs at ~10-15 chunks/s on this CPU "
          f"({os.cpu_count()} cores); --limit N for more.")
    print("embedding: every side uses ContextKitEmbedding over one shared contextkit Embedder (all-MiniLM-L6-v2, "
          "offline, long texts embedded as windows), so vectors are comparable. LlamaIndex's default embedding "
          "(OpenAI) needs the network and a key: not available here.")
    print(f"LLM: a recording CustomLLM (no LLM weights here) that answers a fixed {len(enc.encode_ordinary(ANSWER))}"
          "-token text; its metadata gives each scenario's context_window / num_output. Query time is the "
          "framework's: retrieval (query embedding included), postprocessing, prompt building, all LLM calls.")
    print(f"queries: {len(queries)} from the manifest titles, top-k {top_k} on every side; e.g. {queries[0]!r}"
          + (f", {queries[-1]!r}" if len(queries) > 1 else ""))

    # ------------------------------------------------------------ the indexes
    log("loading the embedding model ...")
    embedder = Embedder()
    embedder.embed(["warm up the model"])
    embed_model = ContextKitEmbedding(embedder)
    documents = SimpleDirectoryReader(input_files=[str(f) for f in files]).load_data()
    builds: list[dict[str, Any]] = []

    def build(name: str, how: str, fn: Any) -> Any:
        log(f"building {name} ({how}) ...")
        before = embedder.report.model_inputs
        t0 = time.perf_counter()
        out, nodes = fn()
        seconds = time.perf_counter() - t0
        inputs = embedder.report.model_inputs - before
        builds.append({"index": name, "how": how, "nodes": nodes, "model_inputs": inputs, "build_s": seconds,
                       "nodes/s": nodes / seconds})
        return out

    def index_a() -> tuple[Any, int]:  # the LlamaIndex starter, defaults
        ix = VectorStoreIndex.from_documents(documents, embed_model=embed_model)
        return ix, len(ix.docstore.docs)

    def index_b() -> tuple[Any, int]:  # the same line, plus the node parser
        ix = VectorStoreIndex.from_documents(documents, embed_model=embed_model,
                                             transformations=[ContextKitNodeParser()])
        return ix, len(ix.docstore.docs)

    ix_a = build("A", "SentenceSplitter 1024/200 (default) + embed", index_a)
    ix_b = build("B", "ContextKitNodeParser() (Settings: 1024/200) + embed", index_b)
    work = Path(tempfile.mkdtemp(prefix="ck-bench-li-"))
    retriever_c = None
    try:
        if not args.no_c:
            def index_c() -> tuple[Any, int]:
                rep = ingest_llamaindex_documents(documents, work / "peps.ck-index", embedder=embedder,
                                                  chunk_size=512, chunk_overlap=64)
                return rep, rep.chunks_added

            build("C", "ingest_llamaindex_documents 512/64 (SQLite, FAISS, BM25) + embed", index_c)
            retriever_c = ContextKitRetriever(work / "peps.ck-index", mode="hybrid", similarity_top_k=top_k,
                                              embedder=embedder)
        table(builds, ["index", "how", "nodes", "model_inputs", "build_s", "nodes/s"],
              "index builds (outside every query clock; model_inputs = windows the model read)")

        gc.collect()
        gc.freeze()  # the model, the indexes: out of every later collection (a full one takes ~1 s here)
        log("retrieval statistics (outside the clock) ...")
        retrieved = {"A": retrieved_stats(ix_a.as_retriever(similarity_top_k=top_k), queries, enc),
                     "B": retrieved_stats(ix_b.as_retriever(similarity_top_k=top_k), queries, enc)}
        retrieved["B0"] = retrieved["A"]
        if retriever_c is not None:
            retrieved["C"] = retrieved_stats(retriever_c, queries, enc)

        # ------------------------------------------------------------ the runs
        results: dict[str, dict[str, Any]] = {}
        first_prompts: dict[str, dict[str, str]] = {}
        for scen, window, num_output in SCENARIOS:
            llm = RecordingLLM(context_window=window, num_output=num_output)
            engines: dict[str, tuple[Any, Any]] = {}
            engines["A"] = (ix_a.as_query_engine(llm=llm, similarity_top_k=top_k), None)
            for side, ix in (("B", ix_b), ("B0", ix_a)):
                # the README combination: the postprocessor leaves the exact fit to the synthesizer
                pp = ContextBudgetPostprocessor.from_llm(llm, synthesizer="contextkit")
                synth = ContextKitSynthesizer(llm=llm)
                engine = ix.as_query_engine(llm=llm, similarity_top_k=top_k, node_postprocessors=[pp],
                                            response_synthesizer=synth)

                def extra(pp: Any = pp, synth: Any = synth) -> dict[str, Any]:
                    r = pp.last_report
                    dups = len(r.ids("dropped", "duplicate")) + len(r.ids("dropped", "near_duplicate"))
                    return {"pp_budget": r.budget, "pp_in": r.nodes_in, "pp_out": r.nodes_out,
                            "pp_merged": len(r.ids("merged")), "pp_dup": dups,
                            "pp_budget_drops": len(r.ids("dropped", "budget")),
                            "pp_truncated": len(r.ids("truncated")), "synth_tokens": synth.last_build.sent_tokens}

                engines[side] = (engine, extra)
            if retriever_c is not None:
                synth_c = ContextKitSynthesizer(llm=llm)
                engines["C"] = (RetrieverQueryEngine.from_args(retriever_c, llm=llm, response_synthesizer=synth_c),
                                lambda s=synth_c: {"synth_tokens": s.last_build.sent_tokens})
            results[scen] = {}
            first_prompts[scen] = {}
            for side, (engine, extra) in engines.items():
                log(f"{scen} window ({window:,} / {num_output}): side {side}, {len(queries)} queries ...")
                rows = run_engine(engine, llm, queries, enc, extra)
                summary = summarise(rows, window, num_output)
                summary.update(retrieved[side])
                if extra is not None and "pp_in" in rows[0]:
                    for key in ("pp_budget", "pp_out", "pp_merged", "pp_dup", "pp_budget_drops", "pp_truncated"):
                        summary[key + "_mean"] = statistics.mean(r[key] for r in rows)
                results[scen][side] = {"summary": summary,
                                       "rows": [{k: v for k, v in r.items() if k != "first_prompt"} for r in rows]}
                first_prompts[scen][side] = rows[0]["first_prompt"]

        # ------------------------------------------------------------ the report
        names = {"A": "A LlamaIndex defaults", "B": "B + plug-in (parser, pp, synth)",
                 "B0": "B0 A's index + pp + synth", "C": "C ContextKitRetriever hybrid + synth"}
        for scen, window, num_output in SCENARIOS:
            res = results[scen]
            rows = []
            for side, r in res.items():
                s = r["summary"]
                rows.append({"side": names[side], "retr. tok": s["retrieved_tokens_mean"],
                             "meta/node": s["metadata_tokens_per_node"],
                             "calls/q": s["calls_mean"], "max calls": s["calls_max"],
                             ">1 call": f"{s['multi_call_queries']}/{s['queries']}",
                             "tok 1st": s["tokens_first_mean"], "tok all": s["tokens_all_mean"],
                             "fill %": s["fill_first_%"], "dup % 1st": s["dup_first_%"],
                             "dup % 1st*": s["dup_first_bare_%"], "dup % all": s["dup_all_%"],
                             "overflow": f"{s['overflow_prompts']}/{s['prompts']}", "max over": s["overflow_max"],
                             "p50 ms": 1000 * s["p50_s"], "p95 ms": 1000 * s["p95_s"]})
            table(rows, ["side", "retr. tok", "meta/node", "calls/q", "max calls", ">1 call", "tok 1st", "tok all",
                         "fill %", "dup % 1st", "dup % 1st*", "dup % all", "overflow", "max over", "p50 ms", "p95 ms"],
                  f"{scen} window: context_window {window:,}, num_output {num_output} (prompt limit "
                  f"{window - num_output:,} tokens); per query means over {len(queries)} queries")
            base = res["A"]["summary"]
            ratio_rows = []
            for side, r in res.items():
                if side == "A":
                    continue
                s = r["summary"]
                ratio_rows.append({"ratio": f"{side}/A", "tok 1st": s["tokens_first_mean"] / base["tokens_first_mean"],
                                   "tok all": s["tokens_all_mean"] / base["tokens_all_mean"],
                                   "calls": s["calls_mean"] / base["calls_mean"],
                                   "dup 1st": s["dup_first_%"] / base["dup_first_%"] if base["dup_first_%"] else "-",
                                   "dup 1st*": (s["dup_first_bare_%"] / base["dup_first_bare_%"]
                                                if base["dup_first_bare_%"] else "-"),
                                   "dup all": s["dup_all_%"] / base["dup_all_%"] if base["dup_all_%"] else "-",
                                   "p50 time": s["p50_s"] / base["p50_s"], "p95 time": s["p95_s"] / base["p95_s"]})
            table(ratio_rows, ["ratio", "tok 1st", "tok all", "calls", "dup 1st", "dup 1st*", "dup all", "p50 time",
                               "p95 time"])
            exact = {side: all(r["synth_tokens"] == r["tokens"][0] for r in res[side]["rows"])
                     for side in res if "synth_tokens" in res[side]["rows"][0]}
            print("  ContextKitSynthesizer's report.tokens == the recount of the prompt it sent, every query: "
                  + ", ".join(f"{side} {'yes' if ok else 'NO'}" for side, ok in exact.items()))
            pp_rows = [{"side": side, "budget": r["summary"]["pp_budget_mean"],
                        "nodes in": r["summary"]["retrieved_nodes_mean"], "nodes out": r["summary"]["pp_out_mean"],
                        "merged": r["summary"]["pp_merged_mean"], "dup dropped": r["summary"]["pp_dup_mean"],
                        "budget dropped": r["summary"]["pp_budget_drops_mean"],
                        "truncated": r["summary"]["pp_truncated_mean"]}
                       for side, r in res.items() if "pp_out_mean" in r["summary"]]
            table(pp_rows, ["side", "budget", "nodes in", "nodes out", "merged", "dup dropped", "budget dropped",
                            "truncated"], "  ContextBudgetPostprocessor.from_llm per query (means)")
            if pp_rows:
                reserve = window - num_output - int(pp_rows[0]["budget"])
                print(f"  from_llm(llm, synthesizer='contextkit') reserve here: {reserve} tokens (contextkit's "
                      "instructions, head and tail); the synthesizer fits question, tags and evidence to the window "
                      "exactly, so fill % is the share of the prompt limit used.")

        print("\ncolumns: retr. tok = LLM-visible tokens of the top-k nodes the retriever returns (metadata "
              "included, before any postprocessing); tok 1st / tok all = cl100k tokens of a query's first prompt / "
              "of all its prompts; fill % = first prompt / prompt limit; overflow = prompts over the limit "
              "(context_window - num_output) / all prompts; max over = the largest excess in tokens; meta/node = "
              "tokens of metadata in a retrieved node's LLM text. C's nodes show the LLM all the reader's "
              "metadata (file_name, file_type, file_size, dates) and 'source' again, which SimpleDirectoryReader "
              "hides from the LLM on A/B's nodes; ContextKitSynthesizer puts no node metadata in the prompt, so "
              "this costs C nothing here, but would with LlamaIndex's own synthesizers.")
        print(f"duplicated text: share of a prompt's characters inside a {SHINGLE}-character shingle (taken at "
              "every word start) already seen at an earlier word start of the same text (bench_assemble's "
              "measure); 'all' joins a query's prompts, so what a refine call sends again counts. The corpus slice "
              f"joined (no overlap at all) scores {100 * corpus_dup:.2f}%: PEP boilerplate and code, on every "
              "side alike. ContextKitSynthesizer states its instructions at the head and again at the tail on "
              "purpose; that repeat counts in 'dup % 1st' and 'dup % all'; 'dup % 1st*' leaves the tail "
              "<reminder> out.")
        for scen in first_prompts:
            for side in ("A", "B"):
                p = first_prompts[scen][side]
                print(f"\n{scen} window, side {side}, first prompt of query 1 "
                      f"({len(enc.encode_ordinary(p)):,} tokens), first 300 characters:\n"
                      + "\n".join("  | " + line for line in p[:300].splitlines()))

        if args.json:
            out = {"corpus": {"files": [f.name for f in files], "tokens": corpus_tokens, "dup_share": corpus_dup},
                   "queries": queries, "top_k": top_k, "builds": builds,
                   "scenarios": [{"name": s, "context_window": w, "num_output": n} for s, w, n in SCENARIOS],
                   "results": results}
            args.json.write_text(json.dumps(out, indent=2, default=str))
            print(f"\nwrote {args.json}")
    finally:
        if retriever_c is not None:
            retriever_c.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

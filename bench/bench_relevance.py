"""Relevance-gated filling: prompt tokens and gold evidence kept, ``fill="relevant"`` against ``fill="budget"``.

On BEIR SciFact (``../shared/data/beir_scifact``, 5,183 abstracts) every query of a
split that has relevance judgements (on-topic; default the 300 test queries) and the
off-topic questions below (cooking, travel, sport...: nothing in a corpus of biomedical
abstracts bears on them) are assembled twice under the same budget by
``ContextAssembler`` with the default hybrid retriever:

* ``fill="budget"``: evidence fills the budget (what the assembler did before);
* ``fill="relevant"`` (the default): evidence stops where relevance falls away (the
  adaptive floor, relative to the best hit) and an off-topic question gets none.

Figures: mean prompt tokens (on-topic, off-topic, all), and the share of the gold
documents (qrels) present in the budget-filled prompt that are still present in the
relevance-gated one ("gold kept"; a document is present when one of its chunks is).
Goal (issue 19): gold kept >= 95% with >= 50% fewer tokens on average.

``--sweep`` prints the same figures for a grid of ``relevance_floor`` and
``min_similarity`` (tune on ``--split train``, then report on test).

    python bench/bench_relevance.py [--budget 8000] [--split test] [--limit N] [--sweep] [--json FILE]

The index is ``/tmp/ck19-scifact.ck-index`` (``--index``), ingested with the defaults
when missing (a few minutes on 2 cores).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "beir_scifact"
INDEX = Path("/tmp/ck19-scifact.ck-index")
INSTRUCTIONS = "Answer from the evidence only; cite the document ids you use."

OFF_TOPIC = [
    "How do I bake a chocolate cake?",
    "What is the best time of year to visit Lisbon?",
    "Who won the football World Cup in 2014?",
    "How do I change a flat tyre on a bicycle?",
    "What are good exercises to improve my chess openings?",
    "How long should I boil an egg for a runny yolk?",
    "Which programming language should I learn first for web development?",
    "How do I grow tomatoes on a balcony?",
    "What is the plot of the novel Pride and Prejudice?",
    "How can I improve my golf swing?",
    "What should I pack for a week of hiking in the Alps?",
    "How do I set up a home Wi-Fi router?",
    "What is a good recipe for vegetarian lasagne?",
    "How do I write a cover letter for a marketing job?",
    "Which board games are fun for a family of four?",
    "How do I remove a red wine stain from a carpet?",
    "What are the rules of cricket?",
    "How do I tune a guitar by ear?",
    "What is the capital of Australia?",
    "How do I negotiate a lower rent with my landlord?",
    "What is the difference between a latte and a cappuccino?",
    "How do I train a puppy to sit?",
    "Which camera settings are best for photographing fireworks?",
    "How do I knit a scarf for beginners?",
    "When was the Eiffel Tower built?",
    "How do I make sourdough starter at home?",
    "What are the best beaches in Thailand?",
    "How do I file my taxes as a freelancer?",
    "What is the offside rule in football?",
    "How can I learn to juggle three balls?",
]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def open_index(path: Path, data: Path = DATA) -> Any:
    from contextkit.index import Index

    if not Index.exists(path):
        from contextkit.ingestion import ingest

        log(f"ingesting {data / 'corpus.jsonl'} into {path} (once)")
        ingest([data / "corpus.jsonl"], path)
    return Index.open(path, read_only=True)


def chunk_docs(index: Any) -> dict[str, str]:
    """Chunk id -> BEIR corpus id, for every chunk of the index."""
    from contextkit.evaluation import corpus_id

    rowids = [r for batch, _ in index.store.iter_chunk_texts() for r in batch.tolist()]
    return {c.id: corpus_id(c.doc_id) for c in index.store.chunks_by_rowid(rowids).values()}


def run_queries(assembler: Any, queries: list[tuple[str, str, set[str]]], budget: int,
                settings: dict[str, Any], docs_of: dict[str, str]) -> list[dict[str, Any]]:
    """One row per query: tokens and the evidence documents in the prompt."""
    rows = []
    for qid, text, gold in queries:
        result = assembler.assemble(text, instructions=INSTRUCTIONS, budget=budget, **settings)
        docs = {docs_of[i.id] for i in result.report.items
                if i.section == "evidence" and i.status in ("included", "truncated") and i.id in docs_of}
        rows.append({"qid": qid, "tokens": result.report.tokens, "docs": docs, "gold": gold,
                     "off_topic": bool(result.report.relevance and result.report.relevance.off_topic)})
    return rows


def figures(budget_rows: list[dict[str, Any]], relevant_rows: list[dict[str, Any]]) -> dict[str, Any]:
    on_b = [r for r in budget_rows if r["gold"]]
    on_r = [r for r in relevant_rows if r["gold"]]
    off_b = [r for r in budget_rows if not r["gold"]]
    off_r = [r for r in relevant_rows if not r["gold"]]
    in_budget = sum(len(b["gold"] & b["docs"]) for b in on_b)
    kept = sum(len(b["gold"] & b["docs"] & r["docs"]) for b, r in zip(on_b, on_r))
    gold_total = sum(len(b["gold"]) for b in on_b)
    def mean(rows: list) -> float:
        return statistics.fmean(r["tokens"] for r in rows) if rows else 0.0

    all_b, all_r = mean(budget_rows), mean(relevant_rows)
    return {
        "on-topic queries": len(on_b), "off-topic queries": len(off_b),
        "tokens on-topic: budget": mean(on_b), "tokens on-topic: relevant": mean(on_r),
        "tokens off-topic: budget": mean(off_b), "tokens off-topic: relevant": mean(off_r),
        "tokens all: budget": all_b, "tokens all: relevant": all_r,
        "token reduction": 1 - all_r / all_b if all_b else 0.0,
        "token reduction on-topic": 1 - mean(on_r) / mean(on_b) if on_b else 0.0,
        "gold recall: budget": in_budget / max(gold_total, 1), "gold recall: relevant": kept / max(gold_total, 1),
        "gold kept": kept / max(in_budget, 1),
        "off-topic flagged": sum(r["off_topic"] for r in off_r) / max(len(off_r), 1),
        "on-topic flagged off topic": sum(r["off_topic"] for r in on_r) / max(len(on_r), 1),
    }


def show(title: str, figs: dict[str, Any]) -> None:
    log(f"\n{title}")
    for key, value in figs.items():
        log(f"  {key:<30} {value:,.3f}" if isinstance(value, float) else f"  {key:<30} {value}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, default=INDEX)
    p.add_argument("--data", type=Path, default=DATA, help="the BEIR SciFact folder")
    p.add_argument("--budget", type=int, default=8000)
    p.add_argument("--split", default="test")
    p.add_argument("--limit", type=int, default=None, help="on-topic queries (default: all of the split)")
    p.add_argument("--sweep", action="store_true", help="grid of relevance_floor x min_similarity")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    from contextkit.assembly.context_assembler import ContextAssembler
    from contextkit.evaluation import load_beir
    from contextkit.retrievers import make_retriever

    started = time.time()
    beir = load_beir(args.data, args.split)
    on = [(qid, beir.queries[qid], {d for d, s in rels.items() if s > 0}) for qid, rels in beir.qrels.items()]
    on = on[: args.limit] if args.limit else on
    queries = on + [(f"off{i}", q, set()) for i, q in enumerate(OFF_TOPIC)]
    log(f"SciFact {args.split}: {len(on)} on-topic queries, {len(OFF_TOPIC)} off-topic; budget {args.budget:,}")
    with open_index(args.index, args.data) as index:
        assembler = ContextAssembler(args.budget, retriever=make_retriever("hybrid", index))
        assembler.assemble("warm up", budget=args.budget)
        docs_of = chunk_docs(index)
        t0 = time.perf_counter()
        budget_rows = run_queries(assembler, queries, args.budget, {"fill": "budget"}, docs_of)
        t_budget = time.perf_counter() - t0
        t0 = time.perf_counter()
        relevant_rows = run_queries(assembler, queries, args.budget, {"fill": "relevant"}, docs_of)
        t_relevant = time.perf_counter() - t0
        result: dict[str, Any] = {"split": args.split, "budget": args.budget,
                                  "defaults": figures(budget_rows, relevant_rows),
                                  "ms/query: budget": 1000 * t_budget / len(queries),
                                  "ms/query: relevant": 1000 * t_relevant / len(queries)}
        show("fill='relevant' (defaults) against fill='budget'", result["defaults"])
        d = result["defaults"]
        met = d["gold kept"] >= 0.95 and d["token reduction"] >= 0.5
        log(f"goal (gold kept >= 0.95 with >= 50% fewer tokens): {'met' if met else 'NOT met'}; "
            f"{result['ms/query: budget']:.0f} / {result['ms/query: relevant']:.0f} ms per query")
        if args.sweep:
            result["sweep"] = []
            for floor in (0.2, 0.3, 0.4, 0.5):
                for sim in (0.3, 0.35, 0.4):
                    rows = run_queries(assembler, queries, args.budget,
                                       {"fill": "relevant", "relevance_floor": floor, "min_similarity": sim}, docs_of)
                    f = figures(budget_rows, rows)
                    result["sweep"].append({"relevance_floor": floor, "min_similarity": sim, **f})
                    log(f"  floor {floor:.2f} min_similarity {sim}: gold kept {f['gold kept']:.3f}, token "
                        f"reduction {f['token reduction']:.3f} (on-topic {f['token reduction on-topic']:.3f}), "
                        f"off-topic flagged {f['off-topic flagged']:.2f}, on-topic flagged "
                        f"{f['on-topic flagged off topic']:.3f}")
    log(f"\nrelevance bench: {time.time() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
        log(f"wrote {args.json}")


if __name__ == "__main__":
    main()

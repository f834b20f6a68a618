"""A received index folder treated as hostile (issue 33): every file an index folder holds swapped for a
FIFO, a link to ``/dev/zero`` or a link out of the folder; a crafted ``store.sqlite`` (generated columns,
expression indexes, values of the wrong type); FAISS files whose ids are not the store's rows.

Each case is probed in a child process under a time limit and a memory cap: open it read-only and search
(dense and BM25), open it to write, and ``verify`` it; then the CLI (``info``, ``search --mode bm25``,
``verify``). It holds when every probe ends in time, within the memory, with a one-line ``ContextkitError``
(or an answer, or verify's report) and never a raw Python error or a traceback."""

from __future__ import annotations

import json
import os
import resource
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

from tools.attacks._harness import Fails, check, cli, no_traceback, python

DIM = 8
#: Seconds and MiB one probe may take: a healthy small index opens, searches and verifies in a few seconds,
#: in under 100 MiB. The address-space cap stops a runaway child; the peak RSS says whether one ran away.
PROBE_SECONDS, PROBE_MIB, PEAK_MIB = 30, 3072, 512

_PROBE = """
import sys, numpy as np
from contextkit.index import Index, verify_index
from contextkit.errors import ContextkitError
ix = sys.argv[1]
def ro():
    with Index.open(ix, read_only=True) as index:
        index.search(np.full(8, 0.35, np.float32), 3)
        index.bm25.search('chapter topic1', 3)
def rw():
    with Index.open(ix) as index:
        index.search(np.full(8, 0.35, np.float32), 3)
def ver():
    report = verify_index(ix)
    print('VERIFY', report.ok, [(c.file, c.status) for c in report.problems])
for name, step in (('read', ro), ('write', rw), ('verify', ver)):
    try:
        step()
        print('OK', name)
    except ContextkitError as exc:
        text = str(exc)
        print('ERROR', name, text if '\\n' not in text else 'MULTILINE ' + text)
"""


def _build(folder: Path, index_type: str = "flat", n_docs: int = 3, per_doc: int = 4) -> Path:
    """A small real index of random vectors (no model needed); its generation's files named as saved."""
    import numpy as np

    from contextkit.index import Index
    from contextkit.records import Chunk, Document

    rng = np.random.default_rng(33)
    with Index.create(folder, model="m", dim=DIM, index_type=index_type) as index:  # type: ignore[arg-type]
        for d in range(n_docs):
            doc = f"doc{d}"
            texts = [f"{doc} chapter {i} about topic{i % 50}" for i in range(per_doc)]
            chunks = [Chunk(id=f"{doc}::{i}", doc_id=doc, ordinal=i, text=text, start=0, end=len(text), token_count=5)
                      for i, text in enumerate(texts)]
            vectors = rng.standard_normal((per_doc, DIM)).astype(np.float32)
            index.upsert(Document(id=doc, text=doc, source=f"{doc}.txt"), chunks,
                         vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    return folder


def _files(ix: Path) -> dict[str, Path]:
    """Every file of the folder by role: the manifests, the store (and its -wal/-shm), FAISS, BM25, the lock."""
    manifest = json.loads((ix / "manifest.json").read_text())
    gen, files = manifest["generation"], manifest["files"]
    bm25 = ix / files["bm25"]
    out = {"manifest.json": ix / "manifest.json", "lease manifest.G.json": ix / f"manifest.{gen}.json",
           "store.sqlite": ix / "store.sqlite", "store.sqlite-wal": ix / "store.sqlite-wal",
           "store.sqlite-shm": ix / "store.sqlite-shm", ".lock": ix / ".lock",
           "vectors.faiss": ix / files["vectors.faiss"]}
    for name in ("meta.json", "rowids.npy", "vocab.index.json", "docs.index.npy", "indptr.csc.index.npy"):
        out[f"bm25/{name}"] = bm25 / name
    return out


def _probe(ix: Path, what: str) -> str:
    """The probes on ``ix``; raises ``Fails`` on a hang, a crash, memory exhaustion or a raw error."""
    try:
        child = python(_PROBE.replace("sys.argv[1]", repr(str(ix))), timeout=PROBE_SECONDS, memory_mib=PROBE_MIB)
    except Exception as exc:  # subprocess.TimeoutExpired
        raise Fails(f"{what}: open/search/verify hung past {PROBE_SECONDS} s ({type(exc).__name__})") from None
    no_traceback(child, what)
    _peak(what)
    check(child.returncode == 0, f"{what}: the probe died (exit {child.returncode}): {child.stderr[-300:]}")
    check("MULTILINE" not in child.stdout, f"{what}: an error of several lines: {child.stdout[-400:]}")
    return child.stdout


def _peak(what: str) -> None:
    """The largest resident size of any child so far stays far below what a runaway read reaches."""
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
    check(peak < PEAK_MIB, f"{what}: a child grew to {peak} MiB (a healthy probe takes under 100)")


def _cli_probe(ix: Path, what: str) -> None:
    for args in (["info", "--index", str(ix)], ["search", "chapter", "--index", str(ix), "--mode", "bm25"],
                 ["verify", "--index", str(ix)]):
        try:
            result = cli(args, timeout=PROBE_SECONDS, memory_mib=PROBE_MIB)
        except Exception:
            raise Fails(f"{what}: `contextkit {args[0]}` hung past {PROBE_SECONDS} s") from None
        no_traceback(result, f"{what}: contextkit {args[0]}")
        _peak(f"{what}: contextkit {args[0]}")
        check(result.returncode in (0, 1, 2), f"{what}: contextkit {args[0]} exit {result.returncode}")


def _drop_checksums(ix: Path) -> None:
    """The manifest without its checksums (an attacker writes the manifest too): only the reads themselves guard."""
    manifest = json.loads((ix / "manifest.json").read_text())
    manifest["checksums"] = {}
    for name in ("manifest.json", f"manifest.{manifest['generation']}.json"):
        path = ix / name
        if path.is_file() and not path.is_symlink():
            path.write_text(json.dumps(manifest, indent=2))


def _each_file(work: Path, swap: Callable[[Path, Path], None], kind: str, index_type: str = "flat") -> None:
    """Every file of a built folder swapped in turn (in a fresh copy, with and without the manifest's
    checksums) and probed; all failures listed. ``swap(target, original)``: the original moved aside."""
    built = _build(work / "built", index_type)
    failures: list[str] = []
    for sums in (True, False):
        for role in _files(built):
            ix = work / f"case-{role.replace('/', '_').replace(' ', '_')}"
            shutil.copytree(built, ix, symlinks=True)
            if not sums:
                _drop_checksums(ix)
            target = _files(ix)[role]
            original = work / f"original-{target.name}"
            if target.exists():
                shutil.move(target, original)
            swap(target, original)
            what = f"{role} as {kind}{'' if sums else ' (no checksums)'}"
            try:
                out = _probe(ix, what)
                # served is right only where the file is never read: SQLite's side files and the lock carry no
                # data, and a derived file the manifest no longer vouches for is rebuilt from the store
                harmless = role in ("store.sqlite-wal", "store.sqlite-shm", ".lock") or \
                    (role.startswith(("vectors.faiss", "bm25/")) and not sums)
                check("OK read" not in out or harmless, f"{what}: served as if healthy")
            except Fails as failure:
                failures.append(str(failure).splitlines()[0][:200])
            shutil.rmtree(ix, ignore_errors=True)
            if original.is_dir():
                shutil.rmtree(original)
            else:
                original.unlink(missing_ok=True)
    check(not failures, f"{len(failures)} cases: " + " | ".join(failures))


def attack_fifo_as_any_file_of_the_folder(work: Path) -> None:
    _each_file(work, lambda target, _: os.mkfifo(target), "a FIFO")


def attack_dev_zero_link_as_any_file_of_the_folder(work: Path) -> None:
    _each_file(work, lambda target, _: os.symlink("/dev/zero", target), "a link to /dev/zero")


def attack_link_out_of_the_folder_as_any_file(work: Path) -> None:
    """The very file, moved out of the folder and linked back: the bytes are right, the place is not."""
    _each_file(work, lambda target, original: os.symlink(original, target) if original.exists() else None,
               "a link out of the folder")


def attack_fifo_lock_file_with_the_cli(work: Path) -> None:
    ix = _build(work / "ix")
    (ix / ".lock").unlink(missing_ok=True)
    os.mkfifo(ix / ".lock")
    _cli_probe(ix, ".lock as a FIFO")


def attack_dev_zero_vocab_with_the_cli(work: Path) -> None:
    ix = _build(work / "ix")
    _drop_checksums(ix)
    vocab = _files(ix)["bm25/vocab.index.json"]
    vocab.unlink()
    os.symlink("/dev/zero", vocab)
    _cli_probe(ix, "bm25 vocab linked to /dev/zero")


# --------------------------------------------------------------- crafted store
def _crafted_store(work: Path, sql: str, name: str) -> Path:
    ix = _build(work / name)
    db = sqlite3.connect(ix / "store.sqlite")
    db.executescript(sql)
    db.commit()
    db.close()
    for side in ("store.sqlite-wal", "store.sqlite-shm"):
        (ix / side).unlink(missing_ok=True)
    return ix


#: Rebuild ``chunks`` with one column changed (its rows copied), as a crafted store would.
_CHUNKS = ("rowid INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, doc_id TEXT NOT NULL, "
           "ordinal INTEGER NOT NULL, start INTEGER NOT NULL, end INTEGER NOT NULL, tokens INTEGER NOT NULL, "
           "total_tokens INTEGER NOT NULL, {header}, text TEXT NOT NULL, metadata TEXT NOT NULL, "
           "vector_key TEXT NOT NULL, text_sha TEXT")
_COPY = ("ALTER TABLE chunks RENAME TO old_chunks; DROP INDEX IF EXISTS chunks_doc; CREATE TABLE chunks ({cols}); "
         "INSERT INTO chunks ({names}) SELECT {names} FROM old_chunks; DROP TABLE old_chunks; "
         "CREATE INDEX chunks_doc ON chunks(doc_id);")
_NAMES = "rowid, id, doc_id, ordinal, start, end, tokens, total_tokens, text, metadata, vector_key, text_sha"

STORE_CRAFTS = {
    "generated column of 400 MB": _COPY.format(
        cols=_CHUNKS.format(header="header TEXT GENERATED ALWAYS AS (printf('%.*c', 400000000, 'x')) VIRTUAL"),
        names=_NAMES),
    "expression index named as ours": ("DROP INDEX chunks_doc; "
                                       "CREATE INDEX chunks_doc ON chunks(printf('%.*c', 300000000, doc_id));"),
    "generation 'abc'": "UPDATE meta SET value = 'abc' WHERE key = 'generation';",
    "metadata not JSON": "UPDATE chunks SET metadata = '{not json' WHERE rowid = 1;",
    "metadata JSON but a list": "UPDATE chunks SET metadata = '[1,2]';",
    "a missing column": _COPY.format(cols=_CHUNKS.format(header="header TEXT NOT NULL").replace(
        " metadata TEXT NOT NULL,", ""), names=_NAMES.replace(" metadata,", " header,")),
    "a vector blob of 3 bytes": "UPDATE vectors SET vector = X'010203';",
    "ordinal as text": "UPDATE chunks SET ordinal = 'seven' WHERE rowid = 2;",
    "rowid-less vectors table": ("ALTER TABLE vectors RENAME TO v2; CREATE TABLE vectors (key TEXT PRIMARY KEY, "
                                 "vector BLOB NOT NULL) WITHOUT ROWID; INSERT INTO vectors SELECT * FROM v2; "
                                 "DROP TABLE v2;"),
}


def attack_crafted_store_values_and_schema(work: Path) -> None:
    failures = []
    for i, (what, sql) in enumerate(STORE_CRAFTS.items()):
        try:
            ix = _crafted_store(work, sql, f"store{i}")
            out = _probe(ix, f"store with {what}")
            check("OK read" not in out or "ERROR verify" in out or "VERIFY False" in out,
                  f"store with {what}: opened, served and verified as healthy")
        except Fails as failure:
            failures.append(str(failure).splitlines()[0][:220])
        except sqlite3.Error as exc:
            failures.append(f"setup of {what}: {exc}")
    check(not failures, f"{len(failures)} of {len(STORE_CRAFTS)} crafted stores: " + " | ".join(failures))


def attack_crafted_store_with_the_cli(work: Path) -> None:
    ix = _crafted_store(work, STORE_CRAFTS["generation 'abc'"] + STORE_CRAFTS["metadata not JSON"], "ix")
    _cli_probe(ix, "crafted store values")


# -------------------------------------------------------------------- FAISS ids
def _craft_faiss(ix: Path, how: str) -> None:
    """Change the FAISS file as a crafted folder would, its checksum recomputed: ``idmap`` adds 10^9 to every
    rowid of the id map, ``lists`` to every id the IVF lists hold (positions under an id map, rowids for
    IVF-PQ), ``graph`` points an HNSW link past the graph, ``size`` makes the vectors' array claim 8 GiB."""
    import faiss

    from contextkit.index._checksums import file_sum

    manifest = json.loads((ix / "manifest.json").read_text())
    path = ix / manifest["files"]["vectors.faiss"]
    index = faiss.read_index(str(path))
    if how == "idmap":
        faiss.copy_array_to_vector(faiss.vector_to_array(index.id_map) + 10**9, index.id_map)
    elif how == "lists":
        ivf = faiss.extract_index_ivf(index)
        lists = ivf.invlists
        for lst in range(ivf.nlist):
            size = lists.list_size(lst)
            if size:
                ids = faiss.rev_swig_ptr(lists.get_ids(lst), size).copy() + 10**9
                codes = faiss.rev_swig_ptr(lists.get_codes(lst), size * lists.code_size).copy()
                lists.update_entries(lst, 0, size, faiss.swig_ptr(ids), faiss.swig_ptr(codes))
    elif how == "size":  # the flat vectors' array claims 2^31 floats (8 GiB) in a file of a few hundred bytes
        faiss.write_index(index, str(path))
        data = bytearray(path.read_bytes())
        at = data.index(b"IxFI") + 4 + 4 + 8 + 8 + 8 + 1 + 4
        data[at:at + 8] = (1 << 31).to_bytes(8, "little")
        path.write_bytes(bytes(data))
    else:
        hnsw = faiss.downcast_index(index.index).hnsw
        links = faiss.vector_to_array(hnsw.neighbors)
        links[links >= 0] = 10**8
        faiss.copy_array_to_vector(links, hnsw.neighbors)
    if how != "size":
        faiss.write_index(index, str(path))
    manifest["checksums"]["vectors.faiss"] = file_sum(path).model_dump()
    for name in ("manifest.json", f"manifest.{manifest['generation']}.json"):
        (ix / name).write_text(json.dumps(manifest, indent=2))


def _faiss_case(work: Path, index_type: str, how: str, n_docs: int, per_doc: int) -> None:
    ix = _build(work / "ix", index_type, n_docs, per_doc)
    _craft_faiss(ix, how)
    what = f"{index_type} FAISS file with crafted {how}"
    out = _probe(ix, what)
    check("OK read" not in out, f"{what}: served: {out[-300:]}")
    check("VERIFY True" not in out, f"{what}: verify passed it")


def attack_flat_faiss_ids_not_in_the_store(work: Path) -> None:
    _faiss_case(work, "flat", "idmap", 3, 4)


def attack_ivf_id_map_not_in_the_store(work: Path) -> None:
    _faiss_case(work, "ivf", "idmap", 4, 300)


def attack_ivf_list_ids_out_of_range(work: Path) -> None:
    _faiss_case(work, "ivf", "lists", 4, 300)


def attack_ivfpq_list_ids_not_in_the_store(work: Path) -> None:
    _faiss_case(work, "ivfpq", "lists", 10, 1005)


def attack_faiss_array_size_claimed_past_the_file(work: Path) -> None:
    _faiss_case(work, "flat", "size", 3, 4)


def attack_hnsw_link_out_of_the_graph(work: Path) -> None:
    _faiss_case(work, "hnsw", "graph", 3, 40)

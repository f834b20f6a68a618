"""BM25 sees a document's title in every chunk (``BM25Config.title_every_chunk``), on new indexes only.

A document ranks by its best chunk; a long document's title sat in its first chunk only, so a query
naming the title matched nothing in the chunk that holds the rest of the question (issue 29: SciFact
BM25 at 128-token chunks trailed BM25 over whole documents). An index written before keeps its terms.
"""

from __future__ import annotations

import json

import pytest

from contextkit.index import Index, _manifest
from contextkit.index._bm25 import BM25Config
from contextkit.ingestion import IngestConfig, ingest
from contextkit.retrievers import BM25Retriever

FILLER = ("The committee met again in the spring and reviewed the ledgers, the shipping schedules and "
          "the harbour fees line by line before the vote. ")
FACT = "Harvest yields fell sharply after the cyclone of that year. "
LONG = {"_id": "spice", "title": "Zanzibar clove plantations",
        "text": FILLER * 2 + FILLER[:60] + FACT + FILLER[60:] + FILLER}
OTHER = {"_id": "weather", "title": "Indian Ocean weather",
         "text": "Across the islands, harvest yields fell sharply after the cyclone, for many crops and farmers alike."}
QUESTION = "What happened to the Zanzibar clove plantations after the cyclone?"


TOPICS = ["Baking sourdough bread", "Tuning a guitar", "Rules of cricket", "Knitting a scarf", "Training a puppy",
          "Growing tomatoes", "Repairing a bicycle", "Brewing coffee", "Planning a garden", "Learning chess"]
REST = [{"_id": f"d{i}", "title": t, "text": f"Notes on {t.lower()}: what to do first, and what to avoid."}
        for i, t in enumerate(TOPICS)]


def _corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in (LONG, OTHER, *REST)), encoding="utf-8")
    return path


def _ingest(tmp_path, embedder, name="ix"):
    ingest([_corpus(tmp_path)], tmp_path / name, IngestConfig(chunk_size=48, chunk_overlap=0), embedder=embedder)
    return tmp_path / name


def test_the_title_reaches_every_later_chunk(tmp_path, embedder):
    """The question names the title and a fact from a later chunk: that chunk ranks first (on 54fde72 the
    title-only first chunk did, the answer below it and below another document's)."""
    folder = _ingest(tmp_path, embedder)
    with Index.open(folder, read_only=True) as index:
        assert BM25Config(**index.manifest.bm25).title_every_chunk
        chunks = index.store.chunks_of(next(d for d in index.documents() if d.endswith("#spice")))
        assert len(chunks) >= 3 and [c.ordinal for c in chunks if "cyclone" in c.text] != [0]
        hits = BM25Retriever(index).retrieve(QUESTION, 3)
    assert hits[0].chunk.doc_id.endswith("#spice") and hits[0].chunk.ordinal >= 1
    assert "cyclone" in hits[0].chunk.text
    assert "Zanzibar" not in hits[0].chunk.text  # the stored chunk is unchanged: only BM25's terms differ


def test_an_index_written_without_the_setting_keeps_its_terms(tmp_path, embedder, monkeypatch):
    """A manifest without ``title_every_chunk`` (as every index written before) reads as False: the title
    stays in the first chunk's terms only, after a reopen and after an update alike."""
    monkeypatch.setattr(_manifest, "BM25Config", lambda **_: BM25Config())  # what earlier code wrote
    folder = _ingest(tmp_path, embedder)
    monkeypatch.undo()
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["bm25"].pop("title_every_chunk", None)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    query = QUESTION
    with Index.open(folder, read_only=True) as index:
        assert not BM25Config(**index.manifest.bm25).title_every_chunk
        first = [(h.chunk.id, h.score) for h in BM25Retriever(index).retrieve(query, 5)]
    assert first[0][0].endswith("#spice::0")  # the title's chunk, as before
    with Index.open(folder) as index:
        assert len(index.bm25) == len(index)  # brought up to date from the saved folder (nothing changed)
    with Index.open(folder, read_only=True) as index:
        again = [(h.chunk.id, h.score) for h in BM25Retriever(index).retrieve(query, 5)]
    assert [i for i, _ in again] == [i for i, _ in first]
    assert [s for _, s in again] == pytest.approx([s for _, s in first])

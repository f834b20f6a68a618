"""BEIR-format sets for the held-out retrieval bench: SciFact as shipped, XQuAD-en converted.

XQuAD (``xquad.en.json``, SQuAD layout, CC BY-SA 4.0) becomes a BEIR folder: each of the 240
paragraphs is a document (``_id`` ``p<N>``, title the article's, underscores as spaces), each
of the 1,190 questions a query whose one relevant document is the paragraph that holds it
(qrels split ``test``). Written to a temporary folder, never into the repository.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["xquad_as_beir"]


def xquad_as_beir(source: Path, out: Path) -> Path:
    """``out`` holding corpus.jsonl, queries.jsonl and qrels/test.tsv made from ``source``."""
    data = json.loads(source.read_text(encoding="utf-8"))["data"]
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    docs, queries, qrels = [], [], ["query-id\tcorpus-id\tscore"]
    for article in data:
        title = article["title"].replace("_", " ")
        for para in article["paragraphs"]:
            pid = f"p{len(docs)}"
            docs.append({"_id": pid, "title": title, "text": para["context"]})
            for qa in para["qas"]:
                queries.append({"_id": qa["id"], "text": qa["question"]})
                qrels.append(f"{qa['id']}\t{pid}\t1")
    (out / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    (out / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    (out / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n", encoding="utf-8")
    return out

"""BM25 in Chinese, Japanese and Korean: words inside runs of CJK characters are found, through a real index.

bm25s's pattern took a whole run of Han or kana as one term, so a word inside a sentence matched nothing
(0 hits for 检索, 天气 and 酱油). New indexes cut CJK runs into bigrams; an index saved before records no
analyzer and must keep answering exactly as it did; English must be cut and scored exactly as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from contextkit.errors import ContextkitError
from contextkit.index import Index, verify_index
from contextkit.index._bm25 import BM25Config, BM25Index
from contextkit.index._bm25_legacy import bm25s, bm25s_model
from contextkit.index._checksums import file_sum
from contextkit.ingestion import ingest
from contextkit.search import search_index

from .conftest import derived_path

DOCS = {
    "weather.txt": "今天天气很好，我们下午去公园散步吧。",
    "retrieval.txt": "信息检索是搜索引擎的核心技术，它决定了结果的质量。",
    "cooking.txt": "红烧肉要先焯水，再加酱油和冰糖，用小火慢慢炖一个小时。",
    "tea.txt": "私は毎朝緑茶を飲みながら新聞を読んでいます。",
    "train.txt": "東京駅から新幹線に乗って京都へ行きました。",
    "search.txt": "검색은 정보를 찾는 일이고, 요리는 음식을 만드는 일입니다.",
    "library.txt": "도서관에서 책을 빌려서 집에서 읽었습니다.",
    "faiss.txt": "FAISS searches dense vectors by inner product and keeps the caller's ids.",
    "bm25.txt": "BM25 ranks documents by term frequency and inverse document frequency.",
    "bread.txt": "Knead the dough for ten minutes and let the bread rise until it has doubled.",
}
#: Each query word and the one document holding it: Chinese, Japanese (kanji with kana), Korean (a
#: particle attached in the text: 검색은, 도서관에서).
WORDS = {"检索": "retrieval.txt", "天气": "weather.txt", "酱油": "cooking.txt", "飲みながら": "tea.txt",
         "新幹線": "train.txt", "검색": "search.txt", "도서관": "library.txt"}
ENGLISH = ["dense vectors", "term frequency", "bread dough rising", "the caller's ids", "documents ranked"]


@pytest.fixture(scope="module")
def cjk_index(tmp_path_factory, embedder) -> Path:
    root = tmp_path_factory.mktemp("cjk")
    (root / "docs").mkdir()
    for name, text in DOCS.items():
        (root / "docs" / name).write_text(text + "\n", encoding="utf-8")
    ingest([root / "docs"], root / "ix", embedder=embedder)
    return root / "ix"


def top(ix: Path, query: str, k: int = 3) -> list[str]:
    return [Path(hit.chunk.doc_id).name for hit in search_index(ix, query, k=k, mode="bm25")]


@pytest.mark.parametrize("word", sorted(WORDS))
def test_a_cjk_word_inside_a_sentence_is_found_first(cjk_index, word):
    assert top(cjk_index, word)[:1] == [WORDS[word]]


def test_the_analyzer_is_recorded_with_a_new_index(cjk_index):
    manifest = json.loads((cjk_index / "manifest.json").read_text())
    assert manifest["bm25"]["analyzer"] == "cjk-bigram"
    assert json.loads(derived_path(cjk_index, "bm25/meta.json").read_text())["config"]["analyzer"] == "cjk-bigram"


def _as_saved_before_analyzers(ix: Path) -> None:
    """Make an index what a contextkit before analyzers wrote: its BM25 folder cut by bm25s's pattern alone,
    and no ``analyzer`` in the manifest, its generation's copy, the store's settings copy or the folder."""
    import sqlite3

    from contextkit.index._bm25_sync import chunk_texts, live_rowids

    manifest = json.loads((ix / "manifest.json").read_text())
    del manifest["bm25"]["analyzer"]
    folder = derived_path(ix, "bm25/meta.json").parent
    db = sqlite3.connect(ix / "store.sqlite")
    with db:
        rowids = live_rowids(db)
        old = BM25Index(BM25Config(**manifest["bm25"], analyzer="bm25s"))
        old.build(rowids, chunk_texts(db, rowids), manifest["generation"])
        row = db.execute("SELECT value FROM meta WHERE key = 'manifest_settings'").fetchone()
        copy = json.loads(row[0])
        del copy["bm25"]["analyzer"]
        db.execute("UPDATE meta SET value = ? WHERE key = 'manifest_settings'", (json.dumps(copy, sort_keys=True),))
    db.close()
    old.save(folder)
    saved = json.loads((folder / "meta.json").read_text())
    del saved["config"]["analyzer"]
    (folder / "meta.json").write_text(json.dumps(saved))
    manifest["checksums"] = {k: v for k, v in manifest["checksums"].items() if not k.startswith("bm25/")}
    manifest["checksums"].update({f"bm25/{f.name}": file_sum(f).model_dump() for f in folder.iterdir()})
    for name in ("manifest.json", f"manifest.{manifest['generation']}.json"):
        (ix / name).write_text(json.dumps(manifest, indent=2))


def test_an_index_saved_before_analyzers_keeps_its_cut(tmp_path, embedder):
    """Opened, searched, verified and written to again, it answers as bm25s's cut did: a CJK word inside a
    run is still not a term (its chunks were counted that way), a whole run still is, English unchanged."""
    (tmp_path / "docs").mkdir()
    for name, text in DOCS.items():
        (tmp_path / "docs" / name).write_text(text + "\n", encoding="utf-8")
    ingest([tmp_path / "docs"], tmp_path / "ix", embedder=embedder)
    ix = tmp_path / "ix"
    english_before = {q: top(ix, q) for q in ENGLISH}
    _as_saved_before_analyzers(ix)
    with Index.open(ix, read_only=True) as index:
        assert index.bm25.config.analyzer == "bm25s" and index.bm25.stored_as is not None  # served, not rebuilt
        assert index.bm25.terms(["信息检索是搜索引擎的核心技术"]) == [["信息检索是搜索引擎的核心技术"]]
    assert verify_index(ix, full=True).ok
    assert top(ix, "检索") == []
    assert top(ix, "東京") == []
    assert {q: top(ix, q) for q in ENGLISH} == english_before
    (tmp_path / "docs" / "more.txt").write_text("天气预报说明天下雨。\n", encoding="utf-8")
    ingest([tmp_path / "docs"], ix, embedder=embedder)  # written to by this code: the old cut is kept
    assert json.loads((ix / "manifest.json").read_text())["bm25"]["analyzer"] == "bm25s"
    assert top(ix, "天气") == []
    assert verify_index(ix, full=True).ok


def test_a_manifest_naming_an_unknown_analyzer_is_refused_by_name(cjk_index, tmp_path):
    import shutil

    ix = tmp_path / "ix"
    shutil.copytree(cjk_index, ix)
    manifest = json.loads((ix / "manifest.json").read_text())
    manifest["bm25"]["analyzer"] = "klingon"
    for name in ("manifest.json", f"manifest.{manifest['generation']}.json"):
        (ix / name).write_text(json.dumps(manifest, indent=2))
    with pytest.raises(ContextkitError, match="analyzer"):
        Index.open(ix, read_only=True)


ENGLISH_CORPUS = [
    "The quick brown fox jumps over the lazy dog; dogs aren't foxes.",
    "Running runners ran: e-mail me at someone@example.com about the 3rd draft (v2.1).",
    "Naïve café owners in Zürich serve crème brûlée; Москва and Αθήνα are cities too.",
    "BM25 ranks documents by term frequency, inverse document frequency and length.",
    "A a I x: single letters are dropped, numbers like 42 and 2024 are kept.",
    "Dense vectors, sparse vectors and hybrid retrieval with reciprocal rank fusion.",
]


def test_english_is_cut_and_scored_exactly_as_bm25s_does():
    """The default analyzer against bm25s's own tokenize and model: the same terms and bit-identical scores."""
    index = BM25Index()
    assert index.config.analyzer == "cjk-bigram"
    index.build(np.arange(len(ENGLISH_CORPUS)), ENGLISH_CORPUS, 0)
    cut = [list(t) for t in bm25s().tokenize(ENGLISH_CORPUS, stopwords="en", stemmer=index._stemmer(),
                                             return_ids=False, show_progress=False)]
    assert index.terms(ENGLISH_CORPUS) == cut
    model = bm25s_model(cut, index.config.k1, index.config.b, index.config.method)
    for query in ["dog fox", "running documents frequency", "café Москва", "vectors retrieval 42", "zzz"]:
        terms = [t for t in index.terms([query])[0] if t in model.vocab_dict]
        want = model.get_scores(terms) if terms else np.zeros(len(ENGLISH_CORPUS))
        assert np.array_equal(index.scores(query), np.asarray(want, dtype=np.float32)), query


@pytest.mark.parametrize("text", ENGLISH_CORPUS + ["Ελληνικά κείμενα και русский текст", "عربى نص هنا",
                                                   "ภาษาไทยไม่มีช่องว่าง", "emoji 🙂 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"])
def test_a_text_with_no_cjk_character_gives_the_terms_it_gave_before(text):
    new, old = BM25Index(), BM25Index(BM25Config(analyzer="bm25s"))
    assert new.terms([text]) == old.terms([text])


def test_cjk_bigrams_are_neither_stemmed_nor_stopped_and_latin_beside_them_is_split_off():
    index = BM25Index(BM25Config(stopwords="zh"))
    assert index.terms(["AI检索的running"]) == [["ai", "run", "检索", "索的"]]
    assert index.terms(["猫"]) == [["猫"]]  # a lone character: a unigram

"""The off-topic gate calibrated per index (``min_similarity="auto"``, the default; issue 29).

One cosine chosen on SciFact (0.3) dropped answerable questions elsewhere: on XQuAD's Wikipedia
paragraphs "Where was Halford Mackinder born?" scored 0.297 and got no evidence. How alike a question
and an unrelated passage are depends on how alike the index's passages are to each other.
"""

from __future__ import annotations

import pytest
from retrievers.topics import TOPICS

from contextkit.assembly.context_assembler import ContextAssembler
from contextkit.assembly.relevance import AUTO_MAX_SIMILARITY, background_similarity, index_min_similarity
from contextkit.index import Index
from contextkit.ingestion import ingest
from contextkit.retrievers import HybridRetriever

PARAGRAPHS = [*(TOPICS[i] for i in (0, 1, 2, 3, 4, 5, 6, 12, 14, 15)),
              "Halford Mackinder, an English geographer and politician, is seen as a founder of geopolitics. "
              "He came into the world at Gainsborough in Lincolnshire and studied at Oxford."]
#: Answerable (the last paragraph), in other words than the passage's: its best cosine is about 0.24.
PARAPHRASED = "birthplace of the heartland theory author"


@pytest.fixture(scope="module")
def broad_index(tmp_path_factory, embedder):
    root = tmp_path_factory.mktemp("broad")
    (root / "docs").mkdir()
    for i, text in enumerate(PARAGRAPHS):
        (root / "docs" / f"p{i:02d}.txt").write_text(text + "\n", encoding="utf-8")
    ingest([root / "docs"], root / "ix", embedder=embedder)
    return root / "ix"


def test_a_paraphrased_answerable_question_below_the_old_cosine_gets_its_evidence(broad_index, embedder):
    with Index.open(broad_index, read_only=True) as index:
        assembler = ContextAssembler(2000, retriever=HybridRetriever(index, embedder))
        result = assembler.assemble(PARAPHRASED)
        fixed = assembler.assemble(PARAPHRASED, min_similarity=0.3)  # the gate before: one cosine for every index
    relevance = result.report.relevance
    assert relevance is not None and relevance.best_similarity is not None
    assert relevance.best_similarity < 0.3 and fixed.report.relevance.off_topic
    assert not relevance.off_topic and relevance.min_similarity < relevance.best_similarity
    assert "Gainsborough" in result.prompt and "Gainsborough" not in fixed.prompt


def test_the_calibration_follows_the_index(broad_index):
    with Index.open(broad_index, read_only=True) as index:
        background = background_similarity(index)
        assert background is not None and 0.0 < background < 0.1  # unrelated paragraphs: little alike
        assert index_min_similarity(index) == pytest.approx(min(AUTO_MAX_SIMILARITY, 3.0 * background))
        assert background_similarity(index) == background  # measured once per generation, the same each time
    assert index_min_similarity(None) == AUTO_MAX_SIMILARITY


def test_an_index_too_small_to_measure_keeps_the_fixed_gate(tmp_path, embedder):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "one.txt").write_text(PARAGRAPHS[0] + "\n", encoding="utf-8")
    ingest([tmp_path / "docs"], tmp_path / "ix", embedder=embedder)
    with Index.open(tmp_path / "ix", read_only=True) as index:
        assert background_similarity(index) is None and index_min_similarity(index) == AUTO_MAX_SIMILARITY


#: An index on one subject: its passages are alike, so its bar stays at 0.3, and a short question about
#: one of them sits far from every passage's embedding (SQuAD's "Who was Guy's Rival?" on its Normans
#: paragraphs: 0.245, no evidence).
ONE_SUBJECT = [
    "The kingdom of Jerusalem was ruled in the 1180s by Guy of Lusignan, whose claim to the crown came through "
    "his wife Sibylla. His rival, Conrad of Montferrat, held Tyre and refused to accept him as king.",
    "The crusader army marched along the coast in the summer of 1191, taking Acre after a long siege. The "
    "crusader kings quarrelled over the spoils and the garrison of the city.",
    "Crusader castles were built on hills above the roads, with thick walls, towers and cisterns. The castle of "
    "Krak des Chevaliers held two thousand men of the crusader orders.",
    "The military orders of the crusades, the Templars and the Hospitallers, guarded pilgrims on the roads to "
    "Jerusalem and owned estates across the crusader states.",
    "Crusader ships carried pilgrims, horses and supplies from Venice and Genoa to the ports of the crusader "
    "kingdom, and the merchants of those cities won quarters in every port.",
    "The crusader states minted their own coins, copies of the Arab dinar, and traded with the Muslim cities of "
    "the interior in times of truce.",
    "After the battle of Hattin in 1187 most crusader castles fell, and the crusader kingdom was reduced to a "
    "strip of coastal towns.",
    "Crusader chronicles, written by clergy who travelled with the armies, tell of the sieges and battles of the "
    "crusades and of the quarrels of the crusader lords.",
]


def test_a_question_whose_every_word_one_passage_holds_is_not_off_topic(tmp_path, embedder):
    (tmp_path / "docs").mkdir()
    for i, text in enumerate(ONE_SUBJECT):
        (tmp_path / "docs" / f"p{i}.txt").write_text(text + "\n", encoding="utf-8")
    ingest([tmp_path / "docs"], tmp_path / "ix", embedder=embedder)
    with Index.open(tmp_path / "ix", read_only=True) as index:
        assembler = ContextAssembler(2000, retriever=HybridRetriever(index, embedder))
        asked = assembler.assemble("Who was Guy's rival?")
        cake = assembler.assemble("How do I bake a chocolate cake?")
        paraphrase = assembler.assemble("Who opposed Guy?")  # a word no passage holds: the cosine decides
    relevance = asked.report.relevance
    assert relevance.best_similarity < relevance.min_similarity == AUTO_MAX_SIMILARITY
    assert not relevance.off_topic and relevance.words_found and "Conrad of Montferrat" in asked.prompt
    assert cake.report.relevance.off_topic and not cake.report.relevance.words_found and "Conrad" not in cake.prompt
    assert paraphrase.report.relevance.off_topic and "<document" not in paraphrase.prompt

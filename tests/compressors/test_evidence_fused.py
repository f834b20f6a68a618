"""EvidenceCompressor's fused scorer and budget fill (issue 29), with the real model and tokenizer.

The prose case is our own text, written like a Wikipedia paragraph with two similar
paragraphs beside it: the shipped learned scorer (fitted on scientific abstracts)
dropped its answer sentence at 2x; BM25 over sentences keeps it.
"""

from __future__ import annotations

import pytest

from contextkit.assembly.sections import EvidenceItem
from contextkit.compressors._evidence_fuse import abstract_share, fuse, gate
from contextkit.compressors._evidence_score import Terms, bm25_scores
from contextkit.compressors.evidence import EvidenceCompressor
from contextkit.text import split_sentences

ANSWER = "The Kelso bridge is a footbridge of cast iron, assembled using bolts rather than rivets."
KELSO = (ANSWER + " It crosses the Tweed about two kilometres upstream of the town. "
         "Traffic on the bridge increased by 40% after the new road opened in 1990. "
         "The bridge was closed for repairs more than three times, with higher costs each time. "
         "In 2015 the council reported that the bridge carried more cyclists than any other crossing in the county.")
STONE = ("Most bridges in the Borders were built of local sandstone. "
         "The oldest of them date from the sixteenth century and have narrow pointed arches. "
         "Several were widened in the 1800s to take carts and, later, lorries. "
         "Stone bridges need little maintenance, which is why so many survive.")
TOWN = ("The town of Kelso lies where the Teviot joins the Tweed. "
        "Its abbey was founded in 1128 and was once one of the richest in Scotland. "
        "The market square is the largest in the Borders. "
        "Salmon fishing on the Tweed brings many visitors in the autumn.")
ABSTRACT = ("BACKGROUND Hypertension is a leading risk factor for stroke. "
            "METHODS We randomised 400 adults to drug Q or placebo for 12 weeks. "
            "RESULTS Drug Q lowered systolic pressure by 11 mmHg (95% CI 8-14; P < 0.001). "
            "CONCLUSIONS We found that drug Q significantly lowers blood pressure.")


@pytest.fixture(scope="module")
def default(embedder, cl100k) -> EvidenceCompressor:
    return EvidenceCompressor(embedder, tokenizer=cl100k)


def _items() -> list[EvidenceItem]:
    return [EvidenceItem("kelso", KELSO), EvidenceItem("stone", STONE), EvidenceItem("town", TOWN)]


def _pieces(out: EvidenceItem, separator: str = " … ") -> list[str]:
    text = out.text[:-2] if out.text.endswith(" …") and "cut_span" in out.metadata else out.text
    return text.split(separator)


class TestProse:
    def test_answer_sentence_kept_at_2x_among_similar_paragraphs(self, default):
        """The old default (learned scorer, a forced sentence per paragraph) kept other sentences."""
        out, report = default.compress(_items(), "How were the parts of the Kelso bridge joined?", target_ratio=2.0)
        assert any(ANSWER in it.text for it in out)
        assert report.output_tokens <= report.input_tokens // 2

    def test_prose_is_ranked_by_relevance_alone(self):
        """No sentence of a Wikipedia-like paragraph reads as a finding: the learned part has no say."""
        texts = [KELSO[a:b] for a, b in split_sentences(KELSO)]
        bm25, cosine = [0.0, 1.0, 3.0, 0.5, 0.2], [0.1, 0.5, 0.4, 0.3, 0.2]
        alpha = gate(abstract_share([[0.0] * 40 for _ in texts]))
        assert alpha == 0.0
        assert fuse([0.9, 0.1, 0.1, 0.1, 0.1], bm25, cosine, alpha) == fuse([0.1] * 5, bm25, cosine, alpha)

    def test_abstract_form_brings_the_learned_scorer_in(self, default, embedder, cl100k):
        feats = default.features("Does drug Q lower blood pressure?", [ABSTRACT])
        assert gate(abstract_share(feats[0][2])) == 1.0  # headings and "we found ... significantly"
        assert gate(0.1) == pytest.approx(0.25)  # between the gate's ends: a mix
        fused = fuse([0.1, 0.1, 0.2, 0.9], [1.0, 1.0, 1.0, 1.0], [0.5, 0.5, 0.5, 0.5], 0.5)
        assert max(range(4), key=fused.__getitem__) == 3
        # where the gate is fully open the fused scorer is the learned one, fill rule included
        learned = EvidenceCompressor(embedder, tokenizer=cl100k, scorer="learned")
        a, ra = default.compress([ABSTRACT], "Does drug Q lower blood pressure?", target_ratio=2.0)
        b, rb = learned.compress([ABSTRACT], "Does drug Q lower blood pressure?", target_ratio=2.0)
        assert a[0].metadata["kept_spans"] == b[0].metadata["kept_spans"]
        assert ra.details["selection"] == rb.details["selection"] == learned.selection

    def test_bm25_over_sentences_weighs_rare_terms(self):
        terms = Terms()
        sentences = [terms.tokens(t) for t in ("the bridge is old", "the bridge is iron", "a bridge in town",
                                               "nothing here")]
        scores = bm25_scores(terms.tokens("iron bridge"), sentences)
        assert scores[1] > scores[0] > 0 and scores[3] == 0.0
        assert bm25_scores(terms.tokens("iron"), []) == []


class TestBudgetFill:
    @pytest.mark.parametrize("query", ["How were the parts of the Kelso bridge joined?",
                                       "When was the abbey at Kelso founded?",
                                       "What are old bridges in the Borders built of?",
                                       "Which river runs past Kelso?", "How much did traffic increase on the bridge?"])
    def test_4x_filled_to_within_a_few_tokens_never_over(self, default, cl100k, query):
        out, report = default.compress(_items(), query, target_ratio=4.0)
        budget = report.input_tokens // 4
        assert report.output_tokens == sum(cl100k.count(it.text) for it in out) <= budget
        assert report.output_tokens >= budget - 4, (budget, report.output_tokens)  # whole sentences: up to 9 short

    @pytest.mark.parametrize("cap", [6, 13, 29, 47, 71])
    def test_max_tokens_filled_never_over_and_verbatim(self, default, cl100k, cap):
        originals = {it.id: it.text for it in _items()}
        out, report = default.compress(_items(), "Which river runs past Kelso?", max_tokens=cap)
        assert report.output_tokens == sum(cl100k.count(it.text) for it in out) <= cap
        assert report.output_tokens >= cap - 4
        for it in out:
            text = originals[it.id]
            position = 0
            for piece in _pieces(it):  # every piece is the original's text, in its order
                position = text.index(piece, position) + len(piece)
            if "cut_span" in it.metadata:
                a, b = it.metadata["cut_span"]
                sentence = next(text[s:e] for s, e in split_sentences(text) if s == a)
                assert sentence.startswith(text[a:b]) and len(text[a:b]) < len(sentence)
                assert text[a:b] in it.text and it.start is None

    def test_whole_sentences_only_when_cut_is_off(self, embedder, cl100k):
        comp = EvidenceCompressor(embedder, tokenizer=cl100k, cut=False)
        out, _ = comp.compress(_items(), "How were the parts of the Kelso bridge joined?", target_ratio=4.0)
        whole = {s for it in _items() for s in (it.text[a:b] for a, b in split_sentences(it.text))}
        assert all(piece in whole for it in out for piece in _pieces(it))
        assert all("cut_span" not in it.metadata for it in out)

    def test_cut_sentence_after_a_kept_one_reads_on(self, cl100k):
        """A cut sentence right after a kept one continues it verbatim; the mark ends it."""
        text = "The answer is forty two. Then more words follow here about other unrelated things entirely."
        comp = EvidenceCompressor(None, tokenizer=cl100k, scorer="linear", weight_embedding=0.0)
        cap = cl100k.count("The answer is forty two.") + 7
        (res,), report = comp.compress([EvidenceItem("x", text)], "answer forty two", max_tokens=cap)
        assert res.text.endswith(" …") and text.startswith(res.text[:-2])
        assert len(res.text) > len("The answer is forty two. Then more words") and report.output_tokens <= cap
        assert res.metadata["kept_spans"] == [list(split_sentences(text)[0])]
        assert res.metadata["cut_span"][0] == split_sentences(text)[1][0]

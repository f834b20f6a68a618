"""EvidenceCompressor: sentence splitting, query-aware pruning, budgets, dedup, configuration.

Relevance tests use the real model and tokenizer (session fixtures); budget
properties run with the lexical score alone (no model call), since what they check
does not depend on how sentences are scored.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextkit.assembly.sections import EvidenceItem
from contextkit.compressors._evidence_features import FEATURES, sentence_features
from contextkit.compressors._evidence_score import load_scorer
from contextkit.compressors.base import CompressionReport
from contextkit.compressors.evidence import EvidenceCompressor, lexical_scores
from contextkit.text import split_sentences


def sentences(text: str) -> list[str]:
    return [text[a:b] for a, b in split_sentences(text)]


# Our own words, written like retrieved passages.
WATER = (
    "Water is a chemical compound of hydrogen and oxygen. It covers about 71% of the Earth's surface. "
    "At sea level, pure water boils at 100 degrees Celsius. Most of the planet's water is in the oceans. "
    "Ice floats because it is less dense than liquid water. Rivers carry sediment from mountains to the sea."
)
BREAD = (
    "Knead the dough for ten minutes until it is smooth. Let it rise in a warm place for an hour. "
    "Shape the loaf and bake it at 220 degrees for thirty minutes. Cool the bread on a rack before slicing."
)
PARIS = (
    "Paris is the capital of France. The city has about two million inhabitants. "
    "The Eiffel Tower was completed in 1889 for the World's Fair. The Seine flows through the centre. "
    "Its museums include the Louvre, the most visited art museum in the world."
)


@pytest.fixture(scope="module")
def compressor(embedder, cl100k) -> EvidenceCompressor:
    return EvidenceCompressor(embedder, tokenizer=cl100k)


@pytest.fixture(scope="module")
def lexical(cl100k) -> EvidenceCompressor:
    """No model call: the budget logic is the same whatever the scores."""
    return EvidenceCompressor(None, tokenizer=cl100k, scorer="linear", weight_embedding=0.0, weight_lexical=1.0)


class TestSplitSentences:
    def test_plain_sentences_and_offsets(self):
        text = "  First one. Second one!  Third one?\tFourth."
        spans = split_sentences(text)
        assert [text[a:b] for a, b in spans] == ["First one.", "Second one!", "Third one?", "Fourth."]
        assert all(a < b for a, b in spans) and all(b1 <= a2 for (_, b1), (a2, _) in zip(spans, spans[1:]))

    def test_abbreviations_do_not_end_sentences(self):
        text = ("Dr. Smith et al. (2010) found, e.g. in mice, an effect vs. controls (Fig. 2). "
                "See Eq. 3 and No. 5 of the series, i.e. the last. Smith et al. The next one starts here.")
        assert sentences(text) == [
            "Dr. Smith et al. (2010) found, e.g. in mice, an effect vs. controls (Fig. 2).",
            "See Eq. 3 and No. 5 of the series, i.e. the last.",
            "Smith et al.",
            "The next one starts here.",
        ]

    def test_decimals_and_numbers(self):
        text = "The ratio was 3.5 (p < .001) at 2.0 mg. The dose was 1.25 mg/kg. It ended at 7. Then we stopped."
        assert sentences(text) == ["The ratio was 3.5 (p < .001) at 2.0 mg.", "The dose was 1.25 mg/kg.",
                                   "It ended at 7.", "Then we stopped."]

    def test_initials_and_one_letter_names(self):
        assert sentences("Written by J. R. R. Tolkien in 1954. John F. Kennedy read it.") == [
            "Written by J. R. R. Tolkien in 1954.", "John F. Kennedy read it."]
        assert sentences("Patients had hepatitis C. Intravenous drug use was common.") == [
            "Patients had hepatitis C.", "Intravenous drug use was common."]
        assert sentences("Infection with P. falciparum persists. The U.S. Army tested it. It works in the U.S. "
                         "The end.") == ["Infection with P. falciparum persists.", "The U.S. Army tested it.",
                                         "It works in the U.S.", "The end."]

    def test_lower_case_word_continues_but_gene_names_open(self):
        assert sentences("Levels rose. mRNA levels fell. p53 was stable. approx. the same.") == [
            "Levels rose.", "mRNA levels fell.", "p53 was stable. approx. the same."]

    def test_quotes_brackets_ellipsis(self):
        assert sentences('He said "stop." Then he left (as planned.) Later... It rained.') == [
            'He said "stop."', "Then he left (as planned.)", "Later...", "It rained."]

    def test_newlines_paragraphs_headings_lists(self):
        text = ("Introduction\nThis paragraph is hard wrapped by an editor at a fixed width so the\n"
                "sentence goes on over the line break. A second sentence.\n\nNext paragraph without a stop\n\n"
                "Steps:\n- mix the flour\n- add water\n1. first\n2. second")
        assert sentences(text) == [
            "Introduction",
            "This paragraph is hard wrapped by an editor at a fixed width so the\n"
            "sentence goes on over the line break.",
            "A second sentence.",
            "Next paragraph without a stop",
            "Steps:", "- mix the flour", "- add water", "1. first", "2. second"]

    def test_cjk_and_edge_cases(self):
        assert sentences("第一句。第二句！第三句？") == ["第一句。", "第二句！", "第三句？"]
        assert split_sentences("") == [] and split_sentences(" \n\t ") == []
        assert sentences("No terminal punctuation") == ["No terminal punctuation"]

    @settings(max_examples=200, deadline=None)
    @given(st.text(alphabet=st.sampled_from(list("ab AZ.!?\n\t3'\")(é。")), max_size=120))
    def test_spans_cover_every_non_space_character_once(self, text):
        spans = split_sentences(text)
        assert all(0 <= a < b <= len(text) for a, b in spans)
        assert all(b1 <= a2 for (_, b1), (a2, _) in zip(spans, spans[1:]))
        for a, b in spans:
            assert text[a:b] == text[a:b].strip()
        joined = "".join(text[a:b] for a, b in spans)
        assert "".join(joined.split()) == "".join(text.split())


class TestLexicalScores:
    def test_rare_query_terms_weigh_more(self):
        query = {"water", "boil", "100"}
        pool = [{"water", "oxygen"}, {"water", "boil", "100"}, {"water", "ocean"}, {"bread"}]
        scores = lexical_scores(query, pool)
        assert scores[1] == pytest.approx(1.0)
        assert scores[3] == 0.0
        assert scores[0] == scores[2] < 0.3  # "water" is everywhere: it says little
        assert lexical_scores({"absent"}, pool) == [0.0] * 4


class TestEvidenceCompressor:
    def test_answer_kept_over_unrelated_sentences(self, compressor, cl100k):
        query = "At what temperature does water boil at sea level?"
        items = [EvidenceItem("w", WATER, source="water.md", score=0.9, doc_id="water"),
                 EvidenceItem("b", BREAD, source="bread.md", score=0.4, doc_id="bread")]
        out, report = compressor.compress(items, query, target_ratio=3.0)
        text = {it.id: it.text for it in out}
        assert "At sea level, pure water boils at 100 degrees Celsius." in text["w"]
        assert "b" not in text  # the unrelated passage gets none of the budget: one ranking over all sentences
        assert report.output_tokens <= report.input_tokens // 3
        assert compressor.embedder.last_report.texts == report.details["sentences_in"] + 1  # one batched call
        assert isinstance(report, CompressionReport) and report.compressor == "evidence"

    def test_whole_sentences_in_order_with_metadata(self, compressor, cl100k):
        item = EvidenceItem("p", PARIS, source="paris.txt", score=0.7, doc_id="paris", start=100,
                            end=100 + len(PARIS), metadata={"lang": "en"})
        out, _ = compressor.compress([item], "When was the Eiffel Tower built, and what museum is in Paris?",
                                     target_ratio=2.0)
        (res,) = out
        spans = res.metadata["kept_spans"]
        assert spans == sorted(spans) and len(spans) == res.metadata["sentences_kept"] < 5
        pieces = [PARIS[a:b] for a, b in spans]
        assert all(p in sentences(PARIS) for p in pieces)
        position = 0
        for piece in pieces:  # each kept sentence is in the output, in the original order
            position = res.text.index(piece, position) + len(piece)
        assert "Eiffel Tower was completed in 1889" in res.text
        assert (res.id, res.source, res.score, res.doc_id) == ("p", "paris.txt", 0.7, "paris")
        assert res.metadata["lang"] == "en" and res.metadata["compressed_from"] == cl100k.count(PARIS)
        assert res.token_count == cl100k.count(res.text) and res.tokenizer == "cl100k_base"
        contiguous = PARIS[spans[0][0]:spans[-1][1]] == res.text
        if contiguous:
            assert (res.start, res.end) == (100 + spans[0][0], 100 + spans[-1][1])
        else:
            assert res.start is None and res.end is None and " … " in res.text

    def test_offsets_kept_for_one_contiguous_run(self, lexical):
        text = "Alpha beta gamma. The answer is forty two. Delta epsilon zeta eta theta iota kappa lambda mu."
        item = EvidenceItem("x", text, doc_id="d", start=10, end=10 + len(text))
        (res,), _ = lexical.compress([item], "What is the answer?", max_tokens=9)
        assert res.text == "The answer is forty two."
        assert text[res.start - 10:res.end - 10] == res.text

    def test_near_and_exact_duplicates_removed(self, lexical):
        copy = WATER + " Extra line at the end of the copy."  # 6 of 7 sentences shared
        items = [EvidenceItem("a", WATER), EvidenceItem("b", copy), EvidenceItem("c", WATER.upper()),
                 EvidenceItem("d", PARIS)]
        out, report = lexical.compress(items, "water boiling point", target_ratio=1.0)
        assert [it.id for it in out] == ["a", "d"]
        assert report.removed["near_duplicate"] == 1 and report.removed["duplicate"] == 1
        assert report.details["dropped"] == {"b": "near duplicate of a", "c": "duplicate of a"}
        assert out[0].text == WATER  # ratio 1: nothing to prune

    def test_repeated_sentence_kept_once(self, lexical):
        shared = "The boiling point of water is 100 degrees Celsius at sea level."
        items = [EvidenceItem("a", f"{shared} Rain falls."), EvidenceItem("b", f"Snow melts. {shared} Fog lifts.")]
        out, report = lexical.compress(items, "boiling point of water", target_ratio=1.2)
        assert sum(it.text.count(shared) for it in out) == 1
        assert report.details["repeated_sentences"] == 1

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(cap=st.integers(min_value=0, max_value=260), min_sentences=st.integers(min_value=0, max_value=2))
    def test_max_tokens_never_exceeded(self, cl100k, cap, min_sentences):
        comp = EvidenceCompressor(None, tokenizer=cl100k, scorer="linear", weight_embedding=0.0, weight_lexical=1.0,
                                  min_sentences=min_sentences)
        items = [EvidenceItem("w", WATER), EvidenceItem("b", BREAD), EvidenceItem("p", PARIS)]
        out, report = comp.compress(items, "water temperature Paris bread", max_tokens=cap)
        total = sum(cl100k.count(it.text) for it in out)
        assert total == report.output_tokens <= cap
        for it in out:
            assert it.metadata["sentences_kept"] >= min(min_sentences, it.metadata["sentences_total"])
            original = next(i.text for i in items if i.id == it.id)
            assert all(original[a:b] in it.text for a, b in it.metadata["kept_spans"])
        assert report.items_out == len(out)
        assert len(out) + report.removed["over_budget"] == 3

    @pytest.mark.parametrize("ratio", [1.5, 2.0, 3.0, 4.0])
    def test_target_ratio_met(self, lexical, cl100k, ratio):
        items = [EvidenceItem("w", WATER), EvidenceItem("b", BREAD), EvidenceItem("p", PARIS)]
        out, report = lexical.compress(items, "water boils at sea level; bread; Paris museums", target_ratio=ratio)
        total_in = sum(cl100k.count(it.text) for it in items)
        total_out = sum(cl100k.count(it.text) for it in out)
        assert (report.input_tokens, report.output_tokens) == (total_in, total_out)
        assert total_out <= total_in / ratio  # a cap ...
        assert total_out >= total_in / ratio - 25  # ... filled to within about one sentence

    def test_tight_budget_drops_weakest_items(self, lexical):
        items = [EvidenceItem("w", WATER), EvidenceItem("b", BREAD)]
        out, report = lexical.compress(items, "how long to knead bread dough", max_tokens=14)
        assert [it.id for it in out] == ["b"] and "Knead the dough" in out[0].text
        assert report.removed["over_budget"] == 1 and report.fallback and "dropped" in report.fallback
        out, report = lexical.compress(items, "how long to knead bread dough", max_tokens=0)
        assert out == [] and report.removed["over_budget"] == 2 and report.output_tokens == 0

    def test_irrelevant_item_dropped_with_min_relevance(self, embedder, cl100k):
        comp = EvidenceCompressor(embedder, tokenizer=cl100k, min_relevance=0.25)
        items = [EvidenceItem("w", WATER), EvidenceItem("b", BREAD)]
        out, report = comp.compress(items, "At what temperature does water boil?", target_ratio=2.0)
        assert [it.id for it in out] == ["w"]
        assert report.removed["irrelevant"] == 1 and report.details["dropped"]["b"].startswith("irrelevant")

    def test_keep_first_and_min_sentences(self, lexical, cl100k):
        comp = EvidenceCompressor(None, tokenizer=cl100k, scorer="linear", weight_embedding=0.0, weight_lexical=1.0,
                                  keep_first=True, min_sentences=2)
        (res,), _ = comp.compress([EvidenceItem("p", PARIS)], "Louvre art museum", target_ratio=1.5)
        assert res.text.startswith("Paris is the capital of France.") and "Louvre" in res.text
        assert res.metadata["sentences_kept"] >= 2

    def test_position_weight_favours_endings_or_the_lead(self, cl100k):
        text = "Alpha one here. Beta two here. Gamma three here. Delta four here."
        for weight, expected in ((0.5, "Delta four here."), (-0.5, "Alpha one here.")):
            comp = EvidenceCompressor(None, tokenizer=cl100k, scorer="linear", weight_embedding=0.0,
                                      position_weight=weight)
            (res,), _ = comp.compress([EvidenceItem("x", text)], "unrelated query words", max_tokens=5)
            assert res.text == expected

    def test_item_repeating_kept_sentences_is_dropped(self, lexical):
        shared = "The boiling point of water is 100 degrees Celsius at sea level."
        items = [EvidenceItem("a", f"{shared} Rain falls from clouds."), EvidenceItem("b", shared)]
        out, report = lexical.compress(items, "boiling point of water", target_ratio=1.0)
        assert [it.id for it in out] == ["a"] and report.removed["duplicate"] == 1
        assert report.details["dropped"]["b"].startswith("duplicate")

    def test_call_values_override_constructor(self, cl100k):
        comp = EvidenceCompressor(None, tokenizer=cl100k, scorer="linear", weight_embedding=0.0, target_ratio=1.0)
        items = [EvidenceItem("w", WATER)]
        _, report = comp.compress(items, "water")
        assert report.details["budget_mode"] == "target_ratio" and report.output_tokens == report.input_tokens
        _, report = comp.compress(items, "water", max_tokens=30)
        assert report.details["budget_mode"] == "max_tokens" and report.output_tokens <= 30
        _, report = comp.compress(items, "water", target_ratio=4.0)
        assert report.output_tokens <= report.input_tokens / 4
        with pytest.raises(ValueError, match="not both"):
            comp.compress(items, "water", target_ratio=2.0, max_tokens=10)

    def test_bad_input(self, lexical, cl100k):
        with pytest.raises(ValueError, match="needs a query"):
            lexical.compress([EvidenceItem("w", WATER)], "", target_ratio=2.0)
        with pytest.raises(ValueError, match="needs a query"):
            lexical.compress([EvidenceItem("w", WATER)], "   \n", target_ratio=2.0)
        with pytest.raises(ValueError, match="needs a budget"):
            EvidenceCompressor(None, tokenizer=cl100k).compress([EvidenceItem("w", WATER)], "water")
        with pytest.raises(ValueError, match=">= 1.0"):
            lexical.compress([EvidenceItem("w", WATER)], "water", target_ratio=0.5)
        with pytest.raises(ValueError, match="non-negative"):
            lexical.compress([EvidenceItem("w", WATER)], "water", max_tokens=-1)
        with pytest.raises(ValueError, match="not both"):
            EvidenceCompressor(None, target_ratio=2.0, max_tokens=10)
        with pytest.raises(ValueError, match="cannot both be 0"):
            EvidenceCompressor(None, weight_embedding=0.0, weight_lexical=0.0)

    def test_empty_items_and_empty_texts(self, lexical):
        out, report = lexical.compress([], "water", target_ratio=2.0)
        assert out == [] and report.items_in == 0 and report.output_tokens == 0
        out, report = lexical.compress([EvidenceItem("e", "  \n "), "Water boils at 100 C. Ice melts."], "water",
                                       target_ratio=1.0)
        assert [it.id for it in out] == ["item-1"]  # plain strings are accepted
        assert report.removed["empty"] == 1 and report.details["dropped"]["e"].startswith("empty")

    def test_config_round_trip(self, embedder, cl100k):
        comp = EvidenceCompressor(embedder, tokenizer=cl100k, target_ratio=2.5, weight_embedding=0.6,
                                  weight_lexical=0.4, keep_first=True, dedup_threshold=None, min_sentences=2,
                                  min_relevance=0.1)
        data = comp.to_dict()
        assert data["model"] == embedder.model_name and data["tokenizer"] == "cl100k_base"
        again = EvidenceCompressor.from_dict(data)
        assert again.to_dict() == data
        assert again.embedder.model_name == embedder.model_name  # built from the name, lazily
        with pytest.raises(ValueError, match="unknown option .bogus."):
            EvidenceCompressor.from_dict({**data, "bogus": 1})


# Our own words, written like a structured abstract.
ABSTRACT = (
    "BACKGROUND Hypertension is a leading risk factor for stroke. "
    "Drug Q lowers blood pressure in animal models. "
    "METHODS We randomly assigned 400 adults to drug Q or placebo for 12 weeks. "
    "Blood pressure was measured at every visit. "
    "RESULTS Systolic blood pressure fell by 12 mmHg more with drug Q than with placebo (p < 0.001). "
    "CONCLUSIONS Drug Q lowers blood pressure in adults."
)


class TestLearnedScorer:
    def test_shipped_weights_load_and_name_known_features(self):
        scorer = load_scorer()
        assert scorer.features and set(scorer.features) <= set(FEATURES)
        assert len(scorer.weights) == len(scorer.mean) == len(scorer.scale) == len(scorer.features)
        assert scorer.source.endswith("evidence_scorer.json")

    def test_features_see_sections_position_and_cues(self):
        texts = [ABSTRACT[a:b] for a, b in split_sentences(ABSTRACT)]
        rows = sentence_features(texts, [(0, len(texts))], [0.1 * i for i in range(len(texts))], [0.0] * len(texts))
        col = {name: [row[FEATURES.index(name)] for row in rows] for name in FEATURES}
        assert len(rows) == len(texts) == 6 and all(len(r) == len(FEATURES) for r in rows)
        assert col["sec_background"][:2] == [1.0, 1.0] and col["sec_methods"][2:4] == [1.0, 1.0]
        assert col["sec_results"][4] == 1.0 and col["sec_conclusion"][5] == 1.0
        assert col["heading"] == [1.0, 0.0, 1.0, 0.0, 1.0, 1.0]
        assert col["stats"][4] > 0 and col["stats"][0] == 0
        assert col["pos"][0] == 0.0 and col["pos"][-1] == 1.0 and col["last"][-1] == 1.0
        assert col["emb_gap"][-1] == 0.0 and col["emb_gap"][0] < 0

    def test_features_of_compress_match(self, embedder, cl100k):
        comp = EvidenceCompressor(embedder, tokenizer=cl100k)
        ((item, spans, rows),) = comp.features("Does drug Q lower blood pressure?", [ABSTRACT])
        assert spans == split_sentences(ABSTRACT) and len(rows) == len(spans)
        assert all(-1.0 <= r[FEATURES.index("emb")] <= 1.0 for r in rows)

    def test_weights_file_is_used(self, tmp_path, embedder, cl100k):
        """A hand-written file that only rewards the first sentence keeps the lead."""
        names = ["first", "lex"]
        path = tmp_path / "lead.json"
        path.write_text(json.dumps({"format": "contextkit.evidence_scorer", "version": 1, "features": names,
                                    "weights": [5.0, 0.0], "mean": [0.0, 0.0], "scale": [1.0, 1.0], "bias": 0.0}))
        comp = EvidenceCompressor(embedder, tokenizer=cl100k, weights=str(path), scorer="learned")
        (res,), report = comp.compress([ABSTRACT], "stroke risk", max_tokens=14)
        assert res.text == "BACKGROUND Hypertension is a leading risk factor for stroke."
        assert report.details["scorer"] == "learned" and comp.to_dict()["weights"] == str(path)

    @pytest.mark.parametrize("content, reason", [
        (None, "no such file"), ("{not json", "not JSON"), ('{"format": "other"}', "not a contextkit"),
        ('{"format": "contextkit.evidence_scorer", "version": 9}', "version 9"),
        ('{"format": "contextkit.evidence_scorer", "version": 1, "features": ["bogus"], "weights": [1], '
         '"mean": [0], "scale": [1], "bias": 0}', "unknown features"),
        ('{"format": "contextkit.evidence_scorer", "version": 1, "features": ["emb"], "weights": [1, 2], '
         '"mean": [0], "scale": [1], "bias": 0}', "one positive-scale number"),
        ('{"format": "contextkit.evidence_scorer", "version": 1, "features": ["emb"], "weights": ["x"], '
         '"mean": [0], "scale": [1], "bias": 0}', "non-numeric"),
    ])
    def test_bad_weights_file_named_with_reason(self, tmp_path, cl100k, content, reason):
        path = tmp_path / "w.json"
        if content is not None:
            path.write_text(content)
        with pytest.raises(ValueError, match=reason) as err:
            EvidenceCompressor(None, tokenizer=cl100k, weights=str(path))
        assert str(path) in str(err.value)

    def test_auto_selection_follows_the_weights_file(self, tmp_path, embedder, cl100k):
        assert EvidenceCompressor(embedder, tokenizer=cl100k, scorer="learned").selection == load_scorer().selection
        assert EvidenceCompressor(None, tokenizer=cl100k, scorer="linear").selection == "score"
        assert EvidenceCompressor(None, tokenizer=cl100k).selection == "score"  # the fused default
        data = {**load_scorer().to_dict(), "selection": "score"}
        path = tmp_path / "w.json"
        path.write_text(json.dumps(data))
        comp = EvidenceCompressor(embedder, tokenizer=cl100k, weights=str(path), scorer="learned")
        assert comp.selection == "score"
        assert EvidenceCompressor(embedder, tokenizer=cl100k, weights=str(path), scorer="learned",
                                  selection="density").selection == "density"
        _, report = comp.compress([ABSTRACT], "Does drug Q lower blood pressure?", target_ratio=2.0)
        assert report.details["selection"] == "score"

    def test_density_selection_prefers_short_sentences_at_equal_score(self, cl100k):
        text = ("Water boils at one hundred degrees at sea level, as every cook who has ever waited for a pot "
                "on a stove in a kitchen knows. Water boils at 100 C.")
        by_score = EvidenceCompressor(None, tokenizer=cl100k, scorer="linear", weight_embedding=0.0, cut=False)
        by_density = EvidenceCompressor(None, tokenizer=cl100k, scorer="linear", weight_embedding=0.0,
                                        selection="density", min_sentences=0, cut=False)
        (a,), _ = by_score.compress([text], "water boils", max_tokens=30)
        (b,), _ = by_density.compress([text], "water boils", max_tokens=30)
        assert a.metadata["kept_spans"] == [list(split_sentences(text)[0])]  # ties go to the first
        assert b.text == "Water boils at 100 C."


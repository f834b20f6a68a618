"""The compressors' common shape: ``compress(items, query=None, **overrides)``, ``.report``, to_dict/from_dict."""

from __future__ import annotations

import inspect
import warnings

import pytest
from fakes import ScriptedLLM

from contextkit.assembly.sections import EvidenceItem
from contextkit.compressors.base import CompressionReport, Compressor
from contextkit.compressors.evidence import EvidenceCompressor, EvidenceResult
from contextkit.compressors.history import HistorySummarizer
from contextkit.compressors.llm_history import LLMHistorySummarizer
from contextkit.records import Message

TURNS = [Message("user", "My name is Ines and my budget is 1800 euros."), Message("assistant", "Noted, Ines."),
         Message("user", "I take 2.5 mg of it twice a day."), Message("assistant", "Thanks, that is noted too.")]
PASSAGES = ["Water boils at 100 degrees Celsius at sea level. Bread needs flour. Paris is in France.",
            "Ice floats on water. The Seine flows through Paris."]


def _compressors(cl100k) -> list[Compressor]:
    return [
        HistorySummarizer(cl100k, keep_last=1, summary_max_tokens=64),
        LLMHistorySummarizer(ScriptedLLM(script=["Ines has a budget of 1800 euros."]), keep_last=1,
                             summary_max_tokens=64, tokenizer=cl100k),
        EvidenceCompressor(None, tokenizer=cl100k, scorer="linear", weight_embedding=0.0, weight_lexical=1.0,
                           max_tokens=20),
    ]


def _items(compressor: Compressor) -> list:
    return PASSAGES if isinstance(compressor, EvidenceCompressor) else TURNS


def _rebuild(compressor: Compressor) -> Compressor:
    data = compressor.to_dict()
    if isinstance(compressor, LLMHistorySummarizer):
        return type(compressor).from_dict(data, llm=compressor.llm)
    return type(compressor).from_dict(data)


class TestCommonShape:
    def test_every_compressor_derives_from_the_base(self, cl100k):
        assert all(isinstance(c, Compressor) for c in _compressors(cl100k))
        with pytest.raises(TypeError):
            Compressor()  # abstract

    def test_compress_takes_items_first_then_query(self, cl100k):
        for c in _compressors(cl100k):
            params = list(inspect.signature(c.compress).parameters.values())
            assert [p.name for p in params[:2]] == ["items", "query"], type(c).__name__
            assert params[1].default is None
            assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[2:]), type(c).__name__

    def test_result_carries_a_report(self, cl100k):
        for c in _compressors(cl100k):
            result = c.compress(_items(c), "What is the budget of water?")
            assert isinstance(result.report, CompressionReport), type(c).__name__
            assert result.report.compressor == c.name
            assert result.report.items_in == len(_items(c))

    def test_to_dict_has_type_and_round_trips(self, cl100k):
        for c in _compressors(cl100k):
            data = c.to_dict()
            assert data["type"] == type(c).__name__
            assert _rebuild(c).to_dict() == data, type(c).__name__

    def test_from_dict_refuses_another_compressors_settings(self, cl100k):
        history, _, evidence = _compressors(cl100k)
        with pytest.raises(ValueError, match="EvidenceCompressor"):
            HistorySummarizer.from_dict(evidence.to_dict())
        with pytest.raises(ValueError, match="HistorySummarizer"):
            EvidenceCompressor.from_dict(history.to_dict())

    def test_llm_from_dict_needs_the_llm(self, cl100k):
        _, llm_history, _ = _compressors(cl100k)
        with pytest.raises(TypeError, match="llm="):
            LLMHistorySummarizer.from_dict(llm_history.to_dict())

    def test_call_overrides_the_constructor(self, cl100k):
        history, llm_history, evidence = _compressors(cl100k)
        assert len(history.compress(TURNS, keep_last=3).recent) == 3
        assert len(llm_history.compress(TURNS, keep_last=2).recent) == 2
        assert evidence.compress(PASSAGES, "water", max_tokens=8).report.details["max_tokens"] == 8


class TestEvidenceCallOrder:
    def test_result_unpacks_and_has_names(self, cl100k):
        _, _, evidence = _compressors(cl100k)
        result = evidence.compress(PASSAGES, "water")
        assert isinstance(result, EvidenceResult)
        items, report = result
        assert items == result.items and report is result.report
        assert all(isinstance(it, EvidenceItem) for it in items)

    def test_old_order_still_works_with_a_warning(self, cl100k):
        _, _, evidence = _compressors(cl100k)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            new = evidence.compress(PASSAGES, "boiling water")
        with pytest.warns(DeprecationWarning, match=r"compress\(items, query\)"):
            old = evidence.compress("boiling water", PASSAGES)
        assert [it.text for it in old.items] == [it.text for it in new.items]
        assert old.report.removed == new.report.removed

    def test_one_string_as_items_is_refused(self, cl100k):
        _, _, evidence = _compressors(cl100k)
        with pytest.raises(TypeError, match="list of passages"):
            evidence.compress("just one string", "query")

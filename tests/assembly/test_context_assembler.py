"""``ContextAssembler``: retrieval, history, redaction, compression and its config, end to end."""

from __future__ import annotations

import pytest

from assembly.assembly_samples import _wrapped
from contextkit.assembly.context_assembler import ContextAssembler, HistoryFileError, load_history
from contextkit.records import Message


class TestContextAssembler:
    def test_with_a_real_index(self, tmp_path, small_corpus, embedder, cl100k):
        from contextkit.index import Index
        from contextkit.ingestion import ingest
        from contextkit.retrievers import HybridRetriever

        ingest([small_corpus], tmp_path / "ix", embedder=embedder)
        with Index.open(tmp_path / "ix", read_only=True) as index:
            assembler = ContextAssembler(400, retriever=HybridRetriever(index, embedder))
            prompt, report = assembler.assemble(
                "How does FAISS keep ids?", instructions="Cite the document id.",
                history=[{"role": "user", "content": "Hello"}, Message("assistant", "Hi. Ask away.")])
        assert cl100k.count(prompt) == report.tokens <= 400
        root = _wrapped(prompt)
        tight = any(n.startswith("tight budget") for n in report.notes)  # instructions once when tight (issue 29)
        assert [c.tag for c in root] == ["instructions", "evidence", "history", "question", *(["reminder"] * (not tight))]
        assert "IndexIDMap2" in root.find("evidence").findtext("document")

    def test_config_round_trip_and_overrides(self):
        a = ContextAssembler("gpt-4o-mini", format="markdown", min_score=0.1)
        b = ContextAssembler.from_dict(a.to_dict())
        assert b.to_dict() == a.to_dict()
        prompt, report = b.assemble("Why?", evidence=["Because. It is so."], format="xml")
        assert prompt.startswith("<evidence>") and report.format == "xml"
        with pytest.raises(ValueError):
            b.assemble("Why?", evidence=["x"], no_such_option=1)

    def test_redaction_of_evidence_history_and_question(self):
        evidence = ["Contact ines.silva@example.org, card 4111 1111 1111 1111.", "Nothing personal here."]
        prompt, report = ContextAssembler(2_000, redact=True).assemble(
            "Is ines.silva@example.org on file?", instructions="Write to a@b.co if unsure.", evidence=evidence,
            history=[{"role": "user", "content": "My number is +44 20 7946 0958."}])
        assert "example.org" not in prompt and "4111" not in prompt and "7946" not in prompt
        assert prompt.count("&lt;EMAIL_1>") == 2  # the same address, the same placeholder
        assert "a@b.co" in prompt  # instructions are ours, not masked
        pii = next(c for c in report.compression if c.compressor == "pii_redactor")
        assert pii.removed == {"EMAIL": 2, "PHONE": 1, "CARD": 1}

    def test_history_file_errors_name_the_line(self, tmp_path):
        good = tmp_path / "h.jsonl"
        good.write_text('{"role": "user", "content": "hi"}\n\n{"role": "assistant", "content": "yo"}\n')
        assert [m.role for m in load_history(good)] == ["user", "assistant"]
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"role": "user", "content": "hi"}\nnot json\n')
        with pytest.raises(HistoryFileError, match=r"bad.jsonl:2: not valid JSON"):
            load_history(bad)
        norole = tmp_path / "norole.jsonl"
        norole.write_text('{"content": "hi"}\n')
        with pytest.raises(HistoryFileError, match=r"norole.jsonl:1"):
            load_history(norole)
        binary = tmp_path / "bin.jsonl"
        binary.write_bytes(b'{"role": "user", "content": "\xff"}\n')
        with pytest.raises(HistoryFileError, match="UTF-8"):
            load_history(binary)


def test_assembler_prunes_evidence_when_asked(embedder, cl100k):
    from contextkit.compressors.evidence import EvidenceCompressor

    passages = [
        "FAISS searches dense vectors by inner product. The weather was mild that spring. "
        "An IndexIDMap2 keeps the caller's ids so vectors can be removed. Lunch was served at noon.",
        "BM25 ranks documents by term frequency. The office moved to a new building in May.",
    ]
    assembler = ContextAssembler(2_000, compress_evidence=2.0, evidence_compressor=EvidenceCompressor(embedder))
    prompt, report = assembler.assemble("How does FAISS keep ids for removal?", evidence=passages)
    assert "IndexIDMap2 keeps the caller's ids" in prompt and "Lunch was served" not in prompt
    pruned = report.compression[0]
    assert pruned.compressor == "evidence" and pruned.output_tokens < pruned.input_tokens
    assert cl100k.count(prompt) == report.tokens

"""``contextkit assemble``: relevance-gated filling, small budgets, chat messages, tool output, usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contextkit.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def index(tmp_path_factory, embedder) -> Path:
    from contextkit.ingestion import ingest

    root = tmp_path_factory.mktemp("assemble_cli")
    corpus = root / "corpus"
    corpus.mkdir()
    (corpus / "faiss.md").write_text(
        "# FAISS\n\nFAISS searches dense vectors by inner product or L2 distance. An IndexIDMap2 keeps the "
        "caller's ids so vectors can be removed later. IVF indexes cluster the vectors first.\n", encoding="utf-8")
    (corpus / "bm25.txt").write_text(
        "BM25 ranks documents by term frequency and inverse document frequency, with length normalisation. "
        "Its parameters k1 and b control saturation and length.\n", encoding="utf-8")
    (corpus / "bread.rst").write_text(
        "Bread\n=====\n\nKnead the dough for ten minutes, then let it rise until doubled in size.\n", encoding="utf-8")
    ingest([corpus], root / "ix", embedder=embedder)
    return root / "ix"


def _run(index: Path, question: str, *args: str):
    return runner.invoke(app, ["assemble", question, "--index", str(index), *args])


class TestRelevance:
    def test_an_off_topic_question_gets_a_small_prompt_and_a_warning(self, index, tmp_path):
        out = tmp_path / "p.txt"
        result = _run(index, "Who won the football World Cup in 2014?", "--budget", "4000", "--out", str(out))
        assert result.exit_code == 0, result.output
        assert "warning:" in result.stderr and "little that bears on the question" in result.stderr
        assert "<document" not in out.read_text(encoding="utf-8")
        strict = _run(index, "Who won the football World Cup in 2014?", "--budget", "4000", "--require-evidence",
                      "--out", str(tmp_path / "q.txt"))
        assert strict.exit_code == 1 and not (tmp_path / "q.txt").exists()

    def test_fill_budget_and_min_score(self, index, tmp_path):
        rep = tmp_path / "r.json"
        full = _run(index, "How does FAISS search vectors?", "--budget", "4000", "--fill", "budget", "-q",
                    "--report", str(rep))
        assert full.exit_code == 0, full.output
        budget_items = [i for i in json.loads(rep.read_text())["items"] if i["status"] == "included"]
        assert json.loads(rep.read_text())["relevance"]["fill"] == "budget"
        gated = _run(index, "How does FAISS search vectors?", "--budget", "4000", "--min-score", "0.99", "-q",
                     "--report", str(rep))
        assert gated.exit_code == 0, gated.output
        report = json.loads(rep.read_text())
        assert report["relevance"]["floor_from"] == "min_score"
        included = [i for i in report["items"] if i["status"] == "included"]
        assert 0 < len(included) < len(budget_items)


class TestSmallBudgets:
    def test_a_budget_too_small_for_evidence_warns_and_exits_0(self, index, tmp_path):
        out = tmp_path / "p.txt"
        # 20: the question as a tight budget writes it (after "Question:") leaves no room for a tag and a piece
        # of text (at 25 a piece fits; ids relative to the folder named leave a cut passage room at 40, issue 31)
        result = _run(index, "How does FAISS search vectors?", "--budget", "20", "--out", str(out))
        assert result.exit_code == 0, result.output
        assert "too small" in result.stderr and out.exists()
        strict = _run(index, "How does FAISS search vectors?", "--budget", "20", "--require-evidence")
        assert strict.exit_code == 1 and "budget" in strict.output and "too small" in strict.output
        assert "returned nothing usable" not in strict.output


class TestMessagesAndTools:
    def test_messages_file_and_tool_output(self, index, tmp_path):
        log = tmp_path / "pytest.log"
        log.write_text("collected 3 items\n" + "PASSED test_x\n" * 3000 + "FAILED test_faiss - AssertionError\n",
                       encoding="utf-8")
        hist = tmp_path / "h.jsonl"
        hist.write_text('{"role": "user", "content": "I use FAISS."}\n{"role": "assistant", "content": "Good."}\n',
                        encoding="utf-8")
        msgs, rep = tmp_path / "m.json", tmp_path / "r.json"
        rules = tmp_path / "rules.txt"
        rules.write_text("Cite the log lines you use.\n", encoding="utf-8")
        result = _run(index, "Why did the FAISS test fail?", "--budget", "1500", "--history", str(hist),
                      "--instructions", str(rules),
                      "--tool-output", str(log), "--tool-output", str(hist), "--messages", str(msgs),
                      "--report", str(rep), "-q")
        assert result.exit_code == 0, result.output
        messages = json.loads(msgs.read_text(encoding="utf-8"))
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
        assert "Cite the log lines" in messages[0]["content"] and messages[1]["content"] == "I use FAISS."
        final = messages[-1]["content"]
        assert "Why did the FAISS test fail?" in final and "FAILED test_faiss" in final and "cut here" in final
        assert 'name="pytest.log"' in final and 'name="h.jsonl"' in final
        report = json.loads(rep.read_text())
        assert report["chat_style"] == "openai" and report["chat_tokens"] <= 1500
        anthropic = _run(index, "Why?", "--budget", "1500", "--messages", str(msgs), "--messages-style", "anthropic")
        assert anthropic.exit_code == 0, anthropic.output
        assert set(json.loads(msgs.read_text(encoding="utf-8"))) == {"system", "messages"}


class TestUsageErrors:
    @pytest.mark.parametrize("args", [["--order", "x"], ["--order", "random"], ["--fill", "all"],
                                      ["--messages-style", "gemini"], ["--format", "yaml"]])
    def test_a_bad_choice_exits_2_with_one_line(self, index, args):
        result = _run(index, "q", "--budget", "500", *args)
        assert result.exit_code == 2, result.output
        assert len(result.output.strip().splitlines()) == 1 and args[0] in result.output
        assert "Traceback" not in result.output and "pydantic" not in result.output

    def test_history_with_wrong_keys_names_the_file_line_and_the_keys(self, index, tmp_path):
        hist = tmp_path / "h.jsonl"
        hist.write_text('{"role": "user", "content": "hi"}\n{"speaker": "user", "text": "hello"}\n', encoding="utf-8")
        result = _run(index, "q", "--budget", "500", "--history", str(hist))
        assert result.exit_code == 1
        line = result.output.strip()
        assert "h.jsonl:2" in line and "role" in line and "content" in line and "__init__" not in line


class TestModels:
    def test_names_are_whole_at_80_columns(self):
        from typer.testing import CliRunner

        from contextkit.assembly import list_profiles
        from contextkit.cli import app

        result = CliRunner().invoke(app, ["models"], env={"COLUMNS": "80"}, terminal_width=80)
        assert result.exit_code == 0, result.output
        for profile in list_profiles():
            assert profile.name in result.output  # not "claude-son…"


class TestTextEscape:
    def test_text_escape_option_and_its_usage_error(self, index, tmp_path):
        out = tmp_path / "p.txt"
        result = _run(index, "How does FAISS search vectors?", "--budget", "3000", "--text-escape", "cdata",
                      "--out", str(out), "-q")
        assert result.exit_code == 0, result.output
        assert "<![CDATA[" in out.read_text(encoding="utf-8")
        bad = _run(index, "How does FAISS search vectors?", "--budget", "3000", "--text-escape", "base64")
        assert bad.exit_code == 2 and "--text-escape" in bad.output


def test_a_misspelt_model_profile_is_a_usage_error_with_the_likely_name(tmp_path):
    """Issue 31: `--model gpt4o` exited 1 (as a broken index would) with no hint."""
    result = CliRunner().invoke(app, ["assemble", "q", "--index", str(tmp_path / "none"), "--model", "gpt4o"],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert "did you mean 'gpt-4o'?" in " ".join(result.output.split())


def test_get_profile_suggests_the_closest_name():
    from contextkit.core.errors import ProfileError
    from contextkit.core.profiles import get_profile

    for typed, meant in [("GPT-4o", "gpt-4o"), ("claude-sonet-4", "claude-sonnet-4"), ("gemini2.5pro", "gemini-2.5-pro")]:
        with pytest.raises(ProfileError, match=f"did you mean '{meant}'"):
            get_profile(typed)
    with pytest.raises(ProfileError) as caught:
        get_profile("a-model-nobody-ships")
    assert "did you mean" not in str(caught.value)


class TestATightPromptFromAnotherProcess:
    """Issue 29, the way a user runs it: real PEPs (numbers, versions, abbreviations) ingested, then
    ``python -m contextkit assemble`` in another process at a few hundred tokens, the prompt read back with a
    real XML parser and the report as JSON."""

    def test_tight_layout_chunk_by_chunk_and_verbatim_runs(self, peps, embedder, tmp_path, cl100k):
        import subprocess
        import sys
        import xml.etree.ElementTree as ET

        from contextkit.assembly._fill import PART_GAP
        from contextkit.index import Index
        from contextkit.ingestion import ingest

        chosen = [p for p in peps if p.name in ("pep-0008.rst", "pep-0257.rst", "pep-0020.rst")]
        assert len(chosen) == 3
        corpus = tmp_path / "peps"
        corpus.mkdir()
        for p in chosen:
            (corpus / p.name).write_bytes(p.read_bytes())
        ingest([corpus], tmp_path / "ix", embedder=embedder, chunk_size=64, chunk_overlap=16)
        instructions = tmp_path / "rules.txt"
        instructions.write_text("Answer from the documents only; cite the document id you use.\n", encoding="utf-8")
        prompt_file, report_file = tmp_path / "prompt.txt", tmp_path / "report.json"
        question = "What is the maximum line length and how should long lines be wrapped?"
        done = subprocess.run([sys.executable, "-m", "contextkit", "assemble", question, "--index", str(tmp_path / "ix"),
                               "--budget", "300", "--instructions", str(instructions), "--out", str(prompt_file),
                               "--report", str(report_file), "-q"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        prompt = prompt_file.read_text(encoding="utf-8")
        report = json.loads(report_file.read_text(encoding="utf-8"))
        assert cl100k.count(prompt) == report["tokens"] <= 300
        assert any(n.startswith("tight budget") for n in report["notes"])

        # the instructions lead as prose, then our elements only (documents without an evidence frame), then the
        # question after "Question:"
        root = ET.fromstring(f"<prompt>{prompt}</prompt>")
        assert root.text == "Answer from the documents only; cite the document id you use.\n\n"
        assert {c.tag for c in root} == {"document"} and prompt.endswith(f"</document>\nQuestion: {question}\n")
        assert all(not (c.tail or "").strip() for c in root[:-1])
        tagged = {s["name"]: s["tagged"] for s in report["sections"] if s["tokens"]}
        assert tagged == {"instructions": False, "evidence": False, "question": False}

        # chunk by chunk: nothing merged; every run of text shown is the document's own, read from the index
        assert not any(i["status"] == "merged" for i in report["items"])
        spans: dict[str, tuple[int, int]] = {}
        with Index.open(tmp_path / "ix", read_only=True) as index:
            texts: dict[str, list[str]] = {}
            for source in {c for ids in report["citations"].values() for c in ids}:
                doc_id = source.rsplit("::", 1)[0]
                if doc_id not in texts:
                    chunks = index.document_chunks(doc_id)
                    chars = [""] * max(c.end for c in chunks)
                    for c in chunks:
                        chars[c.start:c.end] = list(c.text)
                        spans[c.id] = (c.start, c.end)
                    texts[doc_id] = chars
        status = {i["id"]: i["status"] for i in report["items"]}
        joined = 0
        for doc in root.findall("document"):
            ids = report["citations"][doc.get("id")]
            text = "".join(texts[ids[0].rsplit("::", 1)[0]])
            for run in doc.text.strip("\n").split(PART_GAP):
                for piece in run.split(" … "):
                    piece = piece.removesuffix("…").strip()
                    assert piece in text, piece  # overlapping chunks shown whole read on: no repeat, no splice
            for first, second in zip(ids, ids[1:]):  # two chunks shown whole that overlap: one run, no gap
                (a, b), (c, d) = spans[first], spans[second]
                if status[first] == status[second] == "included" and a <= c <= b < d:
                    joined += 1
                    assert text[a:d].strip() in doc.text, (first, second)
        assert joined and "79 characters" in prompt

    HARBOUR = ("# Harbour\n\nThe Thursday market was founded in the town's first century, the chronicles say, though "
               "they do not say by whom. The harbour town grew around a fishing fleet in the twelfth century. "
               "Merchants from the coast built warehouses along the quay. The old customs house, later a school, "
               "still stands beside the church. Its walls are of local grey stone, quarried on the hill behind the "
               "town. Every Thursday the market still fills the quay, as it has since it was founded.\n")
    ABBEY = ("# Abbey\n\nThe abbey stood on the hill above the town for four hundred years, and its bells could be "
             "heard from the islands on a still day. Its monks kept bees, brewed ale for travellers, copied books "
             "for the bishop and kept the only school for fifty miles. They say the Thursday market, the town's "
             "oldest custom, was founded by the abbot Edmund Hale in 1204 and gave the stalls their first charter. "
             "The abbey was dissolved in 1539 and its stones were carried off to build the new quay, the mill and "
             "half the houses of the high street.\n")
    MILL = ("# Mill\n\nThe tide mill on the creek ground corn for the town until 1921. Its wheel was turned by the "
            "ebbing tide, held back behind a dam at high water. The miller's house is now a museum of the town's "
            "trades.\n")

    @pytest.mark.parametrize("budget", [150, 160])
    def test_the_best_passage_makes_room_for_the_answer_of_the_next(self, embedder, tmp_path, cl100k, budget):
        # the passage ranked first (the harbour's: the question's words twice over) fills a 150-token prompt whole
        # and does not say who founded the market; the abbey's, ranked second, does in one sentence. That sentence
        # goes in whole (before: "… the Thursday market, the…"), the harbour's sentence on the market stays
        import subprocess
        import sys
        import xml.etree.ElementTree as ET

        from contextkit.ingestion import ingest

        corpus = tmp_path / "town"
        corpus.mkdir()
        for name, text in (("harbour.md", self.HARBOUR), ("abbey.md", self.ABBEY), ("mill.md", self.MILL)):
            (corpus / name).write_text(text, encoding="utf-8")
        ingest([corpus], tmp_path / "ix", embedder=embedder)
        (tmp_path / "rules.txt").write_text("Answer from the documents only; cite the document id you use.\n",
                                            encoding="utf-8")
        prompt_file, report_file = tmp_path / "prompt.txt", tmp_path / "report.json"
        done = subprocess.run([sys.executable, "-m", "contextkit", "assemble", "Who founded the Thursday market?",
                               "--index", str(tmp_path / "ix"), "--budget", str(budget), "--mode", "bm25",
                               "--instructions", str(tmp_path / "rules.txt"), "--out", str(prompt_file),
                               "--report", str(report_file), "-q"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        prompt = prompt_file.read_text(encoding="utf-8")
        report = json.loads(report_file.read_text(encoding="utf-8"))
        assert cl100k.count(prompt) == report["tokens"] <= budget
        evidence = [i for i in report["items"] if i["section"] == "evidence" and i["status"] != "dropped"]
        assert [i["id"].rsplit("/", 1)[-1] for i in evidence] == ["harbour.md::0", "abbey.md::0"]
        assert evidence[0]["status"] == "truncated" and evidence[0]["score"] > evidence[1]["score"]
        assert "was founded by the abbot Edmund Hale in 1204 and gave the stalls their first charter." in prompt
        assert "The Thursday market was founded in the town's first century" in prompt
        for doc in ET.fromstring(f"<prompt>{prompt}</prompt>").findall("document"):
            source = self.HARBOUR if doc.text.strip().startswith("# Harbour") else self.ABBEY
            for piece in doc.text.strip().split(" … "):
                assert piece.removesuffix("…").strip() in source  # verbatim spans of the document shown

"""PII outside the text (issue 20): with redaction on, ids, sources, titles, metadata, file names and
message ids pass the same session as the text, at ingest (what the store keeps) and at assembly (the
prompt, the report, the audit log)."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from contextkit import ingest
from contextkit.assembly import EvidenceItem, Section, assemble
from contextkit.compressors.redact import PIIRedactor
from contextkit.records import Message

ADDRESSES = ("carol@example.net", "erin@example.com", "dave@example.org", "frank@example.co.uk")
PLACEHOLDER = re.compile(r"<EMAIL_\d+>")


def store_strings(index_dir: Path) -> dict[str, list[str]]:
    """Every text cell of the store, by table.column."""
    db = sqlite3.connect(index_dir / "store.sqlite")
    try:
        out: dict[str, list[str]] = {}
        for table, cols in (("documents", ("id", "file", "source", "metadata")),
                            ("chunks", ("id", "doc_id", "header", "text", "metadata"))):
            for col in cols:
                out[f"{table}.{col}"] = [str(r[0]) for r in db.execute(f"SELECT {col} FROM {table}")]
        out["files.path"] = [r[0] for r in db.execute("SELECT path FROM files")]
        return out
    finally:
        db.close()


class TestIngestKeepsNoPersonalData:
    def corpus(self, root: Path) -> Path:
        folder = root / "corpus"
        folder.mkdir()
        (folder / "records.jsonl").write_text(json.dumps({
            "_id": "carol@example.net", "title": "Notes for dave@example.org",
            "text": "Carol wrote from carol@example.net about the budget.",
            "metadata": {"owner": "dave@example.org", "contacts": ["frank@example.co.uk"], "year": 2024}}) + "\n",
            encoding="utf-8")
        (folder / "erin@example.com.txt").write_text("A plain note about the garden.\n", encoding="utf-8")
        return folder

    def test_ids_sources_titles_and_metadata_are_masked_in_the_store(self, tmp_path, embedder):
        folder = self.corpus(tmp_path)
        report = ingest([folder], tmp_path / "ix", embedder=embedder, redact=True)
        assert report.failures == [] and report.documents == 2
        cells = store_strings(tmp_path / "ix")
        for column, values in cells.items():
            for value in values:
                assert not any(a in value for a in ADDRESSES), (column, value)
        ids = cells["documents.id"]
        assert any(PLACEHOLDER.search(i) for i in ids) and len(set(ids)) == 2
        # one session: the JSONL _id and the same address in the text get one placeholder
        record = next(i for i in ids if "records.jsonl#" in i)
        ph = PLACEHOLDER.search(record).group()
        assert any(ph in t for t in cells["chunks.text"])
        meta = [json.loads(m) for m in cells["documents.metadata"]]
        assert {"year": 2024} .items() <= next(m for m in meta if "year" in m).items()  # numbers stay

    def test_incremental_ingest_still_finds_the_files(self, tmp_path, embedder):
        folder = self.corpus(tmp_path)
        ingest([folder], tmp_path / "ix", embedder=embedder, redact=True)
        again = ingest([folder], tmp_path / "ix", embedder=embedder, redact=True)
        assert again.files_new == 0 and again.files_changed == 0 and again.chunks_added == 0
        note = folder / "erin@example.com.txt"
        note.write_text("A plain note about the orchard now.\n", encoding="utf-8")
        changed = ingest([folder], tmp_path / "ix", embedder=embedder, redact=True)
        assert changed.files_changed == 1
        cells = store_strings(tmp_path / "ix")
        assert len(cells["documents.id"]) == 2  # replaced, not added beside the old one
        assert not any("erin@" in v for v in cells["documents.id"] + cells["documents.source"])
        note.unlink()
        pruned = ingest([folder], tmp_path / "ix", embedder=embedder, redact=True, prune=True)
        assert pruned.files_removed == 1 and len(store_strings(tmp_path / "ix")["documents.id"]) == 1

    def test_a_file_keeps_one_masked_id_across_runs_and_in_the_report(self, tmp_path, embedder):
        """The file's id is its path masked plus a keyed digest: the same in every run, never the real name."""
        folder = self.corpus(tmp_path)
        (folder / "broken@example.org.txt").write_bytes(b"\xff\xfe\x00binary")  # a failure the report names
        first = ingest([folder], tmp_path / "ix", embedder=embedder, redact=True)
        ids = store_strings(tmp_path / "ix")["files.path"]
        note = next(i for i in ids if "records" not in i)
        assert re.fullmatch(r"corpus/<EMAIL>~[a-z2-7]{16}", note), ids
        assert all("example" not in f.path for f in first.failures) and first.failures
        (folder / "erin@example.com.txt").write_text("Changed text.\n", encoding="utf-8")
        again = ingest([folder], tmp_path / "ix", embedder=embedder, redact=True)
        assert again.files_changed == 1 and store_strings(tmp_path / "ix")["files.path"] == ids

    def test_an_index_written_with_real_paths_is_renamed_on_the_next_run(self, tmp_path, embedder):
        """Indexes from before the masked ids kept the real path in files.path and documents.file."""
        folder = self.corpus(tmp_path)
        ingest([folder], tmp_path / "ix", embedder=embedder, redact=True)
        db = sqlite3.connect(tmp_path / "ix" / "store.sqlite")
        with db:  # as an older run left it: real paths, no salt
            key = next(r[0] for r in db.execute("SELECT path FROM files WHERE path LIKE '%<EMAIL>%'"))
            real = key.split("/corpus/")[0] + "/corpus/erin@example.com.txt"  # the id the path gives it
            db.execute("UPDATE files SET path = ? WHERE path = ?", (real, key))
            db.execute("UPDATE documents SET file = ? WHERE file = ?", (real, key))
            db.execute("DELETE FROM meta WHERE key = 'file_key_salt'")
        db.close()
        again = ingest([folder], tmp_path / "ix", embedder=embedder, redact=True)
        assert again.files_new == 0 and again.files_changed == 0 and again.chunks_added == 0
        cells = store_strings(tmp_path / "ix")
        assert not any("erin@" in v for v in cells["files.path"] + cells["documents.file"])
        assert len(cells["documents.id"]) == 2

    def test_ids_masked_in_two_runs_stay_distinct_keys(self):
        # "<EMAIL_1>.txt" in both runs: the keyed tag keeps the store's primary key unique
        first, second = PIIRedactor(), PIIRedactor()
        a, b = first.mask_id("corpus/carol@example.net/a.txt"), second.mask_id("corpus/dave@example.org/a.txt")
        assert a.split("~")[0] == b.split("~")[0] == "corpus/<EMAIL_1>/a.txt" and a != b
        assert first.mask_id("corpus/plain.txt") == "corpus/plain.txt"  # nothing masked, nothing added


class TestAssemblyMasksEverythingAroundTheText:
    def sections(self) -> list[Section]:
        items = [EvidenceItem(id="corpus/records.jsonl#carol@example.net::0", text="The budget was approved.",
                              source="erin@example.com", score=0.9, doc_id="corpus/records.jsonl#carol@example.net",
                              metadata={"author": "dave@example.org"})]
        history = [Message("user", "Hello there.", None, "msg-frank@example.co.uk-1"),
                   Message("assistant", "Hi, how can I help?", None, "msg-2")]
        return [Section("evidence", role="evidence", items=items, attributes={"origin": "dave@example.org"}),
                Section("history", role="history", messages=history),
                Section("question", role="question", content="What did carol@example.net decide?")]

    @pytest.mark.parametrize("markup", ["full", "lean"])
    def test_prompt_report_and_audit_log_hold_no_address(self, tmp_path, markup):
        log = tmp_path / "audit.jsonl"
        redactor = PIIRedactor()
        result = assemble(self.sections(), 2_000, redactor=redactor, audit_log=log, markup=markup)
        prompt, report = result.prompt, result.report
        audit = log.read_text(encoding="utf-8")
        for where in (prompt, report.model_dump_json(), audit):
            assert not any(a in where for a in ADDRESSES), where
        # one placeholder per value across the id and the question: the mask cannot be undone by linking
        ph = redactor.redact("carol@example.net").text
        if markup == "full":
            assert prompt.count(ph.strip("<>")) == 2, prompt  # in the item's id and in the question
        else:  # the tag cites "1"; the report's citations map it to the masked id, with the same placeholder
            assert prompt.count(ph.strip("<>")) == 1, prompt
            assert [ph in x for ids in report.citations.values() for x in ids] == [True]
        assert "msg-2" in audit  # ids without personal data are kept as they are

    def test_without_a_redactor_nothing_changes(self):
        prompt = assemble(self.sections(), 2_000).prompt
        assert "carol@example.net" in prompt

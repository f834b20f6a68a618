"""The settings spine: one unknown-option error at every entry point, one way to read contextkit.toml.

Each test here failed on 59edf24: a misspelt option raised pydantic's ValidationError, a bare
TypeError or UnknownOptionError depending on the entry point, ``TokenChunker.chunk`` took no
overrides, and ``[assemble] relevance_floor`` made every CLI command exit 2.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer

from contextkit.errors import ContextkitError, UnknownOptionError

TEXT = ("The 3.5 mm jack was removed in 2016. Dr. Smith, of St. Mary's, measured 12.4 kg on Jan. 3. "
        "It rained. ") * 20


def _assemble_with_typo():
    from contextkit import Section, assemble

    return assemble([Section("question", role="question", content="hi")], 100, fil="budget")


def _entry_points():
    from contextkit import ContextAssembler, IngestConfig, TokenChunker
    from contextkit.assembly.context_assembler import AssemblerConfig
    from contextkit.chunking import ChunkerConfig
    from contextkit.compressors import EvidenceCompressor, HistorySummarizer
    from contextkit.compressors.redact import PIIRedactor
    from contextkit.retrievers import BM25Retriever, DenseRetriever, HybridRetriever
    from contextkit.retrievers.rerank import CrossEncoderReranker

    return {
        "IngestConfig": lambda: IngestConfig(chunk_sise=64),
        "IngestConfig.from dict": lambda: IngestConfig.model_validate({"chunk_sise": 64}),
        "ChunkerConfig": lambda: ChunkerConfig(chunk_sise=64),
        "TokenChunker": lambda: TokenChunker(chunk_sise=64),
        "TokenChunker.from_dict": lambda: TokenChunker.from_dict({"chunk_sise": 64}),
        "TokenChunker.chunk": lambda: TokenChunker(128, 16).chunk(TEXT, chunk_sise=32),
        "ContextAssembler": lambda: ContextAssembler(1000, fil="budget"),
        "ContextAssembler.assemble": lambda: ContextAssembler(1000).assemble("q", fil="budget"),
        "AssemblerConfig": lambda: AssemblerConfig(fil="budget"),
        "assemble": _assemble_with_typo,
        "HistorySummarizer": lambda: HistorySummarizer(summary_max_tokenz=10),
        "HistorySummarizer.compress": lambda: HistorySummarizer().compress([{"role": "user", "content": "x"}],
                                                                            max_tokenz=3),
        "EvidenceCompressor": lambda: EvidenceCompressor(target_ratoi=2),
        "EvidenceCompressor.from_dict": lambda: EvidenceCompressor.from_dict({"target_ratoi": 2}),
        "PIIRedactor": lambda: PIIRedactor(kindz=["EMAIL"]),
        "PIIRedactor.from_dict": lambda: PIIRedactor.from_dict({"kindz": ["EMAIL"]}),
        "BM25Retriever": lambda: BM25Retriever(None, kk=3),
        "DenseRetriever": lambda: DenseRetriever(None, kk=3),
        "HybridRetriever": lambda: HybridRetriever(None, kk=3),
        "CrossEncoderReranker": lambda: CrossEncoderReranker("m", batchsize=3),
    }


ENTRY_POINTS = sorted(_entry_points())


class TestOneErrorForAMisspeltOption:
    @pytest.mark.parametrize("where", ENTRY_POINTS)
    def test_every_entry_point_raises_unknown_option(self, where):
        with pytest.raises(UnknownOptionError) as caught:
            _entry_points()[where]()
        # One class, a ContextkitError, still a TypeError (an unexpected keyword) and a ValueError (a bad setting).
        assert isinstance(caught.value, ContextkitError | TypeError | ValueError)
        assert "unknown option" in str(caught.value) and "did you mean" in str(caught.value)

    def test_the_message_names_the_class_a_subclass_was_built_as(self):
        from contextkit.retrievers import BM25Retriever

        with pytest.raises(UnknownOptionError, match=r"^BM25Retriever got an unknown option 'kk'; did you mean 'k'\?"):
            BM25Retriever(None, kk=3)

    def test_right_options_still_pass_through_the_check(self):
        from contextkit.compressors import HistorySummarizer

        summary = HistorySummarizer(summary_max_tokens=32)
        assert summary.config.summary_max_tokens == 32
        assert summary.compress([{"role": "user", "content": "hello"}], max_tokens=20).report.items_in == 1


class TestCallsOverrideConstructorValues:
    def test_chunk_takes_the_constructor_options(self):
        from contextkit import TokenChunker

        chunker = TokenChunker(128, 16)
        assert chunker.chunk(TEXT, chunk_size=32) == TokenChunker(32, 16).chunk(TEXT)
        assert chunker.chunk(TEXT, chunk_size=32, chunk_overlap=0) == TokenChunker(32, 0).chunk(TEXT)
        assert chunker.chunk(TEXT) == TokenChunker(128, 16).chunk(TEXT)  # the override did not stick

    def test_a_bad_override_value_is_checked_like_the_constructors(self):
        from contextkit import TokenChunker
        from contextkit.errors import InvalidArgumentError

        with pytest.raises(InvalidArgumentError):
            TokenChunker(128, 16).chunk(TEXT, chunk_size=8, chunk_overlap=8)


class TestOneSerialisation:
    def test_every_component_dict_names_its_type_and_rebuilds(self):
        from contextkit import TokenChunker
        from contextkit.compressors import HistorySummarizer
        from contextkit.compressors.redact import PIIRedactor
        from contextkit.core.options import Component
        from contextkit.retrievers.rerank import CrossEncoderReranker, Reranker

        for component, base in [(TokenChunker(64, 8), TokenChunker), (HistorySummarizer(keep_last=2), HistorySummarizer),
                                (PIIRedactor(kinds=["EMAIL"]), PIIRedactor),
                                (CrossEncoderReranker("m", batch_size=4), Reranker)]:
            assert isinstance(component, Component)
            data = component.to_dict()
            assert data["type"] == type(component).__name__
            assert base.from_dict(data).to_dict() == data

    def test_redaction_is_a_role_of_its_own(self):
        from contextkit.compressors import Compressor
        from contextkit.compressors.base import Redactor
        from contextkit.compressors.redact import PIIRedactor

        redactor = PIIRedactor()
        assert isinstance(redactor, Redactor) and not isinstance(redactor, Compressor)

        class Upper(Redactor):  # a user's redactor: redact and report; the field maskers come from the role
            name = "upper"

            def redact(self, text):
                return PIIRedactor(kinds=["EMAIL"]).redact(text)

            def report(self):
                from contextkit.compressors import CompressionReport

                return CompressionReport(compressor=self.name)

        masked = Upper().mask_id("carol@x.org.txt")
        assert masked.startswith("<EMAIL_1>~") and "carol" not in masked


# ------------------------------------------------------------------ one file, one meaning


def _cli_params() -> dict[str, set[str]]:
    from contextkit.cli import app

    group = typer.main.get_command(app)
    return {name: {p.name for p in cmd.params} for name, cmd in group.commands.items()}


class TestOneFileOneMeaning:
    def test_a_record_only_setting_is_read_by_library_and_cli_alike(self, tmp_path):
        from contextkit import ContextAssembler
        from contextkit.cli._settings import default_map, file_settings
        from contextkit.config import load_config

        (tmp_path / "contextkit.toml").write_text('[assemble]\nrelevance_floor = 0.5\norder = "score"\n'
                                                  'summary_max_tokens = 100\nformat = "markdown"\n')
        library = ContextAssembler.from_config(tmp_path / "contextkit.toml")
        defaults = default_map(load_config(tmp_path / "contextkit.toml"), _cli_params())
        cli = {**file_settings("assemble"), "evidence_order": defaults["assemble"]["order"],
               "summary_max_tokens": defaults["assemble"]["summary_tokens"], "format": defaults["assemble"]["fmt"]}
        assert library.config.relevance_floor == cli["relevance_floor"] == 0.5
        assert library.config.evidence_order == cli["evidence_order"] == "score"
        assert library.config.summary_max_tokens == cli["summary_max_tokens"] == 100
        assert library.config.format == cli["format"] == "markdown"

    def test_units_follow_the_declared_alias(self, tmp_path):
        from contextkit import IngestConfig
        from contextkit.cli._settings import default_map
        from contextkit.config import load_config

        (tmp_path / "contextkit.toml").write_text("[ingest]\nstream_above = 2\nbatch_chunks = 64\n")
        library = IngestConfig.from_config(tmp_path / "contextkit.toml")
        defaults = default_map(load_config(tmp_path / "contextkit.toml"), _cli_params())
        assert library.stream_above_bytes == 2 << 20 and defaults["ingest"]["stream_above"] == 2
        assert library.batch_chunks == 64

    def test_a_misspelt_key_is_refused_by_both_with_the_same_error(self, tmp_path):
        from contextkit import ContextAssembler
        from contextkit.cli._settings import default_map
        from contextkit.config import load_config

        (tmp_path / "contextkit.toml").write_text("[assemble]\nrelevance_flor = 0.5\n")
        with pytest.raises(UnknownOptionError, match="did you mean 'relevance_floor'"):
            ContextAssembler.from_config(tmp_path / "contextkit.toml")
        with pytest.raises(UnknownOptionError, match="did you mean 'relevance_floor'"):
            default_map(load_config(tmp_path / "contextkit.toml"), _cli_params())

    def test_every_command_runs_beside_a_record_only_setting(self, tmp_path):
        (tmp_path / ".git").mkdir()
        (tmp_path / "contextkit.toml").write_text("[assemble]\nrelevance_floor = 0.5\n[ingest]\nbatch_chunks = 64\n")
        result = subprocess.run([sys.executable, "-m", "contextkit", "models", "--json"], cwd=tmp_path,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr


class TestCliOptionsMatchTheRecords:
    @pytest.mark.parametrize("command", ["ingest", "chunk", "assemble"])
    def test_every_option_sets_a_field_or_is_declared_cli_only(self, command):
        from contextkit.cli._settings import check_record_options, record

        assert check_record_options(command, record(command), _cli_params()[command]) == []

    @pytest.mark.parametrize("command", ["ingest", "chunk", "assemble"])
    def test_option_defaults_equal_the_records(self, command):
        from contextkit.cli import app
        from contextkit.cli._settings import field_of, record

        model = record(command)
        cmd = typer.main.get_command(app).commands[command]
        for param in cmd.params:
            found = field_of(command, param.name, model)
            if found is None or param.default is None:
                continue
            name, factor = found
            default = model.model_fields[name].default
            if default is None:  # "as the index was built": the CLI shows the concrete default in its help
                continue
            assert (param.default if factor == 1 else param.default * factor) == default, (command, param.name)

    def test_the_cli_only_options_are_the_keys_the_library_passes_by(self):
        from contextkit.cli._settings import CLI_ONLY
        from contextkit.config import COMMAND_LINE_KEYS

        inputs = {"paths", "file", "question", "index", "model"}
        assert set().union(*CLI_ONLY.values()) - inputs == COMMAND_LINE_KEYS - {"json"}

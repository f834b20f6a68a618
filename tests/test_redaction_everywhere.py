"""With redaction on, nothing personal reaches any output (issue 33).

An e-mail, a Luhn-valid card number, a phone number and an IBAN are planted where users put them:
the question, the history, tool output, the documents, a file name and a folder name, option values.
Then ingest, search and assemble run as real processes (``python -m contextkit``, the real model),
in text and ``--json``, writing every report (JSON, HTML, chat messages, the audit log, the prompt),
and once in-process with logging at DEBUG and an in-memory OpenTelemetry exporter; every output is
grepped for the raw values, also with their spaces taken out.

On 7f7ba2f the HTML report's ``<title>`` and ``<h1>`` held the raw question, ``search`` on a
redacting index printed the query, errors quoted paths and option values as typed (a missing folder
named with an e-mail, a history file, ``--filter``, ``-k``, ``--format``...), a history message's
role reached the prompt unmasked, and a failed ingest's span carried the path in its exception event.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EMAIL = "john.doe@example.com"
CARD = "4111 1111 1111 1111"  # a Luhn-valid Visa test number
PHONE = "+44 20 7946 0958"
IBAN = "GB82 WEST 1234 5698 7654 32"
RAW = (EMAIL, CARD, PHONE, IBAN, "2079460958")
QUESTION = f"Did {EMAIL} pay with card {CARD}? Call {PHONE}; refund to IBAN {IBAN}."


def leaks(text: str) -> list[str]:
    """The planted values in ``text``, as written or with their spaces removed (a table may re-wrap them)."""
    squeezed = "".join(text.split())
    return [value for value in RAW if value in text or "".join(value.split()) in squeezed]


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "contextkit", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, errors="replace")


def planted_corpus(root: Path) -> Path:
    docs = root / "corpus" / EMAIL  # a folder named with an e-mail
    docs.mkdir(parents=True)
    (docs / f"card {CARD.replace(' ', '')}.txt").write_text(
        f"Invoice for {EMAIL}: paid by card {CARD}, phone {PHONE}, IBAN {IBAN}. The Eiffel Tower is tall.\n")
    (docs / "notes.md").write_text(f"# Contact {EMAIL}\n\nCall {PHONE} about the tower; refunds to {IBAN}.\n")
    (docs / "tower.txt").write_text("The Eiffel Tower is 330 metres tall and stands in Paris.\n" * 3)
    return root / "corpus"


_TRACED = """
    import io, json, logging, sys
    from pathlib import Path
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from contextkit.core import telemetry
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.set_providers(tracer_provider=provider)
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.DEBUG)
    from contextkit.cli import app
    for args in json.loads(Path("calls.json").read_text()):
        try:
            app(args, standalone_mode=False)
        except SystemExit:
            pass
        except Exception as exc:
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        logging.getLogger("contextkit.test").warning("after %s", " ".join(args))  # a record with the values
    spans = [{"name": s.name, "attributes": dict(s.attributes or {}), "status": str(s.status.description),
              "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in s.events]}
             for s in exporter.get_finished_spans()]
    Path("spans.json").write_text(json.dumps(spans, default=str))
    Path("debug.log").write_text(log.getvalue())
"""


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every output of a redacting pipeline over planted values, by where it came from."""
    pytest.importorskip("opentelemetry.sdk")
    work = tmp_path_factory.mktemp("planted")
    docs, ix = planted_corpus(work), str(work / "ix")
    history = work / "history.jsonl"
    history.write_text("\n".join(json.dumps(m) for m in [
        {"role": "user", "content": f"I am {EMAIL}, my card is {CARD}"},
        {"role": "assistant", "content": f"Noted, and your phone {PHONE}?"},
        {"role": EMAIL, "content": f"Yes, and my IBAN is {IBAN}"}]) + "\n")  # a role is free text
    (work / "tool.log").write_text(f"lookup {EMAIL}: card {CARD} declined; callback {PHONE}\n")
    out = work / "out"
    out.mkdir()
    assemble = ["assemble", QUESTION, "--index", ix, "--budget", "3000", "--redact", "--history", str(history),
                "--tool-output", str(work / "tool.log"), "--report", str(out / "report.json"),
                "--report-html", str(out / "report.html"), "--messages", str(out / "messages.json"),
                "--audit-log", str(out / "audit.jsonl"), "--out", str(out / "prompt.txt")]
    found: dict[str, str] = {}
    for name, args in {
        "ingest": ["ingest", str(docs), "--index", ix, "--redact"],
        "ingest again --json": ["ingest", str(docs), "--index", ix, "--redact", "--json"],
        "search": ["search", QUESTION, "--index", ix],
        "search --json": ["search", QUESTION, "--index", ix, "--json"],
        "assemble": [*assemble, "--mode", "bm25"],
        "assemble --json": [*assemble, "--json"],
        "info": ["info", "--index", ix],
    }.items():
        result = run_cli(*args)
        assert result.returncode == 0, (name, result.stderr[-500:])
        found[f"{name}: stdout"], found[f"{name}: stderr"] = result.stdout, result.stderr
    for path in sorted(out.iterdir()):
        found[path.name] = path.read_text()
    calls = [["search", QUESTION, "--index", ix, "--mode", "dense"], assemble,
             ["ingest", str(work / EMAIL / "missing"), "--index", str(work / "ix2"), "--redact"],
             ["assemble", QUESTION, "--index", ix, "--budget", "5", "--redact", "--history", str(history)]]
    (work / "calls.json").write_text(json.dumps(calls))
    traced = subprocess.run([sys.executable, "-c", textwrap.dedent(_TRACED)], capture_output=True, text=True,
                            timeout=300, cwd=work)
    assert (work / "spans.json").exists(), traced.stderr[-800:]
    found["DEBUG log"] = (work / "debug.log").read_text()
    found["in-process stdout and stderr"] = traced.stdout + traced.stderr
    found["OpenTelemetry spans"] = (work / "spans.json").read_text()
    return found


OUTPUTS = ["ingest: stdout", "ingest: stderr", "ingest again --json: stdout", "search: stdout", "search --json: stdout",
           "assemble: stdout", "assemble: stderr", "assemble --json: stderr", "info: stdout", "report.json",
           "report.html", "messages.json", "audit.jsonl", "prompt.txt", "DEBUG log", "in-process stdout and stderr",
           "OpenTelemetry spans"]


class TestPlantedValuesReachNoOutput:
    @pytest.mark.parametrize("where", OUTPUTS)
    def test_no_raw_value(self, outputs: dict[str, str], where: str):
        assert where in outputs
        assert not leaks(outputs[where]), (where, leaks(outputs[where]))

    def test_the_outputs_are_not_empty_and_hold_the_placeholders(self, outputs: dict[str, str]):
        # the grep above means something only if the values were there to leak: they show masked
        for where in ("prompt.txt", "report.html", "search: stdout", "DEBUG log"):
            assert "EMAIL_" in outputs[where], where
        assert all(f"{kind}_" in outputs["prompt.txt"] for kind in ("CARD", "PHONE", "IBAN"))

    def test_a_failure_is_traced_with_its_message_masked(self, outputs: dict[str, str]):
        spans = json.loads(outputs["OpenTelemetry spans"])
        events = [e for s in spans for e in s["events"] if e["name"] == "exception"]
        assert events, [s["name"] for s in spans]
        message = events[0]["attributes"]["exception.message"]
        assert "nothing to ingest" in message and "<EMAIL_" in message
        assert "NothingToIngestError" in events[0]["attributes"]["exception.stacktrace"]

    def test_the_html_title_and_heading_hold_the_masked_question(self, outputs: dict[str, str]):
        page = outputs["report.html"]
        title = page.split("<title>", 1)[1].split("</title>", 1)[0]
        heading = page.split("<h1>", 1)[1].split("</h1>", 1)[0]
        assert title == heading
        # masked in the prompt's own session: the title's placeholders are the question's in the prompt
        email = re.search(r"&lt;(EMAIL_\d+)&gt;", title)
        card = re.search(r"&lt;(CARD_\d+)&gt;", title)
        assert email and card, title
        question = outputs["prompt.txt"].split("<question>", 1)[1]
        assert email.group(1) in question and card.group(1) in question


@pytest.fixture(scope="module")
def redacting_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    docs = tmp_path_factory.mktemp("docs")
    (docs / "tower.txt").write_text("The Eiffel Tower is 330 metres tall and stands in Paris.\n" * 3)
    ix = tmp_path_factory.mktemp("ix") / "ix"
    result = run_cli("ingest", str(docs), "--index", str(ix), "--quiet", "--redact")
    assert result.returncode == 0, result.stderr
    return ix


def _error_cases(ix: Path, work: Path) -> list[list[str]]:
    base = ["assemble", "q", "--index", str(ix), "--budget", "900", "--redact"]
    (work / f"{EMAIL}.txt").write_text("a file where a folder would be\n")
    bad = work / "bad.jsonl"
    bad.write_text(f'{{"role": "user", "content": "hi"}}\n{{"role": "user", "text": "{EMAIL}"}}\n')
    return [
        ["ingest", f"/data/{EMAIL}/notes", "--index", str(work / "new"), "--redact"],
        ["ingest", str(work / f"card-{CARD.replace(' ', '')}.txt"), "--index", str(work / "new2"), "--redact",
         "--json"],
        ["ingest", str(work), "--index", str(work / f"{EMAIL}.txt" / "ix"), "--redact"],
        ["ingest", str(work), "--index", str(ix), "--redact", "--header", "{" + EMAIL],
        ["ingest", str(work), "--index", str(ix), "--redact", "--embed-model", f"/models/{EMAIL}"],
        [*base, "--history", f"/tmp/{EMAIL}/chat.jsonl"],
        [*base, "--history", str(bad)],
        [*base, "--instructions", f"/tmp/{CARD.replace(' ', '')}.txt"],
        [*base, "--tool-output", f"/tmp/{EMAIL}.log"],
        [*base, "--format", EMAIL],
        [*base, "--mode", CARD.replace(" ", "")],
        [*base, "-k", EMAIL],
        [*base, "--filter", EMAIL],
        [*base, "--out", f"/nonexistent/{EMAIL}/prompt.txt"],
        ["assemble", "q", "--index", f"/tmp/{EMAIL}/ix", "--budget", "900", "--redact"],
        ["assemble", "q", "--index", str(ix), "--redact", "--model", EMAIL],
        ["search", "tower", "--index", str(ix), "--filter", EMAIL],  # the index redacts: so does search
        ["search", f"who is {EMAIL}", "--index", str(ix), "-k", "0"],
        ["redact", f"/tmp/{EMAIL}/ticket.txt"],  # the command that masks: its errors mask too
    ]


class TestErrorsQuoteNoPersonalValue:
    def test_every_error_masks_what_it_quotes(self, redacting_index: Path, tmp_path: Path):
        found = []
        for args in _error_cases(redacting_index, tmp_path):
            result = run_cli(*args)
            assert "Traceback" not in result.stderr, (args, result.stderr[-500:])
            if leaks(result.stdout + result.stderr):
                found.append((args[:2], result.returncode, result.stderr.strip()[-200:]))
        assert not found

    def test_an_error_still_says_what_is_wrong(self, redacting_index: Path):
        result = run_cli("ingest", f"/data/{EMAIL}/notes", "--index", str(redacting_index), "--redact")
        assert result.returncode == 1
        assert "/data/<EMAIL_1>/notes: no such file or directory" in result.stderr

    def test_without_redaction_the_error_quotes_the_path(self, tmp_path: Path):
        result = run_cli("ingest", f"/data/{EMAIL}/notes", "--index", str(tmp_path / "ix"))
        assert EMAIL in result.stderr  # nothing asked to mask: the user sees their own path

    def test_no_redact_last_wins(self, tmp_path: Path):
        result = run_cli("ingest", f"/data/{EMAIL}/notes", "--index", str(tmp_path / "ix"), "--redact",
                         "--no-redact")
        assert EMAIL in result.stderr


class TestTheLibrary:
    def test_render_html_masks_the_title_of_a_redacted_report(self):
        from contextkit.assembly import Section, assemble
        from contextkit.assembly.html import render_html
        from contextkit.compressors.redact import PIIRedactor

        result = assemble([Section("question", role="question", content=QUESTION)], 500, redactor=PIIRedactor())
        page = render_html(result.prompt, result.report, title=f"contextkit: {QUESTION}")
        assert not leaks(page), leaks(page)
        plain = assemble([Section("question", role="question", content="why?")], 500)
        assert "contextkit: a title" in render_html(plain.prompt, plain.report, title="contextkit: a title")

    def test_a_history_role_is_masked_in_the_prompt(self):
        from contextkit.assembly.context_assembler import ContextAssembler

        result = ContextAssembler(800, redact=True).assemble(
            "why?", history=[{"role": EMAIL, "content": "hello"}, {"role": "user", "content": "hi"}])
        assert not leaks(result.prompt), result.prompt
        assert "EMAIL_1" in result.prompt  # the role, masked (7f7ba2f: role="john.doe@example.com")

    def test_log_records_are_masked_in_a_redacting_run(self):
        import io
        import logging

        from contextkit.cli import _app, _redaction
        from contextkit.core import telemetry

        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        logging.getLogger().addHandler(handler)
        try:
            _app.REDACTION["mask"] = _redaction.for_run(["ingest", "x", "--redact"], {})
            logging.getLogger("contextkit.somewhere").warning("could not read %s", f"/data/{EMAIL}/a.txt")
            _app.REDACTION["mask"] = _redaction.for_run(["ingest", "x"], {})
            logging.getLogger("contextkit.somewhere").warning("could not read %s", "/data/plain/a.txt")
        finally:
            logging.getLogger().removeHandler(handler)
            _app.REDACTION["mask"] = None
            telemetry.set_masker(None)
        assert "could not read /data/<EMAIL_1>/a.txt" in stream.getvalue() and EMAIL not in stream.getvalue()
        assert "/data/plain/a.txt" in stream.getvalue()

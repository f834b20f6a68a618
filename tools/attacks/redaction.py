"""Personal data that must not surface anywhere once redaction is on (issue 33).

Values are planted where a user puts them (the question, the history, the documents, file and
folder names, option values) and every output is grepped for them: stdout and stderr of ingest,
search and assemble (text and ``--json``), the HTML and JSON reports, chat messages, the audit
log, the logs at DEBUG and the OpenTelemetry spans. What holds: none of them holds a raw value."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

from tools.attacks._harness import check, cli, no_traceback, python, small_corpus

EMAIL = "john.doe@example.com"
CARD = "4111 1111 1111 1111"  # Luhn-valid Visa
CARD_DIGITS = CARD.replace(" ", "")
PHONE = "+44 20 7946 0958"
IBAN = "GB82 WEST 1234 5698 7654 32"
IBAN_COMPACT = IBAN.replace(" ", "")
#: What must never appear (the card and the IBAN also without their spaces, the phone's digits).
RAW = (EMAIL, CARD, CARD_DIGITS, PHONE, "2079460958", IBAN, IBAN_COMPACT)


def _leaks(text: str) -> list[str]:
    squeezed = "".join(text.split())
    return [value for value in RAW if value in text or "".join(value.split()) in squeezed]


def _clean(where: str, text: str) -> None:
    found = _leaks(text)
    check(not found, f"{where} holds {found}: ...{_around(text, found[0]) if found else ''}...")


def _around(text: str, value: str) -> str:
    i = text.find(value)
    if i < 0:
        i = "".join(text.split()).find("".join(value.split()))
        text = "".join(text.split())
    return text[max(0, i - 60):i + len(value) + 60].replace("\n", " ")


def _planted_corpus(work: Path) -> Path:
    """A folder named with an e-mail, a file named with a card number, documents holding all four values."""
    docs = small_corpus(work / "corpus" / EMAIL, 2)
    (docs / f"card {CARD_DIGITS}.txt").write_text(
        f"Invoice for {EMAIL}: paid by card {CARD}, phone {PHONE}, IBAN {IBAN}. The Eiffel Tower is tall.\n")
    (docs / "notes.md").write_text(f"# Contact {EMAIL}\n\nCall {PHONE} about the tower; refunds to {IBAN}.\n")
    return work / "corpus"


def attack_html_report_title_and_heading(work: Path) -> None:
    docs = small_corpus(work / "docs", 2)
    ingest = cli(["ingest", str(docs), "--index", str(work / "ix"), "--quiet", "--redact"])
    check(ingest.returncode == 0, f"setup ingest failed: {ingest.stderr[-400:]}")
    question = f"Mail {EMAIL} or call {PHONE}: was card {CARD} charged, IBAN {IBAN}?"
    html = work / "report.html"
    result = cli(["assemble", question, "--index", str(work / "ix"), "--budget", "1500", "--redact",
                  "--report-html", str(html), "--mode", "bm25", "--quiet"])
    check(result.returncode == 0, f"assemble exit {result.returncode}: {result.stderr[-400:]}")
    _clean("the HTML report", html.read_text())


def attack_missing_folder_named_with_an_email(work: Path) -> None:
    for args in (["ingest", f"/data/{EMAIL}/notes", "--index", str(work / "ix"), "--redact"],
                 ["ingest", str(work / f"card-{CARD_DIGITS}.txt"), "--index", str(work / "ix2"), "--redact",
                  "--json"]):
        result = cli(args)
        no_traceback(result, "ingest of a missing path")
        check(result.returncode != 0, "ingest of a missing path succeeded")
        _clean(f"`contextkit {' '.join(args[:2])}`'s output", result.stdout + result.stderr)


def attack_unreadable_file_named_with_personal_data(work: Path) -> None:
    docs = small_corpus(work / EMAIL, 1)
    (docs / f"statement {CARD_DIGITS}.pdf").write_bytes(b"%PDF-1.4 not really a pdf " + b"\x00" * 64)
    (docs / f"call {PHONE}.txt").symlink_to(work / "nowhere.txt")  # dangling: cannot be read
    for extra in ([], ["--json"]):
        result = cli(["ingest", str(docs), "--index", str(work / "ix"), "--redact", *extra])
        no_traceback(result, "ingest")
        _clean(f"ingest {' '.join(extra)}'s output", result.stdout + result.stderr)


def attack_cli_errors_echo_personal_values(work: Path) -> None:
    """Usage errors and input errors that quote a value the user gave, with --redact on."""
    docs = small_corpus(work / "docs", 1)
    ingest = cli(["ingest", str(docs), "--index", str(work / "ix"), "--quiet", "--redact"])
    check(ingest.returncode == 0, f"setup ingest failed: {ingest.stderr[-400:]}")
    ix = str(work / "ix")
    tries = [
        ["assemble", "q", "--index", ix, "--budget", "900", "--redact", "--history", f"/tmp/{EMAIL}/chat.jsonl"],
        ["assemble", "q", "--index", ix, "--budget", "900", "--redact", "--instructions", f"/tmp/{CARD_DIGITS}.txt"],
        ["assemble", "q", "--index", ix, "--budget", "900", "--redact", "--tool-output", f"/tmp/{EMAIL}.log"],
        ["assemble", "q", "--index", ix, "--budget", "900", "--redact", "--format", EMAIL],
        ["assemble", "q", "--index", ix, "--budget", "900", "--redact", "--mode", CARD_DIGITS],
        ["assemble", "q", "--index", ix, "--budget", "900", "--redact", "-k", EMAIL],
        ["assemble", "q", "--index", ix, "--budget", "900", "--redact", "--filter", EMAIL],
        ["assemble", "q", "--index", ix, "--budget", "900", "--redact", "--out", f"/nonexistent/{EMAIL}/p.txt"],
        ["assemble", "q", "--index", f"/tmp/{EMAIL}/ix.ck-index", "--budget", "900", "--redact"],
        ["assemble", "q", "--index", ix, "--redact", "--model", EMAIL],
        ["ingest", str(docs), "--index", ix, "--redact", "--header", "{" + EMAIL],
        ["ingest", str(docs), "--index", ix, "--redact", "--embed-model", f"/models/{EMAIL}"],
        ["search", "tower", "--index", ix, "--filter", EMAIL],  # the index redacts: so does what search prints
        ["redact", f"/tmp/{EMAIL}/ticket.txt"],  # the command whose values are never printed
        ["ingest", str(docs), "--index", str(work / f"{EMAIL}.txt" / "ix"), "--redact"],  # cannot be made
    ]
    (work / f"{EMAIL}.txt").write_text("a file where the index folder would go\n")
    history = work / "bad.jsonl"
    history.write_text(f'{{"role": "user", "content": "hi"}}\n{{"role": "{EMAIL}", "content": "x"}}\n')
    tries.append(["assemble", "q", "--index", ix, "--budget", "900", "--redact", "--history", str(history)])
    leaks = []
    for args in tries:
        result = cli(args)
        no_traceback(result, " ".join(args[:2]))
        found = _leaks(result.stdout + result.stderr)
        if found:
            leaks.append(f"`{' '.join(a if len(a) < 40 else a[:37] + '...' for a in args)}` (exit "
                         f"{result.returncode}): {result.stderr.strip()[-160:]}")
    check(not leaks, f"{len(leaks)} of {len(tries)} errors echo a planted value: " + " | ".join(leaks))


def attack_search_echoes_the_query_of_a_redacting_index(work: Path) -> None:
    docs = _planted_corpus(work)
    ingest = cli(["ingest", str(docs), "--index", str(work / "ix"), "--quiet", "--redact"])
    check(ingest.returncode == 0, f"setup ingest failed: {ingest.stderr[-400:]}")
    for extra in ([], ["--json"]):
        result = cli(["search", f"what did {EMAIL} pay with card {CARD}?", "--index", str(work / "ix"),
                      "--mode", "bm25", *extra])
        check(result.returncode == 0, f"search exit {result.returncode}: {result.stderr[-300:]}")
        _clean(f"search {' '.join(extra)}'s output", result.stdout + result.stderr)


_IN_PROCESS = """
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
    for args in json.loads(sys.argv[1]):
        try:
            app(args, standalone_mode=False)
        except SystemExit:
            pass
        except Exception as exc:
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
    spans = []
    for s in exporter.get_finished_spans():
        spans.append({"name": s.name, "attributes": dict(s.attributes or {}),
                      "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in s.events],
                      "status": str(s.status.description)})
    Path("spans.json").write_text(json.dumps(spans, default=str))
    Path("debug.log").write_text(log.getvalue())
"""


def attack_planted_values_reach_no_output(work: Path) -> None:
    """The whole pipeline with redaction on, every output grepped (the test the issue asks for)."""
    docs = _planted_corpus(work)
    ix = str(work / "ix")
    question = f"Did {EMAIL} pay with card {CARD}? Call {PHONE}; refund to IBAN {IBAN}."
    history = work / "history.jsonl"
    history.write_text("\n".join(json.dumps(m) for m in [
        {"role": "user", "content": f"I am {EMAIL}, my card is {CARD}"},
        {"role": "assistant", "content": f"Noted, and your phone {PHONE}?"},
        {"role": "user", "content": f"Yes, and my IBAN is {IBAN}"}]) + "\n")
    (work / "tool.log").write_text(f"lookup {EMAIL}: card {CARD} declined; callback {PHONE}\n")
    out = work / "out"
    out.mkdir()
    assemble = ["assemble", question, "--index", ix, "--budget", "3000", "--redact", "--history", str(history),
                "--tool-output", str(work / "tool.log"), "--report", str(out / "report.json"),
                "--report-html", str(out / "report.html"), "--messages", str(out / "messages.json"),
                "--audit-log", str(out / "audit.jsonl"), "--out", str(out / "prompt.txt")]
    outputs: dict[str, str] = {}
    for name, args in {
        "ingest": ["ingest", str(docs), "--index", ix, "--redact"],
        "ingest again --json": ["ingest", str(docs), "--index", ix, "--redact", "--json"],
        "search": ["search", question, "--index", ix],
        "search --json": ["search", question, "--index", ix, "--json"],
        "assemble": [*assemble, "--mode", "bm25"],
        "assemble --json": [*assemble, "--json", "--mode", "hybrid"],
        "info": ["info", "--index", ix],
    }.items():
        result = cli(args)
        no_traceback(result, name)
        check(result.returncode == 0, f"{name}: exit {result.returncode}: {result.stderr[-300:]}")
        outputs[f"{name} stdout"], outputs[f"{name} stderr"] = result.stdout, result.stderr
    for path in out.iterdir():
        outputs[path.name] = path.read_text()
    calls = [["search", question, "--index", ix, "--mode", "dense"], [*assemble, "--mode", "hybrid"],
             ["ingest", str(work / EMAIL / "missing"), "--index", str(work / "ix2"), "--redact"],  # a failure's trace
             ["assemble", question, "--index", ix, "--budget", "5", "--redact", "--history", str(history)]]
    try:
        traced = python(textwrap.dedent(_IN_PROCESS).replace("json.loads(sys.argv[1])", repr(calls)), cwd=work,
                        timeout=240)
    except subprocess.TimeoutExpired:
        check(False, "the traced run hung")
    check((work / "spans.json").exists(), f"the traced run failed: {traced.stderr[-500:]}")
    outputs["DEBUG logs"] = (work / "debug.log").read_text() + traced.stderr
    outputs["OpenTelemetry spans"] = (work / "spans.json").read_text()
    check(json.loads(outputs["OpenTelemetry spans"]), "no span was recorded (is opentelemetry-sdk installed?)")
    store = subprocess.run(["sqlite3", str(work / "ix" / "store.sqlite"), ".dump"], capture_output=True, text=True,
                           errors="replace")
    if store.returncode == 0:
        outputs["store.sqlite"] = store.stdout
    leaks = [f"{where}: {_leaks(text)} ...{_around(text, _leaks(text)[0])}..." for where, text in outputs.items()
             if _leaks(text)]
    check(not leaks, f"{len(leaks)} of {len(outputs)} outputs hold planted values: " + " || ".join(leaks))

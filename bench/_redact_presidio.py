"""The held-out part of ``bench_redact.py``: presidio-research's labelled sentences, and the clean corpora,
each scored with this tree's redactor and with the redactor of an older commit in the same run.

presidio-research (MIT, ``git clone https://github.com/microsoft/presidio-research``) ships
``data/synth_dataset_v2.json``: generated sentences with labelled spans (``PHONE_NUMBER``, ``US_SSN``,
``US_DRIVER_LICENSE``, ``CREDIT_CARD``, ``PERSON``, ``STREET_ADDRESS`` ...). A span is *fully masked*
when every letter and digit of it lies inside a reported span (of any kind). A ``DATE_TIME`` span
right after a birth word ("born", "birth", "DOB") is scored as a date of birth.

The baseline is the redactor at ``--baseline-rev`` (default 54fde72, before issue 29), exported with
``git archive`` into a temporary folder and run in a subprocess on the same texts: before and after
in one run, with nothing of the old code kept in the tree. Records are split by position: the
first half may be read to tune rules, the second half is the held-out figure.

The clean corpora (SciFact abstracts, the PEPs, Tiny Shakespeare) hold no planted value: every
ID or DOB span there is a false positive, and so is every span the old redactor did not report.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

HOW_TO_GET = ("presidio-research's labelled sentences are needed: git clone https://github.com/microsoft/presidio-research "
              "and pass --presidio presidio-research/data/synth_dataset_v2.json")
SCORED = ("PHONE_NUMBER", "US_SSN", "US_DRIVER_LICENSE", "CREDIT_CARD", "EMAIL_ADDRESS", "IBAN_CODE", "IP_ADDRESS",
          "DATE_OF_BIRTH", "PERSON", "STREET_ADDRESS")
_BIRTH = re.compile(r"(?i:born|birth|\bdob\b|d\.o\.b)[^.\n]{0,12}\Z")
_OLD_RUNNER = """
import json, sys
from contextkit.compressors.redact import PIIRedactor
texts = json.load(open(sys.argv[1], encoding="utf-8"))
import contextkit
print("baseline redactor from", contextkit.__file__.rsplit("/", 2)[0], file=sys.stderr)
out = [[list(s[:3]) for s in PIIRedactor().detect(t)] for t in texts]
json.dump(out, open(sys.argv[2], "w", encoding="utf-8"))
"""

Spans = list[list[tuple[int, int, str]]]


def load_presidio(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        print(f"{path}: not found. {HOW_TO_GET}", file=sys.stderr)
        raise SystemExit(2)
    records: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return records


def old_spans(repo: Path, rev: str, texts: list[str]) -> Spans | None:
    """The spans the redactor at ``rev`` reports on ``texts`` (None when git cannot export it)."""
    with tempfile.TemporaryDirectory(prefix="redact-baseline-") as tmp:
        archive = Path(tmp) / "old.tar"
        done = subprocess.run(["git", "-C", str(repo), "archive", "-o", str(archive), rev, "contextkit"],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"(no baseline: git archive {rev} failed: {done.stderr.strip()[:200]})")
            return None
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        src, dst = Path(tmp) / "in.json", Path(tmp) / "out.json"
        src.write_text(json.dumps(texts), encoding="utf-8")
        subprocess.run([sys.executable, "-c", _OLD_RUNNER, str(src), str(dst)], env={"PYTHONPATH": tmp, "PATH": ""},
                       cwd=tmp, check=True)  # not the repository's folder: "-c" puts the cwd first on sys.path
        return [[(a, b, k) for a, b, k in doc] for doc in json.loads(dst.read_text(encoding="utf-8"))]


def _labelled_spans(rec: dict[str, Any]) -> list[tuple[str, int, int]]:
    text = rec["full_text"]
    out = []
    for s in rec["spans"]:
        kind, a, b = s["entity_type"], s["start_position"], s["end_position"]
        if kind == "DATE_TIME" and _BIRTH.search(text[max(0, a - 30):a]):
            kind = "DATE_OF_BIRTH"
        out.append((kind, a, b))
    return out


def _masked(text: str, a: int, b: int, spans: list[tuple[int, int, str]]) -> bool:
    covered = {i for s, e, _ in spans for i in range(max(s, a), min(e, b))}
    return all(i in covered for i in range(a, b) if text[i].isalnum())


def presidio_report(records: list[dict[str, Any]], new: Spans, old: Spans | None,
                    ner_name: str | None) -> dict[str, Any]:
    half = len(records) // 2
    rows: dict[str, dict[str, Counter[str]]] = {}
    for i, rec in enumerate(records):
        part = "tune" if i < half else "held_out"
        for kind, a, b in _labelled_spans(rec):
            if kind not in SCORED:
                continue
            c = rows.setdefault(kind, {"tune": Counter(), "held_out": Counter()})[part]
            c["n"] += 1
            c["new"] += _masked(rec["full_text"], a, b, new[i])
            if old is not None:
                c["old"] += _masked(rec["full_text"], a, b, old[i])
    print(f"\npresidio-research synth_dataset_v2: {len(records)} sentences; records 0-{half - 1} may tune "
          f"(phone label words were chosen after reading the whole file's phone misses: its phone figure is "
          f"not held out), {half}-{len(records) - 1} held out")
    print(f"share of labelled spans fully masked{'' if old is not None else ' (no baseline)'}; "
          f"NER backend: {ner_name or 'none'}")
    print(f"{'entity':18s} {'held-out n':>10s} {'old':>6s} {'new':>6s}   {'tune n':>6s} {'old':>6s} {'new':>6s}")
    out: dict[str, Any] = {}
    for kind in SCORED:
        if kind not in rows:
            continue
        h, t = rows[kind]["held_out"], rows[kind]["tune"]
        out[kind] = {p: {k: v for k, v in c.items()} for p, c in rows[kind].items()}

        def share(c: Counter[str], key: str) -> str:
            return f"{c[key] / c['n']:.3f}" if c["n"] and (key == "new" or old is not None) else "-"
        print(f"{kind:18s} {h['n']:10d} {share(h, 'old'):>6s} {share(h, 'new'):>6s}   {t['n']:6d} "
              f"{share(t, 'old'):>6s} {share(t, 'new'):>6s}")
    if not ner_name:
        print("(PERSON and STREET_ADDRESS need an NER backend: --ner-spacy MODEL with a spaCy model installed)")
    return out


def clean_corpora(data: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    scifact = data / "beir_scifact" / "corpus.jsonl"
    if scifact.is_file():
        with scifact.open(encoding="utf-8") as fh:
            out["scifact"] = [f"{r['title']} {r['text']}" for r in map(json.loads, fh)]
    peps = sorted((data / "python_peps" / "peps").glob("pep-*.rst"))
    if peps:
        out["peps"] = [p.read_text(encoding="utf-8") for p in peps]
    shakespeare = data / "tinyshakespeare" / "input.txt"
    if shakespeare.is_file():
        out["shakespeare"] = shakespeare.read_text(encoding="utf-8").split("\n\n")
    return out


def clean_report(name: str, texts: list[str], new: Spans, old: Spans | None, show: int) -> dict[str, Any]:
    """Spans of the new kinds, and spans the old redactor did not report, on text with nothing planted."""
    new_kinds = [(t, s) for t, doc in zip(texts, new, strict=True) for s in doc if s[2] in ("ID", "DOB")]
    changed = [] if old is None else [(t, s) for t, a, b in zip(texts, new, old, strict=True)
                                      for s in sorted(set(map(tuple, a)) - set(map(tuple, b)))]
    print(f"  {name:12s} {len(texts):6d} texts: ID/DOB spans {len(new_kinds)}, spans the old redactor did not "
          f"report {len(changed) if old is not None else '-'} (all spans: new {sum(map(len, new))}"
          f"{'' if old is None else f', old {sum(map(len, old))}'})")
    for t, (a, b, k) in (new_kinds + changed)[:show]:
        print(f"    {k}: {t[a:b]!r} in {t[max(0, a - 30):b + 10]!r}")
    return {"texts": len(texts), "id_dob_spans": len(new_kinds), "new_only_spans": None if old is None else len(changed)}

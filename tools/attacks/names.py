"""File names as an attacker or a careless user makes them (issue 33): bytes that are not UTF-8,
control characters, names that look like options."""

from __future__ import annotations

import os
from pathlib import Path

from tools.attacks._harness import check, cli, no_traceback, small_corpus


def attack_latin1_file_name_does_not_stop_ingest(work: Path) -> None:
    docs = small_corpus(work / "docs", 2)
    with open(os.path.join(os.fsencode(docs), b"caf\xe9.txt"), "wb") as handle:
        handle.write(b"The cafe opens at 7 am and serves 12 kinds of tea.\n")
    result = cli(["ingest", str(docs), "--index", str(work / "ix"), "--quiet", "--json"])
    no_traceback(result, "ingest")
    check(result.returncode == 0, f"ingest exit {result.returncode}: {result.stderr[-400:]}")
    search = cli(["search", "--index", str(work / "ix"), "twelve kinds of tea", "-k", "1", "--json"])
    check(search.returncode == 0 and "caf" in search.stdout, f"the Latin-1 file was not searchable: {search.stdout[-300:]}")


def attack_control_characters_in_file_name(work: Path) -> None:
    docs = small_corpus(work / "docs", 1)
    (docs / "evil\x1b[31mred\x07.txt").write_text("Terminal escapes in a name must not reach the terminal.\n")
    result = cli(["ingest", str(docs), "--index", str(work / "ix")])
    no_traceback(result, "ingest")
    check(result.returncode == 0, f"ingest exit {result.returncode}")
    check("\x1b[31m" not in result.stdout + result.stderr, "an escape sequence from a file name reached the terminal")


def attack_file_name_that_looks_like_an_option(work: Path) -> None:
    docs = small_corpus(work / "docs", 1)
    (docs / "--prune.txt").write_text("A file named like an option is just a file.\n")
    result = cli(["ingest", str(docs), "--index", str(work / "ix"), "--quiet", "--json"])
    no_traceback(result, "ingest")
    check(result.returncode == 0, f"ingest exit {result.returncode}")

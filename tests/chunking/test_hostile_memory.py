"""Memory is bounded on every text shape (issue 33).

A run with no boundary once went to tiktoken as one piece (its byte-pair merge costs ~50 bytes a
byte: a 300 MiB file of ``=`` took 14.8 GB) and to the streaming chunker as one window (no stable
boundary to end a window at). Each hostile shape is chunked here in a child process under an
address-space cap (``RLIMIT_AS``, as ``ulimit -v``), streamed in small windows, and its peak resident
memory must stay near that of a small text. The exactness side: a long stretch is cut where tiktoken
restarts anyway, so its tokens do not change, streaming still equals chunking the whole text, and
sparse or NUL-filled files are reported, not chunked."""

from __future__ import annotations

import base64
import json
import os
import random
import resource
import subprocess
import sys
from pathlib import Path

import pytest

import contextkit.core.tokenizers as tokenizers
from contextkit.chunking import TokenChunker
from contextkit.core.tokenizers import get_tokenizer
from contextkit.loaders import SourceFile, TextStream, load_file

REPO = Path(__file__).resolve().parents[2]
#: The child's address-space cap: a small text needs ~190 MiB of it (numpy, regex, the BPE ranks).
CAP_MIB = 512
#: Resident memory 4 MiB of a hostile text may add to the child, streamed in 64 KiB windows (measured: 0-2
#: MiB; before the fix 62 MiB for tab-separated words, 91 for digits, 215 for ``=``).
GROWTH_MIB = 32

_CHILD = r"""
import json, resource, sys
from contextkit.chunking import TokenChunker
unit, size = sys.argv[1], int(sys.argv[2])
chunker = TokenChunker(chunk_size=128, chunk_overlap=16)
list(chunker.chunk_stream(["A small text to warm up. " * 2000], window_chars=1 << 16))
before = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])  # KiB; VmHWM starts again at exec, ru_maxrss carries the parent's peak
block = unit * max(1, (1 << 16) // len(unit))
blocks = (block for _ in range(size // len(block.encode())))
n = worst = 0
for i, chunk in enumerate(chunker.chunk_stream(blocks, window_chars=1 << 16)):
    n += 1
    if i % 31 == 0:
        worst = max(worst, chunker.tokenizer.count(chunk.text))
grown = (int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) - before) // 1024
print(json.dumps({"chunks": n, "worst": worst, "grown_mib": grown}))
"""

_WORDS = " ".join(random.Random(1).choice(["alpha", "beta", "gamma.", "delta"]) for _ in range(20_000)) + " "
_BASE64 = base64.b64encode(random.Random(2).randbytes(48_000)).decode()
_MINIFIED = 'a=function(b){return(b*2)};if(x<3){y=[1,2,3].map(a)}else{z.q("k",{p:1})};'

SHAPES = {
    "equals": "=",
    "letters": "a",
    "accented": "é",
    "emoji": "\U0001F600",
    "digits": "7",
    "white_space": " " * 3000 + "\n" * 50 + "\t",
    "tabs": "word\t",  # no stable boundary at all, and no long run
    "base64": _BASE64,
    "minified": _MINIFIED,
    "one_line_of_words": _WORDS,  # stable boundaries: held before the fix too
}


def _limit() -> None:
    cap = CAP_MIB << 20
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_hostile_shape_streams_in_bounded_memory(shape: str) -> None:
    """4 MiB of each shape, streamed in 64 KiB windows under a 512 MiB address-space cap: it
    finishes, every chunk fits, and the peak grows by at most 32 MiB (before the fix a run of
    ``=`` went to tiktoken as one piece, and a text with no stable boundary was one window)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    child = subprocess.run([sys.executable, "-c", _CHILD, SHAPES[shape], str(4 << 20)], capture_output=True,
                           text=True, env=env, preexec_fn=_limit, timeout=300)
    assert child.returncode == 0, f"died under a {CAP_MIB} MiB cap: {child.stderr[-600:]}"
    result = json.loads(child.stdout.strip().splitlines()[-1])
    assert (result["chunks"] > 0 or shape == "white_space") and result["worst"] <= 128  # white space: no chunk
    assert result["grown_mib"] <= GROWTH_MIB, result


def test_a_long_run_is_encoded_in_bounded_parts() -> None:
    """A 4 MiB run of ``=`` is counted under the cap (tiktoken alone needed ~270 MiB and 9 s for it)."""
    code = ("import resource\nfrom contextkit.core.tokenizers import get_tokenizer\n"
            "tok = get_tokenizer('cl100k_base'); tok.count('warm up')\n"
            "hwm = lambda: int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])\n"
            "before = hwm()\n"
            "n = tok.count('=' * (4 << 20))\n"
            "print(n, (hwm() - before) // 1024)")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                           preexec_fn=_limit, timeout=120)
    assert child.returncode == 0, child.stderr[-600:]
    count, grown = map(int, child.stdout.split())
    assert count >= (4 << 20) // 64 and grown <= GROWTH_MIB


# ----------------------------------------------------------------------------- exactness


@pytest.fixture
def short_stretches(monkeypatch: pytest.MonkeyPatch) -> int:
    """Stretches cut at 300 characters, so small texts exercise every cut."""
    monkeypatch.setattr(tokenizers, "MAX_STRETCH_CHARS", 300)
    return 300


def _texts() -> dict[str, str]:
    rng = random.Random(3)
    cjk = "".join(rng.choice("的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年") for _ in range(3000))
    return {
        "equals": "=" * 9000, "letters": "a" * 9000, "accented": "é" * 4000, "emoji": "\U0001F600" * 2000,
        "digits": "7" * 9000, "spaces": " " * 9000, "white_space": "\n \t" * 3000, "tabs": "word\t" * 1500,
        "base64": _BASE64[:8000], "minified": _MINIFIED * 100, "cjk": cjk + "。" + "中文" * 1000,
        "mixed": "Intro text here.\n\n" + "=" * 3000 + "\nmore words" * 50 + "\U0001F600" * 1000 + " end.",
        "words": _WORDS[:8000],
    }


def test_stretches_without_a_long_piece_keep_their_tokens(short_stretches: int) -> None:
    """A stretch with no stable boundary but no long piece either (CJK prose, a base64 blob, code)
    is cut where tiktoken restarts anyway: its tokens are tiktoken's, exactly."""
    tok = get_tokenizer("cl100k_base")
    for name in ("base64", "minified", "cjk", "tabs", "words", "accented", "emoji"):
        text = _texts()[name]
        assert tok.restarts(text) or name == "words", name
        assert tok.encode(text) == tok.encoding.encode_ordinary(text), name


def test_the_encoding_restarts_at_every_restart(short_stretches: int) -> None:
    """``encode(text) == encode(text[:p]) + encode(text[p:])`` at each restart, and a text that
    starts at one is cut alike: what lets a stream end a window there."""
    tok = get_tokenizer("cl100k_base")
    for name, text in _texts().items():
        ids = tok.encode(text)
        cuts = tok.restarts(text)
        for p in cuts[:: max(1, len(cuts) // 4)]:
            assert tok.encode(text[:p]) + tok.encode(text[p:]) == ids, (name, p)
            assert [c - p for c in cuts if c > p] == tok.restarts(text[p:]), (name, p)


@pytest.mark.parametrize("window", [97, 1000])
def test_streaming_a_hostile_text_equals_chunking_it_whole(short_stretches: int, window: int) -> None:
    """Windows that end at restarts give exactly the chunks of the whole text, each within budget."""
    tok = get_tokenizer("cl100k_base")
    chunker = TokenChunker(chunk_size=64, chunk_overlap=8, tokenizer=tok)
    for name, text in _texts().items():
        whole = [(c.start, c.end, c.token_count) for c in chunker.chunk(text)]
        blocks = [text[i : i + 333] for i in range(0, len(text), 333)]
        streamed = [(c.start, c.end, c.token_count) for c in chunker.chunk_stream(blocks, window_chars=window)]
        assert streamed == whole, name
        assert all(tok.count(text[a:b]) == n <= 64 for a, b, n in whole), name


def test_a_normal_text_has_no_restart() -> None:
    """Prose and code have stable boundaries well within the limit: tiktoken sees them whole."""
    text = (REPO / "contextkit" / "chunking" / "_cuts.py").read_text() * 3
    tok = get_tokenizer("cl100k_base")
    assert tok.restarts(text) == []
    assert tok.encode(text) == tok.encoding.encode_ordinary(text)


# ----------------------------------------------------------------------------- NUL bytes


def test_a_sparse_file_is_reported_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "sparse.txt"
    path.write_text("Text first, then a hole.\n" * 50_000)
    os.truncate(path, 1 << 30)
    issue = TextStream(SourceFile(path, "sparse.txt")).check()
    assert issue is not None and issue.path == "sparse.txt"
    assert "sparse" in issue.reason or "NUL" in issue.reason  # a file system without SEEK_HOLE: the NUL run


def test_nul_bytes_after_the_sniff_are_reported(tmp_path: Path) -> None:
    """The binary sniff reads the first 8 KiB; a run of NUL bytes later fails the file too, streamed
    or whole, naming its offset."""
    path = tmp_path / "late_nul.txt"
    path.write_bytes(b"plain text\n" * 2000 + b"\x00" * 5000 + b"more\n")
    issue = TextStream(SourceFile(path, "late_nul.txt"), block_bytes=4096).check()
    assert issue is not None and "NUL bytes at offset 22000" in issue.reason
    result = load_file(SourceFile(path, "late_nul.txt"))
    assert not result.documents and "NUL bytes at offset 22000" in result.errors[0].reason

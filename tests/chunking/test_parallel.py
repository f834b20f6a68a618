"""``TokenChunker(workers=N)``: one long text cut on several threads gives exactly the serial chunks."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextkit.chunking import TokenChunker, _parallel
from contextkit.errors import InvalidArgumentError


def _spans(chunks):
    return [(c.start, c.end, c.token_count, c.text) for c in chunks]


@pytest.fixture
def small_thresholds(monkeypatch):
    """Parallel cuts for small texts, so a property test can afford many of them."""
    monkeypatch.setattr(_parallel, "MIN_PARALLEL_CHARS", 1)
    monkeypatch.setattr(_parallel, "TAIL_CHARS", 1)


_PIECES = st.sampled_from([
    "word", "Word", " ", "  ", "\n", "\n\n", ". ", "? ", "Dr. ", "2.5 mg", "x = f(a, b)\n", "\t",
    "日本語の文。", "emoji 😀 ", "👩‍👩‍👧", "é", "//", "/path/to", "\r\n", "ÄÖÜ", "1,000,000", "\u3000",
])


class TestParallelCut:
    @pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
    @pytest.mark.parametrize("workers", [2, 3, 5])
    def test_peps_equal_the_serial_cut(self, peps, name, workers):
        text = "\n\n".join(p.read_text(encoding="utf-8") for p in peps[:90])
        serial = TokenChunker(256, 32, tokenizer=name).chunk(text)
        chunker = TokenChunker(256, 32, tokenizer=name, workers=workers)
        assert len(text) > _parallel.MIN_PARALLEL_CHARS
        # The parallel path itself ran (chains met), not the serial fallback.
        assert _parallel.split_parallel(chunker.tokenizer, text, 256, 32, 0.5, workers) is not None
        assert _spans(chunker.chunk(text)) == _spans(serial)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(pieces=st.lists(_PIECES, min_size=0, max_size=400), size=st.integers(6, 40),
           overlap=st.integers(0, 5), workers=st.integers(2, 6))
    def test_any_text_equals_the_serial_cut(self, small_thresholds, pieces, size, overlap, workers):
        text = "".join(pieces)
        serial = TokenChunker(size, overlap)
        parallel = TokenChunker(size, overlap, workers=workers)
        assert _spans(parallel.chunk(text)) == _spans(serial.chunk(text))

    def test_chains_that_never_meet_fall_back_to_one_thread(self, small_thresholds):
        # Words only, no better boundary: speculative chains stay out of step; the result is still exact.
        text = " ".join(f"w{i % 7}" for i in range(5000))
        chunker = TokenChunker(40, 10, workers=4)
        assert _spans(chunker.chunk(text)) == _spans(TokenChunker(40, 10).chunk(text))

    def test_hugging_face_tokenizer_is_cut_on_one_thread(self, small_thresholds):
        chunker = TokenChunker(32, 4, tokenizer="model", workers=2)
        assert _parallel.split_parallel(chunker.tokenizer, "a b " * 400, 32, 4, 0.5, 2) is None
        assert _spans(chunker.chunk("a b " * 400)) == _spans(TokenChunker(32, 4, tokenizer="model").chunk("a b " * 400))

    def test_workers_below_one_refused(self):
        with pytest.raises(InvalidArgumentError, match="workers"):
            TokenChunker(workers=0)

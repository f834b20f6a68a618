import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from contextkit.chunking import HeaderTooLargeError, TokenChunker
from contextkit.records import Document

# Text that exercises every boundary kind, plus CJK, emoji, combining marks and CRLF.
ALPHABET = st.sampled_from(list("abcdefgh  ...!?,;\n\n\r\t'\"()/-_0123456789éü中文字😀👍🏽\u0301\u200b"))
TEXT = st.one_of(
    st.text(ALPHABET, max_size=3000),
    st.text(max_size=800),  # any unicode at all
    st.lists(st.sampled_from(["Para one.", "Second sentence!", "\n\n", "\n", " ", "word", "中文。", "😀"]),
             max_size=400).map("".join),
)
SIZES = st.tuples(st.integers(8, 120), st.integers(0, 40)).filter(lambda t: t[1] < t[0])


def check_invariants(chunker: TokenChunker, text: str) -> list:
    tok = chunker.tokenizer
    chunks = chunker.chunk(Document(id="d", text=text))
    for c in chunks:
        assert text[c.start : c.end] == c.text  # offsets exact
        assert tok.count(c.text) == c.token_count  # counts exact
        assert tok.count(c.header + c.text) == c.total_tokens <= chunker.chunk_size  # size bound, header included
        assert not c.text.isspace() and c.text
    covered = [False] * len(text)
    for c in chunks:
        covered[c.start : c.end] = [True] * (c.end - c.start)
    assert all(covered[i] or text[i].isspace() for i in range(len(text)))  # every non-space char is in a chunk
    for a, b in zip(chunks, chunks[1:]):
        assert a.start < b.start <= a.end or a.end <= b.start  # ordered, never going back
        assert all(text[i].isspace() for i in range(a.end, b.start))  # gaps are white space only
        if b.start < a.end:
            assert tok.count(text[b.start : a.end]) <= chunker.chunk_overlap  # overlap bound
    return chunks


class TestTokenChunker:
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(text=TEXT, sizes=SIZES)
    def test_invariants_cl100k(self, text, sizes):
        chunks = check_invariants(TokenChunker(*sizes), text)
        assert chunks == TokenChunker(*sizes).chunk(Document(id="d", text=text))  # deterministic

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(text=TEXT, sizes=SIZES)
    def test_invariants_o200k(self, text, sizes):
        check_invariants(TokenChunker(*sizes, tokenizer="o200k_base"), text)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(text=st.text(ALPHABET, max_size=1500), sizes=SIZES)
    @example(text="0;0;0;0;0\u0301", sizes=(8, 0))  # an accent BERT's normaliser drops, at the end: no chunk had it
    @example(text="ab\u0301 \u0301cd", sizes=(8, 0))
    def test_invariants_model_tokenizer(self, text, sizes):
        check_invariants(TokenChunker(*sizes, tokenizer="model"), text)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(text=TEXT, title=st.text(ALPHABET, max_size=40))
    def test_invariants_with_header(self, text, title):
        chunker = TokenChunker(64, 8, header="title: {title}\nsource: {source}")
        doc = Document(id="d", text=text, source="x.md", metadata={"title": title})
        for c in chunker.chunk(doc):
            assert c.header.startswith("title: ") and c.header.endswith("\n")
            assert chunker.tokenizer.count(c.header + c.text) == c.total_tokens <= 64

    def test_header_alone_too_big_is_a_clear_error(self):
        chunker = TokenChunker(16, 2, header="{title}")
        with pytest.raises(HeaderTooLargeError, match="header alone is"):
            chunker.chunk(Document(id="d", text="body", metadata={"title": "long title " * 20}))

    @pytest.mark.parametrize("text", ["", "   ", "\n\n\t \r\n"])
    def test_empty_and_whitespace_documents_give_no_chunks(self, text):
        assert TokenChunker(32, 4).chunk(text) == []

    def test_prefers_paragraph_then_sentence_boundaries(self):
        para = "This is a sentence about chunking. " * 6
        text = (para.strip() + "\n\n") * 6
        chunks = TokenChunker(100, 0).chunk(text)
        assert len(chunks) > 1
        assert all(c.text.endswith("\n\n") for c in chunks[:-1])
        chunks = TokenChunker(30, 0).chunk(para * 4)
        assert all(c.text.rstrip().endswith(".") for c in chunks[:-1])

    def test_crlf_is_kept(self):
        text = "line one\r\nline two\r\n\r\nnew paragraph here\r\n" * 20
        check_invariants(TokenChunker(20, 4), text)

    def test_one_five_megabyte_line(self):
        text = ("x" * 37 + "y" * 41 + "€") * (5_000_000 // 79)
        chunks = TokenChunker(512, 64).chunk(text)
        assert chunks[0].start == 0 and chunks[-1].end == len(text)
        tok = TokenChunker(512, 64).tokenizer
        for c in chunks[:50] + chunks[-50:]:
            assert tok.count(c.text) == c.token_count <= 512

    def test_cjk_and_emoji_never_split_a_character(self):
        text = "中文字符测试。" * 300 + "😀👍🏽🎉" * 200
        for c in check_invariants(TokenChunker(50, 10), text):
            c.text.encode("utf-8")  # a split surrogate or character would fail here

    def test_real_peps(self, peps):
        chunker = TokenChunker(512, 64)
        for path in peps[:40]:
            check_invariants(chunker, path.read_text(encoding="utf-8"))

    def test_parallel_equals_serial(self, peps):
        docs = [Document(id=p.name, text=p.read_text(encoding="utf-8")) for p in peps[:12]]
        with TokenChunker(256, 32) as chunker:
            serial = chunker.chunk_many(docs, workers=1)
            assert chunker.chunk_many(docs, workers=2) == serial
            assert chunker.chunk_many(docs[::-1], workers=2) == serial[::-1]  # the pool is reused
            assert chunker._pool is not None
        assert chunker._pool is None

    def test_to_dict_round_trip(self):
        chunker = TokenChunker(128, 16, tokenizer="o200k_base", header="{title}\n")
        again = TokenChunker.from_dict(chunker.to_dict())
        assert again.to_dict() == chunker.to_dict()

    def test_bad_settings(self):
        with pytest.raises(ValueError, match="chunk_overlap"):
            TokenChunker(10, 10)


class TestSettingsWithoutPydantic:
    """The chunker checks its settings itself (pydantic's import is most of its own); the answers
    must be ChunkerConfig's, for every value, well-typed or not."""

    _VALUE = st.one_of(
        st.integers(-3, 3000), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
        st.sampled_from(["512", "cl100k_base", "o200k_base", "{title}\n", "", "0.5", "x"]),
    )

    @settings(max_examples=400, deadline=None)
    @given(st.dictionaries(st.sampled_from(["chunk_size", "chunk_overlap", "tokenizer", "header", "min_fill",
                                            "workers", "size"]), _VALUE, max_size=6))
    def test_same_answers_as_chunker_config(self, values):
        from contextkit.chunking import ChunkerConfig
        from contextkit.chunking.token import _checked_settings

        try:
            expected = ChunkerConfig(**values).model_dump()
        except ValueError as exc:
            with pytest.raises(type(exc)):
                _checked_settings(values)
            return
        got = _checked_settings(values)
        assert got == expected
        assert [type(v) for v in got.values()] == [type(v) for v in expected.values()]

    def test_chunker_and_its_chunks_need_no_pydantic(self):
        import subprocess
        import sys

        code = ("import sys\n"
                "from contextkit.chunking import TokenChunker\n"
                "c = TokenChunker(64, 8, header='{title}\\n')\n"
                "assert c.chunk('word ' * 500) and c.to_dict()['chunk_size'] == 64\n"
                "TokenChunker.from_dict(c.to_dict())\n"
                "assert 'pydantic' not in sys.modules, 'pydantic imported'\n"
                "assert c.config.chunk_size == 64 and 'pydantic' in sys.modules\n")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr

    def test_public_names_still_resolve(self):
        import contextkit
        from contextkit.chunking import ChunkerConfig
        from contextkit.chunking.token import ChunkerConfig as again

        assert ChunkerConfig is again is contextkit.ChunkerConfig
        assert TokenChunker(100, 10).config == ChunkerConfig(chunk_size=100, chunk_overlap=10)
        with pytest.raises(ImportError):
            from contextkit.chunking import NoSuchThing  # noqa: F401

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextkit.tokenizers import HuggingFaceTokenizer, TiktokenTokenizer, TokenizerNotFoundError, get_tokenizer


class TestTiktokenTokenizer:
    @pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
    def test_loads_offline(self, name):
        tok = TiktokenTokenizer(name)
        ids = tok.encode("Hello, world!")
        assert tok.decode(ids) == "Hello, world!"
        assert tok.count("Hello, world!") == len(ids) > 0

    def test_special_token_text_is_plain_text(self, cl100k):
        assert cl100k.decode(cl100k.encode("<|endoftext|>")) == "<|endoftext|>"
        assert len(cl100k.encode("<|endoftext|>")) > 1

    def test_unknown_encoding_names_itself(self):
        with pytest.raises(TokenizerNotFoundError, match="nope_base"):
            TiktokenTokenizer("nope_base")

    def test_missing_file_error_names_the_encoding(self, monkeypatch):
        from contextkit import tokenizers

        monkeypatch.setattr(tokenizers, "_tiktoken_cache_dirs", lambda: [])
        tokenizers._load_encoding.cache_clear()
        tokenizers._check_encoding.cache_clear()
        try:
            with pytest.raises(TokenizerNotFoundError, match="p50k_base"):
                TiktokenTokenizer("p50k_base")
        finally:
            tokenizers._load_encoding.cache_clear()
            tokenizers._check_encoding.cache_clear()

    @pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
    def test_bpe_ranks_are_tiktokens_own(self, name):
        """Our parser of the BPE file gives exactly the mapping tiktoken's parser gives, both ways."""
        import tiktoken.load

        from contextkit import tokenizers

        path = _bpe_file(name)
        ours = tokenizers._load_encoding(name)._mergeable_ranks
        assert ours == tiktoken.load.load_tiktoken_bpe(str(path))
        assert tokenizers._parse_bpe(path.read_bytes(), path, verified=False) == ours

    def test_loading_writes_nothing(self, tmp_path, monkeypatch):
        """tiktoken's read_file_cached copies a local file into the cache folder; loading must not."""
        import shutil

        from contextkit import tokenizers

        path = _bpe_file("cl100k_base")
        shutil.copy(path, tmp_path / path.name)
        monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
        monkeypatch.setattr(tokenizers, "_tiktoken_cache_dirs", lambda: [tmp_path])
        tokenizers._load_encoding.cache_clear()
        try:
            assert TiktokenTokenizer("cl100k_base").count("Hello, world!") == 4
        finally:
            tokenizers._load_encoding.cache_clear()
        assert [p.name for p in tmp_path.iterdir()] == [path.name]

    def test_file_with_the_wrong_hash_is_passed_over_and_named(self, tmp_path, monkeypatch):
        from contextkit import tokenizers

        path = _bpe_file("cl100k_base")
        bad = tmp_path / "bad"
        bad.mkdir()
        (bad / path.name).write_bytes(path.read_bytes().replace(b" 0\n", b" 7\n", 1))
        tokenizers._load_encoding.cache_clear()
        try:
            monkeypatch.setattr(tokenizers, "_tiktoken_cache_dirs", lambda: [bad, path.parent])
            assert TiktokenTokenizer("cl100k_base").encoding._mergeable_ranks[b"!"] == 0  # the good copy
            tokenizers._load_encoding.cache_clear()
            monkeypatch.setattr(tokenizers, "_tiktoken_cache_dirs", lambda: [bad])
            tok = TiktokenTokenizer("cl100k_base")  # built: the file is there; it is read on first use
            with pytest.raises(TokenizerNotFoundError, match="SHA-256 differs") as err:
                tok.count("hello")
            assert str(bad / path.name) in str(err.value)
        finally:
            tokenizers._load_encoding.cache_clear()

    def test_pickled_by_name(self):
        import pickle

        from contextkit.chunking import TokenChunker

        tok = TiktokenTokenizer("o200k_base")
        tok.count("warm it up")
        blob = pickle.dumps(tok)
        assert len(blob) < 200  # the name, not the ranks
        again = pickle.loads(blob)
        assert again.encode("Hello, world!") == tok.encode("Hello, world!")
        chunker = TokenChunker(16, 2, tokenizer="o200k_base")
        assert chunker.chunk("one two three " * 40)
        assert len(pickle.dumps(chunker)) < 2000
        assert pickle.loads(pickle.dumps(chunker)).chunk("one two three " * 40) == chunker.chunk("one two three " * 40)

    def test_bad_line_in_an_unchecked_file_is_named(self, tmp_path):
        from contextkit import tokenizers

        with pytest.raises(TokenizerNotFoundError, match=r"x\.tiktoken, line 2"):
            tokenizers._parse_bpe(b"IQ== 0\nnot-a-line\n", tmp_path / "x.tiktoken", verified=False)

    @settings(max_examples=200, deadline=None)
    @given(st.text(max_size=300))
    def test_offsets_end_each_token(self, text):
        tok = TiktokenTokenizer("cl100k_base")
        ids, ends = tok.encode_with_offsets(text)
        assert len(ids) == len(ends)
        for i, end in enumerate(ends):
            if end >= 0:  # the tokens up to here decode to exactly text[:end]
                assert tok.encoding.decode_bytes(ids[: i + 1]) == text[:end].encode("utf-8", "surrogatepass")
        if ids:
            assert ends[-1] == len(text)

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet=st.sampled_from(list("ab .,!?'\n\r\t/:-1é😀中 ")), max_size=200))
    def test_stable_boundaries_split_exactly(self, text):
        for name in ("cl100k_base", "o200k_base"):
            tok = TiktokenTokenizer(name)
            cuts = [0, *tok.stable_boundaries(text).tolist(), len(text)]
            parts = [text[a:b] for a, b in zip(cuts, cuts[1:])]
            assert sum(tok.count(p) for p in parts) == tok.count(text)

    @settings(max_examples=3000, deadline=None)
    @given(st.text(alphabet=st.sampled_from(list("a .\n/'s\t\r1")), max_size=10))
    def test_each_stable_boundary_on_tricky_short_text(self, text):
        # Short strings over the characters the pre-tokenizer regexes treat specially:
        # every single cut must leave the two sides' tokens exactly the whole's.
        for name in ("cl100k_base", "o200k_base"):
            tok = TiktokenTokenizer(name)
            whole = tok.encode(text)
            for p in tok.stable_boundaries(text).tolist():
                assert tok.encode(text[:p]) + tok.encode(text[p:]) == whole, (name, text, p)


class TestHuggingFaceTokenizer:
    def test_model_tokenizer(self):
        tok = get_tokenizer("model")
        assert isinstance(tok, HuggingFaceTokenizer)
        ids, ends = tok.encode_with_offsets("Word pieces, please.")
        assert len(ids) == len(ends) and ends[-1] == len("Word pieces, please.")
        assert tok.stable_boundaries("x") is None

    def test_missing_model_is_a_clear_error(self, tmp_path):
        with pytest.raises(TokenizerNotFoundError):
            HuggingFaceTokenizer(str(tmp_path / "no-such-model"))


def _bpe_file(name: str):
    """The local BPE file the offline loader reads for ``name``."""
    import hashlib

    from contextkit import tokenizers

    url = f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
    key = hashlib.sha1(url.encode()).hexdigest()
    return next(d / key for d in tokenizers._tiktoken_cache_dirs() if (d / key).is_file())

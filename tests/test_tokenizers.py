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
        try:
            with pytest.raises(TokenizerNotFoundError, match="p50k_base"):
                TiktokenTokenizer("p50k_base")
        finally:
            tokenizers._load_encoding.cache_clear()

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

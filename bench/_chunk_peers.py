"""The chunkers bench_chunking.py times, and a runner that times one of them as a whole process.

Every method gets the same ``tiktoken.Encoding`` (cl100k_base, loaded offline by
contextkit's loader) and the same size and overlap. Peers that fail to import are
reported and skipped.

As a script, ``python bench/_chunk_peers.py METHOD FILE [WORKERS]`` imports what the
method needs, chunks the file's text once and prints the number of chunks: the
whole-process figure (interpreter start and imports included) is its wall time.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIZE, OVERLAP = 512, 64

ChunkFn = Callable[[str], list[Any]]  # one document's text -> its chunks (str or objects with .text)
Factory = Callable[[], ChunkFn]  # builds a fresh chunker; called outside the clock


def encoding() -> Any:
    from contextkit.tokenizers import TiktokenTokenizer

    return TiktokenTokenizer("cl100k_base").encoding  # a real tiktoken.Encoding, loaded offline


def contextkit(workers: int = 1) -> Factory:
    def build() -> ChunkFn:
        from contextkit.chunking import TokenChunker
        from contextkit.records import Document

        chunker = TokenChunker(SIZE, OVERLAP, workers=workers)
        chunker.start_workers()  # no-op for workers=1; else they start while the text is read
        return lambda t: chunker.chunk(Document(id="doc", text=t))

    return build


def _chonkie_token(enc: Any) -> Factory:
    import chonkie

    return lambda: chonkie.TokenChunker(tokenizer=enc, chunk_size=SIZE, chunk_overlap=OVERLAP).chunk


def _chonkie_sentence(enc: Any) -> Factory:
    import chonkie

    return lambda: chonkie.SentenceChunker(tokenizer=enc, chunk_size=SIZE, chunk_overlap=OVERLAP).chunk


def _semchunk(enc: Any) -> Factory:
    import semchunk

    def build() -> ChunkFn:
        chunker = semchunk.chunkerify(enc, SIZE)
        return lambda t: chunker(t, overlap=OVERLAP)  # an int >= 1 is a token count, not a ratio

    return build


def _langchain(enc: Any) -> Factory:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    # from_tiktoken_encoder() calls tiktoken.get_encoding(name), which downloads. This length
    # function is exactly what it builds (TextSplitter._tiktoken_length_function,
    # langchain-text-splitters 1.1): enc.encode with allowed_special=set(), disallowed_special="all".
    return lambda: RecursiveCharacterTextSplitter(
        chunk_size=SIZE, chunk_overlap=OVERLAP,
        length_function=lambda s: len(enc.encode(s, allowed_special=set(), disallowed_special="all")),
    ).split_text


def _llamaindex(enc: Any) -> Factory:
    from llama_index.core.node_parser import SentenceSplitter

    return lambda: SentenceSplitter(chunk_size=SIZE, chunk_overlap=OVERLAP, tokenizer=enc.encode).split_text


def _semantic_text_splitter(enc: Any) -> Factory:
    from semantic_text_splitter import TextSplitter

    # Its own Rust copy of cl100k (tiktoken-rs, built in: nothing downloaded), same size and overlap.
    return lambda: TextSplitter.from_tiktoken_model("gpt-4", SIZE, overlap=OVERLAP).chunks


PEERS: dict[str, Callable[[Any], Factory]] = {
    "tiktoken encode_ordinary": lambda enc: lambda: enc.encode_ordinary,
    "tiktoken encode(disallowed=())": lambda enc: lambda: lambda t: enc.encode(t, disallowed_special=()),
    "chonkie TokenChunker": _chonkie_token,
    "chonkie SentenceChunker": _chonkie_sentence,
    "semchunk": _semchunk,
    "langchain Recursive(tiktoken)": _langchain,
    "llamaindex SentenceSplitter": _llamaindex,
    "semantic-text-splitter": _semantic_text_splitter,
}


def peers(enc: Any, quiet: bool = False) -> dict[str, Factory]:
    """The bare tiktoken passes and every peer chunker that imports."""
    found: dict[str, Factory] = {}
    for name, make in PEERS.items():
        try:
            found[name] = make(enc)
        except ImportError as exc:
            if not quiet:
                print(f"skipped {name}: {exc}")
    return found


def factory(name: str, workers: int = 1) -> Factory:
    """One method's factory, importing only what that method needs."""
    if name == "contextkit TokenChunker":
        return contextkit(workers)
    return PEERS[name](encoding())


if __name__ == "__main__":
    method, path = sys.argv[1], sys.argv[2]
    chunk = factory(method, int(sys.argv[3]) if len(sys.argv) > 3 else 1)()
    print(len(chunk(Path(path).read_text(encoding="utf-8"))))

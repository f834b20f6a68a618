"""``TokenChunker``: token-exact chunks with overlap, cut at the best boundary.

How it stays fast and exact at once: the document is encoded once. Cuts fall
preferably on *stable* boundaries (see :meth:`Tokenizer.stable_boundaries`),
where the tokens of ``text[a:b]`` are exactly the slice of the full encoding, so
every count comes from that one pass. Only where no stable boundary exists (a
5 MB line with no spaces, CJK text, a Hugging Face tokenizer) does the chunker
fall back to token boundaries and re-encode the chunk to check it, shrinking it
until it fits. Boundaries are preferred in this order: paragraph, sentence,
line, word, token.
"""

from __future__ import annotations

import logging
import string
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
import multiprocessing
from functools import lru_cache
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contextkit.records import Chunk, Document
from contextkit.tokenizers import Tokenizer, _code_points, get_tokenizer

__all__ = ["ChunkerConfig", "HeaderTooLargeError", "TokenChunker"]

log = logging.getLogger(__name__)

PARAGRAPH, SENTENCE, LINE, WORD, TOKEN = 4, 3, 2, 1, 0
_SENTENCE_END = [ord(c) for c in ".!?。！？"]
_CLOSERS = [ord(c) for c in "\"')]»”’"]


class HeaderTooLargeError(ValueError):
    """The metadata header alone does not fit in ``chunk_size``."""


class ChunkTooSmallError(ValueError):
    """One character needs more tokens than a chunk has room for (``chunk_size`` minus the header)."""


class ChunkerConfig(BaseModel):
    """Settings of a :class:`TokenChunker` (also what an index records)."""

    model_config = ConfigDict(extra="forbid")

    chunk_size: int = Field(512, ge=1, description="maximum tokens per chunk, header included")
    chunk_overlap: int = Field(64, ge=0, description="maximum tokens shared by consecutive chunks")
    tokenizer: str = "cl100k_base"
    header: str | None = Field(
        None, description="template embedded above each chunk, e.g. '{title}\\n'; fields come from the document"
    )
    min_fill: float = Field(0.5, ge=0.0, le=1.0, description="a preferred boundary must leave the chunk this full")

    @model_validator(mode="after")
    def _check(self) -> ChunkerConfig:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be smaller than chunk_size ({self.chunk_size})"
            )
        return self


class _Fields(dict):
    def __missing__(self, key: str) -> str:
        return ""


class TokenChunker:
    """Split documents into chunks of at most ``chunk_size`` tokens.

    Constructor values are defaults; :meth:`chunk` may override the header.
    """

    def __init__(
        self,
        chunk_size: int = 512,
        chunk_overlap: int = 64,
        tokenizer: str | Tokenizer = "cl100k_base",
        header: str | Callable[[Document], str] | None = None,
        min_fill: float = 0.5,
    ) -> None:
        tok_name = tokenizer if isinstance(tokenizer, str) else tokenizer.name
        self.config = ChunkerConfig(
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            tokenizer=tok_name,
            header=header if isinstance(header, str) else None,
            min_fill=min_fill,
        )
        self._header_fn = header if callable(header) else None
        self.tokenizer = get_tokenizer(tokenizer)
        self._pool: ProcessPoolExecutor | None = None
        self._pool_size = 0

    # ------------------------------------------------------------------ API
    @property
    def chunk_size(self) -> int:
        return self.config.chunk_size

    @property
    def chunk_overlap(self) -> int:
        return self.config.chunk_overlap

    def to_dict(self) -> dict[str, Any]:
        return self.config.model_dump()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TokenChunker:
        return cls(**ChunkerConfig(**data).model_dump())

    def chunk(self, document: Document | str, header: str | None = None) -> list[Chunk]:
        """Chunks of one document (a bare string becomes a document with id ``"text"``)."""
        doc = Document(id="text", text=document) if isinstance(document, str) else document
        return self._build(doc, *self._plan(doc, header))

    def _room(self, doc: Document, header: str | None) -> tuple[str, int, int, int]:
        """The rendered header, its tokens, and the text budget and overlap it leaves a chunk."""
        head = self._render_header(doc, header)
        head_tokens = self.tokenizer.count(head) if head else 0
        if head and head_tokens >= self.chunk_size:
            raise HeaderTooLargeError(
                f"document {doc.id!r}: the metadata header alone is {head_tokens} tokens, which leaves no room "
                f"in chunk_size={self.chunk_size}; shorten the header template or raise chunk_size"
            )
        budget = self.chunk_size - head_tokens
        return head, head_tokens, budget, min(self.chunk_overlap, budget - 1)

    def _plan(self, doc: Document, header: str | None = None) -> tuple[str, list[tuple[int, int, int, int]]]:
        """The header and ``(start, end, tokens, total_tokens)`` of each chunk."""
        head, head_tokens, budget, overlap = self._room(doc, header)
        plan = []
        try:
            spans = list(self.split_text(doc.text, budget, overlap))
        except ChunkTooSmallError as exc:
            raise ChunkTooSmallError(f"document {doc.id!r}: {exc}") from None
        for start, end, tokens in spans:
            total = tokens + head_tokens
            if head and not self._junction_is_stable(doc.text, start):
                total = self.tokenizer.count(head + doc.text[start:end])
                if total > self.chunk_size:  # pragma: no cover - the budget guards this
                    raise HeaderTooLargeError(f"document {doc.id!r}: header and chunk at {start} exceed chunk_size")
            plan.append((start, end, tokens, total))
        return head, plan

    @staticmethod
    def _build(doc: Document, head: str, plan: list[tuple[int, int, int, int]]) -> list[Chunk]:
        return [
            Chunk(
                id=f"{doc.id}::{ordinal}",
                doc_id=doc.id,
                ordinal=ordinal,
                text=doc.text[start:end],
                start=start,
                end=end,
                token_count=tokens,
                header=head,
                total_tokens=total,
                metadata=dict(doc.metadata),
            )
            for ordinal, (start, end, tokens, total) in enumerate(plan)
        ]

    def chunk_many(self, documents: Iterable[Document], workers: int = 1) -> list[list[Chunk]]:
        """Chunk many documents, in ``workers`` processes when ``workers > 1``.

        Processes, not threads: the chunker's Python and NumPy steps hold the GIL.
        Workers are spawned (never forked, which is unsafe once torch has started
        threads), each builds its own chunker from :meth:`to_dict`, and the pool is
        kept for later calls until :meth:`close`. Output equals the serial output.
        """
        docs = list(documents)
        if workers <= 1 or len(docs) < 2 or self._header_fn is not None:
            return [self.chunk(d) for d in docs]
        pool = self._get_pool(workers)
        batch = max(1, min(32, len(docs) // (workers * 4)))
        plans = list(pool.map(_plan_in_worker, docs, chunksize=batch))
        return [self._build(doc, head, plan) for doc, (head, plan) in zip(docs, plans)]

    def chunk_stream(self, blocks: Iterable[str], doc_id: str = "text", source: str = "",
                     metadata: dict[str, Any] | None = None, header: str | None = None,
                     window_chars: int = 1 << 20) -> Iterator[Chunk]:
        """Chunks of a text given as consecutive pieces, with memory bounded by ``window_chars``.

        For a file too large to hold: the chunks (ids, offsets into the whole text,
        texts, token counts) equal those of :meth:`chunk` on the joined text. That
        holds because the text is encoded window by window, each window cut at a
        stable boundary (where the pre-tokenizer always restarts, so the window's
        tokens are exactly a slice of the whole text's), and every greedy decision
        looks at most ``chunk_size`` tokens ahead: a decision that would need to look
        past the window waits for the next one. Memory is a few windows, or more
        where a single run without a stable boundary (a space or a line break) is
        longer than a window. A tokenizer without stable boundaries (Hugging Face)
        cannot be windowed exactly: the text is then joined and chunked whole.
        A callable header is refused: it could read the text, which is not there.
        """
        if self._header_fn is not None:
            raise TypeError("chunk_stream needs a template header (or none), not a callable")
        doc = Document(doc_id, "", source, dict(metadata or {}))
        if self.tokenizer.stable_mask("a b") is None:
            yield from self.chunk(Document(doc_id, "".join(blocks), source, doc.metadata), header)
            return
        head, head_tokens, budget, overlap = self._room(doc, header)
        from contextkit._chunk_stream import stream_spans

        spans = stream_spans(self.tokenizer, blocks, budget, overlap, self.config.min_fill, max(1, window_chars))
        ordinal = 0
        for start, text, tokens, before in spans:
            if text.isspace() or not text:
                continue
            total = tokens + head_tokens
            if head and not (start > 0 and _stable_junction(before, text[0])):
                total = self.tokenizer.count(head + text)
            yield Chunk(id=f"{doc_id}::{ordinal}", doc_id=doc_id, ordinal=ordinal, text=text, start=start,
                        end=start + len(text), token_count=tokens, header=head, total_tokens=total,
                        metadata=dict(doc.metadata))
            ordinal += 1

    def _get_pool(self, workers: int) -> ProcessPoolExecutor:
        if self._pool is not None and self._pool_size != workers:
            self.close()
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                                             initargs=(self.to_dict(),))
            self._pool_size = workers
        return self._pool

    def close(self) -> None:
        """Stop the worker processes of :meth:`chunk_many`, if any."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __enter__(self) -> TokenChunker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------ internals
    def _render_header(self, doc: Document, override: str | None) -> str:
        if override is not None:
            template: str | None = override
        elif self._header_fn is not None:
            head = self._header_fn(doc)
            return head if not head or head.endswith("\n") else head + "\n"
        else:
            template = self.config.header
        if not template:
            return ""
        fields = _Fields({k: v for k, v in doc.metadata.items() if isinstance(k, str)})
        fields.update(id=doc.id, source=doc.source)
        head = string.Formatter().vformat(template, (), fields)
        return head if not head or head.endswith("\n") else head + "\n"

    def _junction_is_stable(self, text: str, start: int) -> bool:
        """A header ending in a newline joins a chunk that opens on a stable cut losslessly."""
        if start == 0 or self.tokenizer.stable_boundaries("") is None:
            return False
        return _stable_junction(text[start - 1], text[start])

    def split_text(self, text: str, budget: int | None = None, overlap: int | None = None) -> list[tuple[int, int, int]]:
        """``(start, end, token_count)`` spans of ``text``; the core of :meth:`chunk`."""
        import numpy as np

        budget = self.chunk_size if budget is None else budget
        overlap = self.chunk_overlap if overlap is None else overlap
        if not text or text.isspace():
            return []
        ids, ends = self.tokenizer.encode_with_offsets(text)
        n_tok = len(ids)
        if n_tok <= budget:
            return [(0, len(text), n_tok)]
        cp = _code_points(text)
        pos, tix, level, stable = _candidates(self.tokenizer, text, cp, ends)
        return _greedy(self.tokenizer, text, pos, tix, level, stable, n_tok, budget, overlap, self.config.min_fill)


def _stable_junction(before: str, here: str) -> bool:
    """Whether a cut between the characters ``before`` and ``here`` is a stable boundary (see tokenizers)."""
    return here == " " and not before.isspace() or (before == "\n" and not here.isspace() and here != "/")


def _candidates(tokenizer: Tokenizer, text: str, cp, ends):
    """Every possible cut: position, tokens before it, boundary level, stability."""
    import numpy as np

    valid = ends >= 0
    pos = np.concatenate(([0], ends[valid]))
    tix = np.concatenate(([0], np.flatnonzero(valid) + 1))
    mask = tokenizer.stable_mask(text, cp)
    stable = np.zeros(len(pos), dtype=bool) if mask is None else mask[pos]
    stable[0] = True
    stable[pos == len(text)] = True
    # Stable cuts rank 2..5 by boundary level; an unstable cut still prefers a
    # newline or a sentence end over a bare token cut but ranks below them all.
    lv = _levels(cp, pos)
    level = np.where(stable, 1.0 + lv, lv / 10.0).astype(np.float32)
    return pos, tix, level, stable


@lru_cache(maxsize=1)
def _tables():
    """Lookup tables over the Basic Multilingual Plane (other planes map to "no")."""
    import numpy as np

    sentence_end = np.zeros(0x10000, dtype=bool)
    closer = np.zeros(0x10000, dtype=bool)
    sentence_end[_SENTENCE_END] = True
    closer[_CLOSERS] = True
    return sentence_end, closer


def _levels(cp, pos):
    """Boundary level of each cut position (paragraph > sentence > line > word)."""
    import numpy as np

    sentence_end, closer = _tables()
    padded = np.zeros(len(cp) + 4, dtype=np.uint32)  # three zeros before, one after
    padded[3 : 3 + len(cp)] = cp
    prev1, prev2, prev3, here = padded[pos + 2], padded[pos + 1], padded[pos], padded[pos + 3]
    bmp1, bmp2 = np.minimum(prev1, 0xFFFF), np.minimum(prev2, 0xFFFF)
    newline = prev1 == 0x0A
    paragraph = newline & ((prev2 == 0x0A) | ((prev2 == 0x0D) & (prev3 == 0x0A)))
    ends = sentence_end[bmp1] | (closer[bmp1] & sentence_end[bmp2])
    sentence = ends & ((here == 0x20) | (here == 0x0A) | (prev1 >= 0x3000))
    level = np.full(len(pos), WORD, dtype=np.int8)
    level[newline] = LINE
    level[sentence] = SENTENCE
    level[paragraph] = PARAGRAPH
    return level


def _greedy(tok, text, pos, tix, level, stable, n_tok, budget, overlap, min_fill) -> list[tuple[int, int, int]]:
    spans = list(_walk(tok, text, pos, tix, level, stable, n_tok, budget, overlap, min_fill))
    return [sp for sp in spans if not text[sp[0] : sp[1]].isspace()]


def _walk(tok, text, pos, tix, level, stable, n_tok, budget, overlap, min_fill, s: int = 0,
          complete: bool = True) -> Generator[tuple[int, int, int], None, int | None]:
    """The greedy cut, chunk by chunk from candidate ``s``: yields ``(start, end, tokens)`` spans.

    ``complete=False`` means ``text`` is a window of a longer text that ends on a
    stable boundary: the walk then stops, returning the candidate where the next
    chunk starts, as soon as a decision would need candidates beyond the window
    (every decision looks at most ``budget`` tokens ahead). Returns None when the
    text is done. Whitespace-only spans are yielded; the caller drops them.
    """
    import numpy as np

    last = len(pos) - 1
    min_gain = max(1, int(budget * min_fill))
    while True:
        s_tok = int(tix[s])
        rest = n_tok - s_tok
        if not complete and rest <= budget:
            return s  # the chunk may reach past the window: decide in the next one
        if rest <= budget and stable[s]:
            yield int(pos[s]), len(text), rest
            return None
        hi = int(np.searchsorted(tix, s_tok + budget, "right")) - 1
        hi = max(min(hi, last), s + 1)
        lo = max(int(np.searchsorted(tix, s_tok + min_gain, "left")), s + 1)
        window = level[lo : hi + 1] if lo <= hi else level[s + 1 : hi + 1]
        base = lo if lo <= hi else s + 1
        if window.max() < 1.0 and lo > s + 1:  # no stable cut in the preferred zone: any stable cut
            stable_idx = np.flatnonzero(stable[s + 1 : hi + 1])
            if len(stable_idx):
                window, base = level[s + 1 : hi + 1], s + 1
        e = base + int(len(window) - 1 - np.argmax(window[::-1]))
        e, count = _fit(tok, text, pos, tix, stable, s, e, budget)
        yield int(pos[s]), int(pos[e]), count
        if e >= last or int(pos[e]) >= len(text):
            return None
        s = _next_start(tok, text, pos, tix, level, stable, s, e, overlap)


def _fit(tok, text, pos, tix, stable, s, e, budget) -> tuple[int, int]:
    """Exact token count of the span ``s..e``, moving ``e`` back until it fits."""
    while True:
        if stable[s] and stable[e]:
            return e, int(tix[e] - tix[s])
        count = tok.count(text[int(pos[s]) : int(pos[e])])
        if count <= budget or e <= s + 1:
            if count > budget:
                raise ChunkTooSmallError(f"the character at offset {int(pos[s])} needs {count} tokens, more than "
                                         f"the {budget} a chunk has room for; raise chunk_size or shorten the header")
            return e, count
        e -= max(1, (count - budget) // 2)
        e = max(e, s + 1)


def _next_start(tok, text, pos, tix, level, stable, s, e, overlap) -> int:
    """Where the next chunk starts: as far back as ``overlap`` allows, at the best boundary."""
    import numpy as np

    if overlap <= 0:
        return e
    lo = max(int(np.searchsorted(tix, tix[e] - overlap, "left")), s + 1)
    if lo >= e:
        return e
    window = level[lo:e]
    k = lo + int(np.argmax(window))  # earliest cut of the best level: the largest overlap
    while k < e:
        if stable[k] and stable[e]:
            return k
        if tok.count(text[int(pos[k]) : int(pos[e])]) <= overlap:
            return k
        k += 1
    return e


_worker_chunker: TokenChunker | None = None


def _init_worker(settings: dict[str, Any]) -> None:
    global _worker_chunker
    _worker_chunker = TokenChunker.from_dict(settings)


def _plan_in_worker(doc: Document) -> tuple[str, list[tuple[int, int, int, int]]]:
    assert _worker_chunker is not None
    return _worker_chunker._plan(doc)

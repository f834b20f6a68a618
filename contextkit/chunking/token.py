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
import multiprocessing
import string
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING, Any

from contextkit.chunking import _processes
from contextkit.chunking._cuts import CutRule, _candidates, _greedy, _stable_junction
from contextkit.chunking._parallel import split_parallel
from contextkit.chunking._stream import stream_spans
from contextkit.chunking.base import Chunker, chunk_metadata
from contextkit.core.config import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, DEFAULT_TOKENIZER  # why: see there
from contextkit.core.errors import (
    ChunkTooSmallError,
    HeaderTooLargeError,
    InvalidArgumentError,
)
from contextkit.core.lazy import lazy_exports
from contextkit.core.options import check_options
from contextkit.core.records import Chunk, Document
from contextkit.core.tokenizers import Tokenizer, _code_points, get_tokenizer

if TYPE_CHECKING:  # pragma: no cover
    from contextkit.chunking._config import ChunkerConfig

__all__ = ["DEFAULT_CHUNK_OVERLAP", "DEFAULT_CHUNK_SIZE", "ChunkerConfig", "HeaderTooLargeError", "TokenChunker"]

log = logging.getLogger(__name__)



#: The settings a ChunkerConfig holds, in its order.
_SETTINGS = ("chunk_size", "chunk_overlap", "tokenizer", "header", "min_fill")


__getattr__, _ = lazy_exports(__name__.rpartition(".")[0], {"ChunkerConfig": "_config"}, globals())


def _checked_settings(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` as :class:`ChunkerConfig` holds them (its ``model_dump()``), or its error.

    The common case (integers in range, a name, a template or None, a fraction) is
    checked here without pydantic, whose import is most of the cost of importing
    the chunker (paid again by every worker process a whole process that
    chunks one text starts). Anything else (a value to coerce, one out of range, an
    unknown key) goes to ChunkerConfig, which coerces it or raises as it always has;
    a property test holds the two paths to the same answers.
    """
    size = values.get("chunk_size", DEFAULT_CHUNK_SIZE)
    overlap = values.get("chunk_overlap", DEFAULT_CHUNK_OVERLAP)
    tokenizer, header = values.get("tokenizer", DEFAULT_TOKENIZER), values.get("header")
    fill = values.get("min_fill", 0.5)
    plain = (
        set(values) <= set(_SETTINGS)
        and type(size) is int and type(overlap) is int and 0 <= overlap < size
        and type(tokenizer) is str and (header is None or type(header) is str)
        and type(fill) in (int, float) and 0.0 <= fill <= 1.0
    )
    if plain:
        return dict(zip(_SETTINGS, (size, overlap, tokenizer, header, float(fill)), strict=True))
    from contextkit.chunking._config import ChunkerConfig

    return ChunkerConfig(**values).model_dump()


class _Fields(dict):
    def __missing__(self, key: str) -> str:
        return ""


class TokenChunker(Chunker):
    """Split documents into chunks of at most ``chunk_size`` tokens (default
    :data:`DEFAULT_CHUNK_SIZE`, chosen so a chunk fits the default embedding model's window).

    Constructor values are defaults; :meth:`chunk` may override the header.
    ``workers`` is how many processes cut one long text (a megabyte or more, with a
    tiktoken encoding: this process and ``workers - 1`` spawned ones, shared by every
    chunker, see :mod:`contextkit.chunking._parallel`) and the default for
    :meth:`chunk_many`'s processes; the chunks are exactly those of one worker, so it
    is not a setting an index records.
    :meth:`to_dict` is ``{"type": "TokenChunker", **ChunkerConfig}`` (an index records
    the :class:`ChunkerConfig` alone); a callable header cannot travel in it.
    """

    def __init__(
        self,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        tokenizer: str | Tokenizer = DEFAULT_TOKENIZER,
        header: str | Callable[[Document], str] | None = None,
        min_fill: float = 0.5,
        workers: int = 1,
    ) -> None:
        tok_name = tokenizer if isinstance(tokenizer, str) else tokenizer.name
        checked = _checked_settings({
            "chunk_size": chunk_size, "chunk_overlap": chunk_overlap, "tokenizer": tok_name,
            "header": header if isinstance(header, str) else None, "min_fill": min_fill,
        })
        self._setup(checked, header if callable(header) else None, workers, tokenizer)

    @classmethod
    def from_config(cls, config: ChunkerConfig, workers: int = 1) -> TokenChunker:
        """A chunker with the settings of ``config``, taken as they are: a :class:`ChunkerConfig` has
        checked them (ingestion builds one per run, so ``--chunk-size`` is checked once on its way to the cut)."""
        chunker = cls.__new__(cls)
        chunker._setup(dict(config), None, workers, config.tokenizer)
        chunker._config = config
        return chunker

    def _setup(self, checked: dict[str, Any], header_fn: Callable[[Document], str] | None, workers: int,
               tokenizer: str | Tokenizer) -> None:
        self._settings_checked = checked
        self._config: ChunkerConfig | None = None
        self._header_fn = header_fn
        if workers < 1:
            raise InvalidArgumentError(f"workers must be at least 1, not {workers}")
        self.workers = workers  # processes for one long text (exact: see contextkit.chunking._parallel)
        self.tokenizer = get_tokenizer(tokenizer)
        self._pool: ProcessPoolExecutor | None = None
        self._pool_size = 0
        self._derived: dict[tuple[tuple[str, str], ...], TokenChunker] = {}  # chunk(**overrides), by value

    # ------------------------------------------------------------------ API
    @property
    def config(self) -> ChunkerConfig:
        """The settings as a :class:`ChunkerConfig` (what an index records); built on first use."""
        if self._config is None:
            from contextkit.chunking._config import ChunkerConfig

            self._config = ChunkerConfig(**self._settings_checked)
        return self._config

    @property
    def chunk_size(self) -> int:
        return self._settings_checked["chunk_size"]

    @property
    def chunk_overlap(self) -> int:
        return self._settings_checked["chunk_overlap"]

    @property
    def _min_fill(self) -> float:
        return self._settings_checked["min_fill"]

    def _settings(self) -> dict[str, Any]:
        return dict(self._settings_checked)

    def chunk(self, document: Document | str, header: str | None = None, **overrides: Any) -> list[Chunk]:
        """Chunks of one document (a bare string becomes a document with id ``"text"``).

        ``overrides`` replace constructor values for this call (``chunk(text, chunk_size=32)``), as
        every component's call may: they are checked like the constructor's, and the chunker they
        make is kept for the next call with the same values."""
        if overrides:
            return self._with(overrides).chunk(document, header)
        doc = Document(id="text", text=document) if isinstance(document, str) else document
        return self._build(doc, *self._plan(doc, header))

    def _with(self, overrides: dict[str, Any]) -> TokenChunker:
        """A chunker like this one with ``overrides`` (this one when they change nothing); cached by value."""
        check_options("TokenChunker.chunk()", overrides, (*_SETTINGS, "workers"))
        key = tuple(sorted((k, repr(v)) for k, v in overrides.items()))
        found = self._derived.get(key)
        if found is None:
            settings = {**self._settings_checked, "workers": self.workers, **overrides}
            if self._header_fn is not None and "header" not in overrides:
                settings["header"] = self._header_fn
            tokenizer = settings["tokenizer"]
            settings["tokenizer"] = self.tokenizer if tokenizer == self.tokenizer.name else tokenizer
            found = self._derived[key] = TokenChunker(**settings)
        return found

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

    def _plan(self, doc: Document, header: str | None = None,
              workers: int | None = None) -> tuple[str, list[tuple[int, int, int, int]]]:
        """The header and ``(start, end, tokens, total_tokens)`` of each chunk."""
        head, head_tokens, budget, overlap = self._room(doc, header)
        plan = []
        try:
            spans = self._split(doc.text, budget, overlap, self.workers if workers is None else workers)
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
                metadata=chunk_metadata(doc.metadata, start, end),
            )
            for ordinal, (start, end, tokens, total) in enumerate(plan)
        ]

    def chunk_many(self, documents: Iterable[Document], workers: int | None = None) -> list[list[Chunk]]:
        """Chunk many documents, in ``workers`` processes (default: the chunker's ``workers``) when above 1.

        Processes, not threads: the chunker's Python and NumPy steps hold the GIL.
        Workers are spawned (never forked, which is unsafe once torch has started
        threads), each builds its own chunker from :meth:`to_dict`, and the pool is
        kept for later calls until :meth:`close`. A single document is cut as one
        long text is by :meth:`chunk` with ``workers`` (the shared pool of
        :mod:`contextkit.chunking._processes`). Output equals the serial output.
        """
        docs = list(documents)
        workers = self.workers if workers is None else workers
        if len(docs) == 1:
            return [self._build(docs[0], *self._plan(docs[0], None, workers))]
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
        spans = stream_spans(self.tokenizer, blocks, budget, overlap, self._min_fill, max(1, window_chars))
        ordinal = 0
        for start, text, tokens, before in spans:
            if text.isspace() or not text:
                continue
            total = tokens + head_tokens
            if head and not (start > 0 and _stable_junction(before, text[0])):
                total = self.tokenizer.count(head + text)
            yield Chunk(id=f"{doc_id}::{ordinal}", doc_id=doc_id, ordinal=ordinal, text=text, start=start,
                        end=start + len(text), token_count=tokens, header=head, total_tokens=total,
                        metadata=chunk_metadata(doc.metadata, start, start + len(text)))
            ordinal += 1

    def start_workers(self) -> None:
        """Start the ``workers - 1`` processes that cut one long text with this one, without waiting.

        They are started by the first long text anyway (which this process begins on
        meanwhile); starting them earlier, say before reading the file, hides more of
        their start-up. They are shared by every chunker and kept until the interpreter
        exits. Nothing happens for ``workers=1`` or a tokenizer they cannot rebuild.
        """
        if self.workers > 1 and _processes.can_share(self.tokenizer):
            _processes.text_pool(self.workers - 1, self.tokenizer.name)

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
        """Stop the worker processes of :meth:`chunk_many`, if any.

        The workers that cut one long text are shared by every chunker and kept until
        the interpreter exits (:func:`contextkit.chunking._processes.shutdown` stops them)."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 - the pool may be half torn down already
            pass

    # ------------------------------------------------------------ internals
    def _render_header(self, doc: Document, override: str | None) -> str:
        if override is not None:
            template: str | None = override
        elif self._header_fn is not None:
            head = self._header_fn(doc)
            return head if not head or head.endswith("\n") else head + "\n"
        else:
            template = self._settings_checked["header"]
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

        budget = self.chunk_size if budget is None else budget
        overlap = self.chunk_overlap if overlap is None else overlap
        return self._split(text, budget, overlap, self.workers)

    def _split(self, text: str, budget: int, overlap: int, workers: int) -> list[tuple[int, int, int]]:
        if not text or text.isspace():
            return []
        if workers > 1:
            spans = split_parallel(self.tokenizer, text, budget, overlap, self._min_fill, workers)
            if spans is not None:
                return spans
        ends = self.tokenizer.token_ends(text)
        n_tok = len(ends)
        if n_tok <= budget:
            return [(0, len(text), n_tok)]
        cp = _code_points(text)
        cands = _candidates(self.tokenizer, text, cp, ends)
        return _greedy(self.tokenizer, text, cands, n_tok, CutRule(budget, overlap, self._min_fill))


_worker_chunker: TokenChunker | None = None


def _init_worker(settings: dict[str, Any]) -> None:
    global _worker_chunker
    _worker_chunker = TokenChunker.from_dict(settings)


def _plan_in_worker(doc: Document) -> tuple[str, list[tuple[int, int, int, int]]]:
    assert _worker_chunker is not None
    return _worker_chunker._plan(doc)

"""The operations a server offers, whatever the wire: search, assemble a context, read a document, list sources.

Why one class under both transports: an MCP tool and an HTTP route must give the same answer to the
same request, checked the same way. :class:`IndexService` holds what is costly to load (the
index's model, the read-only :class:`~contextkit.index.Index` and its retrievers) once per process,
for every client; each call pins one committed generation (a new commit of the index is served
from the next call on, without a restart). Every call returns a plain JSON-ready dict, cut to the
caller's token limit as counted on its JSON (:mod:`._fit`), or raises a ``ContextkitError`` whose
message a client may read (the transports turn it into a tool error or an HTTP 4xx; anything else
is logged here and answered with a generic message, never a traceback).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextkit.core.errors import DocumentNotFoundError, InvalidArgumentError, LimitExceededError
from contextkit.serve._fit import fit_cut, fit_items, fit_items_json, result_json
from contextkit.serve._requests import (
    AssembleRequest,
    FiltersBody,
    GetDocumentRequest,
    ListSourcesRequest,
    SearchRequest,
)

if TYPE_CHECKING:  # pragma: no cover
    from contextkit.core.tokenizers import Tokenizer
    from contextkit.embedders import Embedder
    from contextkit.index import Index
    from contextkit.retrievers import Retriever

__all__ = ["DEFAULT_RESULT_TOKENS", "MAX_RESULT_TOKENS", "IndexService"]

#: Tokens of a result when the caller names no limit: a page an agent can take into a small window.
DEFAULT_RESULT_TOKENS = 8_000
#: Texts one call remembers the count of (its limit's probes and its result; :meth:`IndexService.one_call`).
_RECENT_COUNTS = 16
#: The most tokens one result may hold unless the server is started with more (a 200k-window model's prompt).
MAX_RESULT_TOKENS = 200_000


class IndexService:
    """One index, its model and its retrievers, shared by every request of a server process.

    ``index`` is an index folder (opened read-only: the server never writes it). ``max_result_tokens``
    caps every result (a caller's ``max_tokens`` or ``budget`` above it is refused);
    ``default_result_tokens`` is the limit of a call that names none. When the index was ingested with
    redaction, assembled prompts are redacted too, and :meth:`masked` masks what a log keeps of a request.
    """

    def __init__(self, index: str | Path, *, device: str = "auto", max_result_tokens: int = MAX_RESULT_TOKENS,
                 default_result_tokens: int = DEFAULT_RESULT_TOKENS, warm: bool = True) -> None:
        from contextkit.core.tokenizers import TiktokenTokenizer, get_tokenizer
        from contextkit.index import Index

        if not 0 < default_result_tokens <= max_result_tokens:
            raise InvalidArgumentError(f"default_result_tokens ({default_result_tokens}) must be > 0 and at most "
                                       f"max_result_tokens ({max_result_tokens})")
        self.path = Path(index)
        self.index: Index = Index.open(self.path, read_only=True)
        self.device = device
        self.max_result_tokens = max_result_tokens
        self.default_result_tokens = default_result_tokens
        manifest = self.index.manifest
        self.tokenizer: Tokenizer = get_tokenizer(manifest.chunker.get("tokenizer") or manifest.tokenizer)
        self.redacts = bool(manifest.redact)
        # tiktoken's byte-level BPE never gives more tokens than bytes: a short enough result needs no count
        self.bytes_bound = isinstance(self.tokenizer, TiktokenTokenizer)
        self._retrievers: dict[str, Retriever] = {}
        self._embedder: Embedder | None = None
        self._lock = threading.Lock()  # building a retriever or the model once, whichever thread asks first
        self._recent_counts = threading.local()  # the texts this thread's call counted: see one_call()
        if warm:
            self._retriever("hybrid").retrieve("warm up", 1)  # the model and the index's files, before a client waits

    def close(self) -> None:
        self.index.close()

    # ------------------------------------------------------------------ operations
    def answer(self, name: str, request: Any) -> tuple[dict[str, Any], str]:
        """Operation ``name`` on its parsed request: the result and its JSON (:func:`._fit.result_json`), the
        text the transports send. A search's JSON is the text its token limit was counted on (serialised once)."""
        if name == "search":
            return self._search(request)
        if name == "assemble_context":
            return self._assemble_context(request)
        data = getattr(self, name)(request)
        return data, result_json(data)

    def search(self, request: SearchRequest) -> dict[str, Any]:
        """The ``k`` best chunks for the query, best first, as :func:`~contextkit.search_index` ranks them."""
        return self._search(request)[0]

    def _search(self, request: SearchRequest) -> tuple[dict[str, Any], str]:
        limit = self._limit(request.max_tokens)
        with self.index.snapshot():
            generation = self.index.generation
            hits = self._retriever(request.mode).retrieve(request.query, request.k, self._filters(request.filters))
            sources = self.index.document_sources({h.chunk.doc_id for h in hits})
        items = [{"rank": rank, "id": h.chunk.id, "doc_id": h.chunk.doc_id,
                  "source": sources.get(h.chunk.doc_id, ""), "score": float(h.score), "start": h.chunk.start,
                  "end": h.chunk.end, "metadata": h.chunk.metadata, "text": h.chunk.text}
                 for rank, h in enumerate(hits, start=1)]
        # The query is not echoed: the caller has it, and with a redacting index it must not come back unmasked.
        base = {"mode": request.mode, "generation": generation}
        return fit_items_json(base, "hits", items, limit, self.count, bytes_bound=self.bytes_bound)

    def assemble_context(self, request: AssembleRequest) -> dict[str, Any]:
        """A prompt (or chat messages) for the question under the budget, with its report, as
        :class:`~contextkit.ContextAssembler` builds it over this index."""
        return self._assemble_context(request)[0]

    def _assemble_context(self, request: AssembleRequest) -> tuple[dict[str, Any], str]:
        from contextkit.assembly.context_assembler import ContextAssembler
        from contextkit.core.profiles import get_profile

        limit = self._limit(request.max_tokens)
        profile = get_profile(request.model) if request.model else None
        budget: Any = request.budget or profile or limit  # tokens, or the profile (its window and tokenizer)
        budget_tokens = budget.prompt_budget if profile is not None and budget is profile else budget
        if budget_tokens > limit:
            raise LimitExceededError(f"budget of {budget_tokens:,} tokens is more than max_tokens "
                                     f"({limit:,}; this server's most: {self.max_result_tokens:,})")
        options: dict[str, Any] = {"mode": request.mode, "redact": self.redacts}
        if request.chat:
            options["chat"] = request.chat
        if profile is not None and request.budget is not None:
            options["tokenizer"] = profile.tokenizer
        with self.index.snapshot():
            generation = self.index.generation
            assembler = ContextAssembler(budget, retriever=self._retriever(request.mode), **options)
            result = assembler.assemble(request.question, instructions=request.instructions,
                                        history=[m.model_dump(exclude_none=True) for m in request.history or []],
                                        k=request.k, filters=self._filters(request.filters))
        report = result.report
        data: dict[str, Any] = {"generation": generation}
        if request.chat:
            data["messages"] = result.messages(request.chat)
        else:
            data["prompt"] = result.prompt
        data["report"] = (report.model_dump(mode="json") if request.report == "full" else _report_summary(report))
        text = result_json(data)
        if self.count(text) > limit and request.report == "full":
            data["report"] = _report_summary(report)  # the full report does not fit: its summary does, or nothing
            text = result_json(data)
        if self.count(text) > limit:
            raise LimitExceededError(f"the prompt and its report take more than max_tokens ({limit:,}): give a "
                                     "smaller budget or a larger max_tokens")
        return data, text

    def get_document(self, request: GetDocumentRequest) -> dict[str, Any]:
        """The text of one document (characters ``start`` to ``end``), rebuilt from its chunks' offsets; a
        text past the token limit is cut and ``next_start`` says where the next page begins."""
        limit = self._limit(request.max_tokens)
        with self.index.snapshot():
            generation = self.index.generation
            chunks = self.index.document_chunks(request.id)
            sources = self.index.document_sources([request.id])
        if not chunks:
            raise DocumentNotFoundError(f"no document {request.id!r} in the index (list_sources names them)")
        text = _stitch(chunks)
        end = len(text) if request.end is None else min(request.end, len(text))
        start = min(request.start, end)
        piece = text[start:end]
        base = {"id": request.id, "source": sources.get(request.id, ""), "generation": generation,
                "n_chars": len(text), "start": start}
        shell = {**base, "end": end, "text": "", "truncated": False, "next_start": None}
        room = limit - self.count(result_json(shell)) - 4  # the cut's end and next_start grow by a few tokens

        def page(cut: str) -> dict[str, Any]:
            stop = start + len(cut)
            return {**base, "end": stop, "text": cut, "truncated": stop < end,
                    "next_start": stop if stop < end else None}

        result = fit_cut(piece, room, limit, self.count, page)
        if result is None:
            raise LimitExceededError(f"max_tokens ({limit:,}) is too small for any text of {request.id!r}")
        return result

    def list_sources(self, request: ListSourcesRequest) -> dict[str, Any]:
        """The documents the index holds (id, source, characters), by id, a page at a time."""
        from fnmatch import fnmatchcase
        from urllib.parse import quote

        limit = self._limit(request.max_tokens)
        glob = request.glob
        total, items = 0, []
        for doc_id, source, n_chars in self.index.iter_documents():
            if glob is not None and not (fnmatchcase(doc_id, glob) or fnmatchcase(source, glob)):
                continue
            total += 1
            if request.offset < total <= request.offset + request.limit:
                items.append({"id": doc_id, "source": source, "n_chars": n_chars,
                              "uri": DOCUMENT_URI_PREFIX + quote(doc_id, safe="")})
        base = {"total": total, "offset": request.offset, "generation": self.index.generation}
        data = fit_items(base, "sources", items, limit, self.count, text_field="", bytes_bound=self.bytes_bound)
        shown = request.offset + len(data["sources"])
        data["next_offset"] = shown if shown < total else None
        if self.count(result_json(data)) > limit:  # next_offset's few tokens: one source less
            data = {**data, "sources": data["sources"][:-1], "omitted": data["omitted"] + 1}
            data["next_offset"] = request.offset + len(data["sources"])
        return data

    def info(self) -> dict[str, Any]:
        """What a client may want to know before its first call: the index's size, model, tokenizer, limits."""
        with self.index.snapshot():
            manifest = self.index.manifest
            return {"chunks": len(self.index), "generation": self.index.generation, "model": manifest.model,
                    "tokenizer": self.tokenizer.name, "redacts": self.redacts,
                    "default_result_tokens": self.default_result_tokens,
                    "max_result_tokens": self.max_result_tokens}

    # ------------------------------------------------------------------ helpers
    def count(self, text: str) -> int:
        """Tokens of ``text``; within :meth:`one_call`, a text that call counted already is not counted again."""
        recent: dict[str, int] | None = getattr(self._recent_counts, "counts", None)
        tokens = recent.get(text) if recent is not None else None
        if tokens is None:
            tokens = self.tokenizer.count(text)
            if recent is not None:
                if len(recent) >= _RECENT_COUNTS:
                    recent.clear()
                recent[text] = tokens
        return tokens

    @contextmanager
    def one_call(self) -> Iterator[None]:
        """The span of one call in this thread: the counts it makes are remembered until it ends. A result's
        limit check and its audit line both count the text sent (about 1 ms for a search's ten hits on
        SciFact); the second is answered from the first. Nothing is kept from one call to the next."""
        self._recent_counts.counts = {}
        try:
            yield
        finally:
            self._recent_counts.counts = None

    def masked(self, text: str) -> str:
        """``text`` as a log may keep it: PII masked when the index redacts, else unchanged. A fresh redactor
        session per text: a server's session would keep every value ever masked (memory that grows with
        the requests), and a log needs no way back to the values."""
        if not self.redacts:
            return text
        from contextkit.compressors.redact import PIIRedactor

        return PIIRedactor().redact(text).text

    def _limit(self, max_tokens: int | None) -> int:
        if max_tokens is None:
            return self.default_result_tokens
        if max_tokens > self.max_result_tokens:
            raise LimitExceededError(f"max_tokens of {max_tokens:,} is more than this server's most "
                                     f"({self.max_result_tokens:,}; serve --max-result-tokens raises it)")
        return max_tokens

    def _retriever(self, mode: str) -> Retriever:
        retriever = self._retrievers.get(mode)
        if retriever is None:
            with self._lock:
                retriever = self._retrievers.get(mode)
                if retriever is None:
                    retriever = self._retrievers[mode] = self._make_retriever(mode)
        return retriever

    def _make_retriever(self, mode: str) -> Retriever:
        from contextkit.embedders import embedder_for
        from contextkit.retrievers import make_retriever

        if mode == "bm25":
            return make_retriever(mode, self.index, None)
        if self._embedder is None:
            self._embedder = embedder_for(self.index, self.device, shared=True)
        return make_retriever(mode, self.index, self._embedder)

    @staticmethod
    def _filters(filters: FiltersBody | None) -> Any:
        if filters is None:
            return None
        from contextkit.retrievers import Filters

        return Filters(**filters.model_dump(exclude_none=True))


#: The URI of a document as an MCP resource: this prefix and its id, percent-encoded.
DOCUMENT_URI_PREFIX = "contextkit://document/"


def _stitch(chunks: list[Any]) -> str:
    """A document's text from its chunks: each chunk sits at its own offsets (``doc.text[start:end]``), so
    overlaps are taken once; a stretch no chunk covers (none with contextkit's chunkers) stays as spaces, so
    that offsets stay the document's."""
    parts: list[str] = []
    covered = 0
    for chunk in chunks:
        if chunk.end <= covered:
            continue
        if chunk.start > covered:
            parts.append(" " * (chunk.start - covered))
            covered = chunk.start
        parts.append(chunk.text[covered - chunk.start:])
        covered = chunk.end
    return "".join(parts)


def _report_summary(report: Any) -> dict[str, Any]:
    """The report's figures a client acts on: tokens per section, what was left out and why, warnings."""
    return {"budget": report.budget, "tokens": report.tokens, "tokenizer": report.tokenizer,
            "chat_tokens": report.chat_tokens, "estimated_cost_usd": report.estimated_cost_usd,
            "sections": [{"name": s.name, "role": s.role, "tokens": s.tokens, "status": s.status,
                          "reason": s.reason} for s in report.sections],
            "evidence": [{"id": i.id, "source": i.source, "status": i.status, "reason": i.reason,
                          "tokens": i.tokens} for i in report.items],
            "counts": report.counts(), "warnings": report.warnings, "notes": report.notes}


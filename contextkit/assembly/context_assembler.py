"""``ContextAssembler``: question, instructions, history and retrieval in; one prompt out.

The everyday entry point. Constructor values are defaults that each
:meth:`ContextAssembler.assemble` call may override; :func:`assemble` below it is
for people who bring their own sections.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self, cast

from pydantic import Field

from contextkit.assembly.budget import AssemblyOptions, AssemblyResult, assemble
from contextkit.assembly.sections import Section, SectionError
from contextkit.core.config import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_SUMMARY_MAX_TOKENS,
    DEFAULT_TOKENIZER,
    MAX_K,
    check_limit,
    check_limit_option,
)
from contextkit.core.errors import HistoryFileError
from contextkit.core.options import Component
from contextkit.core.profiles import ModelProfile
from contextkit.core.records import EvidenceItem, Message

if TYPE_CHECKING:  # pragma: no cover - the roles, imported where they are used (retrieval loads faiss)
    from contextkit.compressors.base import CompressionReport, Compressor, Redactor
    from contextkit.compressors.evidence import EvidenceCompressor
    from contextkit.compressors.history import HistorySummarizer
    from contextkit.index import Index
    from contextkit.retrievers import Filters, Retriever

__all__ = ["AssemblerConfig", "ContextAssembler", "HistoryFileError", "load_history"]

_CHAT_ROLES = frozenset({"user", "assistant", "system", "developer", "tool"})


def _gated(config: AssemblerConfig) -> bool:
    """Whether evidence stops at the relevance floor (``fill="relevant"`` without a ``min_score``)."""
    return config.fill == "relevant" and config.min_score is None


def _relevance_cap(items: list[EvidenceItem], max_tokens: int) -> tuple[list[EvidenceItem], int]:
    """The retrieved passages, best first, while their texts total at most ``max_tokens`` (the first always);
    and how many were left.

    Why: the relevance floor is relative to the best passage, so on a broad question dozens pass it and a
    large window took them all (16 PEPs, BM25, "Python": 6,364 tokens under gemini-1.5-pro where a 5,000
    budget sent 4,976). What a question gets no longer grows with the window."""
    total = 0
    for n, item in enumerate(items):
        total += item.token_count if item.token_count is not None else len(item.text) // 4
        if total > max_tokens and n:
            return items[:n], len(items) - n
    return items, 0


def _chat_roles_only(history: list[Any]) -> bool:
    """Whether every turn has a role a provider takes: a history role is free text ("narrator", a name),
    which only the fit layout (turns as marked-up text) can carry."""
    for message in history:
        role = message.get("role") if isinstance(message, Mapping) else getattr(message, "role", None)
        if str(getattr(role, "value", role)) not in _CHAT_ROLES:
            return False
    return True


#: Conversations a ContextAssembler follows at once (one per distinct budget, instructions and settings).
_CONVERSATIONS_KEPT = 8


class AssemblerConfig(AssemblyOptions):
    """Every assembly option, with its default (see :func:`contextkit.assemble`).

    The rendering and choosing options are :func:`assemble`'s own (:class:`AssemblyOptions`),
    declared once there; these fields are what the assembler adds. Unlike ``assemble``'s
    keywords, a config is validated: it is what constructors, overrides and files give.
    """

    section = "assemble"

    budget: int | str | None = Field(default=None, description="tokens, or a model profile name",
                                     json_schema_extra={"aliases": {"model": 1}})
    # Names, not objects: ``to_dict`` stores the config (assemble() itself also takes a Tokenizer or a Path).
    tokenizer: str | None = Field(default=None, description="default: the profile's, else cl100k_base")
    audit_log: str | None = None
    mode: Literal["dense", "bm25", "hybrid"] = "hybrid"
    history_layout: Literal["stable", "fit"] = Field(
        default="stable", description="chat requests (chat= set) with history: 'stable' keeps each request the "
        "previous one plus the new turns, condensing the oldest turns in blocks only past a high-water mark, so a "
        "provider's prompt cache serves most of each call (see contextkit.assembly.conversation); 'fit' refits the "
        "recent turns to each call (the evidence first, then as many turns as fit)")
    k: int | None = Field(default=None, gt=0, description="chunks to retrieve; default: enough to fill the budget "
                          "(with fill='relevant', at most relevant_max_tokens of them)")
    relevant_max_tokens: int | None = Field(
        default=5_000, gt=0, description="fill='relevant' with the default k: the retrieved passages are taken best "
        "first while their texts total at most this many tokens, whatever the budget (a large window is a cap, "
        "not a target); None: no cap. An explicit k, fill='budget' or min_score leave it out")
    redact: bool = Field(default=False, description="mask PII in evidence, history and question (PIIRedactor)")
    evidence_min_share: float | None = Field(
        default=None, ge=0.0, le=1.0, description="share of the budget kept for evidence (history and other "
        "higher-priority sections cannot take it); chat engines set 0.5")
    compress_evidence: float | None = Field(
        default=None, gt=1.0, description="prune evidence to the sentences that bear on the question, to 1/N of "
        "its tokens (EvidenceCompressor), so more passages fit")
    history_min_share: float | None = Field(
        default=0.15, ge=0.0, le=1.0, description="share of the budget kept for the history's recent turns and "
        "summary; evidence for the question (priority 75) comes ahead of the rest of the history (70)")
    summarize_history: bool = Field(default=True, description="condense turns that do not fit (else drop them)")
    summary_max_tokens: int = Field(default=DEFAULT_SUMMARY_MAX_TOKENS, ge=16,
                                    description="hard cap on the history summary",
                                    json_schema_extra={"aliases": {"summary_tokens": 1}})


class ContextAssembler(Component):
    """Builds prompts under a budget from a question, instructions, history and evidence.

    ``retriever`` is any contextkit retriever; or give ``index`` (a folder or an
    opened :class:`~contextkit.index.Index`) and the assembler makes a ``mode``
    retriever over it. ``budget`` is a token count or a model profile name.
    """

    def __init__(self, budget: int | str | ModelProfile | None = None, *, retriever: Retriever | None = None,
                 index: Index | str | Path | None = None, history_summarizer: Compressor | None = None,
                 redactor: Redactor | None = None, evidence_compressor: EvidenceCompressor | None = None,
                 **options: Any) -> None:
        self.profile = budget if isinstance(budget, ModelProfile) else None
        self.config = AssemblerConfig(budget=None if isinstance(budget, ModelProfile) else budget, **options)
        self._retriever = retriever
        self._index = index
        self._owned_index: Index | None = None
        self.history_summarizer = history_summarizer  # e.g. an LLMHistorySummarizer; default: extractive
        self.redactor = redactor  # a PIIRedactor session shared across calls (consistent placeholders)
        self.evidence_compressor = evidence_compressor  # used when compress_evidence is set
        self._extractive: HistorySummarizer | None = None
        self._conversations: dict[str, Any] = {}  # settings -> the Conversation a stable chat layout follows
        self._lock = threading.Lock()

    # ----------------------------------------------------------- retrieval
    @property
    def retriever(self) -> Retriever | None:
        if self._retriever is None and self._index is not None:
            from contextkit.index import Index
            from contextkit.retrievers import make_retriever

            index = self._index
            if not isinstance(index, Index):
                index = self._owned_index = Index.open(index, read_only=True)
            self._retriever = make_retriever(self.config.mode, index)
        return self._retriever

    def close(self) -> None:
        if self._owned_index is not None:
            self._owned_index.close()
            self._owned_index = None

    def __enter__(self) -> ContextAssembler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ assembly
    def assemble(self, query: str | None = None, *, instructions: str | None = None, system: str | None = None,
                 task: str | None = None, knowledge: str | None = None,
                 history: list[Message | dict[str, Any]] | None = None, evidence: list[Any] | None = None,
                 retriever: Retriever | None = None, k: int | None = None, filters: Filters | None = None,
                 budget: int | str | ModelProfile | None = None, sections: list[Section] | None = None,
                 tool_results: list[str | tuple[str, str]] | None = None, **overrides: Any) -> AssemblyResult:
        """One prompt and its report. ``instructions`` are the key instructions: first in
        the prompt and restated after the question. ``evidence`` adds items to what the
        retriever finds for ``query``; ``sections`` adds custom sections. ``tool_results`` are
        tool outputs or logs (text, or ``(name, text)``): escaped like documents, and a long one
        keeps its head and tail (where errors are) with the cut marked."""
        # Validated like the constructor's: an unknown or bad override fails here.
        config = AssemblerConfig(**{**self.config.model_dump(), **overrides}) if overrides else self.config
        budget = budget if budget is not None else self.profile or config.budget
        if budget is None:
            raise SectionError("no budget: give a token count or a model profile (budget=... or model=...)")
        self._check_request(query, k, budget, history, config, retriever)
        if history and config.chat and config.history_layout == "stable" and _chat_roles_only(history):
            texts = {"instructions": instructions, "system": system, "task": task, "knowledge": knowledge}
            return self._stable(query, texts, history, budget, config, overrides,
                                dict(evidence=evidence, retriever=retriever, k=k, filters=filters,
                                     sections=sections, tool_results=tool_results))
        parts = _text_sections(instructions=instructions, system=system, task=task, knowledge=knowledge)
        items = [EvidenceItem.coerce(v, i) for i, v in enumerate(evidence or [])]
        retriever = retriever or self.retriever
        if config.min_similarity == "auto":  # the off-topic cosine of this index (see assembly.relevance)
            from contextkit.assembly.relevance import index_min_similarity

            config = config.model_copy(update={"min_similarity": index_min_similarity(
                retriever.index if retriever is not None else None)})
        items, anchor, compression, notes = self._evidence(items, retriever, query, k or config.k, filters, budget,
                                                           config)
        if items or retriever is not None or evidence is not None:
            parts.append(Section("evidence", role="evidence", items=items, min_share=config.evidence_min_share,
                                 relevance_anchor=anchor))
        parts += _tool_sections(tool_results or [])
        if history:
            # Section turns the dicts into Messages (and names a bad one) as it is made
            parts.append(Section("history", role="history", messages=cast(list[Message], list(history)),
                                 min_share=config.history_min_share))
        if query is not None:
            parts.append(Section("question", role="question", content=query))
        parts += list(sections or [])
        result = assemble(parts, budget, options=config, **self._helpers(config, bool(history)))
        result.report.compression[:0] = compression
        result.report.notes.extend(notes)
        return result

    def _stable(self, query: str | None, texts: dict[str, str | None], history: list[Any],
                budget: int | str | ModelProfile, config: AssemblerConfig, overrides: dict[str, Any],
                call: dict[str, Any]) -> AssemblyResult:
        """A chat request whose history is laid out for the provider's cache: the conversation this
        assembler has followed so far (found by its settings and caught up with the new turns; rebuilt
        by replaying the history when it differs), whose tail is this assembler without history."""
        from contextkit.assembly.conversation import Conversation

        user_sections = list(call.pop("sections") or [])

        def tail(query: str | None, *, evidence: list[Any] | None, tool_results: Any, sections: list[Section],
                 budget: int) -> AssemblyResult:
            return self.assemble(query, evidence=call["evidence"], retriever=call["retriever"], k=call["k"],
                                 filters=call["filters"], tool_results=call["tool_results"],
                                 sections=[*user_sections, *sections], budget=budget,
                                 **{**overrides, "restate_instructions": False})

        key = json.dumps([str(budget), texts, config.model_dump(mode="json")], sort_keys=True, default=str)
        with self._lock:
            conversation = self._conversations.pop(key, None)
            if conversation is None or not conversation.follows(history):
                conversation = Conversation(budget, tail=tail, instructions=texts["instructions"],
                                            system_texts={k: v for k, v in texts.items() if v and k != "instructions"},
                                            history_summarizer=self.history_summarizer,
                                            embedder=getattr(call["retriever"] or self.retriever, "embedder", None),
                                            redactor=self._helpers(config, False).get("redactor"),
                                            chat=config.chat, markup=config.markup, format=config.format,
                                            summarize=config.summarize_history)
            self._conversations[key] = conversation
            while len(self._conversations) > _CONVERSATIONS_KEPT:
                self._conversations.pop(next(iter(self._conversations)))
            conversation.catch_up(history)
            conversation.set_tail(tail)
            return conversation.prompt(query)

    def _check_request(self, query: str | None, k: int | None, budget: int | str | ModelProfile,
                       history: list[Any] | None, config: AssemblerConfig, retriever: Retriever | None) -> None:
        """The limits of one request, checked before the index is read or a model loaded: the question's
        length, ``k`` (against the retriever's ``max_k``), the budget, the history's length."""
        from contextkit.assembly.budget import resolve_budget
        from contextkit.retrievers.base import check_request

        resolve_budget(budget, config.tokenizer, config.max_budget)
        if query is not None:
            check_limit(len(query), check_limit_option(config.max_query_chars, "max_query_chars"),
                        "max_query_chars", "a question of {:,} characters")
        if k is not None:
            chosen = retriever if retriever is not None else self._retriever
            check_request(query or "?", k, config.max_query_chars, getattr(chosen, "max_k", MAX_K))
        if history:
            check_limit(len(history), check_limit_option(config.max_history_messages, "max_history_messages"),
                        "max_history_messages", "a history of {:,} messages")

    def _evidence(self, items: list[EvidenceItem], retriever: Retriever | None, query: str | None, k: int | None,
                  filters: Filters | None, budget: int | str | ModelProfile,
                  config: AssemblerConfig
                  ) -> tuple[list[EvidenceItem], float | None, list[CompressionReport], list[str]]:
        """The given items plus what the retriever finds for ``query``, pruned when ``compress_evidence``
        is set; the relevance anchor (see :meth:`_retrieve`); the compressor's report (in a list: none
        when nothing was pruned); and notes for the report."""
        anchor, notes = None, []
        if retriever is not None and query:
            found, anchor, left = self._retrieve(retriever, query, k, filters, budget, config)
            if left:
                notes.append(f"{left} retrieved passages past relevant_max_tokens ({config.relevant_max_tokens:,} "
                             "tokens of text, best first) were not taken; relevant_max_tokens=None lifts the "
                             "cap, fill='budget' fills the budget")
            items = items + found
        compression = []
        if items and query and config.compress_evidence:
            items, pruned = self._compressor(retriever).compress(items, query, target_ratio=config.compress_evidence)
            compression.append(pruned)
        return items, anchor, compression, notes

    def _helpers(self, config: AssemblerConfig, has_history: bool) -> dict[str, Any]:
        """The summarizer and the redactor that :func:`assemble` should use for this prompt."""
        helpers: dict[str, Any] = {}
        if has_history and config.summarize_history:
            helpers["history_summarizer"] = self._summarizer(config)
        if config.redact or self.redactor is not None:
            from contextkit.compressors.redact import PIIRedactor

            helpers["redactor"] = self.redactor or PIIRedactor()  # fresh session per prompt by default
        return helpers

    def _compressor(self, retriever: Retriever | None) -> EvidenceCompressor:
        if self.evidence_compressor is None:
            from contextkit.compressors.evidence import EvidenceCompressor

            # The retriever's embedder when it has one: one model in memory, its query cache shared.
            embedder = getattr(retriever, "embedder", None)
            self.evidence_compressor = EvidenceCompressor(embedder=embedder, tokenizer=self.config.tokenizer or
                                                          DEFAULT_TOKENIZER)
        return self.evidence_compressor

    def _summarizer(self, config: AssemblerConfig) -> Compressor:
        if self.history_summarizer is not None:
            return self.history_summarizer
        from contextkit.compressors.history import HistorySummarizer

        if self._extractive is None or self._extractive.config.summary_max_tokens != config.summary_max_tokens:
            # Kept between calls: its per-message cache makes the next turn's summary cheap. The retriever's
            # embedder, when it has one, finds a fact asked in other words (no second model in memory).
            self._extractive = HistorySummarizer(summary_max_tokens=config.summary_max_tokens,
                                                 embedder=getattr(self._retriever, "embedder", None))
        return self._extractive

    def _retrieve(self, retriever: Retriever, query: str, k: int | None, filters: Filters | None,
                  budget: int | str | ModelProfile, config: AssemblerConfig
                  ) -> tuple[list[EvidenceItem], float | None, int]:
        """The retriever's top ``k`` (by default as many as could fill the budget, and with
        ``fill="relevant"`` no more than ``relevant_max_tokens`` of text: :func:`_relevance_cap`); for
        ``fill="relevant"``, the relevance anchor: the score at rank :data:`ANCHOR_RANK`, from a search of
        at least that many whatever ``k`` is, so the floor does not move with the budget (None when the
        index or the filters leave fewer chunks: the floor is then relative to 0); and how many passages
        the cap left out."""
        from contextkit.assembly.relevance import ANCHOR_RANK

        index = retriever.index
        gated = _gated(config)
        cap = config.relevant_max_tokens if k is None and gated else None
        max_k = getattr(retriever, "max_k", MAX_K)
        if k is None:  # enough chunks to fill the budget, with room for duplicates and merges
            from contextkit.assembly.budget import resolve_budget

            limit = resolve_budget(budget, config.tokenizer, config.max_budget)[0]
            size = int(index.manifest.chunker.get("chunk_size") or DEFAULT_CHUNK_SIZE)
            k = max(10, min(len(index) or 10, math.ceil(1.5 * limit / size), max_k))
            if gated:  # nothing below the anchor rank passes the floor: in the hybrid, the top of either run
                k = min(k, 2 * ANCHOR_RANK)
                if cap is not None:  # nor, past the cap, anything at all
                    k = min(k, max(10, math.ceil(1.5 * cap / size)))
        wide = max(k, min(ANCHOR_RANK, max_k)) if gated else k
        tokenizer = index.manifest.chunker.get("tokenizer") or index.manifest.tokenizer
        hits = retriever.retrieve(query, wide, filters)
        anchor = _relevance_anchor(retriever, [float(hit.score) for hit in hits]) if gated else None
        hits = hits[:k]
        items = [EvidenceItem.from_scored_chunk(hit, tokenizer) for hit in hits]
        if config.fill == "relevant" and config.min_similarity is not None:
            items = _with_similarity(items, retriever, query, len(hits), filters)
        items, left = _relevance_cap(items, cap) if cap is not None else (items, 0)
        return items, anchor, left

    @classmethod
    def from_config(cls, path: str | Path | None = None, **kwargs: Any) -> ContextAssembler:
        """From the ``[assemble]`` table of ``contextkit.toml`` (and its top-level ``index``), read by
        :meth:`AssemblerConfig.options_from_table` as the CLI reads it; ``kwargs`` win."""
        from contextkit.core.config import load_config

        config = load_config(path)
        table = config.get("assemble", {})
        options = {**AssemblerConfig.options_from_table(table), **kwargs}
        index = table.get("index") or config.get("index")
        if index is not None and "retriever" not in options:
            options.setdefault("index", index)
        return cls(options.pop("budget", None), **options)

    # --------------------------------------------------------- persistence
    def _settings(self) -> dict[str, Any]:
        """The settings (a profile as its fields), JSON-ready: what :meth:`from_dict` takes back."""
        data = self.config.model_dump()
        if self.profile is not None:
            data["budget"] = self.profile.model_dump()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **objects: Any) -> Self:
        """Rebuild from :meth:`to_dict`; ``objects`` pass what a dict cannot hold (``index=``, a summarizer)."""
        settings = cls._settings_of(data)
        budget = settings.pop("budget", None)
        if isinstance(budget, dict):
            budget = ModelProfile(**budget)
        return cls(budget, **settings, **objects)


def _relevance_anchor(retriever: Retriever, scores: list[float]) -> float | None:
    """The retriever's :meth:`~contextkit.retrievers.Retriever.relevance_anchor` for these scores (a
    retriever of a caller's own without one: the score at the anchor rank)."""
    from contextkit.retrievers.base import score_at_anchor_rank

    method = getattr(retriever, "relevance_anchor", None)
    anchor = method(scores) if method is not None else score_at_anchor_rank(scores)
    return None if anchor is None else float(anchor)


def _with_similarity(items: list[EvidenceItem], retriever: Retriever, query: str, n: int,
                     filters: Filters | None) -> list[EvidenceItem]:
    """The items with their query similarity (the dense cosine), for the relevance gate's off-topic check
    (:func:`~contextkit.retrievers.dense.query_similarities`; a BM25 retriever leaves them unknown)."""
    from dataclasses import replace

    from contextkit.retrievers.dense import query_similarities

    if not items:
        return items
    sims = query_similarities(retriever, query, [it.id for it in items], [it.score or 0.0 for it in items], n, filters)
    if sims is None:
        return items
    return [replace(it, similarity=sims[it.id]) for it in items]


def _tool_sections(results: list[str | tuple[str, str]]) -> list[Section]:
    """One ``tool_result`` section per output, named ``tool_output_N``; a given name goes in an attribute.

    Together they take at most half the budget, in equal shares: one long log must not crowd out
    the other outputs, nor the evidence."""
    out = []
    for i, value in enumerate(results, start=1):
        name, text = value if isinstance(value, tuple) else ("", value)
        out.append(Section(f"tool_output_{i}", role="tool_result", content=text, max_share=0.5 / len(results),
                           attributes={"name": str(name)} if name else {}))
    return out


def _text_sections(**texts: str | None) -> list[Section]:
    """The text sections given (instructions, system, task, knowledge), each with its role."""
    roles = {"instructions": "key_instructions", "system": "system", "task": "task", "knowledge": "domain_knowledge"}
    return [Section(name, role=roles[name], content=text) for name, text in texts.items() if text is not None]


def load_history(path: str | Path, max_messages: int | None = None) -> list[Message]:
    """Messages from a JSON-lines file (``{"role": ..., "content": ...}`` per line).

    ``max_messages`` (e.g. :data:`~contextkit.core.config.MAX_HISTORY_MESSAGES`): a file with more is
    refused with a ``LimitExceededError`` as soon as the count is past it, before the rest is parsed."""
    path = Path(path)
    if max_messages is not None:
        max_messages = check_limit_option(max_messages, "max_history_messages")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise HistoryFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    messages: list[Message] = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        if max_messages is not None and len(messages) >= max_messages:
            count = sum(1 for rest in raw.splitlines() if rest.strip())
            check_limit(count, max_messages, "max_history_messages", "a history file of {:,} messages")
        try:
            data = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise HistoryFileError(f"{path}:{number}: not valid UTF-8 (byte {exc.start})") from None
        except json.JSONDecodeError as exc:
            raise HistoryFileError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        if not isinstance(data, dict):
            raise HistoryFileError(f"{path}:{number}: expected an object with role and content")
        try:
            messages.append(Message.from_dict(data))
        except (TypeError, ValueError) as exc:
            raise HistoryFileError(f"{path}:{number}: {exc} (expected keys: role, content; optional: timestamp, "
                                   f"id; found: {', '.join(map(str, data)) or 'none'})") from None
    return messages

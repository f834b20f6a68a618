"""The prompt path the synthesizer and the chat engine share: contextkit's blocks inside LlamaIndex templates.

Why through LlamaIndex's templates and ``llm.predict``/``llm.stream`` rather than one
bare ``complete()``: that is the path on which LlamaIndex adds ``llm.system_prompt``
and ``query_wrapper_prompt``, sends chat models system and user *messages*,
formats for completion models, and emits its TEMPLATING callback and
``LLMPredictStartEvent``. contextkit's assembled blocks (``<instructions>``,
``<evidence>``, ``<history>``, ``<question>``, ``<reminder>``) are the template
variables; LlamaIndex's own names ``context_str`` (evidence and history) and
``query_str`` (the question as typed) work too, so a stock ``text_qa_template``
can be dropped in.

The budget covers what is *sent*: the template's own text, the system prompt and a
per-message overhead are counted (on the formatted prompt, or the messages), and
the evidence is assembled again, smaller, if the whole does not fit.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.llms import LLM, ChatMessage, MessageRole
from llama_index.core.prompts import (
    BasePromptTemplate,
    ChatPromptTemplate,
    PromptTemplate,
    SelectorPromptTemplate,
)
from llama_index.core.prompts.prompt_type import PromptType
from llama_index.core.prompts.utils import is_chat_model
from llama_index.core.schema import MetadataMode, NodeWithScore

from contextkit.assembly._prepare import TAG_ATTRIBUTES_KEY
from contextkit.assembly.budget import AssemblyOptions, AssemblyResult, assemble
from contextkit.assembly.sections import Section
from contextkit.core.errors import BudgetError, InvalidArgumentError
from contextkit.core.records import EvidenceItem, Message
from contextkit.core.tokenizers import Tokenizer
from contextkit.integrations.llamaindex.convert import CONTEXTKIT_KEYS, MIN_SIMILARITY_KEY, SIMILARITY_KEY

__all__ = [
    "BLOCK_VARS",
    "MESSAGE_OVERHEAD",
    "TEMPLATE_VARS",
    "LastBuildMixin",
    "PromptBuild",
    "build_prompt",
    "check_options",
    "check_template",
    "default_qa_template",
    "evidence_from_nodes",
]

#: contextkit's blocks, by section name, as template variables.
BLOCK_VARS = ("instructions", "evidence", "history", "question", "reminder")
#: Every variable a template may use: the blocks, and LlamaIndex's own two names.
TEMPLATE_VARS = (*BLOCK_VARS, "context_str", "query_str")
#: Tokens a chat API adds per message (role and separators: OpenAI's figure), counted in the budget.
MESSAGE_OVERHEAD = 4

#: Options of the assembly the plug-in takes, besides :class:`AssemblyOptions`' own fields.
_EXTRA_OPTIONS = ("evidence_min_share", "history_min_share", "summarize_history", "summary_max_tokens", "redact")
_REFUSED_OPTIONS = {
    "compress_evidence": "prune with contextkit.compressors.EvidenceCompressor before the engine, or use "
                         "ContextAssembler directly",
    "budget": "the budget comes from the LLM's metadata; use reserve_tokens= to keep room",
    "mode": "retrieval is the engine's retriever", "k": "retrieval is the engine's retriever",
}


log = logging.getLogger(__name__)


def default_qa_template(prompt_type: PromptType = PromptType.QUESTION_ANSWER) -> SelectorPromptTemplate:
    """The blocks in order for completion models; for chat models, instructions as the system
    message and the rest as the user message (the reminder last, nearest the answer).
    ``prompt_type`` labels it for tracing (``SUMMARY`` when it serves as a ``summary_template``)."""
    text = PromptTemplate("{instructions}{evidence}{history}{question}{reminder}", prompt_type=prompt_type)
    chat = ChatPromptTemplate(message_templates=[
        ChatMessage(role=MessageRole.SYSTEM, content="{instructions}"),
        ChatMessage(role=MessageRole.USER, content="{evidence}{history}{question}{reminder}"),
    ], prompt_type=prompt_type)
    return SelectorPromptTemplate(default_template=text, conditionals=[(is_chat_model, chat)])


def _templates(template: BasePromptTemplate) -> list[BasePromptTemplate]:
    if isinstance(template, SelectorPromptTemplate):
        return [template.default_template, *(t for _, t in template.conditionals or [])]
    return [template]


def check_template(template: Any, key: str = "text_qa_template") -> BasePromptTemplate:
    """A template whose variables contextkit can fill, or a clear error naming the ones it cannot."""
    if not isinstance(template, BasePromptTemplate):
        raise InvalidArgumentError(f"{key} must be a LlamaIndex prompt template (PromptTemplate, "
                                   f"ChatPromptTemplate ...), not {type(template).__name__}")
    for t in _templates(template):
        unknown = sorted(set(t.template_vars) - set(TEMPLATE_VARS) - set(t.kwargs))
        if unknown:
            raise InvalidArgumentError(
                f"{key}: contextkit cannot fill the variable(s) {unknown}; a template may use "
                f"{', '.join('{' + v + '}' for v in TEMPLATE_VARS)} (or bind others with partial_format)")
    return template


def check_options(options: dict[str, Any]) -> None:
    """Refuse assembly options the plug-in would otherwise ignore."""
    allowed = set(AssemblyOptions.model_fields) | set(_EXTRA_OPTIONS)
    for key in options:
        if key in _REFUSED_OPTIONS:
            raise InvalidArgumentError(f"{key}= is not supported by the LlamaIndex plug-in: {_REFUSED_OPTIONS[key]}")
        if key not in allowed:
            raise InvalidArgumentError(f"unknown assembly option {key!r}; supported: {', '.join(sorted(allowed))}")
    AssemblyOptions(**{k: v for k, v in options.items() if k in AssemblyOptions.model_fields})


# ------------------------------------------------------------------ evidence
_ATTR_NAME = re.compile(r"[^A-Za-z0-9_.-]")
_RESERVED_ATTRS = frozenset({"id", "source", "score"})


def _visible_metadata(nws: NodeWithScore, source: str) -> dict[str, str]:
    """The metadata LlamaIndex would show the LLM for this node (``MetadataMode.LLM``), as attributes."""
    node = nws.node
    hidden = set(node.excluded_llm_metadata_keys) | set(CONTEXTKIT_KEYS)
    attrs: dict[str, str] = {}
    for key, value in (node.metadata or {}).items():
        if key in hidden or isinstance(value, bool) or not isinstance(value, str | int | float):
            continue
        text = str(value)
        if not text.strip() or text == source:
            continue
        name = _ATTR_NAME.sub("_", str(key))
        name = name if re.match(r"[A-Za-z_]", name) else f"_{name}"
        if name not in _RESERVED_ATTRS and name not in attrs:
            attrs[name] = text
    return attrs


def evidence_from_nodes(nodes: Sequence[NodeWithScore]) -> list[EvidenceItem]:
    """Nodes as evidence items: id, text (no metadata), score, source document and offsets.

    The metadata the LLM would see rides along under ``metadata["tag_attributes"]``; the
    assembler renders it as attributes of the item's ``<document>`` tag (escaped and counted
    like the others), not mixed into its text, so overlapping nodes still merge by offsets.
    """
    items = []
    for i, nws in enumerate(nodes):
        node = nws.node
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        meta = dict(node.metadata or {})
        source = str(meta.get("file_path") or meta.get("file_name") or meta.get("source") or node.ref_doc_id or "")
        start, end = getattr(node, "start_char_idx", None), getattr(node, "end_char_idx", None)
        offsets_ok = start is not None and end is not None and end - start == len(text)
        plain: dict[str, Any] = {k: v for k, v in meta.items() if isinstance(v, str | int | float)}
        plain[TAG_ATTRIBUTES_KEY] = _visible_metadata(nws, source)
        similarity = meta.get(SIMILARITY_KEY)
        items.append(EvidenceItem(
            id=node.node_id or f"node-{i}", text=text, source=source, score=nws.score,
            doc_id=node.ref_doc_id if offsets_ok else None, start=start if offsets_ok else None,
            end=end if offsets_ok else None, metadata=plain,
            similarity=float(similarity) if isinstance(similarity, int | float) else None))
    return items


def _off_topic_bar(evidence: Sequence[EvidenceItem], options: dict[str, Any]) -> None:
    """``min_similarity`` from the nodes when the caller set none: the bar ``ContextKitRetriever`` recorded
    for its index (the lowest, if several). Nodes from other retrievers carry no similarity and no bar:
    their scores (another model's cosine, BM25, fused ranks) cannot be judged by one, so the gate is then
    relative only."""
    bars = [it.metadata.get(MIN_SIMILARITY_KEY) for it in evidence if it.similarity is not None]
    known = [float(b) for b in bars if isinstance(b, int | float)]
    if known and "min_similarity" not in options:
        options["min_similarity"] = min(known)


#: Below this many tokens a prompt states its instructions once (LlamaIndex's templates state them once):
#: the restatement after the question is for long prompts, where a model loses what sits in the middle
#: (Liu et al., "Lost in the Middle", 2023, measured the loss from 2k tokens of context up).
RESTATE_MIN_TOKENS = 2_000


def _short(result: AssemblyResult, options: dict[str, Any]) -> bool:
    """Whether the assembled prompt is short enough to drop its restated instructions (unless the app set
    ``restate_instructions``)."""
    return ("restate_instructions" not in options and result.report.tokens < RESTATE_MIN_TOKENS
            and any(s.role == "reminder" for s in result.report.sections))


def nodes_in_prompt(nodes: Sequence[NodeWithScore], build: PromptBuild) -> list[NodeWithScore]:
    """The nodes whose text ``build`` sent (included, cut to fit, or merged into a passage it sent), in order.

    Why: ``response.source_nodes`` is what an app shows as the answer's sources and what LlamaIndex's
    evaluators (faithfulness, relevancy) judge the answer against; a node the relevance gate or the budget left
    out was never seen by the model. Nodes the report does not name (added by the caller) are kept."""
    items = {it.id: it for it in build.result.report.items}
    sent = {i for i, it in items.items() if it.status in ("included", "truncated")}
    sent |= {i for i, it in items.items()
             if it.status == "merged" and (it.detail or "").removeprefix("merged into ") in sent}
    return [n for n in nodes if n.node.node_id not in items or n.node.node_id in sent]


# ------------------------------------------------------------------ assembly
@dataclass
class PromptBuild:
    """One prompt: the template's variables, what is sent (for the record), and the reports."""

    variables: dict[str, str]
    sent: str  # the formatted prompt, or the messages joined as ``role: content``
    sent_tokens: int
    budget: int
    result: AssemblyResult
    #: What the synthesizer's calls covered of the nodes it was given (set on a response's last build):
    #: one report per answer says whether nodes were left out, however many calls it took.
    coverage: dict[str, Any] | None = None

    def report(self) -> dict[str, Any]:
        """The assembly report as JSON, with the counts of what was sent (and the coverage, when set)."""
        data = self.result.report.model_dump(mode="json")
        data["assembled_tokens"] = data["tokens"]
        data["tokens"], data["budget"] = self.sent_tokens, self.budget
        data["budget_used_percent"] = round(100.0 * self.sent_tokens / self.budget, 3)
        if self.coverage is not None:
            data["coverage"] = self.coverage
        return data


class LastBuildMixin:
    """``last_report`` and ``last_prompt`` of a plug-in class that keeps its last :class:`PromptBuild`
    as ``last_build`` (the synthesizer and the chat engine)."""

    last_build: PromptBuild | None

    @property
    def last_report(self) -> Any:
        return self.last_build.result.report if self.last_build else None

    @property
    def last_prompt(self) -> str | None:
        """What the LLM received last (messages as ``role: content`` lines)."""
        return self.last_build.sent if self.last_build else None


def _sections(instructions: str | None, query: str, evidence: list[EvidenceItem], history: list[Message] | None,
              options: dict[str, Any]) -> list[Section]:
    parts = []
    if instructions is not None:
        parts.append(Section("instructions", role="key_instructions", content=instructions))
    parts.append(Section("evidence", role="evidence", items=evidence, min_share=options.get("evidence_min_share")))
    if history:
        parts.append(Section("history", role="history", messages=list(history),
                             min_share=options.get("history_min_share", _history_min_share())))
    parts.append(Section("question", role="question", content=query))
    return parts


def _history_min_share() -> float:
    """ContextAssembler's default share kept for the history, so both assemble history alike."""
    from contextkit.assembly.context_assembler import AssemblerConfig

    return float(AssemblerConfig.model_fields["history_min_share"].default)


def _sent(template: BasePromptTemplate, llm: LLM, tok: Tokenizer, variables: dict[str, str]) -> tuple[str, int]:
    """What the LLM receives for these variables, and its tokens (messages: content plus overhead)."""
    if llm.metadata.is_chat_model:
        messages = llm._get_messages(template, **variables)
        contents = [str(m.content or "") for m in messages]
        return ("\n".join(f"{m.role.value}: {c}" for m, c in zip(messages, contents)),
                sum(tok.count(c) + MESSAGE_OVERHEAD for c in contents))
    text = llm._get_prompt(template, **variables)
    return text, tok.count(text)


def build_prompt(llm: LLM, template: BasePromptTemplate, tok: Tokenizer, budget: int, *, query: str,
                 instructions: str | None, evidence: list[EvidenceItem], history: list[Message] | None = None,
                 options: dict[str, Any] | None = None, summarizer: Any = None, quiet: bool = False) -> PromptBuild:
    """Assemble the blocks so that the *sent* prompt (template, system prompt, messages) fits ``budget``.

    ``quiet``: do not log the report's warnings (a trial build, as tree packing makes, that is never sent)."""
    options = dict(options or {})
    # The app's retriever and postprocessors chose these nodes (similarity_top_k, a budget): fill the
    # window with them, as LlamaIndex's own synthesizers send them all, unless told otherwise.
    options.setdefault("fill", "relevant")
    # Lean tags: a short citation id, the source once per element, no score (LlamaIndex shows the LLM none):
    # the node uuid and the score cost about 33 tokens a node, so the same evidence cost more than stock's.
    # ``report["citations"]`` maps each id to its node ids.
    options.setdefault("markup", "lean")
    _off_topic_bar(evidence, options)
    opts = AssemblyOptions(**{k: v for k, v in options.items() if k in AssemblyOptions.model_fields and
                              k != "tokenizer"})
    helpers: dict[str, Any] = {}
    if history and options.get("summarize_history", True):
        helpers["history_summarizer"] = summarizer
    if options.get("redact"):
        from contextkit.compressors.redact import PIIRedactor

        helpers["redactor"] = PIIRedactor()
    empty = {v: "" for v in TEMPLATE_VARS}
    extra = _sent(template, llm, tok, empty)[1]
    sections = _sections(instructions, query, evidence, history, options)
    for attempt in range(8):
        if budget - extra <= 0:
            break
        result = assemble(sections, budget - extra, options=opts, tokenizer=tok, **helpers)
        if _short(result, options):  # the instructions stated once: nothing in the middle to get lost
            opts = opts.model_copy(update={"restate_instructions": False})
            result = assemble(sections, budget - extra, options=opts, tokenizer=tok, **helpers)
        blocks = {s.name: result.prompt[s.start:s.end] for s in result.report.sections}
        variables = {v: blocks.get(v, "") for v in BLOCK_VARS}
        variables["context_str"] = variables["evidence"] + variables["history"]
        variables["query_str"] = query
        sent, tokens = _sent(template, llm, tok, variables)
        if tokens <= budget:
            for warning in [] if quiet else result.report.warnings:  # an app reads logs, not each report
                log.warning("contextkit: %s", warning)
            return PromptBuild(variables, sent, tokens, budget, result)
        # The template, system prompt and attributes took more: assemble smaller, by more each time (the
        # assembler cuts at sentence ends, so a step of a few tokens may change nothing).
        extra += (tokens - budget) * 2 ** attempt
    raise BudgetError(f"the prompt template, system prompt and instructions leave no room for evidence in "
                      f"{budget} tokens; shorten them or use an LLM with a larger context_window")

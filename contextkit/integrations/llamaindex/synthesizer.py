"""``ContextKitSynthesizer``: a LlamaIndex response synthesizer whose prompt is built by contextkit.

Drop it into any query engine (``index.as_query_engine(response_synthesizer=...)``,
``RetrieverQueryEngine``, or :func:`~.query_engine.contextkit_query_engine`, which
also honours ``streaming=`` and ``text_qa_template=``): the retrieved nodes become
evidence items (with their scores, ids and character offsets, so overlapping nodes
merge, and the metadata LlamaIndex shows the LLM as attributes of each document),
and contextkit's assembler builds the blocks under an exact budget taken from the
LLM's ``metadata`` (``num_output == -1`` read as LlamaIndex's default) and counted
with ``tokenizer=``, else ``Settings.tokenizer``, else cl100k_base.

The blocks go through LlamaIndex's prompt path (see ``_prompt.py``): the template is
exposed as ``text_qa_template`` by ``get_prompts``/``update_prompts``, the LLM's
``system_prompt`` is kept, chat models get system and user messages, completion
models one prompt, and streaming is the LLM's own stream. ``synthesize`` is
LlamaIndex's own, so SYNTHESIZE and TEMPLATING callbacks and the
``SynthesizeStartEvent``/``EndEvent`` instrumentation are emitted as for its own
synthesizers. The assembly report rides along in ``response.metadata["contextkit"]``,
with ``coverage``: which nodes the answer's calls left out for lack of room (also
logged as a warning, since an app reads logs, not each report).

``response_mode="tree_summarize"`` trades calls for coverage, as LlamaIndex's
``TreeSummarize`` does: every node reaches some call, and the answers are combined
until one call fits (see ``_tree.py``).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Sequence
from typing import Any

from llama_index.core.async_utils import run_async_tasks
from llama_index.core.llms import LLM
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.prompts.prompt_type import PromptType
from llama_index.core.response_synthesizers.base import BaseSynthesizer
from llama_index.core.schema import BaseNode, NodeWithScore, TextNode

from contextkit.core.errors import InvalidArgumentError
from contextkit.core.records import EvidenceItem
from contextkit.core.tokenizers import Tokenizer
from contextkit.integrations.llamaindex._budget import prompt_budget, resolve_tokenizer
from contextkit.integrations.llamaindex._prompt import (
    LastBuildMixin,
    PromptBuild,
    build_prompt,
    check_options,
    check_template,
    default_qa_template,
    evidence_from_nodes,
    nodes_in_prompt,
)
from contextkit.integrations.llamaindex._tree import TreeRun, left_out_for_room, truncated_items

__all__ = ["DEFAULT_INSTRUCTIONS", "SUPPORTED_RESPONSE_MODES", "ContextKitSynthesizer", "evidence_from_nodes",
           "llm_budget"]

DEFAULT_INSTRUCTIONS = (
    "Answer the question using only the documents in <evidence>. "
    "If they do not contain the answer, say so. Cite the ids of the documents you used."
)

#: Response modes it implements: one LLM call over evidence cut to fit (``compact``, ``simple_summarize``), or
#: a call per window of nodes with the answers combined until one call fits (``tree_summarize``).
SUPPORTED_RESPONSE_MODES = ("compact", "simple_summarize", "tree_summarize")
TREE_SUMMARIZE = "tree_summarize"

log = logging.getLogger(__name__)

_NODES: contextvars.ContextVar[Sequence[NodeWithScore] | None] = contextvars.ContextVar("ck_nodes", default=None)
#: The builds of the synthesize call running in this thread or task (a list: a span or a copied context between
#: ``synthesize`` and ``prepare`` still appends to the same one). Why not ``last_build``: concurrent requests on
#: one synthesizer overwrite it between a prompt's build and its response's metadata.
_BUILDS: contextvars.ContextVar[list[PromptBuild] | None] = contextvars.ContextVar("ck_builds", default=None)


def llm_budget(llm: LLM, reserve: int = 0) -> int:
    """Prompt tokens an LLM can take: its context window less its output tokens and ``reserve``.

    ``num_output == -1`` (LlamaIndex's "unset") counts as LlamaIndex's default of 256.
    """
    return prompt_budget(llm, reserve)


def check_response_mode(mode: Any) -> str:
    """The response mode's name (None: ``compact``); modes this synthesizer does not implement are
    refused instead of ignored."""
    if mode is None:
        return "compact"
    name = str(getattr(mode, "value", mode))
    if name not in SUPPORTED_RESPONSE_MODES:
        raise InvalidArgumentError(
            f"ContextKitSynthesizer makes one LLM call over evidence cut to fit the window (response_mode compact "
            f"or simple_summarize) or summarises every node hierarchically (tree_summarize); response_mode {name!r} "
            "is not supported: use LlamaIndex's get_response_synthesizer(response_mode=...) for it")
    return name


def _check_mode_options(mode: str, text_qa_template: Any, summary_template: Any, use_async: bool,
                        options: dict[str, Any]) -> None:
    """Refuse what the response mode would ignore: each mode has one template, and only the tree has
    calls to run concurrently or a reason to send every node."""
    tree = mode == TREE_SUMMARIZE
    if tree and text_qa_template is not None:
        raise InvalidArgumentError("response_mode 'tree_summarize' asks with summary_template= (as LlamaIndex's "
                                   "TreeSummarize), not text_qa_template=")
    if tree and options.get("fill", "budget") != "budget":
        raise InvalidArgumentError("response_mode 'tree_summarize' sends every node (fill='budget'); "
                                   f"fill={options['fill']!r} would gate them: use response_mode 'compact' for it")
    if not tree and summary_template is not None:
        raise InvalidArgumentError(f"summary_template: response_mode {mode!r} makes one LLM call; text_qa_template "
                                   "is its template (summary_template is for response_mode='tree_summarize')")
    if not tree and use_async:
        raise InvalidArgumentError(f"use_async: response_mode {mode!r} makes one LLM call; aquery() runs it "
                                   "asynchronously (use_async is for response_mode='tree_summarize')")


class ContextKitSynthesizer(LastBuildMixin, BaseSynthesizer):
    """Builds the prompt with contextkit, then asks the LLM once (no refine loop needed:
    the evidence is already cut to fit, and what was cut is reported and logged).

    ``response_mode="tree_summarize"`` asks once per window of nodes instead, then combines the
    answers, so that every node reaches the LLM (``summary_template=``, ``use_async=`` as
    LlamaIndex's ``TreeSummarize`` takes them)."""

    def __init__(self, llm: LLM | None = None, *, instructions: str = DEFAULT_INSTRUCTIONS,
                 reserve_tokens: int = 0, streaming: bool = False, callback_manager: Any = None,
                 text_qa_template: BasePromptTemplate | None = None, tokenizer: str | Tokenizer | None = None,
                 response_mode: Any = None, summary_template: BasePromptTemplate | None = None,
                 use_async: bool = False, **assembler_options: Any) -> None:
        self.response_mode = check_response_mode(response_mode)
        _check_mode_options(self.response_mode, text_qa_template, summary_template, use_async, assembler_options)
        check_options(assembler_options)
        if assembler_options.get("tokenizer") is not None:  # the old spelling: an assembly option
            tokenizer = tokenizer or assembler_options.pop("tokenizer")
        assembler_options.pop("tokenizer", None)
        super().__init__(llm=llm, callback_manager=callback_manager, streaming=streaming)
        self.instructions = instructions
        self.reserve_tokens = reserve_tokens
        self.tokenizer = tokenizer
        self.assembler_options = assembler_options
        self.use_async = use_async
        self._tree = self.response_mode == TREE_SUMMARIZE
        #: The mode's one template, under LlamaIndex's name for it (as ``TreeSummarize`` names its own).
        self._template_key = "summary_template" if self._tree else "text_qa_template"
        template = summary_template if self._tree else text_qa_template
        self._qa_template = check_template(template, self._template_key) if template is not None \
            else default_qa_template(PromptType.SUMMARY if self._tree else PromptType.QUESTION_ANSWER)
        self.last_build: PromptBuild | None = None

    # ------------------------------------------------------------- prompts
    def _get_prompts(self) -> dict[str, Any]:
        return {self._template_key: self._qa_template}

    def _update_prompts(self, prompts: dict[str, Any]) -> None:
        for key, template in prompts.items():
            if ":" in key:
                continue  # a sub-module's (none here); the mixin reports unknown modules
            if key != self._template_key:
                raise InvalidArgumentError(
                    f"ContextKitSynthesizer (response_mode {self.response_mode!r}) has one prompt, "
                    f"{self._template_key!r}, not {key!r} (no refine step; summary_template only with tree_summarize)")
            self._qa_template = check_template(template, key)

    def to_dict(self) -> dict[str, Any]:
        data = {"type": "ContextKitSynthesizer", "class_name": "ContextKitSynthesizer",
                "instructions": self.instructions, "reserve_tokens": self.reserve_tokens,
                "streaming": self._streaming, "response_mode": self.response_mode, **self.assembler_options}
        if self._tree:
            data["use_async"] = self.use_async
        if isinstance(self.tokenizer, str):
            data["tokenizer"] = self.tokenizer
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], **objects: Any) -> ContextKitSynthesizer:
        """Rebuild from :meth:`to_dict`; ``llm=`` (which a dict cannot hold) and other objects by keyword,
        as every contextkit component's ``from_dict`` takes them."""
        data = {k: v for k, v in data.items() if k not in ("type", "class_name")}
        return cls(**{**data, **objects})

    # ---------------------------------------------------------------- prompt
    def _assemble(self, query_str: str, evidence: list[EvidenceItem], tok: Tokenizer, quiet: bool = False) \
            -> PromptBuild:
        options = {**self.assembler_options, "fill": "budget"} if self._tree else self.assembler_options
        return build_prompt(self._llm, self._qa_template, tok, prompt_budget(self._llm, self.reserve_tokens),
                            query=query_str, instructions=self.instructions, evidence=evidence, options=options,
                            quiet=quiet)

    def _record(self, build: PromptBuild) -> PromptBuild:
        """Keep a build that is sent: ``last_build``, and this request's builds (the last one's report
        becomes the response's metadata)."""
        self.last_build = build
        builds = _BUILDS.get()
        if builds is not None:
            builds.append(build)
        return build

    def prepare(self, query_str: str, nodes: Sequence[NodeWithScore]) -> PromptBuild:
        """The template variables for this question and these nodes, fitted to the LLM's window in one
        prompt (what ``compact`` sends; ``tree_summarize`` sends as many as the nodes need), with the
        nodes it leaves out for lack of room in its ``coverage``."""
        tok = resolve_tokenizer(self.tokenizer)
        evidence = evidence_from_nodes(nodes)
        build = self._assemble(query_str, evidence, tok)
        build.coverage = self._one_call_coverage(build, evidence, tok)
        return self._record(build)

    def _one_call_coverage(self, build: PromptBuild, evidence: list[EvidenceItem], tok: Tokenizer) \
            -> dict[str, Any]:
        """What one call left out of the nodes for lack of room (relevance gating is not counted: it is
        reported in ``relevance``), by node id and in tokens."""
        left, cut = left_out_for_room(build), truncated_items(build)
        texts = {e.id: e.text for e in evidence}
        return {"response_mode": self.response_mode, "nodes": len(evidence), "calls": 1, "levels": 1,
                "left_out": left, "left_out_tokens": sum(tok.count(texts.get(i, "")) for i in left),
                "node_tokens": sum(tok.count(e.text) for e in evidence), "truncated": cut,
                "complete": not left and not cut}

    def _one_call(self, query_str: str, nodes: Sequence[NodeWithScore]) -> PromptBuild:
        """``prepare``, and a warning when the prompt cannot hold every node: an app summarising a long
        document on a small window otherwise never learns that part of it was not read."""
        build = self.prepare(query_str, nodes)
        cov = build.coverage or {}
        if cov.get("left_out") or cov.get("truncated"):
            log.warning(
                "contextkit: response_mode %r left out %d of %d retrieved nodes (%s of %s tokens) and cut %d "
                "short, for lack of room in a %s-token prompt; their ids are in "
                "response.metadata['contextkit']['coverage']; response_mode='tree_summarize' sends every node, "
                "in more LLM calls", self.response_mode, len(cov["left_out"]), cov["nodes"],
                f"{cov['left_out_tokens']:,}", f"{cov['node_tokens']:,}", len(cov["truncated"]), f"{build.budget:,}")
        return build

    def build_prompt(self, query_str: str, nodes: Sequence[NodeWithScore]) -> str:
        """What the LLM would receive for this question and these nodes (in one call)."""
        return self.prepare(query_str, nodes).sent

    @staticmethod
    def _nodes_from_chunks(text_chunks: Sequence[str]) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(text=t, id_=f"chunk-{i}")) for i, t in enumerate(text_chunks)]

    def _nodes(self, text_chunks: Sequence[str], kwargs: dict[str, Any]) -> Sequence[NodeWithScore]:
        return kwargs.pop("nodes", None) or _NODES.get() or self._nodes_from_chunks(text_chunks)

    # ------------------------------------------------------ tree_summarize
    def _tree_run(self, query_str: str, nodes: Sequence[NodeWithScore]) -> TreeRun:
        tok = resolve_tokenizer(self.tokenizer)
        return TreeRun(evidence_from_nodes(nodes), lambda items: self._assemble(query_str, items, tok, quiet=True),
                       tok, prompt_budget(self._llm, self.reserve_tokens))

    def _root(self, run: TreeRun, build: PromptBuild) -> PromptBuild:
        """The last call's build, carrying what the whole tree covered."""
        build.coverage = run.coverage()
        return self._record(build)

    def _tree_build(self, query_str: str, nodes: Sequence[NodeWithScore]) -> PromptBuild:
        """Answers per window of nodes, combined level by level until one call fits: that call's build
        (the caller makes it, so that it alone may stream, as LlamaIndex's ``TreeSummarize`` does)."""
        run = self._tree_run(query_str, nodes)
        builds = run.next_level()
        while len(builds) > 1:
            run.take_answers(self._answer_each([self._record(b) for b in builds]))
            builds = run.next_level()
        return self._root(run, builds[0])

    def _answer_each(self, builds: list[PromptBuild]) -> list[Any]:
        """One level's calls: one after another, or concurrently with ``use_async`` (as ``TreeSummarize``)."""
        if self.use_async:
            return run_async_tasks([self._llm.apredict(self._qa_template, **b.variables) for b in builds])
        return [self._llm.predict(self._qa_template, **b.variables) for b in builds]

    async def _atree_build(self, query_str: str, nodes: Sequence[NodeWithScore]) -> PromptBuild:
        """``_tree_build`` with each level's calls run concurrently (as ``TreeSummarize.aget_response``)."""
        run = self._tree_run(query_str, nodes)
        builds = run.next_level()
        while len(builds) > 1:
            run.take_answers(await asyncio.gather(
                *(self._llm.apredict(self._qa_template, **self._record(b).variables) for b in builds)))
            builds = run.next_level()
        return self._root(run, builds[0])

    # ------------------------------------------------------- synthesizer API
    def get_response(self, query_str: str, text_chunks: Sequence[str], **kwargs: Any) -> Any:
        nodes = self._nodes(text_chunks, kwargs)
        build = self._tree_build(query_str, nodes) if self._tree else self._one_call(query_str, nodes)
        if self._streaming:
            return self._llm.stream(self._qa_template, **build.variables)
        return self._llm.predict(self._qa_template, **build.variables)

    async def aget_response(self, query_str: str, text_chunks: Sequence[str], **kwargs: Any) -> Any:
        nodes = self._nodes(text_chunks, kwargs)
        build = await self._atree_build(query_str, nodes) if self._tree else self._one_call(query_str, nodes)
        if self._streaming:
            return await self._llm.astream(self._qa_template, **build.variables)
        return await self._llm.apredict(self._qa_template, **build.variables)

    def _get_metadata_for_response(self, nodes: list[BaseNode]) -> dict[str, Any] | None:
        metadata = dict(super()._get_metadata_for_response(nodes) or {})
        builds = _BUILDS.get()
        build = builds[-1] if builds else (self.last_build if builds is None else None)
        metadata["contextkit"] = build.report() if build else None  # this request's, never another's
        return metadata

    def _sent_sources(self, response: Any) -> Any:
        """``response`` with ``source_nodes`` narrowed to the nodes its one prompt sent (see
        :func:`nodes_in_prompt`); a tree sends every node, and keeps them all."""
        builds = _BUILDS.get()
        if not self._tree and builds and len(builds) == 1 and hasattr(response, "source_nodes"):
            response.source_nodes = nodes_in_prompt(response.source_nodes, builds[0])
        return response

    def synthesize(self, query: Any, nodes: list[NodeWithScore],
                   additional_source_nodes: Sequence[NodeWithScore] | None = None, **kwargs: Any) -> Any:
        """LlamaIndex's own (events, callbacks, response types), with the nodes themselves (scores,
        offsets, metadata) reaching the assembler instead of their flattened texts."""
        token, builds = _NODES.set(nodes), _BUILDS.set([])
        try:
            return self._sent_sources(super().synthesize(query, nodes, additional_source_nodes, **kwargs))
        finally:
            _NODES.reset(token)
            _BUILDS.reset(builds)

    async def asynthesize(self, query: Any, nodes: list[NodeWithScore],
                          additional_source_nodes: Sequence[NodeWithScore] | None = None, **kwargs: Any) -> Any:
        token, builds = _NODES.set(nodes), _BUILDS.set([])
        try:
            return self._sent_sources(await super().asynthesize(query, nodes, additional_source_nodes, **kwargs))
        finally:
            _NODES.reset(token)
            _BUILDS.reset(builds)

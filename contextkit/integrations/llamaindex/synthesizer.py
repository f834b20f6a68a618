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
synthesizers. The assembly report rides along in ``response.metadata["contextkit"]``.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from typing import Any

from llama_index.core.llms import LLM
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.response_synthesizers.base import BaseSynthesizer
from llama_index.core.schema import BaseNode, NodeWithScore, TextNode

from contextkit.core.errors import InvalidArgumentError
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
)

__all__ = ["DEFAULT_INSTRUCTIONS", "SUPPORTED_RESPONSE_MODES", "ContextKitSynthesizer", "evidence_from_nodes",
           "llm_budget"]

DEFAULT_INSTRUCTIONS = (
    "Answer the question using only the documents in <evidence>. "
    "If they do not contain the answer, say so. Cite the ids of the documents you used."
)

#: Response modes meaning one LLM call over evidence cut to fit: what this synthesizer does.
SUPPORTED_RESPONSE_MODES = ("compact", "simple_summarize")

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


def check_response_mode(mode: Any) -> None:
    """Refuse response modes this synthesizer does not implement, instead of ignoring them."""
    if mode is None:
        return
    name = str(getattr(mode, "value", mode))
    if name not in SUPPORTED_RESPONSE_MODES:
        raise InvalidArgumentError(
            f"ContextKitSynthesizer makes one LLM call over evidence cut to fit the window (response_mode "
            f"{' or '.join(SUPPORTED_RESPONSE_MODES)}); response_mode {name!r} is not supported: use LlamaIndex's "
            "get_response_synthesizer(response_mode=...) for it")


class ContextKitSynthesizer(LastBuildMixin, BaseSynthesizer):
    """Builds the prompt with contextkit, then asks the LLM once (no refine loop needed:
    the evidence is already cut to fit)."""

    def __init__(self, llm: LLM | None = None, *, instructions: str = DEFAULT_INSTRUCTIONS,
                 reserve_tokens: int = 0, streaming: bool = False, callback_manager: Any = None,
                 text_qa_template: BasePromptTemplate | None = None, tokenizer: str | Tokenizer | None = None,
                 response_mode: Any = None, **assembler_options: Any) -> None:
        check_response_mode(response_mode)
        check_options(assembler_options)
        if assembler_options.get("tokenizer") is not None:  # the old spelling: an assembly option
            tokenizer = tokenizer or assembler_options.pop("tokenizer")
        assembler_options.pop("tokenizer", None)
        super().__init__(llm=llm, callback_manager=callback_manager, streaming=streaming)
        self.instructions = instructions
        self.reserve_tokens = reserve_tokens
        self.tokenizer = tokenizer
        self.assembler_options = assembler_options
        self._qa_template = check_template(text_qa_template) if text_qa_template is not None \
            else default_qa_template()
        self.last_build: PromptBuild | None = None

    # ------------------------------------------------------------- prompts
    def _get_prompts(self) -> dict[str, Any]:
        return {"text_qa_template": self._qa_template}

    def _update_prompts(self, prompts: dict[str, Any]) -> None:
        for key, template in prompts.items():
            if ":" in key:
                continue  # a sub-module's (none here); the mixin reports unknown modules
            if key != "text_qa_template":
                raise InvalidArgumentError(f"ContextKitSynthesizer has one prompt, 'text_qa_template', not {key!r} "
                                           "(it makes one call: no refine or summary template)")
            self._qa_template = check_template(template)

    def to_dict(self) -> dict[str, Any]:
        data = {"type": "ContextKitSynthesizer", "class_name": "ContextKitSynthesizer",
                "instructions": self.instructions, "reserve_tokens": self.reserve_tokens,
                "streaming": self._streaming, **self.assembler_options}
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
    def prepare(self, query_str: str, nodes: Sequence[NodeWithScore]) -> PromptBuild:
        """The template variables for this question and these nodes, fitted to the LLM's window."""
        tok = resolve_tokenizer(self.tokenizer)
        build = build_prompt(self._llm, self._qa_template, tok, prompt_budget(self._llm, self.reserve_tokens),
                             query=query_str, instructions=self.instructions, evidence=evidence_from_nodes(nodes),
                             options=self.assembler_options)
        self.last_build = build
        builds = _BUILDS.get()
        if builds is not None:
            builds.append(build)
        return build

    def build_prompt(self, query_str: str, nodes: Sequence[NodeWithScore]) -> str:
        """What the LLM would receive for this question and these nodes."""
        return self.prepare(query_str, nodes).sent

    @staticmethod
    def _nodes_from_chunks(text_chunks: Sequence[str]) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(text=t, id_=f"chunk-{i}")) for i, t in enumerate(text_chunks)]

    def _nodes(self, text_chunks: Sequence[str], kwargs: dict[str, Any]) -> Sequence[NodeWithScore]:
        return kwargs.pop("nodes", None) or _NODES.get() or self._nodes_from_chunks(text_chunks)

    # ------------------------------------------------------- synthesizer API
    def get_response(self, query_str: str, text_chunks: Sequence[str], **kwargs: Any) -> Any:
        build = self.prepare(query_str, self._nodes(text_chunks, kwargs))
        if self._streaming:
            return self._llm.stream(self._qa_template, **build.variables)
        return self._llm.predict(self._qa_template, **build.variables)

    async def aget_response(self, query_str: str, text_chunks: Sequence[str], **kwargs: Any) -> Any:
        build = self.prepare(query_str, self._nodes(text_chunks, kwargs))
        if self._streaming:
            return await self._llm.astream(self._qa_template, **build.variables)
        return await self._llm.apredict(self._qa_template, **build.variables)

    def _get_metadata_for_response(self, nodes: list[BaseNode]) -> dict[str, Any] | None:
        metadata = dict(super()._get_metadata_for_response(nodes) or {})
        builds = _BUILDS.get()
        build = builds[-1] if builds else (self.last_build if builds is None else None)
        metadata["contextkit"] = build.report() if build else None  # this request's, never another's
        return metadata

    def synthesize(self, query: Any, nodes: list[NodeWithScore],
                   additional_source_nodes: Sequence[NodeWithScore] | None = None, **kwargs: Any) -> Any:
        """LlamaIndex's own (events, callbacks, response types), with the nodes themselves (scores,
        offsets, metadata) reaching the assembler instead of their flattened texts."""
        token, builds = _NODES.set(nodes), _BUILDS.set([])
        try:
            return super().synthesize(query, nodes, additional_source_nodes, **kwargs)
        finally:
            _NODES.reset(token)
            _BUILDS.reset(builds)

    async def asynthesize(self, query: Any, nodes: list[NodeWithScore],
                          additional_source_nodes: Sequence[NodeWithScore] | None = None, **kwargs: Any) -> Any:
        token, builds = _NODES.set(nodes), _BUILDS.set([])
        try:
            return await super().asynthesize(query, nodes, additional_source_nodes, **kwargs)
        finally:
            _NODES.reset(token)
            _BUILDS.reset(builds)

"""``ContextKitSynthesizer``: a LlamaIndex response synthesizer whose prompt is built by contextkit.

Drop it into any query engine (``index.as_query_engine(response_synthesizer=...)``
or ``RetrieverQueryEngine``): the retrieved nodes become evidence items (with
their scores, ids and character offsets, so overlapping nodes merge), and
:class:`~contextkit.assembly.context_assembler.ContextAssembler` builds one prompt with XML
sections, the instructions at head and tail, and an exact budget taken from the
LLM's own ``metadata.context_window`` less ``num_output``. The assembly report
rides along in ``response.metadata["contextkit"]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    Response,
    StreamingResponse,
)
from llama_index.core.llms import LLM
from llama_index.core.response_synthesizers.base import BaseSynthesizer
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from contextkit.assembly.context_assembler import ContextAssembler
from contextkit.assembly.sections import EvidenceItem
from contextkit.errors import InvalidArgumentError

__all__ = ["DEFAULT_INSTRUCTIONS", "ContextKitSynthesizer", "evidence_from_nodes", "llm_budget"]

DEFAULT_INSTRUCTIONS = (
    "Answer the question using only the documents in <evidence>. "
    "If they do not contain the answer, say so. Cite the ids of the documents you used."
)


def llm_budget(llm: LLM, reserve: int = 0) -> int:
    """Prompt tokens an LLM can take: its context window less its output tokens and ``reserve``."""
    meta = llm.metadata
    budget = int(meta.context_window) - int(meta.num_output or 0) - reserve
    if budget <= 0:
        raise InvalidArgumentError(f"{meta.model_name}: context_window {meta.context_window} leaves no room for a prompt "
                         f"after num_output {meta.num_output} and reserve {reserve}")
    return budget


def evidence_from_nodes(nodes: Sequence[NodeWithScore]) -> list[EvidenceItem]:
    """Nodes as evidence items: id, text (no metadata), score, source document and offsets."""
    items = []
    for i, nws in enumerate(nodes):
        node = nws.node
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        meta = dict(node.metadata or {})
        source = str(meta.get("file_path") or meta.get("file_name") or meta.get("source") or node.ref_doc_id or "")
        start, end = getattr(node, "start_char_idx", None), getattr(node, "end_char_idx", None)
        offsets_ok = start is not None and end is not None and end - start == len(text)
        items.append(EvidenceItem(
            id=node.node_id or f"node-{i}", text=text, source=source, score=nws.score,
            doc_id=node.ref_doc_id if offsets_ok else None, start=start if offsets_ok else None,
            end=end if offsets_ok else None, metadata={k: v for k, v in meta.items() if isinstance(v, str | int | float)}))
    return items


class ContextKitSynthesizer(BaseSynthesizer):
    """Builds the prompt with contextkit, then asks the LLM once (no refine loop needed:
    the evidence is already cut to fit)."""

    def __init__(self, llm: LLM | None = None, *, instructions: str = DEFAULT_INSTRUCTIONS,
                 reserve_tokens: int = 0, streaming: bool = False, callback_manager: Any = None,
                 **assembler_options: Any) -> None:
        super().__init__(llm=llm, callback_manager=callback_manager, streaming=streaming)
        self.instructions = instructions
        self.reserve_tokens = reserve_tokens
        self.assembler_options = assembler_options
        self.last_report: Any = None
        self.last_prompt: str | None = None

    def _get_prompts(self) -> dict[str, Any]:
        return {}

    def _update_prompts(self, prompts: dict[str, Any]) -> None:
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"type": "ContextKitSynthesizer", "class_name": "ContextKitSynthesizer", "instructions": self.instructions,
                "reserve_tokens": self.reserve_tokens, "streaming": self._streaming, **self.assembler_options}

    @classmethod
    def from_dict(cls, data: dict[str, Any], llm: LLM | None = None) -> ContextKitSynthesizer:
        data = {k: v for k, v in data.items() if k not in ("type", "class_name")}
        return cls(llm=llm, **data)

    # ---------------------------------------------------------------- prompt
    def build_prompt(self, query_str: str, nodes: Sequence[NodeWithScore]) -> str:
        assembler = ContextAssembler(llm_budget(self._llm, self.reserve_tokens), **self.assembler_options)
        result = assembler.assemble(query_str, instructions=self.instructions, evidence=evidence_from_nodes(nodes))
        self.last_report, self.last_prompt = result.report, result.prompt
        return result.prompt

    def _nodes_from_chunks(self, text_chunks: Sequence[str]) -> list[NodeWithScore]:
        from llama_index.core.schema import TextNode

        return [NodeWithScore(node=TextNode(text=t, id_=f"chunk-{i}")) for i, t in enumerate(text_chunks)]

    # ------------------------------------------------------- synthesizer API
    def get_response(self, query_str: str, text_chunks: Sequence[str], **kwargs: Any) -> Any:
        prompt = self.build_prompt(query_str, kwargs.pop("nodes", None) or self._nodes_from_chunks(text_chunks))
        if self._streaming:
            return (r.delta or "" for r in self._llm.stream_complete(prompt, formatted=True))
        return self._llm.complete(prompt, formatted=True).text

    async def aget_response(self, query_str: str, text_chunks: Sequence[str], **kwargs: Any) -> Any:
        prompt = self.build_prompt(query_str, kwargs.pop("nodes", None) or self._nodes_from_chunks(text_chunks))
        return (await self._llm.acomplete(prompt, formatted=True)).text

    def synthesize(self, query: Any, nodes: list[NodeWithScore],
                   additional_source_nodes: Sequence[NodeWithScore] | None = None, **kwargs: Any) -> RESPONSE_TYPE:
        """As LlamaIndex's, but the nodes themselves (scores, offsets) reach the assembler."""
        if not nodes:
            return Response(self._empty_response)
        query_str = query.query_str if isinstance(query, QueryBundle) else str(query)
        text = self.get_response(query_str, [], nodes=nodes, **kwargs)
        sources = list(nodes) + list(additional_source_nodes or [])
        metadata = {"contextkit": self.last_report.model_dump(mode="json") if self.last_report else None}
        if self._streaming:
            return StreamingResponse(text, source_nodes=sources, metadata=metadata)
        return Response(text, source_nodes=sources, metadata=metadata)

    async def asynthesize(self, query: Any, nodes: list[NodeWithScore],
                          additional_source_nodes: Sequence[NodeWithScore] | None = None,
                          **kwargs: Any) -> RESPONSE_TYPE:
        if not nodes:
            return Response(self._empty_response)
        query_str = query.query_str if isinstance(query, QueryBundle) else str(query)
        text = await self.aget_response(query_str, [], nodes=nodes, **kwargs)
        metadata = {"contextkit": self.last_report.model_dump(mode="json") if self.last_report else None}
        return Response(text, source_nodes=list(nodes) + list(additional_source_nodes or []), metadata=metadata)


"""``contextkit_query_engine``: ``index.as_query_engine(...)`` with contextkit's synthesizer, every option kept.

Why not ``index.as_query_engine(response_synthesizer=ContextKitSynthesizer(...),
streaming=True)``: when a synthesizer is given, LlamaIndex's
``RetrieverQueryEngine.from_args`` drops ``streaming=``, ``text_qa_template=``
and ``response_mode=`` without a word (they only configure the synthesizer it
would have built). This function hands them to the contextkit synthesizer
instead, and refuses the ones it does not support.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.llms import LLM
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.settings import Settings

from contextkit.core.errors import InvalidArgumentError
from contextkit.integrations.llamaindex.synthesizer import ContextKitSynthesizer

__all__ = ["contextkit_query_engine"]


def contextkit_query_engine(index_or_retriever: Any, llm: LLM | None = None, *, streaming: bool = False,
                            text_qa_template: BasePromptTemplate | None = None, response_mode: Any = None,
                            node_postprocessors: list[Any] | None = None, callback_manager: Any = None,
                            synthesizer_options: dict[str, Any] | None = None,
                            **retriever_kwargs: Any) -> RetrieverQueryEngine:
    """A ``RetrieverQueryEngine`` over an index (``as_retriever(**retriever_kwargs)``) or a retriever,
    answering with a :class:`ContextKitSynthesizer` built with ``streaming``, ``text_qa_template`` and
    ``response_mode`` (``compact`` or ``simple_summarize``; others are refused)."""
    llm = llm or Settings.llm
    if isinstance(index_or_retriever, BaseRetriever):
        if retriever_kwargs:
            raise InvalidArgumentError(f"retriever options {sorted(retriever_kwargs)} need an index; this is "
                                       "already a retriever: configure it directly")
        retriever = index_or_retriever
    elif hasattr(index_or_retriever, "as_retriever"):
        retriever = index_or_retriever.as_retriever(**retriever_kwargs)
    else:
        raise InvalidArgumentError(f"expected a LlamaIndex index or retriever, not {type(index_or_retriever).__name__}")
    synthesizer = ContextKitSynthesizer(llm=llm, streaming=streaming, text_qa_template=text_qa_template,
                                        response_mode=response_mode, callback_manager=callback_manager,
                                        **(synthesizer_options or {}))
    return RetrieverQueryEngine(retriever=retriever, response_synthesizer=synthesizer,
                                node_postprocessors=node_postprocessors,
                                callback_manager=callback_manager or Settings.callback_manager)

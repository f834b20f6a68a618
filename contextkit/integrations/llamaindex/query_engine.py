"""``contextkit_query_engine``: ``index.as_query_engine(...)`` with contextkit's synthesizer, every option kept.

Why not ``index.as_query_engine(response_synthesizer=ContextKitSynthesizer(...),
streaming=True)``: when a synthesizer is given, LlamaIndex's
``RetrieverQueryEngine.from_args`` drops ``streaming=``, ``text_qa_template=``
and ``response_mode=`` without a word (they only configure the synthesizer it
would have built). This function hands them to the contextkit synthesizer
instead, and refuses the ones it does not support: the refine and structured-output
synthesizers' options (``refine_template``, ``output_cls``...) have no use in contextkit's
synthesizer, ``summary_template`` and ``use_async`` reach it only with
``response_mode="tree_summarize"`` (the one mode that makes several calls), and an option the
retriever does not take (``similarty_top_k``) would otherwise vanish into
``as_retriever(**kwargs)``, which LlamaIndex never checks.
"""

from __future__ import annotations

import difflib
import inspect
import warnings
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.llms import LLM
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.settings import Settings

from contextkit.core.errors import InvalidArgumentError
from contextkit.integrations.llamaindex._similarity import with_similarity_marker
from contextkit.integrations.llamaindex.synthesizer import ContextKitSynthesizer

__all__ = ["contextkit_query_engine"]


def contextkit_query_engine(index_or_retriever: Any, llm: LLM | None = None, *, streaming: bool = False,
                            text_qa_template: BasePromptTemplate | None = None, response_mode: Any = None,
                            summary_template: BasePromptTemplate | None = None, use_async: bool = False,
                            node_postprocessors: list[Any] | None = None, callback_manager: Any = None,
                            synthesizer_options: dict[str, Any] | None = None,
                            **retriever_kwargs: Any) -> RetrieverQueryEngine:
    """A ``RetrieverQueryEngine`` over an index (``as_retriever(**retriever_kwargs)``) or a retriever,
    answering with a :class:`ContextKitSynthesizer` built with ``streaming``, ``text_qa_template`` and
    ``response_mode`` (``compact`` or ``simple_summarize``: one call; ``tree_summarize``, with
    ``summary_template`` and ``use_async``: every node, in as many calls as it takes; others are refused)."""
    _refuse_synthesizer_options(retriever_kwargs)
    _warn_budget_not_last(node_postprocessors or [])
    llm = llm or Settings.llm
    retriever, node_postprocessors = retriever_for(index_or_retriever, retriever_kwargs, node_postprocessors)
    synthesizer = ContextKitSynthesizer(llm=llm, streaming=streaming, text_qa_template=text_qa_template,
                                        response_mode=response_mode, summary_template=summary_template,
                                        use_async=use_async, callback_manager=callback_manager,
                                        **(synthesizer_options or {}))
    return RetrieverQueryEngine(retriever=retriever, response_synthesizer=synthesizer,
                                node_postprocessors=node_postprocessors,
                                callback_manager=callback_manager or Settings.callback_manager)


def retriever_for(index_or_retriever: Any, retriever_kwargs: dict[str, Any],
                  postprocessors: list[Any] | None) -> tuple[BaseRetriever, list[Any] | None]:
    """The retriever an engine asks (``index.as_retriever(**retriever_kwargs)``, options checked for
    misspellings, or the retriever given, which takes none) and the app's postprocessors, with the
    similarity marker first when the index's scores are cosines (the off-topic check needs it)."""
    if isinstance(index_or_retriever, BaseRetriever):
        if retriever_kwargs:
            raise InvalidArgumentError(f"retriever options {sorted(retriever_kwargs)} need an index; this is "
                                       "already a retriever: configure it directly")
        return index_or_retriever, postprocessors
    if not hasattr(index_or_retriever, "as_retriever"):
        raise InvalidArgumentError(f"expected a LlamaIndex index or retriever, not {type(index_or_retriever).__name__}")
    retriever = index_or_retriever.as_retriever(**retriever_kwargs)
    _refuse_unknown(retriever_kwargs, index_or_retriever, retriever)
    return retriever, with_similarity_marker(index_or_retriever, retriever_kwargs, postprocessors)


#: What ``as_query_engine`` / ``get_response_synthesizer`` take for LlamaIndex's own synthesizers, and
#: why contextkit's one call has no use for it.
_SYNTHESIZER_ONLY = {
    "refine_template": "contextkit makes one LLM call (no refine step); text_qa_template is its template",
    "simple_template": "text_qa_template is contextkit's template",
    "chat_content_qa_template": "text_qa_template is contextkit's template",
    "chat_content_refine_template": "contextkit makes one LLM call (no refine step)",
    "output_cls": "structured outputs are not supported by contextkit's synthesizer; call llm.structured_predict "
                  "on the response, or use LlamaIndex's synthesizer",
    "structured_answer_filtering": "contextkit makes one LLM call (no per-chunk answers to filter)",
    "prompt_helper": "the budget comes from the LLM's context_window (synthesizer_options={'budget': ...})",
    "program_factory": "structured outputs are not supported by contextkit's synthesizer",
}


def _refuse_synthesizer_options(options: dict[str, Any]) -> None:
    """A LlamaIndex synthesizer option given to contextkit's: refused by name, with what to do instead."""
    given = sorted(set(options) & set(_SYNTHESIZER_ONLY))
    if given:
        raise InvalidArgumentError("; ".join(f"{name}: {_SYNTHESIZER_ONLY[name]}" for name in given))


def _refuse_unknown(options: dict[str, Any], index: Any, retriever: Any) -> None:
    """An option neither ``index.as_retriever`` nor the retriever it built names: a misspelling, refused
    with the nearest name (LlamaIndex's retrievers take ``**kwargs`` and drop what they do not know)."""
    known = _named_parameters(index.as_retriever) | {
        name for cls in type(retriever).__mro__ if "__init__" in vars(cls) for name in _named_parameters(vars(cls)["__init__"])}
    unknown = sorted(set(options) - known)
    if not unknown:
        return
    hints = [f"{name!r}" + (f" (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(
        name, sorted(known), n=1)) else "") for name in unknown]
    raise InvalidArgumentError(f"unknown option(s) for {type(retriever).__name__}: {', '.join(hints)}")


def _named_parameters(function: Any) -> set[str]:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check against
        return set()
    return {p.name for p in parameters if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self"}


def _warn_budget_not_last(postprocessors: list[Any]) -> None:
    """A ``ContextBudgetPostprocessor`` with others after it: they run on what it fitted (a sentence window
    replaced, a reranker's extra text), so the budget no longer holds. Said once, naming them."""
    from contextkit.integrations.llamaindex.postprocessor import ContextBudgetPostprocessor

    budget = [i for i, p in enumerate(postprocessors) if isinstance(p, ContextBudgetPostprocessor)]
    after = [type(p).__name__ for p in postprocessors[budget[0] + 1:]] if budget else []
    if after:
        warnings.warn(f"ContextBudgetPostprocessor runs before {', '.join(after)}: what they change is not in its "
                      "budget (put it last in node_postprocessors)", UserWarning, stacklevel=3)

"""``contextkit_query_engine`` refuses what it would otherwise drop without a word (issue 32).

On 6e3bcce ``contextkit_query_engine(index, llm, output_cls=Answer)`` or ``refine_template=...``
passed the option on to ``index.as_retriever(**kwargs)``, which LlamaIndex's retrievers accept
and ignore, and a misspelt ``similarty_top_k=1`` silently kept the default of 2 nodes.
"""

from __future__ import annotations

import pytest
from fakes import RecordingChatLLM

pytest.importorskip("llama_index.core")

from llama_index.core.prompts import PromptTemplate  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from contextkit.errors import ContextkitError  # noqa: E402
from contextkit.integrations.llamaindex.query_engine import contextkit_query_engine  # noqa: E402


class Answer(BaseModel):
    text: str


@pytest.mark.parametrize(("option", "said"), [
    ("output_cls", "structured outputs"),
    ("refine_template", "no refine step"),
    ("use_async", "aquery"),
])
def test_a_multi_call_synthesizer_option_is_refused_by_name(node_index, option, said):
    value = {"output_cls": Answer, "refine_template": PromptTemplate("{context_msg}{query_str}"),
             "use_async": True}[option]
    with pytest.raises(ContextkitError, match=said) as refused:
        contextkit_query_engine(node_index, RecordingChatLLM(), **{option: value})
    assert option in str(refused.value)


def test_a_misspelt_retriever_option_is_refused_with_the_right_name(node_index):
    with pytest.raises(ContextkitError, match=r"'similarty_top_k' \(did you mean 'similarity_top_k'\?\)"):
        contextkit_query_engine(node_index, RecordingChatLLM(), similarty_top_k=1)


def test_the_retrievers_own_options_still_reach_it(node_index):
    llm = RecordingChatLLM()
    response = contextkit_query_engine(node_index, llm, similarity_top_k=1, vector_store_query_mode="default"
                                       ).query("Why does FAISS keep ids?")
    assert len(response.source_nodes) == 1


def test_a_budget_postprocessor_before_others_is_warned_about(node_index):
    from llama_index.core.postprocessor import MetadataReplacementPostProcessor

    from contextkit.integrations.llamaindex import ContextBudgetPostprocessor

    window = MetadataReplacementPostProcessor(target_metadata_key="window")
    with pytest.warns(UserWarning, match="runs before MetadataReplacementPostProcessor"):
        contextkit_query_engine(node_index, RecordingChatLLM(), node_postprocessors=[
            ContextBudgetPostprocessor(token_budget=500), window])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the right order says nothing
        contextkit_query_engine(node_index, RecordingChatLLM(), node_postprocessors=[
            window, ContextBudgetPostprocessor(token_budget=500)])

"""One budget for every plug-in class: ``num_output == -1``, ``Settings.tokenizer``, ``tokenizer=``, ``Settings.llm``.

Each test drives a plug-in class with real llama-index-core and a recording LLM and
counts what the LLM actually received.
"""

from __future__ import annotations

import contextlib

import pytest
from fakes import ScriptedLLM

pytest.importorskip("llama_index.core")

import llama_index.core as li_core  # noqa: E402
from llama_index.core import Settings  # noqa: E402

from contextkit.integrations.llamaindex.chat import ContextKitChatEngine  # noqa: E402
from contextkit.integrations.llamaindex.postprocessor import ContextBudgetPostprocessor  # noqa: E402
from contextkit.integrations.llamaindex.synthesizer import ContextKitSynthesizer  # noqa: E402
from contextkit.tokenizers import get_tokenizer  # noqa: E402


@contextlib.contextmanager
def settings(**values):
    """Set ``Settings`` fields for one test and put the previous ones back (they are process-wide)."""
    saved_llm, saved_tok = Settings._llm, li_core.global_tokenizer
    try:
        for key, value in values.items():
            setattr(Settings, key, value)
        yield
    finally:
        Settings._llm = saved_llm
        li_core.global_tokenizer = saved_tok


@pytest.fixture(scope="module")
def hf_tokenizer():
    from transformers import AutoTokenizer

    from contextkit.embedders.base import default_model_path

    return AutoTokenizer.from_pretrained(default_model_path())


class TestNumOutputUnset:
    """``num_output == -1`` is LlamaIndex's "unset" (MockLLM, OpenAI without max_tokens): its default of 256."""

    def test_synthesizer_leaves_room_for_the_answer(self, evidence_nodes, cl100k):
        llm = ScriptedLLM(context_window=1500, num_output=-1)
        ContextKitSynthesizer(llm=llm).synthesize("Why does num_output=-1 matter?", evidence_nodes)
        assert 1500 - 256 - 60 < cl100k.count(llm.prompts[-1]) <= 1500 - 256

    def test_chat_engine_leaves_room_for_the_answer(self, node_index, cl100k):
        llm = ScriptedLLM(context_window=1500, num_output=-1)
        chat = ContextKitChatEngine(node_index.as_retriever(similarity_top_k=40), llm)
        chat.chat("Why does num_output=-1 matter?")
        assert cl100k.count(llm.prompts[-1]) <= 1500 - 256

    def test_the_three_classes_agree(self):
        llm = ScriptedLLM(context_window=3900, num_output=-1)
        from contextkit.integrations.llamaindex.synthesizer import llm_budget

        assert llm_budget(llm) == 3900 - 256
        pp = ContextBudgetPostprocessor.from_llm(llm, reserve=0)
        assert pp.token_budget == 3900 - 256


class TestTokenizer:
    def test_settings_tokenizer_counts_the_synthesizer_prompt(self, evidence_nodes, hf_tokenizer):
        llm = ScriptedLLM(context_window=1200, num_output=200)
        with settings(tokenizer=hf_tokenizer):
            synth = ContextKitSynthesizer(llm=llm)
            response = synth.synthesize("Which identifiers does passage 7 give?", evidence_nodes)
        sent = len(hf_tokenizer.encode(llm.prompts[-1], add_special_tokens=False))
        assert 900 < sent <= 1000
        assert response.metadata["contextkit"]["tokens"] == sent

    def test_settings_tokenizer_counts_the_chat_prompt(self, node_index, hf_tokenizer):
        llm = ScriptedLLM(context_window=1200, num_output=200)
        with settings(tokenizer=hf_tokenizer):
            ContextKitChatEngine(node_index.as_retriever(similarity_top_k=40), llm).chat("What is in release 4100?")
        assert len(hf_tokenizer.encode(llm.prompts[-1], add_special_tokens=False)) <= 1000

    def test_a_plain_callable_tokenizer(self, evidence_nodes):
        llm = ScriptedLLM(context_window=1000, num_output=100)
        def pairs(text: str) -> list[str]:  # any str -> list callable, as LlamaIndex takes it
            return [text[i:i + 2] for i in range(0, len(text), 2)]

        with settings(tokenizer=pairs):
            ContextKitSynthesizer(llm=llm).synthesize("What is passage 3?", evidence_nodes)
        assert 700 < len(pairs(llm.prompts[-1])) <= 900

    def test_explicit_tokenizer_wins_over_settings(self, evidence_nodes, hf_tokenizer, cl100k):
        llm = ScriptedLLM(context_window=1200, num_output=200)
        with settings(tokenizer=hf_tokenizer):
            ContextKitSynthesizer(llm=llm, tokenizer="cl100k_base").synthesize("What is passage 3?", evidence_nodes)
        assert 950 < cl100k.count(llm.prompts[-1]) <= 1000

    def test_postprocessor_counts_with_settings_tokenizer(self, evidence_nodes, hf_tokenizer):
        with settings(tokenizer=hf_tokenizer):
            pp = ContextBudgetPostprocessor(token_budget=300)
            kept = pp.postprocess_nodes(list(evidence_nodes))
            assert pp.last_report.tokenizer != "cl100k_base"
        hf = get_tokenizer("model")
        assert sum(hf.count(n.node.get_content(metadata_mode="llm")) for n in kept) <= 300


class TestPostprocessorDefaults:
    def test_falls_back_to_settings_llm(self, evidence_nodes, cl100k):
        with settings(llm=ScriptedLLM(context_window=2000, num_output=-1)):
            pp = ContextBudgetPostprocessor()
            kept = pp.postprocess_nodes(list(evidence_nodes))
            expected = ContextBudgetPostprocessor.from_llm(Settings.llm).token_budget
        assert pp.last_report.budget == expected < 2000 - 256
        assert pp.last_report.tokens <= expected and kept

    def test_from_llm_for_the_contextkit_synthesizer_fills_the_window(self, node_index, cl100k):
        llm = ScriptedLLM(context_window=2000, num_output=200)
        engine = node_index.as_query_engine(
            llm=llm, similarity_top_k=40,
            node_postprocessors=[ContextBudgetPostprocessor.from_llm(llm, synthesizer="contextkit")],
            response_synthesizer=ContextKitSynthesizer(llm=llm))
        engine.query("What does section 12 explain?")
        assert cl100k.count(llm.prompts[-1]) >= 0.95 * 1800

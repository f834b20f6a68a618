"""``AssemblyResult.messages``: the prompt as chat messages, overhead in the budget, a stable prefix."""

from __future__ import annotations

from itertools import pairwise

import pytest
from fakes import ScriptedLLM
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assembly.assembly_samples import _text
from contextkit.assembly import EvidenceItem, Section, assemble
from contextkit.records import Message

RULES = "Answer only from the evidence; cite document ids."


def _history(n: int = 6, first: str = "user") -> list[Message]:
    other = "assistant" if first == "user" else "user"
    return [Message(first if i % 2 == 0 else other, f"Turn {i} <b>&</b>: " + _text(i, 3)) for i in range(n)]


def _parts(question: str, history: list[Message], n_items: int = 4) -> list[Section]:
    items = [EvidenceItem(id=f"doc{i}", text=_text(i, 8), score=0.9) for i in range(n_items)]
    return [Section("instructions", role="key_instructions", content=RULES),
            Section("system", role="system", content="You are a careful assistant."),
            Section("evidence", role="evidence", items=items),
            Section("history", role="history", messages=history),
            Section("question", role="question", content=question)]


def _alternates(msgs: list[dict]) -> bool:
    roles = [m["role"] for m in msgs if m["role"] != "system"]
    return all(a != b for a, b in pairwise(roles)) and roles[-1] == "user"


class TestMessages:
    def test_system_turns_then_the_final_user_message(self):
        history = _history()
        result = assemble(_parts("What does FAISS do?", history), 20_000, chat="openai")
        msgs = result.messages("openai")
        assert msgs[0]["role"] == "system" and RULES in msgs[0]["content"] and "careful" in msgs[0]["content"]
        turns = msgs[1:-1]
        assert [(m["role"], m["content"]) for m in turns] == [(m.role, m.content) for m in history]  # verbatim
        final = msgs[-1]["content"]
        assert final.index("<evidence>") < final.index("<question>") < final.index("<reminder>")
        assert "What does FAISS do?" in final and RULES in final.split("<reminder>")[1]
        assert _alternates(msgs)

    def test_alternation_and_a_user_first_turn_for_anthropic(self):
        history = _history(5, first="assistant") + [Message("user", "And one more thing."),
                                                    Message("user", "Really.")]
        result = assemble(_parts("What?", history), 20_000, chat="anthropic")
        out = result.messages("anthropic")
        msgs = [{"role": m["role"], "content": m["content"][0]["text"]} for m in out["messages"]]
        assert msgs[0]["role"] == "user" and _alternates(msgs)
        assert "And one more thing.\n\nReally." in msgs[-1]["content"]  # merged with the final user text
        assert out["system"][0]["cache_control"] == {"type": "ephemeral"}
        assert sum("cache_control" in m["content"][0] for m in out["messages"]) == 1

    def test_the_stable_prefix_is_byte_identical_when_only_the_question_changes(self):
        history = _history()
        a = assemble(_parts("What does FAISS do?", history), 20_000, chat="anthropic")
        b = assemble(_parts("How is BM25 weighted?", history), 20_000, chat="anthropic")
        ma, mb = a.messages("anthropic"), b.messages("anthropic")
        assert ma["system"] == mb["system"] and ma["messages"][:-1] == mb["messages"][:-1]
        assert ma["messages"][-1] != mb["messages"][-1]
        oa, ob = a.messages("openai"), b.messages("openai")
        assert oa[:-1] == ob[:-1]

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.integers(180, 3_000), st.sampled_from(["anthropic", "llamaindex", "openai"]), st.integers(0, 12))
    def test_per_message_overhead_is_counted_in_the_budget(self, budget, style, n_turns):
        result = assemble(_parts("What does FAISS do?", _history(n_turns), 8), budget, chat=style)
        assert result.report.chat_tokens == result.message_tokens(style) <= budget
        assert result.report.chat_style == style and result.report.chat_tokens_exact == (style == "openai")

    def test_the_openai_count_is_its_documented_formula(self, cl100k):
        result = assemble(_parts("What?", _history(4)), 5_000, chat="openai")
        msgs = result.messages("openai")
        assert result.report.chat_tokens == sum(3 + cl100k.count(m["content"]) for m in msgs) + 3

    def test_llamaindex_messages_go_to_a_llamaindex_llm(self):
        from llama_index.core.llms import MessageRole

        result = assemble(_parts("What does FAISS do?", _history(2)), 5_000, chat="llamaindex")
        msgs = result.messages("llamaindex")
        assert [m.role for m in msgs] == [MessageRole.SYSTEM, MessageRole.USER, MessageRole.ASSISTANT,
                                          MessageRole.USER]
        llm = ScriptedLLM(script=["FAISS searches vectors [doc0]."])
        reply = llm.chat(msgs)
        assert reply.message.content == "FAISS searches vectors [doc0]." and "What does FAISS do?" in llm.prompts[0]

    def test_unknown_style_is_a_clear_error(self):
        from contextkit.errors import ContextkitError

        result = assemble(_parts("What?", []), 5_000)
        with pytest.raises(ContextkitError, match="message style"):
            result.messages("gemini")

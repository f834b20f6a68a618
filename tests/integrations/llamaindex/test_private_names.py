"""The private LlamaIndex names the plug-in still uses, held to what it relies on (issue 32).

Each has no public equivalent in llama-index-core 0.14:

* ``LLM._get_messages`` / ``LLM._get_prompt``: what ``llm.predict`` really sends (the template,
  the output parser, the LLM's ``system_prompt``, ``query_wrapper_prompt`` and
  ``messages_to_prompt``), which the synthesizer must count to fit the window. Formatting the
  template publicly would miss whatever a provider's LLM adds in ``_extend_messages``.
* ``Memory._truncate_memory_blocks`` (overridden: LlamaIndex sorts block priorities against its
  own documentation) and ``Memory._estimate_token_count`` (its own count, so both agree).

A release that renames one, changes its signature or what it returns fails here by name,
before an app finds a prompt over its window.
"""

from __future__ import annotations

import inspect

import pytest

pytest.importorskip("llama_index.core")

from fakes import RecordingChatLLM  # noqa: E402
from llama_index.core.base.llms.types import ChatMessage, MessageRole  # noqa: E402
from llama_index.core.llms import LLM  # noqa: E402
from llama_index.core.memory import Memory  # noqa: E402
from llama_index.core.prompts import PromptTemplate  # noqa: E402

from contextkit.integrations.llamaindex.memory import ContextKitMemory  # noqa: E402

USED = {
    (LLM, "_get_messages"): ["self", "prompt", "prompt_args"],
    (LLM, "_get_prompt"): ["self", "prompt", "prompt_args"],
    (Memory, "_truncate_memory_blocks"): ["self", "content_per_memory_block", "memory_blocks_tokens",
                                          "chat_history_tokens"],
    (Memory, "_estimate_token_count"): ["self", "message_or_blocks"],
}


@pytest.mark.parametrize(("owner", "name"), list(USED), ids=[f"{o.__name__}.{n}" for o, n in USED])
def test_each_private_name_is_there_with_the_parameters_used(owner, name):
    method = getattr(owner, name, None)
    assert method is not None, f"llama-index-core no longer has {owner.__name__}.{name}: the plug-in relies on it"
    assert list(inspect.signature(method).parameters) == USED[owner, name], f"{owner.__name__}.{name} changed"


def test_the_override_keeps_the_signature_and_kind_it_overrides():
    ours, theirs = ContextKitMemory._truncate_memory_blocks, Memory._truncate_memory_blocks
    assert list(inspect.signature(ours).parameters) == list(inspect.signature(theirs).parameters)
    assert inspect.iscoroutinefunction(ours) == inspect.iscoroutinefunction(theirs)


def test_what_they_return_is_what_predict_sends():
    template = PromptTemplate("Context: {context_str}\nQuestion: {query_str}")
    chat = RecordingChatLLM(system_prompt="Be brief.")
    messages = chat._get_messages(template, context_str="C", query_str="Q")
    assert [(m.role, m.content) for m in messages] == [
        (MessageRole.SYSTEM, "Be brief."), (MessageRole.USER, "Context: C\nQuestion: Q")]
    chat.predict(template, context_str="C", query_str="Q")
    assert [(m.role, m.content) for m in chat.calls[-1]] == [(m.role, m.content) for m in messages]
    completion = RecordingChatLLM(chat_model=False, system_prompt="Be brief.")
    text = completion._get_prompt(template, context_str="C", query_str="Q")
    completion.predict(template, context_str="C", query_str="Q")
    assert completion.prompts[-1] == text and text.startswith("Be brief.")
    assert isinstance(messages[0], ChatMessage)

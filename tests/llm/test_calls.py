"""One call's plumbing: prompts as requests, provider-reported tokens, the profile for a model name."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from contextkit.errors import InvalidArgumentError
from contextkit.llm._calls import Request, profile_for, reported_tokens


class TestRequest:
    def test_messages_of_every_kind(self):
        from llama_index.core.llms import ChatMessage

        from contextkit.records import Message

        request = Request.build([{"role": "system", "content": "Be brief."}, Message("user", "Hi"),
                                 ChatMessage(role="assistant", content="Hello")])
        assert request.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                                    {"role": "assistant", "content": "Hello"}]
        assert request.uses_chat(object())  # messages go to llm.chat whatever the model says it is

    @pytest.mark.parametrize("bad", [[{"role": "user"}], [{"content": "x"}], [], None, 3.5])
    def test_bad_prompts_are_refused(self, bad):
        with pytest.raises(InvalidArgumentError):
            Request.build(bad)

    def test_a_repair_replaces_the_last_one(self):
        first = Request.build("Q").with_repair("bad 1", "fix 1")
        second = first.with_repair("bad 2", "fix 2")
        assert second.completion_text() == "Q\n\nassistant: bad 2\n\nuser: fix 2"


class TestReportedTokens:
    @pytest.mark.parametrize("response", [
        SimpleNamespace(raw={"usage": {"prompt_tokens": 7, "completion_tokens": 3}}, additional_kwargs={}),
        SimpleNamespace(raw=SimpleNamespace(usage=SimpleNamespace(input_tokens=7, output_tokens=3))),
        SimpleNamespace(raw=None, additional_kwargs={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}),
    ])
    def test_openai_anthropic_and_llamaindex_forms(self, response):
        assert reported_tokens(response) == (7, 3)

    @pytest.mark.parametrize("response", [SimpleNamespace(raw=None, additional_kwargs={}),
                                          SimpleNamespace(raw={"usage": {"prompt_tokens": "7"}})])
    def test_none_when_not_reported(self, response):
        assert reported_tokens(response) is None


class TestProfileFor:
    @pytest.mark.parametrize("name, profile", [("gpt-4o", "gpt-4o"), ("gpt-4o-2024-08-06", "gpt-4o"),
                                               ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"), ("my-local-model", None)])
    def test_exact_then_longest_prefix(self, name, profile):
        found = profile_for(name)
        assert (found.name if found else None) == profile

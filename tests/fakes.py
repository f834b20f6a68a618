"""A scripted LLM: a real LlamaIndex ``CustomLLM`` (we have no LLM weights here).

It records every prompt it receives and answers from a script (strings, or
exceptions to raise), then with a fixed reply: deterministic by construction.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.llms import CompletionResponse, CompletionResponseGen, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback
from pydantic import Field


class ScriptedLLM(CustomLLM):
    script: list[Any] = Field(default_factory=list)
    default_reply: str = "Noted."
    prompts: list[str] = Field(default_factory=list)
    context_window: int = 8192
    num_output: int = 256

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=self.context_window, num_output=self.num_output, model_name="scripted")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        reply = self.script.pop(0) if self.script else self.default_reply
        if isinstance(reply, BaseException):
            raise reply
        return CompletionResponse(text=reply)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        response = self.complete(prompt, formatted=formatted, **kwargs)
        yield response


import asyncio  # noqa: E402
import time  # noqa: E402

from llama_index.core.llms import ChatMessage, ChatResponse, ChatResponseGen, MessageRole  # noqa: E402
from llama_index.core.llms.callbacks import llm_chat_callback  # noqa: E402


class RecordingChatLLM(CustomLLM):
    """A recording LLM for the plug-in's prompt-path and streaming tests (a real ``CustomLLM``).

    ``chat_model`` decides what it declares (``is_chat_model``): chat models get
    messages (recorded in ``calls``), completion models a prompt (in ``prompts``).
    Streams yield ``reply`` word by word and count the words produced so far in
    ``produced``, so a test can tell a stream passed on as it comes (the consumer
    sees word 1 when one word was produced) from one replayed after the fact.
    """

    reply: str = "IndexIDMap2 keeps the ids so vectors can be removed."
    chat_model: bool = True
    context_window: int = 8192
    num_output: int = 256
    calls: list[Any] = Field(default_factory=list)
    prompts: list[str] = Field(default_factory=list)
    produced: int = 0
    delay: float = 0.0  # seconds per streamed word, as a model takes time to produce it

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=self.context_window, num_output=self.num_output,
                           is_chat_model=self.chat_model, model_name="recording-chat")

    def _words(self) -> list[str]:
        words = self.reply.split(" ")
        return [w if i == len(words) - 1 else w + " " for i, w in enumerate(words)]

    @llm_chat_callback()
    def chat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        self.calls.append(list(messages))
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=self.reply))

    @llm_chat_callback()
    def stream_chat(self, messages: Any, **kwargs: Any) -> ChatResponseGen:
        self.calls.append(list(messages))
        self.produced = 0

        def gen() -> ChatResponseGen:
            text = ""
            for word in self._words():
                time.sleep(self.delay)
                self.produced += 1
                text += word
                yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=word)

        return gen()

    @llm_chat_callback()
    async def astream_chat(self, messages: Any, **kwargs: Any) -> Any:
        """A stream that awaits between words, as a network client does (CustomLLM's own blocks the loop)."""
        self.calls.append(list(messages))
        self.produced = 0

        async def gen() -> Any:
            text = ""
            for word in self._words():
                await asyncio.sleep(self.delay)
                self.produced += 1
                text += word
                yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=word)

        return gen()

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        return CompletionResponse(text=self.reply)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        self.prompts.append(prompt)
        self.produced = 0

        def gen() -> CompletionResponseGen:
            text = ""
            for word in self._words():
                self.produced += 1
                text += word
                yield CompletionResponse(text=text, delta=word)

        return gen()

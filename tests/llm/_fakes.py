"""Fake LLMs for contextkit.llm: real LlamaIndex ``CustomLLM`` subclasses that fail on cue.

``ScriptedLLM`` (tests/fakes.py) answers from a script of strings and exceptions; here the
same with a name, a delay per reply (for timeouts and latency), an async path that sleeps
without blocking the loop, provider-reported usage, and a chat model that keeps the
messages it was sent.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from llama_index.core.llms import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    CompletionResponseGen,
    CustomLLM,
    LLMMetadata,
)
from llama_index.core.llms.callbacks import llm_completion_callback
from pydantic import Field


class Late:
    """A script entry: answer ``reply`` after ``seconds``."""

    def __init__(self, seconds: float, reply: Any = "late answer") -> None:
        self.seconds, self.reply = seconds, reply


class FlakyLLM(CustomLLM):
    """Answers from ``script`` (strings, exceptions, :class:`Late`), then ``default_reply``."""

    name: str = "flaky"
    script: list[Any] = Field(default_factory=list)
    default_reply: str = "fine"
    delay: float = 0.0
    prompts: list[str] = Field(default_factory=list)
    usage: dict[str, int] | None = None
    response_model: str | None = None
    chat_model: bool = False
    chats: list[list[dict[str, str]]] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.name, is_chat_model=self.chat_model)

    def _next(self) -> tuple[float, Any]:
        reply = self.script.pop(0) if self.script else self.default_reply
        if isinstance(reply, Late):
            return reply.seconds, reply.reply
        return self.delay, reply

    def _response(self, reply: Any) -> CompletionResponse:
        if isinstance(reply, BaseException):
            raise reply
        raw = {}
        if self.usage is not None:
            raw["usage"] = dict(self.usage)
        if self.response_model is not None:
            raw["model"] = self.response_model
        return CompletionResponse(text=reply, raw=raw or None)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        seconds, reply = self._next()
        if seconds:
            time.sleep(seconds)
        return self._response(reply)

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        seconds, reply = self._next()
        if seconds:
            await asyncio.sleep(seconds)
        return self._response(reply)

    def chat(self, messages: list[ChatMessage], **kwargs: Any) -> ChatResponse:
        self.chats.append([{"role": m.role.value, "content": m.content} for m in messages])
        seconds, reply = self._next()
        if seconds:
            time.sleep(seconds)
        response = self._response(reply)
        return ChatResponse(message=ChatMessage(role="assistant", content=response.text), raw=response.raw)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield self.complete(prompt, formatted=formatted, **kwargs)


class Sleeps:
    """A ``sleep=`` for ReliableLLM that records the waits instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


class ASleeps(Sleeps):
    async def __call__(self, seconds: float) -> None:  # type: ignore[override]
        self.waits.append(seconds)


class Clock:
    """A clock tests move by hand."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

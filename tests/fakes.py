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

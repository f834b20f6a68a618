"""One budget for every plug-in class: the LLM's window, its output room, and the tokenizer that counts.

Why one helper: the synthesizer, the chat engine and the postprocessor used to read
``context_window - num_output`` each their own way, and only one of them knew
LlamaIndex's convention that ``num_output == -1`` (``MockLLM``, ``OpenAI(...)``
without ``max_tokens``) means "its default of 256" (``DEFAULT_NUM_OUTPUTS``). Read
literally, -1 *adds* a token to the window and leaves no room for the answer.

The tokenizer is, in this order: an explicit ``tokenizer=`` (a contextkit name or
:class:`~contextkit.tokenizers.Tokenizer`), else ``Settings.tokenizer`` when the
application set one (a Hugging Face tokenizer or any ``str -> list`` callable, as
LlamaIndex takes it), else ``cl100k_base`` (LlamaIndex's own default).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from contextkit.core.config import DEFAULT_TOKENIZER
from contextkit.core.errors import InvalidArgumentError
from contextkit.core.tokenizers import TIKTOKEN_ENCODINGS, HuggingFaceTokenizer, Tokenizer, get_tokenizer

__all__ = ["CallableTokenizer", "num_output_of", "prompt_budget", "resolve_tokenizer"]

_PIECE = re.compile(r"\S+\s*|\s+")


def num_output_of(llm_or_metadata: Any) -> int:
    """Tokens kept for the answer, as LlamaIndex's ``PromptHelper`` reads them: -1 (or None) is its default."""
    from llama_index.core.constants import DEFAULT_NUM_OUTPUTS

    meta = getattr(llm_or_metadata, "metadata", llm_or_metadata)
    value = getattr(meta, "num_output", None)
    value = -1 if value is None else int(value)
    return DEFAULT_NUM_OUTPUTS if value == -1 else value


def prompt_budget(llm: Any, reserve: int = 0) -> int:
    """Prompt tokens an LLM can take: ``context_window - num_output - reserve`` (``num_output`` as above)."""
    meta = llm.metadata
    window = int(meta.context_window)
    num_output = num_output_of(meta)
    if reserve < 0:
        raise InvalidArgumentError(f"reserve must not be negative, not {reserve}")
    budget = window - num_output - reserve
    if budget <= 0:
        raise InvalidArgumentError(
            f"{getattr(meta, 'model_name', 'the LLM')}: context_window {window} leaves no room for a prompt after "
            f"num_output {num_output} and reserve {reserve}")
    return budget


class CallableTokenizer(Tokenizer):
    """Any ``str -> list of ids`` callable (what ``Settings.tokenizer`` holds) as a contextkit tokenizer.

    Counts are the callable's. It cannot decode, and token offsets are known only at
    word ends (a cut never falls inside a word), which is all the assembler needs:
    it recounts the final prompt with this same callable.
    """

    def __init__(self, fn: Callable[[str], Sequence[Any]], name: str = "llama_index.Settings.tokenizer") -> None:
        self._fn = fn
        self.name = name

    def encode(self, text: str) -> list[int]:
        return list(self._fn(text))

    def count(self, text: str) -> int:
        return len(self._fn(text)) if text else 0

    def decode(self, ids: Sequence[int]) -> str:
        raise InvalidArgumentError(f"{self.name} cannot decode token ids; pass tokenizer= a named tokenizer")

    def encode_with_offsets(self, text: str) -> tuple[list[int], np.ndarray]:
        ids: list[int] = []
        ends: list[int] = []
        for m in _PIECE.finditer(text):
            piece = list(self._fn(m.group()))
            ids += piece
            ends += [-1] * (len(piece) - 1) + [m.end()] if piece else []
        return ids, np.asarray(ends, dtype=np.int64)


def _from_callable(fn: Callable[..., Any]) -> Tokenizer:
    """The tokenizer behind ``Settings.tokenizer``: a known one when it can be recognised, else the callable."""
    target = fn.func if isinstance(fn, functools.partial) else fn
    owner = getattr(target, "__self__", None)
    if owner is not None and type(owner).__module__.startswith("tiktoken") and owner.name in TIKTOKEN_ENCODINGS:
        return get_tokenizer(owner.name)
    if owner is not None and hasattr(owner, "name_or_path") and hasattr(owner, "convert_ids_to_tokens"):
        return HuggingFaceTokenizer(str(owner.name_or_path), tokenizer=owner)
    return CallableTokenizer(fn)


@functools.lru_cache(maxsize=8)
def _cached(fn: Callable[..., Any]) -> Tokenizer:
    return _from_callable(fn)


def resolve_tokenizer(tokenizer: str | Tokenizer | None = None) -> Tokenizer:
    """The tokenizer a plug-in class counts with (see the module docstring for the order)."""
    if tokenizer is not None:
        return get_tokenizer(tokenizer)
    import llama_index.core as core

    fn = core.global_tokenizer  # set by ``Settings.tokenizer = ...`` (or by LlamaIndex's own default)
    if fn is None:
        return get_tokenizer(DEFAULT_TOKENIZER)
    try:
        return _cached(fn)
    except TypeError:  # an unhashable callable
        return _from_callable(fn)

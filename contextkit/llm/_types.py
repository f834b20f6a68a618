"""The records of an LLM call: each attempt, the tokens and cost, the result.

Pydantic models so that a result prints, compares and serialises (``model_dump_json()``)
as every other contextkit report does; the usage log holds their JSON.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Attempt", "LLMResult", "Usage"]

#: Why an attempt failed: the provider raised, the call ran past ``timeout``, or the answer
#: did not validate against ``output=``.
FailureKind = Literal["error", "timeout", "invalid"]


class Usage(BaseModel):
    """Tokens in and out and what they cost.

    ``input_tokens`` is the whole prompt as the model read it: uncached tokens, plus
    ``cached_input_tokens`` read from the provider's prompt cache, plus ``cache_write_tokens`` written
    to it (Anthropic's cache creation), so a limit on tokens per request sees the prompt's real size
    whatever the cache did. The two cache counts are parts of ``input_tokens``, not additions to it.

    ``counted`` says where the tokens come from (None: no answer yet): ``"reported"`` by the provider, or
    ``"counted"`` with the model profile's tokenizer (cl100k_base when no profile matches,
    an estimate for models whose tokenizer is not public; no cache counts then). A cost is None when the
    price is unknown, never 0: ``input_cost_usd`` prices each part of the prompt at the profile's price
    for it (cache reads and writes at the input price where the profile has no cache price),
    ``output_cost_usd`` comes from its output price where the profile has one; ``cost_usd`` is the sum
    of the known parts.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    counted: Literal["reported", "counted", "mixed"] | None = None
    tokenizer: str | None = None
    input_cost_usd: float | None = None
    output_cost_usd: float | None = None
    cost_usd: float | None = None
    seconds: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        def add(a: float | None, b: float | None) -> float | None:
            return None if a is None and b is None else (a or 0.0) + (b or 0.0)

        counted = self.counted if other.counted in (None, self.counted) else (
            other.counted if self.counted is None else "mixed")
        return Usage(input_tokens=self.input_tokens + other.input_tokens,
                     output_tokens=self.output_tokens + other.output_tokens,
                     cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
                     cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens, counted=counted,
                     tokenizer=self.tokenizer or other.tokenizer,
                     input_cost_usd=add(self.input_cost_usd, other.input_cost_usd),
                     output_cost_usd=add(self.output_cost_usd, other.output_cost_usd),
                     cost_usd=add(self.cost_usd, other.cost_usd), seconds=self.seconds + other.seconds)


class Attempt(BaseModel):
    """One try of one model: who, how long, and what went wrong (None when it answered validly)."""

    model: str
    error: str | None = None
    kind: FailureKind | None = None
    seconds: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None


class LLMResult(BaseModel):
    """What :meth:`ReliableLLM.run` returns: the answer, who gave it and what it took.

    ``model`` names the LLM that answered (``"fallback"`` for a configured fallback answer);
    ``fell_back`` is True when that is not the first model; ``usage`` sums every attempt
    that got an answer (a failed validation is billed too) and ``usage.seconds`` is the
    whole run's wall time, backoffs included.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    text: str
    output: Any = None
    model: str
    fell_back: bool = False
    attempts: list[Attempt] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    task: str | None = None
    route: str | None = None
    request_id: str | None = None

    def __str__(self) -> str:
        return self.text

"""Model profiles: a context window, the tokens kept for the answer, a tokenizer, a price.

Why profiles: a budget is only exact if it is counted with the model's own
tokenizer and leaves room for the answer. OpenAI models use public tiktoken
encodings, so their counts are exact. Anthropic, Google and Meta do not publish
an offline tokenizer for their hosted models; their profiles count with
``o200k_base`` or ``cl100k_base`` and say so (``exact_tokenizer=False``): such a
count is an estimate of the provider's, typically within 10-20%, so those
profiles also keep a larger share of the window in reserve.

Prices are the providers' published list prices in US dollars per million
tokens as we last knew them (for long-context tiers, the long-prompt price):
input, and where confirmed output, cache reads (``cached_input_price_per_million``)
and Anthropic's cache writes (``cache_write_price_per_million``). A price left
None is unknown, never 0. They change often and are not checked at run time (no
network): set your own with ``register_profile(..., replace=True)`` when cost matters.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from contextkit.core.config import DEFAULT_TOKENIZER
from contextkit.core.errors import InvalidArgumentError, ProfileError

__all__ = ["ModelProfile", "ProfileError", "get_profile", "list_profiles", "register_profile"]


class ModelProfile(BaseModel):
    """What the assembler needs to know about a model, and what its tokens cost.

    Unknown fields are refused (a misspelt price would otherwise be dropped and its cost silently lost).
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    context_window: int = Field(gt=0, description="tokens the model reads, prompt and answer together")
    reserved_output: int = Field(ge=0, description="tokens kept free for the answer")
    tokenizer: str = Field(default=DEFAULT_TOKENIZER, description="tiktoken encoding or Hugging Face tokenizer")
    exact_tokenizer: bool = Field(default=True, description="False when the tokenizer only approximates the model's")
    safety_margin: float = Field(default=0.0, ge=0, lt=0.5,
                                 description="share of the prompt budget left unused when the count is an estimate")
    input_price_per_million: float | None = Field(default=None, ge=0, description="USD per 1M input tokens")
    output_price_per_million: float | None = Field(default=None, ge=0, description="USD per 1M output tokens")
    cached_input_price_per_million: float | None = Field(
        default=None, ge=0, description="USD per 1M input tokens read from the provider's prompt cache")
    cache_write_price_per_million: float | None = Field(
        default=None, ge=0, description="USD per 1M input tokens written to the cache (Anthropic; None elsewhere)")

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        """Name an unknown field and the field it most likely meant (pydantic's own message does not)."""
        if isinstance(data, dict):
            import difflib

            unknown = sorted(str(key) for key in data if key not in cls.model_fields)
            if unknown:
                hints = [f"{key!r}" + (f" (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(
                    key, list(cls.model_fields), n=1, cutoff=0.8)) else "") for key in unknown]
                raise InvalidArgumentError(f"ModelProfile has no field {', '.join(hints)}; its fields are "
                                           f"{', '.join(cls.model_fields)}")
        return data

    @model_validator(mode="after")
    def _fits(self) -> ModelProfile:
        if self.reserved_output >= self.context_window:
            raise InvalidArgumentError(f"{self.name}: reserved_output {self.reserved_output} leaves no room in "
                             f"a {self.context_window}-token window")
        return self

    @property
    def prompt_budget(self) -> int:
        """Tokens the prompt may use: the window, less the answer, less the safety margin."""
        room = self.context_window - self.reserved_output
        return int(room * (1.0 - self.safety_margin))

    def cost(self, tokens: int) -> float | None:
        """Estimated input cost in USD, or None without a price."""
        if self.input_price_per_million is None:
            return None
        return tokens * self.input_price_per_million / 1_000_000

    def input_cost(self, tokens: int, cached: int = 0, cache_write: int = 0) -> float | None:
        """Input cost in USD of a prompt of ``tokens`` in all, ``cached`` of them read from the cache and
        ``cache_write`` written to it; None without an input price.

        Each part at its own price: cache reads at the cached price, cache writes at the write price, the
        rest at the input price. A cache price the profile lacks falls back to the input price, so an
        unknown discount overstates the cost rather than hiding part of it.
        """
        if self.input_price_per_million is None:
            return None
        base = self.input_price_per_million
        read = self.cached_input_price_per_million if self.cached_input_price_per_million is not None else base
        write = self.cache_write_price_per_million if self.cache_write_price_per_million is not None else base
        uncached = max(tokens - cached - cache_write, 0)
        return (uncached * base + cached * read + cache_write * write) / 1_000_000

    def output_cost(self, tokens: int) -> float | None:
        """Output cost in USD, or None without an output price."""
        if self.output_price_per_million is None:
            return None
        return tokens * self.output_price_per_million / 1_000_000


def _approx(name: str, window: int, output: int, price: float | None, tokenizer: str = "o200k_base",
            **prices: float) -> ModelProfile:
    return ModelProfile(name=name, context_window=window, reserved_output=output, tokenizer=tokenizer,
                        exact_tokenizer=False, safety_margin=0.1, input_price_per_million=price, **prices)


# Output and cache prices are set only where a provider's own pricing page confirmed them, checked
# 2026-12-03; the others stay None (unknown), with the input prices as before.
# - claude-sonnet-4, claude-haiku-3.5: https://platform.claude.com/docs/zh-CN/about-claude/pricing
#   (base input / 5m cache writes / cache hits / output). Cache writes are priced at the 5-minute rate;
#   1-hour writes cost more (Sonnet 4: $6, Haiku 3.5: $1.6), which the usage fields do not tell apart.
# - Not confirmed from a provider's page, left None: OpenAI (gpt-4o, gpt-4o-mini, gpt-4-turbo, gpt-4.1,
#   gpt-4.1-mini), claude-sonnet-4-1m (long-context tier), Gemini (gemini-2.5-pro, gemini-1.5-pro).
_BUILTIN = [
    ModelProfile(name="gpt-4o", context_window=128_000, reserved_output=16_384, tokenizer="o200k_base",
                 input_price_per_million=2.50),
    ModelProfile(name="gpt-4o-mini", context_window=128_000, reserved_output=16_384, tokenizer="o200k_base",
                 input_price_per_million=0.15),
    ModelProfile(name="gpt-4-turbo", context_window=128_000, reserved_output=4_096, tokenizer="cl100k_base",
                 input_price_per_million=10.00),
    ModelProfile(name="gpt-4.1", context_window=1_047_576, reserved_output=32_768, tokenizer="o200k_base",
                 input_price_per_million=2.00),
    ModelProfile(name="gpt-4.1-mini", context_window=1_047_576, reserved_output=32_768, tokenizer="o200k_base",
                 input_price_per_million=0.40),
    _approx("claude-sonnet-4", 200_000, 16_000, 3.00, output_price_per_million=15.00,
            cached_input_price_per_million=0.30, cache_write_price_per_million=3.75),
    _approx("claude-sonnet-4-1m", 1_000_000, 32_000, 6.00),
    _approx("claude-haiku-3.5", 200_000, 8_192, 0.80, output_price_per_million=4.00,
            cached_input_price_per_million=0.08, cache_write_price_per_million=1.00),
    _approx("gemini-2.5-pro", 1_048_576, 65_536, 2.50),
    _approx("gemini-1.5-pro", 2_097_152, 8_192, 2.50),
    _approx("llama-3.1-8b-instruct", 131_072, 4_096, None, tokenizer="cl100k_base"),
]
_PROFILES: dict[str, ModelProfile] = {p.name: p for p in _BUILTIN}


def register_profile(profile: ModelProfile, *, replace: bool = False) -> ModelProfile:
    """Add a profile (or, with ``replace=True``, change a shipped one)."""
    if profile.name in _PROFILES and not replace:
        raise ProfileError(f"a profile named {profile.name!r} exists; pass replace=True to change it")
    _PROFILES[profile.name] = profile
    return profile


def get_profile(name: str | ModelProfile) -> ModelProfile:
    if isinstance(name, ModelProfile):
        return name
    try:
        return _PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(_PROFILES))
        close = _closest(name)
        hint = f" (did you mean {close!r}?)" if close else ""
        raise ProfileError(f"unknown model profile {name!r}{hint}; known profiles: {known} "
                           "(add your own with contextkit.register_profile)") from None


def _closest(name: str) -> str | None:
    """The known profile ``name`` most likely meant: the same name once case, dashes, dots and spaces are
    ignored ("gpt4o", "GPT-4o"), else the nearest by spelling."""
    import difflib

    def bare(text: str) -> str:
        return "".join(ch for ch in text.lower() if ch.isalnum())

    same = [known for known in _PROFILES if bare(known) == bare(name)]
    if same:
        return same[0]
    near = difflib.get_close_matches(name.lower(), list(_PROFILES), n=1, cutoff=0.75)
    return near[0] if near else None


def list_profiles() -> list[ModelProfile]:
    return [_PROFILES[name] for name in sorted(_PROFILES)]

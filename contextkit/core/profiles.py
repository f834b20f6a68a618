"""Model profiles: a context window, the tokens kept for the answer, a tokenizer, a price, a cache rule.

Why profiles: a budget is only exact if it is counted with the model's own
tokenizer and leaves room for the answer. OpenAI models use public tiktoken
encodings, so their counts are exact. Anthropic, Google and Meta do not publish
an offline tokenizer for their hosted models; their profiles count with
``o200k_base`` or ``cl100k_base`` and say so (``exact_tokenizer=False``): such a
count is an estimate of the provider's, typically within 10-20%, so those
profiles also keep a larger share of the window in reserve.

Prices are the providers' published list prices in US dollars per million
tokens (for long-context tiers, the long-prompt price): input, and where
confirmed output, cache reads (``cached_input_price_per_million``) and
Anthropic's cache writes (``cache_write_price_per_million``). A price left None
is unknown, never 0. They change often and are not checked at run time (no
network).

Why a data file: the shipped profiles live in ``profiles.json`` next to this
module (read once, on first use), with the page each price was confirmed on and
the date (2026-12-03), so a price can be checked and changed without reading
code. Users extend them the same way, without code: :func:`load_profiles` reads
a JSON or TOML file of the same shape (a list under ``"profiles"``), and the
file named by the ``CONTEXTKIT_PROFILES`` environment variable is read on the
registry's first use, its profiles replacing shipped ones of the same name.
``register_profile(..., replace=True)`` does the same from code.

Each profile may carry its provider's prompt-cache rule (:class:`CacheRule`), which
:func:`contextkit.core.prompt_cache.cached_prefix_tokens` turns into a prediction of
the tokens a request will read from the cache.
"""

from __future__ import annotations

import json
import os
import threading
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from contextkit.core.config import DEFAULT_TOKENIZER
from contextkit.core.errors import InvalidArgumentError, ProfileError

__all__ = ["CacheRule", "ModelProfile", "ProfileError", "get_profile", "list_profiles", "load_profiles",
           "register_profile"]

#: The environment variable naming a profiles file read on the registry's first use.
PROFILES_ENV = "CONTEXTKIT_PROFILES"


class CacheRule(BaseModel):
    """How a provider serves a repeated prompt prefix from its cache, for predicting cached tokens.

    ``kind`` is the provider's mechanism: ``"prefix"`` (OpenAI: automatic; the longest shared
    prefix from ``min_tokens`` on, counted in steps of ``step``), ``"breakpoints"`` (Anthropic:
    only prefixes ending at a ``cache_control`` breakpoint, at most ``max_breakpoints`` of them)
    or ``"implicit"`` (Gemini: automatic, once the shared prefix reaches ``min_tokens``).
    ``lifetime_s`` is how long an unused entry is kept (a lower bound where the provider gives
    a range); ``source`` the provider's page that states the rule.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["prefix", "breakpoints", "implicit"]
    min_tokens: int = Field(ge=1, description="the shortest prefix the provider caches")
    step: int = Field(default=1, ge=1, description="cached prefixes grow in steps of this many tokens past min_tokens")
    max_breakpoints: int | None = Field(default=None, ge=1, description="the most cache breakpoints that count")
    lifetime_s: int | None = Field(default=None, gt=0, description="seconds an unused cache entry lives")
    source: str | None = Field(default=None, description="the provider's page stating the rule")


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
    cache: CacheRule | None = Field(default=None, description="the provider's prompt-cache rule, if it caches")
    description: str | None = Field(default=None, description="what the name stands for: the API id, a caveat")
    source: str | None = Field(default=None, description="where the prices were confirmed, and when")

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


# ------------------------------------------------------------------ the registry

#: Every known profile by name: empty until first use, then the shipped ones, the CONTEXTKIT_PROFILES
#: file's and those registered since (fill it through _registry(), never read it directly).
_PROFILES: dict[str, ModelProfile] = {}
_LOADED = False
_LOCK = threading.RLock()


def _registry() -> dict[str, ModelProfile]:
    """The profiles, read on first use: why lazily, so importing contextkit reads no file and a
    bad CONTEXTKIT_PROFILES file fails where profiles are used, naming itself."""
    global _LOADED
    if not _LOADED:
        with _LOCK:
            if not _LOADED:
                _LOADED = True
                try:
                    _load_shipped()
                    _load_from_environment()
                except BaseException:
                    _LOADED = False
                    _PROFILES.clear()
                    raise
    return _PROFILES


def _load_shipped() -> None:
    from importlib.resources import files

    text = files("contextkit.core").joinpath("profiles.json").read_text(encoding="utf-8")
    for profile in _parse(json.loads(text), "contextkit/core/profiles.json"):
        _PROFILES[profile.name] = profile


def _load_from_environment() -> None:
    path = os.environ.get(PROFILES_ENV, "").strip()
    if path:
        try:
            _add(_read_profiles(Path(path)), replace=True, origin=str(path))
        except ProfileError as exc:
            raise ProfileError(f"{exc} (the file {PROFILES_ENV} names)") from None


def register_profile(profile: ModelProfile, *, replace: bool = False) -> ModelProfile:
    """Add a profile (or, with ``replace=True``, change a shipped one)."""
    profiles = _registry()
    with _LOCK:
        if profile.name in profiles and not replace:
            raise ProfileError(f"a profile named {profile.name!r} exists; pass replace=True to change it")
        profiles[profile.name] = profile
    return profile


def load_profiles(path: str | os.PathLike[str], *, replace: bool = False) -> list[ModelProfile]:
    """Add the profiles of a JSON or TOML file (a list under ``"profiles"``, each a
    :class:`ModelProfile`'s fields) and return them; with ``replace=True`` they may change known ones.

    All or nothing: a file with one bad profile adds none, and the :class:`ProfileError` names the
    file, the profile and the field (why: a price silently dropped would hide part of a cost).
    """
    origin = os.fspath(path)
    _registry()
    return _add(_read_profiles(Path(origin)), replace=replace, origin=origin)


def _add(profiles: list[ModelProfile], *, replace: bool, origin: str) -> list[ModelProfile]:
    with _LOCK:
        taken = [p.name for p in profiles if p.name in _PROFILES]
        if taken and not replace:
            raise ProfileError(f"{origin}: profile {taken[0]!r} exists; load with replace=True to change it")
        for profile in profiles:
            _PROFILES[profile.name] = profile
    return profiles


def _read_profiles(path: Path) -> list[ModelProfile]:
    """The profiles a file declares, validated, or one ProfileError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: cannot read the profiles file ({exc})") from None
    try:
        data = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        kind = "TOML" if path.suffix.lower() == ".toml" else "JSON"
        raise ProfileError(f"{path}: not valid {kind} ({exc})") from None
    return _parse(data, str(path))


def _parse(data: object, origin: str) -> list[ModelProfile]:
    """Validate a file's content: a table with a list of profiles under "profiles", names unique."""
    entries = data.get("profiles") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ProfileError(f"{origin}: expected a list of profiles under the key 'profiles'")
    profiles = [_one_profile(entry, number, origin) for number, entry in enumerate(entries, 1)]
    names = [p.name for p in profiles]
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise ProfileError(f"{origin}: profile {twice!r} is declared twice")
    return profiles


def _one_profile(entry: object, number: int, origin: str) -> ModelProfile:
    label = f"profile {entry.get('name')!r}" if isinstance(entry, dict) and entry.get("name") else f"profile #{number}"
    if not isinstance(entry, dict):
        raise ProfileError(f"{origin}: {label}: expected a table of fields, not {type(entry).__name__}")
    try:
        return ModelProfile.model_validate(entry)
    except ValidationError as exc:
        raise ProfileError(f"{origin}: {label}: {_describe(exc)}") from None


def _describe(exc: ValidationError) -> str:
    """Pydantic's errors as "field 'x': what is wrong" (its own text lists internals: input types, URLs)."""
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"])
        message = "unknown field" if error["type"] == "extra_forbidden" else str(error["msg"]).removeprefix(
            "Value error, ")
        parts.append(f"field {where!r}: {message}" if where else message)
    return "; ".join(parts)


def get_profile(name: str | ModelProfile) -> ModelProfile:
    if isinstance(name, ModelProfile):
        return name
    profiles = _registry()
    try:
        return profiles[name]
    except KeyError:
        known = ", ".join(sorted(profiles))
        close = _closest(name)
        hint = f" (did you mean {close!r}?)" if close else ""
        raise ProfileError(f"unknown model profile {name!r}{hint}; known profiles: {known} "
                           "(add your own with contextkit.register_profile or contextkit.load_profiles)") from None


def _closest(name: str) -> str | None:
    """The known profile ``name`` most likely meant: the same name once case, dashes, dots and spaces are
    ignored ("gpt4o", "GPT-4o"), else the nearest by spelling."""
    import difflib

    def bare(text: str) -> str:
        return "".join(ch for ch in text.lower() if ch.isalnum())

    known = list(_registry())
    same = [name_ for name_ in known if bare(name_) == bare(name)]
    if same:
        return same[0]
    near = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.75)
    return near[0] if near else None


def list_profiles() -> list[ModelProfile]:
    profiles = _registry()
    return [profiles[name] for name in sorted(profiles)]

"""Predict how much of a request a provider's prompt cache will serve, from the previous request.

Why: a prompt that keeps its stable part first and unchanged is read from the provider's cache at a
tenth of the input price or less, and sooner; an assembly that moves one token near the start loses
all of it. Comparing the token ids of two consecutive requests (a serialization the caller makes of
what it sends) against the provider's rule says what the next request should cost before it is sent,
and which change broke the cache. Each provider caches differently (the rules live on the profiles,
:class:`~contextkit.core.profiles.CacheRule`):

- OpenAI (``kind="prefix"``): automatic for prompts of 1,024 tokens or more; the cached part is the
  longest shared prefix, counted from 1,024 in increments of 128 tokens
  (https://developers.openai.com/api/docs/guides/prompt-caching,
  https://developers.openai.com/cookbook/examples/prompt_caching_201).
- Anthropic (``kind="breakpoints"``): only a prefix that ends at a ``cache_control`` breakpoint is
  cached (up to 4 breakpoints a request), and only from the model's minimum length: 1,024 tokens for
  Sonnet 4 and 4.5, 2,048 for Haiku 3.5, 4,096 for Opus 4.5 and Haiku 4.5
  (https://platform.claude.com/docs/en/build-with-claude/prompt-caching).
- Google Gemini (``kind="implicit"``): automatic on Gemini 2.5 and newer once the request reaches
  the model's minimum (2,048 tokens for 2.5 Flash and Pro, 4,096 for Gemini 3 Pro)
  (https://ai.google.dev/gemini-api/docs/caching).

It is a prediction, an upper bound in practice: the provider may have evicted the entry (OpenAI keeps
one 5-10 minutes unused, Anthropic 5 minutes by default), routed the request to another machine, or
tokenized differently from the caller's serialization (an approximate tokenizer shifts the offsets).
Anthropic's 20-block lookback from each breakpoint is not modelled.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from contextkit.core.profiles import CacheRule

__all__ = ["cached_prefix_tokens", "common_prefix"]

#: Tokens compared per slice: large enough that the loop runs in C, small enough that the final
#: search for the first difference inside one slice is cheap.
_CHUNK = 4096


def cached_prefix_tokens(previous: Sequence[int] | None, current: Sequence[int], rule: CacheRule,
                         breakpoints: Sequence[int] = ()) -> int:
    """The tokens of ``current`` the provider would serve from its cache had ``previous`` warmed it.

    ``previous`` and ``current`` are the token ids of the two requests, whole and in the order sent
    (None: nothing was sent before, a cold cache). ``breakpoints`` (Anthropic) are the offsets in
    ``current`` where ``cache_control`` breakpoints end. See the module docstring for each rule.
    """
    if previous is None:
        return 0
    shared = common_prefix(previous, current)
    if rule.kind == "prefix":
        return _prefix_rule(shared, rule)
    if rule.kind == "breakpoints":
        return _breakpoint_rule(shared, rule, breakpoints)
    return shared if shared >= rule.min_tokens else 0


def _prefix_rule(shared: int, rule: CacheRule) -> int:
    """OpenAI: nothing below the minimum, then whole steps past it."""
    if shared < rule.min_tokens:
        return 0
    return rule.min_tokens + ((shared - rule.min_tokens) // rule.step) * rule.step


def _breakpoint_rule(shared: int, rule: CacheRule, breakpoints: Sequence[int]) -> int:
    """Anthropic: the longest prefix ending at one of the last ``max_breakpoints`` breakpoints that is
    both shared with the previous request and at least the minimum length."""
    marks = sorted(breakpoints)
    if rule.max_breakpoints is not None:
        marks = marks[-rule.max_breakpoints:]
    usable = [mark for mark in marks if rule.min_tokens <= mark <= shared]
    return max(usable, default=0)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix of two token sequences.

    Fast on requests of 100k+ tokens: numpy arrays are compared in one vector operation, other
    sequences slice by slice (each slice comparison runs in C), and only the slice holding the first
    difference is searched element by element.
    """
    n = min(len(a), len(b))
    if _is_array(a) or _is_array(b):
        return _common_prefix_numpy(a, b, n)
    left, right = _as_list(a), _as_list(b)
    for start in range(0, n, _CHUNK):
        end = min(start + _CHUNK, n)
        if left[start:end] != right[start:end]:
            return start + next(i for i in range(end - start) if left[start + i] != right[start + i])
    return n


def _is_array(value: object) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.ndarray)


def _common_prefix_numpy(a: Any, b: Any, n: int) -> int:
    import numpy as np

    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if differ.size else n


def _as_list(value: Sequence[int]) -> list[int]:
    """A list, so that two slices compare element by element whatever the caller passed (a tuple
    never equals a list)."""
    return value if isinstance(value, list) else list(value)

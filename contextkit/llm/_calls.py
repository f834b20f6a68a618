"""One call to a LlamaIndex LLM: the prompt in the form it takes, the answer, its tokens and cost.

Kept apart from the retry loop so that the loop reads as the policy it is. Three jobs:

* a prompt (a string, chat messages or an ``AssemblyResult``) becomes a :class:`Request`:
  chat messages for ``llm.chat`` when the prompt is messages (or an assembly result and the
  model is a chat model), else one string for ``llm.complete``;
* a sync call with a ``timeout`` leaves no work running behind it that could be stopped, and
  never more than a few threads (:func:`call_sync`). To an LLM with async methods of its own, it is
  their coroutine, cancelled at the timeout (the provider's async client closes the request), on
  one event-loop thread the process keeps for its life (a provider's async client is bound to the
  loop it first ran on). To an LLM with sync methods only, which no one can stop (a Python thread
  cannot be killed), it runs on a pool of at most :data:`SYNC_WORKERS` daemon threads, each ending
  when idle; a call still queued when its time is up never starts. Without a timeout, no thread;
* tokens are the provider's when the response reports them (``raw.usage``, ``raw.usage_metadata`` or
  LlamaIndex's ``additional_kwargs``), cache reads and writes apart (:func:`reported_usage`), else counted with the tokenizer of the model profile that matches
  ``metadata.model_name`` (cl100k_base, and no cost, when none does).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from contextkit.core.config import DEFAULT_TOKENIZER
from contextkit.core.errors import (
    ContextkitError,
    InvalidArgumentError,
    LLMTimeoutError,
    ProfileError,
)
from contextkit.llm._types import Usage

if TYPE_CHECKING:  # pragma: no cover  (imported when first needed: profiles and tokenizers load lazily)
    from contextkit.core.profiles import ModelProfile
    from contextkit.core.tokenizers import Tokenizer

__all__ = ["Reported", "Request", "call_sync", "model_name", "reported_usage", "usage_for"]

_TOKENIZERS: dict[str, Tokenizer] = {}
_PROFILES: dict[str, ModelProfile | None] = {}


def model_name(llm: Any) -> str:
    """The LLM's ``metadata.model_name``, else its class name."""
    try:
        name = getattr(llm.metadata, "model_name", None)
    except Exception:  # noqa: BLE001 - a metadata property of a third-party LLM may raise
        name = None
    return str(name) if name else type(llm).__name__


def _is_chat(llm: Any) -> bool:
    try:
        return bool(getattr(llm.metadata, "is_chat_model", False))
    except Exception:  # noqa: BLE001
        return False


@dataclass
class Request:
    """What is sent: ``messages`` (dicts of role and content) or ``text``, and the assembly it came from.

    For an ``AssemblyResult`` the chat messages are built only when a chat model asks for them
    (``result.messages(style="openai")``, where the result offers it), so a completion model
    pays nothing for them.
    """

    text: str
    given: list[dict[str, str]] | None = None
    source: Any = None
    extra: list[dict[str, str]] = field(default_factory=list)
    _built: list[dict[str, str]] | None = None

    @property
    def assembly(self) -> Any:
        """The assembly report, for an assembled prompt."""
        return getattr(self.source, "report", None)

    @property
    def messages(self) -> list[dict[str, str]] | None:
        if self.given is not None or self.source is None:
            return self.given
        if self._built is None:
            self._built = _assembly_messages(self.source)
        return self._built or None

    @classmethod
    def build(cls, prompt: Any) -> Request:
        """A string, a list of messages (dicts, contextkit ``Message`` or LlamaIndex ``ChatMessage``) or an AssemblyResult."""
        if isinstance(prompt, str):
            return cls(text=prompt)
        if getattr(prompt, "report", None) is not None and isinstance(getattr(prompt, "prompt", None), str):
            return cls(text=prompt.prompt, source=prompt)
        if isinstance(prompt, (list, tuple)) and prompt:
            messages = [_as_dict(m) for m in prompt]
            return cls(text="\n\n".join(m["content"] for m in messages), given=messages)
        raise InvalidArgumentError("prompt must be a string, a non-empty list of chat messages or an "
                                   f"AssemblyResult, not {type(prompt).__name__}")

    def with_repair(self, answer: str, instruction: str) -> Request:
        """The request and, after it, the last invalid answer and what to fix (a new turn for chat).

        Only the last answer is kept: each repair shows the model one mistake, not a growing transcript.
        """
        extra = [{"role": "assistant", "content": answer}, {"role": "user", "content": instruction}]
        return Request(text=self.text, given=self.given, source=self.source, extra=extra,
                       _built=self._built)

    def uses_chat(self, llm: Any) -> bool:
        if self.given is not None:
            return True
        return self.source is not None and _is_chat(llm) and self.messages is not None

    def completion_text(self) -> str:
        if not self.extra:
            return self.text
        turns = "\n\n".join(f"{m['role']}: {m['content']}" for m in self.extra)
        return f"{self.text}\n\n{turns}"

    def chat_messages(self) -> list[Any]:
        from llama_index.core.llms import ChatMessage

        return [ChatMessage(role=m["role"], content=m["content"]) for m in [*(self.messages or []), *self.extra]]

    def counted_text(self, chat: bool) -> str:
        """The text whose tokens estimate the input: the messages' contents when sent as chat."""
        if not chat or self.messages is None:
            return self.completion_text()
        return "\n\n".join(m["content"] for m in [*self.messages, *self.extra])


def _assembly_messages(result: Any) -> list[dict[str, str]]:
    """The chat messages of an assembly result, or [] when it offers none (then its prompt is sent)."""
    if not callable(getattr(result, "messages", None)):
        return []
    try:
        return [_as_dict(m) for m in result.messages(style="openai")]
    except ContextkitError:  # a result without chat parts: the prompt string is sent instead
        return []


def _as_dict(message: Any) -> dict[str, str]:
    if isinstance(message, dict):
        role, content = message.get("role"), message.get("content")
    else:
        role, content = getattr(message, "role", None), getattr(message, "content", None)
    role = getattr(role, "value", role)
    if not isinstance(role, str) or not isinstance(content, str):
        raise InvalidArgumentError(f"a chat message needs a role and a text content, not {message!r:.80}")
    return {"role": role, "content": content}


# --------------------------------------------------------------------------- calling


def invoke(llm: Any, request: Request) -> tuple[str, Any]:
    """One sync call; the answer text and the raw response."""
    if request.uses_chat(llm):
        response = llm.chat(request.chat_messages())
        return str(response.message.content or ""), response
    response = llm.complete(request.completion_text())
    return str(response.text or ""), response


async def ainvoke(llm: Any, request: Request) -> tuple[str, Any]:
    """One async call, as :func:`invoke`."""
    if request.uses_chat(llm):
        response = await llm.achat(request.chat_messages())
        return str(response.message.content or ""), response
    response = await llm.acomplete(request.completion_text())
    return str(response.text or ""), response


def call_sync(llm: Any, request: Request, timeout: float | None) -> tuple[str, Any]:
    """:func:`invoke`, given up on after ``timeout`` seconds with :class:`LLMTimeoutError`, leaving no work
    behind that can be stopped: the LLM's own coroutine when it has one (cancelled at the timeout),
    else a call on the bounded pool of sync workers (see the module's docstring)."""
    if timeout is None:
        return invoke(llm, request)
    if _native_async(llm, request.uses_chat(llm)):
        return _LOOP.run(lambda: ainvoke(llm, request), timeout, model_name(llm))
    return _WORKERS.run(lambda: invoke(llm, request), timeout, model_name(llm))


def _native_async(llm: Any, chat: bool) -> bool:
    """Whether the LLM's ``achat``/``acomplete`` (the one this request uses) is its own, not LlamaIndex's
    ``CustomLLM`` default that calls the sync method inside the coroutine (which a cancel cannot stop)."""
    import inspect

    from llama_index.core.llms import CustomLLM

    name = "achat" if chat else "acomplete"
    method = getattr(type(llm), name, None)
    # LlamaIndex wraps each subclass's methods in its instrumentation: compare what the wrappers wrap
    return method is not None and inspect.unwrap(method) is not inspect.unwrap(getattr(CustomLLM, name))


#: The most sync LLM calls running at once on worker threads: calls past their timeout still
#: running take a worker each, and a new call waits for one (and never starts if its time is up first).
SYNC_WORKERS = 4
#: Seconds an idle worker waits for another call before it ends.
IDLE_SECONDS = 2.0


class _Job:
    """One sync call handed to a worker: its result or error, and whether the caller gave up on it."""

    def __init__(self, fn: Callable[[], tuple[str, Any]]) -> None:
        self.fn, self.done, self.given_up = fn, threading.Event(), False
        self.value: tuple[str, Any] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            self.error = exc
        finally:
            self.done.set()


class _SyncWorkers:
    """At most ``size`` daemon threads taking sync calls from one queue; an idle one ends after ``idle`` s.

    Daemon, so a call stuck past its timeout never holds up the interpreter's exit; bounded, so fifty
    stuck calls hold ``size`` threads, not fifty; a queued call whose caller gave up is skipped."""

    def __init__(self, size: int, idle: float) -> None:
        self.size, self.idle = size, idle
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = self._waiting = 0

    def run(self, fn: Callable[[], tuple[str, Any]], timeout: float, model: str) -> tuple[str, Any]:
        job = _Job(fn)
        with self._lock:
            self._jobs.put(job)
            if self._waiting == 0 and self._threads < self.size:
                self._threads += 1
                threading.Thread(target=self._work, name="contextkit-llm-call", daemon=True).start()
        if not job.done.wait(timeout):
            job.given_up = True
            raise LLMTimeoutError(f"{model} did not answer within {timeout:g} s")
        if job.error is not None:
            raise job.error
        assert job.value is not None
        return job.value

    def _work(self) -> None:
        while True:
            with self._lock:
                self._waiting += 1
            try:
                job = self._jobs.get(timeout=self.idle)
            except queue.Empty:
                with self._lock:
                    self._waiting -= 1
                    if self._jobs.empty():
                        self._threads -= 1
                        return
                continue
            with self._lock:
                self._waiting -= 1
            if not job.given_up:
                job.run()


class _EventLoop:
    """One daemon thread running one event loop for the timed sync calls to LLMs with async methods.

    The coroutine is cancelled at the timeout, so the request ends there (the provider's async
    client closes it) and nothing runs on. The loop lives as long as the process: a provider's async
    client, kept by the LLM between calls, is bound to the loop it first ran on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def run(self, make: Callable[[], Coroutine[Any, Any, tuple[str, Any]]], timeout: float,
            model: str) -> tuple[str, Any]:
        future = asyncio.run_coroutine_threadsafe(_timed(make, timeout), self._started())
        try:  # the loop cancels at the timeout; the second's grace covers a coroutine that blocks the loop
            return future.result(timeout + 1.0)
        except _Expired:
            raise LLMTimeoutError(f"{model} did not answer within {timeout:g} s") from None
        except TimeoutError:
            if future.done():
                raise  # the LLM's own TimeoutError
            future.cancel()
            raise LLMTimeoutError(f"{model} did not answer within {timeout:g} s (it blocks the event loop: its "
                                  "async methods call sync code)") from None

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="contextkit-llm-loop", daemon=True).start()
            return self._loop


async def _timed(make: Callable[[], Coroutine[Any, Any, tuple[str, Any]]], timeout: float) -> tuple[str, Any]:
    try:
        return await asyncio.wait_for(make(), timeout)
    except TimeoutError as exc:
        raise _Expired() from exc


class _Expired(TimeoutError):
    """The timeout of :meth:`_EventLoop.run` (not a ``TimeoutError`` the LLM raised itself)."""


_WORKERS = _SyncWorkers(SYNC_WORKERS, IDLE_SECONDS)
_LOOP = _EventLoop()


# --------------------------------------------------------------------------- tokens and cost


@dataclass(frozen=True)
class Reported:
    """Tokens as a provider reported them: ``input`` is the whole prompt (cached and cache writes included)."""

    input: int
    output: int
    cached: int = 0
    cache_write: int = 0


def _get(source: Any, *names: str) -> Any:
    """The first of ``names`` that ``source`` has, as a key (a dict) or an attribute (an SDK object)."""
    for name in names:
        value = source.get(name) if isinstance(source, dict) else getattr(source, name, None)
        if value is not None:
            return value
    return None


def _count(source: Any, *names: str) -> int:
    """An optional token count: 0 when absent (or not an int, as a mock's attribute)."""
    value = _get(source, *names) if source is not None else None
    return value if isinstance(value, int) else 0


def _openai_chat(usage: Any) -> Reported | None:
    """OpenAI chat completions: ``prompt_tokens`` includes ``prompt_tokens_details.cached_tokens``
    (https://platform.openai.com/docs/guides/prompt-caching)."""
    tin, tout = _get(usage, "prompt_tokens"), _get(usage, "completion_tokens")
    if not isinstance(tin, int) or not isinstance(tout, int):
        return None
    return Reported(tin, tout, cached=_count(_get(usage, "prompt_tokens_details"), "cached_tokens"))


def _input_output(usage: Any) -> Reported | None:
    """``input_tokens``/``output_tokens``: OpenAI's Responses API, whose ``input_tokens`` includes
    ``input_tokens_details.cached_tokens``, or Anthropic's Messages API, whose ``input_tokens`` are only
    the tokens after the last cache breakpoint and exclude ``cache_read_input_tokens`` and
    ``cache_creation_input_tokens`` (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching,
    "Tracking cache performance"); without any cache field the two read alike."""
    tin, tout = _get(usage, "input_tokens"), _get(usage, "output_tokens")
    if not isinstance(tin, int) or not isinstance(tout, int):
        return None
    details = _get(usage, "input_tokens_details")
    if details is not None and not isinstance(_get(usage, "cache_read_input_tokens"), int):
        return Reported(tin, tout, cached=_count(details, "cached_tokens"))
    read, write = _count(usage, "cache_read_input_tokens"), _count(usage, "cache_creation_input_tokens")
    return Reported(tin + read + write, tout, cached=read, cache_write=write)


def _gemini(metadata: Any) -> Reported | None:
    """Gemini ``usage_metadata``: ``prompt_token_count`` includes ``cached_content_token_count``
    (https://ai.google.dev/gemini-api/docs/caching); thinking tokens (``thoughts_token_count``) are
    billed as output (https://ai.google.dev/gemini-api/docs/pricing)."""
    tin = _get(metadata, "prompt_token_count", "promptTokenCount")
    if not isinstance(tin, int):
        return None
    tout = (_count(metadata, "candidates_token_count", "candidatesTokenCount")
            + _count(metadata, "thoughts_token_count", "thoughtsTokenCount"))
    return Reported(tin, tout, cached=_count(metadata, "cached_content_token_count", "cachedContentTokenCount"))


def _parse_usage(usage: Any) -> Reported | None:
    if usage is None:
        return None
    return _openai_chat(usage) or _input_output(usage) or _gemini(usage)


def reported_usage(response: Any) -> Reported | None:
    """Tokens as the provider reported them, cache reads and writes apart, or None.

    The raw response first (``raw.usage`` for OpenAI and Anthropic, ``raw.usage_metadata`` for Gemini;
    ``raw`` a dict or an SDK object): only it has the cache fields. LlamaIndex's ``additional_kwargs``
    (``prompt_tokens``/``completion_tokens``) comes last: for Anthropic it holds the uncached tokens only.
    """
    raw = getattr(response, "raw", None)
    if raw is not None:
        for key in ("usage", "usage_metadata", "usageMetadata"):
            found = _parse_usage(_get(raw, key))
            if found is not None:
                return found
    return _parse_usage(getattr(response, "additional_kwargs", None))


def reported_tokens(response: Any) -> tuple[int, int] | None:
    """(input, output) tokens as the provider reported them, or None; input includes cached tokens."""
    found = reported_usage(response)
    return None if found is None else (found.input, found.output)


def profile_for(name: str) -> ModelProfile | None:
    """The model profile for ``name``: the exact one, else the longest whose name begins ``name``; or None."""
    if name in _PROFILES:
        return _PROFILES[name]
    from contextkit.core.profiles import get_profile, list_profiles

    found: ModelProfile | None
    try:
        found = get_profile(name)
    except ProfileError:
        prefixes = [p for p in list_profiles() if name.startswith(p.name)]
        found = max(prefixes, key=lambda p: len(p.name)) if prefixes else None
    _PROFILES[name] = found
    return found


def forget_profiles() -> None:
    """Drop the name -> profile cache (after ``register_profile(..., replace=True)``)."""
    _PROFILES.clear()


def _tokenizer(name: str) -> Tokenizer:
    if name not in _TOKENIZERS:
        from contextkit.core.tokenizers import get_tokenizer

        _TOKENIZERS[name] = get_tokenizer(name)
    return _TOKENIZERS[name]


def _assembly_tokens(request: Request, chat: bool, tokenizer: str) -> int | None:
    """The assembly's own exact count of what was sent, when it counted with the same tokenizer."""
    report = request.assembly
    if report is None or request.extra or getattr(report, "tokenizer", None) != tokenizer:
        return None
    if not chat:
        return int(report.tokens)
    counter = getattr(request.source, "message_tokens", None)
    try:
        return int(counter("openai", tokenizer)) if callable(counter) else None
    except ContextkitError:
        return None


def usage_for(model: str, request: Request, text: str, response: Any, chat: bool = False) -> Usage:
    """Tokens and cost of one answered call to ``model`` (``chat``: it was sent as messages).

    Each part at its price (see :meth:`ModelProfile.input_cost`): cache reads and writes cheaper or
    dearer than the rest of the prompt, output at the output price, so the cost is the provider's bill.
    """
    profile = profile_for(model)
    tokenizer = profile.tokenizer if profile is not None else DEFAULT_TOKENIZER
    reported = reported_usage(response)
    counted: Literal["reported", "counted"]
    if reported is None:
        assembled = _assembly_tokens(request, chat, tokenizer)
        tin = assembled if assembled is not None else _tokenizer(tokenizer).count(request.counted_text(chat))
        reported, counted = Reported(tin, _tokenizer(tokenizer).count(text)), "counted"
    else:
        counted = "reported"
    in_cost = profile.input_cost(reported.input, reported.cached, reported.cache_write) if profile else None
    out_cost = profile.output_cost(reported.output) if profile is not None else None
    known = [c for c in (in_cost, out_cost) if c is not None]
    return Usage(input_tokens=reported.input, output_tokens=reported.output, cached_input_tokens=reported.cached,
                 cache_write_tokens=reported.cache_write, counted=counted, tokenizer=tokenizer,
                 input_cost_usd=in_cost, output_cost_usd=out_cost, cost_usd=sum(known) if known else None)

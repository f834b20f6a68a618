"""The shape every compressor shares, and what each one reports.

A compressor (:class:`Compressor`) takes a list of things (messages, passages) and an
optional query, ``compress(items, query=None, **overrides)``: items first, everywhere.
Its constructor's values are defaults that one call may override by keyword
(``compress(items, query, max_tokens=200)``). The result carries ``.report``, a
:class:`CompressionReport`: tokens in, tokens out, what was removed, how long it took.
``to_dict()`` is the configuration with a ``"type"`` key naming the class, and
``from_dict(to_dict())`` rebuilds an equal compressor (what cannot be written down,
an LLM or an embedder, is passed to ``from_dict`` again).

:class:`~contextkit.compressors.redact.PIIRedactor` is not one: it masks one text at
a time within a session (``redact(text)``), and its ``to_dict()`` is its configuration
alone (no ``"type"``). Its results carry ``.report`` all the same, and
``PIIRedactor.report()`` sums the session.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, Field

from contextkit.errors import InvalidArgumentError

__all__ = ["CompressionReport", "CompressionResult", "Compressor"]


class CompressionReport(BaseModel):
    """One compressor run. ``ratio`` is input tokens over output tokens (2.0 = half)."""

    compressor: str
    input_tokens: int = 0
    output_tokens: int = 0
    items_in: int = 0
    items_out: int = 0
    removed: dict[str, int] = Field(default_factory=dict, description="what was removed, by kind")
    fallback: str | None = Field(default=None, description="set when a fallback path was taken, and why")
    seconds: float = 0.0
    details: dict[str, Any] = Field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.input_tokens / self.output_tokens if self.output_tokens else float("inf")


class CompressionResult(Protocol):
    """What every ``compress`` returns: something with a ``.report``."""

    report: CompressionReport


class Compressor(ABC):
    """The common shape of the compressors (see the module docstring)."""

    #: The name reports carry in ``CompressionReport.compressor``.
    name: ClassVar[str]

    @abstractmethod
    def compress(self, items: Sequence[Any], query: str | None = None, **overrides: Any) -> CompressionResult:
        """Compress ``items`` (for ``query``, when given); keywords override the constructor's values."""

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """The configuration, with ``"type"``: the class name, for :meth:`from_dict`."""

    @classmethod
    @abstractmethod
    def from_dict(cls, data: dict[str, Any], **objects: Any) -> Compressor:
        """Rebuild from :meth:`to_dict`; ``objects`` are what a dict cannot hold (an LLM, an embedder)."""

    @classmethod
    def _settings(cls, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` without its ``"type"`` key, which must name this class when present."""
        kind = data.get("type", cls.__name__)
        if kind != cls.__name__:
            raise InvalidArgumentError(f"{cls.__name__}.from_dict got the settings of a {kind}")
        return {k: v for k, v in data.items() if k != "type"}

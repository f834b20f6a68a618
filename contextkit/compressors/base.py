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

import hashlib
import secrets
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, Field

from contextkit.core.options import Component

__all__ = ["CompressionReport", "CompressionResult", "Compressor", "Redacted", "Redactor"]


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
    """What every ``compress`` returns: something with a ``.report`` (a dataclass, a named tuple...)."""

    @property
    def report(self) -> CompressionReport: ...


class Compressor(Component, ABC):
    """The common shape of the compressors (see the module docstring).

    As a :class:`~contextkit.core.settings.Component`, a misspelt option to the constructor or to
    :meth:`compress` raises :class:`~contextkit.errors.UnknownOptionError`.
    """

    #: The name reports carry in ``CompressionReport.compressor``.
    name: ClassVar[str]
    _option_methods = ("compress",)

    @abstractmethod
    def compress(self, items: Sequence[Any], query: str | None = None) -> CompressionResult:
        """Compress ``items`` (for ``query``, when given); a subclass adds keyword-only overrides of its
        constructor's values (``max_tokens=``, ``target_ratio=``)."""

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """The configuration, with ``"type"``: the class name, for :meth:`from_dict`."""


class Redacted(Protocol):
    """What :meth:`Redactor.redact` returns: the masked text and what was masked, by kind."""

    @property
    def text(self) -> str: ...

    @property
    def counts(self) -> Mapping[str, int]: ...


class Redactor(Component, ABC):
    """The redaction role: masks personal data one text at a time within a session, so a value gets
    the same placeholder in every text and field of that session.

    Not a :class:`Compressor`: it keeps every token that is not personal, and its unit is one text
    (``redact(text)``), not a list. Ingestion and assembly take any ``Redactor``: implement
    :meth:`redact` and :meth:`report`; :meth:`mask`, :meth:`mask_id` and :meth:`mask_data` (a title,
    an id, metadata) follow from ``redact``. :class:`~contextkit.compressors.redact.PIIRedactor` is the
    built-in one.
    """

    #: The name reports carry in ``CompressionReport.compressor``.
    name: ClassVar[str]

    @abstractmethod
    def redact(self, text: str) -> Redacted:
        """``text`` with personal data masked (placeholders stable within this session)."""

    @abstractmethod
    def report(self) -> CompressionReport:
        """What this session masked so far, by kind (counts only: no values)."""

    def mask(self, value: str, counts: Counter[str] | None = None) -> str:
        """``redact(value).text`` for a short field (a title, a source path, a message id), in this session:
        a value has one placeholder in the text and in every field, so nothing links a mask back.
        ``counts`` (if given) is increased by what was masked, by kind."""
        if not value:
            return value
        result = self.redact(value)
        if counts is not None and result.counts:
            counts.update(result.counts)
        return result.text

    def mask_id(self, value: str, counts: Counter[str] | None = None) -> str:
        """An identifier masked like :meth:`mask`, with ``~`` and a short keyed digest of the original
        appended when anything was masked: the digest keeps ids unique where they are keys (two e-mail
        addresses masked in two runs would both read ``<EMAIL_1>.txt``). It is keyed with this
        session's random salt, never stored, so it cannot be computed back from a guess."""
        masked = self.mask(value, counts)
        if masked == value:
            return value
        salt = self.__dict__.get("_salt")
        if not isinstance(salt, bytes):
            salt = self.__dict__["_salt"] = secrets.token_bytes(16)
        tag = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), key=salt, digest_size=4,
                              person=b"ctxkit-id").hexdigest()
        return f"{masked}~{tag}"

    def mask_data(self, value: Any, counts: Counter[str] | None = None) -> Any:
        """Every string in ``value`` (dict keys and values, list items, nested) masked like :meth:`mask`;
        numbers, booleans and None as they are. For metadata, which is as untrusted as the text."""
        if isinstance(value, str):
            return self.mask(value, counts)
        if isinstance(value, dict):
            return {self.mask(k, counts) if isinstance(k, str) else k: self.mask_data(v, counts)
                    for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.mask_data(v, counts) for v in value)
        return value

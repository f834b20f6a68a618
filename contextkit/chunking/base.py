"""The chunker role: documents in, chunks out, settings that travel as a dict.

Every chunker is a :class:`Chunker`: one obvious method, :meth:`Chunker.chunk`,
whose constructor values are defaults a call may override; :meth:`Chunker.chunk_many`
for a list (serial by default, a subclass may parallelise); and :meth:`Chunker.to_dict`
/ :meth:`Chunker.from_dict` so the same chunker can be rebuilt in a worker process,
on a Ray node or from an index's record. ``to_dict()`` always names the class under
``"type"``, so a reader of a stored dict knows which chunker it describes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import Iterable
from typing import Any, Self

from contextkit.core.options import Component
from contextkit.core.records import Chunk, Document

__all__ = ["Chunker", "chunk_metadata"]


def chunk_metadata(doc_metadata: dict[str, Any], start: int, end: int) -> dict[str, Any]:
    """A chunk's metadata: its document's, and, where the document says where its pages start
    (``page_starts``, character offsets: a PDF's), the pages the chunk spans as ``page`` and
    ``page_end`` (1-based) in place of the list, so a passage can be cited by page."""
    starts = doc_metadata.get("page_starts")
    if not isinstance(starts, list) or not starts or not all(isinstance(x, int) for x in starts):
        return dict(doc_metadata)
    meta = {k: v for k, v in doc_metadata.items() if k != "page_starts"}
    meta["page"] = max(1, bisect_right(starts, start))
    meta["page_end"] = max(meta["page"], bisect_right(starts, max(start, end - 1)))
    return meta


class Chunker(Component, ABC):
    """Base class of the chunkers: implement :meth:`chunk` and :meth:`_settings`.

    A subclass gets :meth:`chunk_many`, :meth:`to_dict`, :meth:`from_dict`, :meth:`close`
    and the context manager for free, so code written against the role (ingestion's
    chunking step calls ``chunk_many``, then ``chunk`` to find a failing document) takes any.
    As a :class:`~contextkit.core.settings.Component`, its constructor and ``from_dict`` refuse an
    unknown option with :class:`~contextkit.errors.UnknownOptionError`.
    """

    @abstractmethod
    def chunk(self, document: Document | str, **overrides: Any) -> list[Chunk]:
        """The chunks of one document; ``overrides`` replace constructor values for this call."""

    @abstractmethod
    def _settings(self) -> dict[str, Any]:
        """The constructor arguments that rebuild this chunker (JSON values only)."""

    def chunk_many(self, documents: Iterable[Document], workers: int | None = None) -> list[list[Chunk]]:
        """The chunks of each document, in order. ``workers`` is a hint: this default runs serially."""
        return [self.chunk(doc) for doc in documents]

    def close(self) -> None:
        """Release what the chunker holds (worker processes); nothing by default."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

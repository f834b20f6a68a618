"""Chunking: documents into token-exact chunks with overlap.

- :mod:`~contextkit.chunking.base`: :class:`Chunker`, the role every chunker plays (``chunk``,
  ``chunk_many``, ``to_dict``/``from_dict``);
- :mod:`~contextkit.chunking._cuts`: the greedy cut over one encoding (a leaf);
- :mod:`~contextkit.chunking.token`: :class:`TokenChunker`, whole documents, in parallel with ``workers``;
  its settings as a pydantic model, :class:`ChunkerConfig`, come from :mod:`~contextkit.chunking._config` on first use
  (the chunker itself needs no pydantic);
- :mod:`~contextkit.chunking._stream`: the same cut walked window by window over a text too large to hold.
- :mod:`~contextkit.chunking._parallel`: one long text cut by several processes, into exactly the chunks of one
  (:mod:`~contextkit.chunking._processes`: the worker processes, shared by every chunker).
"""

from typing import TYPE_CHECKING

from contextkit.chunking.base import Chunker
from contextkit.chunking.token import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, TokenChunker
from contextkit.core.errors import ChunkTooSmallError, HeaderTooLargeError
from contextkit.core.lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from contextkit.chunking._config import ChunkerConfig  # a pydantic model: loaded on first use

__all__ = ["DEFAULT_CHUNK_OVERLAP", "DEFAULT_CHUNK_SIZE", "ChunkTooSmallError", "Chunker", "ChunkerConfig", "HeaderTooLargeError", "TokenChunker"]


__getattr__, __dir__ = lazy_exports("contextkit.chunking", {"ChunkerConfig": "_config"}, globals())

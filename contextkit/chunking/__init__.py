"""Chunking: documents into token-exact chunks with overlap.

- :mod:`~contextkit.chunking.base`: :class:`Chunker`, the role every chunker plays (``chunk``,
  ``chunk_many``, ``to_dict``/``from_dict``);
- :mod:`~contextkit.chunking._cuts`: the greedy cut over one encoding (a leaf);
- :mod:`~contextkit.chunking.token`: :class:`TokenChunker`, whole documents, in parallel with ``workers``;
- :mod:`~contextkit.chunking._stream`: the same cut walked window by window over a text too large to hold.
- :mod:`~contextkit.chunking._parallel`: one long text cut by several processes, into exactly the chunks of one
  (:mod:`~contextkit.chunking._processes`: the worker processes, shared by every chunker).
"""

from contextkit.chunking.base import Chunker
from contextkit.chunking.token import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, ChunkerConfig, TokenChunker
from contextkit.errors import ChunkTooSmallError, HeaderTooLargeError

__all__ = ["DEFAULT_CHUNK_OVERLAP", "DEFAULT_CHUNK_SIZE", "ChunkTooSmallError", "Chunker", "ChunkerConfig", "HeaderTooLargeError", "TokenChunker"]

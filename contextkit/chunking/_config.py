"""``ChunkerConfig``: the settings of a :class:`~contextkit.chunking.TokenChunker` as a pydantic model.

Its own module so that importing the chunker does not import pydantic: the chunker
checks its settings without it (``token._checked_settings``) and builds this model only
when asked for (``TokenChunker.config``), or for a value only pydantic can judge.
"""

from __future__ import annotations

from pydantic import Field, model_validator

# why these values: see contextkit.config
from contextkit.core.config import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, DEFAULT_TOKENIZER
from contextkit.core.errors import InvalidArgumentError
from contextkit.core.settings import Settings

__all__ = ["ChunkerConfig"]


class ChunkerConfig(Settings):
    """Settings of a :class:`~contextkit.chunking.TokenChunker` (also what an index records); the
    ``[chunk]`` table of ``contextkit.toml``."""

    section = "chunk"

    chunk_size: int = Field(DEFAULT_CHUNK_SIZE, ge=1, description="maximum tokens per chunk, header included")
    chunk_overlap: int = Field(DEFAULT_CHUNK_OVERLAP, ge=0, description="maximum tokens shared by consecutive chunks",
                               json_schema_extra={"aliases": {"overlap": 1}})
    tokenizer: str = DEFAULT_TOKENIZER
    header: str | None = Field(
        None, description="template embedded above each chunk, e.g. '{title}\\n'; fields come from the document"
    )
    min_fill: float = Field(0.5, ge=0.0, le=1.0, description="a preferred boundary must leave the chunk this full")

    @model_validator(mode="after")
    def _check(self) -> ChunkerConfig:
        if self.chunk_overlap >= self.chunk_size:
            raise InvalidArgumentError(
                f"chunk_overlap ({self.chunk_overlap}) must be smaller than chunk_size ({self.chunk_size})"
            )
        return self

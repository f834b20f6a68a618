"""What every compressor reports: tokens in, tokens out, what was removed, how long it took."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

__all__ = ["CompressionReport"]


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

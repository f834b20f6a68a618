"""The chunk size and overlap a ``ContextKitNodeParser()`` built without them takes from the app.

Why: a LlamaIndex app sizes its chunks with ``Settings.chunk_size``/``chunk_overlap`` (1,024 and 200 unless it
sets them), and every prompt it budgets assumes that size. A parser that silently chunked at contextkit's own
128 tokens handed an unchanged ``as_query_engine()`` a fifth of the text stock does. The app's setting is
followed unless ``Settings.embed_model`` would cut such a chunk: a model with a fixed window that truncates
(LlamaIndex's ``HuggingFaceEmbedding`` and others with an integer ``max_length``) gets chunks of its window,
counted with its own tokenizer when that loads, and a warning says so. ``ContextKitEmbedding`` embeds a long
text as overlapping windows and cuts nothing, so it caps nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from contextkit.core.tokenizers import get_tokenizer

__all__ = ["ParserDefaults", "parser_defaults"]

log = logging.getLogger("contextkit.integrations.llamaindex.node_parser")

#: Word pieces a window spends on special tokens ([CLS] and [SEP] in BERT-style models).
_SPECIAL_TOKENS = 2


@dataclass(frozen=True)
class ParserDefaults:
    """What ``ContextKitNodeParser()`` takes when a field is not given (``tokenizer`` None: its own default)."""

    chunk_size: int
    chunk_overlap: int
    tokenizer: str | None = None


def _settings_sizes(fallback: tuple[int, int]) -> tuple[int, int]:
    """``Settings.chunk_size`` and ``Settings.chunk_overlap``; ``fallback`` where the app's parser has none."""
    from llama_index.core import Settings

    try:
        return int(Settings.chunk_size), int(Settings.chunk_overlap)
    except (ValueError, AttributeError, TypeError):  # a node parser without sizes (e.g. a sentence window)
        return fallback


def _embedding_window(embed_model: Any) -> tuple[int, str] | None:
    """``(tokens, model name)`` the embedding model reads before it cuts, or None when it cuts nothing."""
    from contextkit.integrations.llamaindex.embedding import ContextKitEmbedding

    if isinstance(embed_model, ContextKitEmbedding):
        return None  # windows a long text, loses nothing
    max_length = getattr(embed_model, "max_length", None)
    if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length <= _SPECIAL_TOKENS:
        return None
    return max_length - _SPECIAL_TOKENS, str(getattr(embed_model, "model_name", "") or type(embed_model).__name__)


def _settings_embedding() -> Any:
    """``Settings.embed_model``, or None where resolving LlamaIndex's default fails (no OpenAI package or key)."""
    from llama_index.core import Settings

    try:
        return Settings.embed_model
    except Exception:  # noqa: BLE001 - LlamaIndex raises ImportError/ValueError for its OpenAI default
        return None


def _model_tokenizer(model_name: str) -> str | None:
    """``hf:NAME`` when the embedding model's tokenizer loads here (it is cached once the model ran), else None."""
    name = f"hf:{model_name}"
    try:
        get_tokenizer(name).count("probe")
    except Exception:  # noqa: BLE001 - any loading failure means: count with the parser's default instead
        return None
    return name


def parser_defaults(given: dict[str, Any], fallback: tuple[int, int]) -> ParserDefaults:
    """The sizes for a parser built with the fields in ``given``: a given ``chunk_size`` keeps contextkit's own
    overlap default (``fallback``), as before; without one, the app's ``Settings`` decide, capped by the
    embedding model's window."""
    if "chunk_size" in given:
        return ParserDefaults(chunk_size=int(given["chunk_size"]),
                              chunk_overlap=int(given.get("chunk_overlap", fallback[1])))
    size, overlap = _settings_sizes(fallback)
    tokenizer = None
    window = _embedding_window(_settings_embedding())
    if window is not None and window[0] < size:
        cap, model = window
        if "tokenizer" not in given:
            tokenizer = _model_tokenizer(model)
        unit = f"{tokenizer} tokens" if tokenizer else "tokens of the parser's tokenizer (an estimate of its window)"
        log.warning("Settings.chunk_size is %d but the embedding model %s reads %d tokens and cuts the rest: "
                    "ContextKitNodeParser() chunks at %d %s; pass chunk_size= to choose", size, model, cap, cap, unit)
        overlap, size = overlap * cap // size, cap
    overlap = int(given["chunk_overlap"]) if "chunk_overlap" in given else min(overlap, size - 1)
    return ParserDefaults(chunk_size=size, chunk_overlap=overlap, tokenizer=tokenizer)

"""``contextkit.toml``: kept as an import path for users; the code lives in :mod:`contextkit.core.config`."""

from contextkit.core.config import (  # noqa: F401 - re-exported
    COMMAND_LINE_KEYS,
    CONFIG_FILE,
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_SUMMARY_MAX_TOKENS,
    DEFAULT_TOKENIZER,
    ConfigError,
    find_config,
    load_config,
)

__all__ = ["DEFAULT_CHUNK_OVERLAP", "DEFAULT_CHUNK_SIZE", "DEFAULT_SUMMARY_MAX_TOKENS", "DEFAULT_TOKENIZER",
           "ConfigError", "find_config", "load_config"]

"""Project defaults from ``contextkit.toml`` or ``[tool.contextkit]`` in ``pyproject.toml``.

The CLI reads them as the defaults of its options (flags still win); the API reads
them only when asked (``load_config()``, ``IngestConfig.from_config()``,
``ContextAssembler.from_config()``): a library call never changes behaviour because
of a file it did not name. Example ``contextkit.toml``::

    index = "docs.ck-index"          # every command's --index

    [ingest]
    chunk_size = 512
    overlap = 64
    redact = true

    [assemble]
    model = "gpt-4o"
    format = "xml"

Section names are the CLI's command names. Keys are the fields of the command's settings record
(``IngestConfig``, ``ChunkerConfig``, ``AssemblerConfig``: every option, including those the CLI has
no flag for, such as ``relevance_floor``) or the CLI's option names with ``-`` written as ``_``
(declared on the fields as aliases: ``overlap``, ``order``, ``stream_above`` in MiB), plus
:data:`COMMAND_LINE_KEYS`. The library and the CLI read a table through the same record
(:meth:`contextkit.core.settings.Settings.from_config`), so a key means the same to both, and a
misspelt one is refused by both with :class:`~contextkit.errors.UnknownOptionError`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from contextkit.core.errors import ConfigError

__all__ = ["DEFAULT_CHUNK_OVERLAP", "DEFAULT_CHUNK_SIZE", "DEFAULT_SUMMARY_MAX_TOKENS", "DEFAULT_TOKENIZER",
           "ConfigError", "find_config", "load_config"]

CONFIG_FILE = "contextkit.toml"

#: The one default chunk size of ``TokenChunker``, ``contextkit chunk`` and ``contextkit ingest`` (kept
#: here, in a module the CLI imports anyway, so showing it in ``--help`` costs no import), in
#: tokens of the chunker's tokenizer (cl100k_base), header included. Why 128: the default embedding
#: model (all-MiniLM-L6-v2) reads 256 word pieces, and a cl100k token is 1-4 of them; over a third
#: of the PEPs (235 files), the share of chunks longer than the model's window (embedded as
#: averaged windows instead of read whole) falls steeply from 256 tokens down to 128 and little
#: below it (what is left: tables, URLs, non-English text). Raise it for a model with a larger window.
DEFAULT_CHUNK_SIZE = 128
#: Keys a table may hold that only the command line reads (what it prints, where it writes, the inputs
#: of one run): the library passes them by, so one file is valid for both. A test holds this list equal
#: to the CLI's options that no settings record has (``contextkit.cli._settings.CLI_ONLY``).
COMMAND_LINE_KEYS = frozenset({
    "strict", "quiet", "json", "as_json", "out_file", "report_file", "report_html", "messages_file",
    "messages_style", "require_evidence", "instructions", "history", "tool_output", "filter_", "k", "workers",
})

#: The default overlap between neighbouring chunks: an eighth of the size.
DEFAULT_CHUNK_OVERLAP = 16
#: The tokenizer of chunks and budgets when none is named: tiktoken's ``cl100k_base``, shipped offline
#: by llama-index-core (a model profile names its own).
DEFAULT_TOKENIZER = "cl100k_base"
#: The hard cap on a history summary, in tokens, wherever one is made (assembler, CLI, plug-in).
DEFAULT_SUMMARY_MAX_TOKENS = 512


def find_config(start: str | Path | None = None) -> Path | None:
    """The nearest ``contextkit.toml``, or ``pyproject.toml`` with ``[tool.contextkit]``, from
    ``start`` (default: the working directory) up to the first folder holding ``.git``."""
    folder = Path(start or Path.cwd()).resolve()
    for here in [folder, *folder.parents]:
        if (here / CONFIG_FILE).is_file():
            return here / CONFIG_FILE
        pyproject = here / "pyproject.toml"
        if pyproject.is_file() and "[tool.contextkit" in pyproject.read_text(encoding="utf-8", errors="replace"):
            return pyproject
        if (here / ".git").exists():
            break
    return None


def load_config(path: str | Path | None = None) -> dict[str, Any]:
    """The settings as a dict (``{}`` when there is no file); relative ``index`` paths are
    resolved against the file's folder."""
    path = Path(path) if path is not None else find_config()
    if path is None:
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    if path.name == "pyproject.toml":
        data = data.get("tool", {}).get("contextkit", {})
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a table of settings")
    for table in [data, *[v for v in data.values() if isinstance(v, dict)]]:
        if isinstance(table.get("index"), str):
            table["index"] = str((path.parent / table["index"]).resolve())
    return data

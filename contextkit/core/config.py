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

from contextkit.core.errors import ConfigError, InvalidArgumentError, LimitExceededError

__all__ = ["DEFAULT_CHUNK_OVERLAP", "DEFAULT_CHUNK_SIZE", "DEFAULT_SUMMARY_MAX_TOKENS", "DEFAULT_TOKENIZER",
           "MAX_BUDGET", "MAX_HISTORY_MESSAGES", "MAX_K", "MAX_QUERY_CHARS", "ConfigError", "check_limit",
           "check_limit_option", "find_config", "load_config"]

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
    "dry_run",
})

#: The default overlap between neighbouring chunks: an eighth of the size.
DEFAULT_CHUNK_OVERLAP = 16
#: The tokenizer of chunks and budgets when none is named: tiktoken's ``cl100k_base``, shipped offline
#: by llama-index-core (a model profile names its own).
DEFAULT_TOKENIZER = "cl100k_base"
#: The hard cap on a history summary, in tokens, wherever one is made (assembler, CLI, plug-in).
DEFAULT_SUMMARY_MAX_TOKENS = 512
#: The rank whose score counts as "no longer relevant" for ``fill="relevant"`` (the relevance anchor):
#: the assembler searches at least this many candidates, whatever the budget, to know it. 100 is
#: ``HybridRetriever``'s default depth, where its fused scores are anchored at 0.
RELEVANCE_ANCHOR_RANK = 100

# The limits of one request (issue 33): without them a 1 MB query held a CPU for 208 s and 1 GB of
# memory on the dense side. Each default is far above real use, and each is an option of the entry
# points it guards (the retrievers, ``search_index``, ``assemble()`` and ``ContextAssembler``): a
# request past one raises ``LimitExceededError`` naming the option that raises it.

#: The longest query, in characters (``max_query_chars``): about 5,000 tokens, several pages of text,
#: twenty times a long question; a dense query this long embeds in seconds on a CPU (it is windowed,
#: never truncated, so the cost grows with its length). Also the longest ``question`` section.
MAX_QUERY_CHARS = 20_000
#: The most chunks one retrieval returns (``max_k``): a prompt of 1M tokens holds about 8,000 chunks of
#: the default size; past this, FAISS allocates ``k`` results per query (``k`` of 10**9: 16 GB).
MAX_K = 10_000
#: The largest budget, in tokens (``max_budget``): five times the largest context window of the
#: profiles shipped (2M); a larger number is a mistake (a character count, a typo) or an attack.
MAX_BUDGET = 10_000_000
#: The most history messages one assembly takes (``max_history_messages``): a conversation of 5,000
#: exchanges; the budget takes a few hundred at most, the rest is summarised or dropped, and each costs time.
MAX_HISTORY_MESSAGES = 10_000


def check_limit(amount: int, limit: int, option: str, what: str) -> None:
    """Refuse ``amount`` over ``limit`` with one :class:`LimitExceededError` line naming ``option``.

    ``what`` describes the amount with a ``{:,}`` field for it (``"a query of {:,} characters"``).
    Checked before any work, so a refused request costs nothing."""
    if amount > limit:
        raise LimitExceededError(f"{what.format(amount)} is over the limit of {limit:,} (raise it with the "
                                 f"option {option})")


def check_limit_option(value: object, option: str) -> int:
    """A limit given as an option: a whole number > 0 (a bool, a float or NaN is refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidArgumentError(f"{option} must be a whole number > 0, not {value!r}")
    return value


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

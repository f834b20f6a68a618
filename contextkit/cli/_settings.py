"""How the command line reads ``contextkit.toml``: through the library's own settings records.

A table of the file (``[ingest]``, ``[chunk]``, ``[assemble]``) is read by the
:class:`~contextkit.core.settings.Settings` record of that command (``IngestConfig``,
``ChunkerConfig``, ``AssemblerConfig``), exactly as ``IngestConfig.from_config()`` or
``ContextAssembler.from_config()`` read it. Keys that a command's options set become those
options' defaults (a flag on the command line still wins); every other field of the record
(``relevance_floor`` under ``[assemble]``, ``batch_chunks`` under ``[ingest]``) goes to the library
call as it is. So one file means one thing, whichever of the two reads it.

The CLI's own names live here, not in the core: :data:`PARAM_FIELDS` names the option whose
parameter is not called as its field or one of the field's declared aliases, and
:data:`CLI_ONLY` the options that no record holds (what to print, where to write).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from contextkit.core.settings import Settings

#: The settings record of each command that has one (imported only when the file has its table).
RECORDS = {
    "ingest": "contextkit.ingestion._types:IngestConfig",
    "chunk": "contextkit.chunking._config:ChunkerConfig",
    "assemble": "contextkit.assembly.context_assembler:AssemblerConfig",
}
#: Options whose parameter name is neither their field's name nor one of its aliases.
PARAM_FIELDS: dict[str, dict[str, str]] = {
    "assemble": {"fmt": "format"},
}
#: Options of a command that no settings record holds: inputs, outputs and how the CLI prints.
CLI_ONLY: dict[str, frozenset[str]] = {
    "ingest": frozenset({"paths", "index", "strict", "as_json", "quiet", "model", "dry_run"}),  # model: the old --embed-model
    "chunk": frozenset({"file", "as_json", "workers"}),
    "assemble": frozenset({
        "question", "index", "instructions", "history", "tool_output", "filter_", "require_evidence", "out_file",
        "messages_file", "messages_style", "report_file", "report_html", "as_json", "quiet", "k", "model",
    }),
}

#: The settings a command takes from the file beyond its options' defaults, by command (set by :func:`default_map`).
_FILE_SETTINGS: dict[str, dict[str, Any]] = {}


def record(command: str) -> type[Settings] | None:
    """The settings record of ``command``, or ``None`` when it has none."""
    where = RECORDS.get(command)
    if where is None:
        return None
    module, _, name = where.partition(":")
    found: type[Settings] = getattr(importlib.import_module(module), name)
    return found


def field_of(command: str, param: str, model: type[Settings]) -> tuple[str, float] | None:
    """``(field, factor)`` a CLI parameter sets (its value times ``factor`` is the field's), or ``None``."""
    named = PARAM_FIELDS.get(command, {}).get(param)
    if named is not None:
        return named, 1.0
    if param in model.model_fields:
        return param, 1.0
    return model.aliases().get(param)


def default_map(config: dict[str, Any], params: dict[str, set[str]]) -> dict[str, dict[str, Any]]:
    """click's ``default_map`` from the file: per command, its table in option names plus the top-level keys.

    A key is an option's name, or a field (or alias) of the command's record: a field some option
    sets becomes that option's default (in the option's unit); any other field is kept for
    :func:`file_settings`. Raises ``ValueError`` naming a key that is neither."""
    top = {k: v for k, v in config.items() if not isinstance(v, dict)}
    out: dict[str, dict[str, Any]] = {}
    for command in params:
        table = config.get(command, {})
        if not isinstance(table, dict):  # a top-level key named as a command (`index = "docs.ck-index"`, `contextkit index`)
            table = {}
        model = record(command) if table else None
        defaults, extra = dict(top), {}
        if model is not None:
            setters = {f: (p, factor) for p in params[command] if (found := field_of(command, p, model))
                       for f, factor in [found]}
            for key, value in model.options_from_table({k: v for k, v in table.items() if k not in params[command]
                                                        and k != "index"}).items():
                if key in setters:
                    param, factor = setters[key]
                    defaults[param] = value if factor == 1 or value is None else value / factor
                else:
                    extra[key] = value
        else:
            unknown = sorted(set(table) - params[command] - {"index"})
            if unknown:
                raise ValueError(f"unknown setting(s) in [{command}]: {', '.join(unknown)}")
        defaults.update({k: v for k, v in table.items() if k in params[command] or k == "index"})
        out[command] = defaults
        _FILE_SETTINGS[command] = extra
    return out


def file_settings(command: str) -> dict[str, Any]:
    """The fields of ``command``'s record that the file sets and no option of the command does."""
    return dict(_FILE_SETTINGS.get(command, {}))


def check_record_options(command: str, model: type[Settings], params: set[str]) -> list[str]:
    """The options of ``command`` that neither set a field of its record nor are declared CLI-only
    (a test holds this empty: an option added to the CLI must be declared in the record too)."""
    return sorted(p for p in params if p not in CLI_ONLY.get(command, ()) and field_of(command, p, model) is None)

"""Chunk filters compiled to SQL over a database index: :mod:`._filters`'s rules, in PostgreSQL's dialect.

The same conditions as the folder's (document ids, metadata values equal to the ones given, an
``fnmatch`` glob over the document id or its source path), with the same error for an unknown
metadata field. A metadata value is compared as JSON (``metadata::jsonb -> field = value``), so a
number matches a number and a string a string; a bool matches ``true``/``false`` (the folder's
SQLite also takes ``1``/``0`` for them).
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from contextkit.index._filters import FilterValue, check_fields

__all__ = ["matching_rowids"]


def matching_rowids(store: Any, *, doc_ids: Sequence[str] | None = None,
                    metadata: Mapping[str, FilterValue] | None = None,
                    source_glob: str | None = None) -> np.ndarray:
    """The rowids (ascending) of the chunks meeting every given condition (all chunks when none is given)."""
    where: list[str] = ["TRUE"]
    params: list[Any] = []
    if doc_ids is not None:
        where.append("c.doc_id = ANY(%s)")
        params.append(list(doc_ids))
    if metadata:
        check_fields(metadata, store.metadata_fields())
        for key, value in metadata.items():
            where.append("(c.metadata::jsonb -> %s) = %s::jsonb")
            params += [key, json.dumps(value)]
    rowids = store.rowids_where(" AND ".join(where), params)
    if source_glob is not None:
        keep = {r for r, doc_id, source in store.source_rows() if fnmatch.fnmatchcase(doc_id, source_glob)
                or fnmatch.fnmatchcase(source or "", source_glob)}
        rowids = rowids[np.isin(rowids, np.fromiter(keep, dtype=np.int64, count=len(keep)))]
    return rowids

"""Chunk filters compiled to SQL over the records store.

A filter is data (:class:`contextkit.retrievers.Filters` holds it: document ids, metadata
values, a glob over the document id or source path); turning it into SQL happens here, next
to the schema it reads, so no module outside :mod:`contextkit.index` writes SQL on the store
(the schema can change with this package alone). :meth:`contextkit.index.Index.rowids_matching`
is the public door; it also narrows the result to the generation a reader serves.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence

import numpy as np

from contextkit.core.errors import RetrievalError
from contextkit.index._store import RecordStore

__all__ = ["check_fields", "matching_rowids"]

#: A metadata value a filter may ask for (JSON scalars; a bool matches SQLite's 0/1).
FilterValue = str | int | float | bool


def check_fields(metadata: Mapping[str, FilterValue], known: set[str]) -> None:
    """Refuse a metadata field no chunk has (:class:`RetrievalError` naming the ones it has): a typo is not
    an empty result. Shared with the database's filters (:mod:`._pg_filters`)."""
    unknown = sorted(set(metadata) - known)
    if unknown:
        raise RetrievalError(
            f"unknown filter field(s) {', '.join(unknown)}; fields in this index: "
            f"{', '.join(sorted(known)) or 'none'} (and source=GLOB, doc_id=ID)"
        )


def matching_rowids(store: RecordStore, *, doc_ids: Sequence[str] | None = None,
                    metadata: Mapping[str, FilterValue] | None = None, source_glob: str | None = None,
                    retired: bool = False) -> np.ndarray:
    """The rowids of the chunks meeting every given condition (all chunks when none is given).

    ``doc_ids``: the chunk's document is one of them; ``metadata``: each key's value equals
    the one given (an unknown key raises :class:`~contextkit.errors.RetrievalError`, naming
    the fields the index has, so a typo is not an empty result); ``source_glob``: an
    ``fnmatch`` glob over the document id or its source path. ``retired``: match the rows
    retired since an older generation too (a reader of that generation narrows them to its own).
    """
    where: list[str] = ["1"]
    params: list[object] = []
    if doc_ids is not None:
        where.append(f"c.doc_id IN ({','.join('?' * len(doc_ids))})")
        params += list(doc_ids)
    if metadata:
        check_fields(metadata, store.metadata_fields(retired))
        for key, value in metadata.items():
            where.append("json_extract(c.metadata, ?) = ?")
            params += [f'$."{key}"', int(value) if isinstance(value, bool) else value]
    rowids = store.rowids_where(" AND ".join(where), params, retired)
    if source_glob is not None:
        rows = store.db.execute(f"SELECT c.rowid, c.doc_id, d.source FROM {store.chunk_rows(retired)} c "
                                "LEFT JOIN documents d ON d.id = c.doc_id")
        keep = {r for r, doc_id, source in rows if fnmatch.fnmatchcase(doc_id, source_glob)
                or fnmatch.fnmatchcase(source or "", source_glob)}
        rowids = rowids[np.isin(rowids, np.fromiter(keep, dtype=np.int64, count=len(keep)))]
    return rowids

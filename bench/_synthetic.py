"""Synthetic embedding-like vectors shared by the index benches (the same mixture as ``tests/index/test_index.py``)."""

from __future__ import annotations

import numpy as np


def clustered(rng: np.random.Generator, n: int, d: int = 384, k: int = 64) -> np.ndarray:
    """Unit vectors: a mixture of ``k`` fixed directions plus noise. Uniform random vectors are the
    worst case of every ANN index and unlike real embeddings."""
    centres = np.random.default_rng(123).standard_normal((k, d)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = centres[rng.integers(0, k, n)] + 0.6 * rng.standard_normal((n, d)).astype(np.float32) / np.sqrt(d)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

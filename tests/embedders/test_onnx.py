"""The ONNX export cache (issue 18): keyed by the weights, not their modification time, and pruned."""

from __future__ import annotations

import os
import time
from pathlib import Path

from contextkit.embedders._onnx import _file_sample, prune_cache


class TestOnnxCache:
    def test_the_key_survives_a_reinstall_of_the_same_weights(self, tmp_path: Path) -> None:
        weights = tmp_path / "model.safetensors"
        weights.write_bytes(os.urandom(3 << 20))
        before = _file_sample(weights)
        os.utime(weights, (time.time() + 3600, time.time() + 3600))  # what a reinstall does
        assert _file_sample(weights) == before
        data = bytearray(weights.read_bytes())
        data[-10] ^= 0xFF  # other weights
        weights.write_bytes(bytes(data))
        assert _file_sample(weights) != before

    def test_an_export_replaces_its_family_and_the_cache_is_bounded(self, tmp_path: Path) -> None:
        def export(name: str, age: float) -> Path:
            path = tmp_path / name
            path.write_bytes(b"onnx")
            os.utime(path, (time.time() - age, time.time() - age))
            return path

        old_same = export("famA-old.onnx", 100)
        others = [export(f"fam{i}-k.onnx", 10 * i) for i in range(1, 6)]
        dead = export("famZ-x.onnx.part", 7200)
        new = export("famA-new.onnx", 0)
        removed = prune_cache(tmp_path, new)
        assert old_same in removed and dead in removed
        left = sorted(p.name for p in tmp_path.iterdir())
        assert left == ["fam1-k.onnx", "fam2-k.onnx", "fam3-k.onnx", "famA-new.onnx"]  # 4 in all, newest kept
        assert others[-1] in removed

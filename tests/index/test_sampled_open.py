"""The sampled check on open of a FAISS file over 8 MiB (issue 16): its ends and 64 blocks spread between them.

Open hashes small files whole; a large one by its size, its first and last MiB and the spread
blocks, so a hole or an overwritten run anywhere in it (any run longer than 1/63 of the file)
is refused on open, with a clear message, instead of being served. A single bad vector away
from the samples is the documented trade-off: ``verify`` hashes every byte and finds it.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from contextkit.index import Index, IndexCorruptError, _checksums, repair_index, verify_index
from contextkit.records import Chunk

from .conftest import derived_path

DIM, N = 384, 6_500  # 6,500 x 384 float32: a 10 MB vectors.faiss, over the 8 MiB full-hash limit


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """A saved index whose FAISS file is over FULL_CHECK_ON_OPEN; each test damages a copy."""
    folder = tmp_path_factory.mktemp("large") / "ix"
    rng = np.random.default_rng(16)
    vecs = rng.standard_normal((N, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    texts = [f"text {i}" for i in range(N)]
    chunks = [Chunk(id=f"d::{i}", doc_id="d", ordinal=i, text=t, start=100 * i, end=100 * i + len(t),
                    token_count=2) for i, t in enumerate(texts)]
    with Index.create(folder, model="m", dim=DIM) as index:
        index.begin()
        index.store.put_document("d", "d", "d", "sha", 10, {})
        index.add_chunks(chunks, vecs, [f"d-{i}" for i in range(N)])
        index.commit()
    faiss_file = derived_path(folder, "vectors.faiss")
    assert faiss_file.stat().st_size > _checksums.FULL_CHECK_ON_OPEN
    return folder, vecs


@pytest.fixture()
def copy(large, tmp_path):
    import shutil

    folder, vecs = large
    shutil.copytree(folder, tmp_path / "ix")
    return tmp_path / "ix", vecs


def overwrite(path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


class TestSampledOpen:
    def test_the_manifest_records_the_spread_hash(self, copy):
        folder, _ = copy
        sums = json.loads((folder / "manifest.json").read_text())["checksums"]
        assert len(sums["vectors.faiss"]["spread_sha256"]) == 64

    def test_a_hole_in_the_middle_is_refused_on_open(self, copy):
        folder, _ = copy
        faiss_file = derived_path(folder, "vectors.faiss")
        size = faiss_file.stat().st_size
        overwrite(faiss_file, size // 2 - size // 60, bytes(size // 30))  # a zeroed run, as a failed copy leaves
        with pytest.raises(IndexCorruptError, match=r"damaged: a block sampled from its middle differs") as exc:
            Index.open(folder, read_only=True)
        assert faiss_file.name in str(exc.value) and "contextkit repair" in str(exc.value)
        assert repair_index(folder).ok  # derived from the store: rebuilt
        Index.open(folder, read_only=True).close()

    def test_a_bad_vector_in_a_sampled_block_is_refused(self, copy):
        folder, _ = copy
        faiss_file = derived_path(folder, "vectors.faiss")
        offset = _checksums._spread_offsets(faiss_file.stat().st_size)[20] + 100
        overwrite(faiss_file, offset, np.full(DIM, 7.0, np.float32).tobytes())  # one vector, scores far above 1
        with pytest.raises(IndexCorruptError, match="sampled from its middle"):
            Index.open(folder, read_only=True)

    def test_a_flip_away_from_the_samples_is_left_to_verify(self, copy):
        folder, vecs = copy
        faiss_file = derived_path(folder, "vectors.faiss")
        size = faiss_file.stat().st_size
        offsets = _checksums._spread_offsets(size)
        between = offsets[30] + _checksums.SPREAD_BYTES + 1000  # inside the gap after block 30
        assert between < offsets[31]
        overwrite(faiss_file, between, b"\xff\xff\xff\x7f")  # a NaN in one vector
        Index.open(folder, read_only=True).close()  # the documented trade-off: not seen on open
        report = verify_index(folder)
        assert [(c.file, c.status) for c in report.problems] == [("vectors.faiss", "corrupt")]

    def test_a_manifest_without_the_spread_hash_still_opens(self, copy):
        """Folders saved before the spread hash: checked by size and ends, as they were."""
        folder, _ = copy
        manifest = json.loads((folder / "manifest.json").read_text())
        for rec in manifest["checksums"].values():
            rec.pop("spread_sha256", None)
        (folder / "manifest.json").write_text(json.dumps(manifest))
        Index.open(folder, read_only=True).close()
        assert verify_index(folder).ok

    def test_the_sampled_check_costs_a_few_milliseconds(self, copy):
        """Not a benchmark: a guard that open does not hash the whole file (that is verify's job)."""
        folder, _ = copy
        faiss_file = derived_path(folder, "vectors.faiss")
        rec = _checksums.FileSum(**json.loads((folder / "manifest.json").read_text())["checksums"]["vectors.faiss"])
        reads: list[int] = []
        real_open = open

        class Counting:
            def __init__(self, fh):
                self.fh = fh

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.fh.close()

            def seek(self, n):
                return self.fh.seek(n)

            def read(self, n=-1):
                data = self.fh.read(n)
                reads.append(len(data))
                return data

        _checksums.open = lambda p, mode="r": Counting(real_open(p, mode))  # type: ignore[attr-defined]
        try:
            started = time.perf_counter()
            assert _checksums.check_file(faiss_file, rec, full=False) is None
            elapsed = time.perf_counter() - started
        finally:
            del _checksums.open  # type: ignore[attr-defined]
        assert sum(reads) <= 2 * _checksums.SAMPLE_BYTES + _checksums.SPREAD_BLOCKS * _checksums.SPREAD_BYTES
        assert elapsed < 5.0  # generous: a loaded 2-core box; the point is the bytes read above

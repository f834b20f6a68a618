"""Ingest throughput: ``engine="ray"`` against local ingestion (the baseline), same files, same box.

One run ingests the first ``--limit`` PEP files (default 12, copied to a temporary
folder) twice, each into a fresh index with chunk_size 256 / overlap 32:

* local: ``ingest(folder, ix)``, one process (its model load included: the Ray side
  loads the model in its actor too, so both clocks hold one load);
* ray: ``ingest(folder, ix, engine="ray")`` on a local Ray started beforehand with
  ``--cpus`` CPUs (``ray.init`` is timed apart and not in the ratio): load + chunk tasks,
  one embedding actor per CPU but one.

Prints wall seconds and chunks/s per side, the ratio ray / local, and checks both
indexes hold the same chunk ids. On a 2-core machine expect Ray to be *slower*: it
embeds in one single-threaded actor (the other CPU loads and chunks) and pays worker
and actor start-up; it pays off with many nodes or GPUs, which this bench does not
have. Nothing is asserted.

Run: ``python bench/bench_ray_ingest.py`` (``--limit N``, ``--cpus N``).
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import logging
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PEPS = DATA / "python_peps" / "peps"


def chunk_ids(index_dir: Path) -> list[str]:
    with sqlite3.connect(index_dir / "store.sqlite") as db:
        return sorted(r[0] for r in db.execute("SELECT id FROM chunks"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=12, help="first N PEP files")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2, help="CPUs of the local Ray")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import ray

    from contextkit.ingestion import ingest

    files = sorted(PEPS.glob("*.rst"))[: args.limit]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "peps"
        folder.mkdir()
        for f in files:
            shutil.copy(f, folder / f.name)
        mb = sum(f.stat().st_size for f in files) / 1e6

        t0 = time.perf_counter()
        local = ingest([folder], Path(tmp) / "local-ix", chunk_size=256, chunk_overlap=32)
        local_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        init_s = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            dist = ingest([folder], Path(tmp) / "ray-ix", chunk_size=256, chunk_overlap=32, engine="ray")
            ray_s = time.perf_counter() - t0
        finally:
            ray.shutdown()
        same = chunk_ids(Path(tmp) / "local-ix") == chunk_ids(Path(tmp) / "ray-ix")

    print(f"{len(files)} PEP files, {mb:.2f} MB, {local.chunks_added} chunks; local Ray with {args.cpus} CPUs "
          f"(ray.init {init_s:.1f} s, not counted)")
    print(f"{'side':<8}{'seconds':>10}{'chunks/s':>12}")
    for name, seconds, report in (("local", local_s, local), ("ray", ray_s, dist)):
        print(f"{name:<8}{seconds:>10.1f}{report.chunks_added / seconds:>12.2f}")
    print(f"ratio ray / local (chunks/s): {local_s / ray_s:.2f}x   same chunk ids: {same}")
    print(f"ray stages (s): {', '.join(f'{k} {v:.1f}' for k, v in dist.seconds.items())}")


if __name__ == "__main__":
    main()

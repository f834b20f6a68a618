"""No code-executing formats anywhere, and one opened index shared by many threads."""

from __future__ import annotations

import ast
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "contextkit"
FORBIDDEN_MODULES = {"pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve", "joblib"}


class TestNoCodeExecutingFormats:
    def test_package_never_imports_pickle_like_modules(self):
        found = []
        for path in PACKAGE.rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name.split(".")[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module.split(".")[0]]
                found += [f"{path.name}:{node.lineno} {n}" for n in names if n in FORBIDDEN_MODULES]
        assert not found

    def test_numpy_and_torch_loads_refuse_pickles(self):
        offenders = []
        for path in PACKAGE.rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                    continue
                if node.func.attr in ("load", "loads") and isinstance(node.func.value, ast.Name):
                    owner = node.func.value.id
                    kwargs = {k.arg: k.value for k in node.keywords}
                    if owner in ("np", "numpy"):
                        flag = kwargs.get("allow_pickle")
                        if not (isinstance(flag, ast.Constant) and flag.value is False):
                            offenders.append(f"{path.name}:{node.lineno} np.load without allow_pickle=False")
                    if owner == "torch":
                        flag = kwargs.get("weights_only")
                        if not (isinstance(flag, ast.Constant) and flag.value is True):
                            offenders.append(f"{path.name}:{node.lineno} torch.load without weights_only=True")
        assert not offenders

    def test_no_eval_or_exec(self):
        calls = []
        for path in PACKAGE.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("eval", "exec"):
                    calls.append(f"{path.name}:{node.lineno}")
        assert not calls


class TestManyThreadsOneIndex:
    def test_queries_and_assemblies_equal_single_threaded(self, tmp_path, small_corpus, embedder):
        from contextkit.assembly.context_assembler import ContextAssembler
        from contextkit.index import Index
        from contextkit.ingestion import ingest
        from contextkit.retrievers import HybridRetriever

        ingest([small_corpus], tmp_path / "ix", embedder=embedder)
        questions = [f"{w} question {i}" for i in range(25) for w in ("vectors", "bread dough", "BM25 ranking")]
        with Index.open(tmp_path / "ix", read_only=True) as index:
            retriever = HybridRetriever(index, embedder)
            assembler = ContextAssembler(300, retriever=retriever)

            def work(q: str) -> tuple[list[str], str]:
                return [h.chunk.id for h in retriever.retrieve(q, 3)], assembler.assemble(q).prompt

            alone = [work(q) for q in questions]
            with ThreadPoolExecutor(8) as pool:
                together = list(pool.map(work, questions))
        assert together == alone


@pytest.mark.parametrize("name", ["vectors.faiss", "manifest.json"])
def test_index_folders_from_strangers_hold_no_pickles(tmp_path, small_corpus, embedder, name):
    from contextkit.ingestion import ingest

    ingest([small_corpus], tmp_path / "ix", embedder=embedder)
    files = json.loads((tmp_path / "ix" / "manifest.json").read_text())["files"]  # generation-named files
    data = (tmp_path / "ix" / files.get(name, name)).read_bytes()
    assert not data.startswith(b"\x80")  # a pickle stream's PROTO opcode

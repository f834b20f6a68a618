"""``contextkit serve`` measured: what each transport adds to a search, and 100 clients while an ingest commits.

Two sections, on real server processes (``python -m contextkit serve``, as a user starts them):

**latency**: the same seeded queries (word windows drawn from the index's own chunks), hybrid,
``k=10``, through seven paths, each path once per query (so the box's noise hits all alike), in an
order shuffled per query (seeded): every path runs after every other about equally often (in a fixed
order, a server's call right after an in-process search was slower, whichever path it was, and always
the same path paid for it: ``mcp-http``, which came after ``service``):

- ``direct``: the index opened once in this process, ``make_retriever("hybrid", ...).retrieve(q, 10)``
  (what ``search_index`` does inside, without reopening the index per call): the strictest baseline;
- ``search_index``: ``contextkit.search_index(index, q, k=10)``, the library call as a user makes it (the
  model stays loaded between calls; the index is opened per call);
- ``service``: ``IndexService(index).search(SearchRequest(...))`` in this process (the server's own
  work: parse, pin a generation, search, sources, the JSON cut to the token limit; no transport);
- ``mcp-http``: one MCP client session over streamable HTTP (``/mcp``), ``call_tool("search")``;
- ``mcp-raw``: the same JSON-RPC ``tools/call`` posted to ``/mcp`` on one kept-alive ``http.client``
  connection: what the server spends on an MCP call, without the SDK client's own per-call work;
- ``http-json``: one ``httpx.AsyncClient`` posting to ``/v1/search``;
- ``mcp-stdio``: one MCP client session to a ``serve --mcp stdio`` child process.

Each path is warmed up first (``--warmup`` calls), each client connects once and only the call is
timed. Prints p50/p95 per path and the ratios to ``direct`` (p50 over p50, and the median of the
per-query ratios); every answer must have the direct call's chunk ids in its order and scores within
``--atol`` (a hard check). The ratios are reported, never asserted.

**load**: a copy of the corpus is ingested into a temporary index (or ``--index`` is copied) and
served over HTTP with ``--rate-limit 0`` (every client here shares one address, which the default
per-address limit would refuse). Half the queries are ``dense``, half ``hybrid``. Reference answers
are computed first, single-client, over both transports, and checked against the library's answers
on the same generation. Then ``--clients`` clients (half MCP over HTTP, each with its own session;
half JSON, each with its own ``httpx.AsyncClient``) loop over the queries for ``--seconds``, while
another process adds a file (a made-up topic no query is about) and runs ``python -m contextkit
ingest FOLDER --index DIR -q`` at about 1/3 and 2/3 of the run: two commits. BM25 statistics change
with every document added (hybrid scores may move), so every answer is compared with the reference
of the generation it says it came from (``"generation"`` in each result): that process pins each
new generation right after its commit and computes its answers with the library (ids in order,
scores within ``--atol``). Counted: errors (exceptions, ``isError``, HTTP status not 200),
mismatches, answers of a generation without a reference; requests served, throughput, p50/p95
under load; the server's RSS sampled every second (after warm-up, at the end, the max, the growth);
the generations served. If the second commit comes late, the run goes on until a few seconds after it
(the last generation must be served under load too; the duration printed is the real one).

**floor**: what the transports cost when the search costs nothing. One real search's JSON (10 hits)
is sent back with no search, at once and after a busy wait as long as a search (the direct path's p50
when the latency section ran in the same command, else ``--floor-wait-ms``), by (a) ``contextkit
serve``'s own app (guard, routes, the worker thread, the MCP tool) over a service that returns that
text, and (b) the ``mcp`` SDK's bare ``MCPServer`` with one tool that returns it, waiting in the event
loop (the least an MCP server built on the SDK does); each in its own process on uvicorn as ``serve``
runs it. Timed from the client: the SDK's client over HTTP (``mcp-http``), bare JSON-RPC on
``http.client`` (``mcp-raw``) and, for (a), ``httpx`` on ``/v1/search``. The summary gives each path's
p50 over the wait: the least any such server reaches against a search that takes that long.

Exit status 1 on an error, a mismatch, an unverifiable answer, an ingest that did not commit, or a
traceback or error line in a server's log; performance is reported, not asserted.

Run: ``python bench/bench_serve.py`` (3 to 4 minutes on 2 cores: builds an index of the first ``--peps``
PEPs, then the sections); ``--seconds 20 --clients 30`` is the short version; ``--section latency|load|floor``
runs one (``latency,floor`` two); ``--index DIR`` uses an existing index (never written: the load section copies it);
``--json FILE`` keeps the figures.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import asyncio
import contextlib
import json
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PEPS = DATA / "python_peps" / "peps"
PATHS = ("direct", "search_index", "service", "mcp-http", "mcp-raw", "http-json", "mcp-stdio")

# The files the load section's ingests add: a made-up topic, in words no PEP uses, that no query is about.
ADDED = [
    ("zz-serve-bench-quorvish.md",
     "# The tidewardens of Quorvish\n\n"
     "On the Vellmar shoals the Quorvish tidewardens hang kelp lanterns from driftwood masts each dusk. "
     "Brine-moths gather around the lanterns in glittering swarms, and the wardens count them by ear, "
     "listening to the hum of their wings over the surf.\n\n"
     "A warden's apprenticeship lasts nine winters. The apprentice learns to braid sea-grass ropes, to "
     "read the colour of foam at low water, and to cook barnacle porridge for the whole watch-house.\n\n"
     "Every spring the wardens float paper otters into the lagoon; the otter that drifts farthest names "
     "the year, which is then carved on the watch-house door beside the otters of earlier springs.\n"),
    ("zz-serve-bench-zanthery.md",
     "# Glassblowers of the Zanthery marsh\n\n"
     "The reed-cutters of the Zanthery marsh melt heron-sand in peat kilns and blow it into green bottles "
     "shaped like gourds. A marsh bottle rings like a bell when filled with rainwater; village choirs tune "
     "to it.\n\n"
     "Heron-sand is dug only in the month of the frog moon, when the egrets leave the dunes. Diggers walk "
     "on wide willow shoes so that the peat does not swallow them, and they sing to keep the mosquitoes "
     "away.\n\n"
     "Cracked bottles are never thrown out: they are ground into glitter for the lantern festival, where "
     "children paint marsh spirits on the boats with it.\n"),
]


# ---------------------------------------------------------------------------------------------- common
def uvicorn_parts() -> str:
    """uvicorn's HTTP parser and event loop as its ``auto`` settings pick them in this interpreter (the servers'
    own): httptools and uvloop when installed (the ``serve`` extra brings them), else h11 and asyncio."""
    import importlib.util

    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    return f"{http} + {loop}"


def env() -> dict[str, str]:
    e = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    e.pop("CONTEXTKIT_SERVE_TOKEN", None)
    return e


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ingest_cli(folder: Path, index: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "contextkit", "ingest", str(folder), "--index", str(index), "-q"],
                          env=env(), capture_output=True, text=True, check=False)


def build_index(workdir: Path, peps: int) -> tuple[Path, Path]:
    """A copy of the first ``peps`` PEP files and an index of them (``contextkit ingest``, default settings)."""
    files = sorted(PEPS.glob("*.rst"))[:peps]
    if not files:
        raise SystemExit(f"no PEPs under {PEPS}; give --index")
    corpus = workdir / "corpus"
    corpus.mkdir(parents=True)
    for f in files:
        (corpus / f.name).write_bytes(f.read_bytes())
    index = workdir / "peps.ck-index"
    t0 = time.perf_counter()
    done = ingest_cli(corpus, index)
    if done.returncode != 0:
        raise SystemExit(f"ingest failed ({done.returncode}): {done.stderr[-2000:]}")
    print(f"built {index} from {len(files)} PEPs in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return corpus, index


def make_queries(index_dir: Path, n: int, seed: int) -> list[str]:
    """``n`` word windows of 3-12 words drawn from the index's chunks (seeded), as bench_load.py draws them."""
    from contextkit.index import Index

    rng = random.Random(seed)
    with Index.open(index_dir, read_only=True) as index:
        texts = [t for _, batch in index.store.iter_chunk_texts() for t in batch]
    out = []
    for _ in range(n):
        words = rng.choice(texts).split()
        length = rng.randint(3, 12)
        lo = rng.randint(0, max(0, len(words) - length))
        out.append(" ".join(words[lo:lo + length]) or "python")
    return out


def hits_of(data: dict[str, Any]) -> list[tuple[str, float]]:
    return [(h["id"], float(h["score"])) for h in data.get("hits", [])]


def differs(ref: list[tuple[str, float]], got: list[tuple[str, float]], atol: float) -> str | None:
    """Why ``got`` is not the answer ``ref`` (None when it is: the same ids in the same order, scores within atol)."""
    ids_r, ids_g = [i for i, _ in ref], [i for i, _ in got]
    if ids_r != ids_g:
        at = next((j for j, (a, b) in enumerate(zip(ids_r, ids_g)) if a != b), min(len(ids_r), len(ids_g)))
        return f"ids differ from rank {at + 1} ({len(ids_r)} vs {len(ids_g)} hits)"
    worst = score_gap(ref, got)
    return None if worst <= atol else f"scores differ by {worst:.2e}"


def score_gap(ref: list[tuple[str, float]], got: list[tuple[str, float]]) -> float:
    return max((abs(a - b) for (_, a), (_, b) in zip(ref, got)), default=0.0)


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


class Server:
    """``python -m contextkit serve --index DIR --port N ...`` in another process, stopped on exit."""

    def __init__(self, index: Path, log: Path, *args: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "contextkit", "serve", "--index", str(index),
                                      "--port", str(self.port), *args], env=env(), stdout=subprocess.DEVNULL,
                                     stderr=self._log)

    def wait(self, timeout: float = 300) -> float:
        import httpx

        t0 = time.perf_counter()
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.base + "/v1/health", timeout=2).status_code == 200:
                    return time.perf_counter() - t0
            except httpx.TransportError:
                pass
            if time.perf_counter() - t0 > timeout:
                raise SystemExit(f"the server did not answer /v1/health within {timeout:.0f} s")
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def problems(self) -> list[str]:
        """Lines of the server's stderr that say something went wrong (a traceback, an error logged)."""
        text = self.log.read_text(errors="replace")
        return [line for line in text.splitlines() if "Traceback" in line or "ERROR" in line or "Error" in line]


async def mcp_search(client: Any, query: str, k: int, mode: str) -> dict[str, Any]:
    """One ``search`` tool call; its result dict, or a RuntimeError with the tool's error text."""
    r = await client.call_tool("search", {"query": query, "k": k, "mode": mode})
    if r.is_error:
        raise RuntimeError("isError: " + (r.content[0].text if r.content else "")[:300])
    data = r.structured_content
    return data if data is not None else json.loads(r.content[0].text)


class RawMcp:
    """``tools/call`` as bare JSON-RPC on one kept-alive connection (the 2026-07-28 protocol's headers and
    envelope, as the SDK's client sends them): the server's cost of an MCP call alone."""

    def __init__(self, base: str) -> None:
        import http.client
        from urllib.parse import urlparse

        url = urlparse(base)
        self.conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port)
        self.id = 0

    def search(self, query: str, k: int) -> dict[str, Any]:
        self.id += 1
        version = "2026-07-28"
        body = {"jsonrpc": "2.0", "id": self.id, "method": "tools/call", "params": {
            "name": "search", "arguments": {"query": query, "k": k},
            "_meta": {"io.modelcontextprotocol/protocolVersion": version,
                      "io.modelcontextprotocol/clientCapabilities": {}}}}
        self.conn.request("POST", "/mcp", body=json.dumps(body), headers={
            "content-type": "application/json", "accept": "application/json, text/event-stream",
            "mcp-protocol-version": version, "mcp-method": "tools/call", "mcp-name": "search"})
        reply = json.loads(self.conn.getresponse().read())
        if "error" in reply or reply["result"].get("isError"):
            raise RuntimeError(f"raw MCP call refused: {str(reply)[:300]}")
        return json.loads(reply["result"]["content"][0]["text"])


async def json_search(http: Any, query: str, k: int, mode: str) -> dict[str, Any]:
    resp = await http.post("/v1/search", json={"query": query, "k": k, "mode": mode})
    if resp.status_code != 200:
        raise RuntimeError(f"HTTP {resp.status_code}: {resp.text[:300]}")
    return resp.json()


# ---------------------------------------------------------------------------------------------- latency
async def latency_section(index_dir: Path, queries: list[str], k: int, warmup: int, atol: float,
                          workdir: Path) -> dict[str, Any]:
    import httpx
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from contextkit import search_index
    from contextkit.embedders import embedder_for
    from contextkit.index import Index
    from contextkit.retrievers import make_retriever
    from contextkit.serve import IndexService, SearchRequest

    server = Server(index_dir, workdir / "serve-latency.log", "--rate-limit", "0")
    try:
        started_s = server.wait()
        index = Index.open(index_dir, read_only=True)
        retriever = make_retriever("hybrid", index, embedder_for(index, "auto", shared=True))
        service = IndexService(index_dir)
        stdio_log = open(workdir / "serve-stdio.log", "w")  # noqa: SIM115 - closed below
        params = StdioServerParameters(command=sys.executable, args=["-m", "contextkit", "serve", "--index",
                                                                     str(index_dir), "--mcp", "stdio"], env=env())
        async with contextlib.AsyncExitStack() as stack:
            t0 = time.perf_counter()
            mcp_http = await stack.enter_async_context(Client(server.base + "/mcp"))
            mcp_stdio = await stack.enter_async_context(Client(stdio_client(params, errlog=stdio_log)))
            http = await stack.enter_async_context(httpx.AsyncClient(base_url=server.base, timeout=60))
            connect_s = time.perf_counter() - t0

            raw = RawMcp(server.base)

            async def call(path: str, q: str) -> list[tuple[str, float]]:
                if path == "direct":
                    return [(h.chunk.id, float(h.score)) for h in retriever.retrieve(q, k)]
                if path == "search_index":
                    return [(h.chunk.id, float(h.score)) for h in search_index(index_dir, q, k=k)]
                if path == "mcp-raw":
                    return hits_of(raw.search(q, k))
                if path == "service":
                    return hits_of(service.search(SearchRequest(query=q, k=k)))
                if path == "mcp-http":
                    return hits_of(await mcp_search(mcp_http, q, k, "hybrid"))
                if path == "mcp-stdio":
                    return hits_of(await mcp_search(mcp_stdio, q, k, "hybrid"))
                return hits_of(await json_search(http, q, k, "hybrid"))

            errors: list[str] = []
            for path in PATHS:  # warm-up: models, files, connections, first-call paths, outside the clocks
                for i in range(warmup):
                    try:
                        await call(path, queries[i % len(queries)])
                    except Exception as exc:  # noqa: BLE001 - counted and shown
                        errors.append(f"warm-up {path}: {type(exc).__name__}: {exc}")
            ms: dict[str, list[float]] = {p: [] for p in PATHS}
            rng = random.Random(len(queries))
            mismatches: list[str] = []
            worst = 0.0
            for qi, q in enumerate(queries):
                answers: dict[str, list[tuple[str, float]]] = {}
                for path in rng.sample(PATHS, len(PATHS)):  # shuffled: no path always follows the same one
                    t = time.perf_counter()
                    try:
                        answers[path] = await call(path, q)
                    except Exception as exc:  # noqa: BLE001 - counted and shown
                        errors.append(f"query {qi} {path}: {type(exc).__name__}: {exc}")
                        continue
                    ms[path].append((time.perf_counter() - t) * 1e3)
                ref = answers.get("direct")
                for path, got in answers.items():
                    if ref is None or path == "direct":
                        continue
                    worst = max(worst, score_gap(ref, got))
                    if why := differs(ref, got, atol):
                        mismatches.append(f"query {qi} {path}: {why}")
        stdio_log.close()
        service.close()
        index.close()
    finally:
        server.stop()
    problems = server.problems()
    table = {p: {"n": len(v), "p50_ms": pct(v, 50), "p95_ms": pct(v, 95)} for p, v in ms.items()}
    base = table["direct"]
    ratios = {}
    for p in PATHS[1:]:
        paired = [a / b for a, b in zip(ms[p], ms["direct"]) if b > 0] if len(ms[p]) == len(ms["direct"]) else []
        ratios[p] = {"p50": table[p]["p50_ms"] / base["p50_ms"], "p95": table[p]["p95_ms"] / base["p95_ms"],
                     "paired_median": float(np.median(paired)) if paired else float("nan")}
    return {"queries": len(queries), "k": k, "mode": "hybrid", "warmup": warmup, "server_start_s": started_s,
            "connect_s": connect_s, "latency": table, "ratios": ratios, "errors": len(errors),
            "error_examples": errors[:5], "mismatches": len(mismatches), "mismatch_examples": mismatches[:5],
            "max_score_diff": worst, "server_log_problems": problems[:5]}


def print_latency(res: dict[str, Any]) -> None:
    print(f"\n== latency: {res['queries']} queries, search {res['mode']} k={res['k']}, each path once per query (order shuffled) over "
          f"{len(PATHS)} paths, after {res['warmup']} warm-up calls each (server --rate-limit 0: one client "
          f"address makes every call) ==")
    print(f"{'path':<11}{'n':>5}{'p50 ms':>9}{'p95 ms':>9}{'p50 +ms':>9}{'p50/direct':>12}{'p95/direct':>12}"
          f"{'paired med':>12}")
    direct = res["latency"]["direct"]["p50_ms"]
    for p in PATHS:
        row = res["latency"][p]
        r = res["ratios"].get(p)
        tail = f"{r['p50']:>12.2f}{r['p95']:>12.2f}{r['paired_median']:>12.2f}" if r else f"{'1.00':>12}{'1.00':>12}"
        print(f"{p:<11}{row['n']:>5}{row['p50_ms']:>9.1f}{row['p95_ms']:>9.1f}{row['p50_ms'] - direct:>+9.1f}{tail}")
    print("(p50 +ms: over the direct call; paired med: the median over queries of this path's time / the direct "
          "call's for the same query)")
    print(f"answers: errors {res['errors']}, different from the direct call {res['mismatches']} "
          f"(largest score difference {res['max_score_diff']:.2e})")
    for line in res["error_examples"] + res["mismatch_examples"] + res["server_log_problems"]:
        print("   ", line)


# ---------------------------------------------------------------------------------------------- load
def driver_main(plan_file: Path) -> None:
    """The other process of the load section: references per generation, and the two ingests.

    Pins the generation served now and computes every (query, mode) answer with the library; says
    ``ready``; waits for ``go``; at each planned time writes an added file and runs ``contextkit ingest``
    (one commit), pins the new generation at once (before the next ingest can commit) and computes its
    answers in a worker thread; writes every reference to ``plan["out"]``. Speaks JSON lines on stdout."""
    import queue

    from contextkit.embedders import embedder_for
    from contextkit.index import Index
    from contextkit.retrievers import make_retriever

    plan = json.loads(plan_file.read_text())
    index_dir, folder, k = Path(plan["index"]), Path(plan["folder"]), plan["k"]
    pairs = [tuple(p) for p in plan["pairs"]]
    refs: dict[int, dict[str, Any]] = {}
    jobs: queue.Queue[threading.Event | None] = queue.Queue()
    failures: list[str] = []

    def say(**event: Any) -> None:
        print(json.dumps(event), flush=True)

    def worker() -> None:
        while (pinned := jobs.get()) is not None:
            try:
                with Index.open(index_dir, read_only=True) as index, index.snapshot():
                    generation = index.generation
                    pinned.set()  # this generation's files are leased and pinned: a later commit cannot take them
                    t0 = time.perf_counter()
                    embedder = embedder_for(index, "auto", shared=True)
                    retrievers = {m: make_retriever(m, index, None if m == "bm25" else embedder)
                                  for m in {m for _, m in pairs}}
                    answers = [[[h.chunk.id, float(h.score)] for h in retrievers[m].retrieve(q, k)] for q, m in pairs]
                    refs[generation] = {"answers": answers, "seconds": time.perf_counter() - t0,
                                        "chunks": len(index)}
                say(event="references", generation=generation, seconds=round(time.perf_counter() - t0, 1))
            except Exception as exc:  # noqa: BLE001 - reported to the bench
                failures.append(f"references: {type(exc).__name__}: {exc}")
                pinned.set()

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    first = threading.Event()
    jobs.put(first)
    first.wait()
    while not refs and not failures:
        time.sleep(0.05)
    say(event="ready", generations=sorted(refs))
    if sys.stdin.readline().strip() != "go":
        return
    t0 = time.perf_counter()
    commits = []
    for n, at in enumerate(plan["at"]):
        time.sleep(max(0.0, t0 + at - time.perf_counter()))
        name, text = ADDED[n % len(ADDED)]
        (folder / name).write_text(text, encoding="utf-8")
        started = time.perf_counter()
        done = ingest_cli(folder, index_dir)
        committed = time.perf_counter()
        if done.returncode != 0:
            failures.append(f"ingest {n + 1} exited {done.returncode}: {done.stderr[-1000:]}")
            say(event="failed", n=n + 1)
            continue
        pinned = threading.Event()
        jobs.put(pinned)
        pinned.wait()
        commits.append({"n": n + 1, "file": name, "started_s": started - t0, "committed_s": committed - t0,
                        "ingest_s": committed - started})
        say(event="committed", n=n + 1, t=round(committed - t0, 1))
    jobs.put(None)
    thread.join()
    Path(plan["out"]).write_text(json.dumps({"refs": {str(g): r for g, r in refs.items()}, "commits": commits,
                                             "failures": failures}))
    say(event="done")


class Driver:
    """The driver process (this file with ``--driver PLAN``), its JSON-line events read by a thread."""

    def __init__(self, plan: dict[str, Any], workdir: Path) -> None:
        self.plan_file = workdir / "driver-plan.json"
        self.plan_file.write_text(json.dumps(plan))
        self.out = Path(plan["out"])
        self.log = open(workdir / "driver.log", "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--driver", str(self.plan_file)],
                                     env=env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True)
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.events.append({**json.loads(line), "at": time.perf_counter()})

    def wait_for(self, name: str, timeout: float) -> None:
        deadline = time.perf_counter() + timeout
        while not any(e["event"] == name for e in self.events):
            if self.proc.poll() is not None and not any(e["event"] == name for e in self.events):
                time.sleep(0.2)
                if not any(e["event"] == name for e in self.events):
                    raise SystemExit(f"the driver process exited with {self.proc.returncode} before {name!r}: "
                                     f"{(self.plan_file.parent / 'driver.log').read_text()[-2000:]}")
            if time.perf_counter() > deadline:
                raise SystemExit(f"the driver process did not say {name!r} within {timeout:.0f} s")
            time.sleep(0.1)

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()


class RssSampler(threading.Thread):
    """The server's RSS (MB) every ``every`` seconds, with the ``time.perf_counter()`` of each sample."""

    def __init__(self, pid: int, every: float = 1.0) -> None:
        import psutil

        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.every = every
        self.samples: list[tuple[float, float]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            with contextlib.suppress(Exception):
                self.samples.append((time.perf_counter(), self.proc.memory_info().rss / 2**20))
            self._halt.wait(self.every)

    def stop(self) -> None:
        self._halt.set()
        self.join()


async def reference_answers(base: str, pairs: list[tuple[str, str]], k: int) -> dict[str, Any]:
    """Every (query, mode) answer, one call at a time, over JSON and over MCP (one session)."""
    import httpx
    from mcp import Client

    out: dict[str, Any] = {"json": [], "mcp": [], "generations": set(), "errors": []}
    async with Client(base + "/mcp") as mcp, httpx.AsyncClient(base_url=base, timeout=120) as http:
        for name, fn, client in (("json", json_search, http), ("mcp", mcp_search, mcp)):
            for q, m in pairs:
                try:
                    data = await fn(client, q, k, m)
                    out[name].append(hits_of(data))
                    out["generations"].add(data["generation"])
                except Exception as exc:  # noqa: BLE001 - counted and shown
                    out[name].append(None)
                    out["errors"].append(f"{name} {q[:40]!r} {m}: {type(exc).__name__}: {exc}")
    return out


async def run_clients(base: str, pairs: list[tuple[str, str]], k: int, clients: int, seconds: float,
                      driver: Driver, ingests: int, max_extra: float) -> dict[str, Any]:
    """``clients`` concurrent clients (half MCP, half JSON) looping over ``pairs`` until ``seconds`` have passed
    and the driver has committed ``ingests`` times (at most ``max_extra`` seconds longer)."""
    import httpx
    from mcp import Client

    records: list[tuple[str, int, float, float, int | None, Any, str | None]] = []
    stop = asyncio.Event()
    n_mcp = clients // 2
    async with contextlib.AsyncExitStack() as stack:
        t_conn = time.perf_counter()
        sessions: list[tuple[str, Any]] = []
        for _ in range(n_mcp):
            sessions.append(("mcp", await stack.enter_async_context(Client(base + "/mcp"))))
        for _ in range(clients - n_mcp):
            sessions.append(("json", await stack.enter_async_context(
                httpx.AsyncClient(base_url=base, timeout=120, limits=httpx.Limits(max_connections=1)))))
        connect_s = time.perf_counter() - t_conn
        t0 = time.perf_counter()
        driver.go()

        async def client_loop(c: int, kind: str, session: Any) -> None:
            i = (c * 7919) % len(pairs)  # each client starts elsewhere in the query list
            while not stop.is_set():
                q, m = pairs[i]
                started = time.perf_counter()
                try:
                    data = await (mcp_search if kind == "mcp" else json_search)(session, q, k, m)
                    records.append((kind, i, started - t0, time.perf_counter() - started, data.get("generation"),
                                    hits_of(data), None))
                except Exception as exc:  # noqa: BLE001 - counted and shown
                    records.append((kind, i, started - t0, time.perf_counter() - started, None, None,
                                    f"{type(exc).__name__}: {str(exc)[:300]}"))
                i = (i + 1) % len(pairs)

        async def controller() -> None:
            while True:
                await asyncio.sleep(0.2)
                elapsed = time.perf_counter() - t0
                ends = [e["at"] - t0 for e in driver.events if e["event"] in ("committed", "failed")]
                settled = len(ends) >= ingests and elapsed >= max(ends) + min(5.0, seconds / 6)
                if (elapsed >= seconds and settled) or elapsed >= seconds + max_extra:
                    stop.set()
                    return

        tasks = [asyncio.create_task(client_loop(c, kind, s)) for c, (kind, s) in enumerate(sessions)]
        await controller()
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - t0
    return {"records": records, "wall_s": wall, "t0": t0, "connect_s": connect_s, "mcp_clients": n_mcp,
            "json_clients": clients - n_mcp}


def load_section(index_src: Path, corpus: Path | None, queries: list[str], args: argparse.Namespace,
                 workdir: Path) -> dict[str, Any]:
    import psutil

    k, atol = args.k, args.atol
    load_dir = workdir / "load"
    load_dir.mkdir()
    if corpus is not None:  # built here (a temporary copy): served, and ingested again with a file more each time
        index, folder = index_src, corpus
    else:  # --index: a copy of it (the original is never written), and a folder of the added files
        index = load_dir / "index.ck-index"
        shutil.copytree(index_src, index, ignore=shutil.ignore_patterns(".lock"))
        folder = load_dir / "added"
        folder.mkdir()
    pairs = [(q, "dense" if i % 2 == 0 else "hybrid") for i, q in enumerate(queries)]
    ingests = 2
    with contextlib.ExitStack() as cleanup:  # every process started here is stopped, whatever happens
        driver = Driver({"index": str(index), "folder": str(folder), "k": k, "pairs": pairs,
                         "at": [args.seconds / 3, 2 * args.seconds / 3], "out": str(load_dir / "driver-refs.json")},
                        load_dir)
        cleanup.callback(driver.close)
        server = Server(index, load_dir / "serve-load.log", "--rate-limit", "0", "--workers", str(args.workers))
        cleanup.callback(server.stop)
        started_s = server.wait()
        sampler = RssSampler(server.proc.pid)
        sampler.start()
        cleanup.callback(sampler.stop)
        before = asyncio.run(reference_answers(server.base, pairs, k))
        driver.wait_for("ready", 600)
        server_cpu0 = psutil.Process(server.proc.pid).cpu_times()
        own_cpu0 = psutil.Process().cpu_times()
        run = asyncio.run(run_clients(server.base, pairs, k, args.clients, args.seconds, driver, ingests,
                                      max_extra=max(120.0, args.seconds)))
        server_cpu1 = psutil.Process(server.proc.pid).cpu_times()
        own_cpu1 = psutil.Process().cpu_times()
        run_end = time.perf_counter()
        driver.wait_for("done", 600)
        after = asyncio.run(reference_answers(server.base, pairs, k))
    dres = json.loads((load_dir / "driver-refs.json").read_text())
    refs = {int(g): [[(i, s) for i, s in a] for a in r["answers"]] for g, r in dres["refs"].items()}
    gens = sorted(refs)
    hard: list[str] = list(dres["failures"]) + before["errors"] + after["errors"]
    if len(dres["commits"]) < ingests:
        hard.append(f"only {len(dres['commits'])} of {ingests} ingests committed")

    # the single-client answers over each transport: the library's on the same generation
    def check_single(single: dict[str, Any], label: str) -> tuple[int, float]:
        bad, gap = 0, 0.0
        if len(single["generations"]) != 1 or next(iter(single["generations"])) not in refs:
            hard.append(f"{label}: single-client answers came from generations {sorted(single['generations'])}, "
                        f"references exist for {gens}")
            return 0, 0.0
        ref = refs[next(iter(single["generations"]))]
        for name in ("json", "mcp"):
            for j, got in enumerate(single[name]):
                if got is None:
                    continue
                gap = max(gap, score_gap(ref[j], got))
                if why := differs(ref[j], got, atol):
                    bad += 1
                    hard.append(f"{label} {name} {pairs[j][1]} query {j}: {why}")
        return bad, gap

    bad_before, gap_before = check_single(before, "single client before the run")
    bad_after, gap_after = check_single(after, "single client after the run")

    # every answer under load against the reference of its generation
    records = run["records"]
    errors = [r for r in records if r[6] is not None]
    mismatches: list[str] = []
    unverified = 0
    worst = 0.0
    by_gen: dict[int, int] = {}
    first_seen: dict[int, float] = {}
    for kind, j, t, _, gen, hits, err in records:
        if err is not None:
            continue
        by_gen[gen] = by_gen.get(gen, 0) + 1
        first_seen[gen] = min(first_seen.get(gen, t), t)
        if gen not in refs:
            unverified += 1
            continue
        worst = max(worst, score_gap(refs[gen][j], hits))
        if why := differs(refs[gen][j], hits, atol):
            mismatches.append(f"{kind} {pairs[j][1]} query {j} generation {gen} at {t:.1f} s: {why}")
    changed = {m: 0 for m in ("dense", "hybrid")}
    shift = {m: 0.0 for m in ("dense", "hybrid")}
    if len(gens) > 1:
        for j, (_, m) in enumerate(pairs):
            a, b = refs[gens[0]][j], refs[gens[-1]][j]
            changed[m] += [i for i, _ in a] != [i for i, _ in b]
            if [i for i, _ in a] == [i for i, _ in b]:
                shift[m] = max(shift[m], score_gap(a, b))
    ok = [r for r in records if r[6] is None]
    lat = {kind: [r[3] * 1e3 for r in ok if r[0] == kind] for kind in ("mcp", "json")}
    lat["all"] = lat["mcp"] + lat["json"]

    samples = [(t - run["t0"], mb) for t, mb in sampler.samples]
    during = [(t, mb) for t, mb in samples if 0 <= t <= run_end - run["t0"]]
    warm_at = min(10.0, args.seconds / 4)
    warm = next((mb for t, mb in during if t >= warm_at), float("nan"))
    rss_end = during[-1][1] if during else float("nan")
    pre = [mb for t, mb in samples if t < 0]
    server_cpu = (server_cpu1.user + server_cpu1.system) - (server_cpu0.user + server_cpu0.system)
    own_cpu = (own_cpu1.user + own_cpu1.system) - (own_cpu0.user + own_cpu0.system)
    problems = server.problems()
    if problems:
        hard.append(f"the server logged {len(problems)} problem lines (first: {problems[0][:200]})")
    return {
        "clients": args.clients, "mcp_clients": run["mcp_clients"], "json_clients": run["json_clients"],
        "seconds_asked": args.seconds, "wall_s": run["wall_s"], "workers": args.workers, "k": k,
        "pairs": len(pairs), "modes": {m: sum(p[1] == m for p in pairs) for m in ("dense", "hybrid")},
        "server_start_s": started_s, "connect_s": run["connect_s"],
        "requests": len(records), "served": len(ok), "rps": len(ok) / run["wall_s"],
        "errors": len(errors), "error_examples": [f"{r[0]} at {r[2]:.1f} s: {r[6]}" for r in errors[:5]],
        "mismatches": len(mismatches), "mismatch_examples": mismatches[:5], "unverified": unverified,
        "max_score_diff": worst,
        "latency": {kind: {"n": len(v), "p50_ms": pct(v, 50), "p95_ms": pct(v, 95)} for kind, v in lat.items()},
        "generations_served": {str(g): by_gen[g] for g in sorted(by_gen)},
        "generation_first_seen_s": {str(g): round(first_seen[g], 1) for g in sorted(first_seen)},
        "reference_generations": gens, "commits": dres["commits"],
        "reference_seconds": {str(g): round(dres["refs"][str(g)]["seconds"], 1) for g in gens},
        "chunks": {str(g): dres["refs"][str(g)]["chunks"] for g in gens},
        "answers_changed_by_ingests": changed, "max_score_shift_same_ids": shift,
        "single_client": {"before_generation": sorted(before["generations"]), "before_mismatches": bad_before,
                          "before_max_score_diff": gap_before, "after_generation": sorted(after["generations"]),
                          "after_mismatches": bad_after, "after_max_score_diff": gap_after},
        "rss_mb": {"before_run": pre[-1] if pre else float("nan"), "warm_at_s": warm_at, "after_warmup": warm,
                   "end": rss_end, "max": max((mb for _, mb in during), default=float("nan")),
                   "growth_after_warmup": rss_end - warm, "samples": len(during)},
        "cpu_s": {"server": server_cpu, "clients_process": own_cpu, "cores": os.cpu_count()},
        "hard_failures": hard[:10], "n_hard_failures": len(hard),
    }


def print_load(res: dict[str, Any]) -> None:
    print(f"\n== load: {res['clients']} clients ({res['mcp_clients']} MCP over HTTP, each its own session; "
          f"{res['json_clients']} JSON, each its own httpx.AsyncClient) for {res['wall_s']:.1f} s "
          f"(--seconds {res['seconds_asked']:g}); server --rate-limit 0 (all clients share one address) "
          f"--workers {res['workers']}; {res['pairs']} queries ({res['modes']['dense']} dense, "
          f"{res['modes']['hybrid']} hybrid), k={res['k']} ==")
    sc = res["single_client"]
    print(f"single-client references over JSON and MCP: generation {sc['before_generation']} before the run "
          f"({sc['before_mismatches']} different from the library's, largest score diff "
          f"{sc['before_max_score_diff']:.1e}); generation {sc['after_generation']} after it "
          f"({sc['after_mismatches']} different, {sc['after_max_score_diff']:.1e})")
    for c in res["commits"]:
        print(f"ingest {c['n']} ({c['file']}): started at {c['started_s']:.1f} s, done (committed) at {c['committed_s']:.1f} s "
              f"({c['ingest_s']:.1f} s)")
    print(f"generations served (answers): {res['generations_served']}; first seen at (s) "
          f"{res['generation_first_seen_s']}; chunks per generation {res['chunks']}")
    print(f"requests {res['requests']:,}, served {res['served']:,} ({res['rps']:.1f}/s); errors {res['errors']}; "
          f"answers different from their generation's reference {res['mismatches']} (largest score difference "
          f"{res['max_score_diff']:.1e}); answers of a generation without a reference {res['unverified']}")
    print(f"answers the ingests changed (first vs last generation's references): {res['answers_changed_by_ingests']}; "
          f"largest score shift with the same ids: "
          + ", ".join(f"{m} {v:.1e}" for m, v in res["max_score_shift_same_ids"].items()))
    print(f"{'latency under load':<20}{'n':>7}{'p50 ms':>10}{'p95 ms':>10}")
    for kind, row in res["latency"].items():
        print(f"{kind:<20}{row['n']:>7,}{row['p50_ms']:>10.0f}{row['p95_ms']:>10.0f}")
    r = res["rss_mb"]
    print(f"server RSS (MB): before the run {r['before_run']:.0f}, at {r['warm_at_s']:.0f} s {r['after_warmup']:.0f}, "
          f"end {r['end']:.0f}, max {r['max']:.0f}; growth after warm-up {r['growth_after_warmup']:+.0f} MB "
          f"({r['samples']} samples)")
    cpu = res["cpu_s"]
    print(f"CPU seconds during the run: server {cpu['server']:.0f}, this process's clients {cpu['clients_process']:.0f} "
          f"({cpu['cores']} cores)")
    for line in res["error_examples"] + res["mismatch_examples"] + res["hard_failures"]:
        print("   ", line)


# ---------------------------------------------------------------------------------------------- main
# ---------------------------------------------------------------------------------------------- floor
def busy_wait(ms: float) -> None:
    """The CPU kept busy for ``ms`` (a search's time without the search: no memory traffic, no other thread)."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def floor_server_main(port: int, kind: str, wait_ms: float, text_file: Path) -> None:
    """A server process for the floor section: ``ours`` (contextkit serve's app, its service answering
    ``text_file`` after ``wait_ms`` of busy work, in the worker thread) or ``sdk`` (the SDK's MCPServer, one
    tool returning it after the same wait, in the event loop: no thread hop)."""
    text = text_file.read_text(encoding="utf-8")
    if kind == "ours":
        from contextkit.serve._http import run_http
        from contextkit.serve._server import ServerState, ServeSettings

        class Answered:  # IndexService's face, every search answered with ``text``
            redacts = False
            data = json.loads(text)

            def answer(self, name: str, request: Any) -> tuple[dict[str, Any], str]:
                busy_wait(wait_ms)
                return self.data, text

            def one_call(self) -> Any:
                return contextlib.nullcontext()

            def info(self) -> dict[str, Any]:
                return {}

            def close(self) -> None:
                pass

        state = ServerState(ServeSettings(index=text_file, port=port, rate_limit=0), service=Answered())  # type: ignore[arg-type]
        run_http(state)
        return
    import uvicorn
    from mcp.server.mcpserver import MCPServer
    from mcp.server.transport_security import TransportSecuritySettings
    from mcp_types import CallToolResult, TextContent

    server = MCPServer("floor", log_level="WARNING")

    async def search(query: str, k: int = 10) -> CallToolResult:
        busy_wait(wait_ms)
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=False)

    # the SDK reads the annotations at run time, and this module's are strings: the types themselves
    search.__annotations__ = {"query": str, "k": int, "return": CallToolResult}
    server.tool()(search)

    app = server.streamable_http_app(stateless_http=True, json_response=True, transport_security=
                                     TransportSecuritySettings(enable_dns_rebinding_protection=False))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


async def floor_section(index_dir: Path, queries: list[str], k: int, calls: int, warmup: int, wait_ms: float,
                        workdir: Path) -> dict[str, Any]:
    from contextkit.serve import IndexService, SearchRequest

    service = IndexService(index_dir)
    text = service.answer("search", SearchRequest(query=queries[0], k=k))[1]
    service.close()
    text_file = workdir / "floor-answer.json"
    text_file.write_text(text, encoding="utf-8")
    out: dict[str, Any] = {"answer_bytes": len(text.encode("utf-8")), "wait_ms": wait_ms, "servers": {}}
    for kind in ("ours", "sdk"):
        for wait in (0.0, wait_ms):
            out["servers"][f"{kind}:{wait:g}"] = await _floor_server(kind, wait, text_file, queries, k, calls,
                                                                       warmup, workdir)
    return out


async def _floor_server(kind: str, wait_ms: float, text_file: Path, queries: list[str], k: int, calls: int,
                        warmup: int, workdir: Path) -> dict[str, Any]:
    """p50/p95 per path against one floor server (``kind``), every answer checked against the text sent."""
    import httpx
    from mcp import Client

    expected = json.loads(text_file.read_text(encoding="utf-8"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = workdir / f"floor-{kind}-{wait_ms:g}ms.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, __file__, "--floor-server", f"{port}:{kind}:{wait_ms}:{text_file}"],
                            env=env(), stdout=subprocess.DEVNULL, stderr=log)
    try:
        t0 = time.perf_counter()
        while True:
            if proc.poll() is not None or time.perf_counter() - t0 > 120:
                raise SystemExit(f"the floor server ({kind}) did not start: {log_path.read_text()[-1500:]}")
            with contextlib.suppress(httpx.TransportError):
                httpx.post(base + "/mcp", timeout=2)
                break
            time.sleep(0.3)
        ms: dict[str, list[float]] = {}
        async with Client(base + "/mcp") as mcp_http, httpx.AsyncClient(base_url=base, timeout=60) as http:
            raw = RawMcp(base)

            async def call(path: str, q: str) -> dict[str, Any]:
                if path == "mcp-http":
                    return await mcp_search(mcp_http, q, k, "hybrid")
                if path == "mcp-raw":
                    return raw.search(q, k)
                return await json_search(http, q, k, "hybrid")

            paths = ("mcp-http", "mcp-raw", "http-json") if kind == "ours" else ("mcp-http", "mcp-raw")
            for i in range(warmup + calls):
                for path in paths:
                    t = time.perf_counter()
                    got = await call(path, queries[i % len(queries)])
                    if i >= warmup:
                        ms.setdefault(path, []).append((time.perf_counter() - t) * 1e3)
                    if got != expected:
                        raise SystemExit(f"floor {kind} {path}: a different answer came back")
        return {p: {"p50_ms": pct(v, 50), "p95_ms": pct(v, 95), "n": len(v)} for p, v in ms.items()}
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def print_floor(res: dict[str, Any]) -> None:
    print(f"\n== floor: a search's answer ({res['answer_bytes']:,} bytes) sent back at once, or after "
          f"{res['wait_ms']:g} ms of busy work (no search) ==")
    names = {"ours": "contextkit serve's app", "sdk": "the SDK's MCPServer, one tool"}
    for key, rows in res["servers"].items():
        kind, wait = key.split(":")
        label = f"{names[kind]}, wait {float(wait):g} ms"
        cells = ", ".join(f"{p} p50 {r['p50_ms']:.2f} (+{r['p50_ms'] - float(wait):.2f})" for p, r in rows.items())
        print(f"{label:<42} {cells}")
    print("(+: over the wait. The SDK's server runs its tool in the event loop, ours in a worker thread.)")


def print_summary(res: dict[str, Any]) -> None:
    print("\n== summary ==")
    lat, load = res.get("latency"), res.get("load")
    if lat:
        for p in PATHS[1:]:
            r = lat["ratios"][p]
            print(f"search p50 {p:<12} / direct: {r['p50']:.2f}x (p95 {r['p95']:.2f}x, paired median "
                  f"{r['paired_median']:.2f}x)" + ("   (issue target: at most 1.3x)" if p.startswith("mcp") else ""))
        named = lat["latency"]["search_index"]["p50_ms"]
        for p in ("mcp-http", "mcp-stdio", "mcp-raw"):
            print(f"search p50 {p:<12} / search_index (the call the issue names, index opened per call): "
                  f"{lat['latency'][p]['p50_ms'] / named:.2f}x")
        print(f"latency answers: errors {lat['errors']}, mismatches {lat['mismatches']}")
    if res.get("floor"):
        wait = res["floor"]["wait_ms"]
        for key, rows in res["floor"]["servers"].items():
            if key.endswith(":0") or not wait:
                continue
            print(f"floor ({key.split(':')[0]}): a server that only works {wait:g} ms answers in "
                  + ", ".join(f"{p} {r['p50_ms'] / wait:.2f}x" for p, r in rows.items()) + " that time")
    if load:
        r = load["rss_mb"]
        print(f"load: {load['clients']} clients, {load['wall_s']:.0f} s, {load['served']:,} served "
              f"({load['rps']:.1f}/s), errors {load['errors']}, mismatches {load['mismatches']}, unverified "
              f"{load['unverified']}, commits {len(load['commits'])}, generations {list(load['generations_served'])}, "
              f"p50 {load['latency']['all']['p50_ms']:.0f} ms p95 {load['latency']['all']['p95_ms']:.0f} ms, "
              f"RSS growth after warm-up {r['growth_after_warmup']:+.0f} MB (max {r['max']:.0f} MB)")
    print("PASS" if not failed(res) else "FAIL: " + "; ".join(failed(res)))


def failed(res: dict[str, Any]) -> list[str]:
    out = []
    lat, load = res.get("latency"), res.get("load")
    if lat and (lat["errors"] or lat["mismatches"]):
        out.append(f"latency section: {lat['errors']} errors, {lat['mismatches']} mismatches")
    if load and (load["errors"] or load["mismatches"] or load["unverified"] or load["n_hard_failures"]):
        out.append(f"load section: {load['errors']} errors, {load['mismatches']} mismatches, {load['unverified']} "
                   f"unverified, {load['n_hard_failures']} other failures")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--section", default="all", help="latency, load or floor, several with commas, or all")
    ap.add_argument("--index", type=Path, help="an existing index (default: build one from the first --peps PEPs)")
    ap.add_argument("--peps", type=int, default=30, help="PEP files for the default index")
    ap.add_argument("--queries", type=int, default=100, help="seeded queries (latency rounds; the load's query set)")
    ap.add_argument("--seconds", type=float, default=60, help="length of the load run")
    ap.add_argument("--clients", type=int, default=100, help="concurrent clients in the load run")
    ap.add_argument("--workers", type=int, default=4, help="the load server's --workers")
    ap.add_argument("--warmup", type=int, default=20, help="calls per path before the latency clocks")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--atol", type=float, default=1e-4, help="largest score difference taken as equal")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--floor-calls", type=int, default=300, help="calls per path in the floor section")
    ap.add_argument("--floor-wait-ms", type=float, default=7.0,
                    help="the floor servers' busy wait (a search's time) when the latency section does not run")
    ap.add_argument("--driver", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--floor-server", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sections = {"latency", "load", "floor"} if args.section == "all" else set(args.section.split(","))
    if not sections <= {"latency", "load", "floor"}:
        ap.error(f"--section: latency, load, floor or all, not {args.section!r}")
    if args.driver is not None:
        driver_main(args.driver)
        return
    if args.floor_server is not None:
        port, kind, wait, text_file = args.floor_server.split(":", 3)
        floor_server_main(int(port), kind, float(wait), Path(text_file))
        return

    res: dict[str, Any] = {"cpus": os.cpu_count(), "uvicorn": uvicorn_parts()}
    print(f"server: uvicorn on {res['uvicorn']} (what `contextkit serve` finds installed)")
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ck-serve-bench-") as tmp:
        workdir = Path(tmp)
        corpus = None
        if args.index is None:
            corpus, index_dir = build_index(workdir, args.peps)
        else:
            index_dir = args.index
        queries = make_queries(index_dir, args.queries, args.seed)
        res["index"] = str(args.index or f"first {args.peps} PEPs (built)")
        if "latency" in sections:
            res["latency"] = asyncio.run(latency_section(index_dir, queries, args.k, args.warmup, args.atol, workdir))
            print_latency(res["latency"])
        if "floor" in sections:
            wait = res["latency"]["latency"]["direct"]["p50_ms"] if "latency" in res else args.floor_wait_ms
            res["floor"] = asyncio.run(floor_section(index_dir, queries, args.k, args.floor_calls, args.warmup,
                                                     round(wait, 1), workdir))
            print_floor(res["floor"])
        if "load" in sections:
            res["load"] = load_section(index_dir, corpus, queries, args, workdir)
            print_load(res["load"])
    res["total_s"] = time.perf_counter() - t_start
    print_summary(res)
    print(f"total {res['total_s']:.0f} s on {os.cpu_count()} CPUs")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2, default=str))
    sys.exit(1 if failed(res) else 0)


if __name__ == "__main__":
    main()

"""The MCP server through the SDK's own client, over stdio (a process it starts) and over streamable HTTP."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from contextkit.serve._requests import REQUESTS
from tests.serve._servers import server_env

QUESTION = "How does the assembler keep instructions when the budget is small?"


def stdio_params(index: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "contextkit", "serve", "--index", str(index), "--mcp", "stdio"],
                                 env=server_env())


async def exercise(client: Client, serve_index: Path, serve_corpus: Path) -> dict[str, Any]:
    """Every tool and the document resource, each compared with the library call it stands for."""
    from contextkit import ContextAssembler, search_index

    tools = (await client.list_tools()).tools
    assert sorted(t.name for t in tools) == sorted(REQUESTS)
    assert all(t.annotations is not None and t.annotations.read_only_hint for t in tools)

    result = await client.call_tool("search", {"query": QUESTION, "k": 5, "max_tokens": 50_000})
    assert not result.is_error
    data = json.loads(result.content[0].text)
    assert result.structured_content is None  # the result once, as the JSON text its limit was counted on
    expected = search_index(serve_index, QUESTION, k=5)
    assert [h["id"] for h in data["hits"]] == [h.chunk.id for h in expected]
    assert [h["score"] for h in data["hits"]] == pytest.approx([h.score for h in expected], abs=1e-6)

    result = await client.call_tool("assemble_context", {"question": QUESTION, "budget": 1000,
                                                         "history": [{"role": "user", "content": "Be brief."}]})
    with ContextAssembler(1000, index=serve_index) as assembler:
        prompt = assembler.assemble(QUESTION, history=[{"role": "user", "content": "Be brief."}]).prompt
    assert not result.is_error and json.loads(result.content[0].text)["prompt"] == prompt

    listed = json.loads((await client.call_tool("list_sources", {"glob": "*ray.md"})).content[0].text)
    (source,) = listed["sources"]
    document = json.loads((await client.call_tool("get_document", {"id": source["id"], "max_tokens": 100_000})
                           ).content[0].text)
    assert document["text"] == (serve_corpus / "ray.md").read_text(encoding="utf-8")

    resource = await client.read_resource(source["uri"])
    assert (serve_corpus / "ray.md").read_text(encoding="utf-8").startswith(resource.contents[0].text[:500])

    refused = await client.call_tool("get_document", {"id": "no/such/document"})
    assert refused.is_error and "no document 'no/such/document'" in refused.content[0].text
    bad = await client.call_tool("search", {"query": "x", "k": 100_000})
    assert bad.is_error and "Traceback" not in bad.content[0].text
    limited = await client.call_tool("search", {"query": QUESTION, "k": 10, "max_tokens": 400})
    from contextkit.core.tokenizers import get_tokenizer

    assert get_tokenizer("cl100k_base").count(limited.content[0].text) <= 400
    return {"tools": tools}


def test_over_stdio(serve_index: Path, serve_corpus: Path) -> None:
    async def main() -> None:
        async with Client(stdio_params(serve_index)) as client:
            await exercise(client, serve_index, serve_corpus)

    anyio.run(main)


def test_over_streamable_http(http_server: tuple[str, Path, Path], serve_index: Path, serve_corpus: Path) -> None:
    base, audit, _ = http_server

    async def main() -> None:
        async with Client(base + "/mcp") as client:
            await exercise(client, serve_index, serve_corpus)

    anyio.run(main)
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert any(line["transport"] == "mcp-http" and line["operation"] == "assemble_context" for line in lines)


def test_tool_schemas_are_the_request_models(serve_index: Path) -> None:
    """The MCP tools' signatures repeat the request models' fields: the two must not drift apart."""
    from contextkit.serve._mcp import build_mcp_server
    from contextkit.serve._server import ServerState, ServeSettings
    from contextkit.serve._service import IndexService

    state = ServerState(ServeSettings(index=serve_index), service=IndexService(serve_index, warm=False))
    try:
        tools = {t.name: t for t in anyio.run(build_mcp_server(state).list_tools)}
        for name, model in REQUESTS.items():
            schema = model.model_json_schema()
            tool = tools[name].input_schema
            assert set(tool["properties"]) == set(schema["properties"]), name
            assert sorted(tool.get("required", [])) == sorted(schema.get("required", [])), name
            for field, spec in schema["properties"].items():
                assert tool["properties"][field].get("default") == spec.get("default"), (name, field)
    finally:
        state.close()


def test_many_clients_at_once_get_the_single_client_answer(http_server: tuple[str, Path, Path]) -> None:
    base = http_server[0]
    queries = [QUESTION, "Ray cluster address", "redaction of phone numbers", "lost in the middle ordering"]

    async def one(query: str) -> list[str]:
        async with Client(base + "/mcp") as client:
            result = await client.call_tool("search", {"query": query, "k": 5, "mode": "dense"})
            assert not result.is_error
            return [h["id"] for h in json.loads(result.content[0].text)["hits"]]

    async def main() -> None:
        reference = {q: await one(q) for q in queries}
        answers: list[tuple[str, list[str]]] = []

        async def worker(i: int) -> None:
            q = queries[i % len(queries)]
            answers.append((q, await one(q)))

        async with anyio.create_task_group() as group:
            for i in range(24):
                group.start_soon(worker, i)
        assert len(answers) == 24 and all(ids == reference[q] for q, ids in answers)

    anyio.run(main)


def test_stdio_survives_lines_that_are_not_json_rpc(serve_index: Path) -> None:
    """Garbage on stdin (a client's bug, a stray print) gets an error, and the next real request its answer."""
    import subprocess

    proc = subprocess.Popen([sys.executable, "-m", "contextkit", "serve", "--index", str(serve_index), "--mcp",
                             "stdio"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=server_env())
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for line in (b"not json at all", b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call"}', b"[" * 50_000,
                     b'{"jsonrpc": "2.0", "id": 8, "method": "no/such/method", "params": {}}'):
            proc.stdin.write(line + b"\n")
        init = {"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
        proc.stdin.write(json.dumps(init).encode() + b"\n")
        proc.stdin.flush()
        answers = {}
        while 9 not in answers:
            line = proc.stdout.readline()
            assert line, proc.stderr.read().decode(errors="replace")[-2000:] if proc.poll() is not None else "eof"
            message = json.loads(line)
            answers[message.get("id")] = message
        assert answers[9]["result"]["serverInfo"]["name"] == "contextkit"
        assert "error" in answers.get(8, {"error": 1})
    finally:
        proc.kill()
        proc.wait()

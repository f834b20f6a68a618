"""The HTTP JSON endpoint, through a real HTTP client against `contextkit serve` in another process."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest

from tests.serve._servers import running_server

QUESTION = "How does the assembler keep instructions when the budget is small?"
JSON = {"content-type": "application/json"}


def post(base: str, name: str, body: object, **kwargs: object) -> httpx.Response:
    return httpx.post(f"{base}/v1/{name}", json=body, timeout=60, **kwargs)  # type: ignore[arg-type]


def test_search_and_assemble_answer_as_the_library(http_server: tuple[str, Path, Path], serve_index: Path) -> None:
    from contextkit import ContextAssembler, search_index

    base = http_server[0]
    expected = search_index(serve_index, QUESTION, k=6)
    got = post(base, "search", {"query": QUESTION, "k": 6, "max_tokens": 50_000})
    assert got.status_code == 200 and got.headers["content-type"] == "application/json"
    hits = got.json()["hits"]
    assert [h["id"] for h in hits] == [h.chunk.id for h in expected]
    assert [h["score"] for h in hits] == pytest.approx([h.score for h in expected], abs=1e-6)
    with ContextAssembler(1500, index=serve_index) as assembler:
        prompt = assembler.assemble(QUESTION, instructions="Cite the ids.").prompt
    got = post(base, "assemble_context", {"question": QUESTION, "budget": 1500, "instructions": "Cite the ids."})
    assert got.status_code == 200 and got.json()["prompt"] == prompt


def test_info_health_and_openapi(http_server: tuple[str, Path, Path]) -> None:
    base = http_server[0]
    assert httpx.get(base + "/v1/health").json() == {"status": "ok"}
    info = httpx.get(base + "/v1/info").json()
    assert info["chunks"] > 0 and info["tokenizer"] == "cl100k_base" and info["redacts"] is False
    spec = httpx.get(base + "/openapi.json").json()
    assert spec["openapi"].startswith("3.1")
    assert {"/v1/search", "/v1/assemble_context", "/v1/get_document", "/v1/list_sources"} <= set(spec["paths"])
    search = spec["components"]["schemas"]["SearchRequest"]
    assert search["required"] == ["query"] and search["additionalProperties"] is False
    for path in spec["paths"].values():  # every $ref points at a schema the document holds
        for ref in _refs(path):
            assert ref.rsplit("/", 1)[1] in spec["components"]["schemas"]


def _refs(node: object) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "$ref"] + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


#: (what, method, path, headers, body bytes, expected status, words in the error). The closing note lists these.
HOSTILE = [
    ("malformed JSON", "POST", "/v1/search", JSON, b'{"query": "x", ', 400, "not valid JSON"),
    ("not JSON at all", "POST", "/v1/search", JSON, b"query=x&k=3", 400, "not valid JSON"),
    ("no content type (a form post from a web page)", "POST", "/v1/search", {"content-type": "text/plain"},
     b'{"query": "x"}', 415, "application/json"),
    ("a JSON array, not an object", "POST", "/v1/search", JSON, b"[1, 2, 3]", 400, "must be a JSON object"),
    ("an unknown field", "POST", "/v1/search", JSON, b'{"query": "x", "top_k": 3}', 400, "top_k: Extra inputs"),
    ("a field of the wrong type", "POST", "/v1/search", JSON, b'{"query": 5}', 400, "query: Input should be"),
    ("k past the wire limit", "POST", "/v1/search", JSON, b'{"query": "x", "k": 1000000000}', 400, "k: Input"),
    ("k as NaN", "POST", "/v1/search", JSON, b'{"query": "x", "k": NaN}', 400, "k:"),
    ("a blank query", "POST", "/v1/search", JSON, b'{"query": ""}', 400, "at least 1 character"),
    ("a query of 30,000 characters", "POST", "/v1/search", JSON, json.dumps({"query": "word " * 6000}).encode(),
     400, "at most 20000"),
    ("JSON nested 100,000 deep", "POST", "/v1/search", JSON, b"[" * 100_000 + b"]" * 100_000, 400, "not valid JSON"),
    ("bytes that are not UTF-8", "POST", "/v1/search", JSON, b'{"query": "\xff\xfe"}', 400, "not valid JSON"),
    ("an unknown filter field", "POST", "/v1/search", JSON,
     b'{"query": "x", "filters": {"metadata": {"colour": "red"}}}', 400, "colour"),
    ("an unknown mode", "POST", "/v1/search", JSON, b'{"query": "x", "mode": "regex"}', 400, "mode:"),
    ("max_tokens past the server's most", "POST", "/v1/search", JSON, b'{"query": "x", "max_tokens": 99999999}',
     413, "max-result-tokens"),
    ("a budget past max_tokens", "POST", "/v1/assemble_context", JSON,
     b'{"question": "x", "budget": 500000}', 413, "max_tokens"),
    ("an unknown model profile", "POST", "/v1/assemble_context", JSON, b'{"question": "x", "model": "gpt-99"}',
     400, "gpt-99"),
    ("a history message of an unknown role", "POST", "/v1/assemble_context", JSON,
     b'{"question": "x", "history": [{"role": "root", "content": "obey"}]}', 400, "history.0.role"),
    ("a path for a document id", "POST", "/v1/get_document", JSON, b'{"id": "../../../../etc/passwd"}', 404,
     "no document"),
    ("a negative range", "POST", "/v1/get_document", JSON, b'{"id": "x", "start": -5}', 400, "start:"),
    ("a page past the last", "POST", "/v1/list_sources", JSON, b'{"limit": 100000}', 400, "limit:"),
    ("a body over the size limit", "POST", "/v1/search", JSON,
     json.dumps({"query": "x", "pad": "y" * 2_000_000}).encode(), 413, "over 1,048,576 bytes"),
    ("another host name (DNS rebinding)", "POST", "/v1/search", {**JSON, "host": "evil.example"},
     b'{"query": "x"}', 403, "loopback name"),
    ("a web page of another origin", "POST", "/v1/search", {**JSON, "origin": "https://evil.example"},
     b'{"query": "x"}', 403, "another origin"),
    ("an unknown route", "POST", "/v1/ingest", JSON, b'{"paths": ["/etc"]}', 404, ""),
    ("GET on a POST route", "GET", "/v1/search", {}, b"", 405, ""),
    ("JSON-RPC that is not MCP", "POST", "/mcp", {**JSON, "accept": "application/json, text/event-stream"},
     b'{"jsonrpc": "2.0", "id": 1, "method": "rm -rf", "params": {}}', None, ""),
]


@pytest.mark.parametrize("what, method, path, headers, body, status, words", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_requests_get_a_clear_error_and_the_server_keeps_serving(
        http_server: tuple[str, Path, Path], what: str, method: str, path: str, headers: dict[str, str], body: bytes,
        status: int | None, words: str) -> None:
    base, _, log = http_server
    response = httpx.request(method, base + path, headers=headers, content=body or None, timeout=60)
    if status is None:  # MCP answers in JSON-RPC: an error object, never a traceback
        assert response.status_code < 500
        assert "error" in response.text and "Traceback" not in response.text
    else:
        assert response.status_code == status, response.text[:300]
    if words:
        assert words in response.json()["error"]["message"]
    assert "Traceback" not in response.text and "File \"" not in response.text
    assert post(base, "search", {"query": QUESTION, "k": 1}).status_code == 200  # still serving
    assert "Traceback" not in log.read_text(errors="replace")


def test_a_body_without_a_length_is_cut_off_at_the_limit(http_server: tuple[str, Path, Path]) -> None:
    base = http_server[0]

    def chunks():  # chunked transfer: no Content-Length to refuse it by
        yield b'{"query": "x", "pad": "'
        for _ in range(300):
            yield b"y" * 10_000
        yield b'"}'

    response = httpx.post(base + "/v1/search", headers=JSON, content=chunks(), timeout=60)
    assert response.status_code == 413 and "over 1,048,576 bytes" in response.json()["error"]["message"]
    assert post(base, "search", {"query": QUESTION, "k": 1}).status_code == 200


def test_a_client_that_disconnects_mid_call_costs_nothing(http_server: tuple[str, Path, Path]) -> None:
    base, _, log = http_server
    url = urlparse(base)
    body = json.dumps({"question": QUESTION, "budget": 4000, "max_tokens": 20_000}).encode()
    request = (f"POST /v1/assemble_context HTTP/1.1\r\nHost: 127.0.0.1:{url.port}\r\nContent-Type: application/json"
               f"\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    for _ in range(20):
        with socket.create_connection((url.hostname, url.port)) as sock:
            sock.sendall(request)  # and gone before the answer
    rpc = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "search", "arguments": {"query": QUESTION}}}).encode()
    mcp = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{url.port}\r\nContent-Type: application/json\r\n"
           f"Accept: application/json, text/event-stream\r\nContent-Length: {len(rpc)}\r\n\r\n").encode() + rpc
    for whole in (request, mcp):
        for _ in range(5):
            with socket.create_connection((url.hostname, url.port)) as sock:
                sock.sendall(whole[: len(whole) - 10])  # a body that never ends
        with socket.create_connection((url.hostname, url.port)) as sock:
            sock.sendall(whole)
    time.sleep(1)
    assert post(base, "search", {"query": QUESTION, "k": 1}).status_code == 200
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[-3000:]


def test_every_call_is_in_the_audit_log_without_the_documents_text(http_server: tuple[str, Path, Path]) -> None:
    base, audit, _ = http_server
    marker = "audit marker question about budgets"
    post(base, "search", {"query": marker, "k": 2})
    post(base, "search", {"query": marker, "kk": 2})
    post(base, "search", {"query": marker}, headers={"host": "evil.example"})  # the guard refuses it (403)
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    mine = [line for line in lines if line["arguments"].get("query") == marker]
    assert [line["outcome"] for line in mine] == ["ok", "refused"]
    ok, refused = mine
    assert ok["operation"] == "search" and ok["transport"] == "http" and ok["result_tokens"] > 0
    assert ok["client"].startswith("127.0.0.1:") and ok["generation"] >= 1
    assert "kk" in refused["error"] and refused["status"] == 400
    assert all("text" not in line and "hits" not in line for line in lines)
    assert any(line["operation"] == "POST /v1/search" and line["status"] == 403 for line in lines)  # the guard's



@pytest.mark.parametrize("name, body", [
    ("search", {"query": "audit tokens: the 2 budgets of 1,500 and 150 tokens", "k": 8}),
    ("search", {"query": "audit tokens: the 2 budgets of 1,500 and 150 tokens", "k": 8, "max_tokens": 400}),
    ("assemble_context", {"question": "audit tokens: how are 3 instructions kept at 150 tokens?", "budget": 300}),
])
def test_the_audit_line_counts_the_tokens_the_client_received(http_server: tuple[str, Path, Path], name: str,
                                                              body: dict[str, object]) -> None:
    from contextkit.core.tokenizers import get_tokenizer

    base, audit, _ = http_server
    response = post(base, name, body)
    assert response.status_code == 200, response.text[:300]
    tokenizer = get_tokenizer(httpx.get(f"{base}/v1/info", timeout=60).json()["tokenizer"])
    field = "query" if name == "search" else "question"
    line = [json.loads(line) for line in audit.read_text().splitlines()
            if json.loads(line)["arguments"].get(field) == body[field]][-1]
    assert line["outcome"] == "ok" and line["result_tokens"] == tokenizer.count(response.text)
    if "max_tokens" in body:  # cut to the limit (counted while cutting): the figure is still what was sent
        assert response.json()["omitted"] > 0 and line["result_tokens"] <= 400

@pytest.fixture(scope="module")
def guarded(serve_index: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("guarded")
    token = "s3cret-token-of-32-characters-xx"
    (folder / "token").write_text(token + "\n")
    with running_server(serve_index, "--token-file", str(folder / "token"), "--rate-limit", "2", "--rate-burst", "5",
                        "--max-request-bytes", "2000", log=folder / "stderr.txt") as base:
        yield base, token, folder / "stderr.txt"


def test_a_token_is_required_when_the_server_has_one(guarded: tuple[str, str, Path]) -> None:
    base, token, log = guarded
    assert httpx.get(base + "/v1/health").status_code == 200  # says nothing but "ok"
    missing = post(base, "list_sources", {})
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert post(base, "list_sources", {}, headers={"authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(base + "/v1/info").status_code == 401
    assert post(base, "list_sources", {}, headers={"authorization": f"Bearer {token}"}).status_code == 200
    assert token not in log.read_text()


def test_rate_and_size_limits(guarded: tuple[str, str, Path]) -> None:
    base, token, _ = guarded
    auth = {"authorization": f"Bearer {token}"}
    big = post(base, "search", {"query": "x" * 3000}, headers=auth)
    assert big.status_code == 413
    time.sleep(3)  # the bucket refills
    responses = [post(base, "list_sources", {"limit": 1}, headers=auth) for _ in range(12)]
    statuses = [r.status_code for r in responses]
    assert statuses[:4] == [200] * 4 and 429 in statuses, statuses
    limited = next(r for r in responses if r.status_code == 429)
    assert int(limited.headers["retry-after"]) >= 1 and "too many requests" in limited.json()["error"]["message"]
    time.sleep(2)
    assert post(base, "list_sources", {}, headers=auth).status_code == 200


def test_a_commit_from_another_process_is_served_without_a_restart(serve_corpus: Path, tmp_path: Path,
                                                                    embedder) -> None:
    import shutil
    import subprocess
    import sys

    from contextkit import ingest
    from tests.serve._servers import server_env

    folder, index = tmp_path / "docs", tmp_path / "live.ck-index"
    shutil.copytree(serve_corpus, folder)
    ingest([folder], index, embedder=embedder)
    query = {"query": "the zebra crossing protocol of Maidenhead", "k": 2}
    with running_server(index) as base:
        before = post(base, "search", query).json()
        (folder / "zebra.md").write_text("# Zebra\n\nThe zebra crossing protocol of Maidenhead was adopted in 1951 "
                                         "by the borough council.\n", encoding="utf-8")
        subprocess.run([sys.executable, "-m", "contextkit", "ingest", str(folder), "--index", str(index), "-q"],
                       env=server_env(), check=True, capture_output=True)
        after = post(base, "search", query).json()
    assert "Maidenhead" not in before["hits"][0]["text"] and "Maidenhead" in after["hits"][0]["text"]
    assert after["generation"] == before["generation"] + 1


def test_json_says_where_it_serves(serve_index: Path, tmp_path: Path) -> None:
    log = tmp_path / "stderr.txt"
    with running_server(serve_index, "--json", log=log) as base:
        line = json.loads(log.read_text().splitlines()[0])
    assert line["mcp"] == base + "/mcp" and line["json"] == base + "/v1" and line["chunks"] > 0
    assert line["token_required"] is False and line["transport"] == "http"

"""IndexService: the operations every transport serves, against the library calls they stand for."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from contextkit.core.errors import DocumentNotFoundError, InvalidArgumentError, LimitExceededError
from contextkit.serve import AssembleRequest, GetDocumentRequest, IndexService, ListSourcesRequest, SearchRequest
from contextkit.serve._fit import result_json
from contextkit.serve._requests import parse_request

QUESTION = "How does the assembler keep instructions when the budget is small?"


@pytest.fixture(scope="module")
def service(serve_index: Path):
    svc = IndexService(serve_index)
    yield svc
    svc.close()


@pytest.mark.parametrize("mode", ["hybrid", "dense", "bm25"])
def test_search_gives_the_hits_of_search_index(service: IndexService, serve_index: Path, mode: str) -> None:
    from contextkit import search_index

    expected = search_index(serve_index, QUESTION, k=8, mode=mode)
    got = service.search(SearchRequest(query=QUESTION, k=8, mode=mode, max_tokens=100_000))
    assert [h["id"] for h in got["hits"]] == [h.chunk.id for h in expected]
    assert [h["score"] for h in got["hits"]] == pytest.approx([h.score for h in expected], abs=1e-6)
    assert [h["text"] for h in got["hits"]] == [h.chunk.text for h in expected]
    assert got["omitted"] == 0


def test_search_with_filters_keeps_to_them(service: IndexService) -> None:
    got = service.search(parse_request("search", {"query": "Ray cluster workers", "k": 5,
                                                  "filters": {"source_glob": "*redaction.md"}}))
    assert got["hits"] and all(h["source"].endswith("redaction.md") for h in got["hits"])


@pytest.mark.parametrize("limit", [60, 150, 400, 1500])
def test_every_result_fits_the_callers_token_limit(service: IndexService, limit: int) -> None:
    count = service.count
    search = service.search(SearchRequest(query=QUESTION, k=20, max_tokens=limit))
    assert count(result_json(search)) <= limit
    if limit >= 150:  # 60 tokens do not hold one hit's ids and paths: none comes back, and the count says so
        assert search["hits"], "a small limit returns the best hit, cut"
    assert search["omitted"] == 20 - len(search["hits"])
    doc_id = service.list_sources(ListSourcesRequest(glob="*assembly.md"))["sources"][0]["id"]
    if limit < 100:  # the envelope (id and source path) alone is past the limit: refused, with the reason
        with pytest.raises(LimitExceededError, match="too small"):
            service.get_document(GetDocumentRequest(id=doc_id, max_tokens=limit))
    else:
        doc = service.get_document(GetDocumentRequest(id=doc_id, max_tokens=limit))
        assert count(result_json(doc)) <= limit and doc["truncated"] and doc["text"]
    sources = service.list_sources(ListSourcesRequest(max_tokens=max(limit, 200)))
    assert count(result_json(sources)) <= max(limit, 200)


def test_a_cut_hit_is_the_start_of_the_real_text_and_says_so(service: IndexService) -> None:
    whole = service.search(SearchRequest(query=QUESTION, k=1, max_tokens=100_000))
    full = whole["hits"][0]
    envelope = service.count(result_json({**whole, "hits": [{**full, "text": "", "truncated": True}]}))
    cut = service.search(SearchRequest(query=QUESTION, k=1, max_tokens=envelope + 20))["hits"][0]
    assert cut["truncated"] is True and full["text"].startswith(cut["text"]) and len(cut["text"]) < len(full["text"])


def test_get_document_rebuilds_the_file_and_pages_through_it(service: IndexService, serve_corpus: Path) -> None:
    sources = service.list_sources(ListSourcesRequest())
    by_name = {Path(s["source"]).name: s for s in sources["sources"]}
    page = by_name["ray.md"]
    original = (serve_corpus / "ray.md").read_text(encoding="utf-8")
    whole = service.get_document(GetDocumentRequest(id=page["id"], max_tokens=100_000))
    assert whole["text"] == original and whole["truncated"] is False and whole["next_start"] is None
    pieces, start = [], 0
    while start is not None:
        part = service.get_document(GetDocumentRequest(id=page["id"], start=start, max_tokens=300))
        assert service.count(result_json(part)) <= 300
        pieces.append(part["text"])
        start = part["next_start"]
    assert "".join(pieces) == original
    ranged = service.get_document(GetDocumentRequest(id=page["id"], start=100, end=400))
    assert ranged["text"] == original[100:400]


def test_list_sources_pages_and_globs(service: IndexService) -> None:
    first = service.list_sources(ListSourcesRequest(limit=2))
    assert first["total"] == 3 and len(first["sources"]) == 2 and first["next_offset"] == 2
    rest = service.list_sources(ListSourcesRequest(offset=2, limit=2))
    assert len(rest["sources"]) == 1 and rest["next_offset"] is None
    only = service.list_sources(ListSourcesRequest(glob="*ray.md"))
    assert [Path(s["source"]).name for s in only["sources"]] == ["ray.md"]


def test_assemble_context_is_the_assemblers_prompt(service: IndexService, serve_index: Path) -> None:
    from contextkit import ContextAssembler

    history = [{"role": "user", "content": "I run contextkit on a laptop with 8 GB."},
               {"role": "assistant", "content": "Then keep budgets modest."}]
    with ContextAssembler(1200, index=serve_index) as assembler:
        expected = assembler.assemble(QUESTION, instructions="Answer from the evidence.", history=history)
    got = service.assemble_context(parse_request("assemble_context", {
        "question": QUESTION, "budget": 1200, "instructions": "Answer from the evidence.", "history": history}))
    assert got["prompt"] == expected.prompt
    assert got["report"]["tokens"] == expected.report.tokens <= 1200
    chat = service.assemble_context(AssembleRequest(question=QUESTION, budget=1200, chat="anthropic"))
    assert set(chat["messages"]) == {"system", "messages"} and "prompt" not in chat


def test_assemble_context_by_model_profile_and_limits(service: IndexService) -> None:
    with pytest.raises(LimitExceededError, match="max_tokens"):
        service.assemble_context(AssembleRequest(question=QUESTION, model="gpt-4o", max_tokens=2000))
    got = service.assemble_context(AssembleRequest(question=QUESTION, budget=900, report="full"))
    assert got["report"]["budget"] == 900 and "items" in got["report"]


def test_unknown_document_and_bad_requests_are_clear_errors(service: IndexService) -> None:
    with pytest.raises(DocumentNotFoundError, match="no document 'nope'"):
        service.get_document(GetDocumentRequest(id="nope"))
    for name, body, words in [
        ("search", {"query": "x", "kk": 1}, "kk: Extra inputs are not permitted"),
        ("search", {"query": ""}, "query: String should have at least 1 character"),
        ("search", {"query": "x", "k": 10_000}, "k: Input should be less than or equal to 200"),
        ("search", {"query": "x", "mode": "fuzzy"}, "mode: Input should be"),
        ("search", ["not", "an", "object"], "must be a JSON object"),
        ("assemble_context", {"question": "x", "history": [{"role": "robot", "content": "hi"}]}, "history.0.role"),
        ("get_document", {"id": "a", "start": -1}, "start: Input should be greater than or equal to 0"),
    ]:
        with pytest.raises(InvalidArgumentError, match=words.replace(".", r"\.")):
            parse_request(name, body)
    with pytest.raises(LimitExceededError, match="max-result-tokens"):
        service.search(SearchRequest(query="x", max_tokens=10_000_000))
    with pytest.raises(Exception, match="unknown field 'colour'|colour"):
        service.search(parse_request("search", {"query": "x", "filters": {"metadata": {"colour": "red"}}}))


def test_a_new_commit_is_served_without_a_restart(serve_corpus: Path, tmp_path: Path, embedder) -> None:
    from contextkit import ingest

    folder, index = tmp_path / "docs", tmp_path / "grow.ck-index"
    shutil.copytree(serve_corpus, folder)
    ingest([folder], index, embedder=embedder)
    svc = IndexService(index, warm=False)
    try:
        before = svc.info()
        query = "the zebra crossing protocol of Maidenhead"
        assert all("Maidenhead" not in h["text"] for h in svc.search(SearchRequest(query=query, k=3))["hits"])
        (folder / "zebra.md").write_text("# Zebra\n\nThe zebra crossing protocol of Maidenhead was adopted in "
                                         "1951 by the borough council.\n", encoding="utf-8")
        ingest([folder], index, embedder=embedder)
        hits = svc.search(SearchRequest(query=query, k=3))["hits"]
        assert "Maidenhead" in hits[0]["text"]
        assert svc.info()["generation"] > before["generation"]
        assert len(svc.list_sources(ListSourcesRequest())["sources"]) == 4
    finally:
        svc.close()


def test_the_service_never_writes_the_index(serve_index: Path) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in serve_index.iterdir()}
    svc = IndexService(serve_index, warm=False)
    svc.search(SearchRequest(query="budget", k=2))
    svc.close()
    assert {p.name: p.stat().st_mtime_ns for p in serve_index.iterdir()} == before


def test_results_are_plain_json(service: IndexService) -> None:
    data = service.search(SearchRequest(query=QUESTION, k=2))
    assert json.loads(result_json(data)) == data


@pytest.mark.parametrize("max_tokens", [None, 200, 60])
def test_a_call_sends_the_json_its_token_limit_was_counted_on(service: IndexService, max_tokens: int | None) -> None:
    """A search is serialised once (the text fitted to the limit is the text sent); every operation's text is
    its result's JSON, the same result as the method's, and within the limit."""
    from contextkit.serve._calls import run_call

    doc_id = service.list_sources(ListSourcesRequest(glob="*ray.md"))["sources"][0]["id"]
    requests = {"search": {"query": QUESTION, "k": 5, "max_tokens": max_tokens},
                "list_sources": {"max_tokens": max_tokens}, "get_document": {"id": doc_id, "max_tokens": max_tokens and max(max_tokens, 200)}}
    for name, arguments in requests.items():
        request = parse_request(name, arguments)
        data, text = service.answer(name, request)
        assert text == result_json(data) and data == getattr(service, name)(request)
        assert service.count(text) <= (request.max_tokens or service.default_result_tokens)
        outcome = run_call(service, name, arguments, transport="test", client="test", audit=None)
        assert outcome.ok and outcome.text == text and outcome.data == data
    if max_tokens == 60:  # some limit cuts the first hit to fit: the text sent is still the one counted
        cut = [text for limit in range(60, 1_000, 20)
               for data, text in [service.answer("search", SearchRequest(query=QUESTION, k=5, max_tokens=limit))]
               if data["hits"] and data["hits"][0].get("truncated")]
        assert cut and all(service.count(text) <= 1_000 and json.loads(text)["omitted"] == 4 for text in cut)


@pytest.mark.parametrize("max_tokens", [None, 600])
def test_an_audited_call_counts_its_result_once(service: IndexService, tmp_path: Path, max_tokens: int | None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit check and the audit line count the same text: it is tokenized once (a search's ten hits cost
    about 1 ms to count), and the audit's figure is the count of what was sent."""
    from contextkit.serve._audit import AuditLog
    from contextkit.serve._calls import run_call

    counted: list[str] = []
    real_count = service.tokenizer.count

    def count(text: str) -> int:
        counted.append(text)
        return real_count(text)

    monkeypatch.setattr(service.tokenizer, "count", count)
    monkeypatch.setattr(service, "bytes_bound", False)  # every result counted, as one past the bytes bound is
    audit = AuditLog(tmp_path / "audit.jsonl")
    requests = {"search": {"query": QUESTION, "k": 8, "max_tokens": max_tokens},
                "assemble_context": {"question": QUESTION, "budget": 250, "max_tokens": max_tokens and 2_000}}
    for name, arguments in requests.items():
        counted.clear()
        outcome = run_call(service, name, arguments, transport="test", client="test", audit=audit)
        assert outcome.ok, outcome.text
        assert counted.count(outcome.text) == 1, f"{name}: the text sent was tokenized {counted.count(outcome.text)} times"
        line = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[-1])
        assert line["operation"] == name and line["result_tokens"] == real_count(outcome.text)
        if name == "search" and max_tokens is not None:  # the limit cut the hits: still counted once
            assert json.loads(outcome.text)["omitted"] > 0
    counted.clear()  # and nothing is kept from one call to the next: the same call again counts its result again
    again = run_call(service, "search", requests["search"], transport="test", client="test", audit=audit)
    assert counted.count(again.text) == 1
    audit.close()


def test_a_redacting_index_masks_the_audit_log_and_the_prompt(tmp_path: Path, embedder) -> None:
    from contextkit import ingest
    from contextkit.serve import ServerState, ServeSettings
    from contextkit.serve._calls import run_call

    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "contacts.md").write_text("# Support\n\nWrite to the support desk; Dana answers within two days.\n",
                                        encoding="utf-8")
    index = tmp_path / "private.ck-index"
    ingest([folder], index, embedder=embedder, redact=True)
    audit = tmp_path / "audit.jsonl"
    state = ServerState(ServeSettings(index=index, audit_log=audit), service=IndexService(index, warm=False))
    try:
        question = "Is dana.smith@example.com or +1 415 555 0134 on file for the support desk?"
        out = run_call(state.service, "assemble_context", {"question": question, "budget": 400},
                       transport="http", client="127.0.0.1:5", audit=state.audit)
        assert out.ok and "dana.smith@example.com" not in out.text and "555 0134" not in out.text
        refused = run_call(state.service, "search", {"query": "mail dana.smith@example.com", "k": 0},
                           transport="http", client="127.0.0.1:5", audit=state.audit)
        assert not refused.ok
    finally:
        state.close()
    log = audit.read_text()
    assert "dana.smith@example.com" not in log and "555 0134" not in log and "<EMAIL_1>" in log
    assert [json.loads(line)["outcome"] for line in log.splitlines()] == ["ok", "refused"]

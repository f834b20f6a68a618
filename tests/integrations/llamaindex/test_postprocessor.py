"""ContextBudgetPostprocessor on real LlamaIndex nodes cut from a real PEP, and inside a real query engine.

Nodes come from LlamaIndex's own SentenceSplitter with overlap, so their offsets
and their overlaps are what a user's index holds. The query-engine test builds a
VectorStoreIndex with contextkit's embedder and asserts on the prompt a recording
LLM (a real ``CustomLLM``) received.
"""

from __future__ import annotations

import asyncio
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from llama_index.core import Document, VectorStoreIndex  # noqa: E402
from llama_index.core.base.embeddings.base import BaseEmbedding  # noqa: E402
from llama_index.core.bridge.pydantic import Field, PrivateAttr, ValidationError  # noqa: E402
from llama_index.core.llms import CompletionResponse, CompletionResponseGen, CustomLLM, LLMMetadata  # noqa: E402
from llama_index.core.llms.callbacks import llm_completion_callback  # noqa: E402
from llama_index.core.node_parser import SentenceSplitter  # noqa: E402
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode  # noqa: E402

from contextkit.assembly.passages import sentence_set  # noqa: E402
from contextkit.integrations.llamaindex.postprocessor import (  # noqa: E402
    MERGED_KEY,
    TRUNCATED_KEY,
    ContextBudgetPostprocessor,
)

PEP = "pep-0257.rst"  # docstring conventions: ~10k characters, quick to embed
OTHER_PEP = "pep-0020.rst"
MIRROR = "pep-0257.txt"  # the same PEP filed again (a name of the same token length: the same chunks)


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def pep_text(shared_data: Path) -> str:
    return (shared_data / "python_peps" / "peps" / PEP).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def other_text(shared_data: Path) -> str:
    return (shared_data / "python_peps" / "peps" / OTHER_PEP).read_text(encoding="utf-8")


def _split(text: str, doc_id: str, file_name: str, size: int = 200, overlap: int = 60) -> list[TextNode]:
    doc = Document(text=text, id_=doc_id, metadata={"file_name": file_name})
    return SentenceSplitter(chunk_size=size, chunk_overlap=overlap).get_nodes_from_documents([doc])


@pytest.fixture(scope="module")
def nodes(pep_text: str) -> list[TextNode]:
    out = _split(pep_text, "pep-0257", PEP)
    assert all(pep_text[n.start_char_idx:n.end_char_idx] == n.text for n in out)
    return out


@pytest.fixture(scope="module")
def copy_nodes(pep_text: str) -> list[TextNode]:
    """The same PEP filed again under another name: every node repeats one of ``nodes``."""
    copies = _split(pep_text, "pep-0257-mirror", MIRROR)
    assert [n.text for n in copies] == [n.text for n in _split(pep_text, "pep-0257", PEP)]
    return copies


@pytest.fixture(scope="module")
def pool(nodes, copy_nodes, other_text) -> list[TextNode]:
    """Nodes of three documents: a PEP, some of its mirrored copy, and a short PEP in small pieces."""
    return nodes + copy_nodes[::3] + _split(other_text, "pep-0020", OTHER_PEP, size=80, overlap=30)


def _overlapping_run(nodes: list[TextNode], length: int = 3) -> list[TextNode]:
    """``length`` consecutive nodes, each overlapping the next (chunk overlap)."""
    for i in range(len(nodes) - length + 1):
        run = nodes[i:i + length]
        if all(b.start_char_idx < a.end_char_idx for a, b in zip(run, run[1:])):
            return run
    raise AssertionError("no overlapping run: the splitter settings changed?")


def _separate(nodes: list[TextNode], k: int) -> list[TextNode]:
    """``k`` nodes whose ranges neither overlap nor touch."""
    picked: list[TextNode] = []
    for n in nodes:
        if not picked or n.start_char_idx > picked[-1].end_char_idx:
            picked.append(n)
        if len(picked) == k:
            return picked
    raise AssertionError("not enough separate nodes")


def _llm_tokens(cl100k, out: list[NodeWithScore]) -> list[int]:
    return [cl100k.count(n.node.get_content(metadata_mode=MetadataMode.LLM)) for n in out]


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


# ------------------------------------------------------------------ merging
class TestMerge:
    def test_overlapping_nodes_become_the_document_slice(self, nodes, pep_text, cl100k):
        run = _overlapping_run(nodes)
        scores = [0.4, 0.9, 0.6]
        given_nodes = [NodeWithScore(node=n, score=s) for n, s in zip(reversed(run), reversed(scores))]
        before = [(n.text, dict(n.metadata)) for n in run]
        pp = ContextBudgetPostprocessor(token_budget=10_000)
        out = pp.postprocess_nodes(given_nodes)

        assert len(out) == 1
        merged = out[0]
        start, end = run[0].start_char_idx, run[-1].end_char_idx
        assert merged.node.text == pep_text[start:end]
        assert (merged.node.start_char_idx, merged.node.end_char_idx) == (start, end)
        assert len(merged.node.text) < sum(len(n.text) for n in run)  # the overlaps are no longer repeated
        assert merged.score == 0.9
        into = merged.node.node_id
        assert into in (run[0].node_id, run[1].node_id)  # the first part's id, or the best-scored part's
        assert merged.node.metadata[MERGED_KEY] == [n.node_id for n in run]
        assert merged.node.ref_doc_id == "pep-0257"
        content = merged.node.get_content(metadata_mode=MetadataMode.LLM)
        assert MERGED_KEY not in content and PEP in content  # bookkeeping hidden, real metadata kept
        assert MERGED_KEY not in merged.node.get_content(metadata_mode=MetadataMode.EMBED)
        assert [(n.text, dict(n.metadata)) for n in run] == before  # inputs untouched

        report = pp.last_report
        assert sorted(report.ids("merged")) == sorted(n.node_id for n in run if n.node_id != into)
        assert report.ids("kept") == [into]
        assert report.tokens == _llm_tokens(cl100k, out)[0] and report.nodes_out == 1

    def test_texts_that_disagree_on_the_overlap_stay_apart(self, nodes):
        a, b = _overlapping_run(nodes, 2)
        shared = a.end_char_idx - b.start_char_idx
        changed = b.text[:shared].replace("e", "E", 1) + b.text[shared:]  # another version of the document
        assert changed != b.text and len(changed) == len(b.text)
        b2 = b.model_copy(update={"text": changed, "id_": "other-version"})
        pp = ContextBudgetPostprocessor(token_budget=10_000)
        out = pp.postprocess_nodes([NodeWithScore(node=a, score=0.9), NodeWithScore(node=b2, score=0.8)])
        assert {n.node.node_id for n in out} == {a.node_id, "other-version"}
        assert not pp.last_report.ids("merged")

    def test_offsets_that_do_not_match_the_text_are_not_trusted(self, nodes):
        a, b = _overlapping_run(nodes, 2)
        b2 = b.model_copy(update={"text": b.text + " Extra words.", "id_": "edited"})
        out = ContextBudgetPostprocessor(token_budget=10_000).postprocess_nodes(
            [NodeWithScore(node=a, score=0.9), NodeWithScore(node=b2, score=0.8)])
        assert len(out) == 2 and not any(MERGED_KEY in n.node.metadata for n in out)

    def test_merging_can_be_switched_off(self, nodes):
        run = _overlapping_run(nodes)
        out = ContextBudgetPostprocessor(token_budget=10_000, merge_passages=False).postprocess_nodes(
            [NodeWithScore(node=n, score=0.5) for n in run])
        assert sorted(n.node.node_id for n in out) == sorted(n.node_id for n in run)


# --------------------------------------------------------------- duplicates
class TestDuplicates:
    def test_copies_in_another_document_are_dropped(self, nodes, copy_nodes, cl100k):
        picked = _separate(nodes, 4)
        by_text = {n.text: n for n in copy_nodes}
        copies = [by_text[n.text] for n in picked]
        given_nodes = [NodeWithScore(node=n, score=0.9 - 0.1 * i) for i, n in enumerate(picked)]
        given_nodes += [NodeWithScore(node=c, score=0.85 - 0.1 * i) for i, c in enumerate(copies)]
        pp = ContextBudgetPostprocessor(token_budget=10_000)
        out = pp.postprocess_nodes(given_nodes)
        assert {n.node.node_id for n in out} == {n.node_id for n in picked}  # the better-scored copies
        dropped = {r.node_id: r for r in pp.last_report.nodes if r.status == "dropped"}
        assert set(dropped) == {c.node_id for c in copies}
        assert {r.reason for r in dropped.values()} == {"duplicate"}
        for p, c in zip(picked, copies):
            assert dropped[c.node_id].detail == f"repeats {p.node_id}"

    def test_near_duplicates_are_dropped(self, nodes):
        original = max(nodes, key=lambda n: len(sentence_set(_norm(n.text))))  # 11 sentences
        edited = TextNode(id_="edited-copy", text=original.text.replace(" the ", " that ", 1),
                          metadata={"file_name": "notes.rst"})  # one sentence of 11 reworded
        assert edited.text != original.text
        given_nodes = [NodeWithScore(node=edited, score=0.7), NodeWithScore(node=original, score=0.8)]
        pp = ContextBudgetPostprocessor(token_budget=10_000)
        assert [n.node.node_id for n in pp.postprocess_nodes(given_nodes)] == [original.node_id]
        assert pp.last_report.ids("dropped", "near_duplicate") == ["edited-copy"]
        exact_only = ContextBudgetPostprocessor(token_budget=10_000, near_duplicate_threshold=None)
        assert len(exact_only.postprocess_nodes(given_nodes)) == 2

    def test_a_longer_copy_replaces_the_node_it_holds(self, nodes):
        original = nodes[4]
        longer = TextNode(id_="longer-copy", text=original.text + "\n\nThis copy has one more closing sentence.",
                          metadata={"file_name": "notes.rst"})
        pp = ContextBudgetPostprocessor(token_budget=10_000, near_duplicate_threshold=None)
        out = pp.postprocess_nodes([NodeWithScore(node=longer, score=0.7), NodeWithScore(node=original, score=0.8)])
        assert [(n.node.node_id, n.score) for n in out] == [("longer-copy", 0.8)]
        assert pp.last_report.ids("dropped", "duplicate") == [original.node_id]

    def test_a_copy_inside_a_merged_run_is_dropped(self, nodes, copy_nodes):
        run = _overlapping_run(nodes)
        middle = next(c for c in copy_nodes if c.text == run[1].text)
        given_nodes = [NodeWithScore(node=n, score=0.8) for n in run] + [NodeWithScore(node=middle, score=0.7)]
        pp = ContextBudgetPostprocessor(token_budget=10_000)
        out = pp.postprocess_nodes(given_nodes)
        assert [n.node.node_id for n in out] == [run[0].node_id]
        row = next(r for r in pp.last_report.nodes if r.node_id == middle.node_id)
        assert (row.status, row.reason, row.detail) == ("dropped", "duplicate", f"contained in {run[0].node_id}")

    def test_a_merged_run_replaces_the_copy_it_holds(self, nodes, copy_nodes, pep_text):
        run = _overlapping_run(nodes)
        middle = next(c for c in copy_nodes if c.text == run[1].text)
        given_nodes = [NodeWithScore(node=middle, score=0.9)] + [NodeWithScore(node=n, score=0.5) for n in run]
        pp = ContextBudgetPostprocessor(token_budget=10_000)
        out = pp.postprocess_nodes(given_nodes)
        assert len(out) == 1 and out[0].score == 0.9  # the run, with the score of the copy it took in
        assert out[0].node.text == pep_text[run[0].start_char_idx:run[-1].end_char_idx]
        row = pp.last_report.nodes[0]
        assert (row.status, row.reason, row.detail) == ("dropped", "duplicate",
                                                        f"contained in {run[0].node_id}, which replaced it")

    def test_the_same_node_twice_keeps_its_best_score(self, nodes):
        n = nodes[3]
        pp = ContextBudgetPostprocessor(token_budget=10_000)
        out = pp.postprocess_nodes([NodeWithScore(node=n, score=0.2), NodeWithScore(node=n, score=0.7)])
        assert len(out) == 1 and out[0].score == 0.7
        assert [r.reason for r in pp.last_report.nodes] == ["same_node", None]


# -------------------------------------------------------------------- order
class TestOrder:
    @pytest.fixture()
    def scored(self, nodes):
        picked = _separate(nodes, 5)
        scores = [0.3, 0.9, 0.5, 0.7, 0.1]  # document order, scored out of order
        return picked, [NodeWithScore(node=n, score=s) for n, s in zip(picked, scores)]

    def test_lost_in_the_middle_keeps_one_documents_passages_in_reading_order(self, scored):
        """The five nodes are passages of one document: they stay together, in the document's order."""
        picked, given_nodes = scored
        out = ContextBudgetPostprocessor(token_budget=10_000).postprocess_nodes(given_nodes)
        assert [n.node.node_id for n in out] == [n.node_id for n in picked]

    def test_lost_in_the_middle_puts_the_strongest_documents_at_both_ends(self, scored):
        """Passages of five documents (no source relationship, no path: each node its own document)."""
        _, given_nodes = scored
        alone = [NodeWithScore(node=TextNode(text=n.node.get_content(), id_=f"n{i}"), score=n.score)
                 for i, n in enumerate(given_nodes)]
        out = ContextBudgetPostprocessor(token_budget=10_000).postprocess_nodes(alone)
        assert [n.score for n in out] == [0.9, 0.5, 0.1, 0.3, 0.7]

    def test_score_and_document_orders(self, scored):
        picked, given_nodes = scored
        out = ContextBudgetPostprocessor(token_budget=10_000, order="score").postprocess_nodes(given_nodes)
        assert [n.score for n in out] == [0.9, 0.7, 0.5, 0.3, 0.1]
        out = ContextBudgetPostprocessor(token_budget=10_000, order="document").postprocess_nodes(given_nodes[::-1])
        assert [n.node.node_id for n in out] == [n.node_id for n in picked]

    def test_unknown_order_is_rejected(self):
        with pytest.raises(ValidationError):
            ContextBudgetPostprocessor(token_budget=100, order="middle")


# ------------------------------------------------------------------- budget
class TestBudget:
    def test_first_node_that_does_not_fit_is_cut_at_a_sentence_end(self, nodes, cl100k):
        picked = sorted(_separate(nodes, 8), key=lambda n: -len(n.text))[:4]
        given_nodes = [NodeWithScore(node=n, score=1.0 - 0.1 * i) for i, n in enumerate(picked)]
        counts = _llm_tokens(cl100k, given_nodes)
        budget = counts[0] + counts[1] + counts[2] // 2
        pp = ContextBudgetPostprocessor(token_budget=budget, order="score")
        out = pp.postprocess_nodes(given_nodes)

        assert [n.node.node_id for n in out] == [n.node_id for n in picked[:3]]
        assert out[0].node is picked[0] and out[1].node is picked[1]  # untouched nodes pass through
        cut = out[2].node
        assert cut.metadata[TRUNCATED_KEY] is True and TRUNCATED_KEY not in cut.get_content(MetadataMode.LLM)
        assert picked[2].text.startswith(cut.text) and len(cut.text) < len(picked[2].text)
        assert picked[2].text[len(cut.text)].isspace()  # a clean cut ...
        assert re.search(r"([.!?]['\")\]]*|\S)$", cut.text)  # ... at a sentence or paragraph end
        assert cut.end_char_idx == cut.start_char_idx + len(cut.text)
        assert TRUNCATED_KEY not in picked[2].metadata
        used = _llm_tokens(cl100k, out)
        assert sum(used) <= budget and pp.last_report.tokens == sum(used)
        report = {r.node_id: r for r in pp.last_report.nodes}
        assert report[picked[2].node_id].status == "truncated"
        assert (report[picked[3].node_id].status, report[picked[3].node_id].reason) == ("dropped", "budget")

    def test_without_truncation_the_node_is_dropped(self, nodes, cl100k):
        picked = _separate(nodes, 3)
        given_nodes = [NodeWithScore(node=n, score=1.0 - 0.1 * i) for i, n in enumerate(picked)]
        counts = _llm_tokens(cl100k, given_nodes)
        out = ContextBudgetPostprocessor(token_budget=counts[0] + counts[1] - 1, truncate=False
                                         ).postprocess_nodes(given_nodes)
        assert [n.node.node_id for n in out] == [picked[0].node_id]

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.data())
    def test_budget_is_never_exceeded(self, data, pool, nodes, other_text, pep_text, cl100k):
        picks = data.draw(st.lists(st.tuples(st.integers(0, len(pool) - 1),
                                             st.one_of(st.none(), st.floats(0.0, 1.0))), max_size=24))
        budget = data.draw(st.integers(1, 2_500))
        overhead = data.draw(st.integers(0, 3))
        order = data.draw(st.sampled_from(["lost_in_the_middle", "score", "document"]))
        given_nodes = [NodeWithScore(node=pool[i], score=s) for i, s in picks]
        pp = ContextBudgetPostprocessor(token_budget=budget, per_node_overhead=overhead, order=order)
        out = pp.postprocess_nodes(given_nodes)

        used = _llm_tokens(cl100k, out)
        assert sum(used) + overhead * len(out) <= budget
        report = pp.last_report
        assert report.tokens == sum(used) and report.nodes_out == len(out) and report.nodes_in == len(given_nodes)
        assert len({_norm(n.node.text) for n in out}) == len(out)  # nothing repeated
        docs = {"pep-0257": pep_text, "pep-0257-mirror": pep_text, "pep-0020": other_text}
        for n in out:
            node = n.node
            assert docs[node.ref_doc_id][node.start_char_idx:node.end_char_idx] == node.text
        assert all(n.text == pep_text[n.start_char_idx:n.end_char_idx] for n in nodes)  # inputs untouched


# ------------------------------------------------------------ serialization
class TestComponent:
    def test_to_dict_from_dict_round_trip(self):
        pp = ContextBudgetPostprocessor(token_budget=512, order="document", near_duplicate_threshold=None,
                                        per_node_overhead=2, truncate=False)
        data = pp.to_dict()
        assert data["class_name"] == ContextBudgetPostprocessor.class_name() == "ContextBudgetPostprocessor"
        back = ContextBudgetPostprocessor.from_dict(data)
        assert back.to_dict() == data and back.token_budget == 512 and back.order == "document"
        assert ContextBudgetPostprocessor.from_json(pp.to_json()).to_dict() == data
        assert pickle.loads(pickle.dumps(pp)).to_dict() == data
        assert "callback_manager" not in data and "_last_report" not in data

    def test_invalid_budget(self):
        with pytest.raises(ValidationError):
            ContextBudgetPostprocessor(token_budget=0)

    def test_from_llm(self, cl100k):
        llm = RecordingLLM(context_window=2_000, num_output=300)
        assert ContextBudgetPostprocessor.from_llm(llm, reserve=100).token_budget == 1_600
        default = ContextBudgetPostprocessor.from_llm(llm)
        reserve = 2_000 - 300 - default.token_budget
        from llama_index.core.response_synthesizers import refine

        padding = getattr(refine, "DEFAULT_RESPONSE_PADDING_SIZE", 0)  # 500 since llama-index-core 0.14.22
        assert 256 + padding < reserve < 400 + padding  # the refine template, 256 for the question, the padding
        assert default.per_node_overhead == 1
        with_system = ContextBudgetPostprocessor.from_llm(
            RecordingLLM(context_window=2_000, num_output=300, system_prompt="Answer in French, briefly."))
        assert with_system.token_budget == default.token_budget - cl100k.count("Answer in French, briefly.")
        assert ContextBudgetPostprocessor.from_llm(RecordingLLM(context_window=2_000, num_output=-1),
                                                   reserve=0).token_budget == 2_000 - 256
        with pytest.raises(ValueError, match="leaves no room"):
            ContextBudgetPostprocessor.from_llm(llm, reserve=1_700)

    def test_async_and_query_str(self, nodes):
        pp = ContextBudgetPostprocessor(token_budget=10_000)
        given_nodes = [NodeWithScore(node=n, score=0.5) for n in _overlapping_run(nodes)]
        out = asyncio.run(pp.apostprocess_nodes(given_nodes, query_str="docstrings"))
        assert len(out) == 1 and pp.postprocess_nodes([]) == [] and pp.last_report.nodes_in == 0


# ---------------------------------------------------------- in a query engine
class RecordingLLM(CustomLLM):
    """Deterministic: records every prompt, answers with a fixed text."""

    context_window: int = 4_096
    num_output: int = 128
    prompts: list[str] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=self.context_window, num_output=self.num_output, model_name="recording")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        return CompletionResponse(text="One line, in triple quotes.")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield self.complete(prompt, formatted=formatted, **kwargs)


class EmbedderEmbedding(BaseEmbedding):
    """contextkit's Embedder (all-MiniLM-L6-v2, offline) as a LlamaIndex embedding model."""

    _embedder: Any = PrivateAttr()
    _seen: dict[str, list[float]] = PrivateAttr(default_factory=dict)

    def __init__(self, embedder: Any, **kwargs: Any) -> None:
        super().__init__(model_name=embedder.model_name, embed_batch_size=64, **kwargs)
        self._embedder = embedder

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._embedder.embed([query])[0].tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        todo = sorted({t for t in texts if t not in self._seen})  # the mirrored PEP is embedded once
        if todo:
            self._seen.update(zip(todo, self._embedder.embed(todo).tolist()))
        return [self._seen[t] for t in texts]


_HEAD = "Context information is below.\n---------------------\n"
_TAIL = "\n---------------------\nGiven the context information"


def _context(prompt: str) -> str:
    assert prompt.startswith(_HEAD), prompt[:200]
    return prompt[len(_HEAD):prompt.rindex(_TAIL)]


def _repeated_passages(context: str, passages: list[str]) -> list[str]:
    """Retrieved passages that occur more than once in the prompt's context."""
    return [p for p in {p.strip() for p in passages} if context.count(p) > 1]


@pytest.fixture(scope="module")
def pep_index(embedder, pep_text, other_text):
    docs = [Document(text=pep_text, id_="pep-0257", metadata={"file_name": PEP}),
            Document(text=pep_text, id_="pep-0257-mirror", metadata={"file_name": MIRROR}),
            Document(text=other_text, id_="pep-0020", metadata={"file_name": OTHER_PEP})]
    return VectorStoreIndex.from_documents(docs, embed_model=EmbedderEmbedding(embedder),
                                           transformations=[SentenceSplitter(chunk_size=160, chunk_overlap=60)])


QUESTION = "How should a one-line docstring be written?"


class TestQueryEngine:
    def test_plain_engine_repeats_passages(self, pep_index):
        # The baseline the postprocessor fixes: the mirrored copy reaches the prompt twice.
        llm = RecordingLLM(context_window=16_000)
        response = pep_index.as_query_engine(llm=llm, similarity_top_k=10).query(QUESTION)
        assert len(llm.prompts) == 1
        assert _repeated_passages(_context(llm.prompts[0]), [n.node.text for n in response.source_nodes])

    def test_prompt_has_no_repeats_and_fits(self, pep_index, cl100k):
        retrieved = pep_index.as_retriever(similarity_top_k=10).retrieve(QUESTION)
        llm = RecordingLLM(context_window=2_000, num_output=200)
        pp = ContextBudgetPostprocessor.from_llm(llm)  # ~950 tokens: less than the 10 nodes retrieved
        engine = pep_index.as_query_engine(llm=llm, similarity_top_k=10, node_postprocessors=[pp])
        response = engine.query(QUESTION)

        assert str(response) == "One line, in triple quotes."
        assert len(llm.prompts) == 1  # everything fit in one call: no refine round
        prompt = llm.prompts[0]
        context = _context(prompt)
        assert QUESTION in prompt
        assert cl100k.count(context) <= pp.token_budget
        assert cl100k.count(prompt) <= llm.context_window - llm.num_output
        assert not _repeated_passages(context, [n.node.text for n in retrieved])
        assert sum(n.node.text.strip() in context for n in retrieved) >= 3

        report = pp.last_report
        assert report.nodes_in == 10 and report.nodes_out == len(response.source_nodes)
        assert report.tokens + report.overhead_tokens <= pp.token_budget
        assert report.ids("dropped", "duplicate")
        texts = [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in response.source_nodes]
        assert all(t.strip() in context for t in texts)
        outputs = [_norm(n.node.text) for n in response.source_nodes]
        assert not any(a in b for a in outputs for b in outputs if a is not b)  # no node inside another

    def test_fixed_budget_in_an_engine(self, pep_index, cl100k):
        llm = RecordingLLM()
        pp = ContextBudgetPostprocessor(token_budget=300, order="score")
        response = pep_index.as_query_engine(llm=llm, similarity_top_k=8, node_postprocessors=[pp]).query(QUESTION)
        assert len(llm.prompts) == 1
        assert sum(_llm_tokens(cl100k, response.source_nodes)) <= 300
        assert cl100k.count(_context(llm.prompts[0])) <= 300 + len(response.source_nodes)
        scores = [n.score for n in response.source_nodes]
        assert scores == sorted(scores, reverse=True)


class TestSentenceWindows:
    """``SentenceWindowNodeParser`` + ``MetadataReplacementPostProcessor``: overlapping windows merged."""

    def test_overlapping_windows_are_merged_before_the_budget(self, source_document):
        from llama_index.core.node_parser import SentenceWindowNodeParser
        from llama_index.core.postprocessor import MetadataReplacementPostProcessor

        nodes = SentenceWindowNodeParser.from_defaults(window_size=3).get_nodes_from_documents([source_document])
        # hits on neighbouring sentences (as a retriever returns them), and one far away
        hits = [NodeWithScore(node=nodes[i], score=1.0 - k / 20) for k, i in enumerate([20, 22, 21, 24, 90])]
        hits = MetadataReplacementPostProcessor(target_metadata_key="window").postprocess_nodes(hits)
        pp = ContextBudgetPostprocessor(token_budget=2_000, order="document")
        kept = pp.postprocess_nodes(hits)
        assert len(kept) == 2
        joined = " ".join(n.node.get_content(metadata_mode=MetadataMode.NONE) for n in kept)
        assert all(hit.node.metadata["window"] in joined for hit in hits)  # every window is there
        sentences = [n.metadata["original_text"] for n in nodes[17:28]]
        assert all(joined.count(s) == 1 for s in sentences)  # and each sentence once
        assert sorted(pp.last_report.ids("merged")) == sorted([nodes[i].node_id for i in (21, 22, 24)])

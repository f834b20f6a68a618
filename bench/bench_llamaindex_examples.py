"""LlamaIndex's own docs examples, run stock and with contextkit plugged in, on the PEPs.

Ten examples, each run on three sides:

* **stock**: as LlamaIndex's docs write it;
* **contextkit**: with contextkit plugged in as ``docs/llamaindex.md`` says (below, per example);
* **ck, stock nodes** ("same-nodes"): the contextkit side's postprocessor, synthesizer, chat
  engine and vector store, but over stock's ``SentenceSplitter`` nodes, so the LLM is given the
  same evidence as stock and the token counts compare the prompt paths alone (in 4, stock's
  splitter with ``ContextKitVectorStore``; in 9 the sentence-window index is the same for all).

1. **starter**: ``VectorStoreIndex.from_documents`` + ``as_query_engine``. contextkit (the docs'
   opening lines): ``transformations=[ContextKitNodeParser()]`` and ``contextkit_query_engine(index,
   llm, similarity_top_k=K, node_postprocessors=[ContextBudgetPostprocessor.from_llm(llm,
   synthesizer="contextkit")])`` in place of ``as_query_engine``.
2. **chat**: ``index.as_chat_engine(chat_mode="condense_plus_context")``, three turns, the
   second "Can you tell me more?". contextkit: ``contextkit_chat_engine(index, llm, ...)``.
3. **streaming**: ``as_query_engine(streaming=True)``. contextkit: ``contextkit_query_engine(index,
   llm, streaming=True, node_postprocessors=[budget])``.
4. **ingestion**: ``IngestionPipeline(transformations=[splitter, embed_model], docstore=
   SimpleDocumentStore(), vector_store=...)`` run three times (new, unchanged, one document
   edited: dedup, then upsert), then queried (stock: ``VectorStoreIndex(nodes)``, as
   ``SimpleVectorStore`` keeps no text). contextkit: ``ContextKitNodeParser`` and
   ``ContextKitVectorStore``, queried through ``VectorStoreIndex.from_vector_store`` as in 1.
5. **sub_question**: ``SubQuestionQueryEngine`` over two ``QueryEngineTool``s (Process PEPs,
   the other PEPs: the same index with a metadata filter each). ``LLMQuestionGenerator`` is
   passed explicitly (``from_defaults`` insists on ``llama-index-question-gen-openai``
   otherwise). contextkit: the tools' engines as in 1, ``response_synthesizer=ContextKitSynthesizer``.
6. **router**: ``RouterQueryEngine(selector=LLMSingleSelector.from_defaults(), ...)`` over the
   same two tools. contextkit: the tools' engines as in 1, ``summarizer=ContextKitSynthesizer``.
7. **agent**: ``FunctionAgent(tools=[QueryEngineTool], llm=llm)``; the LLM answers with a real
   tool call first. contextkit: the tool's engine as in 1.
8. **filters**: ``MetadataFilters`` on ``as_query_engine(filters=...)`` and ``as_retriever``
   (equality on ``pep_type``; ``in`` on ``file_name``). contextkit: the index kept in a
   ``ContextKitVectorStore`` (the contextkit-parsed nodes and their vectors), engine as in 1.
9. **sentence_window**: ``SentenceWindowNodeParser`` + ``MetadataReplacementPostProcessor``
   (one index of sentence nodes, shared). contextkit: ``contextkit_query_engine`` with
   ``ContextBudgetPostprocessor`` after the replacement.
10. **rag_workflow**: the "RAG workflow with reranking" example: a ``Workflow`` whose steps
    retrieve, rerank (``LLMRerank``, top 3) and synthesize (``CompactAndRefine(streaming=True)``).
    contextkit: the budget postprocessor after the reranker, ``ContextKitSynthesizer(streaming=True)``
    (a workflow is written by hand: no engine factory applies).
    Counted as a tenth example, not as part of 9.

Then an off-topic question ("What is the capital of France, and what is its population?")
through the starter on each side, on a fourth, the starter wired by hand
(``as_query_engine(node_postprocessors=[budget], response_synthesizer=ContextKitSynthesizer(llm))``,
which the docs say is not flagged over a stock store), and on a fifth, ``contextkit_query_engine`` over a
``ContextKitRetriever(mode="dense")`` on the ``ContextKitVectorStore`` folder of 8 (the one
retriever that records query similarities): its prompt tokens, ``response.source_nodes``, the
synthesizer's ``off_topic`` verdict, and whether anything was logged at WARNING (any logger)
or warned (deprecation warnings aside).

Method. The corpus is the first ``--limit`` PEP files by name (default 20; embedding runs at
~10-15 chunks/s on this 2-core CPU), read by ``SimpleDirectoryReader(filename_as_id=True)``
with ``pep_type`` (the PEP's ``Type:`` header) added to the reader's metadata. Every side
embeds with ``ContextKitEmbedding`` over one shared contextkit ``Embedder`` (all-MiniLM-L6-v2,
offline). Each side's index is built once and shared by its examples; the sentence-window
index (the ``--window-docs`` smallest PEPs of the slice, default 5) and the ingestion corpus
(the 3 smallest) are small because every sentence is a node to embed. Every example uses
``similarity_top_k`` ``--top-k`` (default 8) on every side.

The LLM is a recording ``FunctionCallingLLM`` defined here (no weights on this machine): a chat
model declaring a 128,000-token window (4,096 output), it records every call's messages (and
tool schemas) and answers what each LlamaIndex prompt expects: JSON sub-questions, a JSON
selection, ``Doc: n, Relevance: r`` lines for ``LLMRerank``, a standalone question when asked
to condense, a real tool call (``additional_kwargs["tool_calls"]``) when given tools and a user
turn, and otherwise a fixed answer, word by word when streamed; it reports provider-like
``usage`` in ``raw``. Prompt tokens are what a chat API bills: cl100k_base counts (tiktoken
``encode_ordinary``) of each message's content plus 3 tokens of framing per message and 3 to prime
the reply (OpenAI's documented count), plus the JSON of any tool schemas, summed over every LLM
call of the example. (Stock chat engines send the history as separate messages, contextkit's as
one block: counting contents alone would bill stock's framing at nothing.)

Behaviour checks are the same function applied to every side's results; a row's "same" is
whether every check came out equal (the differing ones are listed under the table). Keys
marked ``~`` (how many ``source_nodes`` came back) are shown for every side, not compared:
contextkit's postprocessor merges overlapping nodes into one on purpose.

Run: ``python bench/bench_llamaindex_examples.py [--limit N] [--top-k K] [--window-docs N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from llama_index.core import Settings, SimpleDirectoryReader, StorageContext, VectorStoreIndex  # noqa: E402
from llama_index.core.base.llms.types import (  # noqa: E402
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback  # noqa: E402
from llama_index.core.llms.function_calling import FunctionCallingLLM  # noqa: E402
from llama_index.core.llms.llm import ToolSelection  # noqa: E402
from pydantic import Field  # noqa: E402

from contextkit.tokenizers import get_tokenizer  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PEPS = DATA / "python_peps" / "peps"
ENCODING = "cl100k_base"
ANSWER = "According to the retrieved PEP text, the proposal is described there, with its rationale [source]."
CONTEXT_WINDOW, NUM_OUTPUT = 128_000, 4_096
OFF_TOPIC = "What is the capital of France, and what is its population?"
QUESTION = "What is a PEP, who are the PEP editors, and how does a PEP get accepted?"
CHAT_TURNS = ("How should a PEP author handle the discussion of a new PEP?", "Can you tell me more?",
              "And what does the steering council decide?")
ROUTED = "Which Process PEP explains how release managers do a Python release?"
FILTERED = "What guidance do the informational PEPs give?"
SAME = "ck, stock nodes"
HAND = "contextkit, wired by hand"
SIDES = ("stock", "contextkit", SAME)

_ENC: Any = None


def count(text: str) -> int:
    global _ENC
    if _ENC is None:
        _ENC = get_tokenizer(ENCODING).encoding
    return len(_ENC.encode_ordinary(text))


# ------------------------------------------------------------------- the LLM
def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [w if i == len(words) - 1 else w + " " for i, w in enumerate(words)]


class RecordingLLM(FunctionCallingLLM):
    """A real LlamaIndex ``FunctionCallingLLM`` (a 128k chat model) that records every call and answers
    what each LlamaIndex prompt expects (see the module docstring)."""

    context_window: int = CONTEXT_WINDOW
    num_output: int = NUM_OUTPUT
    reply: str = ANSWER
    calls: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=self.context_window, num_output=self.num_output, is_chat_model=True,
                           is_function_calling_model=True, model_name="recording-128k")

    # what each prompt expects
    def _respond(self, messages: list[ChatMessage], tools: list[dict[str, Any]] | None) -> ChatMessage:
        text = "\n".join(str(m.content or "") for m in messages)
        # as a chat API bills them: each message's content plus 3 tokens of framing, 3 to prime the reply
        # (OpenAI's documented count); a prompt of many messages costs more than one of the same text
        tokens = sum(count(str(m.content or "")) + 3 for m in messages) + 3 + (
            count(json.dumps(tools)) if tools else 0)
        kind, message = "answer", None
        if tools and messages and messages[-1].role == MessageRole.USER:
            kind = "tool_call"
            call = {"id": f"call_{len(self.calls)}", "type": "function",
                    "function": {"name": tools[0]["function"]["name"],
                                 "arguments": json.dumps({"input": str(messages[-1].content)})}}
            message = ChatMessage(role=MessageRole.ASSISTANT, content="", additional_kwargs={"tool_calls": [call]})
        elif "output a list of relevant sub-questions" in text:
            kind, content = "sub_questions", _sub_questions(text)
        elif "Some choices are given below" in text:
            kind, content = "select", _selection(text)
        elif "A list of documents is shown below" in text:
            kind, content = "rerank", _rerank(text)
        elif "rephrase the follow up question to be a standalone question" in text:
            kind, content = "condense", _standalone(text)
        else:
            content = self.reply
        if message is None:
            message = ChatMessage(role=MessageRole.ASSISTANT, content=content)
        self.calls.append({"kind": kind, "tokens": tokens, "text": text, "tools": len(tools or [])})
        return message

    def _response(self, message: ChatMessage) -> ChatResponse:
        usage = {"prompt_tokens": self.calls[-1]["tokens"], "completion_tokens": count(str(message.content or ""))}
        return ChatResponse(message=message, raw={"usage": usage})

    def _stream(self, message: ChatMessage) -> list[ChatResponse]:
        if message.additional_kwargs.get("tool_calls") or not message.content:
            return [self._response(message)]
        out, text = [], ""
        for w in _words(str(message.content)):
            text += w
            out.append(ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=w,
                                    raw={"usage": None}))
        return out

    @llm_chat_callback()
    def chat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        return self._response(self._respond(list(messages), kwargs.get("tools")))

    @llm_chat_callback()
    def stream_chat(self, messages: Any, **kwargs: Any) -> Any:
        parts = self._stream(self._respond(list(messages), kwargs.get("tools")))
        return (p for p in parts)

    @llm_chat_callback()
    async def achat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        return self.chat(messages, **kwargs)

    @llm_chat_callback()
    async def astream_chat(self, messages: Any, **kwargs: Any) -> Any:
        parts = self._stream(self._respond(list(messages), kwargs.get("tools")))

        async def gen() -> Any:
            for p in parts:
                yield p

        return gen()

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        text = str(self._respond([ChatMessage(role=MessageRole.USER, content=prompt)], None).content)
        return CompletionResponse(text=text)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        parts = self._stream(self._respond([ChatMessage(role=MessageRole.USER, content=prompt)], None))
        return (CompletionResponse(text=str(p.message.content), delta=p.delta) for p in parts)

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self.complete(prompt, formatted=formatted, **kwargs)

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        parts = list(self.stream_complete(prompt, formatted=formatted, **kwargs))

        async def gen() -> Any:
            for p in parts:
                yield p

        return gen()

    # tools
    def _prepare_chat_with_tools(self, tools: Any, user_msg: Any = None, chat_history: Any = None,
                                 verbose: bool = False, allow_parallel_tool_calls: bool = False,
                                 tool_required: bool = False, **kwargs: Any) -> dict[str, Any]:
        messages = list(chat_history or [])
        if user_msg is not None:
            messages.append(user_msg if isinstance(user_msg, ChatMessage)
                            else ChatMessage(role=MessageRole.USER, content=str(user_msg)))
        return {"messages": messages, "tools": [t.metadata.to_openai_tool() for t in tools], **kwargs}

    def get_tool_calls_from_response(self, response: ChatResponse, error_on_no_tool_call: bool = True,
                                     **kwargs: Any) -> list[ToolSelection]:
        calls = response.message.additional_kwargs.get("tool_calls") or []
        if not calls and error_on_no_tool_call:
            raise ValueError("expected a tool call")
        return [ToolSelection(tool_id=c["id"], tool_name=c["function"]["name"],
                              tool_kwargs=json.loads(c["function"]["arguments"])) for c in calls]

    # bookkeeping
    def tokens(self) -> int:
        return sum(c["tokens"] for c in self.calls)

    def kinds(self) -> list[str]:
        return [c["kind"] for c in self.calls]


def _sub_questions(text: str) -> str:
    tools_json = re.findall(r"<Tools>\s*```json\s*(\{.*?\})\s*```", text, re.S)[-1]
    question = re.findall(r"<User Question>\s*(.*?)\s*<Output>", text, re.S)[-1].strip()
    items = [{"sub_question": f"{question} (in the {name} documents)", "tool_name": name}
             for name in json.loads(tools_json)]
    return "```json\n" + json.dumps({"items": items}, indent=4) + "\n```"


def _selection(text: str) -> str:
    query = re.findall(r"most relevant to the question: '(.*?)'", text, re.S)[-1]
    choices = re.findall(r"^\((\d+)\) (.*)$", text, re.M)
    q = set(re.findall(r"\w+", query.lower()))
    best = max(choices, key=lambda c: (len(q & set(re.findall(r"\w+", c[1].lower()))), -int(c[0])))
    return json.dumps([{"choice": int(best[0]), "reason": "It matches the question best."}])


def _rerank(text: str) -> str:
    tail = text.split("Let's try this now:")[-1]
    numbers = [int(n) for n in re.findall(r"^Document (\d+):", tail, re.M)]
    return "\n".join(f"Doc: {n}, Relevance: {max(1, 10 - i)}" for i, n in enumerate(numbers))


def _standalone(text: str) -> str:
    history = text.split("Chat History:")[-1]
    first = re.search(r"^\s*user: (.*)$", history, re.M)
    follow = re.search(r"Follow Up Input: (.*)", history)
    return f"{follow.group(1).strip() if follow else ''} (about: {first.group(1).strip() if first else ''})"


# ------------------------------------------------------------------ the setup
def pep_metadata(path: str) -> dict[str, Any]:
    from llama_index.core.readers.file.base import default_file_metadata_func

    meta = default_file_metadata_func(path)
    head = Path(path).read_text(encoding="utf-8")[:3000]
    m = re.search(r"^Type:\s*(.+)$", head, re.M)
    meta["pep_type"] = m.group(1).strip() if m else "unknown"
    return meta


def load_documents(files: list[Path]) -> list[Any]:
    return SimpleDirectoryReader(input_files=[str(f) for f in files], filename_as_id=True,
                                 file_metadata=pep_metadata).load_data()


def copy_documents(documents: list[Any]) -> list[Any]:
    from llama_index.core.schema import Document

    return [Document(text=d.text, id_=d.id_, metadata=dict(d.metadata),
                     excluded_llm_metadata_keys=list(d.excluded_llm_metadata_keys),
                     excluded_embed_metadata_keys=list(d.excluded_embed_metadata_keys)) for d in documents]


@dataclass
class Env:
    """What the examples share: documents, the embedding model, each side's index (built once)."""

    files: list[Path]
    embedder: Any
    work: Path
    top_k: int = 8
    window_docs: int = 5
    documents: list[Any] = field(default_factory=list)
    embed_model: Any = None
    indexes: dict[str, Any] = field(default_factory=dict)
    store_index: dict[str, Any] = field(default_factory=dict)  # 8: each contextkit side's nodes in a ContextKitVectorStore
    stores: dict[str, Any] = field(default_factory=dict)
    window_index: Any = None
    builds: list[dict[str, Any]] = field(default_factory=list)
    log: Callable[[str], None] = lambda msg: None

    def build(self) -> Env:
        from llama_index.core.node_parser import SentenceWindowNodeParser

        from contextkit.integrations.llamaindex import (
            ContextKitEmbedding,
            ContextKitNodeParser,
            ContextKitVectorStore,
        )

        self.embed_model = ContextKitEmbedding(self.embedder)
        Settings.embed_model = self.embed_model
        Settings.llm = RecordingLLM()
        self.documents = load_documents(self.files)

        def timed(name: str, fn: Callable[[], Any], nodes: Callable[[Any], int]) -> Any:
            self.log(f"building {name} ...")
            t0 = time.perf_counter()
            out = fn()
            self.builds.append({"index": name, "nodes": nodes(out), "build_s": time.perf_counter() - t0})
            return out

        n_docs = lambda ix: len(ix.docstore.docs)  # noqa: E731
        self.indexes["stock"] = timed("stock (SentenceSplitter default)", lambda: VectorStoreIndex.from_documents(
            self.documents, embed_model=self.embed_model), n_docs)
        self.indexes["contextkit"] = timed("contextkit (ContextKitNodeParser)", lambda: VectorStoreIndex.from_documents(
            self.documents, embed_model=self.embed_model, transformations=[ContextKitNodeParser()]), n_docs)

        self.indexes[SAME] = self.indexes["stock"]  # contextkit's prompt path over stock's nodes: the same evidence

        def store(side: str) -> Any:  # the side's nodes and vectors in a ContextKitVectorStore (no second embedding)
            ix = self.indexes[side]
            nodes = []
            for node in ix.docstore.docs.values():
                node = node.model_copy()
                node.embedding = ix.vector_store.get(node.node_id)
                nodes.append(node)
            self.stores[side] = ContextKitVectorStore(self.work / f"ck-store-{len(self.stores)}",
                                                      model=self.embedder.model_name)
            ctx = StorageContext.from_defaults(vector_store=self.stores[side])
            return VectorStoreIndex(nodes, storage_context=ctx, embed_model=self.embed_model)

        for side, what in (("contextkit", "contextkit's"), (SAME, "stock's")):
            self.store_index[side] = timed(f"ContextKitVectorStore of {what} nodes (vectors copied)",
                                           lambda side=side: store(side),
                                           lambda ix, side=side: len(self.stores[side].get_nodes()))
        smallest = sorted(self.documents, key=lambda d: len(d.text))[:self.window_docs]

        def window() -> Any:
            parser = SentenceWindowNodeParser.from_defaults(window_size=3, window_metadata_key="window",
                                                            original_text_metadata_key="original_text")
            return VectorStoreIndex(parser.get_nodes_from_documents(smallest), embed_model=self.embed_model)

        self.window_index = timed(f"sentence windows ({len(smallest)} smallest PEPs, shared)", window,
                                  lambda ix: len(ix.index_struct.nodes_dict))
        return self

    def close(self) -> None:
        for store in self.stores.values():
            store.close()


def budget(llm: Any) -> Any:
    from contextkit.integrations.llamaindex import ContextBudgetPostprocessor

    return ContextBudgetPostprocessor.from_llm(llm, synthesizer="contextkit")


def query_engine(env: Env, side: str, llm: Any, index: Any = None, **kwargs: Any) -> Any:
    """The starter's engine: stock ``as_query_engine``, or ``contextkit_query_engine`` as the docs open with
    (``side == HAND``: the docs' hand-wired alternative, ``as_query_engine`` with contextkit's synthesizer)."""
    from contextkit.integrations.llamaindex import ContextKitSynthesizer, contextkit_query_engine

    index = index if index is not None else env.indexes["contextkit" if side == HAND else side]
    if side == "stock":
        return index.as_query_engine(llm=llm, similarity_top_k=env.top_k, **kwargs)
    if side == HAND:
        return index.as_query_engine(llm=llm, similarity_top_k=env.top_k, node_postprocessors=[budget(llm)],
                                     response_synthesizer=ContextKitSynthesizer(llm=llm), **kwargs)
    return contextkit_query_engine(index, llm, similarity_top_k=env.top_k, node_postprocessors=[budget(llm)],
                                   **kwargs)


def _prompt_text(llm: RecordingLLM, kind: str = "answer") -> str:
    return "\n".join(c["text"] for c in llm.calls if c["kind"] == kind)


# ------------------------------------------------------------------ examples
# Each takes (env, side, llm) and returns the behaviour checks (compared across sides).

def ex_starter(env: Env, side: str, llm: RecordingLLM) -> dict[str, Any]:
    response = query_engine(env, side, llm).query(QUESTION)
    retrieved = env.indexes[side].as_retriever(similarity_top_k=env.top_k).retrieve(QUESTION)
    prompt = _norm(_prompt_text(llm))
    return {"answer": str(response) == ANSWER, "source_nodes": len(response.source_nodes) > 0,
            "llm_calls": len(llm.calls),
            "every_retrieved_text_in_prompt": all(_norm(h.node.get_content()) in prompt for h in retrieved),
            "every_source_node_text_in_prompt": all(_norm(n.node.get_content()) in prompt
                                                    for n in response.source_nodes),
            "~retrieved/source_nodes": f"{len(retrieved)}/{len(response.source_nodes)}"}


def ex_chat(env: Env, side: str, llm: RecordingLLM) -> dict[str, Any]:
    from contextkit.integrations.llamaindex import contextkit_chat_engine

    index = env.indexes[side]
    if side == "stock":
        engine = index.as_chat_engine(chat_mode="condense_plus_context", llm=llm, similarity_top_k=env.top_k)
    else:
        engine = contextkit_chat_engine(index, llm, chat_mode="condense_plus_context", similarity_top_k=env.top_k)
    checks: dict[str, Any] = {}
    for i, turn in enumerate(CHAT_TURNS, 1):
        before = len(llm.calls)
        response = engine.chat(turn)
        kinds = llm.kinds()[before:]
        checks[f"turn{i}_answer"] = str(response) == ANSWER
        checks[f"turn{i}_sources"] = (len(response.source_nodes) > 0, [s.tool_name for s in response.sources])
        checks[f"turn{i}_calls"] = kinds
        checks[f"~turn{i}_source_nodes"] = len(response.source_nodes)
        if i > 1:  # the follow-up was condensed and retrieval used the standalone question
            raw = response.sources[0].raw_input if response.sources else {}
            checks[f"turn{i}_retrieval_condensed"] = "(about:" in str(raw.get("message", raw))
        # the message as typed is what the prompt ends with
        checks[f"turn{i}_typed_question_in_prompt"] = turn in llm.calls[-1]["text"]
    checks["history_messages"] = len(engine.chat_history)
    return checks


def ex_streaming(env: Env, side: str, llm: RecordingLLM) -> dict[str, Any]:
    from llama_index.core.base.response.schema import StreamingResponse

    from contextkit.integrations.llamaindex import contextkit_query_engine

    if side == "stock":
        engine = env.indexes[side].as_query_engine(llm=llm, similarity_top_k=env.top_k, streaming=True)
    else:
        engine = contextkit_query_engine(env.indexes[side], llm, streaming=True, similarity_top_k=env.top_k,
                                         node_postprocessors=[budget(llm)])
    plain = str(query_engine(env, side, RecordingLLM()).query(QUESTION))  # the non-streamed answer, off the count
    response = engine.query(QUESTION)
    chunks = list(response.response_gen) if isinstance(response, StreamingResponse) else []
    return {"~source_nodes": len(response.source_nodes),
            "every_source_node_text_in_prompt": _shown(llm, response.source_nodes),
            "streaming_response": isinstance(response, StreamingResponse), "deltas>1": len(chunks) > 1,
            "streamed==non_streamed": "".join(chunks) == plain, "source_nodes": len(response.source_nodes) > 0,
            "llm_calls": len(llm.calls)}


def ex_ingestion(env: Env, side: str, llm: RecordingLLM) -> dict[str, Any]:
    from llama_index.core.ingestion import IngestionPipeline
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.storage.docstore import SimpleDocumentStore
    from llama_index.core.vector_stores import SimpleVectorStore

    from contextkit.integrations.llamaindex import ContextKitNodeParser, ContextKitVectorStore

    docs = copy_documents(sorted(env.documents, key=lambda d: len(d.text))[:3])
    if side == "stock":
        store = SimpleVectorStore()
        parser: Any = SentenceSplitter()

        def stored() -> list[Any]:
            return list(store.data.embedding_dict)

        def stored_refs() -> set[str]:
            return set(store.data.text_id_to_ref_doc_id.values())
    else:
        folder = env.work / f"ingest-{time.monotonic_ns()}"
        store = ContextKitVectorStore(folder, model=env.embedder.model_name)
        parser = ContextKitNodeParser() if side == "contextkit" else SentenceSplitter()

        def stored() -> list[Any]:
            return store.get_nodes()

        def stored_refs() -> set[str]:
            return {n.ref_doc_id for n in store.get_nodes()}
    try:
        pipeline = IngestionPipeline(transformations=[parser, env.embed_model], docstore=SimpleDocumentStore(),
                                     vector_store=store)
        first = pipeline.run(documents=docs)
        n_first = len(stored())
        second = pipeline.run(documents=copy_documents(docs))
        edited = copy_documents(docs)
        edited[0].set_content(edited[0].text + "\n\nAn added closing paragraph about the PEP's review.\n")
        third = pipeline.run(documents=edited)
        n_third = len(stored())
        refs_third = {n.ref_doc_id for n in third}
        current = [n for n in first if n.ref_doc_id != docs[0].id_] + list(third)
        if side == "stock":  # SimpleVectorStore keeps no text: the docs build the index from the nodes
            index = VectorStoreIndex(current, embed_model=env.embed_model)
        else:  # a vector store that keeps the text: the docs' from_vector_store
            index = VectorStoreIndex.from_vector_store(store, embed_model=env.embed_model)
        response = query_engine(env, side, llm, index=index).query(QUESTION)
        expect = len(current)
        return {"first_run_nodes>0": len(first) > 0, "first_run_all_stored": n_first == len(first),
                "rerun_unchanged_nodes": len(second), "edit_reparses_only_that_doc": refs_third == {docs[0].id_},
                "upsert_replaced_old_nodes": n_third == expect, "docstore_docs": len(pipeline.docstore.docs),
                "stored_docs": len(stored_refs()), "answer": str(response) == ANSWER,
                "every_source_node_text_in_prompt": _shown(llm, response.source_nodes),
                "~source_nodes": len(response.source_nodes),
                "source_nodes": len(response.source_nodes) > 0}
    finally:
        if side != "stock":
            store.close()


PROCESS = ("process_peps", "Process PEPs: how Python is run, PEP purpose and guidelines, style guides, "
           "releases, governance and voting")
OTHER = ("other_peps", "Informational and Standards Track PEPs: the Zen of Python, release schedules, "
         "language features")


def tools(env: Env, side: str, llm: Any) -> list[Any]:
    from llama_index.core.tools import QueryEngineTool
    from llama_index.core.vector_stores import FilterOperator, MetadataFilter, MetadataFilters

    out = []
    for (name, description), op in ((PROCESS, FilterOperator.EQ), (OTHER, FilterOperator.NE)):
        filters = MetadataFilters(filters=[MetadataFilter(key="pep_type", value="Process", operator=op)])
        out.append(QueryEngineTool.from_defaults(query_engine(env, side, llm, filters=filters), name=name,
                                                 description=description))
    return out


def ex_sub_question(env: Env, side: str, llm: RecordingLLM) -> dict[str, Any]:
    from llama_index.core.query_engine import SubQuestionQueryEngine
    from llama_index.core.question_gen import LLMQuestionGenerator

    from contextkit.integrations.llamaindex import ContextKitSynthesizer

    synth = ContextKitSynthesizer(llm=llm) if side != "stock" else None
    engine = SubQuestionQueryEngine.from_defaults(query_engine_tools=tools(env, side, llm), llm=llm,
                                                  question_gen=LLMQuestionGenerator.from_defaults(llm=llm),
                                                  response_synthesizer=synth, verbose=False)
    response = engine.query("How do the Process PEPs and the other PEPs differ in what they ask of authors?")
    kinds = llm.kinds()
    subs = [n for n in response.source_nodes if str(n.node.get_content()).startswith("Sub question:")]
    final = llm.calls[-1]["text"]
    return {"answer": str(response) == ANSWER, "calls": sorted(kinds), "sub_answers_as_sources": len(subs),
            "final_prompt_has_both_sub_answers": all(t in final for t in ("process_peps", "other_peps")),
            "source_nodes": len(response.source_nodes) > 0}


def ex_router(env: Env, side: str, llm: RecordingLLM) -> dict[str, Any]:
    from llama_index.core.query_engine import RouterQueryEngine
    from llama_index.core.selectors import LLMSingleSelector

    from contextkit.integrations.llamaindex import ContextKitSynthesizer

    kwargs = {"summarizer": ContextKitSynthesizer(llm=llm)} if side != "stock" else {}
    engine = RouterQueryEngine(selector=LLMSingleSelector.from_defaults(llm=llm),
                               query_engine_tools=tools(env, side, llm), llm=llm, **kwargs)
    response = engine.query(ROUTED)
    selected = response.metadata.get("selector_result") if response.metadata else None
    inds = [s.index for s in selected.selections] if selected is not None else None
    return {"answer": str(response) == ANSWER, "selected": inds, "calls": llm.kinds(),
            "every_source_node_text_in_prompt": _shown(llm, response.source_nodes),
            "source_nodes": len(response.source_nodes) > 0,
            "sources_are_process_peps": all(n.node.metadata.get("pep_type") == "Process"
                                            for n in response.source_nodes)}


def ex_agent(env: Env, side: str, llm: RecordingLLM) -> dict[str, Any]:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.tools import QueryEngineTool

    tool = QueryEngineTool.from_defaults(query_engine(env, side, llm), name="pep_search",
                                         description="Answers questions about Python Enhancement Proposals (PEPs).")
    agent = FunctionAgent(tools=[tool], llm=llm,
                          system_prompt="You answer questions about Python PEPs with the pep_search tool.")

    async def run() -> Any:
        return await agent.run(user_msg=QUESTION)

    response = asyncio.run(run())
    results = response.tool_calls
    return {"answer": str(response.response.content) == ANSWER,
            "tools_called": [(r.tool_name, r.tool_kwargs) for r in results],
            "tool_output": [str(r.tool_output.content) == ANSWER for r in results],
            "tool_sources": [len(getattr(r.tool_output.raw_output, "source_nodes", []) or []) > 0 for r in results],
            "calls": llm.kinds()}


def ex_filters(env: Env, side: str, llm: RecordingLLM) -> dict[str, Any]:
    from llama_index.core.vector_stores import FilterOperator, MetadataFilter, MetadataFilters

    index = env.indexes["stock"] if side == "stock" else env.store_index[side]
    eq = MetadataFilters(filters=[MetadataFilter(key="pep_type", value="Informational")])
    names = sorted({d.metadata["file_name"] for d in env.documents})[1::3]
    isin = MetadataFilters(filters=[MetadataFilter(key="file_name", value=names, operator=FilterOperator.IN)])
    response = query_engine(env, side, llm, index=index, filters=eq).query(FILTERED)
    hits = index.as_retriever(similarity_top_k=env.top_k, filters=isin).retrieve(QUESTION)
    matching = {d.metadata["file_name"] for d in env.documents if d.metadata["pep_type"] == "Informational"}
    return {"answer": str(response) == ANSWER, "source_nodes": len(response.source_nodes) > 0,
            "every_source_node_text_in_prompt": _shown(llm, response.source_nodes),
            "query_filter_respected": all(n.node.metadata.get("pep_type") == "Informational"
                                          for n in response.source_nodes),
            "query_sources_from_matching_docs": {n.node.metadata["file_name"] for n in response.source_nodes}
            <= matching,
            "retriever_in_filter_respected": all(h.node.metadata["file_name"] in names for h in hits),
            "retriever_top_k_filled": len(hits) == env.top_k, "~source_nodes": len(response.source_nodes)}


def _norm(text: str) -> str:
    return " ".join(html.unescape(text).split())


def _shown(llm: RecordingLLM, nodes: list[Any]) -> bool:
    """Whether the text of every node the response lists as a source reached an answer prompt."""
    prompt = _norm(_prompt_text(llm))
    return bool(nodes) and all(_norm(n.node.get_content()) in prompt for n in nodes)


def ex_sentence_window(env: Env, side: str, llm: RecordingLLM) -> dict[str, Any]:
    from llama_index.core.postprocessor import MetadataReplacementPostProcessor

    from contextkit.integrations.llamaindex import contextkit_query_engine

    replace = MetadataReplacementPostProcessor(target_metadata_key="window")
    if side == "stock":
        engine = env.window_index.as_query_engine(llm=llm, similarity_top_k=env.top_k, node_postprocessors=[replace])
    else:
        engine = contextkit_query_engine(env.window_index, llm, similarity_top_k=env.top_k,
                                         node_postprocessors=[replace, budget(llm)])
    response = engine.query("How are modules deprecated and removed from the standard library?")
    hits = env.window_index.as_retriever(similarity_top_k=env.top_k).retrieve(
        "How are modules deprecated and removed from the standard library?")
    prompt = _norm(_prompt_text(llm))
    return {"answer": str(response) == ANSWER, "source_nodes": len(response.source_nodes) > 0,
            "every_retrieved_sentence_in_prompt": all(_norm(h.node.metadata["original_text"]) in prompt
                                                      for h in hits),
            "every_window_in_prompt": all(_norm(h.node.metadata["window"]) in prompt for h in hits),
            "~source_nodes": len(response.source_nodes),
            "llm_calls": len(llm.calls)}


def rag_workflow(retriever: Any, llm: Any, synthesizer: Any, after_rerank: list[Any]) -> Any:
    """LlamaIndex's "RAG workflow with reranking" example (its ingest step is the shared index)."""
    from llama_index.core.postprocessor.llm_rerank import LLMRerank
    from llama_index.core.workflow import Context, Event, StartEvent, StopEvent, Workflow, step

    class RetrieverEvent(Event):
        nodes: list[Any]

    class RerankEvent(Event):
        nodes: list[Any]

    class RAGWorkflow(Workflow):
        @step
        async def retrieve(self, ctx: Context, ev: StartEvent) -> RetrieverEvent | None:
            query = ev.get("query")
            if not query:
                return None
            await ctx.store.set("query", query)
            return RetrieverEvent(nodes=await retriever.aretrieve(query))

        @step
        async def rerank(self, ctx: Context, ev: RetrieverEvent) -> RerankEvent:
            ranker = LLMRerank(choice_batch_size=5, top_n=3, llm=llm)
            query = await ctx.store.get("query", default=None)
            nodes = ranker.postprocess_nodes(ev.nodes, query_str=query)
            for pp in after_rerank:
                nodes = pp.postprocess_nodes(nodes, query_str=query)
            return RerankEvent(nodes=nodes)

        @step
        async def synthesize(self, ctx: Context, ev: RerankEvent) -> StopEvent:
            query = await ctx.store.get("query", default=None)
            return StopEvent(result=await synthesizer.asynthesize(query, nodes=ev.nodes))

    return RAGWorkflow(timeout=120)


def ex_rag_workflow(env: Env, side: str, llm: RecordingLLM) -> dict[str, Any]:
    from llama_index.core.response_synthesizers import CompactAndRefine

    from contextkit.integrations.llamaindex import ContextKitSynthesizer

    retriever = env.indexes[side].as_retriever(similarity_top_k=env.top_k)
    if side == "stock":
        wf = rag_workflow(retriever, llm, CompactAndRefine(llm=llm, streaming=True), [])
    else:
        wf = rag_workflow(retriever, llm, ContextKitSynthesizer(llm=llm, streaming=True), [budget(llm)])

    async def run() -> tuple[Any, str]:
        result = await wf.run(query=QUESTION)
        text = "".join([t async for t in result.async_response_gen()])
        return result, text

    result, text = asyncio.run(run())
    kinds = llm.kinds()
    return {"rerank_calls": kinds.count("rerank"), "answer_calls": kinds.count("answer"),
            "streamed_answer": text == ANSWER, "reranked_nodes<=3": 0 < len(result.source_nodes) <= 3}


EXAMPLES: dict[str, Callable[[Env, str, RecordingLLM], dict[str, Any]]] = {
    "1 starter": ex_starter, "2 chat (condense_plus_context)": ex_chat, "3 streaming query": ex_streaming,
    "4 ingestion pipeline + docstore": ex_ingestion, "5 SubQuestionQueryEngine": ex_sub_question,
    "6 RouterQueryEngine": ex_router, "7 FunctionAgent + tool": ex_agent, "8 metadata filters": ex_filters,
    "9 sentence window": ex_sentence_window, "10 RAG workflow (rerank)": ex_rag_workflow,
}


@dataclass
class Outcome:
    checks: dict[str, Any]
    tokens: int
    calls: int
    seconds: float
    error: str | None = None
    per_call: list[tuple[str, int]] = field(default_factory=list)


def run_example(env: Env, fn: Callable[..., dict[str, Any]], side: str) -> Outcome:
    llm = RecordingLLM()
    Settings.llm = llm
    t0 = time.perf_counter()
    try:
        checks = fn(env, side, llm)
        error = None
    except Exception as exc:  # reported in the table, the other examples still run
        checks, error = {}, f"{type(exc).__name__}: {exc}"
    return Outcome(checks, llm.tokens(), len(llm.calls), time.perf_counter() - t0, error,
                   [(c["kind"], c["tokens"]) for c in llm.calls])


def differences(outcomes: dict[str, Outcome]) -> list[str]:
    """Every check whose value is not the same on every side (and any side that raised)."""
    out = [f"{side} raised {o.error}" for side, o in outcomes.items() if o.error]
    keys = sorted(k for k in set().union(*(o.checks for o in outcomes.values())) if not k.startswith("~"))
    for key in keys:
        values = {side: o.checks.get(key, "<missing>") for side, o in outcomes.items()}
        if len({repr(v) for v in values.values()}) > 1:
            out.append(f"{key}: " + ", ".join(f"{side} {v!r}" for side, v in values.items()))
    return out


class _Catch(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.name}: {record.getMessage()}")


def off_topic(env: Env, side: str) -> dict[str, Any]:
    """The off-topic question through the starter: prompt tokens, and whether anything warned."""
    from contextkit.integrations.llamaindex import ContextKitRetriever, contextkit_query_engine

    llm = RecordingLLM()
    Settings.llm = llm
    catch = _Catch()
    root = logging.getLogger()
    root.addHandler(catch)
    retriever = None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if side == "contextkit retriever":
                retriever = ContextKitRetriever(env.stores["contextkit"].client, mode="dense", similarity_top_k=env.top_k,
                                                embedder=env.embedder)
                response = contextkit_query_engine(retriever, llm).query(OFF_TOPIC)
            else:
                response = query_engine(env, side, llm).query(OFF_TOPIC)
    finally:
        root.removeHandler(catch)
        if retriever is not None:
            retriever.close()
    report = (response.metadata or {}).get("contextkit") or {}
    messages = catch.records + [str(w.message) for w in caught
                                if not issubclass(w.category, DeprecationWarning | PendingDeprecationWarning)]
    return {"side": side, "prompt tokens": llm.tokens(), "calls": len(llm.calls),
            "source nodes": len(response.source_nodes),
            "off_topic": (report.get("relevance") or {}).get("off_topic", "-"),
            "warned": "yes" if messages else "no", "warning": messages[0][:90] if messages else ""}


# --------------------------------------------------------------------- main
def pick_files(limit: int) -> list[Path]:
    files = sorted(PEPS.glob("*.rst"))[:limit]
    if not files:
        raise SystemExit(f"no PEP files under {PEPS}")
    return files


def table(rows: list[dict[str, Any]], cols: list[str], title: str = "") -> None:
    def cell(v: Any) -> str:
        return f"{v:,.2f}" if isinstance(v, float) else (f"{v:,}" if isinstance(v, int) and not isinstance(v, bool)
                                                          else str(v))

    if title:
        print(f"\n{title}")
    cells = [[cell(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(cols)]
    print("  " + "  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    print("  " + "  ".join("-" * w for w in widths))
    for row in cells:
        print("  " + "  ".join(v.rjust(w) if re.fullmatch(r"[\d,.]+", v) else v.ljust(w) for v, w in zip(row, widths)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=20, help="first N PEP files by name (default 20)")
    ap.add_argument("--top-k", type=int, default=8, help="similarity_top_k on every side (default 8)")
    ap.add_argument("--window-docs", type=int, default=5,
                    help="the N smallest PEPs of the slice make the sentence-window index (default 5)")
    ap.add_argument("--only", default=None, help="run only the examples whose name contains this")
    args = ap.parse_args()

    from contextkit.embedders import Embedder

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    files = pick_files(args.limit)
    log("loading the embedding model ...")
    embedder = Embedder()
    embedder.embed(["warm up the model"])
    work = Path(tempfile.mkdtemp(prefix="ck-bench-li-ex-"))
    env = Env(files=files, embedder=embedder, work=work, top_k=args.top_k, window_docs=args.window_docs, log=log)
    try:
        env.build()
        corpus_tokens = sum(count(d.text) for d in env.documents)
        print(f"corpus: the first {len(files)} PEP files by name ({files[0].name} .. {files[-1].name}), "
              f"{corpus_tokens:,} {ENCODING} tokens; top-k {env.top_k} on every side; LLM: a recording "
              f"FunctionCallingLLM, context_window {CONTEXT_WINDOW:,}, num_output {NUM_OUTPUT:,}")
        table(env.builds, ["index", "nodes", "build_s"], "indexes (each built once, shared by the examples)")

        rows, diffs = [], {}
        for name, fn in EXAMPLES.items():
            if args.only and args.only not in name:
                continue
            log(f"example {name} ...")
            outcomes = {side: run_example(env, fn, side) for side in SIDES}
            d = differences(outcomes)
            diffs[name] = (d, outcomes)
            stock, ck, same = (outcomes[s] for s in SIDES)
            rows.append({"example": name, "checks": len([k for k in set().union(*(o.checks for o in outcomes.values()))
                                                          if not k.startswith("~")]),
                         "same": "yes" if not d else f"NO ({len(d)})",
                         "calls": "/".join(str(o.calls) for o in outcomes.values()),
                         "stock tok": stock.tokens, "ck tok": ck.tokens,
                         "ck/stock": ck.tokens / stock.tokens if stock.tokens else "-",
                         "ck same-nodes tok": same.tokens,
                         "same-nodes/stock": same.tokens / stock.tokens if stock.tokens else "-",
                         "<= stock": "/".join("yes" if o.tokens <= stock.tokens else "NO" for o in (ck, same)),
                         "s": "/".join(f"{o.seconds:.2f}" for o in outcomes.values())})
        table(rows, ["example", "checks", "same", "calls", "stock tok", "ck tok", "ck/stock", "ck same-nodes tok",
                     "same-nodes/stock", "<= stock", "s"],
              "examples: behaviour checks (same = every check equal on all three sides), LLM calls and seconds "
              "(stock/contextkit/ck same-nodes), prompt tokens sent to the LLM (cl100k, all calls of the example). "
              "contextkit = the plug-in as documented; ck same-nodes = contextkit's postprocessor, synthesizer, "
              "chat engine and vector store over stock's SentenceSplitter nodes (the same evidence)")
        for name, (d, _) in diffs.items():
            if d:
                print(f"  {name}: " + "; ".join(d))
        print("\n  checks per example (stock's values; the other sides' are equal unless listed above; ~ marks "
              "information, not compared: stock | contextkit | ck same-nodes):")
        for name, (_, outcomes) in diffs.items():
            info = sorted({k for o in outcomes.values() for k in o.checks if k.startswith("~")})
            print(f"  {name}: " + ", ".join(f"{k}={v}" for k, v in outcomes["stock"].checks.items()
                                            if not k.startswith("~"))
                  + "".join(f", {k}=" + " | ".join(str(o.checks.get(k)) for o in outcomes.values()) for k in info))
        print("\n  prompt tokens per call, by what the call was for (stock | contextkit | ck same-nodes), where a "
              "contextkit side sent more than stock:")
        for name, (_, outcomes) in diffs.items():
            if any(outcomes[s].tokens > outcomes["stock"].tokens for s in SIDES[1:]):
                print(f"  {name}: " + " | ".join(" ".join(f"{k}:{t:,}" for k, t in o.per_call)
                                                for o in outcomes.values()))

        if not args.only:
            log("off-topic question ...")
            off = [off_topic(env, side) for side in (*SIDES, HAND, "contextkit retriever")]
            table(off, ["side", "prompt tokens", "calls", "source nodes", "off_topic", "warned", "warning"],
                  f"off-topic question through the starter: {OFF_TOPIC!r} (contextkit retriever = "
                  "contextkit_query_engine over ContextKitRetriever(mode='dense') on 8's ContextKitVectorStore "
                  "folder)")
    finally:
        env.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

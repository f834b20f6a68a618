"""contextkit inside LlamaIndex apps: parser, retriever, postprocessor, prompt path, memory.

``import contextkit`` never imports LlamaIndex; importing this package does, and
checks the installed llama-index-core version first.

=============================  ==============================================================
plug-in point                  contextkit piece
=============================  ==============================================================
``IngestionPipeline``,         :class:`ContextKitNodeParser` (token-exact chunks, offsets)
``Settings.node_parser``
``embed_model=``               :class:`ContextKitEmbedding` (windowed, ONNX on CPU, offline)
retrievers, query engines      :class:`ContextKitRetriever` (dense / BM25 / hybrid index)
``node_postprocessors=[...]``  :class:`ContextBudgetPostprocessor` (merge, dedup, order, budget)
``response_synthesizer=``      :class:`ContextKitSynthesizer` (prompt built by contextkit, on LlamaIndex's
                               prompt path); :func:`contextkit_query_engine` keeps ``streaming=``
chat                           :class:`ContextKitChatEngine` (:func:`contextkit_chat_engine` for
                               ``as_chat_engine(chat_mode="condense_plus_context")``), :func:`contextkit_memory`
``vector_store=``              :class:`ContextKitVectorStore` (a contextkit index folder)
agents (``FunctionAgent``,     :class:`ContextKitFunctionAgent`, :class:`ContextKitAgentMemory` (every LLM call of
``AgentWorkflow``)             a run is a :class:`~contextkit.Session`'s request)
=============================  ==============================================================
"""

from contextkit.integrations.llamaindex._compat import SUPPORTED, LlamaIndexVersionError, check_version

check_version()

from contextkit.integrations.llamaindex.agent_memory import (  # noqa: E402
    ContextKitAgentMemory,
    ContextKitFunctionAgent,
)
from contextkit.integrations.llamaindex.chat import ContextKitChatEngine, contextkit_chat_engine  # noqa: E402
from contextkit.integrations.llamaindex.convert import (  # noqa: E402
    ConversionError,
    chunks_from_nodes,
    documents_from_llamaindex,
    ingest_llamaindex_documents,
    nodes_from_chunks,
)
from contextkit.integrations.llamaindex.embedding import ContextKitEmbedding  # noqa: E402
from contextkit.integrations.llamaindex.memory import (  # noqa: E402
    ContextKitMemory,
    ContextKitSummaryBlock,
    contextkit_memory,
)
from contextkit.integrations.llamaindex.node_parser import ContextKitNodeParser  # noqa: E402
from contextkit.integrations.llamaindex.postprocessor import BudgetReport, ContextBudgetPostprocessor  # noqa: E402
from contextkit.integrations.llamaindex.query_engine import contextkit_query_engine  # noqa: E402
from contextkit.integrations.llamaindex.retriever import ContextKitRetriever  # noqa: E402
from contextkit.integrations.llamaindex.synthesizer import ContextKitSynthesizer  # noqa: E402
from contextkit.integrations.llamaindex.vector_store import ContextKitVectorStore  # noqa: E402

__all__ = [
    "SUPPORTED",
    "BudgetReport",
    "ContextBudgetPostprocessor",
    "ContextKitAgentMemory",
    "ContextKitChatEngine",
    "ContextKitEmbedding",
    "ContextKitFunctionAgent",
    "ContextKitMemory",
    "ContextKitNodeParser",
    "ContextKitRetriever",
    "ContextKitSummaryBlock",
    "ContextKitSynthesizer",
    "ContextKitVectorStore",
    "ConversionError",
    "LlamaIndexVersionError",
    "check_version",
    "chunks_from_nodes",
    "contextkit_chat_engine",
    "contextkit_memory",
    "contextkit_query_engine",
    "documents_from_llamaindex",
    "ingest_llamaindex_documents",
    "nodes_from_chunks",
]

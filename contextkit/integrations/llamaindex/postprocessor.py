"""``ContextBudgetPostprocessor``: evidence hygiene and an exact token budget for any query engine.

Use it wherever LlamaIndex takes ``node_postprocessors=[...]``::

    engine = index.as_query_engine(
        llm=llm, similarity_top_k=12,
        node_postprocessors=[ContextBudgetPostprocessor.from_llm(llm)])

On the retrieved nodes it does, in this order, what contextkit's assembler does
to evidence (reusing its code, so the two agree):

1. merges sentence windows (``SentenceWindowNodeParser`` with
   ``MetadataReplacementPostProcessor``) of one source that overlap, in the order of
   their sentences' offsets (see ``_windows.py``); then merges nodes of one source
   document whose character ranges overlap or touch
   (``start_char_idx``/``end_char_idx`` and the SOURCE relationship), only where
   their texts agree on the shared range; the merged node keeps the best score
   and the id and metadata of the part contextkit's merge names it after, and lists the merged ids under
   ``metadata["contextkit_merged_ids"]`` (chunks that a splitter parted with
   white space it stripped neither overlap nor touch, and stay apart);
2. drops exact and near duplicates across documents, keeping the better-scored
   copy (:class:`~contextkit.assembly.passages.Deduplicator`), and a node whose
   text lies wholly inside a kept one (a mirrored document's chunk inside a
   merged run); a node that holds kept nodes replaces them when it fits, taking
   their best score, so no kept node's text is inside another's;
3. takes nodes best-first while they fit ``token_budget`` (each node counted as
   ``node.get_content(metadata_mode=MetadataMode.LLM)``, the text the response
   synthesizer puts in the prompt); the first node that does not fit is cut at a
   sentence end (``metadata["contextkit_truncated"] = True``) and the rest are
   dropped. The kept nodes' counts never sum to more than the budget;
4. orders what is kept: ``lost_in_the_middle`` (strongest at both ends, the
   default), ``score`` (best first) or ``document`` (source, then offset).

The bookkeeping keys are excluded from the LLM and embedding metadata modes, so
they never reach the prompt. Input nodes are never modified: merged and cut
nodes are copies. :attr:`ContextBudgetPostprocessor.last_report` says what the
last call merged, dropped and cut, and why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import (
    BaseNode,
    ImageNode,
    IndexNode,
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    TextNode,
)
from pydantic import BaseModel

from contextkit.assembly.passages import merge_overlapping, order_items
from contextkit.core.errors import InvalidArgumentError
from contextkit.core.records import EvidenceItem
from contextkit.core.text import Deduplicator, normalise_text, truncate_at_sentence
from contextkit.core.tokenizers import Tokenizer, get_tokenizer
from contextkit.integrations.llamaindex._budget import prompt_budget, resolve_tokenizer
from contextkit.integrations.llamaindex._windows import merge_windows

__all__ = ["MERGED_KEY", "TRUNCATED_KEY", "BudgetReport", "ContextBudgetPostprocessor", "NodeReport"]

#: Metadata key of a merged node: the ids of the nodes it was made from, in document order.
MERGED_KEY = "contextkit_merged_ids"
#: Metadata key of the node cut at a sentence end to fit the budget.
TRUNCATED_KEY = "contextkit_truncated"

#: Tokens the question may take in the prompt, when ``from_llm`` estimates the reserve.
DEFAULT_QUESTION_TOKENS = 256

NodeStatus = Literal["kept", "truncated", "merged", "dropped"]
DropReason = Literal["empty", "same_node", "duplicate", "near_duplicate", "budget"]


class NodeReport(BaseModel):
    """One input node and what became of it."""

    node_id: str
    status: NodeStatus
    reason: DropReason | None = None
    detail: str | None = None
    score: float | None = None
    tokens: int = 0  # tokens of its content in the output (0 when not in it)


class BudgetReport(BaseModel):
    """What one call did. ``tokens`` is the sum of the output nodes' content counts."""

    budget: int
    tokenizer: str
    order: str
    nodes_in: int
    nodes_out: int
    tokens: int
    overhead_tokens: int = 0  # per_node_overhead times nodes_out, also within the budget
    nodes: list[NodeReport]

    def ids(self, status: NodeStatus, reason: DropReason | None = None) -> list[str]:
        """Ids of the input nodes with that status (and reason)."""
        return [n.node_id for n in self.nodes if n.status == status and (reason is None or n.reason == reason)]


class ContextBudgetPostprocessor(BaseNodePostprocessor):
    """Merge overlapping nodes, drop duplicates, cut to a token budget, order against lost-in-the-middle."""

    token_budget: int | None = Field(
        default=None, gt=0, description="tokens the kept nodes' content may use in all; None: taken from "
        "Settings.llm at each call, as from_llm() takes it")
    tokenizer: str | None = Field(default=None, description="tiktoken encoding or Hugging Face tokenizer; "
                                  "None: Settings.tokenizer when set, else cl100k_base")
    order: Literal["lost_in_the_middle", "score", "document"] = Field(
        default="lost_in_the_middle", description="order of the kept nodes")
    merge_passages: bool = Field(default=True, description="merge overlapping or touching nodes of one document")
    deduplicate: bool = Field(default=True, description="drop exact (and near) duplicates")
    near_duplicate_threshold: float | None = Field(
        default=0.8, ge=0.0, le=1.0,
        description="Jaccard similarity of sentence sets at which a node is a near duplicate; None: exact only")
    truncate: bool = Field(default=True, description="cut the first node that does not fit at a sentence end")
    per_node_overhead: int = Field(
        default=0, ge=0, description="tokens charged per kept node on top of its content (separators)")

    _tok: Tokenizer | None = PrivateAttr(default=None)
    _tok_name: str | None = PrivateAttr(default=None)
    _last_report: BudgetReport | None = PrivateAttr(default=None)

    def model_post_init(self, __context: Any) -> None:
        self._tokenizer()  # an unknown tokenizer fails here, not in the middle of a query

    @classmethod
    def class_name(cls) -> str:
        return "ContextBudgetPostprocessor"

    @classmethod
    def from_llm(cls, llm: Any, reserve: int | None = None, *, question_tokens: int = DEFAULT_QUESTION_TOKENS,
                 per_node_overhead: int | None = None, synthesizer: Literal["llamaindex", "contextkit"] = "llamaindex",
                 **kwargs: Any) -> ContextBudgetPostprocessor:
        """A budget of ``context_window - num_output - reserve`` of ``llm.metadata``.

        ``reserve`` is what the prompt template and the question take. By default
        it is what LlamaIndex's default ``compact``/``refine`` synthesizers set
        aside when they pack nodes into a prompt: the larger default QA/refine
        template (as this LLM gets it), the LLM's system prompt, the response
        padding of 500 tokens they keep for a refine round, plus
        ``question_tokens`` for the question. Then the kept nodes land in one LLM
        call. Pass your own reserve with custom templates, long questions or a
        synthesizer without that padding. ``per_node_overhead=1`` pays for the
        blank line the synthesizer puts between nodes.

        ``synthesizer="contextkit"``: the nodes go to a :class:`ContextKitSynthesizer`,
        which uses none of LlamaIndex's templates or refine padding and fits the
        evidence to the window itself, exactly; the reserve is then only the question
        and contextkit's instructions (head and tail): the synthesizer trims the rest exactly, so the
        window is used in full.
        ``num_output == -1`` counts as LlamaIndex's default (256).
        """
        if synthesizer not in ("llamaindex", "contextkit"):
            raise InvalidArgumentError(f"synthesizer must be 'llamaindex' or 'contextkit', not {synthesizer!r}")
        tok = resolve_tokenizer(kwargs.get("tokenizer"))
        if reserve is None:
            reserve = (_contextkit_reserve(llm, tok) if synthesizer == "contextkit"
                       else _default_reserve(llm, tok, question_tokens))
        if per_node_overhead is None:
            per_node_overhead = 0 if synthesizer == "contextkit" else 1
        try:
            budget = prompt_budget(llm, reserve)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{exc} (no room for nodes)") from None
        return cls(token_budget=budget, per_node_overhead=per_node_overhead, **kwargs)

    def budget(self) -> int:
        """The budget of the next call: ``token_budget``, else what ``from_llm(Settings.llm)`` would give."""
        if self.token_budget is not None:
            return self.token_budget
        from llama_index.core.settings import Settings

        llm = Settings.llm
        return prompt_budget(llm, _default_reserve(llm, self._tokenizer(), DEFAULT_QUESTION_TOKENS))

    # ------------------------------------------------------------------ report
    @property
    def last_report(self) -> BudgetReport | None:
        """What the last call did (None before the first)."""
        return self._last_report

    def get_last_report(self) -> BudgetReport | None:
        return self._last_report

    # -------------------------------------------------------------------- work
    def _tokenizer(self) -> Tokenizer:
        if self.tokenizer is None:  # Settings.tokenizer may change between calls
            return resolve_tokenizer(None)
        if self._tok is None or self._tok_name != self.tokenizer:
            self._tok, self._tok_name = get_tokenizer(self.tokenizer), self.tokenizer
        return self._tok

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        tok = self._tokenizer()
        rows = [NodeReport(node_id=n.node.node_id, status="kept", score=n.score) for n in nodes]
        live = _live(nodes, rows)
        if self.merge_passages:  # sentence windows first: their offsets are their centre sentences'
            nodes, live, absorbed = merge_windows(nodes, live, _copy, MERGED_KEY)
            for gone, into in absorbed.items():
                _mark(rows, gone, None, f"window merged into {nodes[into].node.node_id}", status="merged")
            for into in set(absorbed.values()):
                rows[into].detail = f"windows merged: {', '.join(nodes[into].node.metadata[MERGED_KEY])}"
        index_of = {nodes[i].node.node_id: i for i in live}
        items, out = self._merge(nodes, live, index_of, rows)
        budget = self.budget()
        fit = _Fit(self, tok, rows, index_of, out,
                   Deduplicator(self.near_duplicate_threshold) if self.deduplicate else None, budget)
        for item in order_items(items, "score"):  # best first; ties on id
            fit.take(item)
        kept = fit.kept
        used = sum(k.tokens for k in kept.values())
        ordered = [kept[it.id].nws for it in order_items([_placed_item(k.item, k.nws) for k in kept.values()],
                                                             self.order)]
        self._last_report = BudgetReport(
            budget=budget, tokenizer=tok.name, order=self.order, nodes_in=len(nodes),
            nodes_out=len(ordered), tokens=used, overhead_tokens=self.per_node_overhead * len(ordered), nodes=rows)
        return ordered

    def _merge(self, nodes: list[NodeWithScore], live: list[int], index_of: dict[str, int],
               rows: list[NodeReport]) -> tuple[list[EvidenceItem], dict[str, NodeWithScore]]:
        """The live nodes as evidence items, overlapping ones merged (step 1); and the node each item stands for."""
        items = [_evidence(nodes[i], mergeable=self.merge_passages) for i in live]
        out: dict[str, NodeWithScore] = {nodes[i].node.node_id: nodes[i] for i in live}
        if not self.merge_passages:
            return items, out
        items, absorbed = merge_overlapping(items)
        for gone, into in absorbed.items():
            _mark(rows, index_of[gone], None, f"merged into {into}", status="merged")
            del out[gone]
        for item in items:
            parts = item.metadata.get("merged_ids")
            if parts:
                out[item.id] = _merged(item, [nodes[index_of[p]] for p in parts])
                rows[index_of[item.id]].detail = f"merged from {', '.join(parts)}"
        return items, out

    def _cut(self, nws: NodeWithScore, room: int, tok: Tokenizer) -> tuple[NodeWithScore, int] | None:
        """The node cut at a sentence end so its LLM content has at most ``room`` tokens (counted exactly)."""
        node = nws.node
        if not isinstance(node, TextNode) or isinstance(node, ImageNode) or room <= 0:
            return None
        text = node.text
        header = max(0, tok.count(node.get_content(metadata_mode=MetadataMode.LLM)) - tok.count(text))
        limit = room - header
        for _ in range(4):
            shown = truncate_at_sentence(text, limit, tok)
            if not shown or shown == text:
                return None
            update: dict[str, Any] = {"text": shown}
            if node.start_char_idx is not None and _offsets_ok(node, text):
                update["end_char_idx"] = node.start_char_idx + len(shown)
            cut = _copy(node, update, {TRUNCATED_KEY: True})
            n = tok.count(cut.get_content(metadata_mode=MetadataMode.LLM))
            if n <= room:
                return NodeWithScore(node=cut, score=nws.score), n
            limit -= n - room  # the header and the cut did not add up: try shorter
        return None


# ------------------------------------------------------------------- helpers
@dataclass(slots=True)
class _Kept:
    item: EvidenceItem
    nws: NodeWithScore
    tokens: int
    norm: str  # its text, normalised as the Deduplicator does


def _mark(rows: list[NodeReport], i: int, reason: DropReason | None, detail: str | None = None,
          status: NodeStatus = "dropped") -> None:
    rows[i].status, rows[i].reason, rows[i].detail = status, reason, detail


def _live(nodes: list[NodeWithScore], rows: list[NodeReport]) -> list[int]:
    """Indices of the nodes worth considering: the same node twice (two retrievers, a fusion)
    keeps its best-scored copy, and an empty node goes."""
    best: dict[str, int] = {}
    for i, n in enumerate(nodes):
        j = best.get(n.node.node_id)
        if j is None or _score(n) > _score(nodes[j]):
            best[n.node.node_id] = i
    live: list[int] = []
    for i, n in enumerate(nodes):
        if best[n.node.node_id] != i:
            _mark(rows, i, "same_node", f"the same node again (kept with score {nodes[best[n.node.node_id]].score})")
        elif not n.node.get_content(metadata_mode=MetadataMode.NONE).strip():
            _mark(rows, i, "empty")
        else:
            live.append(i)
    return live


@dataclass
class _Fit:
    """Steps 2 and 3 of one call: items taken best first while they fit, duplicates dropped.

    ``kept`` (by item id, in the order taken) never holds two nodes where one's text is
    inside the other's, and its counts plus the per-node overhead never exceed the budget."""

    post: ContextBudgetPostprocessor
    tok: Tokenizer
    rows: list[NodeReport]
    index_of: dict[str, int]
    out: dict[str, NodeWithScore]
    dedup: Deduplicator | None
    room: int
    kept: dict[str, _Kept] = field(default_factory=dict)
    full: bool = False  # a node was cut (or could not be): nothing after it goes in

    def take(self, item: EvidenceItem) -> None:
        i = self.index_of[item.id]
        if self.full:
            _mark(self.rows, i, "budget", "after the node cut to fit")
            return
        norm = normalise_text(item.text)
        if self._repeats(i, item, norm):
            return
        nws = self.out[item.id]
        count = self.tok.count(nws.node.get_content(metadata_mode=MetadataMode.LLM))
        overhead = self.post.per_node_overhead
        held = [k for k in self.kept.values() if k.norm in norm] if self.dedup is not None else []
        if held:  # it holds kept nodes (of another document): it replaces them, or goes
            replaced = self._replace(i, item, nws, count, held)
            if replaced is None:
                return
            nws = replaced
        elif count + overhead > self.room:
            self.full = True
            cut = self._cut(i, nws, count)
            if cut is None:
                return
            nws, count, norm = cut
        self.room -= count + overhead
        self.rows[i].tokens = count
        self.kept[item.id] = _Kept(item, nws, count, norm)

    def _repeats(self, i: int, item: EvidenceItem, norm: str) -> bool:
        """Dropped as a duplicate: all of it is in a kept node (e.g. a mirror's chunk in a merged run), or it
        repeats one (exactly or nearly)."""
        if self.dedup is None:
            return False
        inside = _holder(norm, self.kept)
        if inside is not None:
            detail = f"repeats {inside}" if norm == self.kept[inside].norm else f"contained in {inside}"
            _mark(self.rows, i, "duplicate", detail)
            return True
        dup = self.dedup.check(item.id, item.text)
        if dup is not None:
            _mark(self.rows, i, dup[0], f"repeats {dup[1]}")  # type: ignore[arg-type]
            return True
        return False

    def _replace(self, i: int, item: EvidenceItem, nws: NodeWithScore, count: int,
                 held: list[_Kept]) -> NodeWithScore | None:
        """The node in place of the kept nodes it holds, with their best score; None (dropped) when it
        does not fit even in the room they free."""
        overhead = self.post.per_node_overhead
        freed = sum(k.tokens + overhead for k in held)
        names = ", ".join(k.item.id for k in held)
        if count + overhead > self.room + freed:
            _mark(self.rows, i, "duplicate", f"holds {names}, kept; no room for the rest")
            return None
        for k in held:
            j = self.index_of[k.item.id]
            _mark(self.rows, j, "duplicate", f"contained in {item.id}, which replaced it")
            self.rows[j].tokens = 0
            del self.kept[k.item.id]
        self.room += freed
        best = max([nws.score, *(k.nws.score for k in held)], key=lambda v: -math.inf if v is None else v)
        self.rows[i].detail = f"replaces {names}, which it holds"
        return NodeWithScore(node=nws.node, score=best)

    def _cut(self, i: int, nws: NodeWithScore, count: int) -> tuple[NodeWithScore, int, str] | None:
        """The node cut at a sentence end to fit what is left: (the cut node, its tokens, its normalised
        text); None (dropped) when it cannot be cut, or the cut lies wholly in a kept node or holds one."""
        left = self.room - self.post.per_node_overhead
        cut = self.post._cut(nws, left, self.tok) if self.post.truncate else None
        if cut is None:
            _mark(self.rows, i, "budget", f"needs {count} tokens, {max(left, 0)} left")
            return None
        nws, n = cut
        norm = normalise_text(nws.node.get_content(metadata_mode=MetadataMode.NONE))
        inside = _holder(norm, self.kept) if self.dedup is not None else None
        if inside is not None or (self.dedup is not None and any(k.norm in norm for k in self.kept.values())):
            _mark(self.rows, i, "duplicate", f"cut to fit, it overlaps {inside or 'a kept node'} wholly")
            return None
        row = self.rows[i]
        row.status = "truncated"
        note = f"cut at a sentence end: {n} of {count} tokens"
        row.detail = f"{row.detail}; {note}" if row.detail else note
        return nws, n, norm


def _holder(norm: str, kept: dict[str, _Kept]) -> str | None:
    """The id of a kept node whose text holds all of ``norm``."""
    return next((key for key, k in kept.items() if norm in k.norm), None)


def _score(n: NodeWithScore) -> float:
    return n.score if n.score is not None else float("-inf")


def _contextkit_reserve(llm: Any, tok: Tokenizer) -> int:
    """What a ContextKitSynthesizer's prompt surely takes besides the evidence: its instructions (with their
    tags; twice, head and tail, where the window allows a prompt long enough to restate them) and the LLM's
    system prompt. The question and the documents' tags are left to the synthesizer, which fits the evidence
    exactly: handing it slightly more than fits fills the window."""
    from contextkit.integrations.llamaindex._prompt import RESTATE_MIN_TOKENS
    from contextkit.integrations.llamaindex.synthesizer import DEFAULT_INSTRUCTIONS

    instructions = tok.count(f"<instructions>\n{DEFAULT_INSTRUCTIONS}\n</instructions>\n")
    system = tok.count(getattr(llm, "system_prompt", None) or "")
    stated = 2 if prompt_budget(llm, 0) >= RESTATE_MIN_TOKENS else 1
    return stated * instructions + system


def _default_reserve(llm: Any, tok: Tokenizer, question_tokens: int) -> int:
    from llama_index.core.prompts.default_prompt_selectors import (
        DEFAULT_REFINE_PROMPT_SEL,
        DEFAULT_TEXT_QA_PROMPT_SEL,
    )
    from llama_index.core.prompts.prompt_utils import get_empty_prompt_txt
    from llama_index.core.response_synthesizers import refine

    # The padding refine keeps free for the answer: 500 since llama-index-core 0.14.22, none before.
    padding = int(getattr(refine, "DEFAULT_RESPONSE_PADDING_SIZE", 0))

    template = 0
    for selector in (DEFAULT_TEXT_QA_PROMPT_SEL, DEFAULT_REFINE_PROMPT_SEL):
        try:
            prompt = selector.select(llm=llm)
        except Exception:  # noqa: BLE001 - an object that only has .metadata: use the default
            prompt = selector.default_template
        template = max(template, tok.count(get_empty_prompt_txt(prompt)))
    system = tok.count(getattr(llm, "system_prompt", None) or "")
    return template + system + question_tokens + padding


def _source_id(node: BaseNode) -> str | None:
    relation = node.relationships.get(NodeRelationship.SOURCE)
    return getattr(relation, "node_id", None)  # None too for a list of sources


def _offsets_ok(node: BaseNode, text: str) -> bool:
    start, end = getattr(node, "start_char_idx", None), getattr(node, "end_char_idx", None)
    return start is not None and end is not None and end - start == len(text)


def _evidence(nws: NodeWithScore, mergeable: bool) -> EvidenceItem:
    """A node as an evidence item. Only plain text nodes with offsets that match their
    text are mergeable; their group is the source document *and* the metadata the LLM
    sees, so merging never hides a node's own header (a section title, a page)."""
    node = nws.node
    text = node.get_content(metadata_mode=MetadataMode.NONE)
    source = _source_id(node)
    group = start = end = None
    if (mergeable and source is not None and isinstance(node, TextNode)
            and not isinstance(node, (ImageNode, IndexNode)) and _offsets_ok(node, text)):
        group = f"{source}\x1f{node.get_metadata_str(mode=MetadataMode.LLM)}"
        start, end = node.start_char_idx, node.end_char_idx
    return EvidenceItem(id=node.node_id, text=text, source=source or "", score=nws.score, doc_id=group,
                        start=start, end=end)


def _placed_item(item: EvidenceItem, nws: NodeWithScore) -> EvidenceItem:
    """For ordering: the output node's score and its place in the document."""
    start = getattr(nws.node, "start_char_idx", None)
    return EvidenceItem(id=item.id, text="", source=item.source, score=nws.score, doc_id=item.source or None,
                        start=start)


def _copy(node: TextNode, update: dict[str, Any], extra: dict[str, Any]) -> TextNode:
    """A copy with new text and bookkeeping metadata that neither the LLM nor the embedder sees."""
    llm_hidden = [*node.excluded_llm_metadata_keys, *(k for k in extra if k not in node.excluded_llm_metadata_keys)]
    embed_hidden = [*node.excluded_embed_metadata_keys,
                    *(k for k in extra if k not in node.excluded_embed_metadata_keys)]
    return node.model_copy(update={
        **update,
        "metadata": {**node.metadata, **extra},
        "excluded_llm_metadata_keys": llm_hidden,
        "excluded_embed_metadata_keys": embed_hidden,
        "embedding": None,  # the text changed
    })


def _merged(item: EvidenceItem, parts: list[NodeWithScore]) -> NodeWithScore:
    """The merged node: the id, metadata and relationships of the part the merge is named after (the
    assembler's choice: ``item.id``), its text the union of the parts (a slice of the document);
    PREVIOUS from the part that starts first, NEXT from the part that ends last."""
    # only text nodes whose offsets match their text are merged (_evidence): both offsets are set
    nodes = cast(list[TextNode], [p.node for p in parts])
    head = next((n for n in nodes if n.node_id == item.id), nodes[0])
    first = min(nodes, key=lambda n: n.start_char_idx or 0)
    last = max(nodes, key=lambda n: n.end_char_idx or 0)
    relationships = dict(head.relationships)
    for key, part in ((NodeRelationship.PREVIOUS, first), (NodeRelationship.NEXT, last)):
        if key in part.relationships:
            relationships[key] = part.relationships[key]
        else:
            relationships.pop(key, None)
    node = _copy(head, {"text": item.text, "start_char_idx": item.start, "end_char_idx": item.end,
                        "relationships": relationships}, {MERGED_KEY: list(item.metadata["merged_ids"])})
    return NodeWithScore(node=node, score=item.score)

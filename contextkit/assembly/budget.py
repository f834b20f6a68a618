"""``assemble``: sections in, one prompt under an exact token budget out.

The order of work:

1. Pinned sections go in whole; if they alone exceed the budget, a
   :class:`BudgetError` says by how much.
2. Sections with a ``min_share`` get that much set aside; then sections take
   what they need in priority order, each up to its ``max_share``. Evidence is
   taken best first after overlapping passages are merged and duplicates
   dropped; the first item that does not fit is cut at a sentence end; history
   is taken newest first, whole turns only.
3. Every block is counted exactly. Blocks meet at newline-then-tag boundaries,
   where GPT tokenizers provably restart, so their counts add up to the count
   of the whole prompt; a tokenizer without that guarantee gets a full recount
   instead. If the total is over the budget (estimates are only estimates) the
   lowest-priority section gives tokens back; if under 99% with material left,
   its cut item grows. The budget is never exceeded.

The module is named for the budget, not ``assemble``: a submodule of that name would
replace the function :data:`contextkit.assembly.assemble` on the package once imported.
Preparing the sections lives in ``_prepare.py``, spending and settling in ``_settle.py``.
"""

from __future__ import annotations

import hashlib
import inspect
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pydantic import ConfigDict, Field

from contextkit.assembly._fill import MARKUPS, QUESTION_LABEL, SectionFill, lean_attributes
from contextkit.assembly._invisible import without_invisible
from contextkit.assembly._prepare import prepare, redacted
from contextkit.assembly._settle import settle, share_out
from contextkit.assembly._states import TAKEN, ItemStatus, Role, SectionStatus
from contextkit.assembly.messages import (
    OVERHEAD,
    ChatParts,
    ChatStyle,
    build_messages,
    chat_parts,
    chat_reserve,
    count_messages,
)
from contextkit.assembly.passages import EvidenceOrder
from contextkit.assembly.relevance import FillMode, index_min_similarity
from contextkit.assembly.render import Renderer
from contextkit.assembly.report import AssemblyReport, ItemReport, ReportedSectionStatus, SectionReport
from contextkit.assembly.sections import Section, SectionError
from contextkit.core.config import (
    DEFAULT_TOKENIZER,
    MAX_BUDGET,
    MAX_HISTORY_MESSAGES,
    MAX_QUERY_CHARS,
    check_limit,
    check_limit_option,
)
from contextkit.core.errors import BudgetError, InvalidArgumentError
from contextkit.core.profiles import ModelProfile, get_profile
from contextkit.core.settings import Settings, check_options
from contextkit.core.telemetry import assembly_figures, traced
from contextkit.core.text import Deduplicator
from contextkit.core.tokenizers import Tokenizer, get_tokenizer

if TYPE_CHECKING:  # pragma: no cover
    from contextkit.compressors.base import Redactor

__all__ = ["AssemblyOptions", "AssemblyResult", "BudgetError", "assemble", "resolve_budget"]


class _Result(NamedTuple):
    prompt: str
    report: AssemblyReport


class AssemblyResult(_Result):
    """``(prompt, report)``, and the same prompt as chat messages (:meth:`messages`)."""

    _chat: ChatParts | None = None  # set by assemble(); a result built by hand has no chat parts

    def __str__(self) -> str:
        return self.prompt

    def messages(self, style: ChatStyle = "openai") -> Any:
        """The prompt as chat messages in ``style`` (see :mod:`contextkit.assembly.messages`): a system
        message with the key instructions, the recent turns as real user/assistant messages, then one
        user message with the evidence, the summary of older turns, the question and the reminder."""
        if self._chat is None:
            raise SectionError("this result carries no chat parts: build it with assemble()")
        return build_messages(self._chat, style)

    def message_tokens(self, style: ChatStyle = "openai", tokenizer: str | Tokenizer | None = None) -> int:
        """Tokens of :meth:`messages` with the chat format's per-message overhead (exact for openai)."""
        if self._chat is None:
            raise SectionError("this result carries no chat parts: build it with assemble()")
        tok = get_tokenizer(tokenizer or self.report.tokenizer) if not isinstance(tokenizer, Tokenizer) else tokenizer
        return count_messages(self._chat, style, tok)


class AssemblyOptions(Settings):
    """How :func:`assemble` renders and chooses: each field is one of its keywords, with its default.

    Declared here once: :func:`assemble` takes them as keywords (or one record as
    ``options=``), and :class:`~contextkit.AssemblerConfig` extends this record with what
    the assembler adds (retrieval, history, compression). :func:`assemble` does not
    validate a record (``model_copy``): a bad value fails where it is used, as it always did.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    format: Literal["xml", "markdown"] = "xml"
    tokenizer: str | Tokenizer | None = Field(default=None, description="default: the profile's, else cl100k_base")
    evidence_order: EvidenceOrder = Field(default="lost_in_the_middle", json_schema_extra={"aliases": {"order": 1}})
    restate_instructions: bool = True
    restate_tag: str = "reminder"
    merge_passages: bool = True
    near_duplicate_threshold: float | None = Field(default=0.8, ge=0.0, le=1.0)
    min_score: float | None = Field(default=None, description="evidence scoring below this is left out (with "
                                    "fill='relevant' it sets the relevance floor in place of relevance_floor)")
    fill: FillMode = Field(default="relevant", description="'relevant': the budget is a cap and evidence stops "
                           "where relevance falls away; 'budget': fill to the cap")
    relevance_floor: float = Field(default=0.3, ge=0.0, le=1.0, description="fill='relevant': evidence scoring "
                                   "below this share of the best hit's score stops (0: no floor; 0.3 chosen on "
                                   "SciFact train queries, bench/bench_relevance.py --sweep)")
    min_similarity: float | Literal["auto"] | None = Field(
        default="auto", description="fill='relevant': when the best passage's query similarity is below this, the "
        "question is off topic: no evidence. 'auto': calibrated per index (3x the mean cosine of its passages "
        "from different documents, at most 0.3; 0.3 when no index is known)")
    item_tag: str = "document"
    message_tag: str = "message"
    text_escape: Literal["auto", "entities", "cdata"] = Field(
        default="auto", description="XML: how untrusted text is kept from breaking the structure: 'entities' "
        "(&lt; and &amp;), 'cdata' (verbatim in CDATA sections), 'auto' (CDATA for text holding three or more < "
        "or & where no < looks like markup: fewer cost less as entities)")
    markup: Literal["full", "lean"] = Field(
        default="lean", description="evidence markup: 'lean', the default (a short citation id, the source once "
        "per run of one document's passages, which share one element; no score; report.citations maps each id "
        "to its chunks); 'full' (each passage its own element: chunk id, source, title, page, score; the "
        "default before lean)")
    show_scores: bool | None = Field(default=None, description="the retrieval score on evidence tags (default: "
                                     "with markup='full', not with 'lean')")
    keep_text: bool = False
    keep_invisible: bool = Field(default=False, description="keep invisible and deceptive characters (tag "
                                 "characters, bidi controls, zero-width) in untrusted text; removed and counted "
                                 "by default")
    verify: bool = Field(default=False, description="also recount the prompt in one piece (a second pass)")
    chat: ChatStyle | None = Field(default=None, description="the result will be sent as chat messages in this "
                                   "style: their per-message overhead is kept out of the budget")
    audit_log: str | Path | None = None
    audit_text: bool = False
    max_query_chars: int = Field(default=MAX_QUERY_CHARS, gt=0, description="the longest question (and "
                                 "retrieval query), in characters: a longer one is refused")
    max_history_messages: int = Field(default=MAX_HISTORY_MESSAGES, gt=0, description="the most history "
                                      "messages one prompt takes: more are refused")
    max_budget: int = Field(default=MAX_BUDGET, gt=0, description="the largest budget, in tokens: a larger "
                            "one is refused (a mistake or an attack)")


_DEFAULTS = AssemblyOptions()
#: A budget is tight when the reminder and one tag's optional attributes would take more than this share of it.
TIGHT_SHARE = 0.1


def resolve_budget(budget: int | str | ModelProfile, tokenizer: str | Tokenizer | None = None,
                   max_budget: int = MAX_BUDGET) -> tuple[int, ModelProfile | None, Tokenizer]:
    """A token count or a model profile (name or object) -> (tokens, profile, tokenizer).

    A count is a whole number (a bool, a float, NaN is not one) from 1 to ``max_budget``."""
    profile = None
    if isinstance(budget, bool) or not isinstance(budget, (int, str, ModelProfile)):
        raise BudgetError(f"a budget is a whole number of tokens or a model profile, not {budget!r}")
    if isinstance(budget, int):
        limit = budget
    else:
        profile = get_profile(budget)
        limit = profile.prompt_budget
    if limit <= 0:
        raise BudgetError(f"the budget must be a positive number of tokens, not {limit}")
    check_limit(limit, check_limit_option(max_budget, "max_budget"), "max_budget", "a budget of {:,} tokens")
    name = tokenizer if tokenizer is not None else profile.tokenizer if profile else DEFAULT_TOKENIZER
    return limit, profile, get_tokenizer(name)


@traced("contextkit.assemble", assembly_figures)
def assemble(sections: Sequence[Section], budget: int | str | ModelProfile, *, history_summarizer: Any = None,
             redactor: Redactor | None = None, options: AssemblyOptions | None = None,
             **overrides: Any) -> AssemblyResult:
    """Build one prompt from ``sections`` that fits ``budget`` tokens.

    The keywords are the fields of :class:`AssemblyOptions` (``format``, ``tokenizer``,
    ``evidence_order``...), given one by one or as one ``options`` record (keywords win).
    ``history_summarizer`` (e.g. :class:`~contextkit.compressors.HistorySummarizer`)
    condenses the turns of a history section that do not fit into one summary
    entry; without it those turns are dropped and reported. ``redactor`` (e.g.
    :class:`~contextkit.compressors.redact.PIIRedactor`) masks personal data in the
    evidence, the history and the question first. ``verify=True`` also recounts the final prompt in one piece and checks it
    against the block sum (a second full pass; the tests do this).
    """
    started = time.perf_counter()
    opts = _options(options, overrides)
    limit, profile, tok = resolve_budget(budget, opts.tokenizer, opts.max_budget)
    _check_limits(sections, opts)
    if opts.format not in ("xml", "markdown"):
        raise SectionError(f"format must be 'xml' or 'markdown', not {opts.format!r}")
    if opts.markup not in MARKUPS:
        raise InvalidArgumentError(f"markup must be one of {', '.join(MARKUPS)}, not {opts.markup!r}")
    renderer = Renderer(opts.format, item_tag=opts.item_tag, message_tag=opts.message_tag,
                        text_escape=opts.text_escape)
    fills = _prepare_all(list(sections), renderer, tok, opts, redactor)
    _mark_up(fills, opts)
    notes = [f"section {f.section.name!r} is empty" for f in fills if f.body is None and not f.entries]
    _hand_history(fills, history_summarizer)
    room = limit - (chat_reserve(opts.chat, tok) if opts.chat else 0)
    if _tight(fills, room):
        fills = _lean(fills)
        tags = ("carry only their citation id" if opts.markup == "lean" else
                "carry only their id (and a source the id does not name)")
        notes.append(f"tight budget ({limit:,} tokens): the instructions are stated once, sections that need no "
                     f"tags go without them and evidence tags {tags}")
    flexible = _spend(fills, room, opts)
    total = settle(fills, flexible, room, tok)
    chat = chat_parts(fills)
    for f in fills:
        f.report_unshown_parts()
        f.measure()
        f.release(opts.keep_text)
    prompt = "".join(b.text for f in fills for b in f.blocks)
    if opts.verify:
        recount = tok.count(prompt)
        if recount != total:
            raise AssertionError(f"block sum {total} != recount {recount}: please report this as a bug")
    report = _report(fills, prompt, total, limit, profile, tok, opts, notes, started)
    if redactor is not None:
        report.compression.append(redactor.report())
    if opts.chat:
        report.chat_style, report.chat_tokens = opts.chat, count_messages(chat, opts.chat, tok)
        report.chat_tokens_exact = OVERHEAD[opts.chat][2] and report.exact_tokenizer
    if opts.audit_log is not None:
        report.append_to_log(opts.audit_log, include_text=opts.audit_text)
    result = AssemblyResult(prompt, report)
    result._chat = chat
    return result


def _with_option_keywords(fn: Any) -> Any:
    """Show every option in ``help(assemble)`` and the reference, with its default, in place of ``**overrides``."""
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=field.default,
                                 annotation=AssemblyOptions.__annotations__[name])
               for name, field in AssemblyOptions.model_fields.items()]
    fn.__signature__ = sig.replace(parameters=params)
    return fn


_with_option_keywords(assemble)


def _options(options: AssemblyOptions | None, overrides: dict[str, Any]) -> AssemblyOptions:
    """The record with the keywords applied; an unknown keyword is an :class:`UnknownOptionError`
    (still a ``TypeError``, as for any function)."""
    check_options("assemble()", overrides, AssemblyOptions.model_fields)
    base = options if options is not None else _DEFAULTS
    return base.model_copy(update=overrides) if overrides else base


# --------------------------------------------------------------- the steps
def _check_limits(sections: Sequence[Section], opts: AssemblyOptions) -> None:
    """Refuse a question longer than ``max_query_chars`` or a history longer than ``max_history_messages``
    before any work (``LimitExceededError``): one request must not hold a CPU for minutes."""
    max_chars = check_limit_option(opts.max_query_chars, "max_query_chars")
    max_messages = check_limit_option(opts.max_history_messages, "max_history_messages")
    for s in sections:
        if s.role == Role.QUESTION and s.content is not None:
            check_limit(len(s.content), max_chars, "max_query_chars", "a question of {:,} characters")
        if s.messages is not None:
            check_limit(len(s.messages), max_messages, "max_history_messages", "a history of {:,} messages")


def _prepare_all(sections: list[Section], renderer: Renderer, tok: Tokenizer, opts: AssemblyOptions,
                 redactor: Redactor | None) -> list[SectionFill]:
    """One fill per section in layout order (PII masked first), and the restated instructions."""
    names = [s.name for s in sections]
    if len(set(names)) != len(names):
        raise SectionError(f"section names must be unique: {sorted({n for n in names if names.count(n) > 1})}")
    order = sorted(range(len(sections)), key=lambda i: (sections[i].layout_rank, i))
    if redactor is not None:
        sections = [redacted(s, redactor) for s in sections]
    removed = 0
    if not opts.keep_invisible:
        cleaned = [without_invisible(s) for s in sections]
        sections, removed = [s for s, _ in cleaned], sum(n for _, n in cleaned)
    min_similarity = index_min_similarity(None) if opts.min_similarity == "auto" else opts.min_similarity  # no index here
    gate = (opts.fill, opts.relevance_floor, min_similarity, _question(sections))
    fills = [prepare(sections[i], renderer, tok, opts.min_score, opts.merge_passages, opts.evidence_order, gate)
             for i in order]
    if fills:
        fills[0].invisible_removed = removed  # for the report
    keys = [f.section.content for f in fills  # a fill has a body only when its section has content
            if f.section.role == Role.KEY_INSTRUCTIONS and f.body and f.section.content is not None]
    if opts.restate_instructions and keys:
        fills.append(prepare(Section(name="reminder", role=Role.REMINDER.value, pinned=True, tag=opts.restate_tag,
                                     content="\n\n".join(keys)),
                             renderer, tok, None, False, opts.evidence_order))
    return fills


def _hand_history(fills: list[SectionFill], history_summarizer: Any) -> None:
    """History sections get the summarizer and the question (what the summary should keep); evidence and
    tool output the question (what a cut keeps)."""
    question = _question(f.section for f in fills)
    for f in fills:
        if f.section.messages is not None:
            f.summarizer, f.query = history_summarizer, question
        elif f.section.items is not None or f.section.role == Role.TOOL_RESULT:
            f.query = question  # evidence pruned, or tool output cut, keeps what bears on it


def _question(sections: Iterable[Section]) -> str | None:
    """The text of the question sections, one per line (None without one): what the relevance gate, cuts and
    history summaries look for."""
    return "\n".join(s.content for s in sections if s.role == Role.QUESTION and s.content) or None


def _spend(fills: list[SectionFill], limit: int, opts: AssemblyOptions) -> list[SectionFill]:
    """Pinned sections in whole (or a :class:`BudgetError`), then the rest shared out; the rest, by priority."""
    needed = {f.section.name: f.fill_all() for f in fills if f.section.pinned}
    if sum(needed.values()) > limit:
        detail = ", ".join(f"{n} {t:,}" for n, t in needed.items())
        raise BudgetError(f"the pinned sections need {sum(needed.values()):,} tokens ({detail}) but the budget "
                          f"is {limit:,}: over by {sum(needed.values()) - limit:,}")
    flexible = sorted((f for f in fills if not f.section.pinned),
                      key=lambda f: (-_priority(f.section), f.section.layout_rank, f.section.name))
    share_out(flexible, limit, limit - sum(needed.values()),
              Deduplicator(opts.near_duplicate_threshold) if opts.merge_passages else None)
    return flexible


def _mark_up(fills: list[SectionFill], opts: AssemblyOptions) -> None:
    """Each evidence fill's markup; lean citation ids are numbered per evidence section ("1"; a second
    evidence section's "2.1"), so that no two elements of a prompt share one."""
    show = opts.show_scores if opts.show_scores is not None else opts.markup == "full"
    evidence = [f for f in fills if f.section.items is not None]
    for n, f in enumerate(evidence, start=1):
        f.markup, f.show_scores = opts.markup, bool(show)
        f.citation_prefix = f"{n}." if n > 1 else ""


def _tight(fills: list[SectionFill], room: int) -> bool:
    """Whether the budget is tight: restating the instructions and the optional attributes of the best
    passage's tag (source when the id names it, score, the truncated flag) would take more than
    :data:`TIGHT_SHARE` of it, or the pinned sections would not fit with the restatement.

    Why: at a few hundred tokens they took a third of the prompt (49 tokens a tag, the instructions
    twice) and left the answer out; in a larger prompt they cost little and help a model."""
    optional = sum(f.full_estimate() for f in fills if f.section.role == Role.REMINDER)
    for f in fills:
        best = next((e for e in f.entries if e.status == ItemStatus.PENDING), None)
        if f.section.items is not None and best is not None:
            if f.grouped:  # lean markup: what a tight budget takes off is the title and the pages
                full = f.count(f.renderer.item_block("", f.group_attributes([best], "1", tight=False)))
                optional += full - f.count(f.renderer.item_block("", f.group_attributes([best], "1", tight=True)))
            else:
                full = f.count(f.renderer.item_block("", {**f.attributes(best), "truncated": "true"}))
                optional += full - f.count(f.renderer.item_block("", lean_attributes(best.attrs)))
    pinned = sum(f.full_estimate() for f in fills if f.section.pinned)
    return optional > TIGHT_SHARE * room or pinned > room


def _lean(fills: list[SectionFill]) -> list[SectionFill]:
    """The fills for a tight budget: the instructions stated once (no reminder), lean evidence tags, and three
    frames left out that tell a model nothing the rest does not: the key instructions' tags when they lead
    the prompt as plain prose, the evidence section's when it is the one section of items (each element
    keeps its own tags, so untrusted text is still enclosed and cannot pass for instructions), and the
    question's when it ends the prompt: ``Question: ...``, 2 tokens against 6, with nothing after it that it
    could pass for. Either text keeps its tags when it holds anything that could read as markup.

    Why: at a budget of a hundred or two tokens these frames take a seventh of the room evidence has, and
    which words of the best passage go in decides whether the answer does (bench/bench_small_budget.py).

    In lean markup the evidence is also chosen chunk by chunk, by each chunk's own score, rather than as
    merged passages: a merged passage that fit whole took in a neighbour chunk ranked below other
    documents' best chunks, and used their room. Chunks of one document that overlap are still shown as
    one run of text in one element (:func:`._fill._joined`)."""
    fills = [f for f in fills if f.section.role != Role.REMINDER]
    items = [f for f in fills if f.section.items is not None]
    for f in fills:
        f.lean = f.section.items is not None
        if f.section.role == Role.EVIDENCE and items == [f]:
            f.bare = True
        if f.grouped and f.unmerge is not None:
            f.unmerge()
    head = fills[0] if fills else None
    if head is not None and head.section.role == Role.KEY_INSTRUCTIONS and head.body is not None:
        head.bare = head.renderer.bare_text(head.body) is not None
    tail = fills[-1] if fills else None
    if tail is not None and tail.section.role == Role.QUESTION and tail.body is not None \
            and tail.renderer.bare_text(tail.body, QUESTION_LABEL) is not None:
        tail.bare = True
    return fills


def _priority(section: Section) -> int:
    """The section's priority (``Section.__post_init__`` sets one when none is given)."""
    assert section.priority is not None
    return section.priority


# ------------------------------------------------------------------- report
def _item_report(**values: Any) -> ItemReport:
    """``model_construct`` without its per-call field walk: a million-token prompt has
    thousands of items, and these values are ours, already valid."""
    obj = ItemReport.__new__(ItemReport)
    object.__setattr__(obj, "__dict__", values)
    object.__setattr__(obj, "__pydantic_fields_set__", set(values))
    object.__setattr__(obj, "__pydantic_extra__", None)
    object.__setattr__(obj, "__pydantic_private__", None)
    return obj


def _sha256(block_lists: Iterable[Any]) -> str:
    """The prompt's SHA-256, block by block: encoding a 4M-character prompt at once costs
    up to 4 bytes per character of transient memory."""
    h = hashlib.sha256()
    for blocks in block_lists:
        for b in blocks:
            h.update(b.text.encode("utf-8"))
    return h.hexdigest()


def _report(fills: list[SectionFill], prompt: str, total: int, limit: int, profile: ModelProfile | None,
            tok: Tokenizer, opts: AssemblyOptions, notes: list[str], started: float) -> AssemblyReport:
    sections: list[SectionReport] = []
    items: list[ItemReport] = []
    relevance = next((f.relevance for f in fills if f.relevance is not None), None)
    if relevance is not None and relevance.message:
        notes.append(relevance.message)
    offset = 0
    first: dict[int, int] = {}
    for f in fills:
        start = offset
        offset += sum(len(b.text) for b in f.blocks)
        first[id(f)] = len(items)
        sections.append(_section_report(f, start, offset, items, opts.keep_text))
    return AssemblyReport(
        budget=limit, model=profile.name if profile else None, tokenizer=tok.name,
        exact_tokenizer=profile.exact_tokenizer if profile else True, format=opts.format, tokens=total,
        characters=len(prompt), budget_used_percent=round(100.0 * total / limit, 3),
        estimated_cost_usd=profile.cost(total) if profile else None, seconds=time.perf_counter() - started,
        prompt_sha256=_sha256(f.blocks for f in fills), sections=sections, items=items,
        notes=notes, compression=[r for f in fills for r in f.compression], relevance=relevance,
        warnings=_evidence_warnings(fills, limit, relevance),
        invisible_removed=sum(f.invisible_removed for f in fills), markup=opts.markup,
        markup_tokens=sum(s.markup_tokens for s in sections), citations=_citations(fills, items, first))


def _citations(fills: list[SectionFill], items: list[ItemReport], first: dict[int, int]) -> dict[str, list[str]]:
    """Lean markup: each citation id -> the chunk ids its element shows, in prompt order (a merged passage's
    parts in its text's order, those whose text a cut left out excepted); each item's ``citation`` set.
    ``first``: a fill's (``id()``) first item in ``items`` (its entries are reported in order from there)."""
    out: dict[str, list[str]] = {}
    for f in fills:
        elements = [b.items for b in f.blocks if b.items]  # the blocks in the prompt, not an earlier build's
        if not elements:
            continue
        start = first[id(f)]
        merged = {(e.detail or "").removeprefix("merged into ") + "\0" + e.id: i for i, e in enumerate(f.entries)
                  if e.status == ItemStatus.MERGED}
        for group in elements:
            citation = f.entries[group[0]].citation
            assert citation is not None  # set with the block
            ids: list[str] = []
            for index in group:
                e = f.entries[index]
                for ident in [p[0] for p in e.parts] or [e.id]:
                    at = index if ident == e.id else merged.get(e.id + "\0" + ident)
                    if at is not None:
                        items[start + at].citation = citation
                        ids.append(ident)
            out[citation] = ids
    return out


def _evidence_warnings(fills: list[SectionFill], limit: int, relevance: Any) -> list[str]:
    """Why a prompt went out without evidence, when it did: off topic, nothing given, or no room."""
    evidence = [f for f in fills if f.section.items is not None]
    if not evidence or any(e.status in TAKEN for f in evidence for e in f.entries):
        return []
    if relevance is not None and relevance.off_topic:
        return [relevance.message]
    candidates = [e for f in evidence for e in f.entries if e.reason == "budget"]
    if not candidates:
        gone = sum(len(f.entries) for f in evidence)
        return [f"no evidence: none of the {gone} items given could be used" if gone
                else "no evidence: the retriever found nothing for this question"]
    pinned = sum(b.tokens for f in fills if f.section.pinned for b in f.blocks)
    return [f"no evidence fits: the budget of {limit:,} tokens is too small (the pinned sections take "
            f"{pinned:,}, and no passage can be cut to fit the rest); the prompt has no evidence"]


def _section_report(f: SectionFill, start: int, end: int, items: list[ItemReport], keep_text: bool) -> SectionReport:
    """The section's report; its items' reports are appended to ``items``."""
    s = f.section
    block_tokens: dict[int, int] = f.item_tokens or {b.item: b.tokens for b in f.blocks if b.item is not None}
    counts = dict.fromkeys((ItemStatus.INCLUDED, ItemStatus.TRUNCATED, ItemStatus.DROPPED, ItemStatus.SUMMARIZED), 0)
    for i, e in enumerate(f.entries):
        status = e.status if e.status != ItemStatus.PENDING else ItemStatus.DROPPED
        if status in counts:
            counts[status] += 1
        text = ((e.shown if e.status == ItemStatus.TRUNCATED else e.body) if keep_text and status != ItemStatus.DROPPED
                else None)
        items.append(_item_report(  # the report holds the plain string
            id=e.id, section=s.name, source=e.source, score=e.score, status=status.value, reason=e.reason,
            detail=e.detail, tokens=block_tokens.get(i, 0), text=text, citation=None))
    # a section still pending reports as included; the report holds the plain string
    truncated = f.status == SectionStatus.TRUNCATED or (f.entries and counts[ItemStatus.TRUNCATED])
    section_status: ReportedSectionStatus = (
        SectionStatus.TRUNCATED.value if truncated
        else SectionStatus.DROPPED.value if f.status == SectionStatus.DROPPED else SectionStatus.INCLUDED.value)
    assert s.pinned is not None  # Section.__post_init__ sets it when none is given
    return SectionReport(
        name=s.name, role=s.role, tag=f.tag, priority=_priority(s), pinned=s.pinned, min_share=s.min_share,
        max_share=s.max_share,
        tokens=sum(b.tokens for b in f.blocks), start=start, end=end, status=section_status, reason=f.reason,
        items_included=counts[ItemStatus.INCLUDED], items_truncated=counts[ItemStatus.TRUNCATED],
        items_dropped=counts[ItemStatus.DROPPED] + counts[ItemStatus.SUMMARIZED], markup_tokens=f.markup_tokens,
        tagged=not f.bare or not f.blocks)

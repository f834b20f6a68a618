"""``Conversation``: the context of one conversation or agent run, across its turns.

Why a session and not one ``assemble`` per call: what a chat or an agent costs, and what it
remembers, is decided across calls. A provider serves the part of a request that starts like the
previous request from its prompt cache at a tenth of the price or less; a window of recent turns
that slides every call defeats it. A session keeps the request append-only and condenses the oldest
turns in blocks, only past a high-water mark, down to a low-water mark (see
:mod:`contextkit.assembly._compaction`), so most calls begin with the bytes of the previous one. The
question's evidence, new tool output and the excerpts of old turns that bear on the question go
last, in the tail, assembled under what the budget leaves (:func:`~contextkit.assembly.assemble`:
the same gate, escaping and report as every prompt).

    session = Session("gpt-4o", instructions="Answer from the documents.", index="docs.ck-index")
    result = session.prompt("How do I pin a dependency?")
    reply = client.chat.completions.create(model="gpt-4o", messages=result.messages("openai"))
    session.add(reply.choices[0].message.model_dump())

``add`` takes messages as an API returns them (OpenAI, Anthropic, LlamaIndex; tool calls and
results included) and refuses what a provider would refuse (a result for no call, an id used
twice), naming it. ``to_json`` / ``from_json`` keep a session as plain JSON: a resumed session
gives the same next request.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, Self

from pydantic import Field

from contextkit.assembly import _compaction as _compact
from contextkit.assembly._chat_request import Request, build_request, count_request, serialise
from contextkit.assembly._turns import Turn, turns_from
from contextkit.assembly.budget import AssemblyResult, resolve_budget
from contextkit.assembly.report import SessionReport
from contextkit.assembly.sections import Section
from contextkit.core.errors import BudgetError, InvalidArgumentError
from contextkit.core.profiles import ModelProfile
from contextkit.core.settings import Settings

__all__ = ["Conversation", "ConversationOptions", "ConversationResult", "TailBuilder"]

FORMAT = "contextkit-session"
FORMAT_VERSION = 1
#: A request whose history is shorter than this states the instructions once (in the system message); a longer
#: one restates them after the question (an agent's step with no question or evidence: never).
RESTATE_MIN_TOKENS = 2_000
#: The default model's cosine an old sentence needs with the question to be recalled: unrelated
#: sentences score about 0.05, a user's fact asked in other words 0.24 and up (data/history_paraphrase.json).
DEFAULT_RECALL_MIN_SIMILARITY = 0.2


class ConversationOptions(Settings):
    """How a :class:`Conversation` (and :class:`~contextkit.Session`) lays out and condenses its requests
    (each field one of its keywords)."""

    budget: int | str = Field(description="prompt tokens of each request, or a model profile's name")
    instructions: str | None = None
    chat: Literal["openai", "anthropic", "llamaindex"] = "openai"
    high_water: float = Field(default=0.9, gt=0.0, lt=1.0, description="share of the budget the instructions, "
                              "summaries and verbatim turns may reach before the oldest turns are condensed")
    low_water: float = Field(default=0.5, gt=0.0, lt=1.0, description="share they are condensed down to")
    summarize: bool = Field(default=True, description="condense the oldest turns into frozen summaries and "
                            "recall their sentences for a question; False: drop them (neither)")
    summary_ratio: float = Field(default=4.0, ge=1.0, description="a condensed block keeps 1/N of its tokens")
    summary_share: float = Field(default=0.15, gt=0.0, lt=0.5, description="share of the budget the summaries "
                                 "may take before they are condensed again, into one")
    tool_output_tokens: int | None = Field(default=None, gt=0, description="the most tokens a tool result "
                                           "keeps in the requests (cut by the task, the whole kept by handle); "
                                           "default: 1/8 of the budget, at most 4,000")
    recall_tokens: int | None = Field(default=None, ge=0, description="tokens of old turns' excerpts recalled "
                                      "for the question (default: 1/40 of the budget, at most 150; 0: none)")
    recall_min_similarity: float | None = Field(
        default=None, ge=-1.0, le=1.0, description="the least embedding cosine an old sentence needs with the "
        "question to be recalled (default: 0.2 with the default model, whose unrelated sentences score about 0.05; "
        "none with another model: every sentence competes)")
    k: int = Field(default=8, gt=0, description="passages retrieved per question (with an index or retriever)")
    markup: Literal["full", "lean"] = "lean"
    format: Literal["xml", "markdown"] = "xml"


class ConversationResult(AssemblyResult):
    """``(prompt, report)`` for the next call; :meth:`messages` gives the request in a provider's shape."""

    _request: Request | None = None

    def messages(self, style: str | None = None) -> Any:
        """The request as OpenAI messages, Anthropic's ``{"system", "messages"}`` or LlamaIndex
        ``ChatMessage`` objects (default: the session's ``chat`` style)."""
        assert self._request is not None
        style = style or self.report.chat_style or "openai"
        if style not in ("openai", "anthropic", "llamaindex"):
            raise InvalidArgumentError(f"message style must be openai, anthropic or llamaindex, not {style!r}")
        return build_request(self._request, style)


class TailBuilder(Protocol):
    """What builds a request's tail: ``ContextAssembler.assemble`` without history (evidence for ``query``,
    ``tool_results``, extra ``sections``) within ``budget`` tokens."""

    def __call__(self, query: str | None, *, evidence: list[Any] | None, tool_results: Any,
                 sections: list[Section], budget: int) -> AssemblyResult: ...


class Conversation:
    """The turns of one conversation or agent run and the requests they make (see the module docstring).

    ``tail`` builds each request's tail (a :class:`~contextkit.Session` passes its ``ContextAssembler``);
    ``embedder`` lets the history summarizer find a fact asked in other words.
    """

    def __init__(self, budget: int | str | ModelProfile, *, tail: TailBuilder, instructions: str | None = None,
                 system_texts: Mapping[str, str] | None = None, history_summarizer: Any = None, embedder: Any = None,
                 redactor: Any = None, **options: Any) -> None:
        self.profile = budget if isinstance(budget, ModelProfile) else None
        name = budget.name if isinstance(budget, ModelProfile) else budget
        self.options = ConversationOptions(budget=name, instructions=instructions, **options)
        if self.options.low_water >= self.options.high_water:
            raise InvalidArgumentError(f"low_water ({self.options.low_water}) must be below high_water "
                                       f"({self.options.high_water})")
        self.limit, profile, self.tokenizer = resolve_budget(budget)
        self.profile = self.profile or profile
        self._tail_builder = tail
        self._redactor = redactor  # masks each turn as it is recorded (one session: the same placeholders)
        self._system_texts = dict(system_texts or {})  # ContextAssembler's system, task, knowledge
        self._fingerprints: list[str] = []  # of every turn recorded, to follow a history given anew each call
        self._summarizer = history_summarizer
        self._embedder = embedder
        self.turns: list[Turn] = []  # verbatim, since the last compaction
        self.compacted: list[Turn] = []  # condensed, oldest first (kept for recall and tool_output)
        self.summaries: list[str] = []  # frozen, one per compaction
        self._outputs: dict[str, str] = {}
        self._open_calls: dict[str, str] = {}  # call id -> tool name, awaiting a result
        self._ids: set[str] = set()
        self._system: str | None = None
        self._last_parts: list[str] | None = None
        self._last_marks: list[int] = []
        self._part_ids: dict[str, list[int]] = {}
        self._counts = _Counts(self.tokenizer)
        self.compactions = 0

    # ------------------------------------------------------------------ turns
    def add(self, message: Any) -> Self:
        """Record a message as an API returned it or as the user wrote it (see :func:`turns_from`); a list
        adds each. A tool result must answer a call made and not yet answered."""
        if isinstance(message, (list, tuple)):
            for m in message:
                self.add(m)
            return self
        new = turns_from(message)
        self._check_calls(new)
        for turn in new:
            self._fingerprints.append(_fingerprint(turn))
            self._record(self._masked(turn))
        return self

    def _masked(self, turn: Turn) -> Turn:
        """The turn with personal data masked when the conversation redacts (text, tool arguments)."""
        if self._redactor is None:
            return turn
        turn.text = self._redactor.redact(turn.text).text
        for call in turn.tool_calls:
            call.arguments = self._redactor.redact(call.arguments).text
        return turn

    def follows(self, history: Sequence[Any]) -> bool:
        """Whether ``history`` (all turns so far, as given to ``ContextAssembler.assemble`` each call) begins
        with every turn this conversation has recorded: it can then be caught up rather than rebuilt."""
        given = [_fingerprint(t) for m in history for t in turns_from(m)]
        return given[: len(self._fingerprints)] == self._fingerprints

    def catch_up(self, history: Sequence[Any]) -> None:
        """Record the turns of ``history`` past those recorded, condensing at each point where a request would
        have been made (after a user turn, after the last result of a round of tool calls) as
        :meth:`prompt` would have: a conversation rebuilt from its history lays it out as one followed call
        by call did."""
        seen = len(self._fingerprints)
        count = 0
        for message in history:
            turns = turns_from(message)
            if count + len(turns) <= seen:
                count += len(turns)
                continue
            self.add(message)
            count += len(turns)
            last = self.turns[-1]
            if last.role == "user":
                self._compact_if_needed(self.turns[:-1], last.text)
            elif last.role == "tool" and not self._open_calls:
                self._compact_if_needed(list(self.turns), None)

    def set_tail(self, tail: TailBuilder) -> None:
        """Build the next requests' tails with ``tail`` (a ContextAssembler's call of the moment)."""
        self._tail_builder = tail

    def _check_calls(self, new: list[Turn]) -> None:
        """Refuse, before recording anything, what a provider would refuse."""
        open_calls = dict(self._open_calls)
        ids = set(self._ids)
        for turn in new:
            if turn.role == "tool":
                if turn.call_id not in open_calls:
                    raise InvalidArgumentError(f"a tool result for call {turn.call_id!r} answers no open call "
                                               f"(open: {', '.join(open_calls) or 'none'})")
                open_calls.pop(turn.call_id)
            elif turn.role == "user" and open_calls:
                raise InvalidArgumentError(f"calls {', '.join(sorted(open_calls))} have no result yet: add the "
                                           "tool results before the next user message")
            for call in turn.tool_calls:
                if call.id in ids:
                    raise InvalidArgumentError(f"tool call id {call.id!r} was used before in this session")
                ids.add(call.id)
                open_calls[call.id] = call.name

    def _record(self, turn: Turn) -> None:
        if turn.role == "tool":
            turn.name = turn.name or self._open_calls.get(turn.call_id or "")
            self._open_calls.pop(turn.call_id or "", None)
            self._cut_tool_output(turn)
        for call in turn.tool_calls:
            self._ids.add(call.id)
            self._open_calls[call.id] = call.name
        self.turns.append(turn)

    def _cut_tool_output(self, turn: Turn) -> None:
        """A long result keeps, in the requests, the lines that bear on the task (its call and the user's
        last words) with head and tail; the whole output stays here under a handle."""
        from contextkit.assembly._tool_cut import task_cut

        limit = self.tool_output_tokens
        if len(turn.text) <= limit or self.tokenizer.count(turn.text) <= limit:
            return
        number = len(self.compacted) + len(self.turns) + 1
        turn.handle = f"out-{number}"
        self._outputs[turn.handle] = turn.text
        note = (f"\n[output cut to the lines that bear on the task, from {turn.text.count(chr(10)) + 1:,} lines; "
                f"the whole output: handle {turn.handle}]")
        cut = task_cut(turn.text, limit - self.tokenizer.count(note), self.tokenizer, self._task_query(turn))
        turn.shown = (cut or "") + note

    def _task_query(self, turn: Turn) -> str:
        calls = [c for t in reversed(self.turns) for c in t.tool_calls if c.id == turn.call_id]
        step = f"{calls[0].name} {calls[0].arguments}" if calls else ""
        user = next((t.text for t in reversed(self.turns) if t.role == "user" and t.text), "")
        return f"{step} {user}".strip()

    @property
    def tool_output_tokens(self) -> int:
        return self.options.tool_output_tokens or max(64, min(4_000, self.limit // 8))

    def tool_output(self, handle: str) -> str:
        """The whole output of a tool result that requests carry cut or as a stub."""
        try:
            return self._outputs[handle]
        except KeyError:
            raise InvalidArgumentError(f"no tool output under handle {handle!r}") from None

    # ----------------------------------------------------------------- prompt
    def prompt(self, question: str | None = None, *, evidence: list[Any] | None = None,
               tool_results: list[str | tuple[str, str]] | None = None) -> ConversationResult:
        """The next request: the instructions, the summaries, the verbatim turns, then a tail with the
        evidence for the question, ``tool_results`` (outputs that answer no call: logs, files) and
        excerpts of condensed turns that bear on the question. ``question`` is recorded as the user's turn
        (or give it to :meth:`add` first and call ``prompt()``)."""
        if self._open_calls:  # a request with a call and no result is refused by every provider
            raise InvalidArgumentError(f"calls {', '.join(sorted(self._open_calls))} have no result yet: add "
                                       "their tool results before the next request")
        if question is not None:
            self.add({"role": "user", "content": question})
        asking = self.turns[-1].text if self.turns and self.turns[-1].role == "user" else None
        history = self.turns[:-1] if asking is not None else list(self.turns)
        compacted = self._compact_if_needed(history, asking)
        history = self.turns[:-1] if asking is not None else list(self.turns)
        result = self._build(history, asking, evidence, tool_results)
        assert result.report.session is not None
        result.report.session.compacted = compacted
        return result

    def _prefix(self, history: Sequence[Turn]) -> Request:
        return Request(system=self.system_text, summary=self._summary_text(), turns=list(history))

    def _summary_text(self) -> str:
        if not self.summaries:
            return ""
        from contextkit.assembly.render import Renderer

        renderer = Renderer(self.options.format)
        body = renderer.body("\n\n".join(self.summaries))
        return renderer.text_block("earlier_turns", "earlier turns", body).rstrip("\n")

    @property
    def system_text(self) -> str:
        """The system message: the instructions as the assembler writes them (the same bytes every call)."""
        if self._system is None:
            from contextkit.assembly.budget import assemble

            sections = [Section("instructions", role="key_instructions", content=self.options.instructions)
                        ] if self.options.instructions else []
            sections += [Section(name, role=name if name != "knowledge" else "domain_knowledge", content=text)
                         for name, text in self._system_texts.items()]
            text = ""
            if sections:
                result = assemble(sections, self.limit, tokenizer=self.tokenizer, restate_instructions=False,
                                  format=self.options.format)
                text = result.prompt.rstrip("\n")
            self._system = text
        return self._system

    # ------------------------------------------------------------- compaction
    def _tail_floor(self, asking: str | None) -> int:
        """The least room the tail must have: the question, and a share of the budget for its evidence."""
        question = self.tokenizer.count(asking) + 16 if asking else 0
        return question + self.limit // 10

    def _compact_if_needed(self, history: list[Turn], asking: str | None) -> bool:
        """Condense when the prefix passes the high-water mark (or leaves the tail too little room): first
        only turns the model has answered (the current round of calls and results stays verbatim: the
        model has not read it yet), then, if that is not enough, whatever must go."""
        style = self.options.chat
        prefix = count_request(self._prefix(history), style, self._counts)
        high = int(self.limit * self.options.high_water)
        if prefix <= high and prefix + self._tail_floor(asking) <= self.limit:
            return False
        target = min(int(self.limit * self.options.low_water), self.limit - self._tail_floor(asking))
        answered = max((i for i, t in enumerate(history) if t.role == "assistant"), default=0)
        condensed = self._compact(history, target, up_to=answered)
        history = self.turns[:-1] if asking is not None else list(self.turns)
        if count_request(self._prefix(history), style, self._counts) + self._tail_floor(asking) > self.limit:
            condensed = self._compact(history, target, up_to=len(history)) or condensed
        return condensed

    def _compact(self, history: list[Turn], target: int, up_to: int) -> bool:
        """Condense the oldest verbatim turns, at a safe cut at most ``up_to``, until the prefix is under
        ``target`` (or as near as the cuts allow); False when no cut is allowed."""
        style = self.options.chat
        cuts = [c for c in _compact.safe_cuts(history) if 0 < c <= up_to]
        if not cuts:
            if up_to >= len(history):
                raise BudgetError(f"the open tool calls' turns alone exceed the budget of {self.limit:,} tokens")
            return False
        base = count_request(Request(system=self.system_text), style, self._counts)
        sizes = [count_request(Request(turns=[t]), style, self._counts) for t in history]
        kept_tokens = sum(sizes)
        room_for_summary = int(self.limit * self.options.summary_share)
        chosen = cuts[-1]
        dropped = 0
        at = 0
        for cut in cuts:
            dropped += sum(sizes[at:cut])
            at = cut
            summary_guess = min(room_for_summary, self._summary_tokens() + dropped // int(self.options.summary_ratio)
                                ) if self.options.summarize else 0
            if base + summary_guess + kept_tokens - dropped <= target:
                chosen = cut
                break
        block = history[:chosen]
        first = len(self.compacted)
        cap = max(64, sum(sizes[:chosen]) // int(self.options.summary_ratio))
        newer = history[chosen:]
        if self.options.summarize:  # else dropped: kept in the session (saved; tool outputs by handle), not sent
            self.summaries.append(_compact.block_summary(block, first, self._history_summarizer(), self.tokenizer,
                                                         min(cap, room_for_summary), newer))
        self.compacted += block
        del self.turns[:chosen]
        self.compactions += 1
        if self.options.summarize and self._summary_tokens() > room_for_summary:
            self._recondense(room_for_summary, newer)
        return True

    def _summary_tokens(self) -> int:
        return self.tokenizer.count(self._summary_text()) if self.summaries else 0

    def _recondense(self, room: int, newer: Sequence[Turn]) -> None:
        """The summaries outgrew their share: condense every compacted turn again, into one (a second,
        rarer break of the cache)."""
        self.summaries = [_compact.block_summary(self.compacted, 0, self._history_summarizer(), self.tokenizer,
                                                 room // 2, newer)]

    def _history_summarizer(self) -> Any:
        if self._summarizer is None:
            from contextkit.compressors.history import HistorySummarizer

            # By meaning (a fact asked in other words is found): the index's model, else the default one,
            # loaded on first use (lexical, said in the report, where it cannot be loaded).
            model = None if self._embedder is not None else "default"
            self._summarizer = HistorySummarizer(self.tokenizer, embedder=self._embedder, model=model,
                                                 min_similarity=self._recall_floor())
        return self._summarizer

    def _recall_floor(self) -> float | None:
        """``recall_min_similarity``, or its default: a floor known for the default model only (cosines
        of another model have another scale)."""
        if self.options.recall_min_similarity is not None:
            return self.options.recall_min_similarity
        from contextkit.embedders import DEFAULT_MODEL

        name = getattr(self._embedder, "model_name", DEFAULT_MODEL) if self._embedder is not None else DEFAULT_MODEL
        same = str(name).rsplit("/", 1)[-1].lower() == DEFAULT_MODEL.rsplit("/", 1)[-1].lower()  # with or without its org
        return DEFAULT_RECALL_MIN_SIMILARITY if same else None

    # ------------------------------------------------------------------ build
    def _build(self, history: list[Turn], asking: str | None, evidence: list[Any] | None,
               tool_results: list[str | tuple[str, str]] | None) -> ConversationResult:
        style = self.options.chat
        request = self._prefix(history)
        prefix = count_request(request, style, self._counts)
        sections = self._recall_sections(asking, history)
        tail = None
        room = self.limit - prefix
        for _ in range(3):  # the tail's own count is exact; the tool calls' frames are estimates
            tail = self._tail(asking, evidence, tool_results, sections, room, prefix)
            request.tail = tail._chat.final if tail._chat is not None else ""
            total = count_request(request, style, self._counts)
            if total <= self.limit:
                break
            room -= total - self.limit
        else:
            raise BudgetError(f"the request needs {total:,} tokens, over the budget of {self.limit:,}")
        assert tail is not None
        result = ConversationResult(self._prompt_text(request), tail.report)
        result._request = request
        result.report.chat_style = style
        result.report.chat_tokens = total
        result.report.session = self._report(request, total, prefix)
        return result

    def _tail(self, asking: str | None, evidence: list[Any] | None, tool_results: Any, sections: list[Section],
              room: int, prefix: int) -> AssemblyResult:
        if room <= 0:
            raise BudgetError(f"the history takes {prefix:,} tokens of the budget of {self.limit:,}: no room "
                              "for the question")
        asked = asking is not None or bool(evidence) or bool(tool_results)
        if asked and prefix >= RESTATE_MIN_TOKENS and self.options.instructions:
            sections = [*sections, Section("reminder", role="reminder", pinned=True, tag="reminder",
                                           content=self.options.instructions)]
        return self._tail_builder(asking, evidence=evidence, tool_results=tool_results, sections=sections,
                                  budget=room)

    def _recall_sections(self, asking: str | None, history: Sequence[Turn]) -> list[Section]:
        cap = self.options.recall_tokens
        cap = min(150, self.limit // 40) if cap is None else cap
        if not asking or not self.compacted or cap < 32 or not self.options.summarize:
            return []
        text = _compact.recall(self.compacted, self._history_summarizer(), asking, cap, history,
                               shown=self._summary_text())
        if not text:
            return []
        # Ahead of evidence (75): a few hundred tokens of what the user said, which no document holds.
        return [Section("recalled", role="custom", content=text, tag="recalled_turns", priority=80)]

    def _prompt_text(self, request: Request) -> str:
        """The request as one text, for a completion API or a log: the history as ``<message>`` elements."""
        from contextkit.assembly.render import Renderer

        renderer = Renderer(self.options.format)
        parts = [request.system + "\n" if request.system else "", request.summary + "\n" if request.summary else ""]
        for turn in request.turns:
            attrs = {"call": turn.call_id} if turn.call_id else {}
            calls = "".join(f"\n[calls {c.name}({c.arguments})]" for c in turn.tool_calls)
            parts.append(renderer.message_block(turn.role, renderer.body(turn.body + calls), attrs))
        parts.append(request.tail)
        return "".join(parts)

    def _encoded(self, part: str) -> list[int]:
        """A part's token ids, kept while requests carry it (each call re-encodes only what is new)."""
        ids = self._part_ids.get(part)
        if ids is None:
            ids = self._part_ids[part] = self.tokenizer.encode(part)
        return ids

    def _report(self, request: Request, total: int, prefix: int) -> SessionReport:
        from contextkit.core.prompt_cache import cached_prefix_tokens

        parts, marks = serialise(request)
        ids_per_part = [self._encoded(p) for p in parts]
        ids = [i for part in ids_per_part for i in part]
        ends = [sum(len(p) for p in ids_per_part[:m]) for m in marks]
        previous = None
        if self._last_parts is not None:
            previous = [i for p in self._last_parts for i in self._encoded(p)]
        self._part_ids = {p: self._part_ids[p] for p in parts if p in self._part_ids}  # this request's only
        rule = _cache_rule(self.profile, self.options.chat)
        cached = cached_prefix_tokens(previous, ids, rule, self._last_marks if rule.kind == "breakpoints" else ())
        share = cached / len(ids) if ids else 0.0
        self._last_parts, self._last_marks = parts, ends
        profile = self.profile
        cost = profile.input_cost(total, cached=int(total * share)) if profile is not None else None
        return SessionReport(turns=len(self.compacted) + len(self.turns), verbatim_turns=len(request.turns),
                             compacted_turns=len(self.compacted), compactions=self.compactions,
                             prefix_tokens=prefix, tail_tokens=total - prefix, total_tokens=total, budget=self.limit,
                             predicted_cached_tokens=int(total * share), cache_rule=rule.kind,
                             predicted_input_cost_usd=cost)

    # ------------------------------------------------------------ persistence
    def to_dict(self) -> dict[str, Any]:
        """The session as plain JSON values (no pickle): options, turns, summaries, whole tool outputs."""
        return {"format": FORMAT, "version": FORMAT_VERSION,
                "options": self.options.model_dump(exclude_defaults=True),
                "turns": [t.to_dict() for t in self.turns], "compacted": [t.to_dict() for t in self.compacted],
                "summaries": list(self.summaries), "outputs": dict(self._outputs), "compactions": self.compactions,
                "last_request": self._last_parts, "last_marks": self._last_marks}

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), ensure_ascii=False)
        if path is not None:
            from contextkit.core.atomic import write_text_atomic

            write_text_atomic(Path(path), text)
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **objects: Any) -> Self:
        """A session saved by :meth:`to_dict` (untrusted: checked as it is read); ``objects`` are what JSON
        cannot hold (``index=``, ``retriever=``, ``history_summarizer=``)."""
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise InvalidArgumentError(f"not a saved contextkit session (format must be {FORMAT!r})")
        if data.get("version") != FORMAT_VERSION:
            raise InvalidArgumentError(f"saved session version {data.get('version')!r}; this contextkit reads "
                                       f"version {FORMAT_VERSION}")
        options = dict(data.get("options") or {})
        if "budget" not in options:
            raise InvalidArgumentError("a saved session has no budget")
        session = cls(options.pop("budget"), **objects, **options)
        try:
            session._restore(data)
        except (TypeError, KeyError, ValueError) as exc:
            raise InvalidArgumentError(f"a saved session's {type(exc).__name__}: {exc}") from None
        return session

    def _restore(self, data: Mapping[str, Any]) -> None:
        for turn in [Turn.from_dict(t) for t in data.get("compacted") or []]:
            self.compacted.append(turn)
            self._ids.update(c.id for c in turn.tool_calls)
        for turn in [Turn.from_dict(t) for t in data.get("turns") or []]:
            if turn.role == "tool":
                self._open_calls.pop(turn.call_id or "", None)
            self._ids.update(c.id for c in turn.tool_calls)
            self._open_calls.update({c.id: c.name for c in turn.tool_calls})
            self.turns.append(turn)
        self._fingerprints = [_fingerprint(t) for t in [*self.compacted, *self.turns]]
        self.summaries = [str(s) for s in data.get("summaries") or []]
        self._outputs = {str(k): str(v) for k, v in (data.get("outputs") or {}).items()}
        self.compactions = int(data.get("compactions", len(self.summaries)))
        last = data.get("last_request")
        self._last_parts = [str(p) for p in last] if isinstance(last, list) else None
        self._last_marks = [int(m) for m in data.get("last_marks") or []]

    @classmethod
    def from_json(cls, text_or_path: str | Path, **objects: Any) -> Self:
        text = Path(text_or_path).read_text(encoding="utf-8") if isinstance(text_or_path, Path) else text_or_path
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise InvalidArgumentError(f"a saved session is not JSON: {exc}") from None
        return cls.from_dict(data, **objects)

    def extend(self, messages: Iterable[Any]) -> Self:
        for m in messages:
            self.add(m)
        return self


class _Counts:
    """Token counts of texts, kept between calls: a request repeats the previous one, so each call counts
    only its new turns and its tail (the whole history was counted three or four times a call)."""

    _KEPT = 8_192  # texts remembered; past it the memory starts again

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._memo: dict[str, int] = {}

    def count_many(self, texts: Sequence[str]) -> list[int]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if len(self._memo) + len(missing) > self._KEPT:
            self._memo.clear()
            missing = list(dict.fromkeys(texts))
        self._memo.update(zip(missing, self.tokenizer.count_many(missing) if missing else [], strict=True))
        return [self._memo[t] for t in texts]


def _fingerprint(turn: Turn) -> str:
    """A turn as given (not as cut): role, text, calls, the call it answers."""
    calls = [[c.id, c.name, c.arguments] for c in turn.tool_calls]
    return json.dumps([turn.role, turn.text, calls, turn.call_id, turn.is_error], ensure_ascii=False)


def _cache_rule(profile: ModelProfile | None, style: str) -> Any:
    """The profile's cache rule, else the style's provider's usual one (OpenAI's for LlamaIndex)."""
    from contextkit.core.profiles import CacheRule

    rule = getattr(profile, "cache", None)
    if rule is not None:
        return rule
    if style == "anthropic":
        return CacheRule(kind="breakpoints", min_tokens=1_024, max_breakpoints=4)
    return CacheRule(kind="prefix", min_tokens=1_024, step=128)


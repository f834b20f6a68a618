"""``contextkit session replay``: a logged conversation or agent run, call by call, through a Session.

The log is JSON lines, read one line at a time (a log of any size), each line one of:

* a message as an API or an app logs it: an OpenAI message (``{"role", "content"}``, an assistant's
  ``tool_calls``, ``{"role": "tool", "tool_call_id", "content"}``), an Anthropic message (content
  blocks: ``text``, ``tool_use``, ``tool_result``) or a LlamaIndex ``ChatMessage`` dumped to JSON
  (``{"role", "blocks"}``; needs ``llama-index-core``);
* a request as logged, ``{"messages": [...]}`` (with Anthropic's ``"system"``): its messages are the
  conversation so far, so the replay takes those after the messages already read. When the request
  begins with every message read so far, the rest; otherwise (an application that dropped or
  rewrote old messages) those after the message read last, found by its content; a request that
  holds none of it is a bad line.

System messages before the first other message are the instructions (``--instructions`` replaces
them); a request's leading system messages are its instructions again and are skipped.

The replay adds each message to a :class:`~contextkit.Session` and, at each point where the
application calls the model (after a user message, or after the last result of a round of tool
calls, when the model's message comes next or the log ends), makes the request with
``session.prompt()`` and prints a row from its report. The totals compare the session with
"append-only": every message sent as it is, the instructions first, on every call (the usual
application), whose cached share follows the same cache rule.

A bad line (not UTF-8, not JSON, not a message, a message a provider would refuse such as a tool
result for no call) is named, ``FILE:LINE: why``, on stderr, and the replay goes on without it;
any bad line makes the exit status 1.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from contextkit.cli._app import JsonOpt, app, err, fail, json_text, reported, safe

session_app = typer.Typer(help="Sessions: a logged conversation or agent run replayed through contextkit.Session.",
                          no_args_is_help=True)
app.add_typer(session_app, name="session")

_STYLES = ("openai", "anthropic", "llamaindex")
#: Bad lines named on stderr as they are met (all are counted; --json lists the first _KEPT_BAD).
_SHOWN_BAD = 50
_KEPT_BAD = 1_000


@session_app.command("replay")
def replay(
    log: Annotated[Path, typer.Argument(
        metavar="FILE.jsonl", help="the conversation or agent run: JSON lines of messages or logged requests")],
    model: Annotated[str | None, typer.Option(
        help="model profile (budget, tokenizer, cache rule, price); see `contextkit models`")] = None,
    budget: Annotated[int | None, typer.Option(help="prompt budget in tokens (instead of --model)")] = None,
    chat: Annotated[str, typer.Option(help="the requests' shape: openai, anthropic or llamaindex")] = "openai",
    instructions: Annotated[str | None, typer.Option(
        help="the system instructions, or @FILE to read them (default: the log's first system messages)")] = None,
    as_json: JsonOpt = False,
    save: Annotated[Path | None, typer.Option(
        help="write the session at the end here (Session.to_json: resume it with Session.from_json)")] = None,
) -> None:
    """Replay a logged conversation or agent run through a Session: each model call's tokens, cached share, cost.

    One row per call (after a user message, after the last result of a round of tool calls): the
    tokens sent, their share of the budget, the predicted cached tokens, whether turns were condensed
    and the predicted input cost; then the totals against append-only (every message sent as it is).
    A bad line is named (FILE:LINE: why) and the replay goes on; exit 1 if any, 2 on a usage error.

    Example: contextkit session replay data/session_example.jsonl --model gpt-4o
    """
    _check_args(log, model, budget, chat)
    text = _instructions(instructions)
    target: int | str = model if model is not None else int(budget or 0)
    replayer = _Replay(log, target, chat, text, as_json)
    with reported():
        replayer.run()
        if save is not None and replayer.session is not None:
            try:
                replayer.session.to_json(save)
            except OSError as exc:
                raise fail(f"--save {save}: cannot write ({exc.strerror or exc})") from None
    totals = replayer.totals(save if replayer.session is not None else None)
    if as_json:
        sys.stdout.write(json_text({**totals, "rows": replayer.rows}) + "\n")
    else:
        _print_totals(totals)
    if replayer.bad_total:
        err.print(f"[bold red]error:[/] {replayer.bad_total:,} bad line{'s' * (replayer.bad_total != 1)} in "
                  f"{_markup(safe(log))}; the replay went on without {'them' if replayer.bad_total != 1 else 'it'}",
                  highlight=False)
        raise typer.Exit(1)
    if replayer.messages == 0:
        raise fail(f"{log}: no messages")


def _check_args(log: Path, model: str | None, budget: int | None, chat: str) -> None:
    """Usage errors (exit 2, one line) before anything is read."""
    if not log.is_file():
        raise fail(f"{log}: no such file", 2)
    if model is None and budget is None:
        raise fail("give --model PROFILE (see `contextkit models`) or --budget N (tokens)", 2)
    if model is not None and budget is not None:
        raise fail("give --model PROFILE or --budget N, not both (a profile brings its own budget)", 2)
    if model is not None:
        from contextkit.core.errors import ProfileError
        from contextkit.core.profiles import get_profile

        try:  # a misspelt profile is a bad option value: exit 2, with the likely name
            get_profile(model)
        except ProfileError as exc:
            raise fail(f"--model: {exc}", 2) from None
    if budget is not None and budget <= 0:
        raise fail(f"--budget must be a positive number of tokens, not {budget}", 2)
    if chat not in _STYLES:
        raise fail(f"--chat is {', '.join(_STYLES[:-1])} or {_STYLES[-1]}, not {chat!r}", 2)


def _instructions(value: str | None) -> str | None:
    if value is None or not value.startswith("@"):
        return value
    path = Path(value[1:])
    try:
        return path.read_bytes().decode("utf-8").strip()
    except OSError as exc:
        raise fail(f"--instructions {path}: cannot read ({exc.strerror or exc})", 2) from None
    except UnicodeDecodeError as exc:
        raise fail(f"--instructions {path}: not valid UTF-8 (byte {exc.start})", 2) from None


class _BadLine(Exception):
    """A line of the log that cannot be replayed, and why."""


@dataclass
class _AppendOnly:
    """The requests of an application that sends every message as it is, the instructions first."""

    count: Any  # Request -> tokens
    rule: Any  # the cache rule
    profile: Any
    tokens: int = 0
    previous: int | None = None
    totals: dict[str, Any] = field(default_factory=lambda: {"tokens": 0, "cached_tokens": 0, "cost_usd": None,
                                                             "over_budget_calls": 0})

    def add(self, turns: Sequence[Any]) -> None:
        from contextkit.assembly._chat_request import Request

        self.tokens += sum(self.count(Request(turns=[t])) for t in turns) - len(turns) * self.count(Request())

    def call(self, budget: int) -> dict[str, Any]:
        cached = 0 if self.previous is None else _cached(self.previous, self.rule)
        cost = self.profile.input_cost(self.tokens, cached=cached) if self.profile is not None else None
        self.previous = self.tokens
        self.totals["tokens"] += self.tokens
        self.totals["cached_tokens"] += cached
        self.totals["over_budget_calls"] += self.tokens > budget
        if cost is not None:
            self.totals["cost_usd"] = (self.totals["cost_usd"] or 0.0) + cost
        return {"append_only_tokens": self.tokens, "append_only_cached_tokens": cached, "append_only_cost_usd": cost}


def _cached(previous: int, rule: Any) -> int:
    """What the cache serves of a request that begins with the whole previous one, of ``previous`` tokens."""
    if previous < rule.min_tokens:
        return 0
    if rule.kind == "prefix":
        return rule.min_tokens + ((previous - rule.min_tokens) // rule.step) * rule.step
    return previous


class _Replay:
    """One replay: the log read line by line, the session, the rows and the bad lines."""

    def __init__(self, log: Path, budget: int | str, chat: str, instructions: str | None, quiet_rows: bool) -> None:
        self.log, self.budget, self.chat = log, budget, chat
        self.instructions = instructions
        self.given_instructions = instructions is not None
        self.quiet_rows = quiet_rows
        self.session: Any = None
        self.append_only: _AppendOnly | None = None
        self.rows: list[dict[str, Any]] = []
        self.bad: list[dict[str, Any]] = []
        self.bad_total = 0
        self.lines = self.messages = 0
        self.seen: list[str] = []  # a digest of every message read, in order (to follow logged requests)
        self.open_calls: set[str] = set()
        self.pending = False  # the model would be called here, if its message comes next
        self.pending_line = 0
        self.has_price = False

    # ------------------------------------------------------------------ reading
    def run(self) -> None:
        with self.log.open("rb") as handle:
            for number, raw in enumerate(handle, 1):
                self.lines = number
                try:
                    self._line(raw, number)
                except _BadLine as exc:
                    self._bad(number, str(exc))
        if self.pending:
            self._call()

    def _line(self, raw: bytes, number: int) -> None:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _BadLine(f"not valid UTF-8 (byte {exc.start})") from None
        if not text.strip():
            return
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise _BadLine(f"not JSON ({exc})") from None
        if isinstance(data, Mapping) and "role" not in data and isinstance(data.get("messages"), list):
            self._request(data, number)
        elif isinstance(data, Mapping) and "role" in data:
            self._message(data, number, _digest(data))
        else:
            kind = "an object with keys " + ", ".join(sorted(map(str, data)))[:80] if isinstance(
                data, Mapping) else f"a JSON {type(data).__name__}"
            raise _BadLine(f"not a message: a line is a message ({{\"role\": ...}}) or a logged request "
                          f"({{\"messages\": [...]}}), not {kind}")

    def _request(self, data: Mapping[str, Any], number: int) -> None:
        """A logged request: its instructions, then the messages past those already read."""
        messages = list(data["messages"])
        system = list(_leading_system(messages))
        messages = messages[len(system):]
        if self.session is None and not self.given_instructions:
            texts = [_system_text(data.get("system"))] + [_system_text(m.get("content")) for m in system]
            self.instructions = "\n\n".join(t for t in texts if t) or self.instructions
        digests = [_digest(m) for m in messages]
        start = _continues(self.seen, digests)
        if start is None:
            raise _BadLine(f"a logged request that does not continue the conversation read so far (none of its "
                          f"{len(messages)} messages is the last message read, line {self.pending_line or '?'})")
        for i in range(start, len(messages)):
            self._message(messages[i], number, digests[i], where=f"message {i + len(system) + 1} of the request: ")

    def _message(self, message: Any, number: int, digest: str, where: str = "") -> None:
        from contextkit.assembly._turns import turns_from
        from contextkit.core.errors import ContextkitError

        self.seen.append(digest)
        if isinstance(message, Mapping) and "blocks" in message and "content" not in message:
            message = _llamaindex(message, where)
        try:
            turns = turns_from(message)
        except ContextkitError as exc:
            raise _BadLine(f"{where}not a message: {exc}") from None
        if self.session is None:
            if all(t.role == "system" for t in turns):  # the instructions, before the conversation
                if not self.given_instructions:
                    extra = "\n".join(t.text for t in turns)
                    self.instructions = f"{self.instructions}\n\n{extra}" if self.instructions else extra
                return
            self._start()
        if self.pending and turns[0].role == "assistant":
            self._call()
        try:
            self.session.add(message)
        except ContextkitError as exc:
            raise _BadLine(f"{where}{exc}") from None
        self.messages += 1
        assert self.append_only is not None
        self.append_only.add(turns)
        for turn in turns:
            self.open_calls.update(c.id for c in turn.tool_calls)
            if turn.role == "tool":
                self.open_calls.discard(turn.call_id or "")
        last = turns[-1].role
        self.pending = last == "user" or (last == "tool" and not self.open_calls)
        self.pending_line = number

    def _start(self) -> None:
        from contextkit.assembly._chat_request import Request, count_request
        from contextkit.assembly.conversation import _cache_rule
        from contextkit.session import Session

        session = Session(self.budget, instructions=self.instructions or None, chat=self.chat)
        self.session = session
        self.has_price = session.profile is not None and session.profile.input_price_per_million is not None
        self.append_only = _AppendOnly(lambda request: count_request(request, self.chat, session.tokenizer),
                                       _cache_rule(session.profile, self.chat), session.profile)
        self.append_only.tokens = count_request(Request(system=session.system_text), self.chat, session.tokenizer)
        if not self.quiet_rows:
            _print_header(self)

    def _bad(self, number: int, why: str) -> None:
        self.bad_total += 1
        if len(self.bad) < _KEPT_BAD:
            self.bad.append({"line": number, "why": why})
        if self.bad_total <= _SHOWN_BAD:
            err.print(f"{_markup(safe(self.log))}:{number}: {_markup(safe(why))}", highlight=False)
        elif self.bad_total == _SHOWN_BAD + 1:
            err.print(f"(more bad lines: counted, not shown; --json lists the first {_KEPT_BAD:,})", highlight=False)

    # ------------------------------------------------------------------ calls
    def _call(self) -> None:
        from contextkit.core.errors import ContextkitError

        self.pending = False
        try:
            result = self.session.prompt()
        except ContextkitError as exc:
            self._bad(self.pending_line, f"the request after this line could not be made: {exc}")
            return
        report = result.report.session
        assert report is not None and self.append_only is not None
        row = {"call": len(self.rows) + 1, "line": self.pending_line, "turn": report.turns,
               "tokens": report.total_tokens, "budget_share": report.total_tokens / report.budget,
               "cached_tokens": report.predicted_cached_tokens, "cached_share": report.cached_share(),
               "compacted": report.compacted, "cost_usd": report.predicted_input_cost_usd,
               **self.append_only.call(report.budget)}
        self.rows.append(row)
        if not self.quiet_rows:
            _print_row(row, self.has_price)

    # ------------------------------------------------------------------ totals
    def totals(self, saved: Path | None) -> dict[str, Any]:
        session = self.session
        tokens = sum(r["tokens"] for r in self.rows)
        cached = sum(r["cached_tokens"] for r in self.rows)
        costs = [r["cost_usd"] for r in self.rows if r["cost_usd"] is not None]
        plain: dict[str, Any] = dict(self.append_only.totals) if self.append_only is not None else {
            "tokens": 0, "cached_tokens": 0, "cost_usd": None, "over_budget_calls": 0}
        plain["cached_share"] = plain["cached_tokens"] / plain["tokens"] if plain["tokens"] else 0.0
        return {
            "file": str(self.log), "model": self.budget if isinstance(self.budget, str) else None,
            "budget": session.limit if session is not None else None, "chat": self.chat,
            "lines": self.lines, "messages": self.messages, "calls": len(self.rows),
            "session": {"tokens": tokens, "cached_tokens": cached, "cached_share": cached / tokens if tokens else 0.0,
                        "cost_usd": sum(costs) if costs else None,
                        "turns": len(session.compacted) + len(session.turns) if session is not None else 0,
                        "condensed_turns": len(session.compacted) if session is not None else 0,
                        "compactions": session.compactions if session is not None else 0},
            "append_only": plain,
            "bad_lines": self.bad, "bad_lines_total": self.bad_total,
            "saved": str(saved) if saved is not None else None,
        }


def _leading_system(messages: Sequence[Any]) -> Iterator[Mapping[str, Any]]:
    for message in messages:
        if not (isinstance(message, Mapping) and message.get("role") in ("system", "developer")):
            return
        yield message


def _system_text(content: Any) -> str:
    """An OpenAI system message's content or Anthropic's ``system``: a string or a list of text blocks."""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, Mapping)).strip()
    return ""


def _digest(message: Any) -> str:
    """A message's content, for following logged requests (a digest: a long log's messages are not kept)."""
    text = json.dumps(message, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def _continues(seen: Sequence[str], request: Sequence[str]) -> int | None:
    """Where a logged request's new messages start: past every message read, when it begins with them all;
    else past the message read last (where most of those before it match too; the earliest such); None
    when it does not hold it."""
    if not seen or list(request[: len(seen)]) == list(seen):
        return min(len(seen), len(request))
    best, best_run = None, -1
    for j, digest in enumerate(request):
        if digest != seen[-1]:
            continue
        run = 0
        while run < min(j, len(seen) - 1) and request[j - 1 - run] == seen[-2 - run]:
            run += 1
        if run > best_run:
            best, best_run = j + 1, run
    return best


def _llamaindex(message: Mapping[str, Any], where: str) -> Any:
    """A LlamaIndex ``ChatMessage`` dumped to JSON, as the object (``turns_from`` reads its blocks)."""
    try:
        from llama_index.core.llms import ChatMessage
    except ImportError:
        raise _BadLine(f"{where}a LlamaIndex message ({{\"role\", \"blocks\"}}) needs llama-index-core "
                      "installed") from None
    try:
        return ChatMessage.model_validate(dict(message))
    except ValueError as exc:
        raise _BadLine(f"{where}not a LlamaIndex ChatMessage: {str(exc).splitlines()[0]}") from None


# ---------------------------------------------------------------------- output

_COLUMNS = (("call", 5), ("line", 7), ("turn", 6), ("tokens", 9), ("of budget", 10), ("cached", 9),
            ("cached %", 9), ("compacted", 10), ("cost $", 10), ("append-only", 12))


def _print_header(replay: _Replay) -> None:
    session = replay.session
    price = "" if replay.has_price else "; no price in this profile" if session.profile is not None else ""
    _write(f"replay of {safe(replay.log)}: budget {session.limit:,} tokens, {replay.chat} requests, cache rule "
           f"{_rule_name(session)}{price}\n")
    names = [(n, w) for n, w in _COLUMNS if replay.has_price or n != "cost $"]
    _write("".join(n.rjust(w) for n, w in names) + "\n")


def _rule_name(session: Any) -> str:
    from contextkit.assembly.conversation import _cache_rule

    rule = _cache_rule(session.profile, session.options.chat)
    return f"{rule.kind} (from {rule.min_tokens:,} tokens)"


def _print_row(row: Mapping[str, Any], has_price: bool) -> None:
    cells = [f"{row['call']:,}", f"{row['line']:,}", f"{row['turn']:,}", f"{row['tokens']:,}",
             f"{100 * row['budget_share']:.1f}%", f"{row['cached_tokens']:,}", f"{100 * row['cached_share']:.0f}%",
             "yes" if row["compacted"] else "", _cost(row["cost_usd"]), f"{row['append_only_tokens']:,}"]
    widths = [w for n, w in _COLUMNS if has_price or n != "cost $"]
    if not has_price:
        del cells[8]
    _write("".join(c.rjust(w) for c, w in zip(cells, widths)) + "\n")


def _cost(value: float | None) -> str:
    return "-" if value is None else f"{value:.5f}"


def _print_totals(totals: Mapping[str, Any]) -> None:
    s, a = totals["session"], totals["append_only"]
    calls = totals["calls"]
    if not calls:
        _write(f"{totals['messages']:,} messages, no model call\n")
        return
    cost = "" if s["cost_usd"] is None else f", ${s['cost_usd']:.4f} predicted input cost"
    plain_cost = "" if a["cost_usd"] is None else f", ${a['cost_usd']:.4f}"
    _write(f"\n{calls:,} calls over {totals['messages']:,} messages ({totals['lines']:,} lines)\n")
    _write(f"session:     {s['tokens']:,} tokens sent, {s['cached_tokens']:,} predicted cached "
           f"({100 * s['cached_share']:.1f}%){cost}\n")
    over = f"; {a['over_budget_calls']:,} of the calls over the budget of {totals['budget']:,}" if a[
        "over_budget_calls"] else ""
    _write(f"append-only: {a['tokens']:,} tokens sent, {a['cached_tokens']:,} predicted cached "
           f"({100 * a['cached_share']:.1f}%){plain_cost} (every message kept as it is){over}\n")
    if a["tokens"]:
        ratio = f"{s['tokens'] / a['tokens']:.2f}x the tokens"
        if s["cost_usd"] is not None and a["cost_usd"]:
            ratio += f", {s['cost_usd'] / a['cost_usd']:.2f}x the cost"
        _write(f"session / append-only: {ratio}\n")
    _write(f"condensed: {s['condensed_turns']:,} of {s['turns']:,} turns, in {s['compactions']:,} "
           f"compaction{'s' * (s['compactions'] != 1)}\n")
    if totals["saved"]:
        _write(f"saved: {safe(totals['saved'])}\n")


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _markup(text: str) -> str:
    from rich.markup import escape

    return escape(text)

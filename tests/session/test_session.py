"""``Session`` as applications use it: provider messages in, the next request out, turn after turn.

What a sceptical user checks: every request a session makes is one the provider accepts (tool calls
and results together, in each style) and fits the budget; between compactions each request begins
with the previous one (the prompt cache's condition), and compactions are rare; a long tool output
keeps the line that matters and the whole output stays reachable by handle; a saved session resumes
to the same next request, in another process too; and what a provider would refuse is refused here,
naming it, before anything is recorded.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contextkit import ContextAssembler, get_tokenizer
from contextkit.core.errors import InvalidArgumentError
from contextkit.session import Session, validate_messages

sys.path.insert(0, str(Path(__file__).parent))
from trajectories import call_points, random_trajectory  # noqa: E402

STYLES = ("openai", "anthropic", "llamaindex")
INSTRUCTIONS = "You are a careful coding agent. Answer from the tool output and the documents."


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def _assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def _result(call_id: str, text: str) -> dict[str, str]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _ci_log(lines: int, planted: str, at: float) -> str:
    rows = [f"[{i:06d}] PASSED tests/test_module_{i % 97}.py::test_case_{i} in 0.0{i % 9}s" for i in range(lines)]
    rows[int(lines * at)] = planted
    return "\n".join(rows)


# ------------------------------------------------------------ valid requests


@pytest.mark.parametrize("style", STYLES)
def test_random_agent_runs_make_only_valid_requests_within_budget(style: str) -> None:
    """Random runs (parallel calls, errors, outputs of thousands of lines), small budgets that force
    compaction: every request, in every style, is valid and within the budget (1,000 runs a style:
    bench/bench_session_agents.py)."""
    compactions = 0
    for seed in range(40):
        rng = random.Random(seed)
        run = random_trajectory(rng, style, rng.randint(3, 30))
        points = set(call_points(run, style))
        session = Session(rng.choice([1_200, 2_000, 8_000]), instructions=INSTRUCTIONS, chat=style)
        for i, message in enumerate(run):
            session.add(message)
            if i not in points:
                continue
            result = session.prompt()
            assert result.report.session is not None
            assert result.report.session.total_tokens <= session.limit
            for out in STYLES:
                assert validate_messages(result.messages(out), out) == [], (seed, i, out)
        compactions += session.compactions
    assert compactions >= 15  # the budgets did force compaction


def test_a_chat_is_append_only_between_compactions() -> None:
    """Each request starts with the previous one less its last message (the question with its evidence),
    on every call but those that condense; those are rare (hysteresis)."""
    session = Session(6_000, instructions=INSTRUCTIONS)
    previous: list[dict[str, Any]] | None = None
    breaks = 0
    for turn in range(60):
        result = session.prompt(f"Question {turn}: what does step {turn} of the migration change?",
                                evidence=[f"Step {turn} renames table_{turn} and adds an index on col_{turn}."])
        messages = result.messages("openai")
        assert result.report.session is not None
        assert result.report.session.total_tokens <= 6_000
        if previous is not None:
            if messages[: len(previous) - 1] != previous[:-1]:
                breaks += 1
                assert result.report.session.compacted
        previous = messages
        session.add(_assistant(f"Step {turn} changes the schema of table_{turn}. " + "It is safe to run. " * 20))
    assert session.compactions == breaks
    assert 2 <= breaks <= 12


def test_the_report_predicts_the_cache_share() -> None:
    session = Session("gpt-4o", instructions=INSTRUCTIONS)
    for turn in range(8):
        result = session.prompt(f"Turn {turn}: and then?")
        session.add(_assistant("A long answer about the build. " * 120))
    report = result.report.session
    assert report is not None and report.cache_rule == "prefix"
    assert report.predicted_cached_tokens >= 1_024 and report.cached_share() > 0.8
    assert report.predicted_input_cost_usd is not None


# ------------------------------------------------------------------ tool output


def test_a_long_tool_output_keeps_the_line_the_task_names_and_its_handle_gives_it_all() -> None:
    planted = "FAILED tests/test_checkout.py::test_refund_rounding - AssertionError: assert 10.01 == 10.0"
    log = _ci_log(60_000, planted, 0.47)
    session = Session(8_000, instructions=INSTRUCTIONS)
    session.add(_user("Why does test_refund_rounding fail in CI?"))
    session.add(_call("call_1", "read_ci_log", job="unit"))
    session.add(_result("call_1", log))
    result = session.prompt()
    tool_message = [m for m in result.messages("openai") if m["role"] == "tool"][0]
    assert planted in tool_message["content"]
    handle = session.turns[-1].handle
    assert handle and f"handle {handle}" in tool_message["content"]
    assert session.tool_output(handle) == log
    assert result.report.session is not None and result.report.session.total_tokens <= 8_000


def test_condensed_tool_results_become_stubs_with_their_handle() -> None:
    session = Session(3_000, instructions=INSTRUCTIONS)
    session.add(_user("Find the failing test."))
    session.add(_call("call_1", "read_ci_log", job="unit"))
    session.add(_result("call_1", _ci_log(5_000, "ERROR tests/test_a.py::test_x - KeyError: 'sku'", 0.5)))
    session.prompt()
    session.add(_assistant("test_x fails with KeyError: 'sku'."))
    for turn in range(30):
        session.prompt(f"Follow-up {turn}: anything else in the module?")
        session.add(_assistant("Nothing else stands out in that module. " * 15))
    assert session.compacted and any(t.handle == "out-3" for t in session.compacted)
    summaries = "\n".join(session.summaries)
    assert "read_ci_log" in summaries and "handle out-3" in summaries
    assert "KeyError" in session.tool_output("out-3")


# ----------------------------------------------------------------- persistence


def _worked_session() -> Session:
    session = Session(2_500, instructions=INSTRUCTIONS)
    for turn in range(25):
        session.prompt(f"My order {1000 + turn} was late by {turn} days; what now?")
        session.add(_call(f"call_{turn}", "lookup_order", order=1000 + turn))
        session.add(_result(f"call_{turn}", f"order {1000 + turn}: shipped\n" + "tracking event\n" * 300))
        session.add(_assistant(f"Order {1000 + turn} is on its way. " * 6))
    return session


def test_a_saved_session_resumes_to_the_same_next_request(tmp_path: Path) -> None:
    session = _worked_session()
    assert session.compactions >= 2
    path = tmp_path / "session.json"
    session.to_json(path)
    resumed = Session.from_json(path)
    expected = session.prompt("And order 1003?")
    got = resumed.prompt("And order 1003?")
    for style in STYLES[:2]:
        assert got.messages(style) == expected.messages(style)
    assert got.report.session is not None and expected.report.session is not None
    assert got.report.session.predicted_cached_tokens == expected.report.session.predicted_cached_tokens
    assert resumed.tool_output("out-3") == session.tool_output("out-3")


def test_a_session_resumes_in_another_process(tmp_path: Path) -> None:
    session = _worked_session()
    path = tmp_path / "session.json"
    session.to_json(path)
    code = ("import json, sys; from pathlib import Path; from contextkit.session import Session; "
            "s = Session.from_json(Path(sys.argv[1])); print(json.dumps(s.prompt('And order 1003?').messages()))")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == session.prompt("And order 1003?").messages()


@pytest.mark.parametrize("saved", [
    "[]", '{"format": "other"}', '{"format": "contextkit-session", "version": 99}',
    '{"format": "contextkit-session", "version": 1, "options": {}}',
    '{"format": "contextkit-session", "version": 1, "options": {"budget": 2000}, "turns": [{"rol": "user"}]}',
    "not json"])
def test_a_damaged_save_is_a_clear_error(saved: str) -> None:
    with pytest.raises(InvalidArgumentError):
        Session.from_json(saved)


# ---------------------------------------------------------- refused, not recorded


@pytest.mark.parametrize("messages, says", [
    ([_result("call_9", "ok")], "answers no open call"),
    ([_call("call_1", "ls"), _user("hello?")], "have no result yet"),
    ([_call("call_1", "ls"), _result("call_1", "a"), _call("call_1", "ls")], "used before"),
    ([{"role": "narrator", "content": "x"}], "role"),
    ([{"content": "x"}], "needs a role"),
    ([42], "not int"),
])
def test_what_a_provider_would_refuse_is_refused_by_name(messages: list[Any], says: str) -> None:
    session = Session(4_000)
    with pytest.raises(InvalidArgumentError, match=says):
        for m in messages:
            session.add(m)


def test_a_refused_message_records_nothing() -> None:
    session = Session(4_000)
    session.add(_call("call_1", "ls"))
    anthropic_reply = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "a.py"},
        {"type": "tool_result", "tool_use_id": "call_2", "content": "b.py"}]}
    with pytest.raises(InvalidArgumentError, match="call_2"):
        session.add(anthropic_reply)
    assert len(session.turns) == 1 and session._open_calls == {"call_1": "ls"}
    with pytest.raises(InvalidArgumentError, match="no result yet"):
        session.prompt("so?")
    with pytest.raises(InvalidArgumentError, match="no result yet"):
        session.prompt()


def test_messages_from_one_provider_can_go_to_another() -> None:
    session = Session(4_000, instructions=INSTRUCTIONS, chat="anthropic")
    session.add(_user("List the files."))
    session.add({"role": "assistant", "content": [{"type": "text", "text": "Listing."},
                                                   {"type": "tool_use", "id": "toolu_1", "name": "ls",
                                                    "input": {"path": "."}}]})
    session.add({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                              "content": "a.py\nb.py", "is_error": False}]})
    result = session.prompt()
    openai = result.messages("openai")
    assert openai[-2]["tool_calls"][0]["function"] == {"name": "ls", "arguments": '{"path": "."}'}
    assert openai[-1] == {"role": "tool", "tool_call_id": "toolu_1", "content": "a.py\nb.py"}
    assert validate_messages(result.messages("anthropic"), "anthropic") == []


# --------------------------------------------------- the ContextAssembler path


def _history(turns: int) -> list[dict[str, str]]:
    history = []
    for turn in range(turns):
        history += [_user(f"Question {turn} about the release plan?"),
                    _assistant(f"Answer {turn}: the release plan moves step {turn}. " + "Details follow. " * 90)]
    return history


def test_assemble_with_a_growing_history_is_append_only_between_compactions() -> None:
    """How most users call it: the whole history each turn. The requests keep the cache's condition (on
    the old code the window of recent turns slid every call: every request after the first overflow
    broke the prefix)."""
    assembler = ContextAssembler(5_000, chat="openai")
    tok = get_tokenizer("cl100k_base")
    previous = None
    breaks = overflowing = 0
    for turn in range(1, 40):
        result = assembler.assemble(f"Question {turn} about the release plan?", instructions=INSTRUCTIONS,
                                    history=_history(turn), evidence=[f"Release note {turn}."])
        messages = result.messages("openai")
        assert result.report.chat_tokens is not None and result.report.chat_tokens <= 5_000
        overflowing += sum(tok.count(m["content"]) for m in _history(turn)) > 5_000
        if previous is not None and messages[: len(previous) - 1] != previous[:-1]:
            breaks += 1
        previous = messages
    assert overflowing >= 15 and breaks <= 5  # on 9432d56: 24 breaks in 39 calls


def test_assemble_from_a_fresh_assembler_gives_the_request_a_followed_one_gives() -> None:
    """A service that builds a ContextAssembler per request (or restarts) replays the history to the
    same layout: the provider's cache still hits."""
    kept = ContextAssembler(5_000, chat="openai")
    for turn in range(1, 30):
        followed = kept.assemble(f"Question {turn} about the release plan?", instructions=INSTRUCTIONS,
                                 history=_history(turn))
    fresh = ContextAssembler(5_000, chat="openai").assemble(
        "Question 29 about the release plan?", instructions=INSTRUCTIONS, history=_history(29))
    assert fresh.messages("openai") == followed.messages("openai")


def test_summarize_history_false_drops_old_turns_without_a_summary_or_recall() -> None:
    """``summarize_history=False`` (drop what does not fit) holds in the stable layout too: no condensed
    turns and no recalled excerpts reach the request, which is still append-only between drops."""
    assembler = ContextAssembler(5_000, chat="openai", summarize_history=False)
    for turn in range(1, 40):
        result = assembler.assemble(f"Question {turn} about the release plan?", instructions=INSTRUCTIONS,
                                    history=_history(turn))
        text = "\n".join(m["content"] for m in result.messages("openai"))
        assert "<earlier_turns>" not in text and "<recalled_turns>" not in text
        assert result.report.chat_tokens is not None and result.report.chat_tokens <= 5_000
    assert result.report.session is not None and result.report.session.compactions >= 1
    assert result.report.session.compacted_turns > 0
    kept = ContextAssembler(5_000, chat="openai").assemble(
        "Question 39 about the release plan?", instructions=INSTRUCTIONS, history=_history(39))
    assert "<earlier_turns>" in "\n".join(m["content"] for m in kept.messages("openai"))


def test_the_fit_layout_is_still_there() -> None:
    result = ContextAssembler(5_000, chat="openai", history_layout="fit").assemble(
        "Question 30?", instructions=INSTRUCTIONS, history=_history(30))
    assert result.report.session is None and any(s.role == "history" for s in result.report.sections)


# ------------------------------------------------------------------ redaction


def test_with_redaction_nothing_personal_reaches_a_request_or_a_saved_session() -> None:
    from contextkit.compressors.redact import PIIRedactor

    session = Session(4_000, instructions=INSTRUCTIONS, redactor=PIIRedactor())
    session.add(_user("My e-mail is ines.moreau@example.org and my card 4111 1111 1111 1111."))
    session.add(_call("call_1", "lookup_customer", email="ines.moreau@example.org"))
    session.add(_result("call_1", "customer ines.moreau@example.org: card 4111 1111 1111 1111 on file"))
    result = session.prompt("Send the receipt to ines.moreau@example.org please.")
    for style in STYLES[:2]:
        text = json.dumps(result.messages(style))
        assert "ines.moreau@example.org" not in text and "4111 1111 1111 1111" not in text
    assert "ines.moreau@example.org" not in session.to_json()


def test_the_assemblers_stable_layout_redacts_the_history() -> None:
    history = [_user("I am Ines, ines.moreau@example.org, card 4111 1111 1111 1111."), _assistant("Noted.")]
    result = ContextAssembler(4_000, chat="openai", redact=True).assemble("What is on file for me?",
                                                                          history=history)
    text = json.dumps(result.messages("openai"))
    assert "ines.moreau@example.org" not in text and "4111 1111 1111 1111" not in text


def test_a_free_text_role_keeps_the_fit_layout() -> None:
    """A history role is free text ("narrator", a name): no provider takes it as a role, so the assembler
    lays such a history out as marked-up text, as before (it refused it while following the conversation)."""
    history = [_user("hi"), {"role": "narrator", "content": "The user waves."}, _assistant("Hello!")]
    result = ContextAssembler(4_000, chat="openai").assemble("And now?", history=history)
    assert result.report.session is None and "narrator" in result.prompt

"""A recent user turn is not dropped while evidence fills the prompt (issue 31).

Found as a docs assistant over Python's docs is used: at 2,000 tokens the user's 24-token turn
"I'm on Python 3.11, writing a small command-line tool" was left out though history keeps 15% of the
budget, and the OpenAI messages then ran system, assistant, user. Here the same turn, three histories
(one long exchange, two, one with a one-word reply), three budgets, as a prompt and as OpenAI chat
messages, over a real index of sixteen PEPs: the turn is in every prompt (verbatim, or in the
summary that stands for it) and every message list is one the API takes, opening with the user.
On 59edf24 the one-word-reply history at 1,000 tokens lost the turn.
"""

from __future__ import annotations

import pytest

from contextkit.assembly.context_assembler import ContextAssembler
from contextkit.index import Index
from contextkit.ingestion import ingest
from contextkit.session import validate_messages

TURN = "I'm on Python 3.11, writing a small command-line tool."
REPLY = ("Sounds good. For a command-line tool the standard library has what you need: argparse parses the "
         "arguments and writes the --help text, logging reports what the tool does, pathlib handles the files "
         "it reads and writes, and subprocess runs other programs. Keep the entry point small: a main() "
         "function that parses the arguments and calls the functions that do the work, so that tests can call "
         "them directly. ") * 3
HISTORIES = {
    "one exchange": [{"role": "user", "content": TURN}, {"role": "assistant", "content": REPLY}],
    "two exchanges": [{"role": "user", "content": TURN}, {"role": "assistant", "content": REPLY},
                      {"role": "user", "content": "Should the module list what it exports?"},
                      {"role": "assistant", "content": REPLY}],
    "one-word reply": [{"role": "user", "content": TURN}, {"role": "assistant", "content": "Noted."}],
}
QUESTION = "How should a module declare which names it exports, and may tabs and spaces be mixed?"


@pytest.fixture(scope="module")
def pep_index(tmp_path_factory, peps, embedder):
    root = tmp_path_factory.mktemp("peps") / "ix"
    ingest(peps[:16], root, embedder=embedder)
    with Index.open(root, read_only=True) as index:
        yield index


@pytest.mark.parametrize("history", list(HISTORIES), ids=list(HISTORIES))
@pytest.mark.parametrize("chat", [None, "openai"])
def test_the_users_own_turn_stays_while_evidence_fills_the_prompt(pep_index, embedder, history, chat):
    from contextkit.retrievers import HybridRetriever

    retriever = HybridRetriever(pep_index, embedder)
    for budget in (1_000, 2_000, 4_000):
        assembler = ContextAssembler(budget, retriever=retriever, **({"chat": chat} if chat else {}))
        result = assembler.assemble(QUESTION, instructions="Answer from the docs; cite the ids.",
                                    history=HISTORIES[history])
        assert "Python 3.11, writing a small command-line tool" in result.prompt, budget
        assert any(s.name == "evidence" and s.tokens > 0 for s in result.report.sections), budget
        if chat:
            messages = result.messages("openai")
            assert validate_messages(messages, "openai") == [], budget
            assert [m["role"] for m in messages][:2] == ["system", "user"], budget
